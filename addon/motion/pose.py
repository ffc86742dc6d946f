"""Small rotation helpers and the pose being built: two-bone leg IK, arms, fingers,
torso.

The leg IK uses the canonical segment lengths and aims each bone with its bend
plane, so the generated clips stay exactly what the skin model was trained on.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core.bvh import forward_kinematics_bvh
from ..core.rig.humanoid import FINGER_SEGMENTS, FINGERS
from ..core.rig.transforms import (
    axis_angle_to_matrix,
    matrix_to_quat,
    normalize,
    quat_slerp,
    quat_to_matrix,
)
from .skeleton import JOINT_INDEX, NAMES, OFFSETS, PARENTS, SHIN, THIGH

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


def smoothstep(x: np.ndarray) -> np.ndarray:
    """Minimum-jerk ramp 0 -> 1 on [0, 1], clamped outside."""
    x = np.clip(x, 0.0, 1.0)
    return x * x * x * (10 - 15 * x + 6 * x * x)


def ramp_between(t: np.ndarray, t0: float, t1: float) -> np.ndarray:
    return smoothstep((t - t0) / max(t1 - t0, 1e-9))


def _frame(primary: np.ndarray, secondary: np.ndarray) -> np.ndarray:
    """Orthonormal frame (columns) with e1 along primary, e2 toward secondary."""
    e1 = normalize(primary)
    e2 = normalize(secondary - np.sum(secondary * e1, -1, keepdims=True) * e1)
    return np.stack([e1, e2, np.cross(e1, e2)], axis=-1)


def aim_frame(rest_p, rest_s, p: np.ndarray, s: np.ndarray) -> np.ndarray:
    """World rotation taking the rest (primary, secondary) frame onto (p, s)."""
    rest = _frame(np.asarray(rest_p, float), np.asarray(rest_s, float))
    return _frame(p, s) @ rest.T


def hermite(t: np.ndarray, t0: float, t1: float, y0: float, y1: float, v0: float,
             v1: float) -> np.ndarray:
    """Cubic Hermite from (y0, v0) at t0 to (y1, v1) at t1 (velocities per second)."""
    h = t1 - t0
    s = np.clip((t - t0) / h, 0.0, 1.0)
    h00, h10 = 2 * s**3 - 3 * s**2 + 1, s**3 - 2 * s**2 + s
    h01, h11 = -2 * s**3 + 3 * s**2, s**3 - s**2
    return h00 * y0 + h10 * h * v0 + h01 * y1 + h11 * h * v1


def slerp_matrices(a: np.ndarray, b: np.ndarray, w: np.ndarray) -> np.ndarray:
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


class PoseBuilder:
    """Per-frame local rotations being built, with helpers for world rotations."""

    def __init__(self, frames: int) -> None:
        self.local = np.broadcast_to(np.eye(3), (frames, len(NAMES), 3, 3)).copy()
        self.root = np.zeros((frames, 3))

    def set(self, name: str, m: np.ndarray) -> None:
        self.local[:, JOINT_INDEX[name]] = m

    def get(self, name: str) -> np.ndarray:
        return self.local[:, JOINT_INDEX[name]]

    def world_rot(self, name: str) -> np.ndarray:
        j = JOINT_INDEX[name]
        m = self.local[:, j]
        while PARENTS[j] >= 0:
            j = PARENTS[j]
            m = self.local[:, j] @ m
        return m


def yaw_frame(psi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Forward and left unit vectors for headings ``psi`` (about +Y, 0 = +Z)."""
    fwd = np.stack([np.sin(psi), np.zeros_like(psi), np.cos(psi)], -1)
    left = np.stack([np.cos(psi), np.zeros_like(psi), -np.sin(psi)], -1)
    return fwd, left


def solve_legs(pose: PoseBuilder, ankles: dict[str, np.ndarray], feet: dict[str, np.ndarray],
                toes: dict[str, np.ndarray]) -> None:
    """Two-bone IK: thighs and shins reach the ankle targets; feet take world rotations.

    Not ``addon.core.footlock.two_bone_ik``: that one corrects an existing pose (it keeps
    the current knee's bend plane and turns each bone by the shortest arc), while here
    there is no pose yet, so each bone is aimed in the plane of the foot's and the hips'
    forward. Swapping them changes every generated clip, which the skin model was
    trained on.
    """
    w_hips = pose.get("hips")
    for side in ("left", "right"):
        hip = pose.root + np.einsum("fij,j->fi", w_hips, OFFSETS[JOINT_INDEX[f"{side}UpperLeg"]])
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
        w_thigh = aim_frame(down, fwd, knee - hip, perp)
        w_shin = aim_frame(down, fwd, ankle - knee, perp)
        pose.set(f"{side}UpperLeg", w_hips.swapaxes(-1, -2) @ w_thigh)
        pose.set(f"{side}LowerLeg", w_thigh.swapaxes(-1, -2) @ w_shin)
        pose.set(f"{side}Foot", w_shin.swapaxes(-1, -2) @ feet[side])
        pose.set(f"{side}Toes", toes[side])


def leg_reach_height(pose: PoseBuilder, ankles: dict[str, np.ndarray], margin: float) -> np.ndarray:
    """Highest root height per frame at which both ankles stay within ``margin`` reach."""
    reach = (THIGH + SHIN) * margin
    best = np.full(len(pose.root), np.inf)
    for side in ("left", "right"):
        q = np.einsum("fij,j->fi", pose.get("hips"), OFFSETS[JOINT_INDEX[f"{side}UpperLeg"]])
        hx = pose.root[:, 0] + q[:, 0] - ankles[side][:, 0]
        hz = pose.root[:, 2] + q[:, 2] - ankles[side][:, 2]
        room = np.sqrt(np.maximum(reach**2 - hx**2 - hz**2, 0.0))
        best = np.minimum(best, ankles[side][:, 1] - q[:, 1] + room)
    return best


def gauss_smooth(y: np.ndarray, sigma: float) -> np.ndarray:
    if sigma < 0.5:
        return y
    r = int(3 * sigma)
    k = np.exp(-0.5 * (np.arange(-r, r + 1) / sigma) ** 2)
    k /= k.sum()
    return np.convolve(np.pad(y, r, mode="edge"), k, mode="valid")


# ----------------------------------------------------------------------------- arms & torso

def hang_arms(pose: PoseBuilder, fwd_l: np.ndarray, fwd_r: np.ndarray, drop: float,
               elbow_l: np.ndarray, elbow_r: np.ndarray, curl: float) -> None:
    """Arms hanging at the sides (``drop`` radians from T-pose) swinging ``fwd`` forward."""
    for side, fwd, elbow, sign in (("left", fwd_l, elbow_l, -1.0),
                                   ("right", fwd_r, elbow_r, 1.0)):
        pose.set(f"{side}UpperArm", rx(-fwd) @ rz(np.full_like(fwd, sign * drop)))
        pose.set(f"{side}LowerArm", ry(sign * elbow))
        pose.set(f"{side}Hand", rz(np.full_like(fwd, sign * 0.1)))
        curl_fingers(pose, side, curl)


def curl_fingers(pose: PoseBuilder, side: str, curl: float) -> None:
    sign = -1.0 if side == "left" else 1.0
    n = len(pose.root)
    for finger in FINGERS:
        for k, seg in enumerate(FINGER_SEGMENTS[finger]):
            amount = curl * (0.5 if finger == "Thumb" else 1.0) * (1.0 + 0.3 * k)
            axis = ry if finger == "Thumb" else rz
            pose.set(f"{side}{finger}{seg}", axis(np.full(n, sign * amount)))


def sway_torso(pose: PoseBuilder, yaw_osc: np.ndarray, tilt: np.ndarray, roll: np.ndarray) -> None:
    """Spine counter-rotates the pelvis; neck and head keep the gaze level."""
    pose.set("spine", ry(-0.45 * yaw_osc) @ rz(-0.5 * roll) @ rx(-0.3 * tilt))
    pose.set("chest", ry(-0.45 * yaw_osc) @ rz(-0.3 * roll))
    pose.set("upperChest", ry(-0.35 * yaw_osc) @ rz(-0.2 * roll))
    pose.set("neck", ry(0.15 * yaw_osc) @ rx(-0.3 * tilt))
    pose.set("head", ry(0.1 * yaw_osc) @ rx(-0.3 * tilt))
