"""OpenPose keypoints: orders, 3D derivation, projection/visibility, JSON and drawing."""

from __future__ import annotations

import json

import numpy as np
import pytest
from painted_skin.addon.core import openpose as op
from painted_skin.addon.core.passes.camera import Camera
from painted_skin.addon.core.rig import humanoid

# --------------------------------------------------------------------------- fixtures


def _frame(direction, forward=(0.0, -1.0, 0.0)) -> np.ndarray:
    """A bone matrix with Y along ``direction`` and Z towards ``forward`` (as Blender's
    roll-0 vertical bones do) -- or, for bones along the facing, Z up."""
    y = np.asarray(direction, float)
    y = y / np.linalg.norm(y)
    z = np.asarray(forward, float)
    if abs(float(z @ y)) > 0.9:
        z = np.array([0.0, 0.0, 1.0])
    z = z - y * float(z @ y)
    z = z / np.linalg.norm(z)
    return np.column_stack([np.cross(y, z), y, z])


def t_pose() -> dict[str, op.JointPose]:
    """A 1.8 m canonical T-pose facing -Y, left = +X, fingers included."""
    seg: dict[str, tuple[tuple[float, float, float], tuple[float, float, float]]] = {
        "hips": ((0, 0, 0.95), (0, 0, 1.05)),
        "spine": ((0, 0, 1.05), (0, 0, 1.2)),
        "chest": ((0, 0, 1.2), (0, 0, 1.32)),
        "upperChest": ((0, 0, 1.32), (0, 0, 1.45)),
        "neck": ((0, 0, 1.45), (0, 0.01, 1.57)),
        "head": ((0, 0.01, 1.57), (0, 0.01, 1.77)),
    }
    for side, sx in (("left", 1.0), ("right", -1.0)):
        def add(name, a, b, sx=sx, side=side):
            seg[f"{side}{name}"] = ((sx * a[0], a[1], a[2]), (sx * b[0], b[1], b[2]))

        add("Shoulder", (0.03, 0, 1.42), (0.17, 0, 1.42))
        add("UpperArm", (0.17, 0, 1.42), (0.45, 0, 1.42))
        add("LowerArm", (0.45, 0, 1.42), (0.70, 0, 1.42))
        add("Hand", (0.70, 0, 1.42), (0.78, 0, 1.42))
        for k, (finger, y) in enumerate(zip(humanoid.FINGERS, (-0.04, -0.03, -0.01, 0.01, 0.03),
                                            strict=True)):
            x0 = 0.72 if k == 0 else 0.79
            for s, segment in enumerate(humanoid.FINGER_SEGMENTS[finger]):
                add(f"{finger}{segment}", (x0 + 0.03 * s, y, 1.42),
                    (x0 + 0.03 * (s + 1), y, 1.42))
        add("UpperLeg", (0.09, 0, 0.92), (0.09, 0, 0.5))
        add("LowerLeg", (0.09, 0, 0.5), (0.09, 0.01, 0.09))
        add("Foot", (0.09, 0.01, 0.09), (0.09, -0.11, 0.02))
        add("Toes", (0.09, -0.11, 0.02), (0.09, -0.17, 0.01))
    pose = {}
    for name, (h, t) in seg.items():
        h, t = np.array(h, float), np.array(t, float)
        pose[name] = op.JointPose(h, t, _frame(t - h))
    return pose


def front_camera(width: int = 256, height: int = 256, distance: float = 4.0) -> Camera:
    """At -Y looking at +Y (the character's front), up +Z: image right = world +X."""
    world = np.eye(4)
    world[:3, :3] = np.column_stack([[1, 0, 0], [0, 0, 1], [0, -1, 0]])  # x, y, z of camera
    world[:3, 3] = (0.0, -distance, 0.9)
    return Camera(width=width, height=height, fx=400.0, fy=400.0, cx=width / 2, cy=height / 2,
                  near=0.1, far=100.0, world=world)


def _b(name: str) -> int:
    return op.BODY25_INDEX[name]


# --------------------------------------------------------------------------- orders


def test_orders_and_lengths():
    assert len(op.BODY25_NAMES) == 25 and len(op.COCO18_NAMES) == 18
    assert op.BODY25_NAMES[8] == "MidHip" and op.BODY25_NAMES[24] == "RHeel"
    assert op.BODY25_NAMES[19:22] == ("LBigToe", "LSmallToe", "LHeel")
    assert op.COCO18_NAMES[8] == "RHip" and op.COCO18_NAMES[17] == "LEar"
    assert [op.BODY25_NAMES[i] for i in op.BODY25_TO_COCO18] == list(op.COCO18_NAMES)
    assert len(op.HAND_NAMES) == 21 and op.HAND_NAMES[1] == "Thumb1"
    assert op.HAND_NAMES[5] == "Index1" and op.HAND_NAMES[20] == "Little4"
    assert op.HAND_EDGES[:5] == ((0, 1), (1, 2), (2, 3), (3, 4), (0, 5))
    assert len(op.HAND_EDGES) == 20 and op.HAND_EDGES[-1] == (19, 20)
    assert len(op.COCO18_LIMBS) == 17 and len(op.COCO18_COLORS) == 18
    assert op.HAND_EDGE_COLORS[0].tolist() == [255, 0, 0]
    for table in op.MARGINS.values():
        assert np.all(table >= 0)
    assert len(op.BODY25_MARGIN) == 25 and len(op.HAND_MARGIN) == 21


# --------------------------------------------------------------------------- 3D points


def test_t_pose_points():
    pose = t_pose()
    pts = op.joints_3d(pose)
    body = pts["body25"]
    assert set(pts) == {"body25", "hand_left", "hand_right", "face"}
    assert np.all(np.isfinite(body))
    np.testing.assert_allclose(body[_b("LShoulder")], pose["leftUpperArm"].head)
    np.testing.assert_allclose(body[_b("RWrist")], pose["rightHand"].head)
    np.testing.assert_allclose(body[_b("MidHip")], (0, 0, 0.92))
    np.testing.assert_allclose(body[_b("Neck")], pose["neck"].head)
    # Face in front (-Y) of the head, eyes above the nose, the left eye on +X.
    nose, leye, reye = body[_b("Nose")], body[_b("LEye")], body[_b("REye")]
    assert nose[1] < -0.08 and leye[2] > nose[2] and leye[0] > 0 > reye[0]
    assert body[_b("LEar")][0] > leye[0]
    # Feet: big toe medial of the small toe, heel behind and below the ankle.
    assert abs(body[_b("LBigToe")][0]) < abs(body[_b("LSmallToe")][0])
    assert abs(body[_b("RBigToe")][0]) < abs(body[_b("RSmallToe")][0])
    heel, ankle = body[_b("LHeel")], body[_b("LAnkle")]
    assert heel[1] > ankle[1] and heel[2] < ankle[2] and abs(heel[2]) < 0.04
    # Hands: wrist then thumb CMC, fingertips at the distal tails.
    hand = pts["hand_left"]
    np.testing.assert_allclose(hand[0], pose["leftHand"].head)
    np.testing.assert_allclose(hand[1], pose["leftThumbMetacarpal"].head)
    np.testing.assert_allclose(hand[8], pose["leftIndexDistal"].tail)
    np.testing.assert_allclose(hand[20], pose["leftLittleDistal"].tail)
    face = pts["face"]
    np.testing.assert_allclose(face[op.FACE_NOSE_TIP], nose)
    np.testing.assert_allclose(face[op.FACE_LEFT_PUPIL], leye)
    assert np.isfinite(face).all(axis=1).sum() == 3


def test_face_follows_head_and_forward_options():
    pose = t_pose()
    # Head bones whose facing is local -X: with the rest matrix, or an explicit axis.
    h = pose["head"]
    odd = np.column_stack([[0, 1, 0], [0, 0, 1], [1, 0, 0]]).astype(float)  # X -> +Y (back)
    pose["head"] = op.JointPose(h.head, h.tail, odd)
    a = op.joints_3d(pose, head_rest=odd)["body25"][_b("Nose")]
    b = op.joints_3d(pose, head_forward=np.array([-1.0, 0, 0]))["body25"][_b("Nose")]
    c = op.joints_3d(pose)["body25"][_b("Nose")]  # inferred from the body: snapped to -X
    for nose in (a, b, c):
        assert nose[1] < -0.08
    # Turning the head to the character's left (about +Z) turns the face towards +X: by
    # 90 deg given the rest, by 30 deg even without it (the inferred axis snaps).
    def rz(deg: float) -> np.ndarray:
        c, s = np.cos(np.radians(deg)), np.sin(np.radians(deg))
        return np.array([[c, -s, 0], [s, c, 0], [0, 0, 1]])

    pose["head"] = op.JointPose(h.head, h.tail, rz(90) @ h.matrix)
    nose = op.joints_3d(pose, head_rest=h.matrix)["body25"][_b("Nose")]
    assert nose[0] > 0.08 and abs(nose[1] - h.head[1]) < 0.02
    pose["head"] = op.JointPose(h.head, h.tail, rz(30) @ h.matrix)
    nose = op.joints_3d(pose)["body25"][_b("Nose")]
    assert nose[0] == pytest.approx(0.5 * 0.62 * 0.2) and nose[1] < -0.08


def test_missing_joints_are_missing():
    pose = t_pose()
    for name in ("head", "neck", "leftFoot", "leftToes", "rightThumbMetacarpal"):
        del pose[name]
    pts = op.joints_3d(pose)
    body = pts["body25"]
    for name in ("Nose", "LEye", "REar", "LAnkle", "LBigToe", "LHeel"):
        assert np.isnan(body[_b(name)]).all(), name
    # Neck falls back to the middle of the upper arms.
    np.testing.assert_allclose(body[_b("Neck")], (0, 0, 1.42))
    assert np.isnan(pts["hand_right"][1]).all() and np.isfinite(pts["hand_right"][2]).all()
    assert np.isnan(pts["face"]).all()
    kp = op.project_keypoints(body, front_camera())
    assert not kp.present[_b("Nose")] and kp.confidence[_b("Nose")] == 0


# --------------------------------------------------------------------------- projection


def test_front_camera_projection():
    cam = front_camera()
    kps = op.project_skeleton(op.joints_3d(t_pose()), cam)
    body = kps["body25"]
    assert body.visible.all()
    u, v = body.xy[:, 0], body.xy[:, 1]
    assert u[_b("LShoulder")] > cam.width / 2 > u[_b("RShoulder")]
    assert v[_b("Nose")] < v[_b("Neck")]
    assert v[_b("LAnkle")] > v[_b("LKnee")] and v[_b("RAnkle")] > v[_b("RKnee")]
    assert kps["hand_left"].xy[8, 0] > kps["hand_left"].xy[0, 0]
    np.testing.assert_allclose(body.depth[_b("Neck")], 4.0)


def test_occlusion_wall_and_surface():
    cam = front_camera()
    pts = op.joints_3d(t_pose())
    # The body's surface a little in front of the joints: they stay visible, except the
    # heels, which sit 5 cm behind the ankles and are hidden by the feet from the front.
    body = op.project_skeleton(pts, cam, np.full((256, 256), 3.99))["body25"]
    heels = [_b("LHeel"), _b("RHeel")]
    assert np.delete(body.visible, heels).all() and not body.visible[heels].any()
    # Tolerance and margin: what lies within them of the surface is visible.
    one = np.array([[0.3, 0.0, 1.0]])  # depth 4.0
    assert op.project_keypoints(one, cam, np.full((256, 256), 3.98)).visible[0]
    assert not op.project_keypoints(one, cam, np.full((256, 256), 3.9)).visible[0]
    assert op.project_keypoints(one, cam, np.full((256, 256), 3.9), margin=0.08).visible[0]
    # Empty buffer pixels (inf, 0, NaN) hide nothing.
    for empty in (np.inf, 0.0, np.nan):
        assert op.project_keypoints(one, cam, np.full((256, 256), empty)).visible[0]
    # A wall at 2 m over the image's left half hides the character's right side.
    buf = np.full((256, 256), np.inf)
    buf[:, :128] = 2.0
    body = op.project_skeleton(pts, cam, buf)["body25"]
    assert body.in_view.all()
    assert not body.visible[_b("RShoulder")] and not body.visible[_b("RWrist")]
    assert body.visible[_b("LShoulder")] and body.visible[_b("LWrist")]
    assert body.confidence[_b("RWrist")] == op.OCCLUDED_CONFIDENCE
    assert body.confidence[_b("LWrist")] == 1.0
    # The 3x3 window: an occluder one pixel away still counts.
    u, v = op.project_keypoints(one, cam).xy[0].astype(int)
    buf = np.full((256, 256), np.inf)
    buf[v + 1, u + 1] = 2.0
    assert not op.project_keypoints(one, cam, buf).visible[0]
    assert op.project_keypoints(one, cam, buf, window=0).visible[0]
    with pytest.raises(ValueError, match="depth buffer"):
        op.project_keypoints(pts["body25"], cam, np.zeros((10, 10)) + 1)


def test_behind_camera_and_outside_image():
    cam = front_camera()
    pts = np.array([[0.0, -5.0, 0.9],  # behind the camera
                    [5.0, 0.0, 0.9],  # far off to the right
                    [0.0, 0.0, 0.9],  # centre
                    [np.nan, np.nan, np.nan]])
    kp = op.project_keypoints(pts, cam)
    assert kp.present.tolist() == [True, True, True, False]
    assert kp.in_view.tolist() == [False, False, True, False]
    assert kp.confidence.tolist() == [0.0, 0.0, 1.0, 0.0]
    np.testing.assert_allclose(kp.xy[2], (128.0, 128.0))


# --------------------------------------------------------------------------- JSON


def test_json_layout():
    cam = front_camera(320, 240)
    pts = op.joints_3d(t_pose())
    buf = np.full((240, 320), np.inf)
    buf[:, :160] = 2.0
    kps = op.project_skeleton(pts, cam, buf)
    doc = op.openpose_json(kps["body25"], (kps["hand_left"], kps["hand_right"]), kps["face"],
                           320, 240)
    json.dumps(doc)
    assert doc["version"] == 1.3 and doc["canvas_width"] == 320 and doc["canvas_height"] == 240
    p = doc["people"][0]
    assert len(p["pose_keypoints_2d"]) == 75 and len(p["face_keypoints_2d"]) == 210
    assert len(p["hand_left_keypoints_2d"]) == 63 and len(p["hand_right_keypoints_2d"]) == 63
    body = np.array(p["pose_keypoints_2d"]).reshape(25, 3)
    i = _b("LShoulder")
    np.testing.assert_allclose(body[i, :2], kps["body25"].xy[i] - 0.5, atol=1e-3)
    assert body[i, 2] == 1.0 and body[_b("RShoulder"), 2] == op.OCCLUDED_CONFIDENCE
    face = np.array(p["face_keypoints_2d"]).reshape(70, 3)
    assert np.count_nonzero(face[:, 2]) == 3 and face[op.FACE_NOSE_TIP, 2] > 0
    # Hidden points dropped on request; COCO-18 variant from the same body.
    strict = op.openpose_json(kps["body25"], None, None, 320, 240, include_occluded=False)
    sb = np.array(strict["people"][0]["pose_keypoints_2d"]).reshape(25, 3)
    assert sb[_b("RShoulder")].tolist() == [0.0, 0.0, 0.0]
    coco = op.openpose_json(kps["body25"], None, None, 320, 240, coco18=True)
    cb = np.array(coco["people"][0]["pose_keypoints_2d"]).reshape(18, 3)
    np.testing.assert_allclose(cb[op.COCO18_INDEX["LHip"]], body[_b("LHip")])
    assert coco["people"][0]["hand_left_keypoints_2d"] == [0.0] * 63


# --------------------------------------------------------------------------- drawing


def _coco(points: dict[str, tuple[float, float]], n: int = 18) -> op.Keypoints:
    """Visible COCO-18 keypoints at given pixel uv; the rest missing."""
    names = op.COCO18_NAMES if n == 18 else op.HAND_NAMES
    xy = np.full((n, 2), np.nan)
    for name, p in points.items():
        xy[names.index(name)] = p
    present = np.isfinite(xy[:, 0])
    return op.Keypoints(xy, np.where(present, 2.0, np.nan), present, present.copy(),
                        present.copy())


def test_draw_limb_colour_and_missing_points():
    img = op.draw_openpose(_coco({"Neck": (100.5, 100.5), "RShoulder": (160.5, 100.5)}),
                           None, 512, 512)
    assert img.dtype == np.uint8 and img.shape == (512, 512, 3)
    limb = (op.COCO18_COLORS[0] * op.LIMB_ALPHA).astype(np.uint8)
    assert img[100, 130].tolist() == limb.tolist()  # the Neck-RShoulder limb, 0.6 x red
    assert img[100, 100].tolist() == op.COCO18_COLORS[1].tolist()  # Neck circle
    assert img[100, 160].tolist() == op.COCO18_COLORS[2].tolist()  # RShoulder circle
    assert img[110, 130].tolist() == [0, 0, 0] and img[300:].max() == 0
    # One point alone: its circle only, no limb.
    lone = op.draw_openpose(_coco({"Neck": (100.5, 100.5)}), None, 512, 512)
    assert lone[100, 130].tolist() == [0, 0, 0] and lone[100, 100].any()
    assert np.count_nonzero(lone.any(axis=2)) < 60
    assert not op.draw_openpose(None, None, 64, 48).any()


def test_draw_occluded_flag_and_scaling():
    kp = _coco({"Neck": (100.5, 100.5), "RShoulder": (160.5, 100.5)})
    kp.visible[:] = False  # both in view but occluded
    assert not op.draw_openpose(kp, None, 256, 256).any()
    assert op.draw_openpose(kp, None, 256, 256, draw_occluded=True).any()
    # Twice the image size: twice the stick width.
    small = op.draw_openpose(_coco({"Neck": (100.5, 100.5), "RShoulder": (160.5, 100.5)}),
                             None, 512, 512)
    big = op.draw_openpose(_coco({"Neck": (200.5, 200.5), "RShoulder": (320.5, 200.5)}),
                           None, 1024, 1024)
    assert np.count_nonzero(small[:, 130].any(axis=1)) == 9
    assert np.count_nonzero(big[:, 260].any(axis=1)) == 17


def test_draw_hand_and_body25_input():
    hand = _coco({"Wrist": (50.5, 50.5), "Thumb1": (90.5, 50.5)}, n=21)
    img = op.draw_openpose(None, (hand, None), 512, 512)
    assert img[50, 70].tolist() == op.HAND_EDGE_COLORS[0].tolist() == [255, 0, 0]
    assert img[50, 50].tolist() == op.HAND_POINT_COLOR.tolist()
    # A BODY_25 body is drawn as its COCO-18 subset.
    cam = front_camera(512, 512)
    kps = op.project_skeleton(op.joints_3d(t_pose()), cam)
    a = op.draw_openpose(kps["body25"], (kps["hand_left"], kps["hand_right"]), 512, 512,
                         kps["face"])
    b = op.draw_openpose(kps["body25"].to_coco18(), (kps["hand_left"], kps["hand_right"]),
                         512, 512, kps["face"])
    assert np.array_equal(a, b) and a.any()
    neck = kps["body25"].xy[_b("Neck")]
    assert a[int(neck[1]), int(neck[0])].tolist() == op.COCO18_COLORS[1].tolist()


# --------------------------------------------------------------------------- fast paths
# The drawing, depth test and JSON were rewritten for speed (primitives rasterised over
# their own boxes, a numba kernel, vectorised rounding). The reference implementations
# they replaced are kept here, verbatim in behaviour, and the fast paths must reproduce
# them exactly: same pixels, same flags, same JSON values.

jit_only = pytest.mark.skipif(not __import__("painted_skin.addon.core.passes.jit",
                                              fromlist=["available"]).available(),
                              reason="numba not installed")


def _ref_bbox(canvas, x0, x1, y0, y1):
    h, w = canvas.shape[:2]
    j0, j1 = max(int(np.floor(x0)), 0), min(int(np.ceil(x1)) + 1, w)
    i0, i1 = max(int(np.floor(y0)), 0), min(int(np.ceil(y1)) + 1, h)
    if j0 >= j1 or i0 >= i1:
        return None
    jj, ii = np.meshgrid(np.arange(j0, j1, dtype=float), np.arange(i0, i1, dtype=float))
    return (slice(i0, i1), slice(j0, j1)), jj, ii


def _ref_circle(canvas, x, y, r, color):
    box = _ref_bbox(canvas, x - r, x + r, y - r, y + r)
    if box is not None:
        sl, jj, ii = box
        canvas[sl][(jj - x) ** 2 + (ii - y) ** 2 <= r * r + 1e-9] = color


def _ref_ellipse(canvas, x, y, a, b, angle_deg, color):
    a, b = max(a, 0.5), max(b, 0.5)
    r = max(a, b)
    box = _ref_bbox(canvas, x - r, x + r, y - r, y + r)
    if box is not None:
        sl, jj, ii = box
        t = np.radians(angle_deg)
        dx, dy = jj - x, ii - y
        u = dx * np.cos(t) + dy * np.sin(t)
        v = -dx * np.sin(t) + dy * np.cos(t)
        canvas[sl][(u / a) ** 2 + (v / b) ** 2 <= 1.0 + 1e-9] = color


def _ref_line(canvas, p0, p1, thickness, color):
    (x0, y0), (x1, y1) = p0, p1
    r = max(thickness / 2.0, 0.5)
    box = _ref_bbox(canvas, min(x0, x1) - r, max(x0, x1) + r, min(y0, y1) - r,
                    max(y0, y1) + r)
    if box is not None:
        sl, jj, ii = box
        dx, dy = x1 - x0, y1 - y0
        ll = dx * dx + dy * dy
        t = np.zeros_like(jj) if ll == 0 else np.clip(((jj - x0) * dx + (ii - y0) * dy) / ll,
                                                      0, 1)
        d2 = (jj - x0 - t * dx) ** 2 + (ii - y0 - t * dy) ** 2
        canvas[sl][d2 <= r * r + 1e-9] = color


def _ref_pix(kp):
    return np.trunc(np.nan_to_num(kp.xy - 0.5, nan=-1.0))


def _ref_body(canvas, body, draw_occluded, scale, stickwidth):
    kp = body.to_coco18()
    ok = (kp.in_view if draw_occluded else kp.visible).copy()
    pix = _ref_pix(kp)
    sw = 4.0 * scale if stickwidth is None else stickwidth
    for (a, b), color in zip(op.COCO18_LIMBS, op.COCO18_COLORS, strict=False):
        if ok[a] and ok[b]:
            (xa, ya), (xb, yb) = pix[a], pix[b]
            length = float(np.hypot(xa - xb, ya - yb))
            angle = float(np.degrees(np.arctan2(ya - yb, xa - xb)))
            _ref_ellipse(canvas, int((xa + xb) / 2), int((ya + yb) / 2), int(length / 2), sw,
                         int(angle), color)
    canvas[:] = (canvas * op.LIMB_ALPHA).astype(np.uint8)
    for i in np.flatnonzero(ok):
        _ref_circle(canvas, pix[i, 0], pix[i, 1], 4.0 * scale, op.COCO18_COLORS[i])
    return canvas


def _ref_hand(canvas, hand, draw_occluded, scale):
    ok = (hand.in_view if draw_occluded else hand.visible).copy()
    pix = _ref_pix(hand)
    ok &= np.all(pix > 0, axis=1)
    for (a, b), color in zip(op.HAND_EDGES, op.HAND_EDGE_COLORS, strict=True):
        if ok[a] and ok[b]:
            _ref_line(canvas, pix[a], pix[b], 2.0 * scale, color)
    for i in np.flatnonzero(ok):
        _ref_circle(canvas, pix[i, 0], pix[i, 1], 4.0 * scale, op.HAND_POINT_COLOR)
    return canvas


def _ref_face(canvas, face, draw_occluded, scale):
    ok = (face.in_view if draw_occluded else face.visible).copy()
    pix = _ref_pix(face)
    ok &= np.all(pix > 0, axis=1)
    for i in np.flatnonzero(ok):
        _ref_circle(canvas, pix[i, 0], pix[i, 1], 3.0 * scale, op.FACE_POINT_COLOR)
    return canvas


def _ref_draw_openpose(body, hands, width, height, face=None, *, draw_occluded=False,
                       scale=None, xinsr_stick_scaling=False):
    canvas = np.zeros((int(height), int(width), 3), np.uint8)
    stick = None
    if xinsr_stick_scaling:
        s = 1.0
        side = max(width, height)
        stick = 4.0 * (1 if side < 500 else min(2 + side // 1000, 7))
    else:
        s = min(width, height) / 512.0 if scale is None else float(scale)
    if body is not None:
        canvas = _ref_body(canvas, body, draw_occluded, s, stick)
    for hand in hands or ():
        if hand is not None:
            canvas = _ref_hand(canvas, hand, draw_occluded, s)
    if face is not None:
        canvas = _ref_face(canvas, face, draw_occluded, s)
    return canvas


def _random_keypoints(rng, n: int, width: int, height: int, spread: float) -> op.Keypoints:
    """Points around (and ``spread`` x the size beyond) the image; some missing, some
    occluded; in_view as projection sets it (present and inside the image)."""
    xy = np.column_stack([rng.uniform(-spread * width, (1 + spread) * width, n),
                          rng.uniform(-spread * height, (1 + spread) * height, n)])
    present = rng.random(n) > 0.15
    xy[~present] = np.nan
    with np.errstate(invalid="ignore"):
        in_view = (present & (xy[:, 0] >= 0) & (xy[:, 0] < width) & (xy[:, 1] >= 0)
                   & (xy[:, 1] < height))
    visible = in_view & (rng.random(n) > 0.25)
    return op.Keypoints(xy, np.where(present, 2.0, np.nan), present, in_view, visible)


def _random_figure(rng, width: int, height: int):
    spread = rng.choice([0.0, 0.1, 0.5])
    body = _random_keypoints(rng, int(rng.choice([18, 25])), width, height, spread)
    hands = tuple(_random_keypoints(rng, 21, width, height, spread) if rng.random() > 0.2
                  else None for _ in range(2))
    face = _random_keypoints(rng, 70, width, height, spread) if rng.random() > 0.2 else None
    return body, hands, face


@pytest.mark.parametrize("jit", [False, pytest.param(True, marks=jit_only)])
def test_draw_matches_reference_on_random_figures(jit, monkeypatch):
    monkeypatch.setenv("PAINTED_SKIN_JIT", "1" if jit else "0")
    rng = np.random.default_rng(7)
    for trial in range(60):
        width, height = int(rng.integers(40, 700)), int(rng.integers(40, 700))
        body, hands, face = _random_figure(rng, width, height)
        opts = {"draw_occluded": bool(rng.random() < 0.3)}
        if trial % 5 == 1:
            opts["xinsr_stick_scaling"] = True
        elif trial % 5 == 2:
            opts["scale"] = float(rng.uniform(0.3, 4.0))
        flags = [(k.visible.copy(), k.in_view.copy()) for k in (body, *hands, face) if k]
        got = op.draw_openpose(body, hands, width, height, face, **opts)
        want = _ref_draw_openpose(body, hands, width, height, face, **opts)
        assert np.array_equal(got, want), (trial, np.argwhere((got != want).any(axis=2))[:5])
        # Drawing leaves the keypoints' flags alone (the reference narrowed them in place).
        for k, (vis, inv) in zip([k for k in (body, *hands, face) if k], flags, strict=True):
            assert np.array_equal(k.visible, vis) and np.array_equal(k.in_view, inv)


@pytest.mark.parametrize("jit", [False, pytest.param(True, marks=jit_only)])
def test_draw_matches_reference_on_the_t_pose(jit, monkeypatch):
    monkeypatch.setenv("PAINTED_SKIN_JIT", "1" if jit else "0")
    for size in ((512, 512), (640, 360), (200, 700)):
        cam = front_camera(*size)
        kps = op.project_skeleton(op.joints_3d(t_pose()), cam)
        hands = (kps["hand_left"], kps["hand_right"])
        got = op.draw_openpose(kps["body25"], hands, *size, kps["face"])
        assert got.any()
        assert np.array_equal(got, _ref_draw_openpose(kps["body25"], hands, *size, kps["face"]))


def test_draw_parts_on_a_painted_canvas_match_reference():
    rng = np.random.default_rng(3)
    for _ in range(10):
        body, hands, face = _random_figure(rng, 300, 200)
        base = rng.integers(0, 256, (200, 300, 3)).astype(np.uint8)
        base[rng.random((200, 300)) < 0.5] = 0
        got = op.draw_bodypose(base.copy(), body, scale=1.3)
        assert np.array_equal(got, _ref_body(base.copy(), body, False, 1.3, None))
        if hands[0] is not None:
            got = op.draw_handpose(base.copy(), hands[0], draw_occluded=True)
            assert np.array_equal(got, _ref_hand(base.copy(), hands[0], True, 1.0))
        if face is not None:
            got = op.draw_facepose(base.copy(), face, scale=2.0)
            assert np.array_equal(got, _ref_face(base.copy(), face, False, 2.0))


@jit_only
def test_paint_kernel_matches_numpy_path():
    from painted_skin.addon.core.openpose import draw as odraw

    rng = np.random.default_rng(11)
    n = 400
    kind = rng.integers(0, 3, n)
    params = np.zeros((n, 7))
    params[:, :4] = rng.uniform(-80, 280, (n, 4))
    params[:, 2:4] = np.where(kind[:, None] == odraw.LINE, params[:, 2:4],
                              rng.uniform(0.5, 90, (n, 2)))
    angle = np.radians(rng.integers(-180, 181, n))
    ell = kind == odraw.ELLIPSE
    params[ell, 4], params[ell, 5] = np.cos(angle[ell]), np.sin(angle[ell])
    params[kind == odraw.LINE, 4] = rng.uniform(0.5, 6, np.count_nonzero(kind == odraw.LINE))
    params[:3, :4] = [[1e300, -1e300, 5, 5], [-1e12, 3, 1e12, 7], [50, 50, 0.5, 0.5]]
    params[:3, 4:] = [[1.0, 0.0, 0.0]] * 3
    kind[:3] = [odraw.DISC, odraw.LINE, odraw.ELLIPSE]
    colors = rng.integers(1, 256, (n, 3)).astype(np.uint8)
    for h, w in ((200, 200), (37, 251)):
        a = odraw.paint(np.zeros((h, w, 3), np.uint8), kind, params, colors, jit=True)
        b = odraw.paint(np.zeros((h, w, 3), np.uint8), kind, params, colors, jit=False)
        assert np.array_equal(a, b) and a.any()


def _ref_sample_min(buffer, xy, window):
    buf = np.asarray(buffer, float)
    buf = np.where(np.isfinite(buf) & (buf > 0), buf, np.inf)
    h, w = buf.shape
    col = np.clip(np.floor(xy[:, 0]).astype(int), 0, w - 1)
    row = np.clip(np.floor(xy[:, 1]).astype(int), 0, h - 1)
    best = np.full(len(xy), np.inf)
    for di in range(-window, window + 1):
        for dj in range(-window, window + 1):
            best = np.minimum(best, buf[np.clip(row + di, 0, h - 1), np.clip(col + dj, 0, w - 1)])
    return best


@pytest.mark.parametrize("jit", [False, pytest.param(True, marks=jit_only)])
def test_depth_test_matches_reference(jit, monkeypatch):
    monkeypatch.setenv("PAINTED_SKIN_JIT", "1" if jit else "0")
    rng = np.random.default_rng(5)
    cam = front_camera(96, 64)
    for trial in range(30):
        dtype = (np.float32, np.float64)[trial % 2]
        buf = rng.uniform(3.5, 4.5, (64, 96)).astype(dtype)
        empty = rng.random(buf.shape)
        buf[empty < 0.1], buf[(empty >= 0.1) & (empty < 0.2)] = np.inf, 0.0
        buf[(empty >= 0.2) & (empty < 0.25)] = np.nan
        buf[(empty >= 0.25) & (empty < 0.3)] = -1.0
        xy = np.column_stack([rng.uniform(0, 96, 200), rng.uniform(0, 64, 200)])
        xy[:4] = [[0, 0], [95.99, 63.99], [0, 63.5], [95.5, 0.2]]
        window = trial % 3
        assert np.array_equal(op._sample_min(buf, xy, window), _ref_sample_min(buf, xy, window))
    # The whole skeleton in one projection: the flags of projecting each set on its own.
    pts = op.joints_3d(t_pose())
    pts["hand_left"][3] = np.nan
    pts["body25"][0] += (0, -3.9, 0)  # very close to the camera
    buf = np.full((64, 96), 3.99)
    buf[:, :40] = 2.0
    kps = op.project_skeleton(pts, cam, buf)
    for k, v in pts.items():
        one = op.project_keypoints(v, cam, buf, margin=op.MARGINS[k] * op.body_scale(pts))
        got = kps[k]
        for f in ("xy", "depth", "present", "in_view", "visible"):
            assert np.array_equal(getattr(got, f), getattr(one, f), equal_nan=f in ("xy", "depth"))
    assert op.project_skeleton({}, cam, buf, scale=1.0) == {}


def _ref_flat(kp, n, include_occluded):
    if kp is None:
        return [0.0] * (3 * n)
    c = kp.confidence if include_occluded else np.where(kp.visible, 1.0, 0.0)
    keep = c > 0
    x = np.where(keep, kp.xy[:, 0] - 0.5, 0.0)
    y = np.where(keep, kp.xy[:, 1] - 0.5, 0.0)
    return [round(float(v), 3) for v in np.stack([x, y, c], axis=1).ravel()]


def test_json_matches_reference_rounding():
    rng = np.random.default_rng(9)
    for trial in range(40):
        body, hands, face = _random_figure(rng, 640, 480)
        # Coordinates on the rounding boundaries: x.xxx5 exactly and just around it.
        for k in (body, *hands, face):
            if k is not None and trial % 2:
                k.xy[:] = 0.5 + np.round(k.xy, 2) + rng.choice([0.0005, 0.0015, 5e-4 + 1e-12],
                                                               k.xy.shape)
        inc = bool(trial % 3)
        doc = op.openpose_json(body, hands, face, 640, 480, include_occluded=inc,
                               coco18=trial % 4 == 0)
        p = doc["people"][0]
        b = body.to_coco18() if trial % 4 == 0 else body
        assert p["pose_keypoints_2d"] == _ref_flat(b, len(b), inc)
        assert p["face_keypoints_2d"] == _ref_flat(face, 70, inc)
        assert p["hand_left_keypoints_2d"] == _ref_flat(hands[0], 21, inc)
        assert p["hand_right_keypoints_2d"] == _ref_flat(hands[1], 21, inc)
    x = np.concatenate([rng.uniform(-1, 5000, 20000), (rng.integers(-999, 10 ** 7, 20000) + 0.5)
                        / 1000, [0.0, -0.0, -0.0004, 2.675, 1e300, np.inf, -np.inf]])
    got, want = op.round3(x), [round(float(v), 3) for v in x]
    assert [repr(v) for v in got] == [repr(v) for v in want]
