"""OpenPose keypoints from the canonical humanoid: 3D points, projection, JSON and drawing.

Pure numpy (no bpy, no OpenCV). The pipeline per frame:

1. :func:`joints_3d` turns the world pose of the canonical joints (``rigs/humanoid.py``
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

from dataclasses import dataclass

import numpy as np

from .camera import Camera

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


def _unit(v: np.ndarray) -> np.ndarray | None:
    n = float(np.linalg.norm(v))
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
    if head_up is not None:
        up_l = np.asarray(head_up, float)
    elif head_rest is not None:
        up_l = _axes(head_rest).T @ np.array([0.0, 0.0, 1.0])
    else:
        up_l = np.array([0.0, 1.0, 0.0])
    if head_forward is not None:
        fwd_l = np.asarray(head_forward, float)
    elif head_rest is not None:
        fwd_l = _axes(head_rest).T @ np.array([0.0, -1.0, 0.0])
    else:
        # No rest given: forward = cross(left, up) of the body now, snapped to the head
        # bone's nearest local axis perpendicular to Y, so the face turns with the head.
        left = _body_left(pose)
        up_w = _unit(m[:, 1])
        if left is None or up_w is None:
            return None
        guess = m.T @ np.cross(left, up_w)
        cand = np.array([[1, 0, 0], [-1, 0, 0], [0, 0, 1], [0, 0, -1]], float)
        fwd_l = cand[int(np.argmax(cand @ guess))]
    up = _unit(m @ up_l)
    if up is None:
        return None
    fwd = m @ fwd_l
    fwd = _unit(fwd - up * float(fwd @ up))
    if fwd is None:
        return None
    left = np.cross(up, fwd)  # forward = left x up  =>  left = up x forward
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
        size = float(head_size) if head_size else float(np.linalg.norm(get("head", "tail") - h0))
        if frame is not None and size > 0:
            fwd, up, left = frame
            for key, (a, b, c) in FACE_LAYOUT.items():
                put(key, h0 + size * (a * fwd + b * up + c * left))
            face[FACE_NOSE_TIP] = body[BODY25_INDEX["Nose"]]
            face[FACE_RIGHT_PUPIL] = body[BODY25_INDEX["REye"]]
            face[FACE_LEFT_PUPIL] = body[BODY25_INDEX["LEye"]]

    out = {"body25": body, "face": face}
    for side in ("left", "right"):
        hand = _nan(21)
        wrist = get(f"{side}Hand")
        if wrist is not None:
            hand[0] = wrist
        for f, finger in enumerate(HAND_FINGERS):
            for s, (seg, end) in enumerate(_HAND_SOURCES[finger]):
                p = get(f"{side}{finger}{seg}", end)
                if p is not None:
                    hand[1 + 4 * f + s] = p
        out[f"hand_{side}"] = hand
    return out


def _feet(body: np.ndarray, s: str, ankle, tip, knee) -> None:
    """Big toe, small toe and heel of one foot (s = "L" or "R") into ``body``."""
    if ankle is None or tip is None:
        return
    d = tip - ankle
    length = float(np.linalg.norm(d))
    if length < 1e-9:
        return
    d = d / length
    shin = (knee - ankle) if knee is not None else np.array([0.0, 0.0, 1.0])
    n = _unit(shin - d * float(shin @ d))
    if n is None:
        return
    left = np.cross(n, d)  # the character's left (d forward, n up)
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
    """Min of ``buffer`` over a (2w+1)^2 pixel window around each uv (clamped at borders)."""
    h, w = buffer.shape
    col = np.clip(np.floor(xy[:, 0]).astype(int), 0, w - 1)
    row = np.clip(np.floor(xy[:, 1]).astype(int), 0, h - 1)
    best = np.full(len(xy), np.inf)
    for di in range(-window, window + 1):
        for dj in range(-window, window + 1):
            v = buffer[np.clip(row + di, 0, h - 1), np.clip(col + dj, 0, w - 1)]
            best = np.minimum(best, v)
    return best


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
        buf = np.asarray(depth_buffer, float)
        if buf.shape != (cam.height, cam.width):
            raise ValueError(f"depth buffer is {buf.shape}, camera is "
                             f"{(cam.height, cam.width)} (rows, columns)")
        buf = np.where(np.isfinite(buf) & (buf > 0), buf, np.inf)
        idx = np.flatnonzero(in_view)
        surface = _sample_min(buf, xy[idx], window)
        allow = tolerance + np.broadcast_to(np.asarray(margin, float), (len(p),))[idx]
        visible[idx] = depth[idx] <= surface + allow
    return Keypoints(xy=xy, depth=depth, present=present, in_view=in_view, visible=visible)


def project_skeleton(points: dict[str, np.ndarray], cam: Camera,
                     depth_buffer: np.ndarray | None = None, tolerance: float = 0.03,
                     scale: float | None = None, window: int = 1) -> dict[str, Keypoints]:
    """:func:`project_keypoints` for every set of :func:`joints_3d`, with the per-joint
    MARGINS scaled by ``scale`` (default :func:`body_scale`)."""
    s = body_scale(points) if scale is None else scale
    return {k: project_keypoints(v, cam, depth_buffer, tolerance,
                                 MARGINS.get(k, 0.0) * s, window) for k, v in points.items()}


# --------------------------------------------------------------------------- JSON

def _flat(kp: Keypoints | None, n: int, include_occluded: bool) -> list[float]:
    if kp is None:
        return [0.0] * (3 * n)
    if len(kp) != n:
        raise ValueError(f"expected {n} keypoints, got {len(kp)}")
    c = kp.confidence if include_occluded else np.where(kp.visible, 1.0, 0.0)
    keep = c > 0
    x = np.where(keep, kp.xy[:, 0] - 0.5, 0.0)
    y = np.where(keep, kp.xy[:, 1] - 0.5, 0.0)
    return [round(float(v), 3) for v in np.stack([x, y, c], axis=1).ravel()]


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
    person = {
        "person_id": [-1],
        "pose_keypoints_2d": _flat(body, n, include_occluded),
        "face_keypoints_2d": _flat(face, FACE_COUNT, include_occluded),
        "hand_left_keypoints_2d": _flat(left, 21, include_occluded),
        "hand_right_keypoints_2d": _flat(right, 21, include_occluded),
        "pose_keypoints_3d": [], "face_keypoints_3d": [],
        "hand_left_keypoints_3d": [], "hand_right_keypoints_3d": [],
    }
    return {"version": 1.3, "people": [person], "canvas_width": int(width),
            "canvas_height": int(height)}


# --------------------------------------------------------------------------- drawing

def _bbox(canvas: np.ndarray, x0: float, x1: float, y0: float, y1: float):
    h, w = canvas.shape[:2]
    j0, j1 = max(int(np.floor(x0)), 0), min(int(np.ceil(x1)) + 1, w)
    i0, i1 = max(int(np.floor(y0)), 0), min(int(np.ceil(y1)) + 1, h)
    if j0 >= j1 or i0 >= i1:
        return None
    jj, ii = np.meshgrid(np.arange(j0, j1, dtype=float), np.arange(i0, i1, dtype=float))
    return (slice(i0, i1), slice(j0, j1)), jj, ii


def fill_circle(canvas: np.ndarray, x: float, y: float, r: float, color) -> None:
    """Filled disc centred on pixel-index coordinates (x, y) (OpenCV convention)."""
    box = _bbox(canvas, x - r, x + r, y - r, y + r)
    if box is None:
        return
    sl, jj, ii = box
    canvas[sl][(jj - x) ** 2 + (ii - y) ** 2 <= r * r + 1e-9] = color


def fill_ellipse(canvas: np.ndarray, x: float, y: float, a: float, b: float, angle_deg: float,
                 color) -> None:
    """Filled ellipse, semi-axes a (along ``angle_deg``, image x towards y) and b."""
    a, b = max(a, 0.5), max(b, 0.5)
    r = max(a, b)
    box = _bbox(canvas, x - r, x + r, y - r, y + r)
    if box is None:
        return
    sl, jj, ii = box
    t = np.radians(angle_deg)
    dx, dy = jj - x, ii - y
    u = dx * np.cos(t) + dy * np.sin(t)
    v = -dx * np.sin(t) + dy * np.cos(t)
    canvas[sl][(u / a) ** 2 + (v / b) ** 2 <= 1.0 + 1e-9] = color


def draw_line(canvas: np.ndarray, p0, p1, thickness: float, color) -> None:
    """Thick segment with round caps: pixels within thickness/2 of the segment."""
    (x0, y0), (x1, y1) = p0, p1
    r = max(thickness / 2.0, 0.5)
    box = _bbox(canvas, min(x0, x1) - r, max(x0, x1) + r, min(y0, y1) - r, max(y0, y1) + r)
    if box is None:
        return
    sl, jj, ii = box
    dx, dy = x1 - x0, y1 - y0
    ll = dx * dx + dy * dy
    t = np.zeros_like(jj) if ll == 0 else np.clip(((jj - x0) * dx + (ii - y0) * dy) / ll, 0, 1)
    d2 = (jj - x0 - t * dx) ** 2 + (ii - y0 - t * dy) ** 2
    canvas[sl][d2 <= r * r + 1e-9] = color


def _drawn(kp: Keypoints, draw_occluded: bool) -> np.ndarray:
    return kp.in_view if draw_occluded else kp.visible


def _pix(kp: Keypoints) -> np.ndarray:
    """Integer pixel-index coordinates as controlnet_aux computes them (int(x * W))."""
    return np.trunc(np.nan_to_num(kp.xy - 0.5, nan=-1.0))


def draw_bodypose(canvas: np.ndarray, body: Keypoints, *, draw_occluded: bool = False,
                  scale: float = 1.0, stickwidth: float | None = None) -> np.ndarray:
    """controlnet_aux ``draw_bodypose`` on a COCO-18 (or BODY_25) body; returns the canvas."""
    kp = body.to_coco18()
    ok = _drawn(kp, draw_occluded)
    pix = _pix(kp)
    sw = 4.0 * scale if stickwidth is None else stickwidth
    for (a, b), color in zip(COCO18_LIMBS, COCO18_COLORS, strict=False):
        if not (ok[a] and ok[b]):
            continue
        (xa, ya), (xb, yb) = pix[a], pix[b]
        length = float(np.hypot(xa - xb, ya - yb))
        angle = float(np.degrees(np.arctan2(ya - yb, xa - xb)))
        fill_ellipse(canvas, int((xa + xb) / 2), int((ya + yb) / 2), int(length / 2), sw,
                     int(angle), color)
    canvas[:] = (canvas * LIMB_ALPHA).astype(np.uint8)  # the limb layer at 0.6
    for i in np.flatnonzero(ok):
        fill_circle(canvas, pix[i, 0], pix[i, 1], 4.0 * scale, COCO18_COLORS[i])
    return canvas


def draw_handpose(canvas: np.ndarray, hand: Keypoints, *, draw_occluded: bool = False,
                  scale: float = 1.0) -> np.ndarray:
    """controlnet_aux ``draw_handpose``: hue-coloured edges then blue dots."""
    ok = _drawn(hand, draw_occluded)
    pix = _pix(hand)
    ok &= np.all(pix > 0, axis=1)  # controlnet_aux skips points at x or y <= eps
    for (a, b), color in zip(HAND_EDGES, HAND_EDGE_COLORS, strict=True):
        if ok[a] and ok[b]:
            draw_line(canvas, pix[a], pix[b], 2.0 * scale, color)
    for i in np.flatnonzero(ok):
        fill_circle(canvas, pix[i, 0], pix[i, 1], 4.0 * scale, HAND_POINT_COLOR)
    return canvas


def draw_facepose(canvas: np.ndarray, face: Keypoints, *, draw_occluded: bool = False,
                  scale: float = 1.0) -> np.ndarray:
    """controlnet_aux ``draw_facepose``: white dots of radius 3."""
    ok = _drawn(face, draw_occluded)
    pix = _pix(face)
    ok &= np.all(pix > 0, axis=1)
    for i in np.flatnonzero(ok):
        fill_circle(canvas, pix[i, 0], pix[i, 1], 3.0 * scale, FACE_POINT_COLOR)
    return canvas


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
    if body is not None:
        canvas = draw_bodypose(canvas, body, draw_occluded=draw_occluded, scale=s,
                               stickwidth=stick)
    for hand in hands or ():
        if hand is not None:
            canvas = draw_handpose(canvas, hand, draw_occluded=draw_occluded, scale=s)
    if face is not None:
        canvas = draw_facepose(canvas, face, draw_occluded=draw_occluded, scale=s)
    return canvas
