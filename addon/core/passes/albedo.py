"""The ``albedo`` pass: the surface's base colour, linear, as its material paints it.

Why a pass: the skin model multiplies light by an albedo. Learnt into a neural texture,
the albedo is as sharp as that texture and as right as training's views of it (a face
the cameras never saw is a guess); read from the character's own images at the pixel,
it is exact at any size and on any character, and the network only learns how the
surface is lit. Cycles' Diffuse Color pass holds the same values (the Principled BSDF's
base colour times 1 - metallic).

Blender-free: a material's colour is a constant, or an image read at a UV map times a
constant; the Blender layer reads the materials into :class:`AlbedoSource` objects.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

#: Blender's colour of a surface without a material (its default Principled BSDF's).
DEFAULT_ALBEDO = (0.8, 0.8, 0.8)


def srgb_to_linear(c: np.ndarray) -> np.ndarray:
    """The sRGB transfer function undone (IEC 61966-2-1), as Blender decodes sRGB images."""
    c = np.asarray(c, np.float32)
    return np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4).astype(np.float32)


@dataclass
class AlbedoSource:
    """One material's base colour: ``color``, times ``image`` read at ``uv_map``.

    ``image``: (H, W, 3) float32 linear, row 0 at the bottom (Blender's pixel order), or
    None for a plain colour. ``uv_map``: the UV map the image is read at; None means the
    mesh's render UV map. ``extension``: Blender's Image Texture extension (REPEAT,
    EXTEND, CLIP, MIRROR)."""

    color: np.ndarray = field(default_factory=lambda: np.array(DEFAULT_ALBEDO, np.float32))
    image: np.ndarray | None = None
    uv_map: str | None = None
    extension: str = "REPEAT"
    interpolation: str = "Linear"  # Closest: the nearest texel; anything else: bilinear
    exact: bool = True  # False: the material's tree is more than this reads (approximated)


def _wrap(x: np.ndarray, n: int, extension: str) -> tuple[np.ndarray, np.ndarray]:
    """Integer texel indices (clamped or wrapped) and a 0/1 inside-the-image flag."""
    inside = np.ones(x.shape, bool)
    if extension == "REPEAT":
        return np.mod(x, n), inside
    if extension == "MIRROR":
        m = np.mod(x, 2 * n)
        return np.where(m < n, m, 2 * n - 1 - m), inside
    if extension == "CLIP":
        inside = (x >= 0) & (x < n)
    return np.clip(x, 0, n - 1), inside


def sample_nearest(image: np.ndarray, uv: np.ndarray, extension: str = "REPEAT"
                   ) -> np.ndarray:
    """(N, C) of ``image`` (H, W, C), row 0 at the bottom, read at ``uv`` (N, 2): the
    texel each point falls in, as Blender's Image Texture (Closest)."""
    h, w = image.shape[:2]
    x, i = _wrap(np.floor(uv[:, 0].astype(np.float64) * w).astype(np.int64), w, extension)
    y, j = _wrap(np.floor(uv[:, 1].astype(np.float64) * h).astype(np.int64), h, extension)
    return image[y, x].astype(np.float32) * (i & j)[:, None]


def sample_bilinear(image: np.ndarray, uv: np.ndarray, extension: str = "REPEAT"
                    ) -> np.ndarray:
    """(N, C) of ``image`` (H, W, C), row 0 at the bottom, read at ``uv`` (N, 2) with
    linear interpolation between texel centres, as Blender's Image Texture (Linear)."""
    h, w = image.shape[:2]
    x = uv[:, 0].astype(np.float64) * w - 0.5
    y = uv[:, 1].astype(np.float64) * h - 0.5
    x0, y0 = np.floor(x), np.floor(y)
    fx, fy = (x - x0)[:, None], (y - y0)[:, None]
    x0, y0 = x0.astype(np.int64), y0.astype(np.int64)
    xa, ia = _wrap(x0, w, extension)
    xb, ib = _wrap(x0 + 1, w, extension)
    ya, ja = _wrap(y0, h, extension)
    yb, jb = _wrap(y0 + 1, h, extension)

    def tex(yy, xx, ok):
        return image[yy, xx].astype(np.float32) * ok[:, None]

    top = tex(ya, xa, ia & ja) * (1 - fx) + tex(ya, xb, ib & ja) * fx
    bottom = tex(yb, xa, ia & jb) * (1 - fx) + tex(yb, xb, ib & jb) * fx
    return (top * (1 - fy) + bottom * fy).astype(np.float32)


def albedo(sources: list[AlbedoSource], source_of: np.ndarray,
           uvs: dict[str | None, np.ndarray]) -> np.ndarray:
    """(N, 3) linear base colour of N surface points.

    ``source_of``: (N,) index into ``sources`` per point; ``uvs``: per UV-map name (None:
    the render UV map), (N, 2) coordinates of every point (0 where its mesh lacks it)."""
    out = np.empty((len(source_of), 3), np.float32)
    for i, src in enumerate(sources):
        sel = source_of == i
        if not sel.any():
            continue
        col = np.asarray(src.color, np.float32)[:3]
        if src.image is None:
            out[sel] = col
            continue
        uv = uvs.get(src.uv_map, uvs.get(None))
        sample = sample_nearest if src.interpolation == "Closest" else sample_bilinear
        out[sel] = sample(src.image, uv[sel], src.extension)[:, :3] * col
    return out
