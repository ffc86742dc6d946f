"""A camera for a shot that has none: three-quarter front view of the character,
framing its height, following its hips across the floor (the demo's camera,
sized to any character). Retargeted shots come without a camera; this lets the
passes run on them straight away (``painted-skin passes --camera auto``, the
panel's *Add Follow Camera*)."""

from __future__ import annotations

import bpy
import numpy as np
from mathutils import Vector

from ...core.bonemap import auto_map
from ..retarget.armature_io import read_skeleton
from .geometry import ShotError, find_armature, render_meshes

CAMERA_NAME = "PaintedSkinCamera"
LENS_MM = 45.0
# Horizontal offset and height per metre of character: the demo's framing
# (1.9 m right, 3.0 m in front, 0.62 up for a 1.75 m character, aimed at mid-height).
OFFSET = np.array([1.9, -3.0]) / 1.75
EYE, AIM = 0.62, 0.5


def character_height(meshes: list[bpy.types.Object]) -> tuple[float, float]:
    """(floor z, height) of the meshes' world bounding boxes in the rest of this frame."""
    corners = np.array([ob.matrix_world @ Vector(c) for ob in meshes for c in ob.bound_box])
    lo, hi = float(corners[:, 2].min()), float(corners[:, 2].max())
    return lo, max(hi - lo, 1e-3)


def add_follow_camera(scene: bpy.types.Scene) -> bpy.types.Object:
    """Add (or reuse) the follow camera and make it the scene camera. Characters face
    -Y (the project's convention): the camera stands in front, to their left."""
    meshes = render_meshes(scene)
    if not meshes:
        raise ShotError("the scene has no visible mesh to frame: show the character first")
    arm = find_armature(meshes)
    frame_now = scene.frame_current
    scene.frame_set(scene.frame_start)  # framed on the shot's first pose
    try:
        floor, height = character_height(meshes)
        bones = auto_map(read_skeleton(arm)).bones if arm is not None else {}
        hips = bones.get("hips")
        centre = Vector(arm.matrix_world @ arm.pose.bones[hips].head) if hips else \
            Vector(np.mean([ob.matrix_world.translation for ob in meshes], axis=0).tolist())
        forward, left = _heading(arm, bones)
    finally:
        scene.frame_set(frame_now)
    cam = bpy.data.objects.get(CAMERA_NAME)
    if cam is None or cam.type != "CAMERA":
        cam = bpy.data.objects.new(CAMERA_NAME, bpy.data.cameras.new(CAMERA_NAME))
    if cam.name not in scene.collection.objects:
        scene.collection.objects.link(cam)
    cam.data.lens = LENS_MM
    cam.data.clip_start, cam.data.clip_end = 0.01 * height, 100.0 * height
    # OFFSET is in the character's frame: x to its left, y along -forward (it faces -Y)
    dx, dy = (float(v) for v in (OFFSET[0] * left - OFFSET[1] * forward) * height)
    eye = Vector((centre.x + dx, centre.y + dy, floor + EYE * height))
    aim = Vector((centre.x, centre.y, floor + AIM * height)) - eye
    cam.rotation_euler = aim.to_track_quat("-Z", "Y").to_euler()
    for con in list(cam.constraints):
        cam.constraints.remove(con)
    if hips:  # keep the offset to the hips in the floor plane: a walk stays framed
        follow = cam.constraints.new("COPY_LOCATION")
        follow.target, follow.subtarget = arm, hips
        follow.use_z, follow.use_offset = False, True  # location = hips (x, y) + own
        cam.location = (dx, dy, eye.z)
    else:
        cam.location = eye
    scene.camera = cam
    return cam


def _heading(arm: bpy.types.Object | None, bones: dict[str, str]
             ) -> tuple[np.ndarray, np.ndarray]:
    """(forward, left) unit vectors in the floor plane at the current frame: from the
    hips' left-right axis (upper legs); the project's convention (facing -Y, left +X)
    when the rig does not tell."""
    default = np.array([0.0, -1.0]), np.array([1.0, 0.0])
    if arm is None or "leftUpperLeg" not in bones or "rightUpperLeg" not in bones:
        return default
    mw = arm.matrix_world
    lr = np.array(mw @ arm.pose.bones[bones["leftUpperLeg"]].head) - \
        np.array(mw @ arm.pose.bones[bones["rightUpperLeg"]].head)
    lr = lr[:2]
    norm = float(np.linalg.norm(lr))
    if norm < 1e-6:
        return default
    left = lr / norm
    return np.array([left[1], -left[0]]), left  # forward = left x up


__all__ = ["CAMERA_NAME", "add_follow_camera", "character_height"]
