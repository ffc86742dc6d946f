"""A common reference pose derived from each skeleton's own rest geometry.

Retargeting between a T-pose rig and an A-pose (or arms-down) rig goes wrong
when rotations are copied relative to each rig's rest: the arms come out
twisted or raised. Instead every skeleton is brought, on paper, into the same
canonical pose: facing -Y, up +Z, arms straight out along ±X, legs straight
down. A bone's *reference frame* is its world rotation in that pose:

    C[b] = S[b] @ G @ R_rest[b]

``G`` turns the whole rest to face -Y (measured from hips and head), ``S[b]``
is the smallest swing that lays a limb bone onto its canonical axis (inherited
by the bones below it, so a hand's fingers keep their rest shape). Bone rolls
and local axis conventions cancel out, since they sit to the right of
``R_rest``.

The torso is laid out too: every bone from the hips to the head (any number of
spine and neck bones) points straight up, so a hunched rest and an upright one
mean the same reference posture. What hangs off the torso (head, shoulders)
keeps its rest orientation in the world, facing corrected: rest poses look
ahead with level shoulders whatever the spine's curve.
"""

from __future__ import annotations

import numpy as np

from ..rig.humanoid import AIM_CHILD, REFERENCE_DIRECTIONS
from ..rig.skeleton import Skeleton, apply_points, rotations
from ..rig.transforms import normalize, rotation_between
from .chains import UP, torso_aims

_UP_CANDIDATES = ("head", "neck", "upperChest", "chest", "spine")
_LEG_ENDS = ("Foot", "LowerLeg")
_SIDE_PAIRS = (("leftUpperLeg", "rightUpperLeg"), ("leftUpperArm", "rightUpperArm"),
               ("leftShoulder", "rightShoulder"))


class ReferencePoseError(ValueError):
    """The skeleton lacks the bones needed to find its facing."""


def _legs_up(heads: dict[str, np.ndarray]) -> np.ndarray | None:
    """Up along the rest legs (between the hip joints, from between the feet): a
    hunched or leaning torso does not tilt it, as it tilts hips -> head."""
    if not {"leftUpperLeg", "rightUpperLeg"} <= set(heads):
        return None
    top = (heads["leftUpperLeg"] + heads["rightUpperLeg"]) / 2
    for lo in _LEG_ENDS:
        if {f"left{lo}", f"right{lo}"} <= set(heads):
            up = top - (heads[f"left{lo}"] + heads[f"right{lo}"]) / 2
            if np.linalg.norm(up) > 1e-9:
                return up
    return None


def facing_rotation(heads: dict[str, np.ndarray]) -> np.ndarray:
    """Rotation ``G`` turning a rest pose to face -Y with up +Z and its left on +X."""
    up = None
    if "hips" in heads:
        for name in _UP_CANDIDATES:
            if name in heads and np.linalg.norm(heads[name] - heads["hips"]) > 1e-9:
                up = heads[name] - heads["hips"]
                break
    legs = _legs_up(heads)
    if legs is not None and (up is None or np.dot(legs, up) > 0):
        up = legs
    left = None
    for lname, rname in _SIDE_PAIRS:
        if lname in heads and rname in heads:
            left = heads[lname] - heads[rname]
            break
    if up is None or left is None:
        raise ReferencePoseError(
            "cannot tell which way the skeleton faces: map 'hips', a spine or head bone and "
            "a left/right pair of legs or arms")
    up = normalize(up)
    left = normalize(left - np.dot(left, up) * up)
    fwd = np.cross(left, up)
    src = np.stack([left, fwd, up], axis=1)
    can = np.array([[1.0, 0, 0], [0, -1.0, 0], [0, 0, 1.0]]).T
    return can @ src.T


def reference_frames(skel: Skeleton, bone_map: dict[str, str],
                     straighten_torso: bool = True) -> np.ndarray:
    """World reference-pose rotations (n, 3, 3) for every bone of ``skel``.

    ``bone_map`` maps canonical joint names to this skeleton's bone names.
    ``straighten_torso=False`` keeps the torso's rest curve in the reference
    pose: a character retargeted with it keeps its own posture on top of the
    source's motion.
    """
    rest_world = skel.world @ skel.rest
    r_rest = rotations(rest_world)
    heads_w = rest_world[:, :3, 3]
    tails_w = apply_points(skel.world, skel.tails)
    mapped = {c: skel.index(b) for c, b in bone_map.items() if b in skel}
    g = facing_rotation({c: heads_w[i] for c, i in mapped.items()})
    canonical_of = {i: c for c, i in mapped.items()}
    torso = torso_aims(skel, bone_map)

    swing = np.empty((len(skel), 3, 3))
    for i, p in enumerate(skel.parents):
        c = canonical_of.get(i)
        if i in torso:
            swing[i] = rotation_between(g @ torso[i], UP) if straighten_torso else np.eye(3)
        elif c in REFERENCE_DIRECTIONS:
            child = AIM_CHILD.get(c)
            if child in mapped and np.linalg.norm(heads_w[mapped[child]] - heads_w[i]) > 1e-9:
                d = heads_w[mapped[child]] - heads_w[i]
            else:
                d = tails_w[i] - heads_w[i]
            swing[i] = rotation_between(g @ d, np.asarray(REFERENCE_DIRECTIONS[c]))
        elif p in torso:
            swing[i] = np.eye(3)
        elif p >= 0:
            swing[i] = swing[p]
        else:
            swing[i] = np.eye(3)
    return swing @ g @ r_rest
