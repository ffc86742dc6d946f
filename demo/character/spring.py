"""Damped spring chains for secondary motion (capes, tails, hair), pure numpy.

A chain is a run of connected bones hanging from a *parent* bone that the
animation drives. Each bone tip is a Verlet particle: it keeps its momentum
(damped), falls under gravity and is pulled back toward the angle it has at rest
relative to its predecessor (the VRM spring-bone model); afterwards every bone
is put back to its rest length, root to tip. The root is pinned to the parent.

Frames are integrated in fixed sub-steps no longer than ``SpringParams.substep``
with the parent's transform interpolated between frames, so the result hardly
depends on the frame rate, and is bit-for-bit deterministic.

Conventions follow Blender bones: a bone's Y axis is its direction and its
matrix translation is its head. No bpy here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...addon.core.rig.transforms import (
    matrix_to_quat,
    orthonormalize,
    quat_slerp,
    quat_to_matrix,
    rotation_between,
)

_Y = np.array([0.0, 1.0, 0.0])
_FTL_DAMP = 0.9


def _swing(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Smallest rotation taking unit ``a`` onto the direction of ``b`` (one pair, fast)."""
    b = b / max(math.sqrt(b @ b), 1e-12)
    v0 = a[1] * b[2] - a[2] * b[1]
    v1 = a[2] * b[0] - a[0] * b[2]
    v2 = a[0] * b[1] - a[1] * b[0]
    c = float(a @ b)
    if c < -1.0 + 1e-9:
        return rotation_between(a, b)
    k = 1.0 / (1.0 + c)
    return np.array([
        [1 - k * (v1 * v1 + v2 * v2), k * v0 * v1 - v2, k * v0 * v2 + v1],
        [k * v0 * v1 + v2, 1 - k * (v0 * v0 + v2 * v2), k * v1 * v2 - v0],
        [k * v0 * v2 - v1, k * v1 * v2 + v0, 1 - k * (v0 * v0 + v1 * v1)],
    ])


@dataclass(frozen=True)
class SpringChain:
    """Rest of a connected chain, expressed in its parent bone's rest frame.

    ``rest[k]`` is bone k's 4x4 rest matrix relative to the parent bone
    (``inv(parent.matrix_local) @ bone.matrix_local`` in Blender): its Y axis is
    the rest direction, its translation the head. Bones must be connected:
    bone k+1's head is bone k's tail.
    """

    rest: np.ndarray  # (n, 4, 4)
    lengths: np.ndarray  # (n,)

    def __post_init__(self) -> None:
        rest = np.asarray(self.rest, dtype=np.float64)
        lengths = np.asarray(self.lengths, dtype=np.float64)
        if rest.ndim != 3 or rest.shape[1:] != (4, 4) or lengths.shape != (len(rest),):
            raise ValueError("rest must be (n, 4, 4) and lengths (n,)")
        if len(rest) == 0 or np.any(lengths <= 0):
            raise ValueError("a chain needs at least one bone of positive length")
        rest = rest.copy()
        rest[:, :3, :3] = orthonormalize(rest[:, :3, :3])
        object.__setattr__(self, "rest", rest)
        object.__setattr__(self, "lengths", lengths)

    @classmethod
    def from_points(cls, points: np.ndarray) -> SpringChain:
        """A chain through ``points`` (n+1, 3) in the parent frame, minimal-roll bones."""
        points = np.asarray(points, dtype=np.float64)
        seg = points[1:] - points[:-1]
        lengths = np.linalg.norm(seg, axis=-1)
        rot = rotation_between(np.broadcast_to(_Y, seg.shape), seg)
        rest = np.zeros((len(seg), 4, 4))
        rest[:, :3, :3] = rot
        rest[:, :3, 3] = points[:-1]
        rest[:, 3, 3] = 1.0
        return cls(rest, lengths)

    def __len__(self) -> int:
        return len(self.lengths)

    def rest_points(self) -> np.ndarray:
        """Head of the first bone then every tail (n+1, 3), parent rest frame."""
        dirs = self.rest[:, :3, 1]
        steps = dirs * self.lengths[:, None]
        return np.concatenate([self.rest[:1, :3, 3], self.rest[0, :3, 3] + np.cumsum(steps, 0)])


@dataclass(frozen=True)
class SpringParams:
    """Material of a chain. Units: metres and seconds."""

    stiffness: float = 60.0  # 1/s^2: pull toward the rest angle (per unit length)
    damping: float = 6.0  # 1/s: velocity decays as exp(-damping * t)
    gravity: tuple[float, float, float] = (0.0, 0.0, -9.81)
    substep: float = 1.0 / 120.0  # longest integration step
    prewarm: float = 1.0  # seconds settled at the first frame's pose before frame 0


@dataclass
class SpringResult:
    """World-space chain state per frame."""

    points: np.ndarray  # (F, n+1, 3): root head, then each bone's tail
    matrices: np.ndarray  # (F, n, 4, 4): each bone's world matrix (Y along the bone)


def _closest_on_segments(p: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    ab = b - a
    t = np.sum((p - a) * ab, -1) / np.maximum(np.sum(ab * ab, -1), 1e-12)
    return a + np.clip(t, 0.0, 1.0)[..., None] * ab


class _Sim:
    def __init__(self, chain: SpringChain, params: SpringParams,
                 radii: np.ndarray | None) -> None:
        self.chain = chain
        self.params = params
        self.radii = radii
        rot = chain.rest[:, :3, :3]
        # Rest rotation of bone k relative to bone k-1 (bone 0: relative to the parent).
        rel = rot.copy()
        rel[1:] = np.swapaxes(rot[:-1], -1, -2) @ rot[1:]
        self.rel = rel
        self.root_local = chain.rest[0, :3, 3]
        self.gravity = np.asarray(params.gravity, dtype=np.float64)

    def rotations(self, parent_rot: np.ndarray, pts: np.ndarray) -> np.ndarray:
        """World rotation of every bone: rest-relative prediction, swung onto the chain."""
        out = np.empty((len(self.chain), 3, 3))
        prev = parent_rot
        for k in range(len(self.chain)):
            pred = prev @ self.rel[k]
            prev = out[k] = _swing(pred[:, 1], pts[k + 1] - pts[k]) @ pred
        return out

    def step(self, pts: np.ndarray, old: np.ndarray, parent_rot: np.ndarray,
             parent_loc: np.ndarray, h: float, caps: np.ndarray | None) -> None:
        """Advance ``pts`` (current) and ``old`` (previous) in place by ``h`` seconds."""
        p = self.params
        decay = math.exp(-p.damping * h)
        lengths = self.chain.lengths
        n = len(lengths)
        pts[0] = parent_loc + parent_rot @ self.root_local
        moved = np.empty_like(pts)
        moved[0] = pts[0]
        fix = np.zeros_like(pts)
        prev_rot = parent_rot
        for k in range(n):
            # Target: bone k at its rest angle to its predecessor's current frame.
            pred = prev_rot @ self.rel[k]
            axis = pred[:, 1]
            acc = self.gravity + p.stiffness * (pts[k] + axis * lengths[k] - pts[k + 1])
            free = pts[k + 1] + (pts[k + 1] - old[k + 1]) * decay + acc * (h * h)
            d = free - moved[k]
            nxt = moved[k] + d * (lengths[k] / max(math.sqrt(d @ d), 1e-12))
            if caps is not None:  # push out of the colliders, then restore the length
                d = self._collide(nxt, caps) - moved[k]
                nxt = moved[k] + d * (lengths[k] / max(math.sqrt(d @ d), 1e-12))
            fix[k + 1] = nxt - free
            moved[k + 1] = nxt
            prev_rot = _swing(axis, nxt - moved[k]) @ pred
        # Follow-the-leader velocity correction (Mueller et al. 2012): the pull that
        # keeps a bone's length must not become momentum of its predecessor.
        old[:] = pts
        old[:-1] += _FTL_DAMP * fix[1:]
        old[0] = moved[0]
        pts[:] = moved

    def _collide(self, x: np.ndarray, caps: np.ndarray) -> np.ndarray:
        q = _closest_on_segments(x, caps[:, 0], caps[:, 1])
        d = x - q
        dist = np.linalg.norm(d, axis=-1)
        inside = dist < self.radii
        for i in np.nonzero(inside)[0]:
            n = d[i] / dist[i] if dist[i] > 1e-9 else np.array([0.0, 1.0, 0.0])
            x = q[i] + n * self.radii[i]
        return x


def simulate(
    chain: SpringChain,
    parent_world: np.ndarray,
    fps: float,
    params: SpringParams | None = None,
    colliders: np.ndarray | None = None,
    collider_radii: np.ndarray | None = None,
) -> SpringResult:
    """Simulate ``chain`` under the parent's per-frame world matrices (F, 4, 4).

    ``colliders`` are optional capsules the tips stay out of: (F, m, 2, 3) world
    segment ends per frame with ``collider_radii`` (m,). Frame 0 starts at rest
    relative to the parent, settled for ``params.prewarm`` seconds.
    """
    params = params or SpringParams()
    parent_world = np.asarray(parent_world, dtype=np.float64)
    if parent_world.ndim != 3 or parent_world.shape[1:] != (4, 4) or len(parent_world) == 0:
        raise ValueError("parent_world must be (F, 4, 4) with F >= 1")
    if fps <= 0:
        raise ValueError("fps must be positive")
    frames = len(parent_world)
    caps = None
    radii = None
    if colliders is not None:
        caps = np.asarray(colliders, dtype=np.float64)
        radii = np.asarray(collider_radii, dtype=np.float64)
        if caps.shape[0] != frames or caps.shape[2:] != (2, 3) or radii.shape != caps.shape[1:2]:
            raise ValueError("colliders must be (F, m, 2, 3) with radii (m,)")
    sim = _Sim(chain, params, radii)
    rot = orthonormalize(parent_world[:, :3, :3])
    loc = parent_world[:, :3, 3]
    quat = matrix_to_quat(rot)

    n = len(chain)
    points = np.empty((frames, n + 1, 3))
    mats = np.zeros((frames, n, 4, 4))
    mats[..., 3, 3] = 1.0

    rest_pts = chain.rest_points()
    pts = loc[0] + rest_pts @ rot[0].T
    old = pts.copy()
    dt = 1.0 / fps
    sub = max(1, math.ceil(dt / params.substep - 1e-9))
    h = dt / sub
    cap0 = None if caps is None else caps[0]
    for _ in range(int(round(params.prewarm / h))):
        sim.step(pts, old, rot[0], loc[0], h, cap0)

    for f in range(frames):
        if f > 0:
            for s in range(1, sub + 1):
                t = s / sub
                q = quat_slerp(quat[f - 1], quat[f], t)
                r = quat_to_matrix(q) if s < sub else rot[f]
                lo = loc[f - 1] + (loc[f] - loc[f - 1]) * t
                cp = None if caps is None else caps[f - 1] + (caps[f] - caps[f - 1]) * t
                sim.step(pts, old, r, lo, h, cp)
        points[f] = pts
        mats[f, :, :3, :3] = sim.rotations(rot[f], pts)
        mats[f, :, :3, 3] = pts[:-1]
    return SpringResult(points, mats)


def tip_velocity(points: np.ndarray, fps: float) -> np.ndarray:
    """Per-frame speed (F-1, n+1) of every chain point: a settling diagnostic."""
    return np.linalg.norm(np.diff(points, axis=0), axis=-1) * fps


__all__ = ["SpringChain", "SpringParams", "SpringResult", "simulate", "tip_velocity"]
