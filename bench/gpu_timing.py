"""Timing for the GPU bench (:mod:`.gpu`): frames through a pipeline, one step and
a frame's parts, each bracketed by a CUDA synchronise so that the clock reads
the GPU's work, not the launch; and the notes that compare an engine with
``torch``'s.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from .gpu_steps import StepRunner

PROMPT = "a painted knight"


def sync(dev: str) -> None:
    """Wait for the GPU's queued work (CUDA launches return before it is done)."""
    if dev.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def time_frames(pipe: Any, shot: list[dict], size: int, steps: int, frames: int, warmup: int,
          dev: str) -> tuple[float, Any, bool]:
    """(median ms/frame, the first timed frame's image, its final latents all finite)."""
    import torch

    opts = {"scheduler": "lcm", "steps": steps}
    for f in range(warmup):  # TensorRT build, CUDA graph capture, compilation, cuDNN search
        pipe.run(shot[0], prompt=PROMPT, seed=f, width=size, height=size, options=opts)
    times, first, finite = [], None, True
    for f in range(frames):
        state: dict[str, Any] = {}
        sync(dev)
        t0 = time.perf_counter()
        res = pipe.run(shot[f % len(shot)], prompt=PROMPT, seed=f, width=size, height=size,
                       options=opts, state=state)
        sync(dev)
        times.append((time.perf_counter() - t0) * 1000.0)
        lat = state.get("latents")
        if f == 0:
            first = res.image
            finite = lat is None or bool(torch.isfinite(lat).all())
    return float(np.median(times)), first, finite


def bench_ms(fn: Any, dev: str, reps: int = 10) -> float:
    """Median ms of ``fn()`` (two untimed calls first)."""
    for _ in range(2):
        fn()
    ts = []
    for _ in range(reps):
        sync(dev)
        t0 = time.perf_counter()
        fn()
        sync(dev)
        ts.append((time.perf_counter() - t0) * 1000.0)
    return float(np.median(ts))


def step_inputs(comps: Any, dev: str, dtype: Any, size: int) -> tuple[list[Any], Any]:
    """Random inputs of one step (sample, t, hidden states, control images, scales)
    and the token ids of the prompt."""
    import torch

    tok = comps.tokenizer(PROMPT, padding="max_length", truncation=True,
                          max_length=comps.tokenizer.model_max_length,
                          return_tensors="pt").input_ids.to(dev)
    f = 2 ** (len(comps.vae.config.block_out_channels) - 1)
    g = torch.Generator().manual_seed(0)
    lat = torch.randn(1, comps.unet.config.in_channels, size // f, size // f,
                      generator=g).to(dev, dtype)
    ehs = comps.text_encoder(tok)[0]
    conds = [torch.rand(1, 3, size, size, generator=g).to(dev, dtype)
             for _ in comps.controlnets]
    return [lat, torch.tensor(500, device=dev), ehs, conds, [0.8, 0.5, 1.0][:len(conds)]], tok


def step_parts(comps: Any, runner: StepRunner, dev: str, dtype: Any, size: int,
           whole: bool) -> dict[str, float]:
    """ms of one step through ``runner``; with ``whole`` also of the text
    encoder and the VAE decode (eager)."""
    import torch

    out: dict[str, float] = {}
    with torch.inference_mode():  # as in the pipeline: no recompilation for other tensors
        args, tok = step_inputs(comps, dev, dtype, size)
        out["step"] = bench_ms(lambda: runner(*args), dev)
        if whole:
            out["text"] = bench_ms(lambda: comps.text_encoder(tok), dev)
            z = args[0] / comps.vae.config.scaling_factor
            out["vae"] = bench_ms(lambda: comps.vae.decode(z, return_dict=False), dev)
    return out


def providers_note(used: dict[str, list[str]]) -> str:
    """The provider each graph runs on, compactly."""
    first = {g: v[0].replace("ExecutionProvider", "") for g, v in used.items()}
    if len(set(first.values())) == 1:
        return f"ORT {next(iter(first.values()))} ({len(first)} graphs)"
    return "; ".join(f"{g}: {p}" for g, p in first.items())


def image_diff(img: Any, ref: Any) -> str:
    """The note comparing an engine's first frame with torch's ("" without both)."""
    if img is None or ref is None:
        return ""
    if img.shape != ref.shape:
        return "image shape differs from torch's"
    d = np.abs(img.astype(np.int16) - ref.astype(np.int16))
    return f"|Δ| vs torch max {int(d.max())} mean {float(d.mean()):.2f}"
