"""Bone map errors a TD can act on: a given map that lacks core joints says so (not
"give a map"), and a mistyped bone name gets the bone of the right side suggested."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from painted_skin.addon.core.bonemap import BoneMap, BoneMapError, bone_side, closest_bone
from painted_skin.addon.core.rig.skeleton import Skeleton

UE = ["root", "pelvis", "spine_01", "thigh_l", "calf_l", "foot_l", "thigh_r", "calf_r",
      "foot_r", "upperarm_l", "upperarm_r", "hand_l", "hand_r", "head"]


def skeleton(names: list[str]) -> Skeleton:
    n = len(names)
    rest = np.broadcast_to(np.eye(4), (n, 4, 4)).copy()
    return Skeleton(names=names, parents=[-1] + [0] * (n - 1), rest=rest, tails=np.zeros((n, 3)))


@pytest.mark.parametrize("name, side", [
    ("thigh_l", "left"), ("thigh_R", "right"), ("upperleg.l", "left"), ("hand.R", "right"),
    ("UpperArmL", "left"), ("LowerLegR", "right"), ("lThigh", "left"), ("RThumb", "right"),
    ("mixamorig:LeftUpLeg", "left"), ("Bip01 R Calf", "right"), ("L_Foot", "left"),
    ("DEF-thigh.L", "left"), ("spine_01", None), ("pelvis", None), ("LowerBack", None),
])
def test_bone_side_reads_every_convention(name, side):
    assert bone_side(name) == side


@pytest.mark.parametrize("typo, canonical, expected", [
    ("thigh_L_typo", "leftUpperLeg", "thigh_l"),  # the reviewer's case (was 'thigh_r')
    ("thigh_L_typo", None, "thigh_l"),  # side from the name itself
    ("THIGH_R", "rightUpperLeg", "thigh_r"),  # case does not matter
    ("thigh", "rightUpperLeg", "thigh_r"),  # side from the joint it is mapped to
    ("Hand_L_old", "leftHand", "hand_l"),
    ("upperarm.r", "rightUpperArm", "upperarm_r"),
    ("pelviss", "hips", "pelvis"),
    ("xyz", "hips", None),
])
def test_closest_bone_is_case_insensitive_and_side_aware(typo, canonical, expected):
    assert closest_bone(typo, UE, canonical) == expected


@pytest.mark.parametrize("names, typo, canonical, expected", [
    (["upperleg.l", "upperleg.r", "lowerleg.l", "lowerleg.r"], "UpperLeg.L.001", "leftUpperLeg",
     "upperleg.l"),
    (["UpperLegL", "UpperLegR", "LowerLegL"], "upperlegl_x", "leftUpperLeg", "UpperLegL"),
    (["LeftUpLeg", "RightUpLeg", "Hips"], "rightupleg2", "rightUpperLeg", "RightUpLeg"),
    (["thigh.L", "thigh.R", "shin.L"], "Thigh.R.typo", "rightUpperLeg", "thigh.R"),
])
def test_closest_bone_across_conventions(names, typo, canonical, expected):
    assert closest_bone(typo, names, canonical) == expected


def test_map_file_typo_suggests_the_same_side_bone(tmp_path: Path):
    path = tmp_path / "typo.toml"
    path.write_text('[bones]\nhips = "pelvis"\nleftUpperLeg = "thigh_L_typo"\n'
                    'rightUpperLeg = "thigh_r"\n')
    with pytest.raises(BoneMapError, match=r"leftUpperLeg = 'thigh_L_typo' \(closest bone: "
                                           r"'thigh_l'\)") as err:
        BoneMap.load(path, skeleton(UE))
    assert "thigh_r'" not in str(err.value)


# --------------------------------------------------------------------------- in Blender


@pytest.fixture
def demo_scene(bpy_clean, tmp_path):
    """The demo character (Rigify-style names: thigh.L, thigh.R) and a generated walk."""
    from painted_skin.addon.motion import write_clip
    from painted_skin.demo.character import build_demo_character

    arm = build_demo_character()
    return arm, write_clip(tmp_path / "walk.bvh", "walk", frames=12, fps=24)


def test_given_map_lacking_core_joints_says_which_and_that_the_file_must_name_them(
        demo_scene, tmp_path):
    from painted_skin.addon.blender.retarget.api import RetargetError, retarget_clip

    arm, clip = demo_scene
    tiny = tmp_path / "tiny.json"
    tiny.write_text(json.dumps({"bones": {"hips": "spine"}}))
    with pytest.raises(RetargetError) as err:
        retarget_clip(clip, arm, target_map=tiny)
    msg = str(err.value)
    assert "Give a bone map file" not in msg and "does not look like a humanoid" not in msg
    assert "'tiny.json'" in msg and "leftUpperLeg, rightUpperLeg" in msg
    assert "must name" in msg
    # ... and what auto-detection would put there
    assert 'leftUpperLeg = "thigh.L"' in msg and 'rightUpperLeg = "thigh.R"' in msg
    assert arm.animation_data is None or arm.animation_data.action is None


def test_given_bone_map_object_lacking_core_joints(demo_scene):
    from painted_skin.addon.blender.retarget.api import RetargetError, retarget_clip

    arm, clip = demo_scene
    with pytest.raises(RetargetError, match=r"the given bone map for the target character has "
                                            r"no rightUpperLeg.*must name"):
        retarget_clip(clip, arm, target_map=BoneMap.from_dict(
            {"bones": {"hips": "spine", "leftUpperLeg": "thigh.L"}}))


def test_auto_detection_failure_still_asks_for_a_map(demo_scene, tmp_path):
    """With no map given, asking for one is the right advice (and names the option)."""
    from painted_skin.addon.blender.retarget.api import RetargetError, retarget_clip
    from painted_skin.addon.core.bvh import write_bvh

    arm, _ = demo_scene
    crane = write_bvh(tmp_path / "crane.bvh", ["Base", "Arm"], [-1, 0],
                      np.array([[0, 0, 0], [0, 20, 0]], float), "ZYX", np.zeros((2, 3)),
                      np.zeros((2, 2, 3)), 1 / 24)
    with pytest.raises(RetargetError, match=r"source clip does not look like a humanoid.*"
                                            r"--map map\.toml"):
        retarget_clip(crane, arm)


def test_cli_tiny_target_map_exits_2_with_the_missing_joints(demo_scene, tmp_path, capsys):
    import bpy
    from painted_skin.addon.blender.blend_files import save_blend_atomic
    from painted_skin.cli import main

    arm, clip = demo_scene
    target = tmp_path / "hero.blend"
    save_blend_atomic(target)
    bpy.ops.wm.read_factory_settings(use_empty=True)
    tiny = tmp_path / "tiny.json"
    tiny.write_text(json.dumps({"bones": {"hips": "spine"}}))
    rc = main(["retarget", "--source", str(clip), "--target", str(target),
               "--target-map", str(tiny)])
    err = capsys.readouterr().err
    assert rc == 2
    assert "tiny.json" in err and "leftUpperLeg, rightUpperLeg" in err
    assert "Give a bone map file" not in err


def test_cli_map_typo_suggests_the_left_bone(demo_scene, tmp_path, capsys):
    import bpy
    from painted_skin.addon.blender.blend_files import save_blend_atomic
    from painted_skin.cli import main

    arm, clip = demo_scene
    target = tmp_path / "hero.blend"
    save_blend_atomic(target)
    bpy.ops.wm.read_factory_settings(use_empty=True)
    typo = tmp_path / "typo.toml"
    typo.write_text('[bones]\nhips = "spine"\nleftUpperLeg = "thigh.l.typo"\n'
                    'rightUpperLeg = "thigh.R"\n')
    rc = main(["retarget", "--source", str(clip), "--target", str(target),
               "--target-map", str(typo)])
    err = capsys.readouterr().err
    assert rc == 2
    assert "closest bone: 'thigh.L'" in err, err


@pytest.mark.shared_data
def test_reviewer_typo_on_human_male_suggests_thigh_l(bpy_clean, shared_data, tmp_path):
    from painted_skin.addon.blender.retarget.api import RetargetError, retarget_clip
    from painted_skin.addon.blender.retarget.importers import import_character
    from painted_skin.addon.motion import write_clip

    arm = import_character(shared_data / "characters/human-male.glb")
    typo = tmp_path / "typo.json"
    typo.write_text(json.dumps({"bones": {"hips": "pelvis", "leftUpperLeg": "thigh_L_typo",
                                          "rightUpperLeg": "thigh_r"}}))
    clip = write_clip(tmp_path / "walk.bvh", "walk", frames=12, fps=24)
    with pytest.raises(RetargetError, match=r"'thigh_L_typo' \(closest bone: 'thigh_l'\)"):
        retarget_clip(clip, arm, target_map=typo)
