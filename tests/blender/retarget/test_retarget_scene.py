"""The Retarget button keeps the animator's frame rate and start frame: it resamples the
clip to that rate (same duration, the source pose at coincident times) and ends the
scene's range where the clip ends (Render Passes renders the action, not a stale range);
"Match Scene to Clip" does what the CLI does. A clip that lacks core joints says which
bones stay at rest.

Checked on the baked action as Blender evaluates it (``scene.frame_set`` + pose-bone
heads in world space). The synthetic tests run everywhere; the ones on real clips and
characters skip when ``../shared/data`` is absent.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from painted_skin.addon.core.rig import humanoid

WALK = "bvh/cmu_motionbuilder_friendly/02_01.bvh"  # 343 frames at 120 fps, 2.86 s
HUMAN = "characters/human-male.glb"
ARMS = ("leftShoulder", "leftUpperArm", "leftLowerArm", "leftHand",
        "rightShoulder", "rightUpperArm", "rightLowerArm", "rightHand")
CORE_ARMS = [c for c in humanoid.CORE if c in ARMS]


@pytest.fixture
def addon(bpy_clean):
    import painted_skin

    painted_skin.register()
    try:
        yield bpy_clean
    finally:
        painted_skin.unregister()


def set_scene(bpy, fps: float, start: int, end: int) -> None:
    scene = bpy.context.scene
    scene.render.fps, scene.render.fps_base = int(fps), 1.0
    scene.frame_start, scene.frame_end = start, end


def scene_state(bpy) -> tuple:
    scene = bpy.context.scene
    return scene.render.fps / scene.render.fps_base, scene.frame_start, scene.frame_end


def heads(bpy, arm, frames) -> np.ndarray:
    """(F, bones, 3) world-space pose-bone heads as Blender evaluates them."""
    scene = bpy.context.scene
    out = []
    for f in frames:
        scene.frame_set(f)
        mw = np.array(arm.matrix_world)
        h = np.array([pb.head for pb in arm.pose.bones])
        out.append(h @ mw[:3, :3].T + mw[:3, 3])
    return np.array(out)


def height(arm) -> float:
    z = np.array([(arm.matrix_world @ b.head_local).z for b in arm.data.bones])
    return float(np.ptp(z))


def key_frames(arm) -> set[tuple[float, ...]]:
    from painted_skin.addon.blender.retarget.armature_io import action_channelbag

    out = set()
    for fc in action_channelbag(arm).fcurves:
        co = np.empty(2 * len(fc.keyframe_points), dtype=np.float32)
        fc.keyframe_points.foreach_get("co", co)
        out.add(tuple(co[0::2]))
    return out


def point_panel(bpy, clip: Path, arm) -> object:
    s = bpy.context.scene.painted_skin_retarget
    s.source_kind, s.source_path, s.target_object = "FILE", str(clip), arm
    return s


def cut_bvh(src: Path, out: Path, frames: int | None = None,
            drop: tuple[str, ...] = ()) -> Path:
    """The clip's first ``frames`` frames without the joints ``drop`` and everything below
    them (their channels too), written as a BVH."""
    from painted_skin.addon.core.bvh import parse_bvh, write_bvh_clip

    clip = parse_bvh(src)
    gone: set[int] = set()
    for j, p in enumerate(clip.parents):
        if clip.names[j] in drop or p in gone:
            gone.add(j)
    keep = [j for j in range(clip.num_joints) if j not in gone]
    new_index = {j: k for k, j in enumerate(keep)}
    starts = clip.channel_starts
    cols = [c for j in keep for c in range(starts[j], starts[j] + len(clip.channels[j]))]
    table = clip.frames[: frames or clip.num_frames][:, cols]
    cut = dataclasses.replace(
        clip, names=[clip.names[j] for j in keep],
        parents=np.array([new_index[clip.parents[j]] if clip.parents[j] >= 0 else -1
                          for j in keep]),
        offsets=clip.offsets[keep], channels=[clip.channels[j] for j in keep],
        end_sites={new_index[j]: v for j, v in clip.end_sites.items() if j in new_index},
        frames=table)
    return write_bvh_clip(out, cut)


# --------------------------------------------------------------------------- core


def test_resample_positions_keep_the_duration():
    from painted_skin.addon.core.retarget.solve import resample_positions

    pos = resample_positions(343, 120.0, 24.0)  # 2.858 s
    assert len(pos) == 69 and np.array_equal(pos, np.arange(69) * 5.0)
    pos = resample_positions(48, 24.0, 30.0)  # 2 s -> 60 frames; the last holds the end
    assert len(pos) == 60 and pos[-1] == 47 and pos[5] == 4.0
    assert len(resample_positions(1, 120.0, 24.0)) == 1


def test_resample_basis_is_exact_at_coincident_times_and_slerps_between():
    from painted_skin.addon.core.retarget.solve import resample_basis
    from painted_skin.addon.core.rig.transforms import quat_to_matrix

    frames, n = 11, 3
    angle = np.linspace(0.0, 1.0, frames)  # one bone turns about z at a steady rate
    q = np.stack([np.cos(angle / 2), 0 * angle, 0 * angle, np.sin(angle / 2)], 1)
    rot = np.broadcast_to(np.eye(3), (frames, n, 3, 3)).copy()
    rot[:, 1] = quat_to_matrix(q)
    loc = np.zeros((frames, n, 3))
    loc[:, 0, 0] = np.arange(frames) * 0.1
    keyed = np.array([True, True, False])

    r, lo = resample_basis(rot, loc, keyed, 10.0, 5.0)  # every other frame
    assert r.shape == (6, n, 3, 3) and lo.shape == (6, n, 3)
    assert np.array_equal(r[:, 1], rot[::2, 1]) and np.array_equal(lo, loc[::2])

    r, lo = resample_basis(rot, loc, keyed, 10.0, 20.0)  # in between: half the angle
    assert r.shape[0] == 22
    turned = np.arctan2(r[:, 1, 1, 0], r[:, 1, 0, 0])
    np.testing.assert_allclose(turned[:21], np.linspace(0.0, 1.0, 21), atol=1e-12)
    np.testing.assert_allclose(lo[:21, 0, 0], np.arange(21) * 0.05, atol=1e-12)
    assert (r[:, 2] == np.eye(3)).all()  # unkeyed bones stay identity


# --------------------------------------------------------------------------- synthetic


@pytest.fixture
def demo(addon, tmp_path):
    """Demo character, a 48-frame 24 fps walk on disk, the panel pointed at both, and a
    30 fps scene on frames 1001-1100."""
    from painted_skin.addon.motion import write_clip
    from painted_skin.demo.character import build_demo_character

    arm = build_demo_character()
    clip = write_clip(tmp_path / "walk.bvh", "walk", frames=48, fps=24)
    set_scene(addon, 30, 1001, 1100)
    point_panel(addon, clip, arm)
    return addon, arm, clip


def test_retarget_button_keeps_scene_rate_and_range(demo):
    bpy, arm, _ = demo
    assert bpy.ops.painted_skin.retarget() == {"FINISHED"}
    assert scene_state(bpy) == (30, 1001, 1060)  # the range ends with the clip
    # 2 s of walk at the scene's 30 fps: 60 keys from the scene's start frame.
    assert tuple(arm.animation_data.action.frame_range) == (1001.0, 1060.0)
    assert key_frames(arm) == {tuple(np.arange(1001, 1061, dtype=np.float32))}
    s = bpy.context.scene.painted_skin_retarget
    assert "60 frames @ 30 fps (clip 24 fps) (1001-1060)" in s.last_report


def test_retarget_button_lengthens_a_short_scene_too(demo):
    bpy, arm, _ = demo
    set_scene(bpy, 30, 1001, 1010)
    assert bpy.ops.painted_skin.retarget() == {"FINISHED"}
    assert scene_state(bpy) == (30, 1001, 1060)


def test_match_scene_to_clip_sets_rate_and_range_from_the_clip(demo):
    bpy, arm, _ = demo
    assert bpy.ops.painted_skin.retarget(match_scene=True) == {"FINISHED"}
    assert scene_state(bpy) == (24, 1, 48)
    assert tuple(arm.animation_data.action.frame_range) == (1.0, 48.0)


def test_armature_source_in_the_scene_keeps_its_own_frames(demo):
    """An animated armature already in this scene plays at the scene's rate: its keys
    stay on its own frames (no resampling, no shift)."""
    bpy, arm, clip = demo
    bpy.ops.import_anim.bvh(filepath=str(clip), global_scale=0.01, rotate_mode="NATIVE",
                            axis_forward="-Z", axis_up="Y", update_scene_fps=False,
                            update_scene_duration=False, frame_start=1011)
    src = bpy.context.object
    s = bpy.context.scene.painted_skin_retarget
    s.source_kind, s.source_object = "OBJECT", src
    assert bpy.ops.painted_skin.retarget() == {"FINISHED"}
    assert tuple(arm.animation_data.action.frame_range) == (1011.0, 1058.0)
    assert scene_state(bpy) == (30, 1001, 1058)  # the range ends where the action does


def test_api_and_cli_defaults_still_follow_the_clip(bpy_clean, tmp_path):
    """Scripts and the CLI build their own scene: the action keeps the clip's rate and
    frames and the scene follows it (documented in ``retarget_clip``)."""
    from painted_skin.addon.blender.retarget.api import retarget_clip
    from painted_skin.addon.motion import write_clip
    from painted_skin.demo.character import build_demo_character

    arm = build_demo_character()
    set_scene(bpy_clean, 30, 1001, 1100)
    clip = write_clip(tmp_path / "walk.bvh", "walk", frames=48, fps=24)
    report = retarget_clip(clip, arm)
    assert (report.fps, report.source_fps, report.frames, report.source_frames) == (
        24.0, 24.0, 48, 48)
    assert scene_state(bpy_clean) == (24, 1, 48)


# --------------------------------------------------------------------------- real data


@pytest.fixture
def human(addon, shared_data):
    from painted_skin.addon.blender.retarget.importers import import_character

    return addon, import_character(shared_data / HUMAN), shared_data


@pytest.mark.shared_data
def test_reviewer_repro_120fps_bvh_into_a_24fps_shot(human):
    """The repro: 24 fps scene on 1001-1100, a 120 fps CMU walk -> the scene is
    untouched and the walk lasts as long as it did (69 frames, 2.86 s)."""
    bpy, arm, data = human
    set_scene(bpy, 24, 1001, 1100)
    point_panel(bpy, data / WALK, arm)
    assert bpy.ops.painted_skin.retarget() == {"FINISHED"}
    assert scene_state(bpy) == (24, 1001, 1069)
    assert tuple(arm.animation_data.action.frame_range) == (1001.0, 1069.0)
    s = bpy.context.scene.painted_skin_retarget
    assert "69 frames @ 24 fps (clip 120 fps)" in s.last_report

    assert bpy.ops.painted_skin.retarget(match_scene=True) == {"FINISHED"}
    assert scene_state(bpy) == (120, 1, 343)
    assert tuple(arm.animation_data.action.frame_range) == (1.0, 343.0)


@pytest.mark.shared_data
def test_resampled_bake_matches_the_clip_at_its_own_times(human, tmp_path):
    """120 -> 24 fps: every baked frame is the 120 fps pose at the same time, to 1e-4 of
    the character's height; 120 -> 50 fps: frames between two clip frames lie between
    their poses (close to the interpolated heads)."""
    from painted_skin.addon.blender.retarget.api import retarget_clip

    bpy, arm, data = human
    clip = cut_bvh(data / WALK, tmp_path / "walk.bvh", frames=241)  # 2.008 s
    full = retarget_clip(clip, arm)  # the clip's own rate, frames 1-241
    assert (full.fps, full.frames, full.frame_start) == (120.0, 241, 1)
    ref = heads(bpy, arm, range(1, 242))
    h = height(arm)

    r24 = retarget_clip(clip, arm, set_scene=False, fps=24, frame_start=1001)
    assert (r24.fps, r24.source_fps, r24.frames, r24.source_frames) == (24.0, 120.0, 48, 241)
    assert r24.seconds == pytest.approx(241 / 120, abs=1 / 24)
    assert tuple(arm.animation_data.action.frame_range) == (1001.0, 1048.0)
    got = heads(bpy, arm, range(1001, 1049))
    err = np.abs(got - ref[::5][:48]).max()
    assert err <= 1e-4 * h, f"{err:.2e} m off the 120 fps pose ({h:.2f} m tall)"

    r50 = retarget_clip(clip, arm, set_scene=False, fps=50, frame_start=1)
    assert (r50.fps, r50.frames) == (50.0, 100)
    got = heads(bpy, arm, range(1, 101))
    pos = np.arange(100) * 2.4  # source frame (0-based) of each 50 fps frame
    i0 = np.floor(pos).astype(int)
    w = (pos - i0)[:, None, None]
    lerped = ref[i0] * (1 - w) + ref[np.minimum(i0 + 1, 240)] * w
    coincide = np.isclose(pos, np.round(pos))
    assert np.abs(got[coincide] - lerped[coincide]).max() <= 1e-4 * h
    assert np.abs(got - lerped).max() <= 2e-3 * h


@pytest.mark.shared_data
def test_clip_without_arms_warns_which_bones_stay_at_rest(human, tmp_path, capfd):
    from painted_skin.cli import main

    bpy, arm, data = human
    clip = cut_bvh(data / WALK, tmp_path / "no_arms.bvh", frames=60,
                   drop=("LeftShoulder", "RightShoulder"))
    # The panel: a WARNING report naming the joints, the action is still baked.
    point_panel(bpy, clip, arm)
    capfd.readouterr()
    assert bpy.ops.painted_skin.retarget() == {"FINISHED"}
    said = capfd.readouterr().out
    assert "Warning: the clip has no " + ", ".join(CORE_ARMS) in said
    assert "stay at rest" in said
    # Those bones really stay at rest: their rotation is the identity in every frame.
    arm_bones = [b for b in ("upperarm_l", "lowerarm_l", "hand_r") if b in arm.pose.bones]
    assert arm_bones, "human-male.glb names changed"
    for f in (1, 20, 40):
        bpy.context.scene.frame_set(f)
        for b in arm_bones:
            q = arm.pose.bones[b].rotation_quaternion
            assert abs(abs(q.w) - 1.0) < 1e-6, (b, f, tuple(q))

    # The CLI: exit 0, the warning on stderr and in the report.
    rep = tmp_path / "r.json"
    rc = main(["retarget", "--source", str(clip), "--target", str(data / HUMAN),
               "--report", str(rep)])
    err = capfd.readouterr().err
    assert rc == 0, err
    assert "warning: the clip has no leftUpperArm" in err
    r = json.loads(rep.read_text())
    assert r["unmapped_target_core"] == CORE_ARMS
    assert any(all(c in w for c in CORE_ARMS) for w in r["warnings"]), r["warnings"]
    assert (r["fps"], r["source_fps"], r["frames"]) == (120.0, 120.0, 60)


@pytest.mark.shared_data
def test_full_clip_gives_no_missing_joint_warning(human, tmp_path):
    from painted_skin.addon.blender.retarget.api import retarget_clip

    bpy, arm, data = human
    report = retarget_clip(cut_bvh(data / WALK, tmp_path / "walk.bvh", frames=30), arm)
    assert report.unmapped_target_core == []
    assert not [w for w in report.warnings if "clip has no" in w or "mapped to" in w]
