"""The compiled kernels (addon/core/passes/raster_jit.py) give the numpy path's arrays."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import demo_walk_blend
from painted_skin.addon.core.passes import jit
from painted_skin.addon.core.passes.camera import Camera
from test_raster import _cam, _cube, _grid_mesh, _unproject, uv_sphere

pytestmark = pytest.mark.skipif(not jit.available(), reason="numba is not installed")

PASSES = {"depth", "mask", "normal", "parts", "motion"}


@pytest.fixture
def numpy_path(monkeypatch):
    """Calls made through this fixture's function run the numpy path; all others the
    compiled one (whatever PAINTED_SKIN_JIT says outside the test)."""
    monkeypatch.setenv("PAINTED_SKIN_JIT", "1")

    def run(fn, *args, **kwargs):
        monkeypatch.setenv("PAINTED_SKIN_JIT", "0")
        try:
            return fn(*args, **kwargs)
        finally:
            monkeypatch.setenv("PAINTED_SKIN_JIT", "1")

    return run


def _jit_raster(verts, tris, cam, cullable=None):
    from painted_skin.addon.core.passes import raster_jit
    from painted_skin.addon.core.passes.raster import Fragments

    return Fragments(*raster_jit.rasterize(verts, tris, cam, cullable))


def _assert_same(got, ref, min_equal: float = 1.0) -> None:
    """Same coverage, depths and (but for exact depth ties) triangles / barycentrics."""
    np.testing.assert_array_equal(got.mask, ref.mask)
    np.testing.assert_array_equal(got.depth, ref.depth)
    same = got.tri == ref.tri
    assert same.mean() >= min_equal, same.mean()
    np.testing.assert_allclose(got.bary[same], ref.bary[same], rtol=0, atol=1e-6)
    assert np.all(got.bary[~got.mask] == 0)
    assert got.depth.dtype == np.float32 and got.tri.dtype == np.int32
    assert got.bary.dtype == np.float32


def _soup(rng, cam: Camera, n: int, size: tuple[float, float], depth: tuple[float, float]
          ) -> tuple[np.ndarray, np.ndarray]:
    """n independent triangles of about ``size`` pixels around random image points, at
    random depths (negative ones are behind the camera)."""
    centre = rng.uniform([-0.2 * cam.width, -0.2 * cam.height],
                         [1.2 * cam.width, 1.2 * cam.height], (n, 1, 2))
    scale = np.exp(rng.uniform(*np.log(size), (n, 1, 1)))
    uv = centre + rng.normal(size=(n, 3, 2)) * scale
    d = rng.uniform(*depth, (n, 3))
    verts = _unproject(uv, d, cam)
    return verts.reshape(-1, 3), np.arange(3 * n).reshape(n, 3)


# --------------------------------------------------------------- against the numpy path


@pytest.mark.parametrize("ortho", [False, True])
@pytest.mark.parametrize("seed", range(3))
def test_random_soups_match_numpy(seed: int, ortho: bool, numpy_path) -> None:
    """Tiny to huge triangles, some crossing the near plane or behind the camera, some
    beyond far, degenerate ones, non-finite vertices."""
    from painted_skin.addon.core.passes.raster import rasterize

    cam = _cam(w=96, h=72, f=70.0 if not ortho else 12.0, near=0.3, far=9.0, ortho=ortho)
    rng = np.random.default_rng(seed)
    parts = [_soup(rng, cam, 300, (0.2, 2.0), (0.5, 8.0)),  # sub-pixel and small
             _soup(rng, cam, 200, (2.0, 40.0), (-1.0, 10.0)),  # crossing near / far
             _soup(rng, cam, 5, (1e3, 1e5), (0.2, 12.0))]  # huge
    verts = np.concatenate([p[0] for p in parts])
    tris = np.concatenate([p[1] + sum(len(q[0]) for q in parts[:i])
                           for i, p in enumerate(parts)])
    # Degenerate: repeated vertices, collinear corners; non-finite corners.
    verts = np.concatenate([verts, _unproject(np.array([[5.0, 5.0], [40.0, 30.0],
                                                        [75.0, 55.0]]), 2.0, cam),
                            [[np.nan, 0.0, -1.0], [np.inf, 1.0, -2.0]]])
    v = len(verts)
    tris = np.concatenate([tris, [[v - 5, v - 4, v - 3], [v - 5, v - 5, v - 4],
                                  [v - 2, v - 4, v - 3], [v - 1, v - 4, v - 3]]])
    ref = numpy_path(rasterize, verts, tris, cam)
    got = _jit_raster(verts, tris, cam)
    assert got.mask.mean() > 0.5
    _assert_same(got, ref)
    assert rasterize(verts, tris, cam).tri.tolist() == got.tri.tolist()  # the dispatch


@pytest.mark.parametrize("ortho", [False, True])
def test_closed_meshes_and_camera_inside_match_numpy(ortho: bool, numpy_path) -> None:
    from painted_skin.addon.core.passes.raster import rasterize

    cam = _cam(w=80, h=64, f=60.0 if not ortho else 20.0, near=0.05, ortho=ortho)
    v, tris = uv_sphere(40, 24)
    rng = np.random.default_rng(7)
    verts = np.concatenate([v * rng.uniform(0.95, 1.05, (len(v), 1)) + [0.2, 0.1, -3.0],
                            _cube()[0] * 4.0])  # a box around the camera: clipped all over
    tris = np.concatenate([tris, _cube()[1] + len(v)])
    _assert_same(_jit_raster(verts, tris, cam), numpy_path(rasterize, verts, tris, cam))


@pytest.mark.parametrize("ortho", [False, True])
def test_culling_matches_rasterize_culled(ortho: bool, numpy_path) -> None:
    from painted_skin.addon.blender.passes.render import rasterize_culled

    cam = _cam(w=80, h=64, f=60.0 if not ortho else 25.0, near=0.05, ortho=ortho)
    v, tris = uv_sphere(30, 20)
    verts = np.concatenate([v + [0.3, 0.0, -3.0], v * 0.5 + [-0.5, 0.2, -2.0]])
    tris = np.concatenate([tris, tris[:, ::-1] + len(v)])  # the second one inside out
    cullable = np.repeat([True, False], len(tris) // 2)
    cullable[::7] = ~cullable[::7]
    ref = numpy_path(rasterize_culled, verts, tris, cullable, cam)
    got = _jit_raster(verts, tris, cam, cullable)
    _assert_same(got, ref)
    _assert_same(rasterize_culled(verts, tris, cullable, cam), ref)  # the dispatch
    assert (got.tri != _jit_raster(verts, tris, cam).tri).any()  # culling did something


@pytest.mark.parametrize("flip", [False, True])
def test_shared_edges_cover_each_pixel_once(flip: bool) -> None:
    """Grids through pixel centres and fans on sampled points: drawn one triangle at a
    time, every pixel is covered by at most one (exactly one inside).

    The jitter is a multiple of 1/8 pixel so that the edge functions are exact: at a
    vertex on a pixel centre only exact zeros let the tie rule pick one triangle of
    the fan (rounded ones may pick two or none -- the numpy path alike)."""
    cam = _cam(w=40, h=40)
    rng = np.random.default_rng(5)
    uv, tris = _grid_mesh(6, 6, 4.0, 4.0, 5.0)
    if flip:
        tris[::2] = tris[::2, [0, 2, 1]]
    inner = (uv[:, 0] > 4) & (uv[:, 0] < 34) & (uv[:, 1] > 4) & (uv[:, 1] < 34)
    snap = rng.random(len(uv)) < 0.5
    # jitter below half the distance from a vertex to an opposite edge: no fold-overs
    jitter = rng.integers(-9, 10, uv.shape) / 8
    uv = np.where((inner & ~snap)[:, None], uv + jitter, uv)
    uv = np.where((inner & snap)[:, None], np.floor(uv) + 0.5, uv)
    verts = _unproject(uv, rng.uniform(2, 3, len(uv)), cam)
    count = sum(_jit_raster(verts, tris[i:i + 1], cam).mask.astype(int)
                for i in range(len(tris)))
    jj, ii = np.meshgrid(np.arange(cam.width) + 0.5, np.arange(cam.height) + 0.5)
    assert count.max() == 1
    assert np.all(count[(jj > 4) & (jj < 34) & (ii > 4) & (ii < 34)] == 1)
    np.testing.assert_array_equal(_jit_raster(verts, tris, cam).mask, count == 1)


def test_closed_mesh_front_faces_cover_once() -> None:
    """A closed sphere, back faces culled, crossing the near plane: one triangle per
    covered pixel, no cracks between triangles or between clipped pieces."""
    cam = _cam(w=64, h=64, f=40.0, near=0.5)
    v, tris = uv_sphere(24, 16)
    verts = v * 2.0 + [0.3, -0.2, -2.2]  # the near plane cuts the sphere
    cull = np.ones(len(tris), bool)
    count = sum(_jit_raster(verts, tris[i:i + 1], cam, cull[i:i + 1]).mask.astype(int)
                for i in range(len(tris)))
    whole = _jit_raster(verts, tris, cam, cull)
    assert count.max() == 1 and whole.mask.mean() > 0.3
    np.testing.assert_array_equal(whole.mask, count == 1)


def test_exact_depth_ties_keep_the_first_triangle(numpy_path) -> None:
    """The one documented difference: coincident triangles (equal depths) -- the numpy
    path keeps one of them, the compiled one the lowest index; same depths."""
    from painted_skin.addon.core.passes.raster import rasterize

    cam = _cam()
    verts = _unproject(np.array([[3.0, 2.0], [60.0, 9.0], [20.0, 44.0]]), 2.0, cam)
    tris = np.array([[0, 1, 2], [1, 2, 0], [0, 2, 1]])
    got = _jit_raster(verts, tris, cam)
    ref = numpy_path(rasterize, verts, tris, cam)
    np.testing.assert_array_equal(got.depth, ref.depth)
    assert set(np.unique(got.tri[got.mask])) == {0}


def test_one_compiled_signature_whatever_the_input_dtypes() -> None:
    from painted_skin.addon.core.passes import raster_jit

    cam = _cam()
    verts = _unproject(np.array([[3.0, 2.0], [60.0, 9.0], [20.0, 44.0]]), 2.0, cam)
    for v, t, c in [(verts, np.array([[0, 1, 2]]), None),
                    (verts.astype(np.float32), np.array([[0, 1, 2]], np.int32), [False]),
                    (verts.tolist(), [[0, 1, 2]], np.array([0], np.uint8))]:
        assert raster_jit.rasterize(v, t, cam, c)[1].max() == 0
    assert len(raster_jit._raster.signatures) == 1
    with pytest.raises(IndexError):
        raster_jit.rasterize(verts, np.array([[0, 1, 3]]), cam)


def test_empty_and_tiny_images() -> None:
    from painted_skin.addon.core.passes import raster_jit

    cam = _cam()
    d, t, b = raster_jit.rasterize(np.zeros((0, 3)), np.zeros((0, 3), int), cam)
    assert d.shape == (48, 64) and np.isinf(d).all() and (t == -1).all() and not b.any()
    tiny = Camera(width=3, height=2, fx=2.0, fy=2.0, cx=1.5, cy=1.0, near=0.1, far=10.0)
    uv = np.array([[-50.0, -50.0], [50.0, -50.0], [0.0, 50.0]])
    assert (raster_jit.rasterize(_unproject(uv, 1.0, tiny), [[0, 1, 2]], tiny)[1] == 0).all()
    out = raster_jit.frame_passes(np.zeros((0, 3)), np.zeros((0, 3), int), None, cam,
                                  np.zeros((0, 3, 3), np.float32), np.zeros(0, np.uint8),
                                  [None, None])
    assert np.isinf(out["depth"]).all() and not out["mask"].any()
    assert not out["normal"].any() and not out["parts"].any() and not out["motion"].any()


# ------------------------------------------------------------------ fused frame passes


def _moved(cam: Camera, shift: tuple[float, float, float], yaw: float) -> Camera:
    c, s = np.cos(yaw), np.sin(yaw)
    world = np.array(cam.world, float) @ np.array([[c, 0, s, 0], [0, 1, 0, 0], [-s, 0, c, 0],
                                                  [0, 0, 0, 1]])
    world[:3, 3] += shift
    return Camera(**{**cam.__dict__, "world": world})


def _frame(positions: np.ndarray, tris: np.ndarray, cam: Camera, nrm_dtype=np.float32):
    from painted_skin.addon.blender.passes.geometry import FrameGeometry

    v = positions[tris]
    n = np.cross(v[:, 1] - v[:, 0], v[:, 2] - v[:, 0])
    n /= np.maximum(np.linalg.norm(n, axis=-1, keepdims=True), 1e-12)
    rng = np.random.default_rng(len(positions))
    corner = n[:, None, :] + rng.normal(0, 0.2, (len(tris), 3, 3))  # smooth-ish shading
    corner /= np.linalg.norm(corner, axis=-1, keepdims=True)
    return FrameGeometry(positions, corner.astype(nrm_dtype), cam, None)


@pytest.mark.parametrize("ortho", [False, True])
@pytest.mark.parametrize("nrm_dtype", [np.float32, np.float64])
def test_fast_frame_matches_numpy(ortho: bool, nrm_dtype, numpy_path) -> None:
    """``passes.fast_frame`` through the kernels == through numpy, for every subset of
    passes, with a previous / next frame or without, a next camera behind part of the
    mesh (zero motion there) and a moving, turning camera."""
    from painted_skin.addon.blender.passes.render import fast_frame

    base = Camera(width=72, height=56, fx=60.0 if not ortho else 14.0, fy=60.0 if not ortho
                  else 14.0, cx=36.3, cy=27.9, near=0.1, far=50.0, ortho=ortho,
                  world=np.eye(4))
    cam = _moved(base, (0.2, 0.1, 4.0), 0.1)
    v, tris = uv_sphere(36, 20)
    rng = np.random.default_rng(2)
    pos = v * rng.uniform(0.9, 1.1, (len(v), 1))
    geo = SimpleNamespace(tris=tris.astype(np.int32), cullable=np.ones(len(tris), bool),
                          vertex_parts=rng.integers(0, 20, len(v)).astype(np.uint8))
    g = _frame(pos, tris, cam, nrm_dtype)
    prev = _frame(pos + [0.05, 0.0, 0.0], tris, _moved(base, (0.1, 0.1, 4.1), 0.12),
                  nrm_dtype)
    nxt = _frame(pos * 1.02, tris, _moved(base, (0.0, 0.0, 0.2), -0.3), nrm_dtype)
    for want, p, n in [(PASSES, prev, nxt), (PASSES, None, nxt), ({"normal"}, None, None),
                       ({"parts", "motion"}, prev, None), (set(), None, None)]:
        ref = numpy_path(fast_frame, geo, g, p, n, want)
        got = fast_frame(geo, g, p, n, want)
        assert got.keys() == ref.keys()
        for k in ref:
            assert got[k].dtype == ref[k].dtype and got[k].shape == ref[k].shape, k
        np.testing.assert_array_equal(got["mask"], ref["mask"])
        np.testing.assert_array_equal(got["depth"], ref["depth"])
        if "normal" in want:
            np.testing.assert_allclose(got["normal"], ref["normal"], rtol=0, atol=1e-6)
        if "parts" in want:
            np.testing.assert_array_equal(got["parts"], ref["parts"])
        if "motion" in want:  # relative too: points close to the next camera's eye
            # plane move by hundreds of pixels, where rounding shows more
            np.testing.assert_allclose(got["motion"], ref["motion"], rtol=1e-4, atol=1e-4)
        assert got["mask"].mean() > 0.1
        if want == PASSES and n is not None and not ortho:
            # the next camera is inside the mesh: part of it is behind, motion 0 there
            behind = (ref["motion"][..., 2:] == 0).all(axis=-1) & ref["mask"]
            assert 0 < behind.sum() < ref["mask"].sum()


# ------------------------------------------------------------------ the demo character


@pytest.fixture(scope="module")
def demo_blend(tmp_path_factory) -> Path:
    return demo_walk_blend(tmp_path_factory.mktemp("shot"), frames=24)


def test_demo_frames_match_numpy(bpy_clean, demo_blend, numpy_path) -> None:
    """The real thing at 512x512: the kernels' passes == the numpy path's."""
    from painted_skin.addon.blender.passes.geometry import ShotGeometry
    from painted_skin.addon.blender.passes.render import fast_frame, rasterize_culled

    bpy_clean.ops.wm.open_mainfile(filepath=str(demo_blend))
    geo = ShotGeometry(bpy_clean.context.scene, 512, 512)
    for f in (4, 13):
        g, prev, nxt = geo.frame(f), geo.frame(f - 1), geo.frame(f + 1)
        vc = g.camera.to_camera(g.positions)
        ref = numpy_path(rasterize_culled, vc, geo.tris, geo.cullable, g.camera)
        got = rasterize_culled(vc, geo.tris, geo.cullable, g.camera)
        assert ref.mask.mean() > 0.02
        same = got.tri == ref.tri
        assert same.mean() >= 0.9999
        np.testing.assert_array_equal(got.mask, ref.mask)
        m = ref.mask
        assert np.abs(got.depth[m] / ref.depth[m] - 1).max() <= 1e-6
        a = fast_frame(geo, g, prev, nxt, PASSES)
        b = numpy_path(fast_frame, geo, g, prev, nxt, PASSES)
        np.testing.assert_array_equal(a["mask"], b["mask"])
        assert np.abs(a["depth"][m] / b["depth"][m] - 1).max() <= 1e-6
        # Exact-tie pixels may show another triangle: compare the others.
        s = same & m
        assert np.abs(a["normal"][s] - b["normal"][s]).max() <= 1e-5
        assert np.abs(a["motion"][s] - b["motion"][s]).max() <= 1e-4
        assert (a["parts"][s] == b["parts"][s]).all()


@pytest.mark.slow
def test_benchmark_demo_frame_512(bpy_clean, demo_blend) -> None:
    from painted_skin.addon.blender.passes.geometry import ShotGeometry
    from painted_skin.addon.blender.passes.render import fast_frame
    from painted_skin.addon.core.passes.raster import tune_allocator

    tune_allocator()
    bpy_clean.ops.wm.open_mainfile(filepath=str(demo_blend))
    geo = ShotGeometry(bpy_clean.context.scene, 512, 512)
    frames = [(geo.frame(f), geo.frame(f - 1), geo.frame(f + 1)) for f in range(2, 24)]
    fast_frame(geo, *frames[0], PASSES)  # compile or load from the cache
    times = []
    for g, prev, nxt in frames:
        t0 = time.perf_counter()
        fast_frame(geo, g, prev, nxt, PASSES)
        times.append(time.perf_counter() - t0)
    print(f"fast_frame (compiled, all passes) 512x512: {1e3 * np.median(times):.2f} ms/frame")
