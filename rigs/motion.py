"""Procedural humanoid motion written as real BVH files (numpy only, no bpy).

One generic ~1.75 m humanoid (canonical joint names, BVH space: Y-up, cm, facing
+Z, its left on +X, T-pose rest) is animated by :func:`canonical_motion`; the
same motion is then written in one of three naming/rest conventions:

- ``"cmu"``: CMU / cgspeed MotionBuilder-friendly names (Hips, LHipJoint,
  LeftUpLeg, ..., LowerBack, Spine, Spine1, Neck, Neck1, Head, LeftShoulder,
  LeftArm, ..., fingers LeftHandThumb1..3, LeftHandIndex1..3, ...), T-pose,
  channels ``Zrotation Yrotation Xrotation``, root OFFSET 0 (like CMU files).
- ``"mixamo"``: Mixamo names (mixamorig:Hips, mixamorig:Spine..Spine2, ...),
  T-pose, channels ``Zrotation Xrotation Yrotation``, root OFFSET at the rest
  hips height.
- ``"apose"``: Unreal Engine 4 mannequin names (pelvis, spine_01..03, neck_01,
  head, clavicle_l, upperarm_l, lowerarm_l, hand_l, thumb_01_l, index_01_l, ...,
  thigh_l, calf_l, foot_l, ball_l) with an A-pose rest (upper arms swung 45°
  down about the forward axis), channels ``Yrotation Xrotation Zrotation``,
  root OFFSET at the rest hips height.

Whatever the convention, the world joint positions are the same. Feet are
placed first (planted during stance) and the legs solved by two-bone IK, so
there is no foot skate unless ``slide_noise`` adds some on purpose.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from ..addon.core.bvh import BvhClip, forward_kinematics_bvh, make_clip, write_bvh_clip
from ..addon.core.humanoid import FINGER_SEGMENTS, FINGERS
from ..addon.core.transforms import (
    axis_angle_to_matrix,
    matrix_to_quat,
    normalize,
    quat_slerp,
    quat_to_matrix,
)

KINDS = ("walk", "run", "jump", "turn", "wave", "sit")
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
_INDEX = {n: i for i, n in enumerate(NAMES)}
PARENTS = np.array([-1 if p is None else _INDEX[p] for _, p, _ in _JOINTS])
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


_CONVENTIONS: dict[str, Convention] = {
    "cmu": Convention(_motionbuilder_names("", ("LowerBack", "Spine", "Spine1")), "ZYX",
                      False, {"leftUpperLeg": "LHipJoint", "rightUpperLeg": "RHipJoint"},
                      {"neck": "Neck1"}),
    "mixamo": Convention(_motionbuilder_names("mixamorig:", ("Spine", "Spine1", "Spine2")),
                         "ZXY", True, {}, {}),
    "apose": Convention(_ue4_names(), "YXZ", True, {}, {}, apose_deg=45.0),
}
CONVENTION_MAPS: dict[str, dict[str, str]] = {k: dict(c.names) for k, c in _CONVENTIONS.items()}


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
        root = _INDEX[f"{side}UpperArm"]
        for j in range(len(NAMES)):
            k = j
            while k >= 0 and k != root:
                k = PARENTS[k]
            if k == root:
                s[j] = rot
    return s


def _layout(convention: str) -> _Layout:
    if convention not in _CONVENTIONS:
        raise ValueError(f"unknown convention {convention!r}; use one of {CONVENTIONS}")
    conv = _CONVENTIONS[convention]
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


# ----------------------------------------------------------------------------- small math

def _rot(axis: int, angle: np.ndarray) -> np.ndarray:
    """Rotation(s) about a principal axis by ``angle`` radians."""
    angle = np.asarray(angle, dtype=np.float64)
    e = np.zeros(3)
    e[axis] = 1.0
    return axis_angle_to_matrix(np.broadcast_to(e, angle.shape + (3,)), angle)


def rx(a: np.ndarray) -> np.ndarray:
    return _rot(0, a)


def ry(a: np.ndarray) -> np.ndarray:
    return _rot(1, a)


def rz(a: np.ndarray) -> np.ndarray:
    return _rot(2, a)


def _smooth(x: np.ndarray) -> np.ndarray:
    """Minimum-jerk ramp 0 -> 1 on [0, 1], clamped outside."""
    x = np.clip(x, 0.0, 1.0)
    return x * x * x * (10 - 15 * x + 6 * x * x)


def _ramp(t: np.ndarray, t0: float, t1: float) -> np.ndarray:
    return _smooth((t - t0) / max(t1 - t0, 1e-9))


def _frame(primary: np.ndarray, secondary: np.ndarray) -> np.ndarray:
    """Orthonormal frame (columns) with e1 along primary, e2 toward secondary."""
    e1 = normalize(primary)
    e2 = normalize(secondary - np.sum(secondary * e1, -1, keepdims=True) * e1)
    return np.stack([e1, e2, np.cross(e1, e2)], axis=-1)


def _aim(rest_p, rest_s, p: np.ndarray, s: np.ndarray) -> np.ndarray:
    """World rotation taking the rest (primary, secondary) frame onto (p, s)."""
    rest = _frame(np.asarray(rest_p, float), np.asarray(rest_s, float))
    return _frame(p, s) @ rest.T


def _hermite(t: np.ndarray, t0: float, t1: float, y0: float, y1: float, v0: float,
             v1: float) -> np.ndarray:
    """Cubic Hermite from (y0, v0) at t0 to (y1, v1) at t1 (velocities per second)."""
    h = t1 - t0
    s = np.clip((t - t0) / h, 0.0, 1.0)
    h00, h10 = 2 * s**3 - 3 * s**2 + 1, s**3 - 2 * s**2 + s
    h01, h11 = -2 * s**3 + 3 * s**2, s**3 - s**2
    return h00 * y0 + h10 * h * v0 + h01 * y1 + h11 * h * v1


def _slerp_m(a: np.ndarray, b: np.ndarray, w: np.ndarray) -> np.ndarray:
    return quat_to_matrix(quat_slerp(matrix_to_quat(a), matrix_to_quat(b), w))


# ----------------------------------------------------------------------------- the body


@dataclass
class CanonicalMotion:
    """Root position (F, 3) and canonical local rotations (F, n, 3, 3); BVH space, cm."""

    kind: str
    root: np.ndarray
    local: np.ndarray
    fps: float

    def world(self) -> tuple[np.ndarray, np.ndarray]:
        """World rotations (F, n, 3, 3) and positions (F, n, 3)."""
        pos = np.broadcast_to(OFFSETS, (len(self.root),) + OFFSETS.shape).copy()
        pos[:, 0] = self.root
        return forward_kinematics_bvh(PARENTS, self.local, pos)


class _Pose:
    """Per-frame local rotations being built, with helpers for world rotations."""

    def __init__(self, frames: int) -> None:
        self.local = np.broadcast_to(np.eye(3), (frames, len(NAMES), 3, 3)).copy()
        self.root = np.zeros((frames, 3))

    def set(self, name: str, m: np.ndarray) -> None:
        self.local[:, _INDEX[name]] = m

    def get(self, name: str) -> np.ndarray:
        return self.local[:, _INDEX[name]]

    def world_rot(self, name: str) -> np.ndarray:
        j = _INDEX[name]
        m = self.local[:, j]
        while PARENTS[j] >= 0:
            j = PARENTS[j]
            m = self.local[:, j] @ m
        return m


def _yaw_frame(psi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Forward and left unit vectors for headings ``psi`` (about +Y, 0 = +Z)."""
    fwd = np.stack([np.sin(psi), np.zeros_like(psi), np.cos(psi)], -1)
    left = np.stack([np.cos(psi), np.zeros_like(psi), -np.sin(psi)], -1)
    return fwd, left


def _solve_legs(pose: _Pose, ankles: dict[str, np.ndarray], feet: dict[str, np.ndarray],
                toes: dict[str, np.ndarray]) -> None:
    """Two-bone IK: thighs and shins reach the ankle targets; feet take world rotations."""
    w_hips = pose.get("hips")
    for side in ("left", "right"):
        hip = pose.root + np.einsum("fij,j->fi", w_hips, OFFSETS[_INDEX[f"{side}UpperLeg"]])
        d = ankles[side] - hip
        dist = np.linalg.norm(d, axis=-1)
        dist_c = np.clip(dist, abs(THIGH - SHIN) + 1e-3, (THIGH + SHIN) * 0.99999)
        dhat = d / np.maximum(dist, 1e-9)[:, None]
        pole = feet[side] @ np.array([0.0, 0.0, 1.0]) + w_hips @ np.array([0.0, 0.0, 1.0])
        perp = normalize(pole - np.sum(pole * dhat, -1, keepdims=True) * dhat)
        cos_a = (THIGH**2 + dist_c**2 - SHIN**2) / (2 * THIGH * dist_c)
        sin_a = np.sqrt(np.clip(1 - cos_a**2, 0.0, 1.0))
        knee = hip + THIGH * (cos_a[:, None] * dhat + sin_a[:, None] * perp)
        ankle = hip + dhat * dist_c[:, None]
        down, fwd = (0.0, -1.0, 0.0), (0.0, 0.0, 1.0)
        w_thigh = _aim(down, fwd, knee - hip, perp)
        w_shin = _aim(down, fwd, ankle - knee, perp)
        pose.set(f"{side}UpperLeg", w_hips.swapaxes(-1, -2) @ w_thigh)
        pose.set(f"{side}LowerLeg", w_thigh.swapaxes(-1, -2) @ w_shin)
        pose.set(f"{side}Foot", w_shin.swapaxes(-1, -2) @ feet[side])
        pose.set(f"{side}Toes", toes[side])


def _leg_reach_height(pose: _Pose, ankles: dict[str, np.ndarray], margin: float) -> np.ndarray:
    """Highest root height per frame at which both ankles stay within ``margin`` reach."""
    reach = (THIGH + SHIN) * margin
    best = np.full(len(pose.root), np.inf)
    for side in ("left", "right"):
        q = np.einsum("fij,j->fi", pose.get("hips"), OFFSETS[_INDEX[f"{side}UpperLeg"]])
        hx = pose.root[:, 0] + q[:, 0] - ankles[side][:, 0]
        hz = pose.root[:, 2] + q[:, 2] - ankles[side][:, 2]
        room = np.sqrt(np.maximum(reach**2 - hx**2 - hz**2, 0.0))
        best = np.minimum(best, ankles[side][:, 1] - q[:, 1] + room)
    return best


def _gauss(y: np.ndarray, sigma: float) -> np.ndarray:
    if sigma < 0.5:
        return y
    r = int(3 * sigma)
    k = np.exp(-0.5 * (np.arange(-r, r + 1) / sigma) ** 2)
    k /= k.sum()
    return np.convolve(np.pad(y, r, mode="edge"), k, mode="valid")


# ----------------------------------------------------------------------------- arms & torso

def _hang_arms(pose: _Pose, fwd_l: np.ndarray, fwd_r: np.ndarray, drop: float,
               elbow_l: np.ndarray, elbow_r: np.ndarray, curl: float) -> None:
    """Arms hanging at the sides (``drop`` radians from T-pose) swinging ``fwd`` forward."""
    for side, fwd, elbow, sign in (("left", fwd_l, elbow_l, -1.0),
                                   ("right", fwd_r, elbow_r, 1.0)):
        pose.set(f"{side}UpperArm", rx(-fwd) @ rz(np.full_like(fwd, sign * drop)))
        pose.set(f"{side}LowerArm", ry(sign * elbow))
        pose.set(f"{side}Hand", rz(np.full_like(fwd, sign * 0.1)))
        _curl_fingers(pose, side, curl)


def _curl_fingers(pose: _Pose, side: str, curl: float) -> None:
    sign = -1.0 if side == "left" else 1.0
    n = len(pose.root)
    for finger in FINGERS:
        for k, seg in enumerate(FINGER_SEGMENTS[finger]):
            amount = curl * (0.5 if finger == "Thumb" else 1.0) * (1.0 + 0.3 * k)
            axis = ry if finger == "Thumb" else rz
            pose.set(f"{side}{finger}{seg}", axis(np.full(n, sign * amount)))


def _torso(pose: _Pose, yaw_osc: np.ndarray, tilt: np.ndarray, roll: np.ndarray) -> None:
    """Spine counter-rotates the pelvis; neck and head keep the gaze level."""
    pose.set("spine", ry(-0.45 * yaw_osc) @ rz(-0.5 * roll) @ rx(-0.3 * tilt))
    pose.set("chest", ry(-0.45 * yaw_osc) @ rz(-0.3 * roll))
    pose.set("upperChest", ry(-0.35 * yaw_osc) @ rz(-0.2 * roll))
    pose.set("neck", ry(0.15 * yaw_osc) @ rx(-0.3 * tilt))
    pose.set("head", ry(0.1 * yaw_osc) @ rx(-0.3 * tilt))


# ----------------------------------------------------------------------------- gaits


@dataclass(frozen=True)
class _Gait:
    cycle: float  # s per full cycle (two steps)
    stride: float  # cm per cycle
    duty: float  # stance fraction
    heel_end: float  # fraction of stance rolling over the heel
    toe_start: float  # fraction of stance where the heel lifts
    under_hip: float  # fraction of stance where the ankle passes under the hip
    lift: float  # swing clearance, cm
    heel_pitch: float  # deg, toes up at heel strike
    toe_pitch: float  # deg, heel up at toe-off
    height: float  # nominal root height, cm
    bob: float  # cm; >0 highest at mid-stance (walk), <0 highest in flight (run)
    width: float  # lateral distance of each foot from the path
    arm_swing: float  # deg
    elbow: float  # deg
    lean: float  # deg
    pelvis_yaw: float  # deg
    pelvis_roll: float  # deg


WALK = _Gait(1.08, 128.0, 0.6, 0.15, 0.6, 0.375, 7.0, 15.0, 35.0, 96.0, 2.0, 8.5, 18.0,
             15.0, 4.0, 5.0, 3.0)
RUN = _Gait(0.66, 190.0, 0.36, 0.05, 0.45, 0.3, 16.0, 5.0, 40.0, 95.0, -3.0, 7.0, 35.0,
            85.0, 10.0, 8.0, 4.0)


def _jitter(g: _Gait, rng: np.random.Generator) -> _Gait:
    """Small seeded variations of one gait (same speed/stride ratio family)."""
    def j(v: float, amount: float) -> float:
        return float(v * (1.0 + amount * rng.uniform(-1, 1)))
    return replace(g, cycle=j(g.cycle, 0.05), stride=j(g.stride, 0.05),
                   arm_swing=j(g.arm_swing, 0.15), lean=j(g.lean, 0.2),
                   pelvis_yaw=j(g.pelvis_yaw, 0.2))


def _root_path(t: np.ndarray, g: _Gait, heading: Callable[[np.ndarray], np.ndarray]):
    """Ground path of the root as a function of time: P(tau) -> (m, 3), y = 0."""
    lo, hi = float(t[0]) - 3 * g.cycle, float(t[-1]) + 3 * g.cycle
    tt = np.arange(lo, hi + 1e-3, 1e-3)
    fwd, _ = _yaw_frame(heading(tt))
    vel = fwd * (g.stride / g.cycle)
    px, pz = (np.concatenate([[0.0], np.cumsum(0.5 * (vel[1:, a] + vel[:-1, a]) * 1e-3)])
              for a in (0, 2))
    x0, z0 = np.interp(0.0, tt, px), np.interp(0.0, tt, pz)

    def at(tau: np.ndarray) -> np.ndarray:
        tau = np.asarray(tau, dtype=np.float64)
        return np.stack([np.interp(tau, tt, px) - x0, np.zeros_like(tau),
                         np.interp(tau, tt, pz) - z0], -1)
    return at


def _heel_pose(a: np.ndarray, yaw: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Ankle when a foot flat at ``a`` rocks on its heel by pitch ``p``."""
    return a + yaw @ HEEL_VEC + np.einsum("fij,j->fi", yaw @ rx(p), -HEEL_VEC)


def _toe_pose(a: np.ndarray, yaw: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Ankle when a foot flat at ``a`` rolls over its toe joint by pitch ``p``."""
    return a + yaw @ TOE_VEC + np.einsum("fij,j->fi", yaw @ rx(p), -TOE_VEC)


def _foot_track(t: np.ndarray, phase: float, side: float, g: _Gait, path, heading):
    """Ankle target (F, 3), foot world rotation (F, 3, 3), toe local rotation, phases."""
    c = t / g.cycle + phase
    n = np.floor(c)
    phi = c - n

    def plant(k: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        tau = (k - phase + g.duty * g.under_hip) * g.cycle
        psi = heading(tau)
        _, left = _yaw_frame(psi)
        a = path(tau) + side * g.width * left
        a[:, 1] = ANKLE_HEIGHT
        return a, psi, ry(psi)

    a0, psi0, yaw0 = plant(n)
    a1, psi1, yaw1 = plant(n + 1)
    stance = phi < g.duty
    u = phi / g.duty
    hs, to = np.radians(-g.heel_pitch), np.radians(g.toe_pitch)
    heel_w = 1.0 - _smooth(u / g.heel_end)
    toe_w = _smooth((u - g.toe_start) / (1.0 - g.toe_start))
    p_st = hs * heel_w + to * toe_w
    ankle_st = np.where((u < g.heel_end)[:, None], _heel_pose(a0, yaw0, hs * heel_w),
                        _toe_pose(a0, yaw0, to * toe_w))
    w = np.clip((phi - g.duty) / (1.0 - g.duty), 0.0, 1.0)
    s = _smooth(w)
    start = _toe_pose(a0, yaw0, np.full_like(w, to))
    end = _heel_pose(a1, yaw1, np.full_like(w, hs))
    ankle_sw = start + (end - start) * s[:, None]
    ankle_sw[:, 1] += g.lift * np.sin(np.pi * w) ** 1.5
    p_sw = to + (hs - to) * _smooth(w * 1.4)
    psi_sw = psi0 + (psi1 - psi0) * s
    ankle = np.where(stance[:, None], ankle_st, ankle_sw)
    pitch = np.where(stance, p_st, p_sw)
    psi = np.where(stance, psi0, psi_sw)
    toe = np.where(stance, -to * toe_w, -to * (1.0 - _smooth(w / 0.4)))
    phases = np.select([~stance, u < g.heel_end, u <= g.toe_start], [SWING, HEEL, FLAT], TOE)
    return ankle, ry(psi) @ rx(pitch), rx(toe), phases


def _gait_motion(t: np.ndarray, g: _Gait, heading: Callable[[np.ndarray], np.ndarray],
                 fps: float) -> tuple[_Pose, dict[str, np.ndarray]]:
    pose = _Pose(len(t))
    path = _root_path(t, g, heading)
    ankles, feet, toes, phases = {}, {}, {}, {}
    for side, phase, sx in (("left", 0.0, 1.0), ("right", 0.5, -1.0)):
        ankles[side], feet[side], toes[side], phases[side] = _foot_track(
            t, phase, sx, g, path, heading)
    phi_l = (t / g.cycle) % 1.0
    mid = g.duty * g.under_hip
    yaw_osc = -np.radians(g.pelvis_yaw) * np.cos(2 * np.pi * phi_l)
    roll = np.radians(g.pelvis_roll) * np.sin(2 * np.pi * (phi_l - mid + 0.25) * 2) * 0.5
    tilt = np.full_like(t, np.radians(g.lean))
    pose.set("hips", ry(heading(t) + yaw_osc) @ rx(tilt) @ rz(roll))
    pose.root[:] = path(t)
    nominal = g.height + g.bob * np.cos(2 * np.pi * 2 * (phi_l - mid))
    pose.root[:, 1] = 1e3
    limit = _leg_reach_height(pose, ankles, 0.985)
    y = np.minimum(nominal, limit)
    pose.root[:, 1] = np.minimum(_gauss(y, 0.03 * fps), limit)
    _solve_legs(pose, ankles, feet, toes)
    _torso(pose, yaw_osc, tilt, roll)
    swing = np.radians(g.arm_swing)
    fwd_l = -swing * np.cos(2 * np.pi * phi_l)
    fwd_r = -fwd_l
    elbow = np.radians(g.elbow)
    _hang_arms(pose, fwd_l + 0.05, fwd_r + 0.05, np.radians(78.0),
               elbow + 0.4 * np.maximum(fwd_l, 0), elbow + 0.4 * np.maximum(fwd_r, 0), 0.25)
    return pose, phases


# ----------------------------------------------------------------------------- clips


def _standing_feet(n: int, psi: float = 0.0, z: float = 0.0):
    """Both feet flat under the hips."""
    ankles, feet, toes = {}, {}, {}
    _, left = _yaw_frame(np.array(psi))
    for side, sx in (("left", 1.0), ("right", -1.0)):
        a = np.array([0.0, ANKLE_HEIGHT, z]) + sx * 9.5 * left
        ankles[side] = np.broadcast_to(a, (n, 3)).copy()
        feet[side] = np.broadcast_to(ry(np.array(psi)), (n, 3, 3)).copy()
        toes[side] = np.broadcast_to(np.eye(3), (n, 3, 3)).copy()
    return ankles, feet, toes


def _walk(t, fps, rng, turn=False):
    g = _jitter(WALK, rng)
    if turn:
        total = np.radians(rng.uniform(100.0, 170.0))
        dur = float(t[-1]) if len(t) > 1 else 1.0

        def heading(tau):
            return total * _ramp(np.asarray(tau), 0.2 * dur, 0.8 * dur)
    else:
        def heading(tau):
            return np.zeros_like(np.asarray(tau, dtype=np.float64))
    return _gait_motion(t, g, heading, fps)


def _run(t, fps, rng):
    g = _jitter(RUN, rng)
    return _gait_motion(t, g, lambda tau: np.zeros_like(np.asarray(tau, float)), fps)


def _idle_body(pose: _Pose, t: np.ndarray, lean: np.ndarray | None = None) -> None:
    """Standing pelvis with a slow breathing sway."""
    sway = np.radians(1.0) * np.sin(2 * np.pi * 0.3 * t)
    tilt = np.radians(3.0) + (0.0 if lean is None else lean)
    pose.set("hips", ry(sway * 0.5) @ rx(np.broadcast_to(tilt, t.shape)) @ rz(sway))
    _torso(pose, sway * 0.5, np.broadcast_to(tilt, t.shape), sway)


def _wave(t, fps, rng):
    n = len(t)
    dur = float(t[-1]) if n > 1 else 1.0
    pose = _Pose(n)
    pose.root[:] = [0.0, 95.5, 0.0]
    pose.root[:, 1] += 0.4 * np.sin(2 * np.pi * 0.3 * t)
    _idle_body(pose, t)
    zeros = np.zeros(n)
    _hang_arms(pose, zeros + 0.05, zeros + 0.05, np.radians(80.0), zeros + 0.2, zeros + 0.2,
               0.3)
    ankles, feet, toes = _standing_feet(n)
    _solve_legs(pose, ankles, feet, toes)
    # Right arm: upper arm out and a little up, forearm up, forearm sways side to side.
    up = rng.uniform(0.25, 0.45)
    d_ua = normalize(np.array([-1.0, up, 0.25]))
    d_la = normalize(np.array([-0.1, 1.0, 0.15]))
    w_ua = _aim((-1.0, 0.0, 0.0), (0.0, 0.0, 1.0), d_ua, d_la)
    w_la = _aim((-1.0, 0.0, 0.0), (0.0, 0.0, 1.0), d_la, -d_ua)
    freq, amp = rng.uniform(1.8, 2.4), np.radians(rng.uniform(20.0, 30.0))
    osc = amp * np.sin(2 * np.pi * freq * t)
    w_la = axis_angle_to_matrix(np.broadcast_to([0.0, 0.0, 1.0], (n, 3)), osc) @ w_la
    w_sh = pose.world_rot("rightShoulder")
    ua_wave = w_sh.swapaxes(-1, -2) @ w_ua
    la_wave = w_ua.swapaxes(-1, -2) @ w_la
    raise_w = _ramp(t, 0.1 * dur, 0.1 * dur + min(0.6, 0.25 * dur))
    if dur > 2.5:
        raise_w = raise_w * (1.0 - _ramp(t, dur - 0.7, dur - 0.1))
    pose.set("rightUpperArm", _slerp_m(pose.get("rightUpperArm"), ua_wave, raise_w))
    pose.set("rightLowerArm", _slerp_m(pose.get("rightLowerArm"), la_wave, raise_w))
    _curl_fingers(pose, "right", 0.05)
    return pose, None


def _sit(t, fps, rng):
    n = len(t)
    dur = float(t[-1]) if n > 1 else 1.0
    k = min(1.0, dur / 2.6)
    t0 = 0.3 * k
    pose = _Pose(n)
    back = rng.uniform(36.0, 42.0)
    seat = rng.uniform(54.0, 58.0)
    z = -back * _ramp(t, t0, t0 + 1.3 * k)
    y = 96.0 + (seat - 96.0) * _ramp(t, t0 + 0.25 * k, t0 + 1.7 * k)
    pose.root[:] = np.stack([np.zeros(n), y, z], -1)
    lean = np.radians(35.0) * np.sin(np.pi * _ramp(t, t0, t0 + 1.9 * k)) + np.radians(
        8.0) * _ramp(t, t0, t0 + 1.0 * k)
    _idle_body(pose, t, lean)
    # Hands reach forward to balance, then rest on the thighs.
    reach = (np.radians(50.0) * np.sin(np.pi * _ramp(t, t0, t0 + 2.0 * k))
             + np.radians(20.0) * _ramp(t, t0 + 0.8 * k, t0 + 2.0 * k))
    elbow = np.radians(10.0) + np.radians(45.0) * _ramp(t, t0 + 0.8 * k, t0 + 2.0 * k)
    _hang_arms(pose, reach, reach, np.radians(76.0), elbow, elbow, 0.35)
    ankles, feet, toes = _standing_feet(n, z=3.0)
    _solve_legs(pose, ankles, feet, toes)
    return pose, None


def _jump(t, fps, rng):
    n = len(t)
    dur = float(t[-1]) if n > 1 else 1.0
    apex = rng.uniform(28.0, 38.0)
    dist = rng.uniform(35.0, 60.0)
    g = 981.0
    ankle_to = ANKLE_HEIGHT + (_toe_pose(np.zeros((1, 3)), np.eye(3)[None], np.radians(
        [40.0]))[0, 1])
    h_to = ankle_to + 0.97 * (THIGH + SHIN) + 7.0
    land_pitch = np.radians(20.0)
    ankle_land_y = ANKLE_HEIGHT + _toe_pose(np.zeros((1, 3)), np.eye(3)[None],
                                            np.array([land_pitch]))[0, 1]
    h_land = ankle_land_y + 0.97 * (THIGH + SHIN) + 7.0
    v0 = np.sqrt(2 * g * apex)
    t_fl = (v0 + np.sqrt(v0**2 + 2 * g * (h_to - h_land))) / g
    total = 0.3 + 0.5 + 0.25 + t_fl + 0.08 + 0.3 + 0.5
    k = min(1.0, dur / total)  # short clips play the jump faster
    t_c0 = 0.3 * k + max(0.0, (dur - total) / 2)
    t_p0 = t_c0 + 0.5 * k
    t_to = t_p0 + 0.25 * k
    t_ld = t_to + t_fl * k
    t_fl_end = t_ld + 0.08 * k
    t_ab = t_fl_end + 0.3 * k
    t_end = t_ab + 0.5 * k
    gk, v0k = g / k**2, v0 / k
    h0, h_crouch, h_absorb = 96.0, 72.0, 78.0
    y = np.full(n, h0)
    y = np.where(t >= t_c0, h0 + (h_crouch - h0) * _ramp(t, t_c0, t_p0), y)
    y = np.where(t >= t_p0, _hermite(t, t_p0, t_to, h_crouch, h_to, 0.0, v0k), y)
    tau = t - t_to
    y = np.where(t >= t_to, h_to + v0k * tau - 0.5 * gk * tau**2, y)
    v_land = v0k - gk * (t_ld - t_to)
    y = np.where(t >= t_ld, _hermite(t, t_ld, t_ab, h_land, h_absorb, v_land, 0.0), y)
    y = np.where(t >= t_ab, h_absorb + (h0 - h_absorb) * _ramp(t, t_ab, t_end), y)
    vh = 0.7 * dist / (t_ld - t_to)
    z = np.where(t < t_p0, 0.0, _hermite(t, t_p0, t_to, 0.0, 0.15 * dist, 0.0, vh))
    z = np.where(t >= t_to, 0.15 * dist + vh * (t - t_to), z)
    z = np.where(t >= t_ld, _hermite(t, t_ld, t_ab, 0.85 * dist, dist, vh, 0.0), z)
    pose = _Pose(n)
    pose.root[:] = np.stack([np.zeros(n), y, z], -1)
    crouch = _ramp(t, t_c0, t_p0) * (1 - _ramp(t, t_p0, t_to))
    absorb = _ramp(t, t_ld, t_fl_end + 0.1 * k) * (1 - _ramp(t, t_ab, t_end))
    lean = np.radians(30.0) * crouch + np.radians(20.0) * absorb
    _idle_body(pose, t, lean)
    # Arms: back in the crouch, forward and up through take-off, down on landing.
    arms = (-np.radians(45.0) * crouch + np.radians(120.0) * _ramp(t, t_p0, t_to + 0.1 * k)
            * (1 - _ramp(t, t_to + 0.2 * k, t_fl_end)) + np.radians(25.0) * absorb)
    _hang_arms(pose, arms, arms, np.radians(75.0), np.radians(15.0) + 0.3 * np.abs(arms),
               np.radians(15.0) + 0.3 * np.abs(arms), 0.3)
    times = (t_to - 0.12 * k, t_to, t_ld, t_fl_end)
    ankles, feet, toes = _jump_feet(t, pose.root, dist, times, land_pitch)
    _solve_legs(pose, ankles, feet, toes)
    phase = np.select([(t > times[0]) & (t <= times[1]), (t > times[1]) & (t < times[2]),
                       (t >= times[2]) & (t < times[3])], [TOE, SWING, TOE], FLAT)
    return pose, {"left": phase, "right": phase.copy()}


def _jump_feet(t, root, dist, times, land_pitch):
    """Feet planted, heels rising into take-off, tucked in flight, toe-first landing."""
    t_heel, t_to, t_ld, t_land_end = times
    n = len(t)
    yaw = np.broadcast_to(np.eye(3), (n, 3, 3))
    ankles, feet, toes = {}, {}, {}
    push = np.radians(40.0) * _ramp(t, t_heel, t_to)
    land = land_pitch * (1 - _ramp(t, t_ld, t_land_end))
    for side, sx in (("left", 1.0), ("right", -1.0)):
        a_start = np.broadcast_to([9.5 * sx, ANKLE_HEIGHT, 0.0], (n, 3))
        a_end = a_start + np.array([0.0, 0.0, dist])
        take = _toe_pose(a_start, yaw, push)
        touch = _toe_pose(a_end, yaw, land)
        i_to = min(np.searchsorted(t, t_to), n - 1)
        i_ld = min(np.searchsorted(t, t_ld), n - 1)
        r_to = np.array([0.0, root[i_to, 1], root[i_to, 2]])
        d_to = _toe_pose(a_start[:1], yaw[:1], np.radians([40.0]))[0] - r_to
        r_ld = np.array([0.0, root[i_ld, 1], root[i_ld, 2]])
        d_ld = _toe_pose(a_end[:1], yaw[:1], np.array([land_pitch]))[0] - r_ld
        w = np.clip((t - t_to) / max(t_ld - t_to, 1e-9), 0.0, 1.0)
        fly = root * [0.0, 1.0, 1.0] + d_to + (d_ld - d_to) * _smooth(w)[:, None]
        fly[:, 1] += 14.0 * np.sin(np.pi * w)
        fly[:, 0] = a_start[:, 0]
        flying = (t > t_to) & (t < t_ld)
        ankle = np.where((t <= t_to)[:, None], take, touch)
        ankles[side] = np.where(flying[:, None], fly, ankle)
        pitch_fly = np.radians(40.0) + (land_pitch - np.radians(40.0)) * _smooth(w)
        pitch = np.where(t <= t_to, push, np.where(flying, pitch_fly, land))
        feet[side] = rx(pitch)
        toes[side] = rx(-pitch)
    return ankles, feet, toes


_BUILDERS = {
    "walk": lambda t, fps, rng: _walk(t, fps, rng),
    "turn": lambda t, fps, rng: _walk(t, fps, rng, turn=True),
    "run": _run,
    "jump": _jump,
    "wave": _wave,
    "sit": _sit,
}


def _slide(t: np.ndarray, amount_m: float, rng: np.random.Generator) -> np.ndarray:
    """Smooth horizontal drift (F, 3) in cm, peak about ``amount_m`` metres, zero at t=0."""
    out = np.zeros((len(t), 3))
    for axis in (0, 2):
        freqs = rng.uniform(0.15, 0.5, 3)
        phases = rng.uniform(0, 2 * np.pi, 3)
        wave = sum(np.sin(2 * np.pi * f * t + p) - np.sin(p) for f, p in zip(freqs, phases,
                                                                               strict=True))
        out[:, axis] = wave / 3.0
    peak = np.abs(out).max()
    return out * (100.0 * amount_m / peak) if peak > 0 else out


def canonical_motion(kind: str, frames: int = 120, fps: float = 30.0, seed: int = 0,
                     slide_noise: float = 0.0) -> CanonicalMotion:
    """The motion on the canonical T-pose skeleton (BVH space, cm).

    ``slide_noise``: peak horizontal root drift in metres added after the feet were
    planted, so the feet skate by that much (for foot-lock tests).
    """
    if kind not in _BUILDERS:
        raise ValueError(f"unknown motion kind {kind!r}; use one of {KINDS}")
    if frames < 1 or fps <= 0:
        raise ValueError("frames must be >= 1 and fps > 0")
    rng = np.random.default_rng([seed, KINDS.index(kind)])
    t = np.arange(frames) / float(fps)
    pose, _ = _BUILDERS[kind](t, fps, rng)
    root = pose.root.copy()
    if slide_noise:
        root += _slide(t, slide_noise, np.random.default_rng([seed, 99]))
    return CanonicalMotion(kind, root, pose.local, float(fps))


def foot_phases(kind: str, frames: int = 120, fps: float = 30.0,
                seed: int = 0) -> dict[str, np.ndarray]:
    """Contact phase of each foot per frame: SWING, HEEL (rocking on the heel point),
    FLAT (ankle still) or TOE (rolling over the toe joint, which stays still).

    Keys ``"left"``/``"right"``; ``slide_noise`` does not change them.
    """
    if kind not in _BUILDERS:
        raise ValueError(f"unknown motion kind {kind!r}; use one of {KINDS}")
    rng = np.random.default_rng([seed, KINDS.index(kind)])
    t = np.arange(frames) / float(fps)
    _, phases = _BUILDERS[kind](t, fps, rng)
    if phases is None:
        return {s: np.full(frames, FLAT) for s in ("left", "right")}
    return phases


# ----------------------------------------------------------------------------- output


def to_convention(motion: CanonicalMotion, convention: str = "cmu") -> BvhClip:
    """Write the canonical motion with a convention's names, rest pose and channels."""
    lay = _layout(convention)
    conv = _CONVENTIONS[convention]
    w_rot, _ = motion.world()
    w_conv = w_rot[:, lay.source] @ lay.swing.swapaxes(-1, -2)
    local = w_conv.copy()
    has = lay.parents >= 0
    local[:, has] = w_conv[:, lay.parents[has]].swapaxes(-1, -2) @ w_conv[:, has]
    return make_clip(lay.names, lay.parents, lay.offsets, conv.order, motion.root, local,
                     1.0 / motion.fps, lay.end_sites)


def generate(kind: str, frames: int = 120, fps: float = 30.0, convention: str = "cmu",
             seed: int = 0, slide_noise: float = 0.0) -> BvhClip:
    """A generated clip as a :class:`BvhClip` (Y-up, cm)."""
    return to_convention(canonical_motion(kind, frames, fps, seed, slide_noise), convention)


def write_clip(path: str | os.PathLike, kind: str, frames: int = 120, fps: float = 30.0,
               convention: str = "cmu", seed: int = 0, slide_noise: float = 0.0) -> Path:
    """Generate a clip and write it as a BVH file (atomically); returns the path."""
    return write_bvh_clip(path, generate(kind, frames, fps, convention, seed, slide_noise))


def write_demo_clips(folder: str | os.PathLike, frames: int = 120,
                     fps: float = 30.0) -> list[Path]:
    """Every kind in every convention: ``<folder>/<convention>_<kind>.bvh``."""
    folder = Path(folder)
    return [write_clip(folder / f"{conv}_{kind}.bvh", kind, frames, fps, conv)
            for conv in CONVENTIONS for kind in KINDS]
