"""The OpenPose keypoint formats: BODY_25, COCO-18, hand and face orders, limbs and
colours of the reference drawing, the face and foot layouts and the depth-test margins
(sources in the package, :mod:`painted_skin.addon.core.openpose`)."""

from __future__ import annotations

import numpy as np

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
