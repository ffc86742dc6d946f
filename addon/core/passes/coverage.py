"""Which frames show the most of a character's surface: the keyframes to paint.

A look learned from painted keyframes knows a surface only where some key shows it (and
guesses the rest from what the keys show elsewhere), so the keys are best spread over
the surface, not over time. Each frame's ``uv`` pass (with the ``parts`` pass telling
apart meshes whose UV maps overlap) names the texels of a coarse grid it shows; the
suggestion is greedy set cover: each next key is the frame that adds the most surface
not yet shown (the classic (1 - 1/e) approximation), ties to the earlier frame.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

GRID = 32  # texels per UV side: coarse, so a few pixels' shift does not count as new surface


def texels(uv: np.ndarray, mask: np.ndarray, parts: np.ndarray | None = None,
           grid: int = GRID) -> np.ndarray:
    """The sorted unique texel ids ``(part * grid + row) * grid + col`` a frame shows:
    the character's pixels that have UV (``uv[..., 2] > 0.5``)."""
    uv = np.asarray(uv, np.float64)
    on = (np.asarray(mask) > 0) & (uv[..., 2] > 0.5)
    a = np.nan_to_num(uv[on][:, :2])
    a = a - np.floor(a)
    col = np.minimum((a[:, 0] * grid).astype(np.int64), grid - 1)
    row = np.minimum(((1.0 - a[:, 1]) * grid).astype(np.int64), grid - 1)
    part = np.asarray(parts)[on].astype(np.int64) if parts is not None else 0
    return np.unique((part * grid + row) * grid + col)


def suggest_keys(shown: Mapping[int, np.ndarray], k: int) -> list[int]:
    """Up to ``k`` frames (sorted) that together show the most texels (``shown``: frame ->
    :func:`texels`); fewer when the frames show nothing more."""
    covered = np.empty(0, np.int64)
    picked: list[int] = []
    for _ in range(max(0, k)):
        best, gain = None, 0
        for f in sorted(shown):
            if f in picked:
                continue
            new = np.setdiff1d(shown[f], covered, assume_unique=True).size
            if new > gain:
                best, gain = f, new
        if best is None:
            break
        picked.append(best)
        covered = np.union1d(covered, shown[best])
    return sorted(picked)


def coverage(shown: Mapping[int, np.ndarray], keys: list[int]) -> float:
    """The share of the texels any frame shows that ``keys`` show."""
    every = np.unique(np.concatenate([np.asarray(v, np.int64) for v in shown.values()])) \
        if shown else np.empty(0, np.int64)
    if every.size == 0:
        return 0.0
    got = np.unique(np.concatenate([np.asarray(shown[f], np.int64) for f in keys])) \
        if keys else np.empty(0, np.int64)
    return float(np.intersect1d(got, every).size / every.size)
