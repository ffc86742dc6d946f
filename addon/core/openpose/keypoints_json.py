"""OpenPose's JSON of projected keypoints (BODY_25 or COCO-18 body, hands, face)."""

from __future__ import annotations

import numpy as np

from .formats import FACE_COUNT, OCCLUDED_CONFIDENCE
from .project import Keypoints


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


def normalized_openpose(data: dict) -> dict:
    """The pixel-form JSON of :func:`openpose_json` with every ``x`` divided by
    ``canvas_width`` and ``y`` by ``canvas_height``: the 0-1 form controlnet_aux and
    ComfyUI's pose editors read (they multiply back by the canvas size to draw).

    Points left out (c = 0) stay ``[0, 0, 0]``; confidences and the 3D lists are kept.
    """
    w, h = data.get("canvas_width"), data.get("canvas_height")
    if not (isinstance(w, int) and isinstance(h, int) and w > 0 and h > 0):
        raise ValueError(f"OpenPose JSON needs positive integer canvas_width/canvas_height "
                         f"to normalise (got {w!r} x {h!r}): write it with openpose_json")
    scale = np.array([1.0 / w, 1.0 / h, 1.0])
    people = []
    for person in data.get("people", []):
        out = dict(person)
        for key in _KEYPOINT_KEYS:
            flat = np.asarray(person.get(key, []), float)
            if len(flat) % 3:
                raise ValueError(f"{key} has {len(flat)} values, not x, y, c triplets")
            rows = flat.reshape(-1, 3) * scale
            rows[rows[:, 2] <= 0] = 0.0
            out[key] = [round(float(v), 6) for v in rows.ravel()]
        people.append(out)
    return {**data, "people": people}


_KEYPOINT_KEYS = ("pose_keypoints_2d", "face_keypoints_2d", "hand_left_keypoints_2d",
                  "hand_right_keypoints_2d")
