"""Retargeting inside the real Blender: the API, the CLI, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from painted_skin import cli
from painted_skin.addon import motion as gen
from painted_skin.addon.blender.blend_files import save_blend_atomic


@pytest.fixture
def walk_bvh(tmp_path: Path) -> Path:
    return gen.write_clip(tmp_path / "walk.bvh", "walk", frames=48, fps=24, convention="mixamo")


@pytest.fixture
def demo_blend(tmp_path: Path, bpy_clean) -> Path:
    from painted_skin.demo.character import build_demo_character, setup_demo_scene

    arm = build_demo_character()
    setup_demo_scene(arm)
    path = tmp_path / "demo.blend"
    save_blend_atomic(path)
    bpy_clean.ops.wm.read_factory_settings(use_empty=True)
    return path


def world_heads(bpy, arm, frames) -> np.ndarray:
    out = []
    for f in frames:
        bpy.context.scene.frame_set(f)
        mw = np.array(arm.matrix_world)
        heads = np.array([pb.head for pb in arm.pose.bones])
        out.append(heads @ mw[:3, :3].T + mw[:3, 3])
    return np.array(out)


def test_identity_through_blenders_importer(bpy_clean, tmp_path):
    """A clip retargeted onto its own imported skeleton reproduces every joint."""
    from painted_skin.addon.blender.retarget.api import retarget_clip
    from painted_skin.addon.core.retarget.solve import RetargetOptions

    bpy = bpy_clean
    path = gen.write_clip(tmp_path / "jump.bvh", "jump", frames=60, fps=30, convention="cmu")
    bpy.ops.import_anim.bvh(filepath=str(path), global_scale=0.01, rotate_mode="NATIVE",
                            axis_forward="-Z", axis_up="Y")
    arm = bpy.context.object
    original = arm.animation_data.action
    frames = list(range(1, 61, 3))
    before = world_heads(bpy, arm, frames)
    report = retarget_clip(path, arm, options=RetargetOptions(ground="keep", foot_lock=False))
    assert arm.animation_data.action is not original
    after = world_heads(bpy, arm, frames)
    height = np.ptp(before[0][:, 2])
    assert np.abs(after - before).max() <= 1e-4 * height
    assert report.frames == 60 and report.fps == 30


def test_cli_retarget_writes_shot_and_report(demo_blend, walk_bvh, tmp_path, bpy_clean):
    bpy = bpy_clean
    out, rep = tmp_path / "shot.blend", tmp_path / "report.json"
    rc = cli.main(["retarget", "--source", str(walk_bvh), "--target", str(demo_blend),
                   "--out", str(out), "--report", str(rep)])
    assert rc == 0
    report = json.loads(rep.read_text())
    assert report["frames"] == 48 and report["fps"] == 24 and report["seconds"] == 2
    assert report["unmapped_target_core"] == []
    assert report["foot_skate_cm_after"] <= report["foot_skate_cm_before"]
    assert report["source_map"]["confidence"]["hips"] > 0.5
    assert "unmapped" in report["source_map"]["report"]
    bpy.ops.wm.open_mainfile(filepath=str(out))
    scene = bpy.context.scene
    assert (scene.frame_start, scene.frame_end, scene.render.fps) == (1, 48, 24)
    arm = next(o for o in bpy.data.objects if o.type == "ARMATURE")
    action = arm.animation_data.action
    assert action is not None and action.name == "walk"
    from painted_skin.addon.blender.retarget.armature_io import (
        action_channelbag,
        action_frame_range,
    )

    assert action_frame_range(arm) == (1, 48)
    assert len(action_channelbag(arm).fcurves) > 50
    # The walk moves the character forward (-Y) by about a stride per step.
    hips = arm.pose.bones["spine"]
    scene.frame_set(1)
    y0 = (arm.matrix_world @ hips.head).y
    scene.frame_set(48)
    y1 = (arm.matrix_world @ hips.head).y
    assert 1.0 < y0 - y1 < 4.0


def test_cli_batch_folder_makes_one_action_per_clip(demo_blend, tmp_path, bpy_clean):
    clips = tmp_path / "clips"
    clips.mkdir()
    gen.write_clip(clips / "wave.bvh", "wave", frames=24, fps=24)
    gen.write_clip(clips / "sit.bvh", "sit", frames=30, fps=24, convention="apose")
    out = tmp_path / "batch.blend"
    assert cli.main(["retarget", "--source", str(clips), "--target", str(demo_blend),
                     "--out", str(out)]) == 0
    bpy_clean.ops.wm.open_mainfile(filepath=str(out))
    assert {"wave", "sit"} <= set(bpy_clean.data.actions.keys())
    arm = next(o for o in bpy_clean.data.objects if o.type == "ARMATURE")
    assert arm.animation_data.action.name == "wave"  # sorted: sit first, then wave
    assert [t.strips[0].action.name for t in arm.animation_data.nla_tracks] == ["sit"]


def test_demo_command(tmp_path, bpy_clean):
    out = tmp_path / "demo"
    assert cli.main(["demo", "--out", str(out), "--frames", "24", "--kind", "walk",
                     "--no-paint"]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["frames"] == 24 and not report["unmapped_target_core"]
    bpy_clean.ops.wm.open_mainfile(filepath=str(out / "shot.blend"))
    arm = bpy_clean.data.objects["PaintedSkinDemo"]
    from painted_skin.addon.blender.retarget.armature_io import action_channelbag

    paths = {fc.data_path for fc in action_channelbag(arm).fcurves}
    assert any("cape" in p for p in paths)  # the accessory's spring bones are baked too
    assert bpy_clean.context.scene.camera is not None


BAD_BVH = {
    "no_motion.bvh": "HIERARCHY\nROOT Hips\n{\n OFFSET 0 0 0\n CHANNELS 3 Xrotation Yrotation "
                     "Zrotation\n}\n",
    "nan.bvh": "HIERARCHY\nROOT Hips\n{\n OFFSET 0 0 0\n CHANNELS 3 Zrotation Yrotation "
               "Xrotation\n End Site\n {\n  OFFSET 0 1 0\n }\n}\nMOTION\nFrames: 1\n"
               "Frame Time: 0.033\nnan 0 0\n",
}


@pytest.mark.parametrize("name", sorted(BAD_BVH))
def test_cli_bad_clip_exits_2_and_writes_nothing(name, demo_blend, tmp_path, capsys):
    clip = tmp_path / name
    clip.write_text(BAD_BVH[name])
    out = tmp_path / "shot.blend"
    rc = cli.main(["retarget", "--source", str(clip), "--target", str(demo_blend),
                   "--out", str(out), "--report", str(tmp_path / "r.json")])
    assert rc == 2
    err = capsys.readouterr().err
    assert name in err and "error" in err
    assert not out.exists() and not (tmp_path / "r.json").exists()


@pytest.mark.parametrize("args, words", [
    (["--source", "missing.bvh"], "does not exist"),
    (["--source", "{tmp}/clip.txt"], "unsupported type"),
    (["--target", "{tmp}/clip.txt"], "unsupported type"),
])
def test_cli_bad_paths_exit_2(args, words, walk_bvh, demo_blend, tmp_path, capsys):
    (tmp_path / "clip.txt").write_text("not a clip")
    argv = {"--source": str(walk_bvh), "--target": str(demo_blend)}
    argv[args[0]] = args[1].format(tmp=tmp_path)
    rc = cli.main(["retarget", *[x for kv in argv.items() for x in kv]])
    assert rc == 2
    assert words in capsys.readouterr().err


def _scene_state(bpy) -> tuple:
    return (sorted(bpy.data.objects.keys()), sorted(bpy.data.actions.keys()),
            sorted(bpy.data.armatures.keys()), sorted(bpy.data.meshes.keys()))


def test_bad_input_leaves_the_scene_as_it_was(bpy_clean, tmp_path, walk_bvh):
    from painted_skin.addon.blender.retarget.api import RetargetError, retarget_clip
    from painted_skin.demo.character import build_demo_character

    bpy = bpy_clean
    arm = build_demo_character()
    retarget_clip(walk_bvh, arm)
    kept = arm.animation_data.action
    state = _scene_state(bpy)
    broken = tmp_path / "broken.bvh"
    broken.write_text(walk_bvh.read_text().replace("MOTION", "MOTON"))
    truncated = tmp_path / "truncated.bvh"
    truncated.write_text(walk_bvh.read_text()[: len(walk_bvh.read_text()) // 2])
    for bad in (broken, truncated, tmp_path / "nope.bvh"):
        with pytest.raises(RetargetError) as e:
            retarget_clip(bad, arm)
        assert bad.name in str(e.value)
        assert _scene_state(bpy) == state
        assert arm.animation_data.action is kept
    with pytest.raises(RetargetError, match="armature"):
        retarget_clip(walk_bvh, None)


def test_non_humanoid_target_gets_a_clear_error(bpy_clean, walk_bvh):
    from painted_skin.addon.blender.retarget.api import RetargetError, retarget_clip

    bpy = bpy_clean
    data = bpy.data.armatures.new("Snake")
    obj = bpy.data.objects.new("Snake", data)
    bpy.context.scene.collection.objects.link(obj)
    bpy.context.view_layer.objects.active = obj
    bpy.ops.object.mode_set(mode="EDIT")
    parent = None
    for k in range(6):
        b = data.edit_bones.new(f"seg{k}")
        b.head, b.tail, b.parent = (0, k * 0.2, 0.1), (0, (k + 1) * 0.2, 0.1), parent
        parent = b
    bpy.ops.object.mode_set(mode="OBJECT")
    state = _scene_state(bpy)
    with pytest.raises(RetargetError, match="humanoid"):
        retarget_clip(walk_bvh, obj)
    assert _scene_state(bpy) == state


def _curve_arrays(fc, prop: str, width: int, dtype=np.float32) -> np.ndarray:
    out = np.empty(len(fc.keyframe_points) * width, dtype=dtype)
    fc.keyframe_points.foreach_get(prop, out)
    return out.reshape(-1, width) if width > 1 else out


def test_baked_curves_are_linear_keys_with_blenders_own_handles(bpy_clean, walk_bvh):
    """Every curve: one linear key per frame, auto-clamped handles exactly as Blender
    computes them itself (``FCurve.update``), no sample points left over; bones in
    axis-angle or Euler modes get the same pose as in quaternions."""
    from painted_skin.addon.blender.retarget.api import retarget_clip
    from painted_skin.addon.blender.retarget.armature_io import action_channelbag
    from painted_skin.demo.character import build_demo_character

    bpy = bpy_clean
    arm = build_demo_character()
    frames = list(range(1, 49, 5))
    report = retarget_clip(walk_bvh, arm)
    quat_heads = world_heads(bpy, arm, frames)
    modes = {"upper_arm.L": "AXIS_ANGLE", "forearm.L": "XZY", "thigh.R": "YXZ", "spine.001": "ZYX"}
    for bone, mode in modes.items():
        arm.pose.bones[bone].rotation_mode = mode
    retarget_clip(walk_bvh, arm)
    assert np.abs(world_heads(bpy, arm, frames) - quat_heads).max() < 1e-5
    cb = action_channelbag(arm)
    props = {fc.data_path.rsplit(".", 1)[1] for fc in cb.fcurves if "upper_arm.L" in fc.data_path}
    assert props == {"rotation_axis_angle"}
    assert {fc.data_path.rsplit(".", 1)[1] for fc in cb.fcurves
            if '"thigh.R"' in fc.data_path} == {"rotation_euler"}
    linear = bpy.types.Keyframe.bl_rna.properties["interpolation"].enum_items["LINEAR"].value
    auto = bpy.types.Keyframe.bl_rna.properties["handle_left_type"].enum_items[
        "AUTO_CLAMPED"].value
    xs = np.arange(report.frame_start, report.frame_start + report.frames, dtype=np.float32)
    for fc in cb.fcurves:
        co = _curve_arrays(fc, "co", 2)
        assert np.array_equal(co[:, 0], xs)
        assert len(fc.sampled_points) == 0 and fc.group is not None
        assert (_curve_arrays(fc, "interpolation", 1, np.int32) == linear).all()
        assert (_curve_arrays(fc, "handle_left_type", 1, np.int32) == auto).all()
        assert (_curve_arrays(fc, "handle_right_type", 1, np.int32) == auto).all()
        left, right = _curve_arrays(fc, "handle_left", 2), _curve_arrays(fc, "handle_right", 2)
        assert np.array_equal([fc.evaluate(float(x)) for x in xs[::7]], co[::7, 1])
        fc.update()  # Blender sorts the keys and computes the handles itself
        assert np.array_equal(_curve_arrays(fc, "co", 2), co)
        assert np.array_equal(_curve_arrays(fc, "handle_left", 2), left)
        assert np.array_equal(_curve_arrays(fc, "handle_right", 2), right)


def test_a_failure_while_baking_leaves_no_action(bpy_clean, walk_bvh, monkeypatch):
    from painted_skin.addon.blender.retarget import armature_io
    from painted_skin.addon.blender.retarget.api import retarget_clip
    from painted_skin.demo.character import build_demo_character

    bpy = bpy_clean
    arm = build_demo_character()
    retarget_clip(walk_bvh, arm)
    kept, actions = arm.animation_data.action, set(bpy.data.actions.keys())
    calls = []
    real = armature_io.add_curves

    def flaky(*args):
        calls.append(1)
        if len(calls) == 20:
            raise RuntimeError("disk on fire")
        return real(*args)

    monkeypatch.setattr(armature_io, "add_curves", flaky)
    with pytest.raises(RuntimeError, match="disk on fire"):
        retarget_clip(walk_bvh, arm)
    assert set(bpy.data.actions.keys()) == actions
    assert arm.animation_data.action is kept


def test_read_motion_matches_blenders_own_pose(bpy_clean, walk_bvh):
    """read_motion (keys read in bulk; curves whose keys are not on every frame, or
    that carry modifiers, evaluated) gives the pose Blender itself evaluates."""
    from painted_skin.addon.blender.retarget.armature_io import (
        action_channelbag,
        read_motion,
        read_skeleton,
    )

    bpy = bpy_clean
    bpy.ops.import_anim.bvh(filepath=str(walk_bvh), global_scale=0.01, rotate_mode="NATIVE",
                            axis_forward="-Z", axis_up="Y")
    arm = bpy.context.object
    curves = list(action_channelbag(arm).fcurves)
    sparse = next(fc for fc in curves if fc.data_path.endswith("rotation_euler"))
    for k in range(len(sparse.keyframe_points) - 2, 0, -2):  # every other key gone
        sparse.keyframe_points.remove(sparse.keyframe_points[k], fast=True)
    sparse.update()
    next(fc for fc in curves if fc is not sparse
         and fc.data_path.endswith("rotation_euler")).modifiers.new("NOISE")
    skel = read_skeleton(arm)
    motion = read_motion(arm, skel)
    assert motion.frames == 48
    for f in (1, 2, 17, 48):
        bpy.context.scene.frame_set(f)
        ours = motion.pose[f - motion.frame_start]
        theirs = np.array([np.array(arm.pose.bones[n].matrix) for n in skel.names])
        assert np.abs(ours - theirs).max() < 1e-5


def _torso_track(bpy, arm, bones: list[str], frames) -> np.ndarray:
    """World heads (F, len(bones), 3) of the named pose bones, as Blender evaluates them."""
    names = [pb.name for pb in arm.pose.bones]
    return world_heads(bpy, arm, frames)[:, [names.index(b) for b in bones]]


def test_torso_follows_the_clip_or_keeps_the_characters_posture(bpy_clean, tmp_path):
    """On the demo character (6 torso bones, its own rest curve) a CMU-named clip
    (3 spine and 2 neck bones): by default the character's hips -> neck and
    neck -> head point where the clip's do, as Blender evaluates the baked action;
    with keep_posture its own posture stays on top, and the report says which."""
    from painted_skin.addon.blender.retarget.api import retarget_clip
    from painted_skin.addon.core.retarget.solve import RetargetOptions
    from painted_skin.demo.character import DEMO_BONE_MAP, build_demo_character

    bpy = bpy_clean
    path = gen.write_clip(tmp_path / "jump.bvh", "jump", frames=40, fps=30, convention="cmu")
    bpy.ops.import_anim.bvh(filepath=str(path), global_scale=0.01, rotate_mode="NATIVE",
                            axis_forward="-Z", axis_up="Y")
    mocap = bpy.context.object
    arm = build_demo_character()
    opts = RetargetOptions(ground="keep", foot_lock=False)
    frames = list(range(1, 41, 3))
    cmu = gen.CONVENTION_MAPS["cmu"]
    src = _torso_track(bpy, mocap, [cmu[c] for c in ("hips", "neck", "head")], frames)
    tgt_bones = [DEMO_BONE_MAP[c] for c in ("hips", "neck", "head")]
    tracks, reports = {}, {}
    for keep in (False, True):
        reports[keep] = retarget_clip(mocap, arm, options=opts, set_scene=False,
                                      keep_posture=keep)
        tracks[keep] = _torso_track(bpy, arm, tgt_bones, frames)

    def angles(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        a = a / np.linalg.norm(a, axis=-1, keepdims=True)
        b = b / np.linalg.norm(b, axis=-1, keepdims=True)
        return np.degrees(np.arccos(np.clip((a * b).sum(-1), -1.0, 1.0)))

    follow, keep = tracks[False], tracks[True]
    for lo, hi in ((0, 1), (1, 2)):
        err = angles(src[:, hi] - src[:, lo], follow[:, hi] - follow[:, lo])
        assert err.max() < 1.0, err.max()
    assert reports[False].posture == "source" and reports[True].posture == "character"
    assert reports[False].to_dict()["chains"]["hips-neck"] == {
        "source": ["LowerBack", "Spine", "Spine1"],
        "target": ["spine.001", "spine.002", "spine.003"]}
    # The demo's own neck leans on its rest curve: kept, the neck points elsewhere.
    lean = angles(keep[:, 2] - keep[:, 1], follow[:, 2] - follow[:, 1])
    assert lean.min() > 1.0, lean.min()
