"""Light visibility by shadow mapping, for the ``fast`` pass engine (pure numpy).

For each light the scene is rasterised from the light into a depth map (a sun: one
orthographic view along its direction, fitted to the points that need an answer; a
point, spot or area light: one perspective view when the points lie within a narrow
cone around it, else the six faces of a cube), and each surface point is lit where it
is no deeper than the map there.

Definition (the same for the ray-traced reference in ``cycles_passes``): the visible
surface point sees the light when the segment from the point, on the side of the
surface the camera sees, to the light meets no geometry. A point whose visible side
faces away from the light therefore never sees it: for a closed mesh the ray would
pass through the body, for a thin sheet (a cape, a plane) through the sheet itself.

Smooth-shaded low-poly surfaces are the exception Cycles makes (its Shadow Terminator
Geometry Offset, on by default): near the terminator the ray starts from the point
lifted onto the smooth surface the vertex normals describe (:func:`smooth_surface_lift`,
Hanika 2021), so a flat facet whose smooth normal still faces the light is lit, and the
light reaches round the body as far as its smooth shading does. Without it a key from
behind lit half the rim Cycles renders on a low-poly character (20-35 % less light on
its lit pixels); with ``lift`` given, :func:`light_visibility` starts from that point.

Shadow maps need a bias: each point is pushed off its surface along the visible-side
geometric normal by :data:`NORMAL_OFFSET` texels, and compared with a slack of
:data:`DEPTH_BIAS` texels; what remains wrong lies within about a texel of a shadow's
edge.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .camera import Camera
from .raster import rasterize

#: How far (in shadow-map texels at the point) a point moves off its surface.
NORMAL_OFFSET = 1.5
#: Depth slack (in texels at the point) before a point counts as behind the map.
DEPTH_BIAS = 1.0
#: Cycles' default Shadow Terminator Geometry Offset (an object setting): points whose
#: light grazes within this cosine start their shadow ray from the smooth surface.
TERMINATOR_OFFSET = 0.1
#: A perspective shadow view covers points within this half-angle; wider needs a cube.
_MAX_HALF_ANGLE = np.radians(55.0)


@dataclass
class Light:
    """A light for :func:`light_visibility`, world space."""

    type: str  # SUN (parallel rays), or POINT / SPOT / AREA (rays from ``position``)
    position: np.ndarray  # (3,)
    direction: np.ndarray  # (3,) unit, towards the light (a sun's rays travel along -it)


def _frame(z: np.ndarray) -> np.ndarray:
    """A right-handed rotation whose third column is the unit vector ``z``."""
    z = z / np.linalg.norm(z)
    helper = np.array([1.0, 0.0, 0.0]) if abs(z[0]) < 0.9 else np.array([0.0, 1.0, 0.0])
    x = np.cross(helper, z)
    x /= np.linalg.norm(x)
    return np.stack([x, np.cross(z, x), z], axis=1)


def _camera(rot: np.ndarray, eye: np.ndarray, res: int, f: float, near: float, far: float,
            ortho: bool) -> Camera:
    world = np.eye(4)
    world[:3, :3], world[:3, 3] = rot, eye
    return Camera(width=res, height=res, fx=f, fy=f, cx=res / 2.0, cy=res / 2.0, near=near,
                  far=far, ortho=ortho, world=world)


def _sun_views(light: Light, points: np.ndarray, verts: np.ndarray, res: int
               ) -> list[Camera]:
    """One orthographic view along the sun, its window fitted to ``points`` (occluders
    outside the window cannot shade them: the rays are parallel) and its depth range to
    every vertex (anything between a point and the sun may occlude it)."""
    rot = _frame(np.asarray(light.direction, np.float64))
    xy = points @ rot[:, :2]
    lo, hi = xy.min(axis=0), xy.max(axis=0)
    half = max(float((hi - lo).max()) / 2.0, 1e-6) * (1.0 + 4.0 / res)  # a texel's margin
    along = verts @ rot[:, 2]
    top, bottom = float(along.max()), float(min(along.min(), (points @ rot[:, 2]).min()))
    depth_range = max(top - bottom, 1e-6)
    centre = rot[:, :2] @ ((lo + hi) / 2.0)
    eye = centre + rot[:, 2] * (top + 0.01 * depth_range + 1e-3)
    return [_camera(rot, eye, res, res / (2.0 * half), 1e-4 * depth_range,
                    1.1 * depth_range + 1e-2, True)]


def _local_views(light: Light, points: np.ndarray, verts: np.ndarray, res: int
                 ) -> list[Camera]:
    """Perspective views from a point-like light: one aimed at ``points`` when they fit
    in a cone of :data:`_MAX_HALF_ANGLE`, else the six 90° faces of a cube."""
    eye = np.asarray(light.position, np.float64)
    rel = points - eye
    dist = np.linalg.norm(rel, axis=1)
    far = float(np.linalg.norm(verts - eye, axis=1).max()) * 1.01 + 1e-3
    near = max(1e-4 * far, 1e-5)
    unit = rel / np.maximum(dist, 1e-12)[:, None]
    axis = unit.mean(axis=0)
    if np.linalg.norm(axis) > 1e-6:
        axis /= np.linalg.norm(axis)
        half = float(np.arccos(np.clip(unit @ axis, -1.0, 1.0)).max())
        if half <= _MAX_HALF_ANGLE:
            rot = _frame(-axis)  # the view looks down its -Z: towards the points
            f = res / (2.0 * np.tan(half) * (1.0 + 4.0 / res) + 1e-9)
            return [_camera(rot, eye, res, f, near, far, False)]
    views = []
    for k in range(3):
        for sign in (1.0, -1.0):
            look = np.zeros(3)
            look[k] = sign
            # 90° plus a texel each side, so points on a face's edge fall inside.
            f = res / (2.0 * (1.0 + 2.0 / res))
            views.append(_camera(_frame(-look), eye, res, f, near, far, False))
    return views


def _texel(cam: Camera, depth: np.ndarray) -> np.ndarray:
    """World size of one shadow-map texel at the given planar depths."""
    return np.full_like(depth, 1.0 / cam.fx) if cam.ortho else np.abs(depth) / cam.fx


def smooth_surface_lift(tri_verts: np.ndarray, tri_normals: np.ndarray, bary: np.ndarray,
                        normals: np.ndarray) -> np.ndarray:
    """(N, 3) world: how far a shadow ray's start moves off the flat triangle onto the
    smooth surface its vertex normals describe (a parabola in the barycentrics, bounded
    by each vertex's tangent plane), as Cycles' ``shadow_ray_smooth_surface_offset``
    computes it. ``tri_verts``, ``tri_normals`` (N, 3, 3): each point's triangle's
    corners and their normals; ``bary`` (N, 3) the point's weights of the corners;
    ``normals`` (N, 3) the geometric normals on the side the camera sees. Zero on a
    flat-shaded triangle (its corner normals are its own)."""
    v = np.asarray(tri_verts, np.float64)
    n = np.asarray(tri_normals, np.float64)
    u, w = np.asarray(bary, np.float64)[:, 0], np.asarray(bary, np.float64)[:, 1]
    p = np.einsum("nk,nkc->nc", np.asarray(bary, np.float64), v)
    smooth = np.einsum("nk,nkc->nc", np.asarray(bary, np.float64), n)

    def dot(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.einsum("nc,nc->n", a, b)

    a = dot(n[:, 2] - n[:, 0], v[:, 0] - v[:, 2])
    b = dot(n[:, 2] - n[:, 1], v[:, 1] - v[:, 2])
    c = dot(n[:, 1] - n[:, 0], v[:, 1] - v[:, 0])
    h = a * u * (u - 1.0) + (a + b + c) * u * w + b * w * (w - 1.0)
    # each corner's tangent plane bounds the lift (the local linear envelope)
    front = dot(smooth, np.asarray(normals, np.float64)) > 0
    sign = np.where(front, 1.0, -1.0)
    env = []
    for i in range(3):
        j, k = (i + 1) % 3, (i + 2) % 3
        reach = np.maximum(np.maximum(sign * dot(v[:, j] - v[:, i], n[:, i]),
                                      sign * dot(v[:, k] - v[:, i], n[:, i])), 0.0)
        env.append(np.maximum(sign * dot(v[:, i] - p, n[:, i]) + reach, 0.0))
    bound = np.minimum(np.minimum(env[0], env[1]), env[2])
    h = np.where(front, np.maximum(bound, h * 0.5), np.minimum(-bound, h * 0.5))
    return smooth * h[:, None]


def lift_amount(shading_normals: np.ndarray, normals: np.ndarray, to_light: np.ndarray,
                cutoff: float = TERMINATOR_OFFSET) -> np.ndarray:
    """(N,) in [0, 1]: how much of :func:`smooth_surface_lift` a point's ray to the
    light takes (Cycles' ``shadow_ray_offset``): all of it where the light grazes the
    flat facet within ``cutoff`` or lies behind it, none where it is well in front."""
    nl = np.abs(np.einsum("ij,ij->i", shading_normals, to_light))
    ngl = np.einsum("ij,ij->i", normals, to_light)
    return np.where(nl < cutoff, np.clip(2.0 - (ngl + nl) / cutoff, 0.0, 1.0),
                    np.clip(1.0 - ngl / cutoff, 0.0, 1.0))


def light_visibility(points: np.ndarray, normals: np.ndarray, verts: np.ndarray,
                     tris: np.ndarray, lights: list[Light], resolution: int = 1024,
                     lift: np.ndarray | None = None,
                     shading_normals: np.ndarray | None = None) -> np.ndarray:
    """Whether each surface point sees each light: (N, len(lights)) float32 of 0 / 1.

    ``points`` (N, 3) world, ``normals`` (N, 3) unit geometric normals on the side the
    camera sees, ``verts`` (V, 3) world and ``tris`` (T, 3) every shadow caster;
    ``resolution``: the side of each shadow map in texels. ``lift`` (N, 3, from
    :func:`smooth_surface_lift`) with ``shading_normals`` (N, 3, unit, on the camera's
    side): smooth shading's terminator as Cycles renders it (the module's doc).
    """
    points = np.asarray(points, np.float64).reshape(-1, 3)
    normals = np.asarray(normals, np.float64).reshape(-1, 3)
    verts = np.asarray(verts, np.float64).reshape(-1, 3)
    out = np.zeros((len(points), len(lights)), np.float32)
    if not len(points) or not len(lights):
        return out
    lifts = lift is not None and shading_normals is not None
    if lifts:
        lift = np.asarray(lift, np.float64).reshape(-1, 3)
        shading_normals = np.asarray(shading_normals, np.float64).reshape(-1, 3)
        lifted = np.einsum("ij,ij->i", lift, lift) > 0
    for k, light in enumerate(lights):
        sun = light.type == "SUN"
        if sun:
            to_light = np.broadcast_to(np.asarray(light.direction, np.float64), points.shape)
        else:
            to_light = np.asarray(light.position, np.float64) - points
            to_light = to_light / np.maximum(np.linalg.norm(to_light, axis=1), 1e-12)[:, None]
        front = np.einsum("ij,ij->i", normals, to_light) > 0
        start, facing = points, front
        if lifts:
            amount = lift_amount(shading_normals, normals, to_light)
            start = points + lift * amount[:, None]
            # a facet turned from the light is lit when its smooth surface faces it and
            # the ray from that surface escapes (its own triangle may still block it)
            facing = front | (lifted & (amount > 0)
                              & (np.einsum("ij,ij->i", shading_normals, to_light) > 0))
        # pushed off along the facet's normal only where that faces the light
        push = normals * front[:, None]
        lit = np.zeros(len(points), bool)
        todo = np.flatnonzero(facing)
        if not len(todo):
            continue
        views = (_sun_views if sun else _local_views)(light, start[todo], verts, resolution)
        for cam in views:
            if not len(todo):
                break
            frag = rasterize(cam.to_camera(verts), tris, cam)
            p = start[todo]
            _, d0 = cam.project_world(p)
            step = _texel(cam, d0)
            uv, d = cam.project_world(p + push[todo] * (NORMAL_OFFSET * step)[:, None])
            col, row = np.floor(uv[:, 0]).astype(np.int64), np.floor(uv[:, 1]).astype(np.int64)
            inside = (col >= 0) & (col < cam.width) & (row >= 0) & (row < cam.height) & (d > 0)
            if not inside.any():
                continue
            here = todo[inside]
            occluder = frag.depth[row[inside], col[inside]]
            lit[here] = d[inside] <= occluder + DEPTH_BIAS * step[inside]
            todo = todo[~inside]
        lit[todo] = True  # outside every view (cannot happen with a fitted or cube view)
        out[:, k] = lit
    return out
