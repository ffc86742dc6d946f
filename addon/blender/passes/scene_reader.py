"""Read what the passes need from Blender in bulk: camera, evaluated meshes."""

from __future__ import annotations

import bpy
import numpy as np

from ...core.passes.camera import Camera, blender_camera


def camera_for(scene: bpy.types.Scene, cam_obj: bpy.types.Object | None = None,
               width: int | None = None, height: int | None = None) -> Camera:
    """The scene camera at the current frame as a :class:`Camera`."""
    cam_obj = cam_obj or scene.camera
    if cam_obj is None or cam_obj.type != "CAMERA":
        raise ValueError("the scene has no camera: add one and set it as the scene camera, "
                         "or let Painted Skin add one that follows the character "
                         "(painted-skin passes --camera auto; Passes panel > Add Camera)")
    r = scene.render
    w = width or int(r.resolution_x * r.resolution_percentage / 100)
    h = height or int(r.resolution_y * r.resolution_percentage / 100)
    c = cam_obj.data
    if c.type not in ("PERSP", "ORTHO"):
        raise ValueError(f"camera {cam_obj.name!r} is {c.type}: use a perspective or "
                         "orthographic camera")
    world = np.array(cam_obj.matrix_world, dtype=np.float64)
    # Strip scale from the camera matrix: Blender ignores it for projection.
    world[:3, :3] /= np.linalg.norm(world[:3, :3], axis=0, keepdims=True)
    return blender_camera(
        w, h, c.lens, c.sensor_width, c.sensor_height, c.sensor_fit, c.shift_x, c.shift_y,
        c.clip_start, c.clip_end, world,
        ortho_scale=c.ortho_scale if c.type == "ORTHO" else None,
        pixel_aspect=r.pixel_aspect_y / r.pixel_aspect_x)
