"""The pass-through pipeline: a deterministic picture of the passes.

Used for transport tests and benchmarks before diffusion (issue 5). The
image is :func:`echo_image`; ``options["steps"]`` (default 4) steps of
``options["delay_ms"]`` (default 0) each make progress and cancellation
observable.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from . import Cancelled, StepCallback


def seed_tint(seed: int) -> np.ndarray:
    """Three uint8 values from the seed (numpy's PCG64 via default_rng)."""
    return np.random.default_rng(seed).integers(0, 256, 3, dtype=np.uint8)


def echo_image(passes: dict[str, np.ndarray], seed: int, width: int, height: int) -> np.ndarray:
    """(height, width, 3) uint8: the seed tint everywhere, and inside the mask
    (everywhere without one) the colour of the first pass present of: normal
    as ``(n + 1) * 127.5``, skeleton as is, depth as grey ``255 / (1 + depth)``.
    """
    rgb = np.empty((height, width, 3), np.uint8)
    rgb[:] = seed_tint(seed)
    if "normal" in passes:
        col = np.clip((passes["normal"].astype(np.float32) + 1.0) * 127.5, 0, 255)
    elif "skeleton" in passes:
        col = passes["skeleton"]
    elif "depth" in passes:
        d = passes["depth"].astype(np.float32)
        grey = np.clip(255.0 / (1.0 + np.maximum(d, 0.0)), 0, 255)
        col = np.repeat(grey[..., None], 3, axis=2)
    else:
        return rgb
    if "mask" in passes:
        np.copyto(rgb, col, casting="unsafe", where=(passes["mask"] > 0)[..., None])
    else:
        np.copyto(rgb, col, casting="unsafe")
    return rgb


class EchoPipeline:
    """``__call__`` as in :mod:`painted_skin.backend.pipelines`."""

    name = "echo"

    def __init__(self, device: str = "cpu") -> None:
        self.device = device

    def __call__(self, passes: dict[str, np.ndarray], *, prompt: str = "",
                 negative_prompt: str = "", seed: int = 0, width: int, height: int,
                 refs: list[np.ndarray] | None = None, options: dict[str, Any] | None = None,
                 callback: StepCallback | None = None) -> np.ndarray:
        options = options or {}
        steps = max(1, int(options.get("steps", 4)))
        delay = max(0.0, float(options.get("delay_ms", 0))) / 1000.0
        rgb = echo_image(passes, seed, width, height)
        for step in range(1, steps + 1):
            if delay:
                time.sleep(delay)
            if callback is not None and not callback(step, steps):
                raise Cancelled(f"cancelled at step {step}/{steps}")
        return rgb
