"""Procedural BVH clips: conventions agree, feet plant, each kind does what it says."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np
import pytest
from painted_skin.addon import motion as M
from painted_skin.addon.core.bvh import bvh_to_skeleton_motion, parse_bvh
from painted_skin.addon.core.rig import humanoid
from painted_skin.addon.core.rig.transforms import normalize

FPS = 30.0


@cache
def _world(kind: str, frames: int = 120, slide: float = 0.0, seed: int = 0):
    """Canonical world rotations (F, n, 3, 3) and positions (F, n, 3) in cm, Y-up."""
    return M.canonical_motion(kind, frames, FPS, seed, slide).world()


def _j(name: str) -> int:
    return M.NAMES.index(name)


def _hspeed(p: np.ndarray) -> np.ndarray:
    """Horizontal speed (cm/s) between consecutive frames of (F, 3) positions."""
    return np.linalg.norm(np.diff(p[:, [0, 2]], axis=0), axis=-1) * FPS


def test_convention_maps_cover_the_canonical_humanoid() -> None:
    for conv in M.CONVENTIONS:
        clip = M.generate("walk", 3, FPS, conv)
        mapping = M.CONVENTION_MAPS[conv]
        assert set(mapping) == set(M.NAMES)
        assert set(mapping) <= set(humanoid.NAMES)
        assert set(mapping.values()) <= set(clip.names)
        assert len(set(mapping.values())) == len(mapping)
    assert M.CONVENTION_MAPS["cmu"]["leftUpperLeg"] == "LeftUpLeg"
    assert M.CONVENTION_MAPS["mixamo"]["leftIndexProximal"] == "mixamorig:LeftHandIndex1"
    assert M.CONVENTION_MAPS["apose"]["rightLowerLeg"] == "calf_r"


@pytest.mark.parametrize("kind", M.KINDS)
def test_conventions_give_the_same_world_joints(kind: str, tmp_path: Path) -> None:
    """Written to disk, parsed and converted to Blender space: equal within 1e-6 m."""
    positions = {}
    for conv in M.CONVENTIONS:
        path = M.write_clip(tmp_path / f"{conv}.bvh", kind, frames=45, fps=FPS, convention=conv)
        skel, motion = bvh_to_skeleton_motion(parse_bvh(path), scale=0.01)
        names = M.CONVENTION_MAPS[conv]
        positions[conv] = np.stack(
            [motion.pose[:, skel.index(names[c]), :3, 3] for c in M.NAMES], axis=1)
    for conv in ("mixamo", "apose"):
        np.testing.assert_allclose(positions[conv], positions["cmu"], atol=1e-6,
                                   err_msg=f"{kind}: {conv} vs cmu")


def test_convention_headers_and_rest_poses() -> None:
    clips = {c: M.generate("walk", 2, FPS, c) for c in M.CONVENTIONS}
    assert clips["cmu"].channels[1] == ("Zrotation", "Yrotation", "Xrotation")
    assert clips["mixamo"].channels[1] == ("Zrotation", "Xrotation", "Yrotation")
    assert clips["apose"].channels[1] == ("Yrotation", "Xrotation", "Zrotation")
    np.testing.assert_allclose(clips["cmu"].offsets[0], 0.0)
    np.testing.assert_allclose(clips["mixamo"].offsets[0], [0, M.HIPS_HEIGHT, 0])
    for conv, down in (("cmu", 0.0), ("mixamo", 0.0), ("apose", 45.0)):
        clip = clips[conv]
        rest = clip.rest_positions()
        names = M.CONVENTION_MAPS[conv]
        for side, sx in (("left", 1.0), ("right", -1.0)):
            upper = rest[clip.index(names[f"{side}UpperArm"])]
            hand = rest[clip.index(names[f"{side}Hand"])]
            d = hand - upper
            angle = np.degrees(np.arctan2(-d[1], sx * d[0]))
            assert angle == pytest.approx(down, abs=1e-9), (conv, side)
    assert {"LHipJoint", "RHipJoint", "Neck1"} <= set(clips["cmu"].names)


def test_apose_world_rotations_are_tpose_times_swing_inverse() -> None:
    clip_t = M.generate("wave", 20, FPS, "mixamo")
    clip_a = M.generate("wave", 20, FPS, "apose")
    from painted_skin.addon.core.bvh import forward_kinematics_bvh

    def world(clip, name):
        rot, _ = forward_kinematics_bvh(clip.parents, clip.local_rotations(),
                                        clip.local_translations())
        return rot[:, clip.index(name)]

    s_left = M.rz(np.radians(-45.0))
    for canon in ("leftUpperArm", "leftLowerArm", "leftIndexIntermediate"):
        w_t = world(clip_t, M.CONVENTION_MAPS["mixamo"][canon])
        w_a = world(clip_a, M.CONVENTION_MAPS["apose"][canon])
        np.testing.assert_allclose(w_a, w_t @ s_left.T, atol=1e-9)


def test_deterministic_and_seeded() -> None:
    a = M.generate("run", 30, FPS, "cmu", seed=4)
    b = M.generate("run", 30, FPS, "cmu", seed=4)
    c = M.generate("run", 30, FPS, "cmu", seed=5)
    np.testing.assert_array_equal(a.frames, b.frames)
    assert np.abs(a.frames - c.frames).max() > 1e-3


@pytest.mark.parametrize("kind", M.KINDS)
def test_every_clip_is_sane(kind: str) -> None:
    clip = M.generate(kind, 60, 24.0, "mixamo")
    assert clip.num_frames == 60 and clip.fps == pytest.approx(24.0)
    assert np.all(np.isfinite(clip.frames))
    _, pos = _world(kind)
    assert pos[..., 1].min() > -0.5  # nothing under the floor (cm)
    for side in ("left", "right"):
        assert pos[:, _j(f"{side}Toes"), 1].min() == pytest.approx(2.0, abs=0.5)
    # The legs reached their targets: knees never hyper-extend past straight.
    thigh = pos[:, _j("leftLowerLeg")] - pos[:, _j("leftUpperLeg")]
    shin = pos[:, _j("leftFoot")] - pos[:, _j("leftLowerLeg")]
    np.testing.assert_allclose(np.linalg.norm(thigh, axis=-1), M.THIGH, atol=1e-9)
    np.testing.assert_allclose(np.linalg.norm(shin, axis=-1), M.SHIN, atol=1e-9)


def _contact_speeds(kind: str, side: str, slide: float = 0.0):
    """Speed of whatever touches the ground in each stance phase, and the phases."""
    rot, pos = _world(kind, 120, slide)
    phases = M.foot_phases(kind, 120, FPS)[side]
    ankle = pos[:, _j(f"{side}Foot")]
    heel = ankle + np.einsum("fij,j->fi", rot[:, _j(f"{side}Foot")], M.HEEL_VEC)
    contact = {M.FLAT: ankle, M.TOE: pos[:, _j(f"{side}Toes")], M.HEEL: heel}
    return {ph: (_hspeed(p), (phases[1:] == ph) & (phases[:-1] == ph))
            for ph, p in contact.items()}, phases


@pytest.mark.parametrize("kind", ["walk", "run", "turn"])
def test_planted_feet_do_not_slide(kind: str) -> None:
    _, pos = _world(kind)
    root_speed = _hspeed(pos[:, 0]).mean()
    assert root_speed > 80.0
    for side in ("left", "right"):
        speeds, phases = _contact_speeds(kind, side)
        assert speeds[M.FLAT][1].sum() >= 3 and speeds[M.TOE][1].sum() >= 3
        for ph, (speed, mask) in speeds.items():
            if mask.any():  # a run's heel contact can be shorter than a frame
                assert speed[mask].max() < 0.02 * root_speed, (kind, side, ph)
        ankle = _hspeed(pos[:, _j(f"{side}Foot")])
        stance = (phases[1:] != M.SWING) & (phases[:-1] != M.SWING)
        assert ankle[stance].mean() < 0.25 * root_speed
        assert ankle[~stance].mean() > 1.3 * root_speed  # the swing foot catches up


def test_walk_speed_matches_stride_and_gait_shape() -> None:
    _, pos = _world("walk")
    root = pos[:, 0]
    speed = _hspeed(root).mean()
    assert 100 < speed < 135  # cm/s, an ordinary walk
    assert root[-1, 2] - root[0, 2] > 0.95 * np.linalg.norm(root[-1, [0, 2]] - root[0, [0, 2]])
    assert 2.0 < np.ptp(root[:, 1]) < 9.0  # vertical bob
    phases = M.foot_phases("walk", 120, FPS)
    both = (phases["left"] != M.SWING) & (phases["right"] != M.SWING)
    assert both.any() and not ((phases["left"] == M.SWING) & (phases["right"] == M.SWING)).any()
    # Arms swing against the legs: left hand forward while the right foot is ahead.
    fwd = np.array([0.0, 0.0, 1.0])
    legs = (pos[:, _j("rightFoot")] - pos[:, _j("leftFoot")]) @ fwd
    arms = (pos[:, _j("leftHand")] - pos[:, _j("rightHand")]) @ fwd
    assert np.corrcoef(legs, arms)[0, 1] > 0.8
    knee = np.degrees(np.arccos(np.clip(np.einsum(
        "fi,fi->f", normalize(pos[:, _j("leftLowerLeg")] - pos[:, _j("leftUpperLeg")]),
        normalize(pos[:, _j("leftFoot")] - pos[:, _j("leftLowerLeg")])), -1, 1)))
    assert knee.min() < 20 and 45 < knee.max() < 90


def test_run_has_flight_and_is_faster() -> None:
    _, pos = _world("run")
    assert _hspeed(pos[:, 0]).mean() > 2 * _hspeed(_world("walk")[1][:, 0]).mean()
    phases = M.foot_phases("run", 120, FPS)
    assert ((phases["left"] == M.SWING) & (phases["right"] == M.SWING)).sum() >= 6


def test_jump_crouches_flies_and_lands() -> None:
    _, pos = _world("jump")
    y = pos[:, 0, 1]
    stand = y[0]
    low = np.argmin(y[: np.argmax(y)])
    assert stand - y[low] > 15  # crouch
    assert y.max() - stand > 25  # flight
    feet = np.minimum(pos[:, _j("leftToes"), 1], pos[:, _j("rightToes"), 1])
    assert feet.max() > 20  # both feet off the ground
    assert np.argmax(y) > low and y[-1] == pytest.approx(stand, abs=1.0)  # lands and recovers
    assert pos[-1, 0, 2] - pos[0, 0, 2] > 30  # forward jump


def test_turn_yaws_the_root() -> None:
    rot, _ = _world("turn")
    fwd = rot[:, 0] @ np.array([0.0, 0.0, 1.0])
    yaw = np.degrees(np.arctan2(fwd[:, 0], fwd[:, 2]))
    total = yaw[-10:].mean() - yaw[:10].mean()
    assert 90 <= total <= 180


def test_wave_raises_the_right_hand_and_waves() -> None:
    _, pos = _world("wave")
    hand, head = pos[:, _j("rightHand")], pos[:, _j("head")]
    up = hand[:, 1] > head[:, 1]
    assert up.mean() > 0.5
    assert np.ptp(hand[up, 0]) > 8  # side to side
    assert pos[:, _j("leftHand"), 1].max() < 100  # the other arm hangs
    assert _hspeed(pos[:, _j("leftFoot")]).max() < 1e-6


def test_sit_lowers_hips_with_bent_knees() -> None:
    _, pos = _world("sit")
    y = pos[:, 0, 1]
    assert y[0] - y[-1] > 30
    thigh = pos[-1, _j("leftLowerLeg")] - pos[-1, _j("leftUpperLeg")]
    shin = pos[-1, _j("leftFoot")] - pos[-1, _j("leftLowerLeg")]
    knee = np.degrees(np.arccos(thigh @ shin / np.linalg.norm(thigh) / np.linalg.norm(shin)))
    assert 70 < knee < 110
    assert _hspeed(pos[:, _j("rightFoot")]).max() < 1e-6


def test_slide_noise_makes_feet_skate() -> None:
    _, clean = _world("walk")
    _, noisy = _world("walk", 120, 0.08)
    drift = noisy[:, 0] - clean[:, 0]
    assert 7.0 < np.abs(drift[:, [0, 2]]).max() <= 8.0 + 1e-9  # peak ~ slide_noise metres
    np.testing.assert_allclose(drift[0], 0.0, atol=1e-9)
    np.testing.assert_allclose(drift[:, 1], 0.0, atol=1e-9)
    speeds, _ = _contact_speeds("walk", "left", 0.08)
    speed, mask = speeds[M.FLAT]
    assert speed[mask].max() > 5.0  # planted feet now slide


def test_write_demo_clips(tmp_path: Path) -> None:
    paths = M.write_demo_clips(tmp_path, frames=20, fps=FPS)
    assert len(paths) == len(M.KINDS) * len(M.CONVENTIONS)
    for path in paths:
        clip = parse_bvh(path)
        assert clip.num_frames == 20
    assert not [p for p in tmp_path.iterdir() if p.suffix != ".bvh"]


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="unknown motion kind"):
        M.generate("dance")
    with pytest.raises(ValueError, match="unknown convention"):
        M.generate("walk", convention="bip01")
