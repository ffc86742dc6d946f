"""The generated motions' canonical skeleton and the three naming/rest conventions
they are written in (CMU, Mixamo, UE4 A-pose).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core.rig.humanoid import FINGER_SEGMENTS, FINGERS
from ..core.rig.transforms import axis_angle_to_matrix

KINDS = ("walk", "run", "jump", "turn", "wave", "sit", "rom")  # new kinds go last (seeds)
# Foot contact phases reported by :func:`foot_phases`.
SWING, HEEL, FLAT, TOE = 0, 1, 2, 3
CONVENTIONS = ("cmu", "mixamo", "apose")

# ----------------------------------------------------------------------------- skeleton

HIPS_HEIGHT = 98.0  # rest height of the hips joint, cm
ANKLE_HEIGHT = 8.0
TOE_VEC = np.array([0.0, -6.0, 13.0])  # ankle -> toe joint (on the ground pivot)
HEEL_VEC = np.array([0.0, -ANKLE_HEIGHT, -5.0])  # ankle -> heel contact point
THIGH, SHIN = 43.0, 40.0

_FINGER_OFFSETS = {  # left hand, T-pose (hand points +X, palm -Y, thumb forward +Z)
    "Thumb": [(2.0, -1.0, 2.5), (3.0, -0.5, 2.0), (3.0, 0.0, 1.2), (2.5, 0.0, 0.8)],
    "Index": [(9.0, 0.0, 2.5), (4.0, 0.0, 0.0), (2.5, 0.0, 0.0), (2.0, 0.0, 0.0)],
    "Middle": [(9.5, 0.0, 0.7), (4.5, 0.0, 0.0), (2.8, 0.0, 0.0), (2.2, 0.0, 0.0)],
    "Ring": [(9.0, 0.0, -1.2), (4.0, 0.0, 0.0), (2.6, 0.0, 0.0), (2.0, 0.0, 0.0)],
    "Little": [(8.2, 0.0, -3.0), (3.2, 0.0, 0.0), (2.2, 0.0, 0.0), (1.8, 0.0, 0.0)],
}


def _canonical_joints() -> tuple[list[tuple[str, str | None, tuple]], dict[str, tuple]]:
    """(name, parent, offset) in parent-before-child order, and End Site offsets."""
    j: list[tuple[str, str | None, tuple]] = [
        ("hips", None, (0.0, HIPS_HEIGHT, 0.0)),
        ("spine", "hips", (0.0, 9.0, -1.0)),
        ("chest", "spine", (0.0, 12.0, 0.0)),
        ("upperChest", "chest", (0.0, 12.0, 0.5)),
        ("neck", "upperChest", (0.0, 16.0, 0.0)),
        ("head", "neck", (0.0, 9.0, 1.0)),
    ]
    ends = {"head": (0.0, 18.0, 0.0)}
    for side, sx in (("left", 1.0), ("right", -1.0)):
        j += [(f"{side}UpperLeg", "hips", (9.0 * sx, -7.0, 0.0)),
              (f"{side}LowerLeg", f"{side}UpperLeg", (0.0, -THIGH, 0.0)),
              (f"{side}Foot", f"{side}LowerLeg", (0.0, -SHIN, 0.0)),
              (f"{side}Toes", f"{side}Foot", tuple(TOE_VEC))]
        ends[f"{side}Toes"] = (0.0, 0.0, 6.0)
    for side, sx in (("left", 1.0), ("right", -1.0)):
        j += [(f"{side}Shoulder", "upperChest", (3.0 * sx, 12.0, 0.0)),
              (f"{side}UpperArm", f"{side}Shoulder", (14.0 * sx, 0.0, 0.0)),
              (f"{side}LowerArm", f"{side}UpperArm", (28.0 * sx, 0.0, 0.0)),
              (f"{side}Hand", f"{side}LowerArm", (25.0 * sx, 0.0, 0.0))]
        for finger in FINGERS:
            parent = f"{side}Hand"
            offs = _FINGER_OFFSETS[finger]
            for seg, off in zip(FINGER_SEGMENTS[finger], offs, strict=False):
                name = f"{side}{finger}{seg}"
                j.append((name, parent, (off[0] * sx, off[1], off[2])))
                parent = name
            ends[parent] = (offs[3][0] * sx, offs[3][1], offs[3][2])
    return j, ends


_JOINTS, _ENDS = _canonical_joints()
NAMES: tuple[str, ...] = tuple(n for n, _, _ in _JOINTS)
JOINT_INDEX = {n: i for i, n in enumerate(NAMES)}
PARENTS = np.array([-1 if p is None else JOINT_INDEX[p] for _, p, _ in _JOINTS])
OFFSETS = np.array([o for _, _, o in _JOINTS], dtype=np.float64)

# ----------------------------------------------------------------------------- conventions


@dataclass(frozen=True)
class Convention:
    """How one naming convention writes the canonical skeleton."""

    names: dict[str, str]  # canonical -> bone name
    order: str  # rotation channels as listed, e.g. "ZYX"
    root_offset: bool  # root OFFSET at the rest hips position (else 0)
    before: dict[str, str]  # extra joint inserted at the parent's head, before canonical
    split: dict[str, str]  # extra joint halfway along canonical joint -> its child
    apose_deg: float = 0.0  # upper arms swung this far down in the rest pose


_SEG_NUM = {"Metacarpal": 1, "Proximal": 1, "Intermediate": 2, "Distal": 3}


def _finger_name(finger: str, seg: str) -> int:
    if finger == "Thumb":
        return {"Metacarpal": 1, "Proximal": 2, "Distal": 3}[seg]
    return _SEG_NUM[seg]


def _motionbuilder_names(prefix: str, spine: tuple[str, str, str]) -> dict[str, str]:
    m = {"hips": "Hips", "spine": spine[0], "chest": spine[1], "upperChest": spine[2],
         "neck": "Neck", "head": "Head"}
    for side, cap in (("left", "Left"), ("right", "Right")):
        m.update({f"{side}UpperLeg": f"{cap}UpLeg", f"{side}LowerLeg": f"{cap}Leg",
                  f"{side}Foot": f"{cap}Foot", f"{side}Toes": f"{cap}ToeBase",
                  f"{side}Shoulder": f"{cap}Shoulder", f"{side}UpperArm": f"{cap}Arm",
                  f"{side}LowerArm": f"{cap}ForeArm", f"{side}Hand": f"{cap}Hand"})
        for finger in FINGERS:
            fname = "Pinky" if finger == "Little" else finger
            for seg in FINGER_SEGMENTS[finger]:
                m[f"{side}{finger}{seg}"] = f"{cap}Hand{fname}{_finger_name(finger, seg)}"
    return {k: prefix + v for k, v in m.items()}


def _ue4_names() -> dict[str, str]:
    m = {"hips": "pelvis", "spine": "spine_01", "chest": "spine_02", "upperChest": "spine_03",
         "neck": "neck_01", "head": "head"}
    for side, s in (("left", "l"), ("right", "r")):
        m.update({f"{side}UpperLeg": f"thigh_{s}", f"{side}LowerLeg": f"calf_{s}",
                  f"{side}Foot": f"foot_{s}", f"{side}Toes": f"ball_{s}",
                  f"{side}Shoulder": f"clavicle_{s}", f"{side}UpperArm": f"upperarm_{s}",
                  f"{side}LowerArm": f"lowerarm_{s}", f"{side}Hand": f"hand_{s}"})
        for finger in FINGERS:
            fname = "pinky" if finger == "Little" else finger.lower()
            for seg in FINGER_SEGMENTS[finger]:
                m[f"{side}{finger}{seg}"] = f"{fname}_{_finger_name(finger, seg):02d}_{s}"
    return m


CONVENTION_SPECS: dict[str, Convention] = {
    "cmu": Convention(_motionbuilder_names("", ("LowerBack", "Spine", "Spine1")), "ZYX",
                      False, {"leftUpperLeg": "LHipJoint", "rightUpperLeg": "RHipJoint"},
                      {"neck": "Neck1"}),
    "mixamo": Convention(_motionbuilder_names("mixamorig:", ("Spine", "Spine1", "Spine2")),
                         "ZXY", True, {}, {}),
    "apose": Convention(_ue4_names(), "YXZ", True, {}, {}, apose_deg=45.0),
}
CONVENTION_MAPS: dict[str, dict[str, str]] = {k: dict(c.names) for k, c in CONVENTION_SPECS.items()}


@dataclass
class _Layout:
    """A convention's joints, and where each one's world rotation comes from."""

    names: list[str]
    parents: np.ndarray
    offsets: np.ndarray
    source: np.ndarray  # canonical joint whose world rotation this joint follows
    swing: np.ndarray  # (n, 3, 3) rest swing S: W_conv = W_canonical @ S^-1
    end_sites: dict[int, np.ndarray]


def _swing(conv: Convention) -> np.ndarray:
    """Per canonical joint rest swing (identity outside the A-posed arms)."""
    s = np.broadcast_to(np.eye(3), (len(NAMES), 3, 3)).copy()
    if not conv.apose_deg:
        return s
    for side, sign in (("left", -1.0), ("right", 1.0)):
        rot = axis_angle_to_matrix(np.array([0.0, 0.0, 1.0]),
                                   np.radians(sign * conv.apose_deg))
        root = JOINT_INDEX[f"{side}UpperArm"]
        for j in range(len(NAMES)):
            k = j
            while k >= 0 and k != root:
                k = PARENTS[k]
            if k == root:
                s[j] = rot
    return s


def convention_layout(convention: str) -> _Layout:
    if convention not in CONVENTION_SPECS:
        raise ValueError(f"unknown convention {convention!r}; use one of {CONVENTIONS}")
    conv = CONVENTION_SPECS[convention]
    swing = _swing(conv)
    names: list[str] = []
    parents: list[int] = []
    offsets: list[np.ndarray] = []
    source: list[int] = []
    swings: list[np.ndarray] = []
    where: dict[int, int] = {}  # canonical -> layout index of the joint it hangs children on
    ends: dict[int, np.ndarray] = {}

    def add(name: str, parent: int, off: np.ndarray, src: int) -> int:
        names.append(name)
        parents.append(parent)
        offsets.append(off)
        source.append(src)
        swings.append(swing[src])
        return len(names) - 1

    for c, cname in enumerate(NAMES):
        cp = int(PARENTS[c])
        off = OFFSETS[c] if cp < 0 else swing[cp] @ OFFSETS[c]
        if cp < 0:
            off = off if conv.root_offset else np.zeros(3)
            parent = -1
        else:
            parent = where[cp]
        if cname in conv.before:
            parent = add(conv.before[cname], parent, np.zeros(3), cp)
        i = add(conv.names[cname], parent, off, c)
        where[c] = i
        if cname in conv.split:
            child = next(k for k in range(len(NAMES)) if PARENTS[k] == c)
            half = swing[c] @ OFFSETS[child] * 0.5
            where[c] = add(conv.split[cname], i, half, c)
        if cname in _ENDS:
            ends[i] = swing[c] @ np.array(_ENDS[cname])
    offsets_arr = np.array(offsets)
    for c, cname in enumerate(NAMES):  # the joint after a split starts halfway
        if PARENTS[c] >= 0 and NAMES[PARENTS[c]] in conv.split:
            i = names.index(conv.names[cname])
            offsets_arr[i] = swing[PARENTS[c]] @ OFFSETS[c] * 0.5
    return _Layout(names, np.array(parents), offsets_arr, np.array(source), np.array(swings),
                   ends)
