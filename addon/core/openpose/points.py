"""3D OpenPose keypoints from the world pose of the canonical joints: the body, hands
and the placed face points (:func:`joints_3d`), and the body's scale."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .formats import (
    BIG_TOE_MEDIAL,
    BODY25_INDEX,
    FACE_COUNT,
    FACE_LAYOUT,
    FACE_LEFT_PUPIL,
    FACE_NOSE_TIP,
    FACE_RIGHT_PUPIL,
    HAND_FINGERS,
    HEEL_BACK,
    HEEL_DOWN,
    NOMINAL_TORSO,
    SMALL_TOE_BACK,
    SMALL_TOE_LATERAL,
)

# The canonical joint and end (head/tail) giving hand points 1..20, per finger base->tip.
_HAND_SOURCES: dict[str, tuple[tuple[str, str], ...]] = {
    "Thumb": (("Metacarpal", "head"), ("Proximal", "head"), ("Distal", "head"),
              ("Distal", "tail")),
    **{f: (("Proximal", "head"), ("Intermediate", "head"), ("Distal", "head"),
           ("Distal", "tail")) for f in ("Index", "Middle", "Ring", "Little")},
}
# (joint, end) of hand points 0..20 per side: the wrist, then the fingers' sources.
_HAND_JOINTS: dict[str, tuple[tuple[str, str], ...]] = {
    side: ((f"{side}Hand", "head"),) + tuple(
        (f"{side}{finger}{seg}", end) for finger in HAND_FINGERS
        for seg, end in _HAND_SOURCES[finger])
    for side in ("left", "right")
}
_NAN3 = np.full(3, np.nan)
_FACE_INDEX = np.array([BODY25_INDEX[k] for k in FACE_LAYOUT])
_FACE_A, _FACE_B, _FACE_C = (np.array([v[i] for v in FACE_LAYOUT.values()])[:, None]
                             for i in range(3))


@dataclass(frozen=True)
class JointPose:
    """One canonical joint in world space: head, tail and 3x3 rotation (columns = bone
    axes X, Y, Z in world; Y runs head->tail as in Blender)."""

    head: np.ndarray
    tail: np.ndarray
    matrix: np.ndarray


def _norm(v: np.ndarray) -> float:
    """Length of a 3-vector: what np.linalg.norm computes (sqrt of the dot product),
    without its per-call overhead."""
    return math.sqrt(float(v.dot(v)))


def _cross(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """np.cross of two 3-vectors (same products and differences), several times faster."""
    a0, a1, a2 = a.tolist()
    b0, b1, b2 = b.tolist()
    return np.array([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0])


def _unit(v: np.ndarray) -> np.ndarray | None:
    n = _norm(v)
    return None if n < 1e-9 else v / n


def _nan(n: int) -> np.ndarray:
    return np.full((n, 3), np.nan)


def _axes(m: np.ndarray) -> np.ndarray:
    """Column-normalised copy of a bone matrix (drops scale)."""
    m = np.asarray(m, float)
    return m / np.maximum(np.linalg.norm(m, axis=0, keepdims=True), 1e-12)


def _body_left(pose: dict[str, JointPose]) -> np.ndarray | None:
    """The character's left in world space, from arms, shoulders or legs."""
    for name in ("UpperArm", "Shoulder", "UpperLeg"):
        lj, rj = pose.get(f"left{name}"), pose.get(f"right{name}")
        if lj is not None and rj is not None:
            v = _unit(np.asarray(lj.head, float) - np.asarray(rj.head, float))
            if v is not None:
                return v
    return None


def _head_frame(pose: dict[str, JointPose], head_forward, head_up, head_rest):
    """(forward, up, left) unit vectors of the head in world space, or None."""
    head = pose["head"]
    m = _axes(head.matrix)
    rest = _axes(head_rest) if head_rest is not None else None
    if head_up is not None:
        up_l = np.asarray(head_up, float)
    elif rest is not None:
        up_l = rest.T @ np.array([0.0, 0.0, 1.0])
    else:
        up_l = np.array([0.0, 1.0, 0.0])
    if head_forward is not None:
        fwd_l = np.asarray(head_forward, float)
    elif rest is not None:
        fwd_l = rest.T @ np.array([0.0, -1.0, 0.0])
    else:
        # No rest given: forward = cross(left, up) of the body now, snapped to the head
        # bone's nearest local axis perpendicular to Y, so the face turns with the head.
        left = _body_left(pose)
        up_w = _unit(m[:, 1])
        if left is None or up_w is None:
            return None
        guess = m.T @ _cross(left, up_w)
        cand = np.array([[1, 0, 0], [-1, 0, 0], [0, 0, 1], [0, 0, -1]], float)
        fwd_l = cand[int(np.argmax(cand @ guess))]
    up = _unit(m @ up_l)
    if up is None:
        return None
    fwd = m @ fwd_l
    fwd = _unit(fwd - up * float(fwd @ up))
    if fwd is None:
        return None
    left = _cross(up, fwd)  # forward = left x up  =>  left = up x forward
    return fwd, up, left


def joints_3d(pose: dict[str, JointPose], *, head_forward: np.ndarray | None = None,
              head_up: np.ndarray | None = None, head_rest: np.ndarray | None = None,
              head_size: float | None = None) -> dict[str, np.ndarray]:
    """3D keypoints from the canonical joints that exist (world space, NaN = missing).

    Returns ``{"body25": (25, 3), "hand_left": (21, 3), "hand_right": (21, 3),
    "face": (70, 3)}`` (OpenPose orders; face only has the nose tip and pupils).

    Face frame: ``head_forward`` / ``head_up`` are the character's facing and up in
    head-bone-local coordinates. Without them, ``head_rest`` (the head bone's 3x3 rotation
    in a pose where the character faces -Y with +Z up, e.g. the canonical rest) gives
    forward = rest^T (0,-1,0) and up = rest^T (0,0,1). Without either, up is the bone's Y
    and forward is the local X/Z axis nearest to the body's current facing (cross of the
    body's left and the head direction). ``head_size`` (head bone head to crown, metres)
    scales the face; default the head bone's length.
    """
    def get(name: str, end: str = "head") -> np.ndarray | None:
        j = pose.get(name)
        return None if j is None else np.asarray(getattr(j, end), float)

    body = _nan(25)

    def put(key: str, p: np.ndarray | None) -> None:
        if p is not None:
            body[BODY25_INDEX[key]] = p

    # Torso and limbs.
    if "neck" in pose:
        put("Neck", get("neck"))
    elif "leftUpperArm" in pose and "rightUpperArm" in pose:
        put("Neck", 0.5 * (get("leftUpperArm") + get("rightUpperArm")))
    if "leftUpperLeg" in pose and "rightUpperLeg" in pose:
        put("MidHip", 0.5 * (get("leftUpperLeg") + get("rightUpperLeg")))
    for side, s in (("left", "L"), ("right", "R")):
        put(f"{s}Shoulder", get(f"{side}UpperArm"))
        put(f"{s}Elbow", get(f"{side}LowerArm"))
        put(f"{s}Wrist", get(f"{side}Hand"))
        put(f"{s}Hip", get(f"{side}UpperLeg"))
        put(f"{s}Knee", get(f"{side}LowerLeg"))
        put(f"{s}Ankle", get(f"{side}Foot"))
        _feet(body, s, get(f"{side}Foot"), get(f"{side}Toes", "tail")
              if f"{side}Toes" in pose else get(f"{side}Foot", "tail"), get(f"{side}LowerLeg"))

    # Face.
    face = _nan(FACE_COUNT)
    if "head" in pose:
        frame = _head_frame(pose, head_forward, head_up, head_rest)
        h0 = get("head")
        size = float(head_size) if head_size else _norm(get("head", "tail") - h0)
        if frame is not None and size > 0:
            fwd, up, left = frame
            # All five points at once, with the same element-wise operations.
            pts = h0 + size * (_FACE_A * fwd + _FACE_B * up + _FACE_C * left)
            body[_FACE_INDEX] = pts
            face[FACE_NOSE_TIP] = body[BODY25_INDEX["Nose"]]
            face[FACE_RIGHT_PUPIL] = body[BODY25_INDEX["REye"]]
            face[FACE_LEFT_PUPIL] = body[BODY25_INDEX["LEye"]]

    out = {"body25": body, "face": face}
    for side, sources in _HAND_JOINTS.items():
        # One array from the 21 rows (missing = NaN) rather than 21 row assignments.
        rows = [get(name, end) for name, end in sources]
        out[f"hand_{side}"] = np.array([_NAN3 if r is None else r for r in rows], float)
    return out


def _feet(body: np.ndarray, s: str, ankle, tip, knee) -> None:
    """Big toe, small toe and heel of one foot (s = "L" or "R") into ``body``."""
    if ankle is None or tip is None:
        return
    d = tip - ankle
    length = _norm(d)
    if length < 1e-9:
        return
    d = d / length
    shin = (knee - ankle) if knee is not None else np.array([0.0, 0.0, 1.0])
    n = _unit(shin - d * float(shin @ d))
    if n is None:
        return
    left = _cross(n, d)  # the character's left (d forward, n up)
    medial = -left if s == "L" else left
    body[BODY25_INDEX[f"{s}BigToe"]] = tip + BIG_TOE_MEDIAL * length * medial
    body[BODY25_INDEX[f"{s}SmallToe"]] = tip + length * (
        -SMALL_TOE_LATERAL * medial - SMALL_TOE_BACK * d)
    body[BODY25_INDEX[f"{s}Heel"]] = ankle - length * (HEEL_DOWN * n + HEEL_BACK * d)


def body_scale(points: dict[str, np.ndarray]) -> float:
    """Character size relative to the adult the margins are written for (Neck-MidHip)."""
    b = points["body25"]
    d = b[BODY25_INDEX["Neck"]] - b[BODY25_INDEX["MidHip"]]
    if not np.all(np.isfinite(d)):
        return 1.0
    return float(np.clip(np.linalg.norm(d) / NOMINAL_TORSO, 0.2, 5.0))
