"""The numpy rasteriser (addon/core/passes/raster.py) against analytic answers."""

from __future__ import annotations

import time

import numpy as np
import pytest
from painted_skin.addon.core.passes.camera import Camera
from painted_skin.addon.core.passes.raster import (
    interpolate,
    motion_vectors,
    rasterize,
    surface_points,
    tune_allocator,
)


def _cam(w: int = 64, h: int = 48, f: float = 50.0, near: float = 0.1, far: float = 100.0,
         ortho: bool = False) -> Camera:
    return Camera(width=w, height=h, fx=f, fy=f, cx=w / 2 + 0.25, cy=h / 2 - 0.125, near=near,
                  far=far, ortho=ortho)


def _unproject(uv: np.ndarray, depth: np.ndarray | float, cam: Camera) -> np.ndarray:
    """Pixel coordinates + planar depth -> camera-space points."""
    uv = np.asarray(uv, float)
    depth = np.broadcast_to(np.asarray(depth, float), uv.shape[:-1])
    x = (uv[..., 0] - cam.cx) / cam.fx
    y = (cam.cy - uv[..., 1]) / cam.fy
    if not cam.ortho:
        x, y = x * depth, y * depth
    return np.stack([x, y, -depth], axis=-1)


def _centres(cam: Camera) -> tuple[np.ndarray, np.ndarray]:
    jj, ii = np.meshgrid(np.arange(cam.width) + 0.5, np.arange(cam.height) + 0.5)
    return jj, ii


def _rays(cam: Camera) -> np.ndarray:
    """(H, W, 3) perspective ray directions with z = -1 through the pixel centres."""
    u, v = _centres(cam)
    return np.stack([(u - cam.cx) / cam.fx, (cam.cy - v) / cam.fy, -np.ones_like(u)], axis=-1)


def _edge_inside(uv_tri: np.ndarray, u: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, ...]:
    """Signed edge functions of the pixel centres for a (3, 2) screen triangle."""
    out = []
    for k in range(3):
        a, b = uv_tri[(k + 1) % 3], uv_tri[(k + 2) % 3]
        out.append((b[0] - a[0]) * (v - a[1]) - (b[1] - a[1]) * (u - a[0]))
    return tuple(out)


def _grid_mesh(nx: int, ny: int, x0: float, y0: float, step: float
               ) -> tuple[np.ndarray, np.ndarray]:
    """Pixel-space vertices (ny+1)*(nx+1) and 2*nx*ny triangles of a regular grid."""
    gx, gy = np.meshgrid(x0 + step * np.arange(nx + 1), y0 + step * np.arange(ny + 1))
    uv = np.stack([gx.ravel(), gy.ravel()], axis=1)
    idx = np.arange((nx + 1) * (ny + 1)).reshape(ny + 1, nx + 1)
    a, b, c, d = idx[:-1, :-1], idx[:-1, 1:], idx[1:, :-1], idx[1:, 1:]
    tris = np.concatenate([np.stack([a, b, d], -1).reshape(-1, 3),
                           np.stack([a, d, c], -1).reshape(-1, 3)])
    return uv, tris


def _coverage_count(verts: np.ndarray, tris: np.ndarray, cam: Camera) -> np.ndarray:
    """How many triangles cover each pixel, each drawn on its own."""
    return sum(rasterize(verts, tris[i:i + 1], cam).mask.astype(int) for i in range(len(tris)))


def uv_sphere(seg: int, rings: int, r: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """A UV sphere: 2 * seg * (rings - 1) triangles."""
    th = np.linspace(0, np.pi, rings + 1)[1:-1]
    ph = np.linspace(0, 2 * np.pi, seg, endpoint=False)
    v = np.stack([np.outer(np.sin(th), np.cos(ph)), np.outer(np.cos(th), np.ones(seg)),
                  np.outer(np.sin(th), np.sin(ph))], -1).reshape(-1, 3) * r
    v = np.concatenate([v, [[0, r, 0], [0, -r, 0]]])
    idx = np.arange((rings - 1) * seg).reshape(rings - 1, seg)
    a, b = idx[:-1], np.roll(idx[:-1], -1, 1)
    c, d = idx[1:], np.roll(idx[1:], -1, 1)
    top, bot = len(v) - 2, len(v) - 1
    caps = [np.stack([np.full(seg, top), idx[0], np.roll(idx[0], -1)], -1),
            np.stack([np.full(seg, bot), np.roll(idx[-1], -1), idx[-1]], -1)]
    quads = [np.stack([a, c, b], -1).reshape(-1, 3), np.stack([b, c, d], -1).reshape(-1, 3)]
    return v, np.concatenate(quads + caps)


# ------------------------------------------------------------------------- coverage


@pytest.mark.parametrize("seed", range(6))
def test_single_triangle_coverage_is_pixel_centres_inside(seed: int) -> None:
    cam = _cam()
    rng = np.random.default_rng(seed)
    uv = rng.uniform([-10, -10], [cam.width + 10, cam.height + 10], (3, 2))
    verts = _unproject(uv, rng.uniform(1, 5, 3), cam)
    frag = rasterize(verts, np.array([[0, 1, 2]]), cam)
    u, v = _centres(cam)
    e = _edge_inside(uv, u, v)
    inside = (np.sign(e[0]) == np.sign(e[1])) & (np.sign(e[1]) == np.sign(e[2]))
    near_edge = np.min(np.abs(e), axis=0) < 1e-9
    assert not near_edge.any()
    np.testing.assert_array_equal(frag.mask, inside & (e[0] != 0))
    assert frag.mask.any()
    assert np.all(frag.tri[frag.mask] == 0)
    assert np.all(np.isinf(frag.depth[~frag.mask]))
    assert np.all(frag.bary[~frag.mask] == 0)
    np.testing.assert_allclose(frag.bary[frag.mask].sum(-1), 1, atol=1e-5)


def test_both_windings_are_drawn() -> None:
    cam = _cam()
    verts = _unproject(np.array([[5.2, 4.1], [40.3, 9.7], [12.9, 33.3]]), 2.0, cam)
    a = rasterize(verts, np.array([[0, 1, 2]]), cam)
    b = rasterize(verts, np.array([[0, 2, 1]]), cam)
    np.testing.assert_array_equal(a.mask, b.mask)
    assert a.mask.sum() > 100
    np.testing.assert_allclose(a.bary, b.bary[..., [0, 2, 1]], atol=1e-6)


@pytest.mark.parametrize("flip", [False, True])
def test_shared_edges_no_cracks_no_double_coverage(flip: bool) -> None:
    """A grid whose vertices and edges pass exactly through pixel centres (ties)."""
    cam = _cam(w=32, h=24)
    uv, tris = _grid_mesh(4, 3, 2.5, 3.5, 6.0)  # vertices on pixel centres
    if flip:  # mixed winding must not matter
        tris[::2] = tris[::2, [0, 2, 1]]
    verts = _unproject(uv, 3.0, cam)
    count = _coverage_count(verts, tris, cam)
    u, v = _centres(cam)
    strictly = (u > 2.5) & (u < 26.5) & (v > 3.5) & (v < 21.5)
    assert count.max() == 1
    assert np.all(count[strictly] == 1)
    assert np.all(count[(u < 2.5) | (u > 26.5) | (v < 3.5) | (v > 21.5)] == 0)
    whole = rasterize(verts, tris, cam)
    np.testing.assert_array_equal(whole.mask, count == 1)


def test_jittered_mesh_and_fans_cover_once() -> None:
    cam = _cam(w=40, h=40)
    rng = np.random.default_rng(3)
    uv, tris = _grid_mesh(6, 6, 4.0, 4.0, 5.0)
    inner = (uv[:, 0] > 4) & (uv[:, 0] < 34) & (uv[:, 1] > 4) & (uv[:, 1] < 34)
    # Half the interior vertices jittered, the rest snapped to pixel centres (fans
    # of 6 triangles meeting exactly on a sampled point).
    jitter = rng.uniform(-1.5, 1.5, uv.shape)
    snap = rng.random(len(uv)) < 0.5
    uv = np.where((inner & ~snap)[:, None], uv + jitter, uv)
    uv = np.where((inner & snap)[:, None], np.floor(uv) + 0.5, uv)
    verts = _unproject(uv, rng.uniform(2, 3, len(uv)), cam)
    count = _coverage_count(verts, tris, cam)
    u, v = _centres(cam)
    assert count.max() == 1
    assert np.all(count[(u > 4) & (u < 34) & (v > 4) & (v < 34)] == 1)


# ---------------------------------------------------------------------------- depth


def test_perspective_depth_on_slanted_plane() -> None:
    cam = _cam(w=80, h=60)
    n, k = np.array([0.3, -0.2, -1.0]), 4.0  # plane n . p = k, depth 4 on the axis
    corners = np.array([[-5.0, -5.0], [5.0, -5.0], [5.0, 5.0], [-5.0, 5.0]])
    z = (k - n[0] * corners[:, 0] - n[1] * corners[:, 1]) / n[2]
    verts = np.concatenate([corners, z[:, None]], axis=1)
    frag = rasterize(verts, np.array([[0, 1, 2], [0, 2, 3]]), cam)
    assert frag.mask.all()
    rays = _rays(cam)
    expected = k / (rays @ n)  # t along a ray with z = -1 is the planar depth
    np.testing.assert_allclose(frag.depth, expected, rtol=2e-6)
    assert frag.depth.dtype == np.float32 and frag.tri.dtype == np.int32


def test_orthographic_coverage_and_depth() -> None:
    cam = _cam(w=50, h=40, f=10.0, ortho=True)
    uv = np.array([[3.3, 2.2], [47.1, 6.4], [20.6, 37.9]])
    d = np.array([2.0, 5.0, 3.5])
    verts = _unproject(uv, d, cam)
    frag = rasterize(verts, np.array([[0, 1, 2]]), cam)
    u, v = _centres(cam)
    e = _edge_inside(uv, u, v)
    area = _edge_inside(uv, *uv[0])[0]
    l_ = np.stack(e) / area
    inside = (l_ > 0).all(axis=0)
    np.testing.assert_array_equal(frag.mask, inside)
    # Orthographic depth is linear in screen space.
    np.testing.assert_allclose(frag.depth[inside], np.tensordot(d, l_, 1)[inside], rtol=1e-6)
    np.testing.assert_allclose(np.moveaxis(frag.bary, -1, 0)[:, inside], l_[:, inside],
                               atol=1e-6)


@pytest.mark.parametrize("order", [(0, 1), (1, 0)])
def test_z_test_keeps_the_nearer_surface(order: tuple[int, int]) -> None:
    cam = _cam()
    uv = np.array([[2.0, 2.0], [60.0, 4.0], [10.0, 45.0]])
    near_tri = _unproject(uv, 2.0, cam)
    far_tri = _unproject(uv[::-1] + 1.5, 3.0, cam)
    verts = np.concatenate([near_tri, far_tri])
    tris = np.array([[0, 1, 2], [3, 4, 5]])[list(order)]
    frag = rasterize(verts, tris, cam)
    near_idx = order.index(0)
    alone = rasterize(near_tri, np.array([[0, 1, 2]]), cam).mask
    assert np.all(frag.tri[alone] == near_idx)
    np.testing.assert_allclose(frag.depth[alone], 2.0, rtol=1e-6)
    assert np.all(frag.tri[frag.mask & ~alone] == 1 - near_idx)


def test_z_test_on_intersecting_triangles() -> None:
    cam = _cam()
    big = np.array([[-1e3, -1e3], [1e3, -1e3], [0.0, 1e3]])
    a = np.concatenate([big, [[-3.0], [-3.0], [-3.0]]], axis=1)  # depth 3
    b = np.concatenate([big, -(3.0 + 0.2 * big[:, :1])], axis=1)  # depth 3 + 0.2 x
    frag = rasterize(np.concatenate([a, b]), np.array([[0, 1, 2], [3, 4, 5]]), cam)
    rays = _rays(cam)
    depth_b = 3.0 / (1.0 - 0.2 * rays[..., 0])
    expected_tri = np.where(depth_b < 3.0, 1, 0)
    clear = np.abs(depth_b - 3.0) > 1e-4
    np.testing.assert_array_equal(frag.tri[clear], expected_tri[clear])
    np.testing.assert_allclose(frag.depth, np.minimum(depth_b, 3.0), rtol=1e-6)


# ------------------------------------------------------------------------- clipping


def test_near_plane_clipping_of_a_plane_through_the_camera_plane() -> None:
    cam = _cam(w=64, h=64, f=40.0, near=0.5)
    # A floor (y = -1) from behind the camera to far ahead: it crosses the near plane.
    verts = np.array([[-20.0, -1.0, 5.0], [20.0, -1.0, 5.0], [20.0, -1.0, -30.0],
                      [-20.0, -1.0, -30.0]])
    tris = np.array([[0, 1, 2], [0, 2, 3]])
    frag = rasterize(verts, tris, cam)
    rays = _rays(cam)
    with np.errstate(divide="ignore"):
        t = -1.0 / rays[..., 1]  # depth where the ray meets y = -1
    hit = rays[..., 1] < 0
    hx = t * rays[..., 0]
    expected = hit & (t >= cam.near) & (t <= 30) & (np.abs(hx) <= 20)
    # Away from the clip / triangle borders the answer is exact.
    border = hit & ((np.abs(t - cam.near) < 0.05) | (np.abs(t - 30) < 1) | (np.abs(hx) > 19))
    np.testing.assert_array_equal(frag.mask[~border], expected[~border])
    assert frag.mask.sum() > 500
    assert np.all(np.isfinite(frag.depth[frag.mask]))
    assert np.all(frag.depth[frag.mask] >= cam.near * (1 - 1e-6))
    np.testing.assert_allclose(frag.depth[frag.mask], t[frag.mask], rtol=1e-5)
    assert not np.isnan(frag.bary).any()
    # Barycentrics refer to the original (unclipped) triangles.
    p = surface_points(frag, tris, verts)
    np.testing.assert_allclose(p[frag.mask][:, 1], -1.0, atol=1e-5)
    np.testing.assert_allclose(-p[frag.mask][:, 2], frag.depth[frag.mask], rtol=1e-5)
    assert np.all(frag.bary[frag.mask] >= -1e-5)


def test_clipped_mesh_has_no_cracks() -> None:
    """A floor grid crossing the near plane: its clipped pieces still tile exactly."""
    cam = _cam(w=48, h=48, f=30.0, near=0.7)
    gx, gz = np.meshgrid(np.linspace(-6, 6, 7), np.linspace(3, -9, 7))
    verts = np.stack([gx.ravel(), np.full(gx.size, -1.0), gz.ravel()], axis=1)
    _, tris = _grid_mesh(6, 6, 0, 0, 1)
    count = _coverage_count(verts, tris, cam)
    rays = _rays(cam)
    with np.errstate(divide="ignore"):
        t = -1.0 / rays[..., 1]
    hit = (rays[..., 1] < 0) & (t >= cam.near) & (t <= 9) & (np.abs(t * rays[..., 0]) <= 6)
    border = (np.abs(t - cam.near) < 1e-6) | (np.abs(t - 9) < 1e-2) | (
        np.abs(np.abs(t * rays[..., 0]) - 6) < 1e-2)
    assert count.max() == 1
    np.testing.assert_array_equal(count[~border] == 1, hit[~border])
    assert hit.sum() > 300
    frag = rasterize(verts, tris, cam)
    np.testing.assert_array_equal(frag.mask, count == 1)
    np.testing.assert_allclose(frag.depth[frag.mask], t[frag.mask], rtol=1e-5)


def _cube() -> tuple[np.ndarray, np.ndarray]:
    v = np.array([[x, y, z] for x in (-1, 1) for y in (-1, 1) for z in (-1, 1)], float)
    quads = [(0, 1, 3, 2), (4, 6, 7, 5), (0, 4, 5, 1), (2, 3, 7, 6), (0, 2, 6, 4), (1, 5, 7, 3)]
    tris = [[q[0], q[1], q[2]] for q in quads] + [[q[0], q[2], q[3]] for q in quads]
    return v, np.array(tris)


@pytest.mark.parametrize("ortho", [False, True])
def test_camera_inside_a_cube(ortho: bool) -> None:
    cam = _cam(w=48, h=40, f=12.0 if not ortho else 30.0, near=0.05, ortho=ortho)
    verts, tris = _cube()
    frag = rasterize(verts, tris, cam)
    assert frag.mask.all()
    assert np.all(np.isfinite(frag.depth)) and not np.isnan(frag.bary).any()
    if ortho:  # every ray goes straight to the z = -1 face
        np.testing.assert_allclose(frag.depth, 1.0, rtol=1e-6)
    else:
        rays = _rays(cam)
        expected = 1.0 / np.maximum(np.abs(rays).max(axis=-1), 1.0)
        np.testing.assert_allclose(frag.depth, expected, rtol=1e-5)
    p = surface_points(frag, tris, verts)
    np.testing.assert_allclose(np.abs(p).max(axis=-1), 1.0, atol=1e-5)


def test_triangles_behind_or_beyond_are_dropped() -> None:
    cam = _cam(near=0.5, far=10.0)
    uv = np.array([[2.0, 2.0], [60.0, 4.0], [10.0, 45.0]])
    behind = _unproject(uv, 0.4, cam)
    beyond = _unproject(uv, 11.0, cam)
    verts = np.concatenate([behind, beyond])
    frag = rasterize(verts, np.array([[0, 1, 2], [3, 4, 5]]), cam)
    assert not frag.mask.any()


# ------------------------------------------------------------------ interpolation


def test_barycentrics_reproduce_the_surface_point() -> None:
    cam = _cam(w=96, h=80, f=90.0)
    v, tris = uv_sphere(24, 16)
    rng = np.random.default_rng(1)
    verts = v * rng.uniform(0.9, 1.1, (len(v), 1)) + [0.1, -0.05, -3.0]
    frag = rasterize(verts, tris, cam)
    m = frag.mask
    assert 0.1 < m.mean() < 0.9
    p = interpolate(frag, verts, tris)
    uv, d = cam.project(p[m].astype(np.float64))
    u, v_ = _centres(cam)
    np.testing.assert_allclose(uv[:, 0], u[m], atol=2e-3)
    np.testing.assert_allclose(uv[:, 1], v_[m], atol=2e-3)
    np.testing.assert_allclose(d, frag.depth[m], rtol=1e-5)
    assert np.all(p[~m] == 0)
    # Per-corner values give the same as per-vertex ones; 1-D values work too.
    np.testing.assert_allclose(interpolate(frag, verts[tris]), p, atol=1e-6)
    ids = interpolate(frag, np.arange(len(verts), dtype=float)[:, None] * 0 + 7.0, tris)
    np.testing.assert_allclose(ids[m], 7.0, rtol=1e-6)
    assert interpolate(frag, verts[:, 0], tris).shape == (80, 96, 1)


@pytest.mark.parametrize("ortho", [False, True])
def test_motion_vectors_of_a_translated_plane(ortho: bool) -> None:
    cam = _cam(w=64, h=48, f=50.0 if not ortho else 20.0, ortho=ortho)
    d = 4.0
    quad = _unproject(np.array([[10.0, 8.0], [50.0, 8.0], [50.0, 40.0], [10.0, 40.0]]), d, cam)
    tris = np.array([[0, 1, 2], [0, 2, 3]])
    frag = rasterize(quad, tris, cam)
    # Move 3 px right and 2 px down in the other frame (v down: y decreases).
    scale = d / cam.fx if not ortho else 1.0 / cam.fx
    moved = quad + [3.0 * scale, -2.0 * scale, 0.0]
    mv = motion_vectors(frag, tris, moved, cam)
    m = frag.mask
    assert m.sum() == 40 * 32
    np.testing.assert_allclose(mv[m], np.broadcast_to([3.0, 2.0], (m.sum(), 2)), atol=1e-4)
    assert np.all(mv[~m] == 0) and mv.dtype == np.float32
    # And the moved plane's own coverage is the shifted rectangle.
    other = rasterize(moved, tris, cam)
    np.testing.assert_array_equal(other.mask[2:, 3:], m[:-2, :-3])


def test_motion_vectors_under_camera_motion() -> None:
    cam = _cam(w=64, h=48)
    v, tris = uv_sphere(16, 10)
    verts_world = v + [0.0, 0.0, -4.0]
    frag = rasterize(verts_world, tris, cam)
    other = _cam(w=64, h=48)
    other.world = np.eye(4)
    other.world[:3, 3] = [0.2, -0.1, 0.3]
    mv = motion_vectors(frag, tris, other.to_camera(verts_world), other)
    p = surface_points(frag, tris, verts_world)[frag.mask].astype(float)
    uv0, _ = cam.project(p)
    uv1, _ = other.project(other.to_camera(p))
    np.testing.assert_allclose(mv[frag.mask], uv1 - uv0, atol=2e-3)


# ---------------------------------------------------------------------- edge cases


def test_empty_scene() -> None:
    cam = _cam()
    for verts, tris in [(np.zeros((0, 3)), np.zeros((0, 3), int)),
                        (np.array([[0, 0, 1.0], [1, 0, 1], [0, 1, 1]]), np.array([[0, 1, 2]])),
                        (np.array([[0, 0, -1.0], [0, 0, -1], [0, 0, -1]]), np.array([[0, 1, 2]]))]:
        frag = rasterize(verts, tris, cam)
        assert frag.depth.shape == (48, 64) and np.all(np.isinf(frag.depth))
        assert np.all(frag.tri == -1) and not frag.mask.any()
        assert np.all(frag.bary == 0) and frag.bary.shape == (48, 64, 3)
        assert np.all(interpolate(frag, np.ones((len(verts), 2)), tris) == 0)
        assert np.all(motion_vectors(frag, tris, verts, cam) == 0)


def test_non_finite_vertices_are_ignored() -> None:
    cam = _cam()
    uv = np.array([[2.0, 2.0], [60.0, 4.0], [10.0, 45.0]])
    verts = np.concatenate([_unproject(uv, 2.0, cam), [[np.nan, 0, -1]]])
    frag = rasterize(verts, np.array([[0, 1, 2], [0, 1, 3]]), cam)
    assert frag.mask.sum() > 100 and set(np.unique(frag.tri)) == {-1, 0}


def test_huge_triangle_covers_the_screen() -> None:
    cam = _cam(w=300, h=200)
    uv = np.array([[-1e5, -1e5], [1e5, -1e5], [0.0, 1e5]])
    frag = rasterize(_unproject(uv, 2.5, cam), np.array([[0, 1, 2]]), cam)
    assert frag.mask.all()
    np.testing.assert_allclose(frag.depth, 2.5, rtol=1e-6)
    # A screen-sized one with its corners on pixel centres: two edges run along the
    # first row and column of centres, where the tie rule decides all-or-nothing.
    uv = np.array([[0.5, 0.5], [299.5, 0.5], [0.5, 199.5]])
    frag = rasterize(_unproject(uv, 2.5, cam), np.array([[0, 1, 2]]), cam)
    u, v = _centres(cam)
    e = np.stack(_edge_inside(uv, u, v))
    e = e * np.sign(_edge_inside(uv, *uv[0])[0])
    assert np.all(frag.mask[(e > 1e-9).all(axis=0)])
    assert not frag.mask[(e < -1e-9).any(axis=0)].any()
    assert len(set(frag.mask[0, 1:-1].tolist())) == 1
    assert len(set(frag.mask[1:-1, 0].tolist())) == 1


def test_batched_z_resolve_and_chunks_give_the_same_result(monkeypatch) -> None:
    from painted_skin.addon.core.passes import raster

    cam = _cam(w=64, h=48, f=60.0)
    v, tris = uv_sphere(20, 12)
    verts = np.concatenate([v + [0, 0, -3.0], v * 3 + [1, 0, -6.0]])
    tris = np.concatenate([tris, tris + len(v)])
    ref = rasterize(verts, tris, cam)
    monkeypatch.setattr(raster, "_FLUSH", 50)
    monkeypatch.setattr(raster, "_CHUNK", 64)
    monkeypatch.setattr(raster, "_TILE", 8)
    monkeypatch.setattr(raster, "_SIDE_CLASS", np.searchsorted(raster._SIDES, np.arange(9)))
    got = rasterize(verts, tris, cam)
    np.testing.assert_array_equal(got.tri, ref.tri)
    np.testing.assert_array_equal(got.depth, ref.depth)
    np.testing.assert_allclose(got.bary, ref.bary, atol=1e-6)


def test_tiny_image() -> None:
    cam = Camera(width=3, height=2, fx=2.0, fy=2.0, cx=1.5, cy=1.0, near=0.1, far=10.0)
    uv = np.array([[-50.0, -50.0], [50.0, -50.0], [0.0, 50.0]])
    frag = rasterize(_unproject(uv, 1.0, cam), np.array([[0, 1, 2]]), cam)
    assert frag.mask.all()


# ------------------------------------------------------------------------ benchmark


@pytest.mark.slow
@pytest.mark.parametrize("tuned", [False, True])
def test_benchmark_sphere_512(tuned: bool) -> None:
    if tuned:  # process-wide; last so that the untuned figure is measured first
        assert tune_allocator() in (True, False)
    v, tris = uv_sphere(128, 130)  # 33,024 triangles
    cam = Camera(width=512, height=512, fx=600.0, fy=600.0, cx=256.0, cy=256.0, near=0.1,
                 far=100.0)
    verts = v * 0.55 + [0.0, 0.0, -2.5]
    frag = rasterize(verts, tris, cam)
    times = []
    for _ in range(10):
        t0 = time.perf_counter()
        rasterize(verts, tris, cam)
        times.append(time.perf_counter() - t0)
    label = "raster (tuned allocator)" if tuned else "raster"
    print(f"{label}: {len(tris)} tris, coverage {frag.mask.mean():.3f}, "
          f"{1e3 * np.median(times):.1f} ms/frame (min {1e3 * min(times):.1f})")
