"""Cycles reference passes (real Cycles, tiny images) and the OpenImageIO wrapper."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
from painted_skin.addon.blender.passes import image_io


# --------------------------------------------------------------------------- helpers
def _camera(bpy, scene, kind: str = "ORTHO", location=(0.0, 0.0, 10.0),
            rotation=(0.0, 0.0, 0.0), ortho_scale: float = 6.4, lens: float = 18.0):
    data = bpy.data.cameras.new("Cam")
    data.type = kind
    data.ortho_scale = ortho_scale
    data.lens = lens
    data.clip_start, data.clip_end = 0.1, 100.0
    cam = bpy.data.objects.new("Cam", data)
    cam.location, cam.rotation_euler = location, rotation
    scene.collection.objects.link(cam)
    scene.camera = cam
    return cam


def _plane(bpy, scene, size: float, location=(0.0, 0.0, 0.0), rotation=(0.0, 0.0, 0.0)):
    h = size / 2
    me = bpy.data.meshes.new("Plane")
    me.from_pydata([(-h, -h, 0), (h, -h, 0), (h, h, 0), (-h, h, 0)], [], [(0, 1, 2, 3)])
    ob = bpy.data.objects.new("Plane", me)
    ob.location, ob.rotation_euler = location, rotation
    scene.collection.objects.link(ob)
    return ob


@pytest.fixture
def passes_mod(bpy_clean):
    from painted_skin.addon.blender.passes import cycles as cycles_passes

    return cycles_passes


# --------------------------------------------------------------------------- motion
def test_flow_convention_pinned_by_known_pixel_shifts(bpy_clean, passes_mod, tmp_path):
    """An orthographic camera at 10 px per metre on a 64x48 image; a 1 m square moves by
    (+6 px u, -4 px v) from frame 1 to 2 and by (+2 px u, -3 px v) from 2 to 3.

    Raw Cycles Vector pass found here (x right, y UP, pixels): (X, Y) = prev - now and
    (Z, W) = now - next, i.e. X,Y,Z,W = (-6, -4, -2, -3) on the square at frame 2.
    """
    bpy = bpy_clean
    scene = bpy.context.scene
    _camera(bpy, scene, "ORTHO", ortho_scale=6.4)  # 64 px / 6.4 m
    sq = _plane(bpy, scene, 1.0)
    # Values at the keys are exact whatever the interpolation; Cycles samples frame +-1.
    for frame, (x, y) in ((1, (0.0, 0.0)), (2, (0.6, 0.4)), (3, (0.8, 0.7))):
        sq.location = (x, y, 0.0)
        sq.keyframe_insert("location", frame=frame)
    p = passes_mod.render_cycles_passes(scene, 2, 64, 48, tmpdir=str(tmp_path))

    # Frame 2: square centred at u = 32 + 6 = 38, v = 24 - 4 = 20 -> cols 33..42, rows 15..24.
    expect = np.zeros((48, 64), bool)
    expect[15:25, 33:43] = True
    mask = p["mask"] > 0.5
    assert mask.sum() == 100
    np.testing.assert_array_equal(mask, expect)
    np.testing.assert_allclose(p["flow_next"][mask], np.tile([2.0, -3.0], (100, 1)), atol=1e-3)
    np.testing.assert_allclose(p["flow_prev"][mask], np.tile([-6.0, 4.0], (100, 1)), atol=1e-3)
    assert not p["flow_next"][~mask].any() and not p["flow_prev"][~mask].any()
    for k in ("flow_prev", "flow_next"):
        assert p[k].shape == (48, 64, 2) and p[k].dtype == np.float32
    # Orthographic depth: the plane is 10 m below the camera; background is +inf.
    np.testing.assert_allclose(p["depth"][mask], 10.0, rtol=1e-6)
    assert np.isposinf(p["depth"][~mask]).all()
    np.testing.assert_allclose(p["normal_camera"][mask], np.tile([0, 0, 1.0], (100, 1)),
                               atol=1e-6)
    assert set(np.unique(p["mask"])) <= {0.0, 1.0}
    assert not os.listdir(tmp_path)  # the temporary EXR folder is gone


# --------------------------------------------------------------------------- geometry
def test_perspective_depth_is_planar_and_normals_camera_space(bpy_clean, passes_mod):
    """A rotated perspective camera 5 m in front of a big plane facing it: depth is 5
    everywhere (planar, not radial: the corners' rays are ~40% longer), the camera-space
    normal is +Z and the world normal is the plane's."""
    bpy = bpy_clean
    scene = bpy.context.scene
    rot = (math.radians(90), 0.0, math.radians(30))
    view = np.array([-math.sin(math.radians(30)), math.cos(math.radians(30)), 0.0])
    target = np.array([0.3, 0.2, 1.0])
    _camera(bpy, scene, "PERSP", location=tuple(target - 5.0 * view), rotation=rot, lens=18)
    _plane(bpy, scene, 40.0, location=tuple(target), rotation=rot)
    p = passes_mod.render_cycles_passes(scene, 1, 48, 32)

    assert p["depth"].shape == (32, 48) and p["depth"].dtype == np.float32
    assert (p["mask"] == 1.0).all()
    np.testing.assert_allclose(p["depth"], 5.0, rtol=1e-5)
    n_cam, n_world = p["normal_camera"], p["normal_world"]
    np.testing.assert_allclose(np.linalg.norm(n_cam, axis=-1), 1.0, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(n_world, axis=-1), 1.0, atol=1e-6)
    np.testing.assert_allclose(n_cam, np.broadcast_to([0, 0, 1.0], n_cam.shape), atol=1e-5)
    np.testing.assert_allclose(n_world, np.broadcast_to(-view, n_world.shape), atol=1e-5)
    # Static scene: no motion.
    assert np.abs(p["flow_prev"]).max() < 1e-4 and np.abs(p["flow_next"]).max() < 1e-4


def test_tilted_plane_matches_pixel_centre_ray_casting(bpy_clean, passes_mod):
    """Depth of a tilted plane equals an analytic ray cast through each pixel centre
    (u = j + 0.5, v = i + 0.5, v down) with the project's camera model: pins the pixel
    convention, the single centred sample and the top-row-first orientation."""
    from mathutils import Vector
    from painted_skin.addon.blender.passes.scene_reader import camera_for

    bpy = bpy_clean
    scene = bpy.context.scene
    _camera(bpy, scene, "PERSP", location=(0.4, -0.3, 6.0), rotation=(0.1, -0.05, 0.2),
            lens=30)
    _plane(bpy, scene, 30.0, rotation=(math.radians(35), math.radians(10), 0.0))
    w, h = 40, 30
    p = passes_mod.render_cycles_passes(scene, 1, w, h)

    scene.render.resolution_x, scene.render.resolution_y = w, h
    cam = camera_for(scene, width=w, height=h)
    jj, ii = np.meshgrid(np.arange(w) + 0.5, np.arange(h) + 0.5)
    rays = np.stack([(jj - cam.cx) / cam.fx, -(ii - cam.cy) / cam.fy, -np.ones_like(jj)], -1)
    plane = bpy.data.objects["Plane"].matrix_world
    n_w = np.array(plane.to_3x3() @ Vector((0, 0, 1)))
    p0_w = np.array(plane.translation)
    n_c = cam.view[:3, :3] @ n_w
    p0_c = cam.to_camera(p0_w)
    t = (p0_c @ n_c) / (rays @ n_c)  # the camera sits at the origin of camera space
    expect_depth = t  # rays have z = -1, so depth = -z = t
    # The one sample lies within 0.005 px of the centre (0.01 px box filter); with this
    # plane's depth slope (<= 0.07 m/px) and float32 ray casting that is < 5e-5 relative.
    np.testing.assert_allclose(p["depth"], expect_depth, rtol=5e-5)
    n_expect = n_c if n_c[2] > 0 else -n_c
    np.testing.assert_allclose(p["normal_camera"].reshape(-1, 3),
                               np.tile(n_expect, (w * h, 1)), atol=1e-5)


def test_square_mask_pixel_count_and_beauty(bpy_clean, passes_mod):
    bpy = bpy_clean
    scene = bpy.context.scene
    _camera(bpy, scene, "ORTHO", ortho_scale=6.4)
    _plane(bpy, scene, 2.0, location=(-1.0, 1.0, 0.0))  # 20x20 px, top-left quadrant
    p = passes_mod.render_cycles_passes(scene, 1, 64, 64, want_beauty=True)
    mask = p["mask"] > 0.5
    assert mask.sum() == 400
    rows, cols = np.nonzero(mask)
    assert (rows.min(), rows.max(), cols.min(), cols.max()) == (12, 31, 12, 31)
    assert p["beauty"].shape == (64, 64, 4)
    np.testing.assert_array_equal(p["beauty"][..., 3], p["mask"])


# --------------------------------------------------------------------------- settings
def _snapshot(scene) -> dict:
    r, c, im, vl = scene.render, scene.cycles, scene.render.image_settings, scene.view_layers[0]
    return {
        "engine": r.engine, "samples": c.samples, "adaptive": c.use_adaptive_sampling,
        "denoise": c.use_denoising, "filter": c.filter_width, "filter_type": c.pixel_filter_type,
        "seed": c.seed, "bounces": c.max_bounces, "res": (r.resolution_x, r.resolution_y),
        "pct": r.resolution_percentage, "transparent": r.film_transparent,
        "mblur": r.use_motion_blur, "media": im.media_type, "format": im.file_format,
        "depth": im.color_depth, "codec": im.exr_codec, "path": r.filepath,
        "compositing": r.use_compositing,
        "passes": (vl.use_pass_z, vl.use_pass_normal, vl.use_pass_vector),
        "frame": scene.frame_current,
    }


def _dirty_scene(bpy, scene):
    r = scene.render
    r.engine = "BLENDER_WORKBENCH"
    scene.cycles.samples, scene.cycles.filter_width, scene.cycles.max_bounces = 37, 1.7, 5
    r.resolution_x, r.resolution_y, r.resolution_percentage = 300, 200, 50
    r.film_transparent, r.use_motion_blur = False, True
    r.image_settings.file_format = "JPEG"
    r.filepath = "//elsewhere/frame_"
    scene.frame_set(7)


def test_settings_restored_after_render_and_after_error(bpy_clean, passes_mod):
    bpy = bpy_clean
    scene = bpy.context.scene
    _dirty_scene(bpy, scene)
    before = _snapshot(scene)
    # Error inside the render set-up: no camera yet.
    with pytest.raises(ValueError, match="camera"):
        passes_mod.render_cycles_passes(scene, 3, 16, 16)
    assert _snapshot(scene) == before
    # Bad sizes are refused before anything changes.
    with pytest.raises(ValueError):
        passes_mod.render_cycles_passes(scene, 3, 0, 16)
    assert _snapshot(scene) == before
    _camera(bpy, scene, "ORTHO")
    _plane(bpy, scene, 1.0)
    p = passes_mod.render_cycles_passes(scene, 3, 16, 16)
    assert p["mask"].sum() > 0
    assert _snapshot(scene) == before


# --------------------------------------------------------------------------- image io
def test_exr_round_trip_and_orientation(tmp_path, bpy_clean):
    rng = np.random.default_rng(1)
    a = rng.normal(size=(5, 7, 3)).astype(np.float32)
    a[0] = 1e6  # distinctive top row
    image_io.write_exr(tmp_path / "a.exr", a)
    b = image_io.read_image(tmp_path / "a.exr")
    assert b.dtype == np.float32
    np.testing.assert_array_equal(a, b)
    depth = np.full((4, 6), np.inf, np.float32)
    depth[0, :2] = 2.5
    image_io.write_exr(tmp_path / "d.exr", depth, ["depth.Z"])
    layers = image_io.read_exr_layers(tmp_path / "d.exr")
    assert list(layers) == ["depth.Z"]
    np.testing.assert_array_equal(layers["depth.Z"], depth)
    flow = rng.normal(size=(3, 4, 2)).astype(np.float32)
    image_io.write_exr(tmp_path / "f.exr", flow, ["flow.u", "flow.v"])
    layers = image_io.read_exr_layers(tmp_path / "f.exr")
    np.testing.assert_array_equal(np.stack([layers["flow.u"], layers["flow.v"]], -1), flow)
    assert sorted(os.listdir(tmp_path)) == ["a.exr", "d.exr", "f.exr"]


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16])
@pytest.mark.parametrize("channels", [None, 2, 3, 4])
def test_png_round_trip(tmp_path, dtype, channels):
    rng = np.random.default_rng(2)
    shape = (6, 9) if channels is None else (6, 9, channels)
    a = rng.integers(0, np.iinfo(dtype).max, size=shape, endpoint=True).astype(dtype)
    if channels in (2, 4):
        a[..., -1] = 0  # colour under zero alpha survives (no premultiplication)
        a[0, 0, -1] = np.iinfo(dtype).max
    image_io.write_png(tmp_path / "p.png", a)
    b = image_io.read_image(tmp_path / "p.png")
    assert b.dtype == dtype and b.shape == a.shape
    np.testing.assert_array_equal(a, b)


def test_png_top_row_first_as_blender_sees_it(tmp_path, bpy_clean):
    """Blender's Image.pixels are bottom-up: our row 0 is its last row."""
    a = np.zeros((4, 3, 4), np.uint8)
    a[..., 3] = 255
    a[0, :, 0] = 255  # top row red
    image_io.write_png(tmp_path / "o.png", a)
    img = bpy_clean.data.images.load(str(tmp_path / "o.png"))
    px = np.array(img.pixels[:], np.float32).reshape(4, 3, 4)
    assert (px[-1, :, 0] == 1.0).all() and (px[:-1, :, 0] == 0.0).all()


def test_failed_write_leaves_nothing(tmp_path, monkeypatch):
    target = tmp_path / "x.png"
    with pytest.raises(ValueError):
        image_io.write_png(target, np.zeros((4, 4), np.float32))
    with pytest.raises(ValueError):
        image_io.write_exr(tmp_path / "x.exr", np.zeros((2, 2, 2, 2)))
    assert not os.listdir(tmp_path)

    image_io.write_png(target, np.full((4, 4), 7, np.uint8))

    def boom(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(image_io.os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        image_io.write_png(target, np.full((4, 4), 9, np.uint8))
    with pytest.raises(OSError, match="disk full"):
        image_io.write_exr(tmp_path / "y.exr", np.zeros((4, 4), np.float32))
    monkeypatch.undo()
    assert sorted(os.listdir(tmp_path)) == ["x.png"]  # no temp files, no y.exr
    assert (image_io.read_image(target) == 7).all()  # the old file is untouched
    with pytest.raises(OSError):
        image_io.write_exr(tmp_path / "missing" / "z.exr", np.zeros((2, 2), np.float32))
