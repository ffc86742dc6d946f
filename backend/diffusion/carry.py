"""A temporal session's memory of the previous frame, carried by the client.

In temporal mode a frame's init is the previous restyled frame (and its final
latents) warped by the motion vectors, with a depth test against the previous
depth: the session ``state`` keeps ``frame``, ``rgb``, ``depth`` and ``latents``.
That state dies with the backend process or the session, so a resumed shot (or a
backend restarted mid-shot) would start its chain over with a seam. Each RESULT
of a temporal frame therefore returns the final latents (``carry_latents``,
1/64 of the pixels x 4 channels), the client stores them beside the frame, and a
FRAME may carry the previous frame back (``carry_frame`` + ``carry_rgb``,
``carry_depth``, ``carry_latents``): the backend restores the state from it, and
the chain continues bit for bit as if it had never stopped.
"""

from __future__ import annotations

from typing import Any

import numpy as np

PREFIX = "carry_"
# name -> (dtypes, channels; 0: (H, W); None: latents of any 4-D shape)
ARRAYS: dict[str, tuple[tuple[str, ...], int | None]] = {
    "carry_rgb": (("uint8",), 3),
    "carry_depth": (("float32",), 0),
    "carry_latents": (("float16", "float32"), None),
}


def check(arrays: dict[str, np.ndarray], width: int, height: int) -> str | None:
    """What is wrong with a FRAME's carry arrays for this session, or None."""
    unknown = sorted(set(arrays) - set(ARRAYS))
    if unknown:
        return f"unknown carry array(s) {', '.join(unknown)} (known: {', '.join(ARRAYS)})"
    if {"carry_rgb", "carry_depth"} - set(arrays):
        return "a carry needs carry_rgb and carry_depth (carry_latents optional)"
    for name, a in arrays.items():
        dtypes, ch = ARRAYS[name]
        if a.dtype.name not in dtypes:
            return f"{name} must be {' or '.join(dtypes)}, got {a.dtype.name}"
        if ch is None:
            if a.ndim != 4 or a.shape[0] != 1 or a.size > width * height:
                return f"{name} must be (1, C, h, w) latents, got {list(a.shape)}"
        elif a.shape != ((height, width, ch) if ch else (height, width)):
            return f"{name} must be {list((height, width, ch) if ch else (height, width))}, " \
                   f"got {list(a.shape)}"
    return None


def restore(pipe: Any, state: dict[str, Any], frame: int, arrays: dict[str, np.ndarray]
            ) -> None:
    """Make ``state`` what it was after frame ``frame`` ran (copies: the arrays may be
    views of a message or of shared memory)."""
    latents = arrays.get("carry_latents")
    if latents is not None:
        import torch

        latents = torch.from_numpy(np.array(latents)).to(getattr(pipe, "device", "cpu"))
    state.update(frame=int(frame), rgb=np.array(arrays["carry_rgb"]),
                 depth=np.array(arrays["carry_depth"]), latents=latents)


def arrays_of(state: dict[str, Any]) -> dict[str, np.ndarray]:
    """What a RESULT returns for the client to carry: the frame's final latents, in
    their own dtype (restored bit for bit)."""
    lat = state.get("latents")
    if lat is None:
        return {}
    return {"carry_latents": np.ascontiguousarray(lat.detach().cpu().numpy())}


__all__ = ["ARRAYS", "PREFIX", "arrays_of", "check", "restore"]
