"""Retargeting real mocap onto real characters, in the real Blender (bpy 5.0.1).

Clips and characters come from ``../shared/data`` (see its MANIFEST.md); every test
skips when that folder is absent. BVH clips are cut to their first frames (written
into ``tmp_path`` with ``core.bvh``) so the whole file runs in seconds.

What a user relies on, checked on the baked result as Blender evaluates it
(``scene.frame_set`` + pose-bone heads in world space), never on the solver's arrays:
every core joint is mapped, the action is on the character, frames/fps are the
clip's, the character stays upright with its feet on its own floor, walks forward by
a distance in metres, and its limbs point where the mocap's limbs point.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest
from painted_skin.addon.blender import session
from painted_skin.addon.blender.retarget.armature_io import action_channelbag, read_skeleton
from painted_skin.addon.core.bonemap import auto_map
from painted_skin.addon.core.bvh import parse_bvh, write_bvh_clip
from painted_skin.addon.core.retarget.solve import RetargetOptions
from painted_skin.addon.core.rig import humanoid

pytestmark = pytest.mark.shared_data

WALK = "bvh/cmu_motionbuilder_friendly/02_01.bvh"  # CMU 02_01 walk, MotionBuilder names
MJ_WALK = "bvh/cmu_3dsmax_friendly/131_01.bvh"  # 3dsMax names, mixed rotation orders
FBX_JUMP = "fbx_clips/91_48.fbx"  # Poser/DAZ names, 30 fps, 110 frames
HUMAN = "characters/human-male.glb"  # UE-style names (pelvis, thigh_l, ...)
KAYKIT = "characters/kaykit_mannequin/manny_med_mod.gltf"  # upperleg.l / upperleg.r
ROBOT = "characters/RobotExpressive.glb"  # UpperLegL, IK helpers, 14 animations

SHORT = 120  # frames kept from each BVH clip: 1 s at 120 fps
LIMBS = ("leftUpperArm", "rightUpperArm", "leftLowerArm", "rightLowerArm",
         "leftUpperLeg", "rightUpperLeg", "leftLowerLeg", "rightLowerLeg")
# --------------------------------------------------------------------------- helpers
def short_bvh(data: Path, rel: str, out_dir: Path, frames: int = SHORT) -> Path:
    """The clip's first ``frames`` frames, written as a BVH into ``out_dir``."""
    clip = parse_bvh(data / rel)
    path = out_dir / Path(rel).name
    return write_bvh_clip(path, dataclasses.replace(clip, frames=clip.frames[:frames]))


def target_of(report) -> dict[str, str]:
    """canonical joint -> target bone name."""
    return {c: pair[1] for c, pair in report.pairs.items()}


def source_of(report) -> dict[str, str]:
    return {c: pair[0] for c, pair in report.pairs.items()}


def track(bpy, arm, bones: list[str], frames) -> np.ndarray:
    """World-space pose-bone heads (F, len(bones), 3) as Blender evaluates them."""
    scene = bpy.context.scene
    out = np.empty((len(frames), len(bones), 3))
    for k, f in enumerate(frames):
        scene.frame_set(f)
        mw = arm.matrix_world
        for j, name in enumerate(bones):
            out[k, j] = mw @ arm.pose.bones[name].head
    return out


def rest_heads(arm, bones: list[str]) -> np.ndarray:
    mw = arm.matrix_world
    return np.array([tuple(mw @ arm.data.bones[b].head_local) for b in bones])


def clip_frames(report) -> range:
    return range(report.frame_start, report.frame_start + report.frames)


# Each character's foot joints (incl. toes) and their lowest height as imported (its
# floor), by armature name: the engine puts the clip's lowest foot joint there.
FLOOR_AS_IMPORTED: dict[str, tuple[list[str], float]] = {}


def retarget(bpy, clip: Path, character: Path, **options):
    """One clip onto one character in a fresh scene: (report, armature). Records where
    the character's feet stood as imported (importers may leave a root bone posed)."""
    from painted_skin.addon.blender.retarget.api import retarget_clip
    from painted_skin.addon.blender.retarget.importers import import_character

    opts = RetargetOptions(**options) if options else None
    session.reset_scene()
    arm = import_character(character)
    bmap = auto_map(read_skeleton(arm)).bones
    feet = [bmap[c] for c in ("leftFoot", "rightFoot", "leftToes", "rightToes") if c in bmap]
    bpy.context.view_layer.update()
    FLOOR_AS_IMPORTED[arm.name] = (feet, min((arm.matrix_world @ arm.pose.bones[b].head).z
                                             for b in feet))
    report = retarget_clip(clip, arm, options=opts)
    return report, arm


def check_report_and_action(bpy, report, arm, frames: int, fps: float) -> None:
    """Core joints mapped, action baked on the target, frame range and rate right."""
    missing = [c for c in humanoid.CORE if c not in report.pairs]
    assert not missing, f"core joints not mapped: {missing}; pairs: {report.pairs}"
    assert report.unmapped_target_core == []
    for c, (_src, tgt) in report.pairs.items():
        assert tgt in arm.pose.bones, (c, tgt)
    ad = arm.animation_data
    assert ad is not None and ad.action is not None and ad.action.name == report.action
    fcurves = action_channelbag(arm).fcurves
    tmap = target_of(report)
    keyed = {fc.data_path.split('"')[1] for fc in fcurves}
    unkeyed = [c for c in humanoid.CORE if tmap[c] not in keyed]
    assert not unkeyed, f"core joints without keys: {unkeyed}"
    hips_loc = [fc for fc in fcurves if fc.data_path == f'pose.bones["{tmap["hips"]}"].location']
    assert len(hips_loc) == 3, "the hips carry the root motion"
    for fc in fcurves:
        assert len(fc.keyframe_points) == frames
        assert fc.range()[:] == pytest.approx((report.frame_start,
                                               report.frame_start + frames - 1))
    assert report.frames == frames
    assert report.fps == fps
    assert report.seconds == pytest.approx(frames / fps)
    scene = bpy.context.scene
    assert scene.render.fps / scene.render.fps_base == pytest.approx(fps)
    assert (scene.frame_start, scene.frame_end) == (report.frame_start,
                                                    report.frame_start + frames - 1)
    before, after = report.foot_skate_cm_before, report.foot_skate_cm_after
    assert before is not None and after is not None
    assert math.isfinite(before) and math.isfinite(after)
    assert after <= before + 1e-9


def check_upright(bpy, report, arm) -> np.ndarray:
    """Head above hips above both ankles in (almost) every frame; no NaN. Returns the
    evaluated (F, 4, 3) track of hips, head, left and right foot."""
    t = target_of(report)
    pos = track(bpy, arm, [t["hips"], t["head"], t["leftFoot"], t["rightFoot"]],
                clip_frames(report))
    assert np.isfinite(pos).all()
    z = pos[..., 2]
    upright = (z[:, 1] > z[:, 0]) & (z[:, 0] > z[:, 2]) & (z[:, 0] > z[:, 3])
    assert upright.mean() >= 0.9, f"upright in only {upright.mean():.0%} of the frames"
    return pos


def check_on_floor(bpy, report, arm, tol: float = 0.03) -> None:
    """The clip's lowest foot joint meets the character's foot height as imported, and each
    foot stays at the end of its shin (the feet follow the legs)."""
    t = target_of(report)
    feet, floor = FLOOR_AS_IMPORTED[arm.name]
    shins = [t["leftLowerLeg"], t["rightLowerLeg"], t["leftFoot"], t["rightFoot"]]
    pos = track(bpy, arm, feet + shins, clip_frames(report))
    lowest = pos[:, :len(feet), 2].min()
    assert abs(lowest - floor) < tol, f"lowest foot joint {lowest:.3f} m, floor {floor:.3f} m"
    rest = rest_heads(arm, shins)
    leg = pos[:, len(feet):]
    for k, side in enumerate(("left", "right")):
        shin_rest = np.linalg.norm(rest[2 + k] - rest[k])
        shin = np.linalg.norm(leg[:, 2 + k] - leg[:, k], axis=-1)
        assert np.abs(shin - shin_rest).max() < 1e-3, f"{side} foot leaves its shin"


def facing(bpy, report, arm, frames) -> np.ndarray:
    """Horizontal facing per frame: left-hip minus right-hip, crossed with up."""
    t = target_of(report)
    hips = track(bpy, arm, [t["leftUpperLeg"], t["rightUpperLeg"]], frames)
    left = hips[:, 0] - hips[:, 1]
    f = np.cross(left, [0.0, 0.0, 1.0])
    f[:, 2] = 0.0
    return f / np.linalg.norm(f, axis=-1, keepdims=True)


def angle_deg(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a / np.linalg.norm(a, axis=-1, keepdims=True)
    b = b / np.linalg.norm(b, axis=-1, keepdims=True)
    return np.degrees(np.arccos(np.clip((a * b).sum(-1), -1.0, 1.0)))


# --------------------------------------------------------------------------- BVH
CHARACTERS = [
    pytest.param(HUMAN, id="human-male"),
    pytest.param(KAYKIT, id="kaykit"),
    pytest.param(ROBOT, id="robot"),
]


@pytest.mark.parametrize("character", CHARACTERS)
@pytest.mark.parametrize("clip", [WALK, MJ_WALK], ids=["cmu-mobu-02_01", "cmu-max-131_01"])
def test_bvh_clip_onto_character(bpy_clean, shared_data, tmp_path, clip, character):
    """Both CMU namings (one with mixed rotation orders) onto three naming styles."""
    src = short_bvh(shared_data, clip, tmp_path)
    report, arm = retarget(bpy_clean, src, shared_data / character)
    check_report_and_action(bpy_clean, report, arm, frames=SHORT, fps=120.0)
    assert report.frame_start == 1
    # CMU skeletons are ~0.25 m tall at scale 0.01; characters are ~1-3 m.
    assert 1.0 < report.root_scale < 20.0
    check_upright(bpy_clean, report, arm)


@pytest.mark.parametrize("character", [
    pytest.param(HUMAN, id="human-male"),
    pytest.param(KAYKIT, id="kaykit"),
    pytest.param(ROBOT, id="robot"),  # IK-target feet under the root bone
])
def test_bvh_walk_keeps_feet_on_the_floor(bpy_clean, shared_data, tmp_path, character):
    report, arm = retarget(bpy_clean, short_bvh(shared_data, WALK, tmp_path),
                           shared_data / character)
    check_on_floor(bpy_clean, report, arm)


def test_walk_moves_forward_by_metres(bpy_clean, shared_data, tmp_path):
    """1 s of CMU 02_01 walking moves a 1.7 m character about 1.2 m forward: the
    root motion is scaled by leg length, in metres, along the way it faces."""
    src = short_bvh(shared_data, WALK, tmp_path)
    report, arm = retarget(bpy_clean, src, shared_data / HUMAN)
    pos = check_upright(bpy_clean, report, arm)
    travel = pos[-1, 0] - pos[0, 0]
    travel[2] = 0.0
    dist = float(np.linalg.norm(travel))
    assert 0.6 < dist < 2.0, f"walked {dist:.2f} m in {report.seconds:.2f} s"
    # The same distance as the source's hips, scaled by root_scale (BVH: Y up, cm/100).
    bvh = parse_bvh(src)
    hips = bvh.world_positions()[:, bvh.index("Hips")] * 0.01
    src_dist = float(np.linalg.norm((hips[-1] - hips[0])[[0, 2]]))
    assert dist == pytest.approx(report.root_scale * src_dist, rel=0.03)
    heading = facing(bpy_clean, report, arm, clip_frames(report)).mean(axis=0)
    assert float(heading @ travel) / (np.linalg.norm(heading) * dist) > 0.8, "walks sideways"


@pytest.mark.parametrize("foot_lock", [False, True], ids=["free", "foot-lock"])
@pytest.mark.parametrize("clip,character", [
    pytest.param(WALK, HUMAN, id="02_01-human"),
    pytest.param(MJ_WALK, HUMAN, id="131_01-human"),
    pytest.param(MJ_WALK, KAYKIT, id="131_01-kaykit"),
])
def test_limbs_point_like_the_mocap(bpy_clean, shared_data, tmp_path, clip, character,
                                    foot_lock):
    """Upper/lower arms and legs of the character point where the clip's do, read from
    Blender's own BVH import of the same file at the same frames."""
    src = short_bvh(shared_data, clip, tmp_path)
    report, arm = retarget(bpy_clean, src, shared_data / character, foot_lock=foot_lock)
    bpy = bpy_clean
    bpy.ops.import_anim.bvh(filepath=str(src), global_scale=0.01, rotate_mode="NATIVE",
                            axis_forward="-Z", axis_up="Y", update_scene_fps=False,
                            update_scene_duration=False)
    mocap = bpy.context.object
    assert mocap is not arm and mocap.type == "ARMATURE"
    s, t = source_of(report), target_of(report)
    chains = [(c, humanoid.AIM_CHILD[c]) for c in LIMBS]
    frames = [1, 30, 60, 90, SHORT]
    sp = track(bpy, mocap, [s[b] for pair in chains for b in pair], frames)
    tp = track(bpy, arm, [t[b] for pair in chains for b in pair], frames)
    err = angle_deg(sp[:, 1::2] - sp[:, 0::2], tp[:, 1::2] - tp[:, 0::2])  # (F, limbs)
    worst = dict(zip(LIMBS, err.max(axis=0).round(2), strict=True))
    arms = [k for k, c in enumerate(LIMBS) if "Arm" in c]
    assert err[:, arms].max() < 2.0, worst
    # Foot lock bends the legs to pin the feet; without it they match exactly.
    assert err.max() < (8.0 if foot_lock else 2.0), worst


DANCE = "bvh/cmu_motionbuilder_friendly/05_06.bvh"  # CMU 05_06: cartwheel, pirouettes
FBX_TURN = "fbx_clips/91_50.fbx"  # Poser/DAZ names, no upper chest, one neck bone
FEMALE = "characters/human-female.glb"
TORSO = (("torso", "hips", "neck"), ("neck", "neck", "head"))


@pytest.mark.parametrize("clip,character", [
    pytest.param(DANCE, HUMAN, id="05_06-human-male"),
    pytest.param(FBX_TURN, FEMALE, id="91_50-human-female"),
])
def test_torso_and_neck_point_like_the_mocap(bpy_clean, shared_data, tmp_path, clip,
                                             character):
    """The character's torso (hips -> neck) and neck (neck -> head) point where the
    mocap's do, frame by frame as Blender evaluates both, though the rigs' spines
    differ (CMU: 3 spine + 2 neck bones, Poser: 2 + 1, the characters: 3 + 1)."""
    from painted_skin.addon.blender.retarget.api import retarget_clip
    from painted_skin.addon.blender.retarget.importers import import_character, imported_clip

    bpy = bpy_clean
    src = short_bvh(shared_data, clip, tmp_path, frames=600) if clip.endswith(".bvh") \
        else shared_data / clip
    session.reset_scene()
    arm = import_character(shared_data / character)
    with imported_clip(src) as (mocap, _):
        report = retarget_clip(mocap, arm, set_scene=False)
        assert report.posture == "source"
        assert set(report.chains) == {"hips-neck", "neck-head"}
        s, t = source_of(report), target_of(report)
        frames = list(clip_frames(report))[::10]
        joints = ["hips", "neck", "head", "leftUpperArm", "leftLowerArm"]
        sp = track(bpy, mocap, [s[c] for c in joints], frames)
        tp = track(bpy, arm, [t[c] for c in joints], frames)
    errors = {}
    for name, lo, hi in (*TORSO, ("upper arm", "leftUpperArm", "leftLowerArm")):
        a, b = joints.index(lo), joints.index(hi)
        errors[name] = angle_deg(sp[:, b] - sp[:, a], tp[:, b] - tp[:, a])
    summary = {k: (round(float(v.mean()), 2), round(float(v.max()), 2))
               for k, v in errors.items()}
    for name in ("torso", "neck", "upper arm"):
        assert errors[name].mean() < 2.0 and errors[name].max() < 4.0, summary


# --------------------------------------------------------------------------- FBX
@pytest.mark.parametrize("character", [pytest.param(HUMAN, id="human-male"),
                                       pytest.param(KAYKIT, id="kaykit")])
def test_fbx_daz_clip_onto_character(bpy_clean, shared_data, character):
    """Poser/DAZ names (hip, abdomen, lThigh, ...), Blender FBX 7.4, 30 fps."""
    report, arm = retarget(bpy_clean, shared_data / FBX_JUMP, shared_data / character)
    # 110 keys at t = 0 .. 109/30 s (the file's AnimationStack stops at 3.667 s):
    # Blender puts them on frames 1..110 at the file's 30 fps.
    check_report_and_action(bpy_clean, report, arm, frames=110, fps=30.0)
    assert report.seconds == pytest.approx(3.667, abs=1e-3)
    s = source_of(report)
    assert (s["hips"], s["leftUpperLeg"], s["rightLowerLeg"]) == ("hip", "lThigh", "rShin")
    # The file's armature carries Lcl Scaling 100 over centimetre bones: the clip is
    # ~163 Blender units tall, so the leg-length ratio is ~0.01, not a bug.
    assert 0.002 < report.root_scale < 0.05
    pos = check_upright(bpy_clean, report, arm)
    check_on_floor(bpy_clean, report, arm)
    # A jump turn: the hips travel tens of centimetres, not metres x 100.
    travel = np.linalg.norm((pos[-1, 0] - pos[0, 0])[:2])
    assert 0.1 < travel < 2.0
    assert np.ptp(pos[:, 0, 2]) < 1.0


# --------------------------------------------------------------------------- glTF clip
def test_gltf_robot_as_source_clip(bpy_clean, shared_data):
    """RobotExpressive.glb as a clip: the glTF importer makes its first animation
    ('Dance', 81 keys over 3.333 s = 24 fps) the active one and that is what is
    retargeted, from frame 0; the root motion bone is 'Body' (parent of the legs and of
    'Hips', keyed with translation in all 14 animations)."""
    report, arm = retarget(bpy_clean, shared_data / ROBOT, shared_data / HUMAN)
    assert report.frame_start == 0
    check_report_and_action(bpy_clean, report, arm, frames=81, fps=24.0)
    s = source_of(report)
    assert s["hips"] == "Body" and s["spine"] == "Hips"
    assert (s["leftUpperLeg"], s["leftLowerLeg"], s["leftFoot"]) == (
        "UpperLegL", "LowerLegL", "FootL")
    assert report.source_map["confidence"]["hips"] > 0.5
    assert 0.2 < report.root_scale < 1.0  # the robot's bind pose is ~3 m tall
    check_upright(bpy_clean, report, arm)
    check_on_floor(bpy_clean, report, arm)
    # The clip's datablocks are gone: only the character's own objects remain.
    assert [a.name for a in bpy_clean.data.actions] == [report.action]
    assert "RobotArmature" not in bpy_clean.data.objects


def test_fbx_clip_leaves_scene_rate_alone_without_set_scene(bpy_clean, shared_data):
    """Blender's FBX importer sets the scene's fps to the file's; importing a clip for
    its motion must not change the user's scene."""
    from painted_skin.addon.blender.retarget.api import retarget_clip
    from painted_skin.addon.blender.retarget.importers import import_character

    arm = import_character(shared_data / HUMAN)
    render = bpy_clean.context.scene.render
    render.fps, render.fps_base = 25, 1.0
    report = retarget_clip(shared_data / FBX_JUMP, arm, set_scene=False)
    assert report.fps == 30.0  # the clip's own rate is still what is reported
    assert (render.fps, render.fps_base) == (25, 1.0)


def test_gltf_clip_with_many_animations_says_which_one(bpy_clean, shared_data):
    report, _ = retarget(bpy_clean, shared_data / ROBOT, shared_data / HUMAN)
    said = " ".join(report.warnings)
    assert "Dance" in said and "Walking" in said and "--clip-action" in said


def test_gltf_clip_action_can_be_chosen(bpy_clean, shared_data):
    from painted_skin.addon.blender.retarget.api import RetargetError, retarget_clip
    from painted_skin.addon.blender.retarget.importers import import_character

    arm = import_character(shared_data / HUMAN)
    report = retarget_clip(shared_data / ROBOT, arm, clip_action="Walking")
    assert not report.warnings and report.fps == 24.0
    with pytest.raises(RetargetError, match="no animation 'Moonwalk'.*Walking"):
        retarget_clip(shared_data / ROBOT, arm, clip_action="Moonwalk")


# --------------------------------------------------------------------------- CLI
def test_cli_retarget_real_clip(bpy_clean, shared_data, tmp_path, capsys):
    from painted_skin.cli import main

    src = short_bvh(shared_data, MJ_WALK, tmp_path)
    out, rep = tmp_path / "shot.blend", tmp_path / "r.json"
    rc = main(["retarget", "--source", str(src), "--target", str(shared_data / HUMAN),
               "--out", str(out), "--report", str(rep)])
    assert rc == 0, capsys.readouterr().err
    assert out.is_file() and rep.is_file()
    assert "Saved:" in capsys.readouterr().out
    r = json.loads(rep.read_text())
    assert (r["frames"], r["fps"], r["frame_start"]) == (SHORT, 120.0, 1)
    assert r["seconds"] == pytest.approx(1.0)
    assert set(humanoid.CORE) <= set(r["pairs"]) and r["unmapped_target_core"] == []
    for side in ("source_map", "target_map"):
        m = r[side]
        assert set(humanoid.CORE) <= set(m["bones"])
        assert set(m["confidence"]) == set(m["bones"])
        assert all(0.0 < v <= 1.0 for v in m["confidence"].values())
        assert isinstance(m["report"]["unmapped"], list)
    assert r["target_map"]["bones"]["hips"] == "pelvis"
    assert 0.0 <= r["foot_skate_cm_after"] <= r["foot_skate_cm_before"]
    assert r["action"] == "131_01"


def test_cli_batch_folder_of_real_clips(bpy_clean, shared_data, tmp_path, capsys):
    from painted_skin.cli import main

    clips = tmp_path / "clips"
    clips.mkdir()
    short_bvh(shared_data, WALK, clips, frames=60)
    short_bvh(shared_data, MJ_WALK, clips, frames=90)
    out, rep = tmp_path / "shots.blend", tmp_path / "r.json"
    rc = main(["retarget", "--source", str(clips), "--target", str(shared_data / KAYKIT),
               "--out", str(out), "--report", str(rep)])
    assert rc == 0, capsys.readouterr().err
    reports = json.loads(rep.read_text())
    assert [(r["action"], r["frames"]) for r in reports] == [("02_01", 60), ("131_01", 90)]

    bpy = bpy_clean
    bpy.ops.wm.open_mainfile(filepath=str(out))
    arms = [o for o in bpy.data.objects if o.type == "ARMATURE"]
    assert len(arms) == 1
    arm = arms[0]
    assert arm.animation_data.action.name == "131_01"
    stashed = [s.action.name for tr in arm.animation_data.nla_tracks for s in tr.strips]
    assert stashed == ["02_01"]
    assert all(tr.mute for tr in arm.animation_data.nla_tracks)
    assert {"02_01", "131_01"} <= {a.name for a in bpy.data.actions}
    # Both survived the save with their keys.
    from bpy_extras import anim_utils

    for name, frames in (("02_01", 60), ("131_01", 90)):
        act = bpy.data.actions[name]
        cb = anim_utils.action_get_channelbag_for_slot(act, act.slots[0])
        assert len(cb.fcurves) > 0
        assert {len(fc.keyframe_points) for fc in cb.fcurves} == {frames}
