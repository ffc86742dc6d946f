"""Which frames to paint: the keys that show the most of the surface together."""

from __future__ import annotations

import numpy as np
from painted_skin.addon.core.passes.coverage import coverage, suggest_keys, texels


def frame(u0: float, u1: float, part: int = 1, size: int = 32) -> dict[str, np.ndarray]:
    """A frame showing the UV strip u0..u1 (all v) of ``part``."""
    u = np.linspace(u0, u1, size, endpoint=False)[None, :].repeat(size, 0)
    v = np.linspace(0.0, 1.0, size, endpoint=False)[:, None].repeat(size, 1)
    uv = np.dstack([u, v, np.ones_like(u)]).astype(np.float32)
    return {"uv": uv, "mask": np.ones((size, size), np.uint8),
            "parts": np.full((size, size), part, np.uint8)}


def shown(frames: dict[int, dict]) -> dict[int, np.ndarray]:
    return {f: texels(p["uv"], p["mask"], p["parts"]) for f, p in frames.items()}


def test_keys_spread_over_the_surface_not_over_time():
    # frames 1-4 all show the front (u 0..0.5), frame 5 the back: two keys take both
    frames = {f: frame(0.0, 0.5) for f in range(1, 5)} | {5: frame(0.5, 1.0)}
    s = shown(frames)
    assert suggest_keys(s, 2) == [1, 5]
    assert coverage(s, [1, 5]) == 1.0 and coverage(s, [1, 2]) == 0.5
    # nothing more to show: fewer keys than asked
    assert suggest_keys(s, 4) == [1, 5]


def test_parts_with_overlapping_uv_maps_count_apart():
    frames = {1: frame(0.0, 1.0, part=1), 2: frame(0.0, 1.0, part=2)}
    assert suggest_keys(shown(frames), 2) == [1, 2]


def test_pixels_without_uv_or_off_the_character_show_nothing():
    p = frame(0.0, 1.0)
    p["uv"][..., 2] = 0.0
    assert texels(p["uv"], p["mask"], p["parts"]).size == 0
    q = frame(0.0, 1.0)
    q["mask"][:] = 0
    assert texels(q["uv"], q["mask"], q["parts"]).size == 0
