"""Non-learned skin baselines a skin model must beat (numpy only: they run beside Blender).

Both learn only from training frames ``(passes, beauty)`` and paint a frame from its
passes alone:

- :class:`PartMean`: each body part its mean training colour (the floor: right colours,
  no detail, no shading).
- :class:`UVLookup`: the mean training colour of each texel of a ``size``² grid over
  the UV square, kept per part so that two meshes whose UV maps overlap do not share
  texels. A texel no training pixel hit reads the next coarser level of a mip pyramid
  of the same sums (the nearest level that saw it), and a pixel without UV (a mesh with
  no UV map) or on a part never seen with UV gets its part's mean. Its gap to the model
  is what the U-Net's shading and the learned texture add beyond "remember the colour".
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from .features import NUM_PARTS

Frame = tuple[dict[str, np.ndarray], np.ndarray]


class BaselineInputError(ValueError):
    """Frames a baseline cannot learn from or paint; the message names the fix."""


def _character(passes: dict[str, np.ndarray], beauty: np.ndarray | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
    """(mask bool (H, W), parts intp (H, W)) of one frame, checked."""
    for name in ("mask", "parts"):
        if passes.get(name) is None:
            raise BaselineInputError(f"a frame lacks the {name!r} pass: render the training "
                                     "and test frames with mask and parts")
    mask = np.asarray(passes["mask"]) > 0
    parts = np.asarray(passes["parts"]).astype(np.intp)
    if parts.shape != mask.shape or (beauty is not None and beauty.shape[:2] != mask.shape):
        raise BaselineInputError(f"pass sizes differ (mask {mask.shape}, parts {parts.shape}"
                                 + ("" if beauty is None else f", beauty {beauty.shape[:2]}")
                                 + "): render every pass of a frame at the same size")
    if parts.max(initial=0) >= NUM_PARTS or parts.min(initial=0) < 0:
        raise BaselineInputError(f"parts pass holds id {int(parts.max())} (ids 0..{NUM_PARTS - 1}"
                                 "): use the labels of encodings.PARTS")
    return mask, parts


def _rgb(beauty: np.ndarray) -> np.ndarray:
    b = np.asarray(beauty)
    if b.dtype != np.uint8 or b.ndim != 3 or b.shape[2] < 3:
        raise BaselineInputError(f"beauty is {b.dtype} {list(b.shape)}: give the Cycles render "
                                 "as (H, W, 3 or 4) uint8")
    return b[..., :3].astype(np.float64)


class PartMean:
    """Each part painted its mean training colour."""

    def __init__(self, frames: Iterable[Frame]) -> None:
        sums = np.zeros((NUM_PARTS, 3))
        counts = np.zeros(NUM_PARTS)
        for passes, beauty in frames:
            mask, parts = _character(passes, beauty)
            p, rgb = parts[mask], _rgb(beauty)[mask]
            counts += np.bincount(p, minlength=NUM_PARTS)
            for c in range(3):
                sums[:, c] += np.bincount(p, rgb[:, c], minlength=NUM_PARTS)
        if not counts.any():
            raise BaselineInputError("no training frame shows the character (every mask is "
                                     "empty): render frames where it is in view")
        self.counts = counts
        self.means = sums / np.maximum(counts, 1)[:, None]  # float RGB in 0..255

    def paint(self, passes: dict[str, np.ndarray]) -> np.ndarray:
        """uint8 (H, W, 3): the part means on the character, black elsewhere."""
        mask, parts = _character(passes)
        out = np.rint(self.means[parts]).astype(np.uint8)
        out[~mask] = 0
        return out


class UVLookup:
    """Mean training colour per (part, texel) of a ``size``² UV grid, nearest texel,
    with mip-pyramid and part-mean fallbacks (see the module doc)."""

    def __init__(self, frames: Iterable[Frame], size: int = 256) -> None:
        if size < 1 or size & (size - 1):
            raise BaselineInputError(f"UV grid size {size} must be a power of two (e.g. 256)")
        self.size = size
        sums = np.zeros((NUM_PARTS, size, size, 3))
        counts = np.zeros((NUM_PARTS, size, size))
        seen: list[Frame] = []
        for passes, beauty in frames:
            seen.append((passes, beauty))
            mask, parts = _character(passes, beauty)
            on = mask & self._has_uv(passes)
            iy, ix = self._texel(passes["uv"], size)
            flat = (parts[on] * size + iy[on]) * size + ix[on]
            rgb = _rgb(beauty)[on]
            n = NUM_PARTS * size * size
            counts += np.bincount(flat, minlength=n).reshape(counts.shape)
            for c in range(3):
                sums[..., c] += np.bincount(flat, rgb[:, c], minlength=n).reshape(counts.shape)
        self.part_mean = PartMean(seen)
        # Level 0 is size², each next level halves it by summing 2x2 blocks.
        self.levels: list[tuple[np.ndarray, np.ndarray]] = []
        while True:
            self.levels.append((sums, counts))
            if sums.shape[1] == 1:
                break
            s = sums.shape[1] // 2
            sums = sums.reshape(NUM_PARTS, s, 2, s, 2, 3).sum((2, 4))
            counts = counts.reshape(NUM_PARTS, s, 2, s, 2).sum((2, 4))

    @staticmethod
    def _has_uv(passes: dict[str, np.ndarray]) -> np.ndarray:
        uv = passes.get("uv")
        if uv is None:
            raise BaselineInputError("a frame lacks the 'uv' pass: render the frames with uv "
                                     "(the canonical passes)")
        uv = np.asarray(uv)
        if uv.ndim != 3 or uv.shape[2] < 3:
            raise BaselineInputError(f"uv pass is {list(uv.shape)}, expected (H, W, 3) "
                                     "(u, v, has_uv)")
        return np.asarray(uv[..., 2], np.float32) > 0.5

    @staticmethod
    def _texel(uv: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
        """Row (v up, so row 0 is v = 1) and column of each pixel's texel; UVs outside
        [0, 1) wrap, as a repeating texture would."""
        a = np.nan_to_num(np.asarray(uv, np.float64)[..., :2])
        a = a - np.floor(a)
        ix = np.minimum((a[..., 0] * size).astype(np.intp), size - 1)
        iy = np.minimum(((1.0 - a[..., 1]) * size).astype(np.intp), size - 1)
        return iy, ix

    def coverage(self) -> float:
        """Fraction of the texels of the parts seen with UV that some training pixel hit."""
        counts = self.levels[0][1]
        used = counts.reshape(NUM_PARTS, -1).sum(1) > 0
        if not used.any():
            return 0.0
        return float((counts[used] > 0).mean())

    def paint(self, passes: dict[str, np.ndarray]) -> np.ndarray:
        """uint8 (H, W, 3) of one frame: looked-up texels, part means where no texel
        (at any level) was seen, black off the character."""
        mask, parts = _character(passes)
        out = self.part_mean.means[parts].copy()
        todo = mask & self._has_uv(passes)
        iy, ix = self._texel(passes["uv"], self.size)
        for sums, counts in self.levels:
            if not todo.any():
                break
            shift = self.size // sums.shape[1]
            idx = (parts[todo], iy[todo] // shift, ix[todo] // shift)
            n = counts[idx]
            hit = n > 0
            rows, cols = np.nonzero(todo)
            out[rows[hit], cols[hit]] = sums[idx][hit] / n[hit, None]
            todo[rows[hit], cols[hit]] = False
        out = np.rint(out).astype(np.uint8)
        out[~mask] = 0
        return out
