"""Packing a material's charts into one image at one texel density (pure numpy)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Packing:
    """Where each chart's box lies in its image: pixels per metre and box origins (px)."""

    scale: float
    origin: np.ndarray  # (N, 2) lower-left corner of each box's content, pixels
    size: np.ndarray  # (N, 2) content size in pixels


def pack_charts(sizes_m: np.ndarray, image_px: int, gutter_px: int = 4) -> Packing:
    """Shelf-pack boxes of ``sizes_m`` (N, 2) metres at one texel density, as large as fits.

    One density per image keeps texels the same size on every chart of a material;
    every box keeps ``gutter_px`` of its own padding on each side so that filtering
    never reads a neighbouring chart.
    """
    sizes_m = np.asarray(sizes_m, dtype=np.float64)
    if sizes_m.ndim != 2 or len(sizes_m) == 0 or (sizes_m <= 0).any():
        raise ValueError("pack_charts needs one or more boxes of positive size")
    order = np.argsort(-sizes_m[:, 1], kind="stable")

    def place(scale: float) -> tuple[np.ndarray, np.ndarray] | None:
        px = np.ceil(sizes_m * scale).astype(np.int64)
        outer = px + 2 * gutter_px
        origin = np.zeros_like(px)
        x = y = shelf = 0
        for i in order:
            w, h = outer[i]
            if w > image_px:
                return None
            if x + w > image_px:
                x, y, shelf = 0, y + shelf, 0
            if y + h > image_px:
                return None
            origin[i] = (x + gutter_px, y + gutter_px)
            x, shelf = x + w, max(shelf, h)
        return origin, px

    lo, hi = 1.0, 1e5
    for _ in range(40):
        mid = (lo * hi) ** 0.5
        lo, hi = (mid, hi) if place(mid) is not None else (lo, mid)
    result = place(lo)
    if result is None:
        raise ValueError(f"cannot pack {len(sizes_m)} charts into {image_px} px: "
                         "use a larger image")
    return Packing(lo, *result)
