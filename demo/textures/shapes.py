"""Signed distances and blends that the texture painters draw with (pure numpy).

Shapes are (approximate) signed distances in metres on a chart's (around, along)
plane, turned into soft masks so edges stay anti-aliased at any texel density;
colours blend in linear RGB and :func:`linear_to_srgb` encodes them for the image.
"""

from __future__ import annotations

import numpy as np


def smooth_mask(d: np.ndarray, aa: float) -> np.ndarray:
    """1 inside (d < 0), 0 outside, with a soft edge ``aa`` metres wide."""
    return np.clip(0.5 - d / max(aa, 1e-9), 0.0, 1.0).astype(np.float32)


def ellipse(x: np.ndarray, y: np.ndarray, cx: float, cy: float, rx: float, ry: float
             ) -> np.ndarray:
    """Approximate signed distance (metres) to an axis-aligned ellipse."""
    k = np.hypot((x - cx) / rx, (y - cy) / ry)
    return (k - 1.0) * min(rx, ry)


def segment(x: np.ndarray, y: np.ndarray, a: tuple[float, float], b: tuple[float, float]
             ) -> np.ndarray:
    """Distance to the segment a-b."""
    ax, ay = a
    dx, dy = b[0] - ax, b[1] - ay
    t = np.clip(((x - ax) * dx + (y - ay) * dy) / (dx * dx + dy * dy + 1e-12), 0.0, 1.0)
    return np.hypot(x - ax - t * dx, y - ay - t * dy)


def box(x: np.ndarray, y: np.ndarray, cx: float, cy: float, hx: float, hy: float,
        r: float = 0.0) -> np.ndarray:
    """Signed distance to a rectangle with corner radius ``r``."""
    qx = np.abs(x - cx) - hx + r
    qy = np.abs(y - cy) - hy + r
    return (np.hypot(np.maximum(qx, 0), np.maximum(qy, 0))
            + np.minimum(np.maximum(qx, qy), 0) - r)


def star_mask(x: np.ndarray, y: np.ndarray, cx: float, cy: float, r_out: float, r_in: float,
              points: int = 5) -> np.ndarray:
    """1 inside a star polygon (an even-odd crossing test on its 2n corners)."""
    ang = np.pi / 2 + np.arange(2 * points) * np.pi / points
    rad = np.where(np.arange(2 * points) % 2 == 0, r_out, r_in)
    vx, vy = cx + rad * np.cos(ang), cy + rad * np.sin(ang)
    inside = np.zeros(x.shape, dtype=bool)
    for i in range(len(vx)):
        x0, y0, x1, y1 = vx[i - 1], vy[i - 1], vx[i], vy[i]
        crosses = (y0 > y) != (y1 > y)
        xi = x0 + (y - y0) * (x1 - x0) / (y1 - y0 + 1e-12)
        inside ^= crosses & (x < xi)
    return inside.astype(np.float32)


def stitches(along: np.ndarray, d: np.ndarray, width: float, period: float) -> np.ndarray:
    """A dashed thread line: ``d`` is the distance to the line, ``along`` runs beside it."""
    dash = (np.mod(along, period) < 0.6 * period).astype(np.float32)
    return smooth_mask(d - width / 2, width / 3) * dash


def mix(rgb: np.ndarray, colour, weight: np.ndarray) -> np.ndarray:
    """``rgb`` blended toward ``colour`` by ``weight`` (0..1)."""
    w = np.asarray(weight, dtype=np.float32)[..., None]
    return rgb + (np.asarray(colour, dtype=np.float32) - rgb) * w


def shade(rgb: np.ndarray, factor: np.ndarray) -> np.ndarray:
    return rgb * np.asarray(factor, dtype=np.float32)[..., None]


def linear_to_srgb(c: np.ndarray) -> np.ndarray:
    c = np.clip(c, 0.0, 1.0)
    return np.where(c <= 0.0031308, 12.92 * c, 1.055 * np.power(c, 1 / 2.4) - 0.055)
