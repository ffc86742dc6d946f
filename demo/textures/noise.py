"""Smooth value noise for the demo character's textures (pure numpy).

Continuous in metres, so a design's grain, mottling and streaks keep their size
whatever the texel density, and seeded, so every texture is deterministic.
"""

from __future__ import annotations

import zlib

import numpy as np


class Noise:
    """Smooth value noise from a seeded lattice; continuous in metres, tiled at 256 cells."""

    def __init__(self, seed: int) -> None:
        self.table = np.random.default_rng([seed, 0x5EED]).random((256, 256)).astype(np.float32)

    def value(self, x: np.ndarray, y: np.ndarray, cell: float, salt: str = "") -> np.ndarray:
        """Noise in [0, 1] with features ``cell`` metres wide; ``salt`` decorrelates uses."""
        off = zlib.crc32(salt.encode()) % 65536
        x = np.asarray(x, dtype=np.float32) * np.float32(1 / cell) + np.float32(off % 256)
        y = np.asarray(y, dtype=np.float32) * np.float32(1 / cell) + np.float32(off // 256)
        x0, y0 = np.floor(x), np.floor(y)
        fx, fy = x - x0, y - y0
        fx, fy = fx * fx * (3 - 2 * fx), fy * fy * (3 - 2 * fy)
        i0, j0 = x0.astype(np.int32) & 255, (y0.astype(np.int32) & 255) << 8
        i1, j1 = (i0 + 1) & 255, (j0 + 256) & 0xFF00
        t = self.table.ravel()
        a, b = t[j0 | i0], t[j0 | i1]
        c, d = t[j1 | i0], t[j1 | i1]
        a += (b - a) * fx
        c += (d - c) * fx
        return a + (c - a) * fy

    def fbm(self, x: np.ndarray, y: np.ndarray, cell: float, octaves: int = 3,
            salt: str = "") -> np.ndarray:
        """Fractal sum of ``octaves`` noise layers, centred on 0 (about -0.5 .. 0.5)."""
        total, amp, norm = np.zeros_like(x, dtype=np.float32), 1.0, 0.0
        for o in range(octaves):
            total += amp * (self.value(x, y, cell / 2**o, f"{salt}{o}") - 0.5)
            norm += amp
            amp *= 0.5
        return total / norm
