"""GPU benchmark: full-size SD1.5 + 3 ControlNets on every engine this machine can run.

For a CUDA machine (``python -m painted_skin.bench.gpu``); ``--smoke`` runs the
same code path on this CPU in seconds (tiny widths, fp32, 64², CPU EP), and
``--help`` works anywhere. Builds SD1.5 + 3 ControlNet-v1.1-shaped models from
configs (random weights, nothing downloaded), then times, at 512², 4 LCM steps,
batch 1, one frame = text encoder + 4 × (3 ControlNets + UNet) + VAE decode:

- ``torch``: diffusers' eager pipeline, fp16 on CUDA (cuDNN benchmark on): the
  baseline of the speedup column;
- ``torch-cudagraph``: the same eager kernels, each denoising step (3
  ControlNets + UNet, the ControlNet scales as tensors) captured once as one
  CUDA graph and replayed: no kernel-launch overhead, no compiler;
- ``torch-cudagraph-cl``: the same with the UNet, ControlNets and VAE weights in
  channels_last (NHWC: cuDNN's native fp16 layout on tensor cores);
- ``torch-compile``: ``torch.compile`` (inductor, ``--compile-mode``) of the
  UNet and the ControlNets, the step then captured as a CUDA graph as above
  (unless the mode makes its own graphs, or ``torch-cudagraph`` failed here);
- ``ort-cuda``: the fp16 ONNX export on onnxruntime's CUDA EP (IO binding,
  CUDA graph);
- ``ort-trt``: the same export on the TensorRT EP (fp16, engine + timing cache
  in the export folder, so a second run skips the build);
- ``ort-cpu`` (not in the GPU default; ``--smoke``'s): the fp32 export on the
  CPU EP;
- ``onnx-export`` (on request): only the fp16 export for TensorRT (plain
  attention), timed, with its size: that the full-size export works where no
  GPU provider is offered.

Each engine's first timed frame is compared with the ``torch`` engine's (same
seed, uint8 image max/mean |Δ|) and its final latents checked for NaN/inf, so a
fast engine that computes something else shows. Per engine: ms/frame (median),
speedup over ``torch``, notes (providers, one step's ms, peak memory). The
``torch`` engine also prints where a frame's time goes (text encoder, one step,
VAE decode). An engine that cannot run here (onnxruntime offers no such
provider: the lent H200's image has the CPU build of onnxruntime) is skipped
with a line saying why; so is the rest once ``--budget`` seconds are spent, or
on SIGINT/SIGTERM (the table of what ran is still printed). Last line: one-line
summary. ``--json PATH`` also writes the rows and versions. Exit status 1 only
on a real error (an exception while timing an engine that could run).
Target: <= 50 ms/frame with TensorRT on an H200.
``bench/gpu_device.sh`` prepares and runs this on the lent H200. The step engines
are in :mod:`.gpu_steps`, the timing in :mod:`.gpu_timing`.
"""

from __future__ import annotations

import argparse
import json
import platform
import signal
import sys
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

from .gpu_steps import StepRunner, attach_step
from .gpu_timing import PROMPT as PROMPT
from .gpu_timing import image_diff, providers_note, step_parts, time_frames

ENGINES = ("torch", "torch-cudagraph", "torch-cudagraph-cl", "torch-compile", "ort-cuda",
           "ort-trt", "ort-cpu", "onnx-export")
GPU_ENGINES = ENGINES[:6]
SMOKE_ENGINES = ("torch", "torch-cudagraph", "torch-cudagraph-cl", "ort-cpu", "ort-cuda",
                 "ort-trt")
PROVIDER = {"ort-cuda": "CUDAExecutionProvider", "ort-trt": "TensorrtExecutionProvider",
            "ort-cpu": "CPUExecutionProvider"}
SD15_WIDTHS = dict(block_out_channels=(320, 640, 1280, 1280), vae_channels=(128, 256, 512, 512),
                   text_layers=12)
SMOKE_WIDTHS = dict(block_out_channels=(32, 32, 64, 64), vae_channels=(32, 32, 32, 32),
                    text_layers=1)
TARGET_MS = 50.0


@dataclass
class Row:
    """One engine's result (``ms`` None: skipped or failed, ``status`` says which)."""

    name: str
    status: str = "ok"  # "ok" | "skipped" | "error"
    ms: float | None = None
    notes: str = ""
    image: Any = None  # first timed frame (uint8), compared with torch's
    extra: dict[str, Any] = field(default_factory=dict)


# ------------------------------------------------------------------ environment


def versions() -> dict[str, str]:
    """Python, the packages on the path, the GPU (when torch sees one)."""
    from importlib import metadata

    v = {"python": platform.python_version()}
    for pkg in ("torch", "diffusers", "transformers", "onnxruntime", "onnxruntime-gpu", "onnx",
                "triton", "numpy"):
        try:
            v[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            pass
    try:
        import torch

        v["cuda"] = str(torch.version.cuda)
        if torch.cuda.is_available():
            p = torch.cuda.get_device_properties(0)
            v["gpu"] = torch.cuda.get_device_name(0)
            v["gpu_detail"] = (f"sm_{p.major}{p.minor}, {p.multi_processor_count} SMs, "
                               f"{p.total_memory / 2**30:.0f} GiB")
            v["cudnn"] = str(torch.backends.cudnn.version())
    except ImportError:  # pragma: no cover - torch is a dependency of the bench
        pass
    from ..backend.diffusion.onnx.tensorrt import tensorrt_version

    v["tensorrt"] = tensorrt_version() or "not loadable"
    return v


class _Stop(Exception):
    """SIGTERM: stop timing, print what ran."""


def _on_term(signum: int, frame: Any) -> None:
    raise _Stop(f"signal {signum}")


# ------------------------------------------------------------------ main


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--smoke", action="store_true",
                   help="CPU, fp32, tiny widths, 64², 2 steps, 1 frame: the same code path in "
                        "seconds (engines " + ",".join(SMOKE_ENGINES) + ")")
    p.add_argument("--size", type=int, default=None, help="frame side (default 512; smoke 64)")
    p.add_argument("--steps", type=int, default=None, help="LCM steps (default 4; smoke 2)")
    p.add_argument("--frames", type=int, default=None,
                   help="timed frames per engine (default 10; smoke 1)")
    p.add_argument("--warmup", type=int, default=None,
                   help="untimed frames per engine first (default 2; smoke 1)")
    p.add_argument("--engines", default=None, help="comma list of " + ", ".join(ENGINES) +
                   " (default " + ",".join(GPU_ENGINES) + ")")
    p.add_argument("--compile-mode", default="default",
                   help="torch.compile mode of torch-compile: default, max-autotune-no-cudagraphs,"
                        " reduce-overhead, max-autotune (the last two: inductor's own CUDA "
                        "graphs instead of the step capture)")
    p.add_argument("--model", choices=("sd15", "tiny"), default=None,
                   help="sd15: the real SD1.5 + ControlNet widths (default); tiny: the smoke "
                        "run's (default with --smoke)")
    p.add_argument("--cache", default="/tmp/painted_skin_onnx", help="export + engine cache")
    p.add_argument("--dynamo", action="store_true",
                   help="export with dynamo (slower to export; default TorchScript)")
    p.add_argument("--budget", type=float, default=540.0,
                   help="seconds after which the engines not yet started are skipped")
    p.add_argument("--json", default=None, help="also write the results here")
    return p


@dataclass
class _Run:
    """What every engine of one run shares, and what one engine tells the next."""

    args: Any
    comps: Any
    dev: str
    dtype: Any
    size: int
    steps: int
    frames: int
    warmup: int
    shot: list[dict]
    have: list[str]
    t_start: float
    cudagraph_failed: bool = False
    stopped: str = ""


def _providers_offered(ort: Any) -> list[str]:
    """onnxruntime's providers, less a TensorRT EP whose libraries do not load."""
    from ..backend.diffusion.onnx.tensorrt import tensorrt_version

    have = ort.get_available_providers()
    if PROVIDER["ort-trt"] in have and tensorrt_version() is None:
        # listed because compiled in, but a session would silently run on the CUDA EP
        have = [p for p in have if p != PROVIDER["ort-trt"]]
        print("onnxruntime lists TensorRT but libnvinfer does not load: ort-trt is skipped")
    return have


def _skip_reason(name: str, run: _Run, ort: Any) -> str | None:
    """Why engine ``name`` is not run (printed where the run skips it), or None."""
    if run.stopped:
        return run.stopped
    if name in PROVIDER and PROVIDER[name] not in run.have:
        why = (f"onnxruntime {ort.__version__} offers no {PROVIDER[name]} (it needs "
               f"onnxruntime-gpu{' with the TensorRT libraries' if name == 'ort-trt' else ''})")
        print(f"skip {name}: {why}")
        return why
    if time.perf_counter() - run.t_start > run.args.budget:
        why = f"the {run.args.budget:.0f} s budget is spent"
        print(f"skip {name}: {why}")
        return why
    return None


def _timed_row(name: str, run: _Run, t0: float) -> Row:
    """Engine ``name`` set up, warmed up and timed: its row with its notes."""
    import torch

    comps, dev, dtype, size, steps = run.comps, run.dev, run.dtype, run.size, run.steps
    pipe, runner, notes = _engine(name, comps, dev, dtype, run.args, size, run.cudagraph_failed)
    ms, image, finite = time_frames(pipe, run.shot, size, steps, run.frames, run.warmup, dev)
    row = Row(name, ms=ms, image=image)
    if runner is not None and runner.capture_s:
        notes.append(f"first step {runner.capture_s:.0f} s (warm-up"
                     + (", compile" if name == "torch-compile" else "") + ", capture)")
    if name == "torch" or runner is not None:
        nets = list(comps.controlnets.values())
        parts = step_parts(comps, runner or StepRunner(comps.unet, nets), dev, dtype, size,
                       whole=name == "torch")
        row.extra["parts_ms"] = parts
        notes.append(f"step {parts['step']:.1f} ms")
        if name == "torch":
            known = steps * parts["step"] + parts["text"] + parts["vae"]
            print(f"torch: one frame's parts: text encoder {parts['text']:.1f} ms, "
                  f"{steps} x step (3 ControlNets + UNet) {parts['step']:.1f} ms, "
                  f"VAE decode {parts['vae']:.1f} ms = {known:.1f} of {ms:.1f} ms "
                  f"(the rest: scheduler, control images, pre/post-processing)")
    if not finite:
        notes.append("NaN/inf in the latents!")
    if dev == "cuda":
        notes.append(f"peak {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB")
    row.notes = ", ".join(notes)
    print(f"{name}: {ms:.1f} ms/frame (setup + warm-up + timing "
          f"{time.perf_counter() - t0:.0f} s)")
    return row


def _run_engine(name: str, run: _Run) -> Row:
    """One engine's row: timed, or skipped on an interrupt (``run.stopped`` then says
    why the rest is skipped), or an error (reported; the run goes on)."""
    import torch

    t0 = time.perf_counter()
    if run.dev == "cuda":
        torch.cuda.reset_peak_memory_stats()
    try:
        if name == "onnx-export":
            return _export_only(run.comps, run.dev, run.args, run.size)
        return _timed_row(name, run, t0)
    except (KeyboardInterrupt, _Stop) as e:
        why = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
        run.stopped = f"interrupted ({why}) during {name}"
        print(f"{name}: {run.stopped}")
        return Row(name, "skipped", notes=f"skipped: {run.stopped}")
    except Exception as e:  # noqa: BLE001 - report, go on with the next engine
        print(f"{name}: ERROR")
        traceback.print_exc()
        if name == "torch-cudagraph":
            run.cudagraph_failed = True
        return Row(name, "error", notes=f"ERROR {type(e).__name__}: {str(e)[:160]}")
    finally:
        if name == "torch-compile":
            torch._dynamo.reset()
        if name == "torch-cudagraph-cl":
            _memory_format(run.comps, torch.contiguous_format)
        if run.dev == "cuda":
            torch.cuda.empty_cache()


def _engine_names(args: Any) -> list[str]:
    default = SMOKE_ENGINES if args.smoke else GPU_ENGINES
    return [e.strip() for e in (args.engines or ",".join(default)).split(",") if e.strip()]


def _print_setup(vers: dict[str, str], have: list[str]) -> None:
    print(f"GPU: {vers.get('gpu', 'none (CPU smoke run)')} {vers.get('gpu_detail', '')}".rstrip())
    print("versions: " + ", ".join(f"{k} {v}" for k, v in vers.items()
                                   if k not in ("gpu", "gpu_detail")))
    print(f"onnxruntime providers offered: {', '.join(have)}")


def _write_json(path: str, run: _Run, vers: dict[str, str], summary: str,
                rows: list[Row]) -> None:
    with open(path, "w") as fh:
        json.dump({"versions": vers, "providers": run.have, "size": run.size,
                   "steps": run.steps, "frames": run.frames, "smoke": run.args.smoke,
                   "summary": summary,
                   "rows": [{k: v for k, v in r.__dict__.items() if k != "image"}
                            for r in rows]}, fh, indent=1)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    smoke = args.smoke
    size = args.size or (64 if smoke else 512)
    steps = args.steps or (2 if smoke else 4)
    frames = args.frames or (1 if smoke else 10)
    warmup = args.warmup if args.warmup is not None else (1 if smoke else 2)
    names = _engine_names(args)
    unknown = [n for n in names if n not in ENGINES]
    if unknown:
        print(f"unknown engine(s) {', '.join(unknown)} (known: {', '.join(ENGINES)})")
        return 2

    import torch
    from diffusers.utils import logging as diffusers_logging

    diffusers_logging.set_verbosity_error()  # "modules ... kept in float32" on .to(fp16)
    vers = versions()
    if not smoke and not torch.cuda.is_available():
        print("no CUDA device: nothing to time (this script is for a GPU machine; --smoke runs "
              "the same code path on the CPU)")
        return 0
    import onnxruntime as ort

    # all of the chain first: an import error shows before the model is built
    from ..backend.diffusion import controlnet_pipeline  # noqa: F401
    from ..backend.diffusion import temporal as T
    from ..backend.diffusion.onnx import pipeline  # noqa: F401
    from ..backend.diffusion.onnx.tensorrt import tensorrt_version  # noqa: F401
    from .diffusion import sd15_components

    t_start = time.perf_counter()
    old_term = None
    try:
        old_term = signal.signal(signal.SIGTERM, _on_term)
    except ValueError:  # not the main thread
        pass
    dev = "cpu" if smoke else "cuda"
    dtype = torch.float32 if smoke else torch.float16
    have = _providers_offered(ort)
    _print_setup(vers, have)
    if dev == "cuda":
        torch.backends.cudnn.benchmark = True
    model = args.model or ("tiny" if smoke else "sd15")
    widths = SMOKE_WIDTHS if model == "tiny" else SD15_WIDTHS
    comps = _build(sd15_components, widths, dev, dtype)
    n_unet = sum(q.numel() for q in comps.unet.parameters()) / 1e6
    n_cn = sum(q.numel() for c in comps.controlnets.values() for q in c.parameters()) / 1e6
    shot = T.synthetic_shot(4, size, size, speed=size / 64)
    print(f"built {'SD1.5' if model == 'sd15' else 'tiny SD1.5-shaped'} UNet {n_unet:.0f}M + "
          f"{len(comps.controlnets)} ControlNets {n_cn:.0f}M params ({str(dtype)[6:]}, random, "
          f"on {dev}) in {time.perf_counter() - t_start:.0f} s; {size}x{size}, LCM {steps} "
          f"steps, batch 1, {warmup} warm-up + {frames} timed frames per engine")
    run = _Run(args, comps, dev, dtype, size, steps, frames, warmup, shot, have, t_start)
    rows: list[Row] = []
    for name in names:
        why = _skip_reason(name, run, ort)
        rows.append(Row(name, "skipped", notes=f"skipped: {why}") if why is not None
                    else _run_engine(name, run))
    if old_term is not None:
        signal.signal(signal.SIGTERM, old_term)
    summary = _report(rows, vers, size, steps, model, time.perf_counter() - t_start)
    if args.json:
        _write_json(args.json, run, vers, summary, rows)
    return 1 if any(r.status == "error" for r in rows) else 0


def _engine(name: str, comps: Any, dev: str, dtype: Any, args: Any, size: int,
            cudagraph_failed: bool) -> tuple[Any, StepRunner | None, list[str]]:
    """(pipeline, its step runner or None, notes) of engine ``name``."""
    import torch

    from ..backend.diffusion.controlnet_pipeline import RestylePipeline
    from ..backend.diffusion.onnx.pipeline import OnnxRestylePipeline

    nets = list(comps.controlnets.values())
    if name == "torch":
        return RestylePipeline(comps, dev, dtype), None, [f"diffusers eager {dev} "
                                                          f"{str(dtype)[6:]}"]
    if name.startswith("torch-"):
        notes: list[str] = []
        unet, cnets, graph, own = comps.unet, nets, dev == "cuda", False
        if name == "torch-cudagraph-cl":
            _memory_format(comps, torch.channels_last)
            notes.append("channels_last weights")
        if name == "torch-compile":
            import torch._inductor.config as inductor_config

            inductor_config.conv_1x1_as_mm = True
            mode = None if args.compile_mode == "default" else args.compile_mode
            unet = torch.compile(comps.unet, mode=mode, dynamic=False)
            cnets = [torch.compile(n, mode=mode, dynamic=False) for n in nets]
            own = mode in ("reduce-overhead", "max-autotune")
            graph = graph and not own and not cudagraph_failed
            notes.append(f"inductor {args.compile_mode}" + (" (its own CUDA graphs)" if own
                                                            else ""))
        runner = StepRunner(unet, cnets, graph=graph, mark_step=own)
        pipe = attach_step(RestylePipeline(comps, dev, dtype), runner)
        if graph:
            notes.append("step = one CUDA graph")
        elif not own:
            notes.append("step eager" + (" (no CUDA: capture skipped)" if dev != "cuda" else
                                         " (torch-cudagraph failed)"))
        return pipe, runner, notes
    prec = "fp16" if dtype == torch.float16 else "fp32"
    t0 = time.perf_counter()
    pipe = OnnxRestylePipeline(
        comps, dev, dtype, cache_dir=args.cache, precision=prec,
        providers={"ort-cuda": "cuda", "ort-trt": "tensorrt"}.get(name, "cpu"),
        dynamo=True if args.dynamo else False)
    pipe.onnx.prepare(size, size)
    print(f"{name}: {prec} export/cache + sessions {time.perf_counter() - t0:.0f} s "
          f"({pipe.onnx.engine.folder})")
    return pipe, None, [providers_note(pipe.providers)]


def _export_only(comps: Any, dev: str, args: Any, size: int) -> Row:
    """The ONNX export the TensorRT EP would take (fp16 on CUDA, fp32 elsewhere;
    plain attention), timed; no session is opened."""
    from pathlib import Path

    from ..backend.diffusion.onnx.export import ExportSpec, export_components

    t0 = time.perf_counter()
    spec = ExportSpec(size, size, 1, "fp16" if dev == "cuda" else "fp32", attention="onnx")
    folder = export_components(comps, spec, args.cache, dynamo=True if args.dynamo else False)
    s = time.perf_counter() - t0
    mb = sum(f.stat().st_size for f in Path(folder).rglob("*") if f.is_file()) / 2**20
    manifest = json.loads((Path(folder) / "manifest.json").read_text())
    print(f"onnx-export: {spec.precision} export (or cache hit) {s:.0f} s, {mb:.0f} MiB in "
          f"{folder}")
    return Row("onnx-export", notes=f"export only ({spec.precision}, attention onnx): "
               f"{manifest.get('export_s', s):.0f} s, {mb:.0f} MiB, "
               f"exporter {manifest['exporter'].get('unet_controlnets')}")


def _memory_format(comps: Any, fmt: Any) -> None:
    """The 4-d weights of the UNet, ControlNets and VAE in ``fmt`` (in place)."""
    for m in (comps.unet, comps.vae, *comps.controlnets.values()):
        m.to(memory_format=fmt)


def _build(make: Any, widths: dict[str, Any], dev: str, dtype: Any) -> Any:
    """The components, built straight on the GPU there (random init on the CPU of
    ~2.2 G parameters takes a while), on the CPU if that fails."""
    import torch

    if dev == "cuda":
        try:
            with torch.device("cuda"):
                comps = make(**widths)
        except Exception as e:  # noqa: BLE001 - fall back to the CPU build
            print(f"building on the GPU failed ({type(e).__name__}: {e}); building on the CPU")
            comps = make(**widths)
    else:
        comps = make(**widths)
    for m in (comps.unet, comps.vae, comps.text_encoder, *comps.controlnets.values()):
        m.to(dev, dtype)
    return comps


def _report(rows: list[Row], vers: dict[str, str], size: int, steps: int, model: str,
            total_s: float) -> str:
    """Print the table and the summary line; returns the summary."""
    base = next((r for r in rows if r.name == "torch" and r.ms), None)
    for r in rows:
        if r.ms is not None and base is not None and r is not base:
            d = image_diff(r.image, base.image)
            if d:
                r.notes = f"{r.notes}, {d}" if r.notes else d
    what = "tiny SD1.5-shaped" if model == "tiny" else "SD1.5"
    print(f"\n{what} + 3 ControlNets, {size}x{size}, LCM {steps} steps, batch 1, "
          f"{vers.get('gpu', 'CPU')}")
    print(f"{'engine':18} {'ms/frame':>9} {'speedup':>8}  providers / notes")
    for r in rows:
        ms = f"{r.ms:9.1f}" if r.ms is not None else f"{'-':>9}"
        sp = f"{base.ms / r.ms:.2f}x" if (base and r.ms) else "-"
        print(f"{r.name:18} {ms} {sp:>8}  {r.notes}")
    print(f"total {total_s:.0f} s")
    ok = [r for r in rows if r.ms is not None]
    best = min(ok, key=lambda r: r.ms) if ok else None
    trt = next((r for r in rows if r.name == "ort-trt"), None)
    parts = [f"gpu bench: {vers.get('gpu', 'CPU smoke')}"]
    parts.append(f"torch eager {base.ms:.1f} ms/frame" if base else "torch eager -")
    if best is not None:
        sp = f" ({base.ms / best.ms:.2f}x)" if base else ""
        parts.append(f"best {best.name} {best.ms:.1f} ms/frame{sp}")
    if trt is None or trt.ms is None:
        parts.append(f"ort-trt not measured ({trt.status if trt else 'not asked'})")
    else:
        parts.append(f"ort-trt {trt.ms:.1f} ms/frame: target <= {TARGET_MS:.0f} "
                     + ("met" if trt.ms <= TARGET_MS else "missed"))
    if best is not None and model == "sd15" and size == 512:
        parts.append(f"best <= {TARGET_MS:.0f} ms: {'yes' if best.ms <= TARGET_MS else 'no'}")
    errors = [r.name for r in rows if r.status == "error"]
    parts.append(f"errors: {', '.join(errors) if errors else 'none'}")
    summary = "; ".join(parts)
    print(summary)
    return summary


if __name__ == "__main__":
    sys.exit(main())
