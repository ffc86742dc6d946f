"""Vectorised numpy triangle rasteriser for the ``fast`` control-pass engine.

Pixel conventions are those of :mod:`.camera`: pixel (row i, column j) is sampled at
its centre (j + 0.5, i + 0.5), u to the right, v down, top-left origin; depth is the
planar distance -z_cam in metres.

Pipeline (no Python loop over triangles):

1. near-plane clipping in camera space (Sutherland-Hodgman against z = -near, giving
   one or two triangles); every output triangle carries a 3x3 matrix ``B`` that maps
   its own barycentrics onto the original triangle's, so attributes stay right;
2. projection, winding normalisation (both sides are drawn), bounding boxes of the
   pixel centres a triangle can cover, culling of empty boxes;
3. triangles grouped by box size class (rectangles whose sides come from ``_SIDES``,
   1..``_TILE`` pixels); each class enumerates its candidate pixels by broadcasting;
   boxes larger than ``_TILE`` are split into ``_TILE``-square tiles; every class is
   processed in chunks of at most ``_CHUNK`` candidates (bounded memory);
4. edge-function inside test with the top-left tie rule, evaluated so that the two
   triangles sharing an edge compute exactly opposite values (no cracks, no double
   coverage);
5. z-resolve with ``np.minimum.at`` into the depth image (fast in numpy >= 1.25), in
   bounded batches; perspective-correct barycentrics only for the winners.

Speed: ~30 ms per 512x512 frame for a 33k-triangle mesh covering 22 % of the image on
2 cores, of which ~10 ms are page faults from glibc handing freed arrays back to the
OS; :func:`tune_allocator` (opt-in, process-wide) removes them (~20 ms).

With numba installed (and ``PAINTED_SKIN_JIT`` not "0", see :mod:`.jit`),
:func:`rasterize` runs the compiled twin in :mod:`.raster_jit` instead: the same
arithmetic, so the same arrays (but for exact depth ties), ~10x faster.
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from . import jit
from .camera import Camera

_TILE = 32  # largest candidate box side; bigger boxes are tiled
_CHUNK = 1 << 20  # max candidate pixels evaluated at once (bounds memory)
_FLUSH = 1 << 22  # z-resolve once this many fragments are pending
_MARGIN = 1e-6  # pixels of slack on the candidate boxes (see _setup)
_TINY = np.float64(5e-324)  # smallest subnormal: ``E >= _TINY`` is ``E > 0`` exactly


@dataclass
class Fragments:
    """The visible surface per pixel."""

    depth: np.ndarray  # (H, W) float32 planar depth (-z_cam, metres), +inf where empty
    tri: np.ndarray  # (H, W) int32 visible triangle index, -1 where empty
    bary: np.ndarray  # (H, W, 3) float32 perspective-correct barycentrics (original tri)

    @property
    def mask(self) -> np.ndarray:
        return self.tri >= 0


# ----------------------------------------------------------------------------- clipping


def _clip_near(corners: np.ndarray, near: float
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Clip (T, 3, 3) camera-space triangles that cross the plane z = -near (one or two
    corners in front, depth >= near) to their part in front.

    Returns (positions (N, 3, 3), B (N, 3, 3), source row (N,)): clipped triangle k
    has corner c at ``positions[k, c]`` and ``B[k, c]`` = barycentrics of that corner in
    the original triangle ``corners[src[k]]``.
    """
    d = -corners[..., 2]
    inside = d >= near
    n_in = inside.sum(axis=1)
    eye = np.eye(3)
    pos, bmat, orig = [np.zeros((0, 3, 3))], [np.zeros((0, 3, 3))], [np.zeros(0, np.int64)]

    def roll(idx: np.ndarray, first: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Corner ids (n, 3) rotated to start at ``first`` (keeps the winding)."""
        order = (first[:, None] + np.arange(3)[None, :]) % 3
        return order, np.take_along_axis(d[idx], order, axis=1)

    def cut(p: np.ndarray, dp: np.ndarray, bp: np.ndarray, q: np.ndarray, dq: np.ndarray,
            bq: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Point where edge p (in front) -> q (behind) meets the near plane.

        Always computed from the in-front end, so both triangles sharing the edge get
        bit-identical points (no cracks along the clipped border).
        """
        t = ((dp - near) / (dp - dq))[:, None]
        return p + t * (q - p), bp + t * (bq - bp)

    # one vertex in front: (P0, X01, X02)
    idx1 = np.flatnonzero(n_in == 1)
    if len(idx1):
        order, dd = roll(idx1, np.argmax(inside[idx1], axis=1))
        p = np.take_along_axis(corners[idx1], order[..., None], axis=1)
        b = eye[order]
        x01, b01 = cut(p[:, 0], dd[:, 0], b[:, 0], p[:, 1], dd[:, 1], b[:, 1])
        x02, b02 = cut(p[:, 0], dd[:, 0], b[:, 0], p[:, 2], dd[:, 2], b[:, 2])
        pos.append(np.stack([p[:, 0], x01, x02], axis=1))
        bmat.append(np.stack([b[:, 0], b01, b02], axis=1))
        orig.append(idx1)

    # two vertices in front: quad (P1, P2, X20, X10) as two triangles
    idx2 = np.flatnonzero(n_in == 2)
    if len(idx2):
        order, dd = roll(idx2, np.argmin(inside[idx2], axis=1))
        p = np.take_along_axis(corners[idx2], order[..., None], axis=1)
        b = eye[order]
        x10, b10 = cut(p[:, 1], dd[:, 1], b[:, 1], p[:, 0], dd[:, 0], b[:, 0])
        x20, b20 = cut(p[:, 2], dd[:, 2], b[:, 2], p[:, 0], dd[:, 0], b[:, 0])
        pos += [np.stack([p[:, 1], p[:, 2], x20], axis=1), np.stack([p[:, 1], x20, x10], axis=1)]
        bmat += [np.stack([b[:, 1], b[:, 2], b20], axis=1),
                 np.stack([b[:, 1], b20, b10], axis=1)]
        orig += [idx2, idx2]

    return np.concatenate(pos), np.concatenate(bmat), np.concatenate(orig)


# --------------------------------------------------------------------------- set-up


@dataclass
class _Setup:
    """Per (clipped, projected, kept) triangle data for N triangles, as (3, N) arrays
    indexed [edge or corner, triangle] (contiguous rows are faster than (N, 3))."""

    a: np.ndarray  # edge k, from corner k+1 to k+2: E_k(u, v) = a*u + (b*v + c) >= 0 inside
    b: np.ndarray
    c: np.ndarray
    thresh: np.ndarray  # E_k >= thresh_k counts as inside (top-left tie rule)
    w: np.ndarray  # per corner 1/depth (perspective) or depth (ortho)
    swapped: np.ndarray  # (N,) corners 1 and 2 were swapped to make the area positive
    src: np.ndarray  # (N,) original triangle index
    n_plain: int  # triangles [0, n_plain) are unclipped originals; the rest are clipped
    bmat: np.ndarray  # (N - n_plain, 3, 3) clipped corner -> original barycentrics
    box: np.ndarray  # (4, N) int64 x0, y0, width, height of the candidate pixels


def _setup(verts_cam: np.ndarray, tris: np.ndarray, cam: Camera) -> _Setup:
    verts = np.asarray(verts_cam, np.float64)
    near, far = float(cam.near), float(cam.far)
    t = np.ascontiguousarray(tris.T)  # (3, T)
    d = -verts[:, 2]
    finite = np.isfinite(verts).all(axis=1)
    front = (d >= near) & finite
    beyond = ~(d <= far)  # also true for NaN
    n_in = front[t[0]].astype(np.int8) + front[t[1]] + front[t[2]]
    ok_t = finite[t[0]] & finite[t[1]] & finite[t[2]]
    ok_t &= ~(beyond[t[0]] & beyond[t[1]] & beyond[t[2]])
    plain = np.flatnonzero(ok_t & (n_in == 3))
    cut = np.flatnonzero(ok_t & (n_in > 0) & (n_in < 3))

    # Unclipped triangles: project each vertex once, gather per corner.
    uv_v, _ = cam.project(verts)
    tp = t[:, plain]
    u = uv_v[:, 0].copy()[tp]
    v = uv_v[:, 1].copy()[tp]
    dep = d[tp]
    src = plain
    bmat = np.zeros((0, 3, 3))
    if len(cut):
        pos, bmat, o = _clip_near(verts[tris[cut]], near)
        uv_c, d_c = cam.project(pos)
        u = np.concatenate([u, uv_c[..., 0].T], axis=1)
        v = np.concatenate([v, uv_c[..., 1].T], axis=1)
        dep = np.concatenate([dep, d_c.T], axis=1)
        src = np.concatenate([plain, cut[o]])

    # Candidate pixels: centres j + 0.5 within the corners' box (widened by _MARGIN so
    # that centres within rounding of a corner are decided by the edge functions, the
    # same way for every triangle sharing the corner), clamped to the image.
    lo, hi = 0.5 + _MARGIN, 0.5 - _MARGIN
    with np.errstate(invalid="ignore"):
        x0 = np.maximum(np.ceil(np.minimum(np.minimum(u[0], u[1]), u[2]) - lo), 0.0)
        x1 = np.minimum(np.floor(np.maximum(np.maximum(u[0], u[1]), u[2]) - hi), cam.width - 1.0)
        y0 = np.maximum(np.ceil(np.minimum(np.minimum(v[0], v[1]), v[2]) - lo), 0.0)
        y1 = np.minimum(np.floor(np.maximum(np.maximum(v[0], v[1]), v[2]) - hi), cam.height - 1.0)
        area = (u[1] - u[0]) * (v[2] - v[0]) - (v[1] - v[0]) * (u[2] - u[0])
        keep = (x1 >= x0) & (y1 >= y0) & (area != 0) & np.isfinite(area)
    idx = np.flatnonzero(keep)
    n_plain = int(np.searchsorted(idx, len(plain)))
    if n_plain < len(idx):
        bmat = bmat[idx[n_plain:] - len(plain)]
    # np.take along an axis is several times faster than u[:, idx]
    u, v, dep = (np.take(a, idx, axis=1) for a in (u, v, dep))
    src, area = src[idx], area[idx]
    box = np.stack([x0[idx], y0[idx], x1[idx] - x0[idx] + 1, y1[idx] - y0[idx] + 1])
    box = box.astype(np.int64)

    # Both windings are drawn: swap corners 1 and 2 where the (u, v) area is negative.
    swapped = area < 0
    for arr in (u, v, dep):
        arr[1], arr[2] = np.where(swapped, arr[2], arr[1]), np.where(swapped, arr[1], arr[2])

    # Edge k runs from corner k+1 to corner k+2. Its function is evaluated from the
    # endpoints in a canonical order (lexicographic in (v, u)) and negated when the
    # triangle runs the other way: a neighbour sharing the edge then gets exactly the
    # opposite value at every pixel, so the tie rule splits shared edges exactly.
    ea, eb, ec, th = (np.empty_like(u) for _ in range(4))
    for k in range(3):
        i, j = (k + 1) % 3, (k + 2) % 3
        rev = (v[j] < v[i]) | ((v[j] == v[i]) & (u[j] < u[i]))
        au, av = np.where(rev, u[j], u[i]), np.where(rev, v[j], v[i])
        du = np.where(rev, u[i], u[j]) - au
        dv = np.where(rev, v[i], v[j]) - av
        sgn = np.where(rev, -1.0, 1.0)
        # E = du*(v - av) - dv*(u - au) = (-dv)*u + (du*v + (dv*au - du*av))
        ea[k] = -dv * sgn
        eb[k] = du * sgn
        ec[k] = (dv * au - du * av) * sgn
        # Top-left rule: where E == 0 the edge counts if its direction in this triangle
        # has dv > 0, or dv == 0 and du < 0 (exactly one of two opposite directions
        # qualifies); the canonical direction has dv > 0, or dv == 0 and du > 0.
        th[k] = np.where((dv > 0) ^ rev, 0.0, _TINY)

    w = dep if cam.ortho else 1.0 / dep
    return _Setup(ea, eb, ec, th, w, swapped, src, n_plain, bmat, box)


# ------------------------------------------------------------------------ coverage

# Candidate-grid side for a box side of 1..._TILE pixels: the grids are rectangles of
# these sides, so a 6x3 box costs 6x3 candidates rather than 8x8.
_SIDES = np.array([1, 2, 3, 4, 6, 8, 12, 16, 24, 32])
_SIDE_CLASS = np.searchsorted(_SIDES, np.arange(_TILE + 1))


def _cover(co: np.ndarray, tri: np.ndarray, x0: np.ndarray, y0: np.ndarray, bw: np.ndarray,
           bh: np.ndarray, sw: int, sh: int, width: int) -> tuple[np.ndarray, ...]:
    """Fragments of n triangles over (sh, sw) pixel grids with corners (x0, y0), of which
    only the first bh rows and bw columns are candidates.

    ``co`` (12, n): edge coefficients a, b, c and thresholds (3 rows each); ``tri`` (n,)
    their setup indices. Returns (tri (F,), pixel index (F,), E_0, E_1, E_2 (F,)).
    """
    pu = x0[:, None] + (np.arange(sw) + 0.5)  # (n, sw) pixel-centre u of each column
    pv = y0[:, None] + (np.arange(sh) + 0.5)
    inside = None
    es = []
    for k in range(3):
        au = co[k][:, None] * pu
        bv = co[3 + k][:, None] * pv + co[6 + k][:, None]
        if k == 0:  # out-of-box candidates fail edge 0 (-inf + finite = -inf)
            if sw > 1 and (bw < sw).any():
                au[np.arange(sw) >= bw[:, None]] = -np.inf
            if sh > 1 and (bh < sh).any():
                bv[np.arange(sh) >= bh[:, None]] = -np.inf
        e = au[:, None, :] + bv[:, :, None]  # (n, sh, sw): same op order for every tri
        es.append(e)
        m = e >= co[9 + k][:, None, None]
        inside = m if inside is None else np.logical_and(inside, m, out=inside)
    flat = np.flatnonzero(inside)
    rows, rem = np.divmod(flat, sw * sh)
    off = (np.arange(sh)[:, None] * width + np.arange(sw)).ravel()
    pix = (y0 * width + x0)[rows] + off[rem]
    return (tri[rows], pix) + tuple(e.reshape(-1)[flat] for e in es)


def _fragments(s: _Setup, width: int) -> Iterator[tuple[np.ndarray, ...]]:
    """Batches of (setup triangle, pixel, E_0, E_1, E_2) fragments, before the z-test."""
    x0, y0, bw, bh = s.box
    big = (bw > _TILE) | (bh > _TILE)
    ns = len(_SIDES)
    cls = np.where(big, -1, _SIDE_CLASS[np.minimum(bw, _TILE)] * ns
                   + _SIDE_CLASS[np.minimum(bh, _TILE)])
    # Sort the triangles by class once, so each class below is a contiguous slice.
    order = np.argsort(cls, kind="stable")
    bounds = np.searchsorted(cls[order], np.arange(-1, ns * ns + 1))
    co = np.take(np.concatenate([s.a, s.b, s.c, s.thresh]), order, axis=1)
    x0, y0, bw, bh = np.take(s.box, order, axis=1)
    for c in range(-1, ns * ns):
        lo, hi = bounds[c + 1], bounds[c + 2]
        if lo == hi:
            continue
        if c < 0:
            # Boxes bigger than _TILE: one _TILE-square entry per (triangle, tile).
            sw = sh = _TILE
            nx, ny = -(-bw[lo:hi] // _TILE), -(-bh[lo:hi] // _TILE)
            cnt = nx * ny
            rep = np.repeat(np.arange(lo, hi), cnt)
            k = np.arange(len(rep)) - np.repeat(np.cumsum(cnt) - cnt, cnt)
            ty, tx = np.divmod(k, np.repeat(nx, cnt))
            tw = np.minimum(bw[rep] - tx * _TILE, _TILE)
            th = np.minimum(bh[rep] - ty * _TILE, _TILE)
            cx0, cy0 = x0[rep] + tx * _TILE, y0[rep] + ty * _TILE
            args = (np.take(co, rep, axis=1), order[rep], cx0, cy0, tw, th)
        else:
            sw, sh = int(_SIDES[c // ns]), int(_SIDES[c % ns])
            args = (co[:, lo:hi], order[lo:hi], x0[lo:hi], y0[lo:hi], bw[lo:hi], bh[lo:hi])
        step = max(1, _CHUNK // (sw * sh))
        for i in range(0, len(args[1]), step):
            a = [x[..., i:i + step] for x in args]
            yield _cover(*a, sw, sh, width)


def _depth_q(s: _Setup, ortho: bool, t: np.ndarray, e: tuple[np.ndarray, ...]
             ) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    """Fragment depth and the weights q_k (perspective: E_k / depth_k; ortho: E_k)
    whose normalisation gives the perspective-correct barycentrics."""
    esum = e[0] + e[1] + e[2]
    if ortho:  # depth is linear in screen space
        z = (e[0] * s.w[0, t] + e[1] * s.w[1, t] + e[2] * s.w[2, t]) / esum
        return z, e
    q = (e[0] * s.w[0, t], e[1] * s.w[1, t], e[2] * s.w[2, t])
    return esum / (q[0] + q[1] + q[2]), q  # 1/depth is linear in screen space


def _resolve(s: _Setup, cam: Camera, batches: list[tuple[np.ndarray, ...]],
             zbuf: np.ndarray, best: np.ndarray) -> tuple[np.ndarray, ...]:
    """The nearest fragment per pixel among ``batches``: (tri, pix, E_0, E_1, E_2).

    ``zbuf`` (float32, +inf) and ``best`` (int32, -1) are per-pixel scratch buffers
    (the output images: reusing them avoids page faults on fresh memory); they are
    left dirty.
    """
    t, pix, *e = (np.concatenate(a) for a in zip(*batches, strict=True))
    z, _ = _depth_q(s, cam.ortho, t, e)
    with np.errstate(invalid="ignore"):
        good = z <= cam.far
    z = np.where(good, z, np.inf).astype(np.float32)
    # ufunc.at is fast in numpy >= 1.25 (much faster than a sort); among equal depths
    # the highest fragment index wins, deterministically.
    np.minimum.at(zbuf, pix, z)
    win = np.flatnonzero(good & (z == zbuf[pix])).astype(np.int32)
    np.maximum.at(best, pix[win], win)
    win = best[best >= 0]
    return (t[win], pix[win]) + tuple(x[win] for x in e)


# ------------------------------------------------------------------------ public API


def rasterize(verts_cam: np.ndarray, tris: np.ndarray, cam: Camera) -> Fragments:
    """Z-buffered visibility of a triangle mesh.

    ``verts_cam`` (V, 3) camera-space positions (the camera looks down -Z), ``tris``
    (T, 3) vertex ids. Both windings are drawn; triangles crossing the near plane are
    clipped; barycentrics refer to the original triangle's vertices.
    """
    if jit.enabled():  # the compiled twin: same arrays, several times faster
        from . import raster_jit

        try:
            return Fragments(*raster_jit.rasterize(verts_cam, tris, cam))
        except jit.KERNEL_ERRORS as e:
            jit.disable(e)
    h, w = int(cam.height), int(cam.width)
    tris = np.asarray(tris, np.int64).reshape(-1, 3)
    depth_img = np.full(h * w, np.inf, np.float32)
    tri_img = np.full(h * w, -1, np.int32)
    bary_img = np.zeros((h * w, 3), np.float32)
    frag = Fragments(depth_img.reshape(h, w), tri_img.reshape(h, w), bary_img.reshape(h, w, 3))
    if not len(tris) or h <= 0 or w <= 0:
        return frag
    s = _setup(verts_cam, tris, cam)
    # Fragments are z-resolved in bounded batches (memory stays bounded whatever the
    # overdraw); the winners so far take part in the next round.
    kept: list[tuple[np.ndarray, ...]] = []
    pending = 0
    for batch in _fragments(s, w):
        kept.append(batch)
        pending += len(batch[0])
        if pending >= _FLUSH:
            kept, pending = [_resolve(s, cam, kept, depth_img, tri_img)], 0
            depth_img[:] = np.inf
            tri_img[:] = -1
    if not kept:
        return frag
    t, pix, *e = _resolve(s, cam, kept, depth_img, tri_img)
    z, q = _depth_q(s, cam.ortho, t, e)
    b = np.stack(q, axis=1) / (q[0] + q[1] + q[2])[:, None]
    depth_img[pix] = z
    sw = s.swapped[t]
    b[sw] = b[sw][:, [0, 2, 1]]
    clipped = np.flatnonzero(t >= s.n_plain)
    if len(clipped):
        b[clipped] = np.einsum("nk,nkj->nj", b[clipped], s.bmat[t[clipped] - s.n_plain])
    tri_img[pix] = s.src[t]
    bary_img[pix] = b
    return frag


def tune_allocator(mmap_threshold: int = 32 << 20, trim_threshold: int = 512 << 20) -> bool:
    """Opt-in, process-wide: make glibc keep freed memory instead of returning it to the
    OS at once, so the rasteriser's per-frame arrays do not page-fault every frame
    (about a third of its time). Linux/glibc only; returns whether it took effect."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        m_trim_threshold, m_mmap_threshold = -1, -3  # from <malloc.h>
        return bool(libc.mallopt(m_mmap_threshold, int(mmap_threshold))
                    and libc.mallopt(m_trim_threshold, int(trim_threshold)))
    except (OSError, AttributeError):
        return False


def interpolate(frag: Fragments, values: np.ndarray, tris: np.ndarray | None = None
                ) -> np.ndarray:
    """Interpolate attributes at the visible points: (H, W, C) float32, 0 where empty.

    ``values`` per vertex (V, C) or (V,) with ``tris``, or per triangle corner (T, 3, C).
    """
    values = np.asarray(values)
    if tris is not None:
        corners = values[np.asarray(tris, np.int64)]  # (T, 3, C) or (T, 3)
    else:
        corners = values
    squeeze = corners.ndim == 2
    if squeeze:
        corners = corners[..., None]
    h, w = frag.tri.shape
    out = np.zeros((h, w, corners.shape[-1]), np.float32)
    m = frag.mask
    t = frag.tri[m]
    out[m] = np.einsum("nk,nkc->nc", frag.bary[m].astype(np.float64), corners[t])
    return out


def surface_points(frag: Fragments, tris: np.ndarray, verts: np.ndarray) -> np.ndarray:
    """The visible surface points expressed with vertex positions ``verts`` (V, 3), e.g.
    another frame's: (H, W, 3) float32, 0 where empty."""
    return interpolate(frag, np.asarray(verts, np.float64), tris)


def motion_vectors(frag: Fragments, tris: np.ndarray, verts_cam_other: np.ndarray,
                   cam_other: Camera) -> np.ndarray:
    """Screen motion of each visible surface point, in pixels: its position in the other
    frame (vertex positions ``verts_cam_other`` in that frame's camera space, projected
    by ``cam_other``) minus its pixel centre now; (H, W, 2) float32 as (du right, dv
    down), 0 where empty or where the point is behind the other camera."""
    return motion_vectors_many(frag, tris, [(verts_cam_other, cam_other)])[0]


def motion_vectors_many(frag: Fragments, tris: np.ndarray,
                        others: list[tuple[np.ndarray, Camera]]) -> list[np.ndarray]:
    """:func:`motion_vectors` towards several frames at once (previous and next):
    the visible pixels, their barycentrics and vertex ids are gathered once."""
    h, w = frag.tri.shape
    m = frag.mask
    outs = [np.zeros((h, w, 2), np.float32) for _ in others]
    if not m.any():
        return outs
    vid = np.asarray(tris, np.int64)[frag.tri[m]]  # (N, 3)
    bary = frag.bary[m].astype(np.float64)
    ii, jj = np.nonzero(m)
    centre = np.stack([jj + 0.5, ii + 0.5], axis=1)
    for out, (verts, cam) in zip(outs, others, strict=True):
        v = np.asarray(verts, np.float64)
        p = (bary[:, :, None] * v[vid]).sum(axis=1)
        uv, d = cam.project(p)
        mv = uv - centre
        if not cam.ortho:
            mv[d <= 0] = 0.0
        out[m] = mv
    return outs


def inside_closed_mesh(point: np.ndarray, verts: np.ndarray, tris: np.ndarray) -> bool:
    """Whether ``point`` lies inside a closed triangle mesh: a ray-parity test
    (Möller–Trumbore against every triangle) along three skew directions, by
    majority, so a ray grazing an edge cannot decide alone."""
    v = np.asarray(verts, np.float64)[np.asarray(tris, np.int64)]
    e1, e2 = v[:, 1] - v[:, 0], v[:, 2] - v[:, 0]
    votes = 0
    for d in ((0.577, 0.613, 0.539), (-0.41, 0.27, 0.871), (0.123, -0.96, 0.25)):
        d = np.asarray(d) / np.linalg.norm(d)
        p = np.cross(d, e2)
        det = np.einsum("ij,ij->i", e1, p)
        ok = np.abs(det) > 1e-12
        inv = np.where(ok, 1.0 / np.where(ok, det, 1.0), 0.0)
        s = point - v[:, 0]
        u = np.einsum("ij,ij->i", s, p) * inv
        q = np.cross(s, e1)
        w = (q @ d) * inv
        t = np.einsum("ij,ij->i", e2, q) * inv
        hits = ok & (u >= 0) & (w >= 0) & (u + w <= 1) & (t > 0)
        votes += int(hits.sum()) % 2
    return votes >= 2
