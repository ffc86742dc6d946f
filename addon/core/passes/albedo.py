"""The ``albedo`` pass: the surface's base colour, linear, as its material paints it.

Why a pass: the skin model multiplies light by an albedo. Learnt into a neural texture,
the albedo is as sharp as that texture and as right as training's views of it (a face
the cameras never saw is a guess); read from the character's own images at the pixel,
it is exact at any size and on any character, and the network only learns how the
surface is lit. Cycles' Diffuse Color pass holds the same values (the Principled BSDF's
base colour times 1 - metallic).

Blender-free: a material's colour is a constant, or an image read at a UV map times a
constant, either times a colour attribute interpolated between the triangle's corners;
the Blender layer reads the materials into :class:`AlbedoSource` objects.
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
    EXTEND, CLIP, MIRROR). ``attribute``: a colour attribute the colour is multiplied by
    ("" the mesh's render one), or None."""

    color: np.ndarray = field(default_factory=lambda: np.array(DEFAULT_ALBEDO, np.float32))
    image: np.ndarray | None = None
    uv_map: str | None = None
    extension: str = "REPEAT"
    interpolation: str = "Linear"  # Closest: the nearest texel; anything else: bilinear
    exact: bool = True  # False: the material's tree is more than this reads (approximated)
    attribute: str | None = None
    _mips: list[np.ndarray] | None = field(default=None, repr=False, compare=False)

    def mips(self) -> list[np.ndarray]:
        """The image's mip pyramid (built once; level 0 is the image)."""
        if self._mips is None:
            self._mips = mip_pyramid(self.image)
        return self._mips


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
    flat = np.asarray(image, np.float32).reshape(h * w, -1)
    x = uv[:, 0].astype(np.float64) * w - 0.5
    y = uv[:, 1].astype(np.float64) * h - 0.5
    x0, y0 = np.floor(x), np.floor(y)
    fx, fy = (x - x0).astype(np.float32)[:, None], (y - y0).astype(np.float32)[:, None]
    x0, y0 = x0.astype(np.int64), y0.astype(np.int64)
    xa, ia = _wrap(x0, w, extension)
    xb, ib = _wrap(x0 + 1, w, extension)
    ya, ja = _wrap(y0, h, extension)
    yb, jb = _wrap(y0 + 1, h, extension)

    def tex(yy, xx, ok):
        # A flat take: a third of the time of 2-D fancy indexing on large reads.
        v = flat.take(yy * w + xx, axis=0)
        return v * ok[:, None] if extension == "CLIP" else v

    top = tex(ya, xa, ia & ja) * (1 - fx) + tex(ya, xb, ib & ja) * fx
    bottom = tex(yb, xa, ia & jb) * (1 - fx) + tex(yb, xb, ib & jb) * fx
    return top * (1 - fy) + bottom * fy


def mip_pyramid(image: np.ndarray) -> list[np.ndarray]:
    """``image`` and its 2x2 box-filtered halvings down to one texel (an odd side's last
    row or column is repeated, so every level covers the whole image)."""
    levels = [np.asarray(image, np.float32)]
    while max(levels[-1].shape[:2]) > 1:
        a = levels[-1]
        if a.shape[0] % 2:
            a = np.concatenate([a, a[-1:]], axis=0)
        if a.shape[1] % 2:
            a = np.concatenate([a, a[:, -1:]], axis=1)
        if a.shape[0] > 1:
            a = 0.5 * (a[0::2] + a[1::2])
        if a.shape[1] > 1:
            a = 0.5 * (a[:, 0::2] + a[:, 1::2])
        levels.append(a.astype(np.float32))
    return levels


def footprint_texels(grad: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """(N,) texels one pixel step covers: the longer of d(uv)/dx and d(uv)/dy (``grad``
    (N, 2, 2): [uv component, pixel axis]) in an image of ``shape`` (H, W, ...)."""
    scale = np.array([shape[1], shape[0]], np.float64)[None, :, None]
    g = np.asarray(grad, np.float64) * scale
    return np.sqrt(np.maximum((g ** 2).sum(axis=1).max(axis=1), 0.0))


def uv_gradients(project, corners: np.ndarray, bary: np.ndarray, corner_uvs: np.ndarray
                 ) -> np.ndarray:
    """(N, 2, 2) d(uv)/d(pixel) at N surface points: [uv component, pixel x / y].

    ``project``: camera-space (..., 3) -> (pixel (..., 2), depth); ``corners``: (N, 3, 3)
    camera-space corners of each point's triangle; ``bary``: (N, 3) the point's
    barycentrics; ``corner_uvs``: (N, 3, 2). Exact under perspective at the point (the
    projection differentiated there); an edge-on triangle's is infinite."""
    c = np.asarray(corners, np.float64)
    p = np.einsum("nk,nkc->nc", np.asarray(bary, np.float64), c)
    eps = 1e-4
    s0 = project(p)[0]
    ds = np.stack([(project(p + eps * (c[:, k] - c[:, 0]))[0] - s0) / eps for k in (1, 2)],
                  axis=-1)  # (N, 2 pixel, 2 bary)
    uv = np.asarray(corner_uvs, np.float64)
    du = np.stack([uv[:, 1] - uv[:, 0], uv[:, 2] - uv[:, 0]], axis=-1)  # (N, 2 uv, 2 bary)
    det = ds[:, 0, 0] * ds[:, 1, 1] - ds[:, 0, 1] * ds[:, 1, 0]
    inv = np.stack([np.stack([ds[:, 1, 1], -ds[:, 0, 1]], -1),
                    np.stack([-ds[:, 1, 0], ds[:, 0, 0]], -1)], 1)  # (N, 2 bary, 2 pixel)
    with np.errstate(divide="ignore", invalid="ignore"):
        grad = np.einsum("nub,nbp->nup", du, inv) / det[:, None, None]
    edge_on = ~np.isfinite(grad).all(axis=(1, 2)) | (np.abs(det) < 1e-12)
    grad[edge_on] = np.inf
    return grad


#: The training target's pixel filter: Cycles' default Blackman-Harris of filter width
#: 1.5 px, whose window Cycles doubles (``filter_table`` in its ``scene/film.cpp``):
#: 3 px across, ±1.5 px about the pixel's centre (a standard deviation of 0.42 px).
FILTER_WIDTH = 1.5
FILTER_WINDOW = 2.0 * FILTER_WIDTH
#: Taps per axis across that window.
FILTER_TAPS = 4


def blackman_harris(x: np.ndarray) -> np.ndarray:
    """The Blackman-Harris window at ``x`` in [0, 1]."""
    a = (0.35875, 0.48829, 0.14128, 0.01168)
    t = 2 * np.pi * x
    return a[0] - a[1] * np.cos(t) + a[2] * np.cos(2 * t) - a[3] * np.cos(3 * t)


def _trilinear(mips: list[np.ndarray], uv: np.ndarray, level: np.ndarray,
               extension: str) -> np.ndarray:
    """(N, C) bilinear reads at fractional mip ``level`` (N,), blended between levels."""
    level = np.clip(np.nan_to_num(level, nan=len(mips) - 1.0, posinf=len(mips) - 1.0),
                    0.0, len(mips) - 1.0)
    lo = np.floor(level).astype(np.int64)
    frac = (level - lo)[:, None].astype(np.float32)
    out = np.empty((len(uv), mips[0].shape[2]), np.float32)
    for k in np.unique(lo):
        sel = lo == k
        a = sample_bilinear(mips[k], uv[sel], extension)
        if k + 1 < len(mips):
            a = a * (1 - frac[sel]) + sample_bilinear(mips[k + 1], uv[sel], extension) * frac[sel]
        out[sel] = a
    return out


#: Most extra taps along a slanted footprint's long axis (as GPUs' 16x anisotropy / 2).
MAX_ANISOTROPY = 8


def _window(n: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` tap offsets (pixels) across the filter window and their weights."""
    step = FILTER_WINDOW / n
    offsets = (np.arange(n) + 0.5) * step - FILTER_WINDOW / 2
    return offsets, blackman_harris((offsets + FILTER_WINDOW / 2) / FILTER_WINDOW)


def sample_footprint(src: AlbedoSource, uv: np.ndarray, grad: np.ndarray | None
                     ) -> np.ndarray:
    """(N, C) of ``src.image`` as a many-sample render's pixel holds it: the texture
    averaged over the pixel filter's window, mapped into the texture by ``grad``;
    without ``grad``, or where a pixel covers at most a texel, the image's own
    interpolation at the point.

    Why: a point read at the pixel centre aliases where texels are smaller than pixels
    (a far camera's plaid shimmers frame to frame) while the renders it is compared with
    do not. The window is a grid of weighted taps along the footprint's own axes, each
    a trilinear mip read of its share; a slanted footprint gets more taps along its long
    axis (up to MAX_ANISOTROPY x), so it blurs only along its slant."""
    point = sample_nearest if src.interpolation == "Closest" else sample_bilinear
    out = point(src.image, uv, src.extension)
    if grad is None or not len(uv):
        return out
    texels = footprint_texels(grad, src.image.shape)
    minified = ~(texels <= 1.0)  # NaN / inf (edge-on) count as minified
    if not minified.any():
        return out
    mips = src.mips()
    h, w = src.image.shape[:2]
    q = uv[minified].astype(np.float64)
    g = np.asarray(grad, np.float64)[minified]
    finite = np.isfinite(g).all(axis=(1, 2))
    g = np.where(finite[:, None, None], g, 0.0)
    # The footprint's axes: singular vectors in pixel space, lengths in texels.
    scale = np.array([w, h], np.float64)[None, :, None]
    _, sv, vt = np.linalg.svd(g * scale)
    major, minor = np.maximum(sv[:, 0], 1e-12), np.maximum(sv[:, 1], 1e-12)
    dirs = vt  # rows: pixel-space unit directions of the major and minor axes
    ratio = np.clip(major / minor, 1.0, MAX_ANISOTROPY)
    bucket = 2 ** np.ceil(np.log2(ratio)).astype(np.int64)
    acc = np.zeros((len(q), out.shape[1]), np.float32)
    for a in np.unique(bucket):
        sel = bucket == a
        n_major, n_minor = FILTER_TAPS * int(a), FILTER_TAPS
        step = FILTER_WINDOW / n_minor
        level = np.log2(np.maximum(step * np.maximum(minor[sel], major[sel] / a), 1e-12))
        level = np.where(finite[sel], level, len(mips) - 1.0)
        gp, qs = g[sel], q[sel]
        along = np.einsum("nuk,nk->nu", gp, dirs[sel, 0])  # uv per pixel along the axes
        across = np.einsum("nuk,nk->nu", gp, dirs[sel, 1])
        (o1, w1), (o2, w2) = _window(n_major), _window(n_minor)
        o1, o2 = (x.ravel() for x in np.meshgrid(o1, o2, indexing="ij"))
        wt = np.outer(w1, w2).ravel()
        # Every tap of every pixel in one read: (pixels, taps) flattened.
        taps = (qs[:, None] + along[:, None] * o1[None, :, None]
                + across[:, None] * o2[None, :, None])
        reads = _trilinear(mips, taps.reshape(-1, 2), np.repeat(level, len(wt)),
                           src.extension).reshape(len(qs), len(wt), -1)
        acc[sel] = np.einsum("ntc,t->nc", reads, (wt / wt.sum()).astype(np.float32))
    out[minified] = acc
    return out


def sample_mip(src: AlbedoSource, uv: np.ndarray, grad: np.ndarray) -> np.ndarray:
    """(N, C): one trilinear read at the mip level of the pixel's own footprint (a
    GPU's isotropic texture read): for the film's sub-pixel samples, which the pixel
    filter then weighs together, so each needs only its share of the texture."""
    point = sample_nearest if src.interpolation == "Closest" else sample_bilinear
    out = point(src.image, uv, src.extension)
    if not len(uv):
        return out
    texels = footprint_texels(grad, src.image.shape)
    minified = ~(texels <= 1.0)
    if minified.any():
        level = np.log2(np.where(np.isfinite(texels[minified]), texels[minified], 1e30))
        out[minified] = _trilinear(src.mips(), uv[minified], level, src.extension)
    return out


def albedo(sources: list[AlbedoSource], source_of: np.ndarray,
           uvs: dict[str | None, np.ndarray],
           uv_grads: dict[str | None, np.ndarray] | None = None,
           one_tap: bool = False,
           attributes: dict[str, np.ndarray] | None = None) -> np.ndarray:
    """(N, 3) linear base colour of N surface points.

    ``source_of``: (N,) index into ``sources`` per point; ``uvs``: per UV-map name (None:
    the render UV map), (N, 2) coordinates of every point (0 where its mesh lacks it);
    ``uv_grads``: the same maps' (N, 2, 2) derivatives per pixel step (see
    :func:`footprint_texels`), for a footprint-filtered read; None reads at the point.
    ``one_tap``: one mip read per point instead of the filter's window
    (:func:`sample_mip`; needs ``uv_grads``). ``attributes``: per colour-attribute name
    the sources name, (N, 3) its value at every point (interpolated between corners)."""
    out = np.empty((len(source_of), 3), np.float32)
    for i, src in enumerate(sources):
        sel = source_of == i
        if not sel.any():
            continue
        col = np.asarray(src.color, np.float32)[:3]
        if src.attribute is not None:
            col = col * attributes[src.attribute][sel]
        if src.image is None:
            out[sel] = col
            continue
        name = src.uv_map if src.uv_map in uvs else None
        grad = None if uv_grads is None else uv_grads.get(name)
        if one_tap and grad is not None:
            read = sample_mip(src, uvs[name][sel], grad[sel])
        else:
            read = sample_footprint(src, uvs[name][sel], None if grad is None else grad[sel])
        out[sel] = read[:, :3] * col
    return out


def texture_islands(tris: np.ndarray, source_of: np.ndarray,
                    corner_uvs: dict[str | None, np.ndarray],
                    corner_colors: dict[str, np.ndarray] | None = None) -> np.ndarray:
    """(T,) int32: one id per run of triangles the texture reads continuously.

    Two triangles are joined where they share an edge (two vertices) with the same
    source, the same UVs at both ends in every map and the same colours in every colour
    attribute (``corner_colors``, (T, 3, C) as ``corner_uvs``); a UV seam (the same edge,
    other texels), a colour that changes at the edge, or a change of material parts them.
    The film filter has to mix the two sides of such a boundary from its sub-pixel
    samples; inside an island the footprint filter at the pixel's centre already holds
    what the film averages. Without the seams, the
    flat-coloured UV islands of a palette texture (each face group its own colour) met
    in a hard step where Cycles' film blends them over 1.5 px."""
    tris = np.asarray(tris, np.int64)
    t = len(tris)
    if t == 0:
        return np.zeros(0, np.int32)
    tri_id = np.repeat(np.arange(t), 3)
    a, b = tris.reshape(-1), tris[:, [1, 2, 0]].reshape(-1)
    flip = a > b
    lo, hi = np.where(flip, b, a), np.where(flip, a, b)
    # The UVs at the edge's low and high vertex, every map, as exact floats: a
    # continuous edge repeats its loops' values bit for bit.
    cols = [lo, hi, np.repeat(np.asarray(source_of, np.int64), 3)]
    for uv in [*corner_uvs.values(), *(corner_colors or {}).values()]:
        n = uv.shape[-1]
        u0 = uv.reshape(-1, n)
        u1 = uv[:, [1, 2, 0]].reshape(-1, n)
        ulo, uhi = np.where(flip[:, None], u1, u0), np.where(flip[:, None], u0, u1)
        cols += [c[:, k].astype(np.float32).view(np.int32).astype(np.int64)
                 for c in (ulo, uhi) for k in range(n)]
    key = np.stack(cols, 1)
    order = np.lexsort(key.T[::-1])
    same = (key[order[1:]] == key[order[:-1]]).all(axis=1)
    pa, pb = tri_id[order[1:]][same], tri_id[order[:-1]][same]
    label = np.arange(t)
    # Connected components by hooking to the smaller label and pointer jumping: a few
    # sweeps over the pairs (no scipy in Blender's Python).
    while True:
        la, lb = label[pa], label[pb]
        m = np.minimum(la, lb)
        new = label.copy()
        np.minimum.at(new, la, m)
        np.minimum.at(new, lb, m)
        while True:
            jumped = new[new]
            if (jumped == new).all():
                break
            new = jumped
        if (new == label).all():
            break
        label = new
    return np.unique(label, return_inverse=True)[1].astype(np.int32)
