"""Control passes: files, manifest, resume, bad input, and fast == cycles."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import demo_walk_blend
from painted_skin import cli


@pytest.fixture(scope="module")
def shot_blend(tmp_path_factory) -> Path:
    """The demo character walking (24 frames), camera following: a real shot."""
    return demo_walk_blend(tmp_path_factory.mktemp("shot"), frames=24)


def open_shot(bpy, path: Path):
    bpy.ops.wm.open_mainfile(filepath=str(path))
    return bpy.context.scene


def read(path: Path) -> np.ndarray:
    from painted_skin.addon.blender.passes.image_io import read_image

    return read_image(path)


def test_fast_passes_files_manifest_and_resume(bpy_clean, shot_blend, tmp_path):
    from painted_skin.addon.blender.passes.render import PassOptions, make_passes

    scene = open_shot(bpy_clean, shot_blend)
    out = tmp_path / "passes"
    opts = PassOptions(frames=range(3, 7), width=96, height=64)
    summary = make_passes(scene, opts, out)
    assert summary["written"] == 4
    manifest = json.loads((out / "manifest.json").read_text())
    assert (manifest["width"], manifest["height"]) == (96, 64)
    assert manifest["near"] < manifest["far"]
    assert "flow" in json.dumps(manifest["conventions"]) or "motion" in manifest["conventions"]
    for f in range(3, 7):
        depth = read(out / "depth" / f"{f:04d}.exr")
        assert depth.shape[:2] == (64, 96)
        mask = read(out / "mask" / f"{f:04d}.png")
        assert 0 < (mask > 0).mean() < 0.9  # the character is in view, not filling it
        cam = json.loads((out / "camera" / f"{f:04d}.json").read_text())["camera"]
        assert len(cam["K"]) == 3 and len(cam["world"]) == 4
    # Resume: nothing to do; a removed file brings back exactly its frame.
    again = make_passes(scene, opts, out)
    assert (again["written"], again["done"]) == (0, 4)
    (out / "normal" / "0005.exr").unlink()
    stamp = {p: p.stat().st_mtime_ns for p in out.rglob("*.png")}
    make_passes(scene, opts, out)
    assert (out / "normal" / "0005.exr").exists()
    changed = {p.parent.name + "/" + p.name for p, t in stamp.items() if p.stat().st_mtime_ns != t}
    assert changed and all(name.endswith("0005.png") for name in changed)


def test_chunks_share_one_depth_range(bpy_clean, shot_blend, tmp_path):
    """Farm chunks of one shot quantise depth the same way (no flicker)."""
    from painted_skin.addon.blender.passes.render import PassOptions, make_passes

    scene = open_shot(bpy_clean, shot_blend)
    a = make_passes(scene, PassOptions(frames=range(1, 3), width=32, height=32,
                                       passes=("depth",)), tmp_path / "a")
    b = make_passes(scene, PassOptions(frames=range(20, 22), width=32, height=32,
                                       passes=("depth",)), tmp_path / "b")
    assert (a["near"], a["far"]) == (b["near"], b["far"])


def test_other_settings_into_the_same_folder_are_refused(bpy_clean, shot_blend, tmp_path):
    from painted_skin.addon.blender.passes.geometry import ShotError
    from painted_skin.addon.blender.passes.render import PassOptions, make_passes

    scene = open_shot(bpy_clean, shot_blend)
    make_passes(scene, PassOptions(frames=range(1, 2), width=32, height=32, passes=("mask",)),
                tmp_path)
    with pytest.raises(ShotError, match="width"):
        make_passes(scene, PassOptions(frames=range(1, 2), width=48, height=32,
                                       passes=("mask",)), tmp_path)


@pytest.mark.parametrize("kwargs, words", [
    ({"frames": range(5, 5)}, "empty or reversed"),
    ({"width": 100000}, "outside"),
    ({"width": 4}, "outside"),
    ({"passes": ("depth", "sparkles")}, "unknown pass"),
    ({"passes": ("beauty",), "beauty_samples": 0}, "beauty samples"),
    ({"engine": "eevee"}, "unknown"),
])
def test_bad_options_are_refused_before_anything_is_written(kwargs, words, bpy_clean,
                                                             shot_blend, tmp_path):
    from painted_skin.addon.blender.passes.geometry import ShotError
    from painted_skin.addon.blender.passes.render import PassOptions, make_passes

    scene = open_shot(bpy_clean, shot_blend)
    opts = PassOptions(**{"frames": range(1, 3), "width": 32, "height": 32, **kwargs})
    with pytest.raises(ShotError, match=words):
        make_passes(scene, opts, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_no_camera_and_camera_inside_the_mesh(bpy_clean, shot_blend, tmp_path):
    from painted_skin.addon.blender.passes.geometry import ShotError
    from painted_skin.addon.blender.passes.render import PassOptions, make_passes

    scene = open_shot(bpy_clean, shot_blend)
    cam = scene.camera
    scene.camera = None
    with pytest.raises(ShotError, match="no camera"):
        make_passes(scene, PassOptions(frames=range(1, 2), width=32, height=32), tmp_path / "a")
    scene.camera = cam
    cam.constraints.clear()
    cam.location = (0.0, 0.0, 1.2)  # inside the chest
    with pytest.raises(ShotError, match="inside"):
        make_passes(scene, PassOptions(frames=range(1, 2), width=32, height=32), tmp_path / "b")
    assert not list((tmp_path / "b").glob("*/0001.*"))


def test_cli_passes_and_bad_input(shot_blend, tmp_path, capsys, bpy_clean):
    out = tmp_path / "p"
    rc = cli.main(["passes", str(shot_blend), "--frames", "2-3", "--size", "64x48",
                   "--passes", "depth,mask,motion", "--out", str(out)])
    assert rc == 0
    assert sorted(p.name for p in (out / "motion").iterdir()) == ["0002.exr", "0003.exr"]
    assert capsys.readouterr().out.count("Saved: '") == 2  # a farm manager's per-frame line
    assert cli.main(["passes", str(shot_blend), "--frames", "9-3", "--out", str(out)]) == 2
    assert "reversed" in capsys.readouterr().err
    assert cli.main(["passes", str(tmp_path / "none.blend"), "--out", str(out)]) == 2


def test_fast_motion_vectors_pin_sign_and_order(bpy_clean, tmp_path):
    """An object moving +8 px right and 4 px up per frame, seen by an ortho camera."""
    from painted_skin.addon.blender.passes.render import PassOptions, make_passes

    bpy = bpy_clean
    scene = bpy.context.scene
    bpy.ops.mesh.primitive_plane_add(size=1.0, location=(0, 0, 0))
    plane = bpy.context.object
    cam_data = bpy.data.cameras.new("cam")
    cam_data.type = "ORTHO"
    cam_data.ortho_scale = 4.0  # 64 px over 4 m: 16 px per metre
    cam = bpy.data.objects.new("cam", cam_data)
    cam.location = (0, 0, 5)
    scene.collection.objects.link(cam)
    scene.camera = cam
    for f, x, y in ((1, -0.5, 0.0), (2, 0.0, 0.25), (3, 0.5, 0.5)):
        plane.location = (x, y, 0)
        plane.keyframe_insert("location", frame=f)
    for fc in plane.animation_data.action.layers[0].strips[0].channelbags[0].fcurves:
        for k in fc.keyframe_points:
            k.interpolation = "LINEAR"
    make_passes(scene, PassOptions(frames=range(2, 3), width=64, height=64,
                                   passes=("mask", "motion")), tmp_path)
    mv = read(tmp_path / "motion" / "0002.exr")
    mask = read(tmp_path / "mask" / "0002.png") > 0
    assert mask.sum() == 16 * 16
    prev, nxt = mv[mask][:, :2], mv[mask][:, 2:]
    assert np.allclose(nxt, [8.0, -4.0], atol=1e-3)  # next: right and up (v down)
    assert np.allclose(prev, [-8.0, 4.0], atol=1e-3)
    from painted_skin.addon.blender.passes.image_io import read_motion

    np.testing.assert_array_equal(read_motion(tmp_path / "motion" / "0002.exr"), mv)


def test_panel_operators_render_and_preview(bpy_clean, shot_blend, tmp_path):
    """The Passes section: the operator writes the scene's range; preview fills an image."""
    import painted_skin

    bpy = bpy_clean
    open_shot(bpy, shot_blend)
    painted_skin.register()
    try:
        scene = bpy.context.scene
        scene.frame_start, scene.frame_end = 3, 4
        s = scene.painted_skin_passes
        s.width, s.height, s.out_dir = 48, 32, str(tmp_path / "ui")
        s.use_parts = False
        assert bpy.ops.painted_skin.render_passes() == {"FINISHED"}
        assert sorted(p.name for p in (tmp_path / "ui" / "normal").iterdir()) == [
            "0003.exr", "0004.exr"]
        assert s.last_report.startswith("passes: 2/2 frames")  # stays under the button
        assert str(tmp_path / "ui") in s.last_report
        assert not (tmp_path / "ui" / "parts").exists()
        s.preview = "parts"
        assert bpy.ops.painted_skin.preview_pass() == {"FINISHED"}
        img = bpy.data.images["Painted Skin Preview"]
        px = np.empty(48 * 32 * 4, np.float32)
        img.pixels.foreach_get(px)
        assert tuple(img.size) == (48, 32) and px.reshape(-1, 4)[:, :3].max() > 0.1
        s.width = 64  # other settings into the same folder: refused with a message
        with pytest.raises(RuntimeError, match="width=48"):
            bpy.ops.painted_skin.render_passes()
    finally:
        painted_skin.unregister()


def test_no_armature_skips_the_skeleton_with_a_warning(bpy_clean, tmp_path):
    """A shot without a humanoid rig still gets every other pass."""
    from painted_skin.addon.blender.passes.render import PassOptions, make_passes

    bpy = bpy_clean
    scene = bpy.context.scene
    bpy.ops.mesh.primitive_uv_sphere_add(radius=0.5, location=(0, 0, 0))
    cam = bpy.data.objects.new("cam", bpy.data.cameras.new("cam"))
    cam.location = (0, -4, 0)
    cam.rotation_euler = (1.5708, 0, 0)
    scene.collection.objects.link(cam)
    scene.camera = cam
    summary = make_passes(scene, PassOptions(frames=range(1, 3), width=32, height=32),
                          tmp_path)
    assert any("skeleton pass is skipped" in w for w in summary["warnings"])
    assert read(tmp_path / "mask" / "0001.png").any()
    data = json.loads((tmp_path / "skeleton" / "0001.json").read_text())
    assert data["people"] == []
    assert not read(tmp_path / "skeleton" / "0001.png").any()


def test_cycles_engine_writes_beauty_with_straight_alpha(bpy_clean, shot_blend, tmp_path):
    from painted_skin.addon.blender.passes.render import PassOptions, make_passes

    scene = open_shot(bpy_clean, shot_blend)
    make_passes(scene, PassOptions(frames=range(3, 4), width=48, height=48, engine="cycles",
                                   passes=("mask", "beauty", "depth")), tmp_path)
    beauty = read(tmp_path / "beauty" / "0003.png")
    mask = read(tmp_path / "mask" / "0003.png") > 127
    assert beauty.shape == (48, 48, 4) and beauty.dtype == np.uint8
    # The beauty is filtered (the scene's pixel filter): its edge spreads a pixel or two
    # past the passes' centred-sample mask, and no further.
    near = mask.copy()
    for _ in range(2):
        near = near | np.roll(near, 1, 0) | np.roll(near, -1, 0) | np.roll(near, 1, 1) \
            | np.roll(near, -1, 1)
    assert (beauty[..., 3][mask] > 127).mean() > 0.95 and (beauty[..., 3][~near] < 128).all()
    assert beauty[..., :3][mask].mean() > 5  # lit colours, not black


def test_beauty_is_a_render_at_the_training_target(bpy_clean, shot_blend, tmp_path):
    """``passes --passes beauty`` (either engine) renders Cycles at the skin model's
    training target (16 samples, denoised) and says so in the manifest: far closer to a
    converged render than the passes' one sample, which it once was."""
    from painted_skin.addon.blender.passes.render import PassOptions, make_passes

    scene = open_shot(bpy_clean, shot_blend)

    def beauty(folder: str, **kw) -> np.ndarray:
        make_passes(scene, PassOptions(frames=range(3, 4), width=48, height=48,
                                       passes=("mask", "beauty"), **kw), tmp_path / folder)
        return read(tmp_path / folder / "beauty" / "0003.png").astype(float)

    target = beauty("target")
    manifest = json.loads((tmp_path / "target" / "manifest.json").read_text())
    assert manifest["beauty"] == {"renderer": "CYCLES", "samples": 16, "denoise": True}
    assert "16 denoised" in manifest["conventions"]["beauty"]
    converged = beauty("converged", beauty_samples=256)
    one = beauty("one", beauty_samples=1, beauty_denoise=False)
    mask = read(tmp_path / "target" / "mask" / "0003.png") > 127
    err_target = np.abs(target - converged)[..., :3][mask].mean()
    err_one = np.abs(one - converged)[..., :3][mask].mean()
    assert err_target < 0.5 * err_one, (err_target, err_one)
    # A re-run asking the folder for other beauty settings is refused, nothing rewritten.
    from painted_skin.addon.blender.passes.geometry import ShotError

    with pytest.raises(ShotError, match="beauty"):
        make_passes(scene, PassOptions(frames=range(3, 5), width=48, height=48,
                                       passes=("mask", "beauty"), beauty_samples=4),
                    tmp_path / "target")


def test_beauty_puts_back_an_exr_output_and_a_look(bpy_clean, shot_blend, tmp_path):
    """The beauty render's settings come back whole: a 32-bit EXR output and a view
    transform's look (Blender refuses a depth or look before their format or view)."""
    from painted_skin.addon.blender.passes.render import PassOptions, make_passes

    scene = open_shot(bpy_clean, shot_blend)
    im, vs = scene.render.image_settings, scene.view_settings
    im.file_format, im.color_depth = "OPEN_EXR", "32"
    vs.view_transform = "AgX"
    looks = [k for k in vs.bl_rna.properties["look"].enum_items.keys() if "AgX" in k]
    if looks:
        vs.look = looks[0]
    before = (im.file_format, im.color_depth, vs.view_transform, vs.look,
              scene.render.engine, scene.render.resolution_x)
    make_passes(scene, PassOptions(frames=range(3, 4), width=48, height=48,
                                   passes=("mask", "beauty")), tmp_path)
    assert (im.file_format, im.color_depth, vs.view_transform, vs.look,
            scene.render.engine, scene.render.resolution_x) == before


def test_back_face_culling_only_for_closed_outward_meshes():
    from painted_skin.addon.blender.passes.geometry import outward_closed

    # A tetrahedron wound outwards, the same inside out, and an open fan.
    pos = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1]], float)
    tet = np.array([[0, 2, 1], [0, 1, 3], [0, 3, 2], [1, 2, 3]])
    assert outward_closed(tet, pos)
    assert not outward_closed(tet[:, ::-1], pos)
    assert not outward_closed(tet[:3], pos)
