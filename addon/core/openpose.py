"""OpenPose keypoints from the canonical humanoid: 3D points, projection, JSON and drawing.

Pure numpy (no bpy, no OpenCV), with optional numba kernels (``jit.py``) for the depth
test and the drawing that give the same results. The pipeline per frame:

1. :func:`joints_3d` turns the world pose of the canonical joints (``addon/core/humanoid.py``
   names) into 3D keypoints: BODY_25 body, 21 per hand, the placed face points;
2. :func:`project_skeleton` / :func:`project_keypoints` project them through a
   :class:`~painted_skin.addon.core.camera.Camera` and test each against a depth buffer;
3. :func:`openpose_json` writes OpenPose's JSON (BODY_25 or COCO-18 body), and
   :func:`draw_openpose` the coloured stick figure ControlNet's openpose models were
   trained on.

Keypoint orders, checked against the sources:

- BODY_25 and COCO-18: OpenPose ``doc/02_output.md`` ("Keypoint Ordering in C++/Python")
  and ``include/openpose/pose/poseParameters.hpp`` (``POSE_BODY_25_BODY_PARTS``,
  ``POSE_COCO_BODY_PARTS``; the trailing "Background" entry is not a keypoint);
- hand (21): OpenPose ``keypoints_hand.png`` and ControlNet's ``draw_handpose`` edges
  (wrist 0, then thumb 1-4, index 5-8, middle 9-12, ring 13-16, little 17-20, base->tip);
- face (70): OpenPose ``faceParameters.hpp`` (``FACE_NUMBER_PARTS = 70``: 0-16 jaw,
  17-26 brows, 27-30 nose bridge with 30 the tip, 31-35 nostrils, 36-41 right eye,
  42-47 left eye, 48-67 mouth, 68/69 right/left pupil);
- drawing: huggingface ``controlnet_aux`` ``src/controlnet_aux/open_pose/util.py``
  (``draw_bodypose``: 17 limbs of ``limbSeq`` as filled ellipses, stickwidth 4, in an
  18-colour list, the limb layer scaled by 0.6, then radius-4 keypoint circles in the same
  colours; ``draw_handpose``: 20 edges coloured by HSV hue ie/20, thickness 2, then radius-4
  dots of colour (0, 0, 255) -- blue, since ControlNet's canvas is RGB; ``draw_facepose``:
  radius-3 white dots). The optional "xinsr" stick scaling is comfyui_controlnet_aux's.
  The JSON layout (``people[0]`` + ``canvas_width``/``canvas_height``) is the one
  sd-webui-controlnet's ``encode_poses_as_json`` writes; its ``decode_json_as_poses``
  keeps only points with confidence >= 1.

Conventions:

- left/right are the *character's* (OpenPose's R/L are the person's sides);
- ``Keypoints.xy`` is in the project's pixel convention (``camera.py``: u right, v down,
  pixel centres at +0.5); the JSON uses OpenPose's / OpenCV's pixel-index convention
  (centre of the top-left pixel = (0, 0)), i.e. ``x = u - 0.5``, ``y = v - 0.5``;
- confidence: 1 visible; :data:`OCCLUDED_CONFIDENCE` (0.5) for a point in view but hidden
  by the depth test (kept with its position, drawn only with ``draw_occluded=True``);
  0 with x = y = 0 for a point that is missing, behind the camera or outside the image
  (what OpenPose writes for an undetected part).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from . import openpose_draw as odraw
from .camera import Camera
from .jit import KERNEL_ERRORS, disable, enabled, njit

# --------------------------------------------------------------------------- definitions

BODY25_NAMES: tuple[str, ...] = (
    "Nose", "Neck", "RShoulder", "RElbow", "RWrist", "LShoulder", "LElbow", "LWrist",
    "MidHip", "RHip", "RKnee", "RAnkle", "LHip", "LKnee", "LAnkle", "REye", "LEye", "REar",
    "LEar", "LBigToe", "LSmallToe", "LHeel", "RBigToe", "RSmallToe", "RHeel",
)
COCO18_NAMES: tuple[str, ...] = (
    "Nose", "Neck", "RShoulder", "RElbow", "RWrist", "LShoulder", "LElbow", "LWrist",
    "RHip", "RKnee", "RAnkle", "LHip", "LKnee", "LAnkle", "REye", "LEye", "REar", "LEar",
)
BODY25_INDEX: dict[str, int] = {n: i for i, n in enumerate(BODY25_NAMES)}
COCO18_INDEX: dict[str, int] = {n: i for i, n in enumerate(COCO18_NAMES)}
# COCO-18 point k is BODY_25 point BODY25_TO_COCO18[k].
BODY25_TO_COCO18: np.ndarray = np.array([BODY25_INDEX[n] for n in COCO18_NAMES])

HAND_FINGERS: tuple[str, ...] = ("Thumb", "Index", "Middle", "Ring", "Little")
HAND_NAMES: tuple[str, ...] = ("Wrist",) + tuple(
    f"{f}{k}" for f in HAND_FINGERS for k in range(1, 5)
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
FACE_COUNT = 70
FACE_NOSE_TIP, FACE_RIGHT_PUPIL, FACE_LEFT_PUPIL = 30, 68, 69

# controlnet_aux draw_bodypose (limbSeq is 1-based there).
COCO18_LIMBS: tuple[tuple[int, int], ...] = (
    (1, 2), (1, 5), (2, 3), (3, 4), (5, 6), (6, 7), (1, 8), (8, 9), (9, 10), (1, 11),
    (11, 12), (12, 13), (1, 0), (0, 14), (14, 16), (0, 15), (15, 17),
)
COCO18_COLORS: np.ndarray = np.array([
    [255, 0, 0], [255, 85, 0], [255, 170, 0], [255, 255, 0], [170, 255, 0], [85, 255, 0],
    [0, 255, 0], [0, 255, 85], [0, 255, 170], [0, 255, 255], [0, 170, 255], [0, 85, 255],
    [0, 0, 255], [85, 0, 255], [170, 0, 255], [255, 0, 255], [255, 0, 170], [255, 0, 85],
], dtype=np.uint8)
HAND_EDGES: tuple[tuple[int, int], ...] = tuple(
    (0 if s == 0 else 1 + 4 * f + s - 1, 1 + 4 * f + s) for f in range(5) for s in range(4)
)


def _hsv_hue_colors(n: int) -> np.ndarray:
    """RGB of hue k/n at full saturation and value, rounded like cv2's colour cast."""
    h = np.arange(n) / n * 6.0
    i = np.floor(h).astype(int) % 6
    f = h - np.floor(h)
    one, zero = np.ones(n), np.zeros(n)
    table = [(one, f, zero), (1 - f, one, zero), (zero, one, f), (zero, 1 - f, one),
             (f, zero, one), (one, zero, 1 - f)]
    rgb = np.array([[table[i[k]][c][k] for c in range(3)] for k in range(n)])
    return np.rint(rgb * 255.0).astype(np.uint8)


HAND_EDGE_COLORS: np.ndarray = _hsv_hue_colors(len(HAND_EDGES))
HAND_POINT_COLOR = np.array([0, 0, 255], dtype=np.uint8)
FACE_POINT_COLOR = np.array([255, 255, 255], dtype=np.uint8)
LIMB_ALPHA = 0.6

OCCLUDED_CONFIDENCE = 0.5

# Face points in the head frame, as fractions of the head size (head-bone head to crown):
# (forward, up, towards the character's left). Origin: the head bone's head (top of the
# neck). Eyes/ears use +left for the character's left one, mirrored for the right.
FACE_LAYOUT: dict[str, tuple[float, float, float]] = {
    "Nose": (0.62, 0.20, 0.0),
    "LEye": (0.50, 0.38, 0.18),
    "REye": (0.50, 0.38, -0.18),
    "LEar": (0.05, 0.30, 0.42),
    "REar": (0.05, 0.30, -0.42),
}
_FACE_INDEX = np.array([BODY25_INDEX[k] for k in FACE_LAYOUT])
_FACE_A, _FACE_B, _FACE_C = (np.array([v[i] for v in FACE_LAYOUT.values()])[:, None]
                             for i in range(3))
# Feet, as fractions of the ankle->toe-tip length L, in the foot frame (d: ankle->tip,
# n: perpendicular to d in the plane of shin and foot, towards the knee; l: the
# character's left). Big toe medial of the tip, small toe lateral and a little back, heel
# below-behind the ankle on the sole.
BIG_TOE_MEDIAL = 0.10
SMALL_TOE_LATERAL, SMALL_TOE_BACK = 0.18, 0.12
HEEL_DOWN, HEEL_BACK = 0.40, 0.05

# Depth of each joint behind the body surface it sits in, in metres for an adult whose
# Neck-MidHip distance is NOMINAL_TORSO (scaled per character by body_scale): added to
# the depth-test tolerance because joints are inside the mesh.
NOMINAL_TORSO = 0.52
# Torso joints sit deep inside the body and under the chin: with smaller margins the
# neck and hips of a plain three-quarter view were marked occluded on the demo shot,
# which drops the whole torso from the ControlNet drawing.
BODY25_MARGIN: np.ndarray = np.array([
    0.01, 0.14, 0.09, 0.045, 0.035, 0.09, 0.045, 0.035, 0.16, 0.14, 0.06, 0.045, 0.14,
    0.06, 0.045, 0.01, 0.01, 0.015, 0.015, 0.02, 0.02, 0.02, 0.02, 0.02, 0.02,
])
HAND_MARGIN: np.ndarray = np.array([0.03] + [0.012] * 20)
FACE_MARGIN: np.ndarray = np.full(FACE_COUNT, 0.01)
MARGINS: dict[str, np.ndarray] = {
    "body25": BODY25_MARGIN, "hand_left": HAND_MARGIN, "hand_right": HAND_MARGIN,
    "face": FACE_MARGIN,
}


# --------------------------------------------------------------------------- 3D points

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


# --------------------------------------------------------------------------- projection

@dataclass
class Keypoints:
    """Projected keypoints of one set (body, hand or face)."""

    xy: np.ndarray  # (N, 2) pixel uv, project convention (centres at +0.5)
    depth: np.ndarray  # (N,) planar depth, metres (NaN where missing)
    present: np.ndarray  # (N,) bool: a 3D point exists
    in_view: np.ndarray  # (N,) bool: present, within near/far and inside the image
    visible: np.ndarray  # (N,) bool: in view and not occluded

    def __len__(self) -> int:
        return len(self.present)

    @property
    def occluded(self) -> np.ndarray:
        return self.in_view & ~self.visible

    @property
    def confidence(self) -> np.ndarray:
        """1 visible, OCCLUDED_CONFIDENCE occluded in view, 0 otherwise."""
        return np.where(self.visible, 1.0, np.where(self.occluded, OCCLUDED_CONFIDENCE, 0.0))

    def take(self, index: np.ndarray) -> Keypoints:
        """A subset / reordering (e.g. BODY25_TO_COCO18)."""
        return Keypoints(self.xy[index], self.depth[index], self.present[index],
                         self.in_view[index], self.visible[index])

    def to_coco18(self) -> Keypoints:
        """COCO-18 body from a BODY_25 body (returned unchanged when already 18)."""
        if len(self) == 18:
            return self
        if len(self) != 25:
            raise ValueError(f"expected a 25- or 18-point body, got {len(self)}")
        return self.take(BODY25_TO_COCO18)


def _sample_min(buffer: np.ndarray, xy: np.ndarray, window: int) -> np.ndarray:
    """Min of ``buffer`` over a (2w+1)^2 pixel window around each uv (clamped at borders),
    pixels that are non-finite or <= 0 (empty) counting as +inf.

    Only the sampled pixels are read and cleaned: cleaning (and casting to float64) the
    whole buffer first cost more than all the rest of the skeleton pass.
    """
    if enabled() and buffer.dtype in (np.float32, np.float64):
        out = np.empty(len(xy))
        try:
            _sample_min_jit(buffer, np.ascontiguousarray(xy, np.float64), int(window), out)
            return out
        except KERNEL_ERRORS as e:
            disable(e)
    h, w = buffer.shape
    off = np.arange(-window, window + 1)
    col = np.clip(np.floor(xy[:, 0]).astype(int), 0, w - 1)
    row = np.clip(np.floor(xy[:, 1]).astype(int), 0, h - 1)
    rows = np.clip(row[:, None, None] + off[None, :, None], 0, h - 1)
    cols = np.clip(col[:, None, None] + off[None, None, :], 0, w - 1)
    v = buffer[rows, cols].reshape(len(xy), -1).astype(float)
    with np.errstate(invalid="ignore"):
        v[~(np.isfinite(v) & (v > 0))] = np.inf
    return v.min(axis=1) if len(xy) else np.full(0, np.inf)


@njit
def _sample_min_jit(buffer, xy, window, out):  # pragma: no cover - compiled
    """:func:`_sample_min`'s numpy path as a loop (a min of the same values: identical)."""
    h, w = buffer.shape
    for n in range(xy.shape[0]):
        col = min(max(int(math.floor(xy[n, 0])), 0), w - 1)
        row = min(max(int(math.floor(xy[n, 1])), 0), h - 1)
        best = np.inf
        for di in range(-window, window + 1):
            r = min(max(row + di, 0), h - 1)
            for dj in range(-window, window + 1):
                v = float(buffer[r, min(max(col + dj, 0), w - 1)])
                if math.isfinite(v) and v > 0.0 and v < best:
                    best = v
        out[n] = best


def project_keypoints(points3d: np.ndarray, cam: Camera, depth_buffer: np.ndarray | None = None,
                      tolerance: float = 0.03, margin: float | np.ndarray = 0.0,
                      window: int = 1) -> Keypoints:
    """Project (N, 3) world points (NaN rows = missing) and test their visibility.

    In view: near <= depth <= far and 0 <= u < width, 0 <= v < height. With a (H, W)
    planar-depth buffer (non-finite or <= 0 = empty), a point in view is visible when
    ``depth <= min(buffer over a (2*window+1)^2 window) + tolerance + margin``; ``margin``
    (scalar or (N,), metres) is how deep the joint sits inside the surface (see MARGINS).
    """
    p = np.asarray(points3d, float).reshape(-1, 3)
    present = np.all(np.isfinite(p), axis=1)
    xy, depth = cam.project_world(np.where(present[:, None], p, 0.0))
    xy = np.where(present[:, None], xy, np.nan)
    depth = np.where(present, depth, np.nan)
    with np.errstate(invalid="ignore"):
        in_view = (present & (depth >= cam.near) & (depth <= cam.far)
                   & (xy[:, 0] >= 0) & (xy[:, 0] < cam.width)
                   & (xy[:, 1] >= 0) & (xy[:, 1] < cam.height))
    visible = in_view.copy()
    if depth_buffer is not None and in_view.any():
        buf = np.asarray(depth_buffer)
        if buf.shape != (cam.height, cam.width):
            raise ValueError(f"depth buffer is {buf.shape}, camera is "
                             f"{(cam.height, cam.width)} (rows, columns)")
        idx = np.flatnonzero(in_view)
        surface = _sample_min(buf, xy[idx], window)
        allow = tolerance + np.broadcast_to(np.asarray(margin, float), (len(p),))[idx]
        visible[idx] = depth[idx] <= surface + allow
    return Keypoints(xy=xy, depth=depth, present=present, in_view=in_view, visible=visible)


@lru_cache(maxsize=16)
def _margins(sets: tuple[tuple[str, int], ...]) -> np.ndarray:
    """MARGINS of the concatenated sets (name, point count); 0 for a set without any."""
    return np.concatenate([np.broadcast_to(np.asarray(MARGINS.get(k, 0.0), float), (n,))
                           for k, n in sets])


def project_skeleton(points: dict[str, np.ndarray], cam: Camera,
                     depth_buffer: np.ndarray | None = None, tolerance: float = 0.03,
                     scale: float | None = None, window: int = 1) -> dict[str, Keypoints]:
    """:func:`project_keypoints` for every set of :func:`joints_3d`, with the per-joint
    MARGINS scaled by ``scale`` (default :func:`body_scale`)."""
    s = body_scale(points) if scale is None else scale
    # All sets in one projection and one depth test: the per-call overhead dominated.
    sets = {k: np.asarray(v, float).reshape(-1, 3) for k, v in points.items()}
    if not sets:
        return {}
    margin = _margins(tuple((k, len(v)) for k, v in sets.items())) * s
    both = project_keypoints(np.concatenate(list(sets.values())), cam, depth_buffer,
                             tolerance, margin, window)
    out, start = {}, 0
    for k, v in sets.items():
        out[k] = both.take(slice(start, start + len(v)))
        start += len(v)
    return out


# --------------------------------------------------------------------------- JSON

def _rows(kp: Keypoints | None, n: int, include_occluded: bool) -> np.ndarray:
    """(n, 3) [x, y, c] of one set, unrounded; zeros for a missing set."""
    out = np.zeros((n, 3))
    if kp is None:
        return out
    if len(kp) != n:
        raise ValueError(f"expected {n} keypoints, got {len(kp)}")
    # c: 1 visible, OCCLUDED_CONFIDENCE occluded (when included), else 0 with x = y = 0.
    keep = (kp.visible | kp.in_view) if include_occluded else kp.visible
    out[keep, :2] = kp.xy[keep] - 0.5
    out[keep, 2] = np.where(kp.visible[keep], 1.0, OCCLUDED_CONFIDENCE)
    return out


def round3(values: np.ndarray) -> list[float]:
    """``[round(float(v), 3) for v in values.ravel()]``, vectorised.

    Python's round(x, 3) is the double nearest to x * 1000 rounded exactly (ties to even)
    and divided by 1000. ``rint(x * 1000) / 1000`` gives the same double unless the rounded
    product lies next to a half-integer, where its rounding error may pick the other
    integer: those few values (and huge or non-finite ones) go through round() itself.
    """
    x = np.asarray(values, float).ravel()
    y = x * 1000.0
    q = np.rint(y)
    with np.errstate(invalid="ignore"):
        doubt = ~(np.abs(np.abs(y - q) - 0.5) > 1e-6) | ~(np.abs(y) < 2.0 ** 40)
    out = (q / 1000.0).tolist()
    for i in np.flatnonzero(doubt).tolist():
        out[i] = round(float(x[i]), 3)
    return out


def openpose_json(body: Keypoints, hands: tuple[Keypoints | None, Keypoints | None] | None,
                  face: Keypoints | None, width: int, height: int, *, coco18: bool = False,
                  include_occluded: bool = True) -> dict:
    """One person in OpenPose's JSON (version 1.3) plus ControlNet's canvas size.

    ``body`` has 25 (BODY_25) or 18 (COCO-18) points; ``coco18=True`` writes COCO-18
    (ControlNet's preprocessor layout) from either. ``hands`` = (left, right). Each point
    is ``[x, y, c]`` in OpenPose pixel-index coordinates (see the module docstring);
    occluded points keep their position with c = 0.5 unless ``include_occluded=False``.
    """
    if coco18:
        body = body.to_coco18()
    n = len(body)
    if n not in (18, 25):
        raise ValueError(f"body must have 25 or 18 keypoints, got {n}")
    left, right = hands if hands is not None else (None, None)
    # All sets rounded in one go, then cut back into the four lists.
    flat = round3(np.concatenate([_rows(body, n, include_occluded),
                                  _rows(face, FACE_COUNT, include_occluded),
                                  _rows(left, 21, include_occluded),
                                  _rows(right, 21, include_occluded)]))
    cut = np.cumsum([0, 3 * n, 3 * FACE_COUNT, 63, 63]).tolist()
    person = {
        "person_id": [-1],
        "pose_keypoints_2d": flat[cut[0]:cut[1]],
        "face_keypoints_2d": flat[cut[1]:cut[2]],
        "hand_left_keypoints_2d": flat[cut[2]:cut[3]],
        "hand_right_keypoints_2d": flat[cut[3]:cut[4]],
        "pose_keypoints_3d": [], "face_keypoints_3d": [],
        "hand_left_keypoints_3d": [], "hand_right_keypoints_3d": [],
    }
    return {"version": 1.3, "people": [person], "canvas_width": int(width),
            "canvas_height": int(height)}


# --------------------------------------------------------------------------- drawing
# The figure is built as a list of primitives (openpose_draw.paint), each rasterised over
# its own bounding box only. The reference scales the whole limb layer by LIMB_ALPHA
# after drawing it on black; drawing the limbs in pre-scaled colours gives the same
# pixels (the scaling is per pixel) without a pass over the full image.

LIMB_COLORS: np.ndarray = (COCO18_COLORS[:len(COCO18_LIMBS)] * LIMB_ALPHA).astype(np.uint8)

Primitives = tuple[np.ndarray, np.ndarray, np.ndarray]  # kind (N,), params (N, 7), colors (N, 3)


@dataclass(frozen=True)
class _Layout:
    """The primitives of a figure made of point sets, in drawing order: each joins points
    ``a`` and ``b`` (a = b for a dot) of the concatenated sets and is drawn when both are."""

    kind: np.ndarray  # (P,) openpose_draw.DISC / ELLIPSE / LINE
    a: np.ndarray  # (P,) point index
    b: np.ndarray  # (P,)
    radius: np.ndarray  # (P,) disc radius, line half-width, ellipse minor semi-axis
    colors: np.ndarray  # (P, 3) uint8
    positive: np.ndarray  # (N,) point dropped unless x > 0 and y > 0 (hands, face)


@lru_cache(maxsize=64)
def _layout(sets: tuple[tuple[str, int], ...], scale: float, stick: float | None) -> _Layout:
    """Layout of ``sets`` = (("body" | "hand" | "face", point count), ...): controlnet_aux's
    draw_bodypose (limb ellipses in LIMB_COLORS, then dots), draw_handpose (edges, then
    dots), draw_facepose (dots), with their sizes at ``scale``."""
    kind, a, b, radius, colors, positive = [], [], [], [], [], []

    def add(k: int, ia, ib, r: float, col) -> None:
        ia = np.asarray(ia)
        kind.append(np.full(len(ia), k))
        a.append(ia)
        b.append(np.asarray(ib))
        radius.append(np.full(len(ia), float(r)))
        colors.append(np.broadcast_to(np.asarray(col, np.uint8), (len(ia), 3)))

    off = 0
    for name, n in sets:
        dots = off + np.arange(n)
        if name == "body":
            sw = 4.0 * scale if stick is None else stick
            limbs = off + np.array(COCO18_LIMBS)
            add(odraw.ELLIPSE, limbs[:, 0], limbs[:, 1], max(sw, 0.5), LIMB_COLORS)
            add(odraw.DISC, dots, dots, 4.0 * scale, COCO18_COLORS[:n])
        elif name == "hand":
            if n != len(HAND_NAMES):  # edges would reach into the next set
                raise ValueError(f"a hand has {len(HAND_NAMES)} keypoints, got {n}")
            edges = off + np.array(HAND_EDGES)
            add(odraw.LINE, edges[:, 0], edges[:, 1], max(2.0 * scale / 2.0, 0.5),
                HAND_EDGE_COLORS)
            add(odraw.DISC, dots, dots, 4.0 * scale, HAND_POINT_COLOR)
        else:
            add(odraw.DISC, dots, dots, 3.0 * scale, FACE_POINT_COLOR)
        positive.append(np.full(n, name != "body"))
        off += n
    return _Layout(np.concatenate(kind), np.concatenate(a), np.concatenate(b),
                   np.concatenate(radius), np.concatenate(colors), np.concatenate(positive))


def _primitives(parts: list[tuple[str, Keypoints]], draw_occluded: bool, scale: float,
                stick: float | None) -> Primitives:
    """The primitives (see openpose_draw) of a figure, computed for all its sets at once."""
    lay = _layout(tuple((name, len(kp)) for name, kp in parts), scale, stick)
    xy = np.concatenate([kp.xy for _, kp in parts])
    flags = np.concatenate([kp.in_view if draw_occluded else kp.visible for _, kp in parts])
    # Integer pixel-index coordinates as controlnet_aux computes them (int(x * W)).
    pix = np.trunc(xy - 0.5)
    with np.errstate(invalid="ignore"):  # NaN rows are never drawn
        ok = (flags & np.isfinite(pix).all(axis=1)
              & ~(lay.positive & (pix <= 0).any(axis=1)))  # controlnet_aux: x or y <= eps
    sel = ok[lay.a] & ok[lay.b]
    kind, r = lay.kind[sel], lay.radius[sel]
    pa, pb = pix[lay.a[sel]], pix[lay.b[sel]]
    params = np.zeros((len(kind), 7))
    params[:, :2] = pa
    params[:, 2] = r
    line = kind == odraw.LINE
    params[line, 2:4] = pb[line]
    params[line, 4] = r[line]
    ell = kind == odraw.ELLIPSE
    if ell.any():
        (xa, ya), (xb, yb) = pa[ell].T, pb[ell].T
        # The reference's int() truncations, in its order: centre, half length, angle.
        angle = np.radians(np.trunc(np.degrees(np.arctan2(ya - yb, xa - xb))))
        half = np.maximum(np.trunc(np.hypot(xa - xb, ya - yb) / 2), 0.5)
        params[ell, :6] = np.stack([np.trunc((xa + xb) / 2), np.trunc((ya + yb) / 2), half,
                                    r[ell], np.cos(angle), np.sin(angle)], axis=1)
    return kind, params, lay.colors[sel]


def _one(kind: int, cols: list[float], color) -> Primitives:
    params = np.zeros((1, 7))
    params[0, :len(cols)] = cols
    return np.array([kind]), params, np.asarray(color, np.uint8).reshape(1, 3)


def fill_circle(canvas: np.ndarray, x: float, y: float, r: float, color) -> None:
    """Filled disc centred on pixel-index coordinates (x, y) (OpenCV convention)."""
    odraw.paint(canvas, *_one(odraw.DISC, [x, y, r], color))


def fill_ellipse(canvas: np.ndarray, x: float, y: float, a: float, b: float, angle_deg: float,
                 color) -> None:
    """Filled ellipse, semi-axes a (along ``angle_deg``, image x towards y) and b."""
    t = np.radians(angle_deg)
    odraw.paint(canvas, *_one(odraw.ELLIPSE, [x, y, max(a, 0.5), max(b, 0.5), np.cos(t),
                                              np.sin(t)], color))


def draw_line(canvas: np.ndarray, p0, p1, thickness: float, color) -> None:
    """Thick segment with round caps: pixels within thickness/2 of the segment."""
    (x0, y0), (x1, y1) = p0, p1
    odraw.paint(canvas, *_one(odraw.LINE, [x0, y0, x1, y1, max(thickness / 2.0, 0.5)], color))


def draw_bodypose(canvas: np.ndarray, body: Keypoints, *, draw_occluded: bool = False,
                  scale: float = 1.0, stickwidth: float | None = None) -> np.ndarray:
    """controlnet_aux ``draw_bodypose`` on a COCO-18 (or BODY_25) body; returns the canvas."""
    if canvas.any():  # what was there is part of the layer scaled by LIMB_ALPHA
        canvas[:] = (canvas * LIMB_ALPHA).astype(np.uint8)
    prims = _primitives([("body", body.to_coco18())], draw_occluded, scale, stickwidth)
    return odraw.paint(canvas, *prims)


def draw_handpose(canvas: np.ndarray, hand: Keypoints, *, draw_occluded: bool = False,
                  scale: float = 1.0) -> np.ndarray:
    """controlnet_aux ``draw_handpose``: hue-coloured edges then blue dots."""
    return odraw.paint(canvas, *_primitives([("hand", hand)], draw_occluded, scale, None))


def draw_facepose(canvas: np.ndarray, face: Keypoints, *, draw_occluded: bool = False,
                  scale: float = 1.0) -> np.ndarray:
    """controlnet_aux ``draw_facepose``: white dots of radius 3."""
    return odraw.paint(canvas, *_primitives([("face", face)], draw_occluded, scale, None))


def draw_openpose(body: Keypoints | None,
                  hands: tuple[Keypoints | None, Keypoints | None] | None,
                  width: int, height: int, face: Keypoints | None = None, *,
                  draw_occluded: bool = False, scale: float | None = None,
                  xinsr_stick_scaling: bool = False) -> np.ndarray:
    """The ControlNet openpose image: (height, width, 3) uint8 RGB on black.

    ``body`` is COCO-18 or BODY_25 (converted). Sizes are controlnet_aux's at 512 px
    (its detect resolution, short side) scaled by ``scale`` (default min(W, H) / 512,
    what drawing at 512 and resizing gives). ``xinsr_stick_scaling`` uses
    comfyui_controlnet_aux's option instead (sizes at 1x, stick width x1 below 500 px on
    the long side, else x min(2 + long // 1000, 7)).
    """
    canvas = np.zeros((int(height), int(width), 3), np.uint8)
    stick = None
    if xinsr_stick_scaling:
        s = 1.0
        side = max(width, height)
        stick = 4.0 * (1 if side < 500 else min(2 + side // 1000, 7))
    else:
        s = min(width, height) / 512.0 if scale is None else float(scale)
    # Body, hands, face in controlnet_aux's order, painted in one call; the limbs go
    # first on the black canvas, so their pre-scaled colours stand for the scaled layer.
    parts: list[tuple[str, Keypoints]] = []
    if body is not None:
        parts.append(("body", body.to_coco18()))
    parts += [("hand", hand) for hand in hands or () if hand is not None]
    if face is not None:
        parts.append(("face", face))
    if not parts:
        return canvas
    return odraw.paint(canvas, *_primitives(parts, draw_occluded, s, stick))
