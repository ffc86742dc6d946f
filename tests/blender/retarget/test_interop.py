"""The passes as the tools people already use read them: ComfyUI / controlnet_aux
(8-bit RGB PNGs through PIL, OpenPose JSON in 0-1 coordinates) and Nuke / Blender
(EXR channels named for what they hold)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import demo_walk_blend
from painted_skin import cli
from PIL import Image

FRAMES = range(4, 7)
SIZE = (96, 128)  # width, height


@pytest.fixture(scope="module")
def passes(tmp_path_factory) -> Path:
    """The demo walk's ControlNet passes, motion and the normalised OpenPose JSON."""
    import bpy
    from painted_skin.addon.blender.passes.render import PassOptions, make_passes

    folder = tmp_path_factory.mktemp("interop")
    bpy.ops.wm.open_mainfile(filepath=str(demo_walk_blend(folder, frames=12)))
    out = folder / "passes"
    make_passes(bpy.context.scene, PassOptions(
        frames=FRAMES, width=SIZE[0], height=SIZE[1], openpose_normalized=True,
        passes=("depth", "normal", "skeleton", "mask", "motion")), out)
    return out


def comfy_load(path: Path) -> np.ndarray:
    """What ComfyUI's LoadImage and controlnet_aux hand a ControlNet: PIL's RGB."""
    with Image.open(path) as im:
        return np.asarray(im.convert("RGB"))


def exr(path: Path) -> np.ndarray:
    from painted_skin.addon.blender.passes.image_io import read_image

    return read_image(path)


def test_depth8_is_the_shot_stable_depth_at_8_bits_near_white(passes: Path) -> None:
    manifest = json.loads((passes / "manifest.json").read_text())
    assert "depth8/####.png" in manifest["files"]["depth"]
    assert "depth8" in manifest["conventions"]
    for f in FRAMES:
        name = f"{f:04d}.png"
        with Image.open(passes / "depth8" / name) as im:
            assert im.mode == "L"  # 8-bit: ComfyUI reads it as it is
        rgb = comfy_load(passes / "depth8" / name)
        assert rgb.shape == (SIZE[1], SIZE[0], 3)
        assert (rgb == rgb[..., :1]).all()  # grey
        grey = rgb[..., 0].astype(float)
        depth = exr(passes / "depth" / f"{f:04d}.exr")
        on = np.isfinite(depth)
        assert (grey[~on] == 0).all() and (grey[on] >= 1).all()
        assert grey[on].max() - grey[on].min() >= 8  # not a flat image
        # near = white: brightness falls as depth grows
        assert np.corrcoef(grey[on], depth[on])[0, 1] < -0.95
        # the same mapping as depth16 (same shot-fixed near/far), 8 bits (two roundings)
        d16 = exr(passes / "depth16" / name).astype(float)
        assert np.abs(grey[on] - (1 + (d16[on] - 1) * 254 / 65534)).max() <= 0.502


def test_normal_color_reads_as_normalbae_rgb(passes: Path) -> None:
    for f in FRAMES:
        rgb = comfy_load(passes / "normal_color" / f"{f:04d}.png").astype(float)
        n = exr(passes / "normal" / f"{f:04d}.exr")
        on = np.linalg.norm(n, axis=-1) > 0.5
        assert (rgb[~on] == 0).all()
        assert rgb[on].std(axis=0).min() > 5  # not constant in any channel
        # red = left (-x), green = up (+y), blue = towards the viewer (+z)
        for ch, comp in ((0, -n[..., 0]), (1, n[..., 1]), (2, n[..., 2])):
            assert np.corrcoef(rgb[on][:, ch], comp[on])[0, 1] > 0.99


def test_skeleton_drawing_reads_as_coloured_rgb(passes: Path) -> None:
    for f in FRAMES:
        rgb = comfy_load(passes / "skeleton" / f"{f:04d}.png").astype(int)
        lit = rgb.max(axis=-1) > 0
        assert 0.002 < lit.mean() < 0.5  # limbs on black
        spread = rgb.max(axis=-1) - rgb.min(axis=-1)
        assert (spread[lit] > 100).mean() > 0.5  # OpenPose's saturated limb colours


def test_normalised_openpose_is_the_pixel_form_over_the_canvas(passes: Path) -> None:
    manifest = json.loads((passes / "manifest.json").read_text())
    assert "skeleton_normalized/####.json" in manifest["files"]["skeleton"]
    w, h = SIZE
    for f in FRAMES:
        norm = json.loads((passes / "skeleton_normalized" / f"{f:04d}.json").read_text())
        pixel = json.loads((passes / "skeleton_coco18" / f"{f:04d}.json").read_text())
        assert (norm["canvas_width"], norm["canvas_height"]) == (w, h)
        (pn,), (pp,) = norm["people"], pixel["people"]
        assert len(pn["pose_keypoints_2d"]) == 18 * 3
        for key in ("pose_keypoints_2d", "hand_left_keypoints_2d", "face_keypoints_2d"):
            a = np.reshape(pn[key], (-1, 3))
            b = np.reshape(pp[key], (-1, 3))
            seen = b[:, 2] > 0
            assert seen.sum() > 0
            np.testing.assert_allclose(a[:, 2], b[:, 2])
            np.testing.assert_allclose(a[seen, :2] * [w, h], b[seen, :2], atol=1e-3)
            assert (a[~seen] == 0).all()
            assert (a[seen, :2] >= -0.5 / min(w, h)).all() and (a[seen, :2] <= 1).all()
        # as controlnet_aux draws it: int(x * W), int(y * H) lands on the drawn limbs
        drawing = comfy_load(passes / "skeleton" / f"{f:04d}.png").max(axis=-1)
        body = np.reshape(pn["pose_keypoints_2d"], (-1, 3))
        vis = body[:, 2] == 1
        xs, ys = (body[vis, 0] * w).astype(int), (body[vis, 1] * h).astype(int)
        assert (drawing[ys, xs] > 0).mean() > 0.9


def test_normalising_refuses_json_without_a_canvas() -> None:
    from painted_skin.addon.core.openpose.keypoints_json import normalized_openpose

    with pytest.raises(ValueError, match="canvas_width"):
        normalized_openpose({"people": [{"pose_keypoints_2d": [1, 2, 1]}]})


def test_motion_exr_channels_are_named_for_nuke(passes: Path) -> None:
    import OpenEXR
    from painted_skin.addon.blender.passes.image_io import read_motion

    path = passes / "motion" / f"{FRAMES[1]:04d}.exr"
    with OpenEXR.File(str(path), separate_channels=True) as fh:
        names = list(fh.channels())
    assert names == ["backward.u", "backward.v", "forward.u", "forward.v"]
    mv = read_motion(path)
    np.testing.assert_array_equal(mv, exr(path))  # positional readers keep prev, next
    mask = exr(passes / "mask" / f"{FRAMES[1]:04d}.png") > 0
    assert np.abs(mv[mask]).max() > 0.1
    assert not np.allclose(mv[..., :2], mv[..., 2:])  # two different vector fields


def test_motion_files_from_before_the_names_still_read(tmp_path: Path) -> None:
    from painted_skin.addon.blender.passes.image_io import read_motion, write_exr

    mv = np.random.default_rng(1).normal(size=(8, 6, 4)).astype(np.float32)
    write_exr(tmp_path / "old.exr", mv, ["R", "G", "B", "A"])
    np.testing.assert_array_equal(read_motion(tmp_path / "old.exr"), mv)
    write_exr(tmp_path / "depth.exr", mv[..., 0], ["Z"])
    with pytest.raises(ValueError, match="not a motion pass"):
        read_motion(tmp_path / "depth.exr")


def test_a_folder_from_before_depth8_gets_it_on_resume(bpy_clean, tmp_path: Path) -> None:
    from painted_skin.addon.blender.passes.render import PassOptions, make_passes

    shot = demo_walk_blend(tmp_path, frames=6)
    bpy_clean.ops.wm.open_mainfile(filepath=str(shot))
    out = tmp_path / "passes"
    opts = PassOptions(frames=range(2, 4), width=32, height=32, passes=("depth",))
    make_passes(bpy_clean.context.scene, opts, out)
    # what an older version left: no depth8 files and a manifest that does not list them
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["files"]["depth"].remove("depth8/####.png")
    del manifest["conventions"]["depth8"]
    (out / "manifest.json").write_text(json.dumps(manifest))
    for p in (out / "depth8").iterdir():
        p.unlink()
    summary = make_passes(bpy_clean.context.scene, opts, out)
    assert summary["written"] == 2
    assert sorted(p.name for p in (out / "depth8").iterdir()) == ["0002.png", "0003.png"]
    manifest = json.loads((out / "manifest.json").read_text())
    assert "depth8/####.png" in manifest["files"]["depth"]
    assert "depth8" in manifest["conventions"]


def test_cli_openpose_normalized_is_an_option(bpy_clean, tmp_path: Path, capsys) -> None:
    shot = demo_walk_blend(tmp_path, frames=6)
    plain, norm = tmp_path / "plain", tmp_path / "norm"
    args = ["passes", str(shot), "--frames", "2-3", "--size", "48x48", "--passes", "skeleton"]
    assert cli.main([*args, "--out", str(plain)]) == 0
    assert not (plain / "skeleton_normalized").exists()  # the pixel form stays the default
    assert cli.main([*args, "--out", str(norm), "--openpose-normalized"]) == 0
    assert sorted(p.name for p in (norm / "skeleton_normalized").iterdir()) == [
        "0002.json", "0003.json"]
    # asked for later in a folder rendered without it: the missing files are written
    assert cli.main([*args, "--out", str(plain), "--openpose-normalized"]) == 0
    assert len(list((plain / "skeleton_normalized").iterdir())) == 2
    capsys.readouterr()
