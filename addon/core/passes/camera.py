"""Pinhole / orthographic camera matching Blender's, as plain numbers.

Conventions (also written into every pass manifest):

- camera space: x right, y up, the camera looks down -Z (Blender's);
- depth = planar distance along the view axis = -z_cam, in metres;
- pixel coordinates: u to the right, v down, origin at the top-left corner of
  the image, pixel (row i, column j) has its centre at (j + 0.5, i + 0.5).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np


@dataclass
class Camera:
    """Intrinsics + world pose of one frame's camera."""

    width: int
    height: int
    fx: float  # pixels per unit of x/depth (perspective) or per metre (ortho)
    fy: float
    cx: float
    cy: float
    near: float
    far: float
    ortho: bool = False
    world: np.ndarray = field(default_factory=lambda: np.eye(4))  # camera -> world

    @property
    def view(self) -> np.ndarray:
        """World -> camera matrix."""
        return np.linalg.inv(self.world)

    def to_camera(self, points_world: np.ndarray) -> np.ndarray:
        """(..., 3) world points -> camera space."""
        v = self.view
        return points_world @ v[:3, :3].T + v[:3, 3]

    def project(self, points_cam: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Camera-space points -> (pixel uv (..., 2), planar depth (...,))."""
        depth = -points_cam[..., 2]
        if self.ortho:
            x, y = points_cam[..., 0], points_cam[..., 1]
        else:
            safe = np.where(np.abs(depth) < 1e-12, 1e-12, depth)
            x, y = points_cam[..., 0] / safe, points_cam[..., 1] / safe
        uv = np.stack([self.cx + self.fx * x, self.cy - self.fy * y], axis=-1)
        return uv, depth

    def project_world(self, points_world: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.project(self.to_camera(points_world))

    def intrinsics_matrix(self) -> np.ndarray:
        """OpenCV-style K for the perspective case (v down, z forward)."""
        return np.array([[self.fx, 0.0, self.cx], [0.0, self.fy, self.cy], [0.0, 0.0, 1.0]])

    def to_dict(self) -> dict:
        d = asdict(self)
        d["world"] = np.asarray(self.world).tolist()
        d["K"] = self.intrinsics_matrix().tolist()
        return d


def blender_camera(width: int, height: int, lens: float, sensor_width: float,
                   sensor_height: float, sensor_fit: str, shift_x: float, shift_y: float,
                   clip_start: float, clip_end: float, world: np.ndarray,
                   ortho_scale: float | None = None, pixel_aspect: float = 1.0) -> Camera:
    """A :class:`Camera` from Blender camera settings (square pixels assumed
    unless ``pixel_aspect`` = pixel height / width says otherwise)."""
    if sensor_fit == "AUTO":
        fit_horizontal = width * 1.0 >= height * pixel_aspect
        sensor = sensor_width
    elif sensor_fit == "HORIZONTAL":
        fit_horizontal, sensor = True, sensor_width
    else:
        fit_horizontal, sensor = False, sensor_height
    size = width if fit_horizontal else height * pixel_aspect
    if ortho_scale is not None:
        fx = size / ortho_scale
    else:
        fx = lens / sensor * size
    fy = fx / pixel_aspect
    cx = width / 2.0 - shift_x * size
    cy = height / 2.0 + shift_y * size / pixel_aspect
    return Camera(width=width, height=height, fx=fx, fy=fy, cx=cx, cy=cy, near=clip_start,
                  far=clip_end, ortho=ortho_scale is not None, world=np.asarray(world, float))


def camera_from_matrices(view: np.ndarray, window: np.ndarray, width: int,
                         height: int) -> Camera:
    """The :class:`Camera` of a 3D Viewport: its view matrix (world -> view) and window
    (OpenGL projection) matrix, as ``RegionView3D`` gives them, drawn at ``width`` x
    ``height`` pixels. Perspective and orthographic views alike; a camera view's window
    matrix already places the camera's frame inside the region."""
    p = np.asarray(window, np.float64)
    world = np.linalg.inv(np.asarray(view, np.float64))
    world[:3, :3] /= np.linalg.norm(world[:3, :3], axis=0, keepdims=True)
    ortho = abs(p[3, 3]) > 0.5
    fx, fy = width / 2.0 * p[0, 0], height / 2.0 * p[1, 1]
    if ortho:  # ndc = P00 x + P03: u = W/2 (ndc + 1), v = H/2 (1 - ndc_y)
        cx, cy = width / 2.0 * (1 + p[0, 3]), height / 2.0 * (1 - p[1, 3])
        near, far = (p[2, 3] + 1) / p[2, 2], (p[2, 3] - 1) / p[2, 2]
    else:  # ndc = P00 x/d - P02 with d = -z the depth
        cx, cy = width / 2.0 * (1 - p[0, 2]), height / 2.0 * (1 + p[1, 2])
        near, far = p[2, 3] / (p[2, 2] - 1), p[2, 3] / (p[2, 2] + 1)
    return Camera(width=width, height=height, fx=fx, fy=fy, cx=cx, cy=cy,
                  near=float(abs(near)), far=float(abs(far)), ortho=ortho, world=world)
