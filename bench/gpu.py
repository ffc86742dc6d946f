"""GPU benchmark: full-size SD1.5 + 3 ControlNets, torch fp16 vs ORT CUDA EP vs ORT TensorRT EP.

For a CUDA machine (``python -m painted_skin.bench.gpu``); imports and
``--help`` anywhere. Builds SD1.5 + 3 ControlNet-v1.1-shaped models from
configs (random weights, nothing downloaded), then times, at 512², 4 LCM steps,
batch 1, one frame = text encoder + 4 × (UNet + 3 ControlNets) + VAE decode:

- ``torch``: eager fp16 on CUDA;
- ``ort-cuda``: the fp16 ONNX export on the CUDA EP (IO binding, CUDA graph);
- ``ort-trt``: the same export on the TensorRT EP (fp16, engine + timing cache
  in the export folder, so a second run skips the build).

Prints a table (ms/frame, speedup over torch, the providers each graph really
ran on). An engine whose provider onnxruntime does not offer is skipped with a
line saying so; so is the rest once ``--budget`` seconds are spent (default
540: under 10 minutes with the export and the TensorRT build). Exit status 1
only on a real error (an exception while timing an offered engine).
Target (issue 5): <= 50 ms/frame with TensorRT on an H200.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from typing import Any

ENGINES = ("torch", "ort-cuda", "ort-trt")
PROVIDER = {"ort-cuda": "CUDAExecutionProvider", "ort-trt": "TensorrtExecutionProvider"}


def _time(pipe: Any, shot: list[dict], size: int, steps: int, frames: int) -> float:
    import torch

    opts = {"scheduler": "lcm", "steps": steps}
    for f in range(2):  # warm-up: TensorRT build, CUDA graph capture, cuDNN search
        pipe.run(shot[0], prompt="a painted knight", seed=f, width=size, height=size,
                 options=opts)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for f in range(frames):
        pipe.run(shot[f % len(shot)], prompt="a painted knight", seed=f, width=size,
                 height=size, options=opts)
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1000.0 / frames


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=512)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--frames", type=int, default=10, help="timed frames per engine")
    p.add_argument("--engines", default=",".join(ENGINES), help="comma list of " +
                   ", ".join(ENGINES))
    p.add_argument("--cache", default="/tmp/painted_skin_onnx", help="export + engine cache")
    p.add_argument("--dynamo", action="store_true",
                   help="export with dynamo (slower to export; default TorchScript)")
    p.add_argument("--budget", type=float, default=540.0, help="seconds before skipping")
    args = p.parse_args(argv)

    import torch

    if not torch.cuda.is_available():
        print("no CUDA device: nothing to time (this script is for a GPU machine)")
        return 0
    import onnxruntime as ort

    from ..backend.diffusion import temporal as T
    from ..backend.diffusion.controlnet_pipeline import RestylePipeline
    from ..backend.diffusion.onnx_engine import OnnxRestylePipeline
    from .diffusion import sd15_components

    t_start = time.perf_counter()
    have = ort.get_available_providers()
    print(f"GPU: {torch.cuda.get_device_name(0)}; torch {torch.__version__}, "
          f"onnxruntime {ort.__version__}, providers offered: {have}")
    comps = sd15_components((320, 640, 1280, 1280), (128, 256, 512, 512), text_layers=12)
    for m in (comps.unet, comps.vae, comps.text_encoder, *comps.controlnets.values()):
        m.to("cuda", torch.float16)
    shot = T.synthetic_shot(4, args.size, args.size, speed=args.size / 64)
    print(f"built SD1.5 + 3 ControlNets (fp16, random) in {time.perf_counter() - t_start:.0f} s")
    rows: list[tuple[str, float, str]] = []
    failed = False
    for name in [e.strip() for e in args.engines.split(",") if e.strip()]:
        if name not in ENGINES:
            print(f"unknown engine {name!r} (known: {', '.join(ENGINES)})")
            return 2
        if name in PROVIDER and PROVIDER[name] not in have:
            print(f"skip {name}: onnxruntime offers no {PROVIDER[name]} "
                  f"(install onnxruntime-gpu{' with TensorRT libs' if name == 'ort-trt' else ''})")
            continue
        if time.perf_counter() - t_start > args.budget:
            print(f"skip {name}: the {args.budget:.0f} s budget is spent")
            continue
        t0 = time.perf_counter()
        try:
            if name == "torch":
                pipe: Any = RestylePipeline(comps, "cuda", torch.float16)
                used = "torch cuda fp16"
            else:
                pipe = OnnxRestylePipeline(
                    comps, "cuda", torch.float16, cache_dir=args.cache, precision="fp16",
                    providers="cuda" if name == "ort-cuda" else "tensorrt",
                    dynamo=True if args.dynamo else False)
                pipe.onnx.prepare(args.size, args.size)
                print(f"{name}: export/cache + sessions {time.perf_counter() - t0:.0f} s "
                      f"({pipe.onnx.engine.folder})")
                used = "; ".join(f"{g}: {v[0].replace('ExecutionProvider', '')}"
                                 for g, v in pipe.providers.items())
            ms = _time(pipe, shot, args.size, args.steps, args.frames)
            rows.append((name, ms, used))
            print(f"{name}: {ms:.1f} ms/frame (setup + warm-up + timing "
                  f"{time.perf_counter() - t0:.0f} s)")
            del pipe
            torch.cuda.empty_cache()
        except Exception:
            failed = True
            print(f"{name}: ERROR")
            traceback.print_exc()
    base = next((ms for n, ms, _ in rows if n == "torch"), None)
    print(f"\nSD1.5 + 3 ControlNets, {args.size}x{args.size}, LCM {args.steps} steps, batch 1")
    print(f"{'engine':10} {'ms/frame':>10} {'speedup':>8}  providers")
    for n, ms, used in rows:
        sp = f"{base / ms:.2f}x" if base else "-"
        print(f"{n:10} {ms:10.1f} {sp:>8}  {used}")
    print(f"total {time.perf_counter() - t_start:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
