"""Compiled (numba) twin of :mod:`.raster` for the ``fast`` control-pass engine.

Same conventions and, operation for operation, the same float64 arithmetic as the
numpy rasteriser (pixel-centre sampling, top-left tie rule with canonically ordered
edge functions, both windings drawn, near-plane clipping with barycentrics mapped
back to the original triangle, perspective-correct barycentrics, orthographic
cameras), so both give the same coverage, depths and barycentrics. The kernels run
with the GIL released (see :mod:`.jit`), so the pass worker overlaps Blender's frame
evaluation on the main thread.

Two kernels:

- :func:`_raster` walks each (clipped) triangle's pixel-centre box with edge
  functions and z-tests into a float64 depth buffer, writing the winner's triangle id
  and its float32 barycentrics (w.r.t. the original triangle). Optional back-face
  culling of closed meshes happens here too (``passes.rasterize_culled``'s test).
- :func:`_shade` makes every per-pixel pass in one sweep over the image: depth, mask,
  camera-space normals, part ids and motion vectors to the previous / next frame.

One documented difference: where two triangles give *exactly* the same float32
depth at a pixel, numpy keeps the fragment it happened to enumerate last; here depths
are compared in float64 and, among exact float64 ties, the lowest triangle index
(drawn first) wins. Either way the depth image is the same; only the triangle id
(hence barycentrics, normals...) of such pixels may differ.
"""

from __future__ import annotations

import math
import threading

import numpy as np

from .camera import Camera
from .jit import njit

_MARGIN = 1e-6  # as raster._MARGIN: slack on the candidate boxes
_TINY = 5e-324  # as raster._TINY: ``E >= _TINY`` is ``E > 0`` exactly

# numpy's float semantics (x / 0 -> inf, no ZeroDivisionError), as the numpy path;
# also spares the kernels a check per division.
_kernel = njit(error_model="numpy")
# Helpers called per triangle / pixel with array arguments are inlined at numba IR
# level: a real call would pay atomic reference counting on every array (~25 % of
# the rasteriser's time).
_inline = njit(error_model="numpy", inline="always")


def camera_params(cam: Camera) -> np.ndarray:
    """The camera as the kernels take it: float64 (width, height, fx, fy, cx, cy, near,
    far, ortho) -- one array keeps the kernels' signatures (and compiled code) fixed."""
    return np.array([cam.width, cam.height, cam.fx, cam.fy, cam.cx, cam.cy, cam.near,
                     cam.far, 1.0 if cam.ortho else 0.0], np.float64)


# ------------------------------------------------------------------------ raster kernel


@_kernel
def _project(x: float, y: float, z: float, cp: np.ndarray) -> tuple[float, float, float]:
    """``Camera.project`` of one camera-space point: (u, v, depth)."""
    d = -z
    if cp[8] != 0.0:
        return cp[4] + cp[2] * x, cp[5] - cp[3] * y, d
    safe = 1e-12 if abs(d) < 1e-12 else d
    return cp[4] + cp[2] * (x / safe), cp[5] - cp[3] * (y / safe), d


@_kernel
def _edge(ui: float, vi: float, uj: float, vj: float) -> tuple[float, float, float, float]:
    """Edge i -> j: E(u, v) = a*u + (b*v + c) and the inside threshold (E >= thresh).

    Evaluated from the endpoints in canonical (v, u) order and negated when the
    triangle runs the other way, so two triangles sharing the edge get exactly
    opposite values (no cracks, no double coverage); the top-left rule counts E == 0
    for exactly one of the two directions (as ``raster._setup``)."""
    rev = (vj < vi) or (vj == vi and uj < ui)
    if rev:
        au, av, du, dv, sgn = uj, vj, ui - uj, vi - vj, -1.0
    else:
        au, av, du, dv, sgn = ui, vi, uj - ui, vj - vi, 1.0
    thresh = 0.0 if (dv > 0) != rev else _TINY
    return -dv * sgn, du * sgn, (dv * au - du * av) * sgn, thresh


@_inline
def _draw(cu: np.ndarray, cv: np.ndarray, cw: np.ndarray, bm: np.ndarray, clipped: bool,
          src: int, cp: np.ndarray, zbuf: np.ndarray, tri_img: np.ndarray,
          bary: np.ndarray) -> None:
    """Rasterise one projected triangle (corners ``cu``, ``cv``, weight ``cw`` = 1/depth,
    or depth for an orthographic camera; when ``clipped``, ``bm`` maps its barycentrics
    to triangle ``src``'s) into the buffers.
    Mirrors ``raster._setup`` + ``_cover`` + ``_depth_q`` expression by expression."""
    width, height = int(cp[0]), int(cp[1])
    far, ortho = cp[7], cp[8] != 0.0
    u0, u1, u2 = cu[0], cu[1], cu[2]
    v0, v1, v2 = cv[0], cv[1], cv[2]
    area = (u1 - u0) * (v2 - v0) - (v1 - v0) * (u2 - u0)
    if area == 0.0 or not math.isfinite(area):  # a finite area implies finite corners
        return
    lo, hi = 0.5 + _MARGIN, 0.5 - _MARGIN
    x0 = max(np.ceil(min(min(u0, u1), u2) - lo), 0.0)
    x1 = min(np.floor(max(max(u0, u1), u2) - hi), width - 1.0)
    y0 = max(np.ceil(min(min(v0, v1), v2) - lo), 0.0)
    y1 = min(np.floor(max(max(v0, v1), v2) - hi), height - 1.0)
    if x1 < x0 or y1 < y0:
        return
    w0, w1, w2 = cw[0], cw[1], cw[2]
    swapped = area < 0.0  # both windings are drawn: make the area positive
    if swapped:
        u1, u2 = u2, u1
        v1, v2 = v2, v1
        w1, w2 = w2, w1
    # Edge k runs from corner k+1 to k+2 (see _edge).
    a0, b0, c0, t0 = _edge(u1, v1, u2, v2)
    a1, b1, c1, t1 = _edge(u2, v2, u0, v0)
    a2, b2, c2, t2 = _edge(u0, v0, u1, v1)
    for y in range(int(y0), int(y1) + 1):
        pv = y + 0.5
        r0 = b0 * pv + c0
        r1 = b1 * pv + c1
        r2 = b2 * pv + c2
        row = y * width
        for x in range(int(x0), int(x1) + 1):
            pu = x + 0.5
            e0 = a0 * pu + r0
            e1 = a1 * pu + r1
            e2 = a2 * pu + r2
            # one branch, not three: small triangles make these hard to predict
            if not ((e0 >= t0) & (e1 >= t1) & (e2 >= t2)):
                continue
            esum = e0 + e1 + e2
            if ortho:  # depth linear in screen space; the weights are the E_k
                z = (e0 * w0 + e1 * w1 + e2 * w2) / esum
                q0, q1, q2 = e0, e1, e2
            else:  # 1/depth linear in screen space
                q0, q1, q2 = e0 * w0, e1 * w1, e2 * w2
                z = esum / (q0 + q1 + q2)
            p = row + x
            # ``not z <= far`` also drops NaN; strict < keeps the first of equal depths
            if not z <= far or not z < zbuf[p]:
                continue
            zbuf[p] = z
            tri_img[p] = src
            s = q0 + q1 + q2
            g0, g1, g2 = q0 / s, q1 / s, q2 / s
            if swapped:
                g1, g2 = g2, g1
            if clipped:
                for c in range(3):
                    bary[p, c] = g0 * bm[0, c] + g1 * bm[1, c] + g2 * bm[2, c]
            else:
                bary[p, 0] = g0
                bary[p, 1] = g1
                bary[p, 2] = g2


@_inline
def _cut(pos: np.ndarray, bar: np.ndarray, dd: np.ndarray, p: int, q: int, out: int,
         near: float) -> None:
    """Where edge p (in front) -> q (behind) meets the near plane, into row ``out`` of
    ``pos`` / ``bar`` (as ``raster._clip_near.cut``: from the in-front end)."""
    t = (dd[p] - near) / (dd[p] - dd[q])
    for c in range(3):
        pos[out, c] = pos[p, c] + t * (pos[q, c] - pos[p, c])
        bar[out, c] = bar[p, c] + t * (bar[q, c] - bar[p, c])


@_kernel
def _raster(verts: np.ndarray, tris: np.ndarray, cull: np.ndarray, cp: np.ndarray,
            zbuf: np.ndarray, tri_img: np.ndarray, bary: np.ndarray) -> None:
    """Z-buffer ``tris`` (T, 3) int64 over ``verts`` (V, 3) float64 camera space into
    ``zbuf`` (H*W float64, filled here), ``tri_img`` (H*W int32, filled here) and
    ``bary`` (H*W, 3 float32, written only where a triangle wins). ``cull`` (T,) bool,
    or empty: skip flagged triangles that face away from the camera."""
    zbuf[:] = np.inf
    tri_img[:] = -1
    near, far, ortho = cp[6], cp[7], cp[8] != 0.0
    nv = verts.shape[0]
    # Per vertex, once: projection and the clip / drop classification.
    pu = np.empty(nv)
    pv = np.empty(nv)
    pd = np.empty(nv)
    pw = np.empty(nv)
    front = np.empty(nv, np.bool_)
    finite = np.empty(nv, np.bool_)
    beyond = np.empty(nv, np.bool_)
    for i in range(nv):
        x, y, z = verts[i, 0], verts[i, 1], verts[i, 2]
        pu[i], pv[i], pd[i] = _project(x, y, z, cp)
        finite[i] = math.isfinite(x) and math.isfinite(y) and math.isfinite(z)
        front[i] = pd[i] >= near and finite[i]
        beyond[i] = not pd[i] <= far
        pw[i] = pd[i] if ortho else 1.0 / pd[i]
    cu = np.empty(3)
    cv = np.empty(3)
    cw = np.empty(3)
    bm = np.empty((3, 3))
    # Clipping scratch: rows 0-2 the rolled corners, 3-4 the cut points.
    pos = np.empty((5, 3))
    bar = np.empty((5, 3))
    dd = np.empty(5)
    docull = cull.shape[0] > 0
    for t in range(tris.shape[0]):
        i0, i1, i2 = tris[t, 0], tris[t, 1], tris[t, 2]
        if docull and cull[t]:
            # passes.rasterize_culled: keep where the normal faces the eye (>= 0)
            ax, ay, az = verts[i0, 0], verts[i0, 1], verts[i0, 2]
            ex, ey, ez = verts[i1, 0] - ax, verts[i1, 1] - ay, verts[i1, 2] - az
            fx, fy, fz = verts[i2, 0] - ax, verts[i2, 1] - ay, verts[i2, 2] - az
            nx, ny, nz = ey * fz - ez * fy, ez * fx - ex * fz, ex * fy - ey * fx
            facing = nz if ortho else -(nx * ax + ny * ay + nz * az)
            if not facing >= 0:
                continue
        if not (finite[i0] and finite[i1] and finite[i2]):
            continue
        if beyond[i0] and beyond[i1] and beyond[i2]:
            continue
        n_in = int(front[i0]) + int(front[i1]) + int(front[i2])
        if n_in == 3:
            cu[0], cu[1], cu[2] = pu[i0], pu[i1], pu[i2]
            cv[0], cv[1], cv[2] = pv[i0], pv[i1], pv[i2]
            cw[0], cw[1], cw[2] = pw[i0], pw[i1], pw[i2]
            _draw(cu, cv, cw, bm, False, t, cp, zbuf, tri_img, bary)
            continue
        if n_in == 0:
            continue
        # Near-plane clipping (raster._clip_near): roll the corners so that the lone
        # corner (in front when n_in == 1, behind when n_in == 2) comes first.
        ids = (i0, i1, i2)
        first = 0
        for c in range(3):
            if front[ids[c]] == (n_in == 1):
                first = c
                break
        for r in range(3):
            c = (first + r) % 3
            vi = ids[c]
            for k in range(3):
                pos[r, k] = verts[vi, k]
                bar[r, k] = 1.0 if k == c else 0.0
            dd[r] = -verts[vi, 2]
        if n_in == 1:  # (P0, X01, X02)
            _cut(pos, bar, dd, 0, 1, 3, near)
            _cut(pos, bar, dd, 0, 2, 4, near)
            pieces = ((0, 3, 4), (0, 3, 4))
            n_pieces = 1
        else:  # quad (P1, P2, X20, X10) as (P1, P2, X20) + (P1, X20, X10)
            _cut(pos, bar, dd, 1, 0, 4, near)  # X10
            _cut(pos, bar, dd, 2, 0, 3, near)  # X20
            pieces = ((1, 2, 3), (1, 3, 4))
            n_pieces = 2
        for k in range(n_pieces):
            piece = pieces[k]
            for c in range(3):
                r = piece[c]
                cu[c], cv[c], d = _project(pos[r, 0], pos[r, 1], pos[r, 2], cp)
                cw[c] = d if ortho else 1.0 / d
                for j in range(3):
                    bm[c, j] = bar[r, j]
            _draw(cu, cv, cw, bm, True, t, cp, zbuf, tri_img, bary)


# ------------------------------------------------------------------------- shade kernel


@_inline
def _flow(b0: float, b1: float, b2: float, i0: int, i1: int, i2: int, verts: np.ndarray,
          view: np.ndarray, cp: np.ndarray, cu: float, cv: float) -> tuple[float, float]:
    """Screen motion of the surface point (barycentrics b over vertices i) to the other
    frame (``verts`` its world positions, ``view`` (3, 4) its world -> camera matrix,
    ``cp`` its camera), as ``motion_vectors_many``. The point is interpolated in world
    space and then moved to camera space (numpy: the other way round; the same but for
    rounding): one transform per pixel instead of a pass over every vertex."""
    px = b0 * verts[i0, 0] + b1 * verts[i1, 0] + b2 * verts[i2, 0]
    py = b0 * verts[i0, 1] + b1 * verts[i1, 1] + b2 * verts[i2, 1]
    pz = b0 * verts[i0, 2] + b1 * verts[i1, 2] + b2 * verts[i2, 2]
    x = view[0, 0] * px + view[0, 1] * py + view[0, 2] * pz + view[0, 3]
    y = view[1, 0] * px + view[1, 1] * py + view[1, 2] * pz + view[1, 3]
    z = view[2, 0] * px + view[2, 1] * py + view[2, 2] * pz + view[2, 3]
    u, v, d = _project(x, y, z, cp)
    if cp[8] == 0.0 and d <= 0:  # behind the other perspective camera
        return 0.0, 0.0
    return u - cu, v - cv


@_kernel
def _shade(zbuf: np.ndarray, tri_img: np.ndarray, bary: np.ndarray, tris: np.ndarray,
           corner_normals: np.ndarray, rot: np.ndarray, vertex_parts: np.ndarray,
           prev_verts: np.ndarray, prev_view: np.ndarray, prev_cp: np.ndarray,
           next_verts: np.ndarray, next_view: np.ndarray, next_cp: np.ndarray,
           depth: np.ndarray, mask: np.ndarray, normal: np.ndarray, parts: np.ndarray,
           motion: np.ndarray) -> None:
    """Every per-pixel pass in one sweep over the image (each output fully written, so
    they may come from ``np.empty``). Optional outputs (``normal``, ``parts``, ``motion``) and
    frames (``prev_verts``, ``next_verts``) are skipped when passed empty.
    Barycentrics are used as stored (float32), like the numpy path."""
    h, w = depth.shape
    do_n = normal.shape[0] > 0
    do_p = parts.shape[0] > 0
    do_m = motion.shape[0] > 0
    has_prev = prev_verts.shape[0] > 0
    has_next = next_verts.shape[0] > 0
    # Background first, as flat loops LLVM turns into wide stores (most pixels are
    # empty: a branch per pixel and channel would cost more than the covered ones).
    depth.reshape(-1)[:] = np.inf
    mask.reshape(-1)[:] = False
    if do_n:
        normal.reshape(-1)[:] = 0.0
    if do_p:
        parts.reshape(-1)[:] = 0
    if do_m:
        motion.reshape(-1)[:] = 0.0
    for i in range(h):
        for j in range(w):
            p = i * w + j
            t = tri_img[p]
            if t < 0:
                continue
            depth[i, j] = zbuf[p]
            mask[i, j] = True
            f0, f1, f2 = bary[p, 0], bary[p, 1], bary[p, 2]
            b0, b1, b2 = float(f0), float(f1), float(f2)
            if do_n:  # interpolate world normals, turn into camera space, normalise
                n0 = b0 * corner_normals[t, 0, 0] + b1 * corner_normals[t, 1, 0] \
                    + b2 * corner_normals[t, 2, 0]
                n1 = b0 * corner_normals[t, 0, 1] + b1 * corner_normals[t, 1, 1] \
                    + b2 * corner_normals[t, 2, 1]
                n2 = b0 * corner_normals[t, 0, 2] + b1 * corner_normals[t, 1, 2] \
                    + b2 * corner_normals[t, 2, 2]
                m0 = n0 * rot[0, 0] + n1 * rot[0, 1] + n2 * rot[0, 2]
                m1 = n0 * rot[1, 0] + n1 * rot[1, 1] + n2 * rot[1, 2]
                m2 = n0 * rot[2, 0] + n1 * rot[2, 1] + n2 * rot[2, 2]
                s = max(math.sqrt(m0 * m0 + m1 * m1 + m2 * m2), 1e-12)
                normal[i, j, 0] = m0 / s
                normal[i, j, 1] = m1 / s
                normal[i, j, 2] = m2 / s
            i0, i1, i2 = tris[t, 0], tris[t, 1], tris[t, 2]
            if do_p:  # the corner with the largest weight (the first among equals)
                k = i0
                if f1 > f0 and f1 >= f2:
                    k = i1
                elif f2 > f0 and f2 > f1:
                    k = i2
                parts[i, j] = vertex_parts[k]
            if do_m:
                cu, cv = j + 0.5, i + 0.5
                if has_prev:
                    mu, mv = _flow(b0, b1, b2, i0, i1, i2, prev_verts, prev_view,
                                   prev_cp, cu, cv)
                    motion[i, j, 0] = mu
                    motion[i, j, 1] = mv
                if has_next:
                    nu, nv = _flow(b0, b1, b2, i0, i1, i2, next_verts, next_view,
                                   next_cp, cu, cv)
                    motion[i, j, 2] = nu
                    motion[i, j, 3] = nv


# ---------------------------------------------------------------------------- wrappers

_local = threading.local()


def _scratch(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-thread depth / triangle / barycentric buffers of n pixels, reused from frame
    to frame (fresh ones would page-fault every frame)."""
    bufs = getattr(_local, "bufs", None)
    if bufs is None or len(bufs[0]) != n:
        bufs = (np.empty(n), np.empty(n, np.int32), np.empty((n, 3), np.float32))
        _local.bufs = bufs
    return bufs


def _inputs(verts_cam: np.ndarray, tris: np.ndarray, cullable: np.ndarray | None
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The kernels' fixed dtypes (one compiled signature), with the index check numpy
    indexing would do (the kernels do not bounds-check)."""
    verts = np.ascontiguousarray(verts_cam, np.float64).reshape(-1, 3)
    tris = np.ascontiguousarray(tris, np.int64).reshape(-1, 3)
    if tris.size and (tris.min() < 0 or tris.max() >= len(verts)):
        raise IndexError("triangle vertex index out of range")
    cull = (np.zeros(0, np.bool_) if cullable is None
            else np.ascontiguousarray(cullable, np.bool_).reshape(-1))
    if cull.size and cull.size != len(tris):
        raise ValueError("cullable needs one flag per triangle")
    return verts, tris, cull


def rasterize(verts_cam: np.ndarray, tris: np.ndarray, cam: Camera,
              cullable: np.ndarray | None = None
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``raster.rasterize`` compiled: (depth (H, W) float32, tri (H, W) int32,
    bary (H, W, 3) float32). ``cullable`` (T,) bool: drop those triangles where they
    face away from the camera (``passes.rasterize_culled``)."""
    h, w = int(cam.height), int(cam.width)
    verts, tris, cull = _inputs(verts_cam, tris, cullable)
    zbuf = _scratch(h * w)[0]
    tri_img = np.empty(h * w, np.int32)
    bary = np.zeros((h * w, 3), np.float32)
    if len(tris) and h > 0 and w > 0:
        _raster(verts, tris, cull, camera_params(cam), zbuf, tri_img, bary)
    else:
        zbuf[:] = np.inf
        tri_img[:] = -1
    return (zbuf.astype(np.float32).reshape(h, w), tri_img.reshape(h, w),
            bary.reshape(h, w, 3))


_NO_FRAME = (np.zeros((0, 3)), np.zeros((3, 4)), np.zeros(9))  # verts, view, camera


def frame_passes(verts_cam: np.ndarray, tris: np.ndarray, cullable: np.ndarray | None,
                 cam: Camera, corner_normals: np.ndarray | None = None,
                 vertex_parts: np.ndarray | None = None,
                 others: list[tuple[np.ndarray, Camera] | None] | None = None
                 ) -> dict[str, np.ndarray]:
    """One frame's passes (``passes.fast_frame``'s dict): "depth" (H, W) float32 +inf
    where empty, "mask" bool, and when given their inputs "normal" (H, W, 3) float32
    camera-space unit (``corner_normals`` (T, 3, 3) world), "parts" (H, W) uint8
    (``vertex_parts`` (V,)), "motion" (H, W, 4) float32: previous (du, dv), next
    (du, dv) in pixels, from ``others`` = [prev, next], each (*world* vertex positions,
    camera) of that frame, or None (zeros)."""
    h, w = int(cam.height), int(cam.width)
    verts, tris, cull = _inputs(verts_cam, tris, cullable)
    zbuf, tri_img, bary = _scratch(h * w)
    depth = np.empty((h, w), np.float32)
    mask = np.empty((h, w), np.bool_)
    out: dict[str, np.ndarray] = {"depth": depth, "mask": mask}
    normal = np.empty((0, 0, 3), np.float32)
    cn = np.empty((0, 3, 3), np.float32)  # the dtype Blender gives: one compilation
    rot = cam.view[:3, :3]
    if corner_normals is not None:
        normal = out["normal"] = np.empty((h, w, 3), np.float32)
        # float32 (what Blender gives) or float64 pass as they are: the kernel widens
        # each value to float64 as numpy's einsum does; other dtypes become float64.
        cn = np.asarray(corner_normals)
        if cn.dtype not in (np.float32, np.float64):
            cn = cn.astype(np.float64)
        cn = np.ascontiguousarray(cn)
        if cn.shape != (len(tris), 3, 3):
            raise ValueError("corner_normals must be (T, 3, 3)")
    parts = np.empty((0, 0), np.uint8)
    vp = np.zeros(0, np.uint8)
    if vertex_parts is not None:
        parts = out["parts"] = np.empty((h, w), np.uint8)
        vp = np.ascontiguousarray(vertex_parts, np.uint8)
        if vp.shape != (len(verts),):
            raise ValueError("vertex_parts must be (V,)")
    motion = np.empty((0, 0, 4), np.float32)
    frames = [_NO_FRAME, _NO_FRAME]
    if others is not None:
        motion = out["motion"] = np.empty((h, w, 4), np.float32)
        for k, other in enumerate(others):
            if other is not None:
                v = np.ascontiguousarray(other[0], np.float64)
                if v.shape != verts.shape:
                    raise ValueError("the other frame needs the same vertices")
                view = np.ascontiguousarray(other[1].view[:3], np.float64)
                frames[k] = (v, view, camera_params(other[1]))
    if h <= 0 or w <= 0:
        return out
    if len(tris):
        _raster(verts, tris, cull, camera_params(cam), zbuf, tri_img, bary)
    else:
        tri_img[:] = -1
    _shade(zbuf, tri_img, bary, tris, cn, np.ascontiguousarray(rot, np.float64), vp,
           *frames[0], *frames[1], depth, mask, normal, parts, motion)
    return out
