"""Foot contacts and foot planting with analytic two-bone IK.

Contacts come from the ankle's height above the clip's floor and its
horizontal speed. During a contact the ankle is pinned to the contact's mean
position (eased in and out over a few frames outside it); thigh and shin are
re-solved analytically so the knee stays in the plane it bent in, and the
foot keeps its world orientation.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..rig.skeleton import Skeleton
from ..rig.transforms import normalize, rotation_between

SIDES = ("left", "right")


@dataclass
class FootLockResult:
    world_rotations: np.ndarray  # (F, n, 3, 3) with legs re-solved
    contacts: dict[str, np.ndarray]  # side -> (F,) bool
    skate_before_cm: float
    skate_after_cm: float | None = None


def detect_contacts(ankle: np.ndarray, fps: float, leg: float, min_frames: int = 3) -> np.ndarray:
    """Contact frames of one ankle track (F, 3): low and (nearly) still.

    Thresholds scale with the leg length so they hold for any character size:
    height within 12% of a leg above the clip's lowest ankle height, horizontal
    speed under 0.5 leg lengths per second. Contacts shorter than
    ``min_frames`` are dropped, gaps of one frame are filled.
    """
    frames = len(ankle)
    if frames < 2:
        return np.zeros(frames, dtype=bool)
    speed = np.zeros(frames)
    step = np.linalg.norm(np.diff(ankle[:, :2], axis=0), axis=1) * fps
    speed[1:] = step
    speed[0] = step[0]
    speed = np.minimum(speed, np.concatenate([step, step[-1:]]))  # min of back/forward speed
    low = ankle[:, 2] < ankle[:, 2].min() + 0.12 * leg
    contact = low & (speed < 0.5 * leg)
    # Fill single-frame gaps, then drop short segments.
    gap = ~contact[1:-1] & contact[:-2] & contact[2:]
    contact[1:-1] |= gap
    out = contact.copy()
    for start, end in _segments(contact):
        if end - start < min_frames:
            out[start:end] = False
    return out


def _segments(mask: np.ndarray) -> list[tuple[int, int]]:
    """[start, end) runs of True."""
    padded = np.concatenate([[False], mask, [False]])
    edges = np.flatnonzero(np.diff(padded.astype(np.int8)))
    return list(zip(edges[::2], edges[1::2], strict=True))


def foot_skate_cm(ankle: np.ndarray, contact: np.ndarray) -> float:
    """Mean horizontal ankle travel per contact frame, in cm (world units = m)."""
    both = contact[1:] & contact[:-1]
    if not np.any(both):
        return 0.0
    step = np.linalg.norm(np.diff(ankle[:, :2], axis=0), axis=1)
    return float(step[both].mean() * 100.0)


def pinned_track(ankle: np.ndarray, contact: np.ndarray, ease: int = 4) -> np.ndarray:
    """Ankle targets: contact segments held at their mean xy, eased at the ends."""
    target = ankle.copy()
    weight = np.zeros(len(ankle))
    pin = np.zeros((len(ankle), 2))
    for start, end in _segments(contact):
        xy = ankle[start:end, :2].mean(axis=0)
        pin[start:end] = xy
        weight[start:end] = 1.0
        for k in range(1, ease + 1):
            w = 0.5 - 0.5 * np.cos(np.pi * (1 - k / (ease + 1)))
            for f in (start - k, end - 1 + k):
                if 0 <= f < len(ankle) and w > weight[f]:
                    weight[f] = w
                    pin[f] = xy
    target[:, :2] = (1 - weight[:, None]) * ankle[:, :2] + weight[:, None] * pin
    return target


def two_bone_ik(hip: np.ndarray, knee: np.ndarray, ankle: np.ndarray, goal: np.ndarray,
                fallback_pole: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rotations (F, 3, 3) for thigh and shin that bring the ankle to ``goal``.

    Keeps both segment lengths and the bend plane of the current pose (the
    knee direction); where the leg is straight, ``fallback_pole`` gives it.
    Unreachable goals are clamped to the leg's reach along the same line.
    """
    l1 = np.linalg.norm(knee - hip, axis=-1)
    l2 = np.linalg.norm(ankle - knee, axis=-1)
    to_goal = goal - hip
    d = np.linalg.norm(to_goal, axis=-1)
    d_c = np.clip(d, np.abs(l1 - l2) + 1e-6, (l1 + l2) * (1 - 1e-6))
    u = normalize(to_goal)
    goal = hip + u * d_c[:, None]
    pole = knee - hip
    v = pole - np.sum(pole * u, axis=-1, keepdims=True) * u
    bad = np.linalg.norm(v, axis=-1) < 1e-6 * np.maximum(l1, 1e-9)
    if np.any(bad):
        fp = fallback_pole - np.sum(fallback_pole * u, axis=-1, keepdims=True) * u
        v[bad] = fp[bad]
    v = normalize(v)
    cos_a = np.clip((l1**2 + d_c**2 - l2**2) / (2 * l1 * d_c), -1.0, 1.0)
    sin_a = np.sqrt(1 - cos_a**2)
    new_knee = hip + l1[:, None] * (cos_a[:, None] * u + sin_a[:, None] * v)
    r_thigh = rotation_between(knee - hip, new_knee - hip)
    r_shin = rotation_between(ankle - knee, goal - new_knee)
    return r_thigh, r_shin


def lock_feet(target: Skeleton, bone_map: dict[str, str], w: np.ndarray, pos: np.ndarray,
              fps: float, leg: float) -> FootLockResult | None:
    """Pin both feet during contacts; None when the legs are not fully mapped."""
    w = w.copy(order="K")  # keeps the solver's bone-major layout
    contacts: dict[str, np.ndarray] = {}
    before = []
    for side in SIDES:
        names = [f"{side}UpperLeg", f"{side}LowerLeg", f"{side}Foot"]
        if not all(n in bone_map and bone_map[n] in target for n in names):
            return None
        ih, ik, ia = (target.index(bone_map[n]) for n in names)
        ankle = pos[:, ia]
        contact = detect_contacts(ankle, fps, leg)
        contacts[side] = contact
        before.append(foot_skate_cm(ankle, contact))
        if not contact.any():
            continue
        goal = pinned_track(ankle, contact)
        goal[:, 2] = ankle[:, 2]
        # Pole fallback: the hips' forward axis (knees bend forward).
        hips = target.index(bone_map["hips"])
        fwd = pos[:, ik] - pos[:, ih]
        fwd = np.cross(fwd, w[:, hips] @ np.array([1.0, 0.0, 0.0]))
        r_thigh, r_shin = two_bone_ik(pos[:, ih], pos[:, ik], ankle, goal, fwd)
        # Rotate the thigh's subtree and then the shin; the foot keeps its world rotation.
        foot_w = w[:, ia].copy()
        w[:, ih] = r_thigh @ w[:, ih]
        w[:, ik] = r_shin @ w[:, ik]
        for j in _between(target, ih, ik):
            w[:, j] = r_thigh @ w[:, j]
        w[:, ia] = foot_w
    return FootLockResult(world_rotations=w, contacts=contacts,
                          skate_before_cm=float(np.mean(before)))


def _between(skel: Skeleton, top: int, bottom: int) -> list[int]:
    """Bones strictly between ``top`` and its descendant ``bottom``."""
    out = []
    p = skel.parents[bottom]
    while p >= 0 and p != top:
        out.append(p)
        p = skel.parents[p]
    return out
