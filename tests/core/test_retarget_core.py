"""The retarget solver on generated clips, without Blender.

The quality bars: identity, rest invariance (T vs A rest with other
bone rolls), A->B->A round trip, foot lock, and auto-detection of every
generated convention.
"""

from __future__ import annotations

import numpy as np
import pytest
from painted_skin.addon import motion as gen
from painted_skin.addon.core.bonemap import auto_map
from painted_skin.addon.core.bvh import bvh_to_skeleton_motion
from painted_skin.addon.core.retarget.reference_pose import reference_frames
from painted_skin.addon.core.retarget.solve import RetargetOptions, retarget
from painted_skin.addon.core.rig import transforms as T
from painted_skin.addon.core.rig.skeleton import Motion, Skeleton, forward_kinematics

EXACT = RetargetOptions(ground="keep", foot_lock=False)
LIMBS = ("leftUpperArm", "leftLowerArm", "rightUpperArm", "rightLowerArm", "leftUpperLeg",
         "leftLowerLeg", "rightUpperLeg", "rightLowerLeg", "spine", "neck")


def clip(kind: str, convention: str, frames: int = 60, **kw) -> tuple[Skeleton, Motion, dict]:
    skel, motion = bvh_to_skeleton_motion(gen.generate(kind, frames=frames, fps=30,
                                                       convention=convention, **kw))
    return skel, motion, gen.CONVENTION_MAPS[convention]


def with_rolls_and_proportions(skel: Skeleton, seed: int, stretch: dict[str, float]) -> Skeleton:
    """Same topology, other bone rolls (random local axes) and other limb lengths."""
    rng = np.random.default_rng(seed)
    heads = skel.heads.copy()
    new_heads = heads.copy()
    for i, p in enumerate(skel.parents):
        if p >= 0:
            k = next((v for key, v in stretch.items() if key in skel.names[i].lower()), 1.0)
            new_heads[i] = new_heads[p] + k * (heads[i] - heads[p])
    rest = skel.rest.copy()
    rest[:, :3, 3] = new_heads
    rest[:, :3, :3] = rest[:, :3, :3] @ T.quat_to_matrix(T.normalize(rng.normal(size=(len(skel),
                                                                                        4))))
    tails = new_heads + (skel.tails - heads)
    return Skeleton(list(skel.names), skel.parents.copy(), rest, tails, skel.world.copy())


def joint_positions(result_world: np.ndarray) -> np.ndarray:
    return result_world[..., :3, 3]


def limb_directions(skel: Skeleton, world: np.ndarray, bone_map: dict) -> np.ndarray:
    """World direction of each LIMBS bone (head -> its canonical child's head)."""
    from painted_skin.addon.core.rig.humanoid import AIM_CHILD

    out = []
    for c in LIMBS:
        i, j = skel.index(bone_map[c]), skel.index(bone_map[AIM_CHILD[c]])
        out.append(world[:, j, :3, 3] - world[:, i, :3, 3])
    return np.stack(out, axis=1)


@pytest.mark.parametrize("kind", ["walk", "jump", "wave"])
def test_identity_reproduces_every_joint(kind):
    skel, motion, bmap = clip(kind, "cmu")
    res = retarget(skel, motion, bmap, skel, bmap, EXACT)
    err = np.abs(joint_positions(res.world) - motion.world(skel)[..., :3, 3]).max()
    assert err <= 1e-4 * skel.height()


def test_rest_invariance_t_pose_vs_a_pose_with_other_rolls():
    t_skel, t_motion, t_map = clip("wave", "cmu")
    a_skel, a_motion, a_map = clip("wave", "apose")
    # The A-pose source also gets different bone rolls: rotate every rest frame
    # and carry the motion over so its world joint positions are unchanged.
    rolled = with_rolls_and_proportions(a_skel, seed=3, stretch={})
    a_motion_rolled = Motion(a_motion.pose @ np.linalg.inv(a_skel.rest) @ rolled.rest,
                             a_motion.fps)
    assert np.allclose(a_motion_rolled.pose[..., :3, 3], a_motion.pose[..., :3, 3])
    target = with_rolls_and_proportions(t_skel, seed=5, stretch={"arm": 1.2, "leg": 0.9})
    from_t = retarget(t_skel, t_motion, t_map, target, t_map, EXACT)
    from_a = retarget(rolled, a_motion_rolled, a_map, target, t_map, EXACT)
    diff = np.abs(joint_positions(from_t.world) - joint_positions(from_a.world)).max()
    assert diff <= 1e-3 * target.height()


def test_round_trip_keeps_limb_directions():
    a_skel, a_motion, a_map = clip("walk", "mixamo")
    b_skel, _, b_map = clip("walk", "apose")
    b_skel = with_rolls_and_proportions(b_skel, seed=11,
                                        stretch={"thigh": 1.3, "calf": 1.25, "upperarm": 0.8})
    ab = retarget(a_skel, a_motion, a_map, b_skel, b_map, EXACT)
    b_motion = Motion(np.linalg.inv(b_skel.world) @ ab.world, a_motion.fps)
    aba = retarget(b_skel, b_motion, b_map, a_skel, a_map, EXACT)
    before = limb_directions(a_skel, a_motion.world(a_skel), a_map)
    after = limb_directions(a_skel, aba.world, a_map)
    assert np.degrees(T.angle_between(before, after)).max() <= 2.0
    # B really has other proportions: the round trip is not trivially an identity.
    assert not np.allclose(b_skel.heads, a_skel.heads, atol=1e-3)


def test_limb_directions_follow_the_source_onto_other_proportions():
    a_skel, a_motion, a_map = clip("run", "cmu")
    b_skel, _, b_map = clip("run", "apose")
    b_skel = with_rolls_and_proportions(b_skel, seed=2, stretch={"calf": 1.4, "lowerarm": 0.7})
    res = retarget(a_skel, a_motion, a_map, b_skel, b_map, EXACT)
    src = limb_directions(a_skel, a_motion.world(a_skel), a_map)
    dst = limb_directions(b_skel, res.world, b_map)
    assert np.degrees(T.angle_between(src, dst)).max() < 0.5


def test_root_motion_scales_with_leg_length():
    skel, motion, bmap = clip("walk", "cmu")
    big = with_rolls_and_proportions(skel, seed=1, stretch={"leg": 1.5, "foot": 1.5})
    res = retarget(skel, motion, bmap, big, bmap, EXACT)
    hips = skel.index(bmap["hips"])
    src_travel = np.ptp(motion.world(skel)[:, hips, 1, 3])
    dst_travel = np.ptp(res.world[:, hips, 1, 3])
    assert dst_travel / src_travel == pytest.approx(res.root_scale, rel=1e-6)
    assert res.root_scale == pytest.approx(1.5, rel=1e-6)


def test_in_place_and_floor():
    skel, motion, bmap = clip("walk", "cmu")
    res = retarget(skel, motion, bmap, skel, bmap, RetargetOptions(in_place=True,
                                                                   foot_lock=False))
    hips = skel.index(bmap["hips"])
    assert np.ptp(res.world[:, hips, :2, 3], axis=0).max() < 1e-9
    feet = [skel.index(bmap[c]) for c in ("leftFoot", "rightFoot", "leftToes", "rightToes")]
    lowest = res.world[:, feet, 2, 3].min()
    assert lowest == pytest.approx(skel.world_heads()[feet, 2].min(), abs=1e-6)


def drop_bone(skel: Skeleton, motion: Motion, name: str) -> tuple[Skeleton, Motion]:
    """The same rig without one bone (its children hang from its parent)."""
    k = skel.index(name)
    keep = [i for i in range(len(skel)) if i != k]
    remap = {old: new for new, old in enumerate(keep)}
    parents = []
    for i in keep:
        p = skel.parents[i]
        p = skel.parents[p] if p == k else p
        parents.append(remap[p] if p >= 0 else -1)
    out = Skeleton([skel.names[i] for i in keep], np.array(parents), skel.rest[keep],
                   skel.tails[keep], skel.world)
    return out, Motion(motion.pose[:, keep], motion.fps)


def test_in_between_bones_pair_by_position():
    """An unmapped bone with a counterpart at the same place follows it exactly."""
    skel, motion, bmap = clip("wave", "cmu")
    tmap = {k: v for k, v in bmap.items() if k != "chest"}
    res = retarget(skel, motion, bmap, skel, tmap, EXACT)
    assert res.keyed[skel.index(bmap["chest"])]
    err = np.abs(res.world[..., :3, 3] - motion.world(skel)[..., :3, 3]).max()
    assert err <= 1e-4 * skel.height()


def test_extra_spine_bone_shares_the_bend():
    """A target spine bone the source lacks takes part of the bend (slerp)."""
    skel, motion, bmap = clip("wave", "cmu")
    src, src_motion = drop_bone(skel, motion, bmap["chest"])
    smap = {k: v for k, v in bmap.items() if k != "chest"}
    res = retarget(src, src_motion, smap, skel, bmap, EXACT)
    lo, mid, hi = (skel.index(bmap[c]) for c in ("spine", "chest", "upperChest"))
    # Rotations against each bone's reference frame (rest rolls and curve cancel out).
    ref = reference_frames(skel, bmap)
    q = [T.matrix_to_quat(res.world[:, i, :3, :3] @ ref[i].T) for i in (lo, mid, hi)]
    # The middle bone's rotation lies between its neighbours'.
    d_lo = np.abs(np.sum(q[0] * q[1], axis=1))
    d_hi = np.abs(np.sum(q[1] * q[2], axis=1))
    d_ends = np.abs(np.sum(q[0] * q[2], axis=1))
    assert np.all(d_lo >= d_ends - 1e-9) and np.all(d_hi >= d_ends - 1e-9)
    # The head still ends up where the source puts it (its direction is copied).
    head = skel.index(bmap["head"])
    err = np.abs(res.world[:, head, :3, 3] - motion.world(skel)[:, head, :3, 3]).max()
    assert err < 0.05 * skel.height()


def test_foot_lock_cuts_skate_on_a_sliding_walk():
    skel, motion, bmap = clip("walk", "cmu", frames=120, slide_noise=0.15)
    res = retarget(skel, motion, bmap, skel, bmap, RetargetOptions())
    foot = res.foot
    assert foot is not None and foot.skate_before_cm > 0.3
    assert foot.skate_after_cm <= 0.25 * foot.skate_before_cm
    assert all(c.sum() > 10 for c in foot.contacts.values())
    # Legs keep their lengths (IK solved, nothing stretched).
    for side in ("left", "right"):
        a, b = skel.index(bmap[f"{side}UpperLeg"]), skel.index(bmap[f"{side}LowerLeg"])
        seg = np.linalg.norm(res.world[:, b, :3, 3] - res.world[:, a, :3, 3], axis=1)
        assert np.ptp(seg) < 1e-6


def test_baked_basis_reproduces_the_world_pose():
    skel, motion, bmap = clip("turn", "mixamo")
    target, _, tmap = clip("turn", "apose")
    res = retarget(skel, motion, bmap, target, tmap, RetargetOptions())
    pose = forward_kinematics(target, res.basis)
    assert np.allclose(target.world @ pose, res.world, atol=1e-9)


@pytest.mark.parametrize("convention", gen.CONVENTIONS)
def test_auto_map_identifies_each_generated_convention(convention):
    skel, _, truth = clip("walk", convention, frames=2)
    found = auto_map(skel).bones
    assert {c: found.get(c) for c in truth} == truth


def test_missing_hips_is_a_clear_error():
    skel, motion, bmap = clip("walk", "cmu", frames=4)
    broken = {k: v for k, v in bmap.items() if k != "hips"}
    with pytest.raises(ValueError, match="hips"):
        retarget(skel, motion, broken, skel, bmap)


def test_forward_kinematics_in_place_and_layout():
    """The pose follows M[b] = M[p] @ local[b] @ basis[b]; it can overwrite its basis
    (read_motion does), and each bone's track is one contiguous block."""
    skel, motion, _ = clip("walk", "cmu", frames=30)
    from painted_skin.addon.core.rig.skeleton import basis_from_pose

    basis = basis_from_pose(skel, motion.pose)
    local = skel.local_rest()
    ref = np.empty_like(basis)
    for i, p in enumerate(skel.parents):
        ref[:, i] = (local[i] if p < 0 else ref[:, p] @ local[i]) @ basis[:, i]
    pose = forward_kinematics(skel, basis)
    assert np.allclose(pose, ref, atol=1e-12, rtol=0)
    assert all(pose[:, i].flags.c_contiguous for i in range(len(skel)))
    in_place = basis.copy()
    assert forward_kinematics(skel, in_place, out=in_place) is in_place
    assert np.array_equal(in_place, pose)


def test_source_object_transform_is_applied():
    """A clip under a rotated, scaled object (an FBX armature's 0.01 and Y-up turn)
    retargets like the same clip with that transform baked into its bones."""
    skel, motion, bmap = clip("walk", "cmu", frames=40)
    target, _, tmap = clip("walk", "apose", frames=2)
    obj = np.eye(4)
    obj[:3, :3] = 0.01 * T.axis_angle_to_matrix(np.array([1.0, 0.2, 0.1]), np.array(1.2))
    obj[:3, 3] = (0.3, -0.2, 0.1)
    moved = Skeleton(list(skel.names), skel.parents, skel.rest, skel.tails, obj)
    baked = Skeleton(list(skel.names), skel.parents, obj @ skel.rest,
                     skel.tails @ obj[:3, :3].T + obj[:3, 3])
    opts = RetargetOptions(foot_lock=False)
    a = retarget(moved, motion, bmap, target, tmap, opts)
    b = retarget(baked, Motion(obj @ motion.pose, motion.fps), bmap, target, tmap, opts)
    assert np.allclose(a.world, b.world, atol=1e-9)
    assert np.allclose(a.basis, b.basis, atol=1e-9)
