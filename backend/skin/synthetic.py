"""A numpy "renderer" of a textured character with every pass the skin model reads.

Tests and benchmarks of the skin model need frames whose ground truth is known
without Blender: a body (a sphere with a UV layout and a fixed high-contrast
texture: stripes, checks, discs) and an accessory without UVs (a smaller sphere
rigidly attached, coloured by a 3-D checker of its rest position), ray-cast
exactly from a pinhole camera, lit by a sun with cast shadows (the accessory
shadows the body), a specular term, and per-frame random poses and camera
rotations. It writes the pass names and conventions of the real renderer
(depth planar +inf empty, motion in pixels to the previous and next frame).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

BODY_R, ACC_R = 1.0, 0.45
ACC_OFFSET = np.array([0.0, -1.15, 0.25])  # in the body's frame
LIGHT_WORLD = np.array([0.5, -0.8, -0.35]) / np.linalg.norm([0.5, -0.8, -0.35])
BACKGROUND = np.array([0.35, 0.35, 0.40])
FINGERPRINT = {"mesh": "synthetic-sphere-and-accessory", "vertices": 0}


@dataclass(frozen=True)
class Pose:
    """``rot``/``centre``: the body in camera space (x right, y down, z forward);
    ``cam``: camera-to-world rotation (the sun is fixed in the world)."""

    rot: np.ndarray
    centre: np.ndarray
    cam: np.ndarray


def texture(size: int = 256, seed: int = 0) -> np.ndarray:
    """(size, size, 3) float32 in [0, 1]: the body's albedo (rows = v from the top)."""
    rng = np.random.default_rng(seed)
    v, u = np.meshgrid(np.linspace(0, 1, size, endpoint=False),
                       np.linspace(0, 1, size, endpoint=False), indexing="ij")
    base = rng.uniform(0.2, 0.9, 3)
    alt = rng.uniform(0.05, 0.6, 3)
    stripes = (np.sin(2 * np.pi * 9 * u) > 0)[..., None]
    tex = np.where(stripes, base, alt)
    checks = ((np.floor(u * 12) + np.floor(v * 6)) % 2 == 0) & (v > 0.55)
    tex = np.where(checks[..., None], rng.uniform(0.0, 1.0, 3), tex)
    for _ in range(6):
        cu, cv, r = rng.uniform(0.1, 0.9), rng.uniform(0.1, 0.5), rng.uniform(0.03, 0.08)
        disc = (u - cu) ** 2 + (v - cv) ** 2 < r * r
        tex = np.where(disc[..., None], rng.uniform(0, 1, 3), tex)
    return tex.astype(np.float32)


def _rotation(rng: np.random.Generator, scale: float = np.pi) -> np.ndarray:
    axis = rng.normal(size=3)
    axis /= np.linalg.norm(axis)
    return _axis_angle(axis, rng.uniform(-scale, scale))


def _axis_angle(axis: np.ndarray, angle: float) -> np.ndarray:
    k = np.array([[0, -axis[2], axis[1]], [axis[2], 0, -axis[0]], [-axis[1], axis[0], 0]])
    return np.eye(3) + np.sin(angle) * k + (1 - np.cos(angle)) * (k @ k)


def random_pose(rng: np.random.Generator) -> Pose:
    centre = np.array([rng.uniform(-0.4, 0.4), rng.uniform(-0.2, 0.5), rng.uniform(3.6, 4.6)])
    return Pose(_rotation(rng), centre, _rotation(rng, 0.6))


def _hit_sphere(d: np.ndarray, c: np.ndarray, r: float, origin: np.ndarray | None = None
                ) -> np.ndarray:
    """Ray parameter of the first hit (inf where none) of rays ``origin + t d``."""
    o = np.zeros(3) if origin is None else origin
    oc = o - c
    b = (d * oc).sum(-1)
    disc = b * b - ((oc * oc).sum(-1) - r * r)
    with np.errstate(invalid="ignore"):
        t = -b - np.sqrt(disc)
    return np.where((disc > 0) & (t > 1e-4), t, np.inf)


def _project(p: np.ndarray, f: float, size: int) -> np.ndarray:
    c = size / 2.0
    return np.stack([p[..., 0] / p[..., 2] * f + c - 0.5, p[..., 1] / p[..., 2] * f + c - 0.5],
                    -1)


def render(pose: Pose, size: int, tex: np.ndarray, prev: Pose | None = None,
           nxt: Pose | None = None, light_world: np.ndarray = LIGHT_WORLD
           ) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """(passes, beauty uint8 (size, size, 3)) of one frame; ``prev``/``nxt``: the
    neighbouring frames' poses for the motion pass (zero motion without them);
    ``light_world``: the sun's unit direction (its rays travel along it)."""
    f = 1.1 * size
    jj, ii = np.meshgrid(np.arange(size) + 0.5, np.arange(size) + 0.5)
    d = np.stack([(jj - size / 2) / f, (ii - size / 2) / f, np.ones_like(jj)], -1)
    d /= np.linalg.norm(d, axis=-1, keepdims=True)
    acc_c = pose.centre + pose.rot @ ACC_OFFSET
    t_body = _hit_sphere(d, pose.centre, BODY_R)
    t_acc = _hit_sphere(d, acc_c, ACC_R)
    is_acc = t_acc < t_body
    t = np.minimum(t_body, t_acc)
    on = np.isfinite(t)
    p = d * np.where(on, t, 0)[..., None]
    centre = np.where(is_acc[..., None], acc_c, pose.centre)
    n_cam = np.where(on[..., None], (p - centre) / np.where(is_acc, ACC_R, BODY_R)[..., None], 0)
    local = (p - pose.centre) @ pose.rot  # body frame (rot^T applied to row vectors)
    n_local = n_cam @ pose.rot
    rest = np.where(is_acc[..., None], local - ACC_OFFSET, local)
    u = 0.5 + np.arctan2(n_local[..., 0], n_local[..., 2]) / (2 * np.pi)
    v = 0.5 + np.arcsin(np.clip(n_local[..., 1], -1, 1)) / np.pi
    body = on & ~is_acc
    uv = np.stack([u, v, np.ones_like(u)], -1) * body[..., None]
    s = tex.shape[0]
    x, y = (u * s - 0.5) % s, np.clip(v * s - 0.5, 0, s - 1)
    x0, y0 = np.floor(x).astype(int), np.floor(y).astype(int)
    fx, fy = (x - x0)[..., None], (y - y0)[..., None]
    x1, y1 = (x0 + 1) % s, np.minimum(y0 + 1, s - 1)
    albedo = ((tex[y0, x0] * (1 - fx) + tex[y0, x1] * fx) * (1 - fy)
              + (tex[y1, x0] * (1 - fx) + tex[y1, x1] * fx) * fy)
    checker = (np.floor(rest * 6).sum(-1) % 2 == 0)[..., None]
    albedo = np.where(is_acc[..., None], np.where(checker, [0.9, 0.75, 0.2], [0.15, 0.1, 0.3]),
                      albedo)
    light = pose.cam.T @ np.asarray(light_world, np.float64)
    ndl = (n_cam * light).sum(-1)
    origin = p + 1e-3 * n_cam
    blocked = np.isfinite(_hit_sphere(light[None, None], acc_c, ACC_R, origin)) & body
    blocked |= np.isfinite(_hit_sphere(light[None, None], pose.centre, BODY_R, origin)) & is_acc
    vis = on & (ndl > 0) & ~blocked
    view = -d
    half = light + view
    half /= np.linalg.norm(half, axis=-1, keepdims=True)
    spec = np.clip((n_cam * half).sum(-1), 0, 1) ** 24 * vis
    rgb = albedo * (0.22 + 0.78 * np.clip(ndl, 0, 1) * vis)[..., None] + 0.35 * spec[..., None]
    rgb = np.where(on[..., None], rgb, BACKGROUND)
    beauty = np.clip(np.rint(rgb * 255), 0, 255).astype(np.uint8)

    parts = np.full((size, size), 2, np.uint8)  # torso
    parts[n_local[..., 1] < -0.6] = 1  # head
    legs = n_local[..., 1] > 0.55
    parts[legs & (n_local[..., 0] < 0)], parts[legs & (n_local[..., 0] >= 0)] = 9, 10
    arms = (np.abs(n_local[..., 0]) > 0.75) & ~legs
    parts[arms & (n_local[..., 0] < 0)], parts[arms & (n_local[..., 0] >= 0)] = 3, 4
    parts[is_acc] = 15
    parts[~on] = 0

    pix = np.stack([jj - 0.5, ii - 0.5], -1)
    motion = np.zeros((size, size, 4), np.float32)
    for k, other in ((0, prev), (2, nxt)):
        if other is None:
            continue
        q = other.centre + local @ other.rot.T
        motion[..., k:k + 2] = np.where(on[..., None], _project(q, f, size) - pix, 0)
    world = pose.cam
    passes = {
        "depth": np.where(on, p[..., 2], np.inf).astype(np.float32),
        "normal": n_cam.astype(np.float32),
        "normal_world": (n_cam @ world.T).astype(np.float32),
        "view_dir": np.where(on[..., None], view @ world.T, 0).astype(np.float32),
        "light_visibility": np.concatenate(
            [vis[..., None], np.zeros((size, size, 3))], -1).astype(np.float32),
        # the sun's share of the shading above, on a white surface
        "irradiance": np.repeat((0.78 * np.clip(ndl, 0, 1) * vis)[..., None], 3,
                                -1).astype(np.float32),
        # its highlight, as the specular pass carries one (in world units of the same sun)
        "specular": np.repeat((0.35 * spec)[..., None], 3, -1).astype(np.float32),
        # the materials' base colour, as the albedo pass carries it
        "albedo": np.where(on[..., None], albedo, 0).astype(np.float32),
        "mask": (on * 255).astype(np.uint8),
        "parts": parts,
        "motion": motion,
        "uv": uv.astype(np.float32),
        "rest_position": np.where(on[..., None], rest, 0).astype(np.float32),
    }
    return passes, beauty


def random_light(rng: np.random.Generator) -> np.ndarray:
    """A sun from anywhere on the sphere."""
    d = rng.normal(size=3)
    return d / np.linalg.norm(d)


def dataset(n: int, size: int = 64, seed: int = 0, tex: np.ndarray | None = None,
            light: np.ndarray | str = LIGHT_WORLD
            ) -> list[tuple[dict[str, np.ndarray], np.ndarray]]:
    """``n`` frames at independent random poses (the training set's kind); ``light``:
    the sun's direction, or ``"random"`` for a new one every frame."""
    rng = np.random.default_rng(seed)
    tex = texture() if tex is None else tex
    out = []
    for _ in range(n):
        pose = random_pose(rng)
        sun = random_light(rng) if isinstance(light, str) else light
        out.append(render(pose, size, tex, light_world=sun))
    return out


def shot(n: int, size: int = 64, seed: int = 0, tex: np.ndarray | None = None,
         speed: float = 0.06) -> list[tuple[dict[str, np.ndarray], np.ndarray]]:
    """``n`` consecutive frames of a smooth motion (rotation and drift), with
    exact motion vectors to the neighbouring frames."""
    rng = np.random.default_rng(seed)
    tex = texture() if tex is None else tex
    start = random_pose(rng)
    axis = rng.normal(size=3)
    axis /= np.linalg.norm(axis)
    drift = rng.normal(size=3) * np.array([0.02, 0.02, 0.01])
    poses = [Pose(_axis_angle(axis, speed * k) @ start.rot, start.centre + drift * k, start.cam)
             for k in range(n)]
    return [render(poses[k], size, tex, poses[k - 1] if k else None,
                   poses[k + 1] if k + 1 < n else None) for k in range(n)]
