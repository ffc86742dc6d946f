"""OpenPose keypoints: orders, 3D derivation, projection/visibility, JSON and drawing."""

from __future__ import annotations

import json

import numpy as np
import pytest
from painted_skin.addon.core import openpose as op
from painted_skin.addon.core.camera import Camera
from painted_skin.rigs import humanoid

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
