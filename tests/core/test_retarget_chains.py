"""Torso and head retargeted as chains, without Blender.

Sources and targets are generated rigs whose spines have different bone counts
(3 onto 1, 2 or 5), necks of 2 and 1 bones, and other rest curvatures (a hunch,
a forward-leaning upper body) and bone rolls: the character's torso (hips ->
neck), neck (neck -> head) and head orientation must still follow the source's
on every frame.
"""

from __future__ import annotations

import numpy as np
import pytest
from painted_skin.addon import motion as gen
from painted_skin.addon.core.bvh import bvh_to_skeleton_motion
from painted_skin.addon.core.retarget.reference_pose import reference_frames
from painted_skin.addon.core.retarget.solve import RetargetOptions, retarget
from painted_skin.addon.core.rig import transforms as T
from painted_skin.addon.core.rig.skeleton import (
    Motion,
    Skeleton,
    basis_from_pose,
    forward_kinematics,
)

EXACT = RetargetOptions(ground="keep", foot_lock=False)
SPINE = ("spine", "chest", "upperChest")


def clip(kind: str, convention: str = "cmu", frames: int = 40) -> tuple[Skeleton, Motion, dict]:
    skel, motion = bvh_to_skeleton_motion(gen.generate(kind, frames=frames, fps=30,
                                                       convention=convention))
    return skel, motion, dict(gen.CONVENTION_MAPS[convention])


def _rolled(direction: np.ndarray, roll: float) -> np.ndarray:
    """A bone's rest rotation: Y along ``direction``, rolled by ``roll`` radians."""
    y = np.array([0.0, 1.0, 0.0])
    return T.rotation_between(y, direction) @ T.axis_angle_to_matrix(y, np.array(roll))


def reshape_torso(skel: Skeleton, bmap: dict, spine_bones: int, hunch_deg: float,
                  lean: float, drop_neck: bool, seed: int,
                  upright: bool = False) -> tuple[Skeleton, dict]:
    """The same rig with its spine rebuilt as ``spine_bones`` bones of unequal
    lengths along an arc bulging back by ``hunch_deg``, the upper body moved
    forward by ``lean`` (a fraction of the torso's length; ``upright``: first put
    right above the spine's base), the second neck bone dropped, and random bone
    rolls on the new bones."""
    rng = np.random.default_rng(seed)
    hips, neck = skel.index(bmap["hips"]), skel.index(bmap["neck"])
    old = [i for i in range(len(skel)) if skel.names[i] in
           {bmap[c] for c in SPINE} | {n for n in skel.names if n == "LowerBack"}]
    start, top = skel.heads[old[0]], skel.heads[neck]
    length = np.linalg.norm(top - start)
    fwd = np.array([0.0, -1.0, 0.0])  # the generated rigs face -Y, up +Z
    moved = top + lean * length * fwd
    if upright:
        moved = moved - (moved - start) * np.array([1.0, 1.0, 0.0])
    # Arc from start to the moved neck, bulging backwards (a hunch).
    ts = np.cumsum(np.concatenate([[0.0], rng.uniform(0.6, 1.4, spine_bones)]))
    ts /= ts[-1]
    bulge = np.tan(np.radians(hunch_deg) / 2) * np.linalg.norm(moved - start) / 2
    pts = start + ts[:, None] * (moved - start) - (4 * ts * (1 - ts) * bulge)[:, None] * fwd
    names, parents, rest, tails = [], [], [], []
    index: dict[int, int] = {}
    upper = set()
    for i in range(len(skel)):
        p = skel.parents[i]
        if p in upper or (p in old and i not in old):
            upper.add(i)
    new_spine = [f"spine_{k}" for k in range(spine_bones)]
    for i in range(len(skel)):
        if i in old:
            if i == old[0]:
                for k, name in enumerate(new_spine):
                    m = np.eye(4)
                    m[:3, :3] = _rolled(pts[k + 1] - pts[k], rng.uniform(-np.pi, np.pi))
                    m[:3, 3] = pts[k]
                    names.append(name)
                    parents.append(index[hips] if k == 0 else len(names) - 2)
                    rest.append(m)
                    tails.append(pts[k + 1])
                index[old[-1]] = len(names) - 1
            continue
        if drop_neck and skel.names[i] == "Neck1":
            index[i] = index[skel.parents[i]]
            continue
        m = skel.rest[i].copy()
        tail = skel.tails[i].copy()
        if i in upper:
            m[:3, 3] += moved - top
            tail += moved - top
        p = skel.parents[i]
        names.append(skel.names[i])
        parents.append(-1 if p < 0 else index[p])
        rest.append(m)
        tails.append(tail)
        index[i] = len(names) - 1
    tmap = {c: b for c, b in bmap.items() if c not in SPINE and b in names}
    picks = {1: ("spine",), 2: ("spine", "chest"), 3: SPINE, 5: SPINE}
    slots = {1: [0], 2: [0, 1], 3: [0, 1, 2], 5: [0, 2, 4]}
    for c, k in zip(picks[spine_bones], slots[spine_bones], strict=True):
        tmap[c] = new_spine[k]
    return Skeleton(names, np.array(parents), np.array(rest), np.array(tails)), tmap


def bend_source(skel: Skeleton, motion: Motion, bmap: dict, deg: float,
                sway_deg: float = 0.0) -> tuple[Skeleton, Motion]:
    """The source with its chest bent forward by ``deg`` at rest (the upper body tilted
    about the chest's head), playing the same local rotations, plus a sway of up to
    ``sway_deg`` on every torso bone (bending, side-bending and twisting, as a dancer
    does)."""
    chest = skel.index(bmap["chest"])
    below = {chest}
    for i in range(len(skel)):
        if skel.parents[i] in below:
            below.add(i)
    pivot = skel.heads[chest]
    r = T.axis_angle_to_matrix(np.array([1.0, 0.0, 0.0]), np.radians(deg))
    rest, tails = skel.rest.copy(), skel.tails.copy()
    for i in below:
        if i == chest:
            continue
        rest[i, :3, 3] = pivot + r @ (rest[i, :3, 3] - pivot)
        tails[i] = pivot + r @ (tails[i] - pivot)
    bent = Skeleton(list(skel.names), skel.parents, rest, tails, skel.world)
    basis = basis_from_pose(skel, motion.pose)
    t = np.linspace(0.0, 2 * np.pi, motion.frames)
    amp = np.radians(sway_deg)
    for k, name in enumerate(("LowerBack", "Spine", "Spine1", "Neck", "Neck1")):
        axis = np.stack([np.sin(t + k), np.cos(1.3 * t), np.sin(0.7 * t - k)], axis=1)
        sway = T.axis_angle_to_matrix(T.normalize(axis), amp * np.sin(t + 0.5 * k))
        i = skel.index(name)
        basis[:, i, :3, :3] = basis[:, i, :3, :3] @ sway
    return bent, Motion(forward_kinematics(bent, basis), motion.fps)


def heads(world: np.ndarray, skel: Skeleton, bmap: dict, c: str) -> np.ndarray:
    return world[:, skel.index(bmap[c]), :3, 3]


def angle_deg(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.degrees(T.angle_between(a, b))


def segment_error(src, s_world, smap, tgt, t_world, tmap, lo, hi) -> np.ndarray:
    return angle_deg(heads(s_world, src, smap, hi) - heads(s_world, src, smap, lo),
                     heads(t_world, tgt, tmap, hi) - heads(t_world, tgt, tmap, lo))


def head_orientation_error(src, s_world, smap, tgt, t_world, tmap) -> np.ndarray:
    """Angle between the heads' world rotations away from their rest (both rigs
    face the same way and look ahead at rest), per frame."""
    out = []
    for skel, world, bmap in ((src, s_world, smap), (tgt, t_world, tmap)):
        i = skel.index(bmap["head"])
        out.append(world[:, i, :3, :3] / skel.world_scale() @ skel.rest[i, :3, :3].T)
    rel = out[0].swapaxes(-1, -2) @ out[1]
    return np.degrees(np.arccos(np.clip((np.trace(rel, axis1=-2, axis2=-1) - 1) / 2, -1, 1)))


def torso_relative_head(skel: Skeleton, world: np.ndarray, bmap: dict) -> np.ndarray:
    """The head's rotation in a torso frame built from geometry (hips -> neck up,
    the line between the upper arms), per frame."""
    up = T.normalize(heads(world, skel, bmap, "neck") - heads(world, skel, bmap, "hips"))
    left = heads(world, skel, bmap, "leftUpperArm") - heads(world, skel, bmap, "rightUpperArm")
    left = T.normalize(left - np.sum(left * up, axis=-1, keepdims=True) * up)
    torso = np.stack([left, np.cross(up, left), up], axis=-1)
    i = skel.index(bmap["head"])
    head = world[:, i, :3, :3] / skel.world_scale() @ skel.rest[i, :3, :3].T
    return torso.swapaxes(-1, -2) @ head


TARGETS = [
    pytest.param(1, 25.0, 0.0, id="1-bone-hunched"),
    pytest.param(2, -10.0, 0.15, id="2-bones-leaning"),
    pytest.param(5, 30.0, 0.1, id="5-bones-hunched-leaning"),
]


@pytest.mark.parametrize("kind", ["walk", "jump", "turn", "wave", "sit"])
@pytest.mark.parametrize("spine_bones, hunch, lean", TARGETS)
def test_torso_neck_and_head_follow_the_source(kind, spine_bones, hunch, lean):
    src, motion, smap = clip(kind)
    src, motion = bend_source(src, motion, smap, 12.0, sway_deg=25.0)
    tgt, tmap = reshape_torso(src, smap, spine_bones, hunch, lean, drop_neck=True,
                              seed=spine_bones)
    res = retarget(src, motion, smap, tgt, tmap, EXACT)
    sw = motion.world(src)
    torso = segment_error(src, sw, smap, tgt, res.world, tmap, "hips", "neck")
    neck = segment_error(src, sw, smap, tgt, res.world, tmap, "neck", "head")
    head = head_orientation_error(src, sw, smap, tgt, res.world, tmap)
    assert torso.max() < 1.0, torso.max()
    assert neck.max() < 1.0, neck.max()
    assert head.max() < 1.0, head.max()
    # The head against the torso (what the character looks at, seen from its chest).
    rel = (torso_relative_head(src, sw, smap).swapaxes(-1, -2)
           @ torso_relative_head(tgt, res.world, tmap))
    rel_deg = np.degrees(np.arccos(np.clip((np.trace(rel, axis1=-2, axis2=-1) - 1) / 2, -1, 1)))
    assert rel_deg.max() < 1.0, rel_deg.max()
    assert len(res.chains["hips-neck"][1]) == spine_bones
    assert res.chains["neck-head"] == (["Neck", "Neck1"], ["Neck"])


def test_bend_is_shared_over_the_target_bones_by_length():
    """Each joint of a 5-bone spine lies on the source's 3-bone spine curve at the same
    fraction of its length (a straight copy of one bone's rotation would not)."""
    src, motion, smap = clip("sit", frames=30)
    src, motion = bend_source(src, motion, smap, 20.0)
    tgt, tmap = reshape_torso(src, smap, 5, 0.0, 0.0, drop_neck=False, seed=7)
    res = retarget(src, motion, smap, tgt, tmap, EXACT)
    sw = motion.world(src)
    s_chain = [src.index(smap["hips"])] + [src.index(b) for b in ("LowerBack", "Spine",
                                                                   "Spine1", "Neck")]
    t_chain = ([tgt.index(tmap["hips"])] + [tgt.index(f"spine_{k}") for k in range(5)]
               + [tgt.index(tmap["neck"])])

    def along(skel, world, chain):
        """Joints from the chain's first head on, and their fractions of its length."""
        p = world[:, chain[1:]][:, :, :3, 3]
        rest = skel.world_heads()[chain[1:]]
        s = np.concatenate([[0.0], np.cumsum(np.linalg.norm(np.diff(rest, axis=0), axis=1))])
        return p, s / s[-1]

    sp, ss = along(src, sw, s_chain)
    tp, ts = along(tgt, res.world, t_chain)
    worst = 0.0
    for k in range(1, len(ts) - 1):
        # The source curve at the target joint's fraction, seen from the chain's start.
        seg = min(int(np.searchsorted(ss, ts[k])), len(ss) - 1)
        w = (ts[k] - ss[seg - 1]) / (ss[seg] - ss[seg - 1])
        curve = sp[:, seg] * w + sp[:, seg - 1] * (1 - w)
        worst = max(worst, angle_deg(curve - sp[:, 0], tp[:, k] - tp[:, 0]).max())
    assert worst < 3.0, worst


def test_keep_posture_is_a_constant_offset_on_the_source_motion():
    src, motion, smap = clip("turn")
    tgt, tmap = reshape_torso(src, smap, 2, 35.0, 0.2, drop_neck=True, seed=3)
    follow = retarget(src, motion, smap, tgt, tmap, EXACT)
    keep = retarget(src, motion, smap, tgt, tmap,
                    RetargetOptions(ground="keep", foot_lock=False, keep_posture=True))
    assert keep.keep_posture and not follow.keep_posture
    sw = motion.world(src)
    torso = segment_error(src, sw, smap, tgt, keep.world, tmap, "hips", "neck")
    assert torso.min() > 5.0  # the hunch stays
    for j in (tgt.index(b) for b in keep.chains["hips-neck"][1]):
        offset = follow.world[:, j, :3, :3].swapaxes(-1, -2) @ keep.world[:, j, :3, :3]
        assert np.abs(offset - offset[0]).max() < 1e-9
    # Limbs are the same either way; the head still looks where the source's looks.
    for c in ("leftLowerArm", "rightLowerLeg"):
        a = keep.world[:, tgt.index(tmap[c]), :3, :3]
        b = follow.world[:, tgt.index(tmap[c]), :3, :3]
        assert np.allclose(a, b, atol=1e-9)
    assert head_orientation_error(src, sw, smap, tgt, keep.world, tmap).max() < 1e-4


def reference_pose_motion(skel: Skeleton, bmap: dict, frames: int = 2) -> Motion:
    """``skel`` held in the common reference pose: torso straight up, arms out."""
    c = reference_frames(skel, bmap)
    basis = np.broadcast_to(np.eye(4), (frames, len(skel), 4, 4)).copy()
    r_rest = skel.rest[:, :3, :3]
    for b, p in enumerate(skel.parents):
        parent = np.eye(3) if p < 0 else c[p] @ r_rest[p].T
        basis[:, b, :3, :3] = (parent @ r_rest[b]).T @ c[b]
    return Motion(forward_kinematics(skel, basis), 30.0)


def test_keep_posture_puts_the_character_in_its_rest_posture_on_an_upright_source():
    """A source standing straight leaves a hunched character hunched (every torso bone
    at its own rest rotation; both rigs face the same way), or straight by default."""
    src, _, smap = clip("walk", frames=2)
    still = reference_pose_motion(src, smap)
    hunched, tmap = reshape_torso(src, smap, 5, 30.0, 0.2, drop_neck=True, seed=4)
    res = retarget(src, still, smap, hunched, tmap,
                   RetargetOptions(ground="keep", foot_lock=False, keep_posture=True))
    for b in [*res.chains["hips-neck"][1], *res.chains["neck-head"][1], tmap["head"]]:
        j = hunched.index(b)
        rel = hunched.rest[j, :3, :3].T @ res.world[:, j, :3, :3]
        off = np.degrees(np.arccos(np.clip((np.trace(rel, axis1=-2, axis2=-1) - 1) / 2, -1, 1)))
        # Within what tilting the torso onto the source's hips -> neck line takes
        # (the rigs' torsos differ in length over the same hips bone).
        assert off.max() < 0.5, (b, off.max())
    plain = retarget(src, still, smap, hunched, tmap, EXACT)
    neck = heads(plain.world, hunched, tmap, "head") - heads(plain.world, hunched, tmap, "neck")
    assert angle_deg(neck, np.array([0.0, 0.0, 1.0])).max() < 1e-6  # straight up
    torso = segment_error(src, still.world(src), smap, hunched, plain.world, tmap, "hips",
                          "neck")
    assert torso.max() < 1e-6  # as the source's, from its hips' head
