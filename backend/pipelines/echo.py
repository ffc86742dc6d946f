"""The pass-through pipeline: a deterministic picture of the passes.

Used for transport tests and benchmarks, without any model. The
image is :func:`echo_image`; ``options["steps"]`` (default 4) steps of
``options["delay_ms"]`` (default 0) each make progress and cancellation
observable.
"""

from __future__ import annotations

import functools
import time
from typing import Any

import numpy as np

from .base import Cancelled, StepCallback


def seed_tint(seed: int) -> np.ndarray:
    """Three uint8 values from the seed (numpy's PCG64 via default_rng)."""
    return np.random.default_rng(seed).integers(0, 256, 3, dtype=np.uint8)


@functools.cache
def _normal_lut() -> np.ndarray:
    """uint8 colour of every float16 bit pattern: ``(n + 1) * 127.5`` clipped, NaN -> 0."""
    n = np.arange(65536, dtype=np.uint32).astype("<u2").view("<f2").astype(np.float32)
    with np.errstate(invalid="ignore"):
        return np.nan_to_num(np.clip((n + 1.0) * 127.5, 0, 255)).astype(np.uint8)


def echo_image(passes: dict[str, np.ndarray], seed: int, width: int, height: int) -> np.ndarray:
    """(height, width, 3) uint8: the seed tint everywhere, and inside the mask
    (everywhere without one) the colour of the first pass present of: normal
    as ``uint8(clip((n + 1) * 127.5, 0, 255))`` (float32 maths), skeleton as is,
    depth as grey ``uint8(clip(255 / (1 + max(depth, 0)), 0, 255))``.
    """
    tint = seed_tint(seed)
    if "normal" in passes:  # a lookup table: float16 maths in numpy is slow
        bits = np.ascontiguousarray(passes["normal"], dtype="<f2").view("<u2")
        rgb = np.take(_normal_lut(), bits)
    elif "skeleton" in passes:
        rgb = np.array(passes["skeleton"], dtype=np.uint8)
    elif "depth" in passes:
        d = np.nan_to_num(passes["depth"].astype(np.float32), nan=0.0, posinf=1e30)
        grey = np.clip(255.0 / (1.0 + np.maximum(d, 0.0)), 0, 255).astype(np.uint8)
        rgb = np.repeat(grey[..., None], 3, axis=2)
    else:
        rgb = np.empty((height, width, 3), np.uint8)
        rgb[:] = tint
        return rgb
    if "mask" in passes:
        outside = passes["mask"] == 0
        for c in range(3):  # per channel: much faster than a broadcast (H, W, 1) where
            rgb[..., c][outside] = tint[c]
    return rgb


class EchoPipeline:
    """``__call__`` as in :mod:`painted_skin.backend.pipelines`."""

    name = "echo"
    model_id = "echo"  # no weights: every backend paints the same

    def __init__(self, device: str = "cpu") -> None:
        self.device = device

    def __call__(self, passes: dict[str, np.ndarray], *, prompt: str = "",
                 negative_prompt: str = "", seed: int = 0, width: int, height: int,
                 refs: list[np.ndarray] | None = None, options: dict[str, Any] | None = None,
                 callback: StepCallback | None = None, frame: int | None = None,
                 state: dict[str, Any] | None = None) -> np.ndarray:
        options = options or {}
        steps = min(100, max(1, int(options.get("steps", 4))))
        delay = min(10_000.0, max(0.0, float(options.get("delay_ms", 0)))) / 1000.0
        rgb = echo_image(passes, seed, width, height)
        for step in range(1, steps + 1):
            if delay:
                time.sleep(delay)
            if callback is not None and not callback(step, steps):
                raise Cancelled(f"cancelled at step {step}/{steps}")
        return rgb
