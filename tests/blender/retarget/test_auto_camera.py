"""A retargeted shot has no camera: ``passes --camera auto`` (and the panel's Add
Camera) frames the character and follows it, so retarget -> passes chains headless."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from painted_skin import cli
from painted_skin.addon import motion as gen
from painted_skin.addon.blender.blend_files import save_blend_atomic


@pytest.fixture(scope="module")
def camera_less_shot(tmp_path_factory) -> Path:
    import bpy
    from painted_skin.demo.character import build_demo_character

    tmp = tmp_path_factory.mktemp("nocam")
    bpy.ops.wm.read_factory_settings(use_empty=True)
    build_demo_character()
    character = tmp / "character.blend"
    save_blend_atomic(character)
    clip = gen.write_clip(tmp / "walk.bvh", "walk", frames=48, fps=24, convention="mixamo")
    shot = tmp / "shot.blend"
    assert cli.main(["retarget", "--source", str(clip), "--target", str(character),
                     "--out", str(shot)]) == 0
    return shot


def test_retarget_then_passes_with_an_auto_camera(camera_less_shot, tmp_path, capsys,
                                                  bpy_clean) -> None:
    from painted_skin.addon.blender.passes.image_io import read_image

    out = tmp_path / "p"
    assert cli.main(["passes", str(camera_less_shot), "--out", str(out), "--size", "64x64",
                     "--passes", "mask"]) == 2
    assert "--camera auto" in capsys.readouterr().err
    assert cli.main(["passes", str(camera_less_shot), "--camera", "Nope", "--out", str(out),
                     "--size", "64x64", "--passes", "mask"]) == 2
    assert "not a camera" in capsys.readouterr().err
    assert cli.main(["passes", str(camera_less_shot), "--camera", "auto", "--out", str(out),
                     "--size", "64x64", "--passes", "mask"]) == 0
    masks = [read_image(p) > 0 for p in sorted((out / "mask").iterdir())]
    assert len(masks) == 48
    for m in masks:  # the whole walk is framed: in view, not cut, not a speck
        ys, xs = np.nonzero(m)
        assert 0.03 < m.mean() < 0.5
        assert ys.min() > 0 and ys.max() < 63 and xs.min() > 0 and xs.max() < 63
    # the camera follows: the character stays near the middle while it walks away
    cx = [np.nonzero(m)[1].mean() for m in masks]
    assert max(cx) - min(cx) < 16


def test_panel_add_camera(camera_less_shot, bpy_clean) -> None:
    import painted_skin

    bpy = bpy_clean
    bpy.ops.wm.open_mainfile(filepath=str(camera_less_shot))
    scene = bpy.context.scene
    assert scene.camera is None
    scene.frame_set(7)
    painted_skin.register()
    try:
        assert bpy.ops.painted_skin.add_camera() == {"FINISHED"}
        assert bpy.ops.painted_skin.add_camera() == {"FINISHED"}  # again: reused, not doubled
    finally:
        painted_skin.unregister()
    cams = [o for o in bpy.data.objects if o.type == "CAMERA"]
    assert len(cams) == 1 and scene.camera == cams[0] and scene.frame_current == 7


@pytest.mark.parametrize("turn_deg", [0, 90, 180])
def test_the_camera_is_in_front_of_the_character_whichever_way_it_faces(
        camera_less_shot, bpy_clean, turn_deg) -> None:
    import math

    from painted_skin.addon.blender.passes.auto_camera import add_follow_camera
    from painted_skin.addon.blender.retarget.armature_io import read_skeleton
    from painted_skin.addon.core.bonemap import auto_map

    bpy = bpy_clean
    bpy.ops.wm.open_mainfile(filepath=str(camera_less_shot))
    scene = bpy.context.scene
    arm = next(o for o in bpy.data.objects if o.type == "ARMATURE")
    arm.rotation_euler[2] += math.radians(turn_deg)
    cam = add_follow_camera(scene)
    scene.frame_set(scene.frame_start)
    bones = auto_map(read_skeleton(arm)).bones
    head = {k: np.array(arm.matrix_world @ arm.pose.bones[bones[k]].head)
            for k in ("hips", "leftUpperLeg", "rightUpperLeg")}
    left = (head["leftUpperLeg"] - head["rightUpperLeg"])[:2]
    forward = np.array([left[1], -left[0]]) / np.linalg.norm(left)
    to_cam = np.array(cam.matrix_world.translation)[:2] - head["hips"][:2]
    cos = float(forward @ to_cam / np.linalg.norm(to_cam))
    assert cos > 0.7  # three-quarter front (cos 0.85 by design), not from behind
