"""Skeletons and motions as plain arrays, with Blender's pose semantics.

A bone's armature-space pose matrix follows Blender exactly::

    M[b] = M[parent] @ inv(rest[parent]) @ rest[b] @ basis[b]

where ``rest`` is ``Bone.matrix_local`` and ``basis`` is the pose bone's local
(location, rotation) transform. A BVH joint is the special case of a bone whose
rest rotation is the file's axis conversion. Keeping one convention for every
source (BVH parser, Blender armatures, generated rigs) is what lets the solver
stay free of bpy.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .transforms import inverse3, orthonormalize


@dataclass
class Skeleton:
    """Bones in parent-before-child order, rest matrices in armature space."""

    names: list[str]
    parents: np.ndarray  # (n,) int, -1 for roots
    rest: np.ndarray  # (n, 4, 4) armature-space rest matrices (Bone.matrix_local)
    tails: np.ndarray  # (n, 3) armature-space rest tail positions
    world: np.ndarray = field(default_factory=lambda: np.eye(4))  # object matrix_world

    def __post_init__(self) -> None:
        self.parents = np.asarray(self.parents, dtype=np.int64)
        self.rest = np.asarray(self.rest, dtype=np.float64)
        self.tails = np.asarray(self.tails, dtype=np.float64)
        self.world = np.asarray(self.world, dtype=np.float64)
        n = len(self.names)
        if self.parents.shape != (n,) or self.rest.shape != (n, 4, 4):
            raise ValueError("skeleton arrays do not match its bone count")
        for i, p in enumerate(self.parents):
            if p >= i:
                raise ValueError(f"bone {self.names[i]!r} comes before its parent")
        self._index = {name: i for i, name in enumerate(self.names)}

    def __len__(self) -> int:
        return len(self.names)

    def index(self, name: str) -> int:
        return self._index[name]

    def __contains__(self, name: object) -> bool:
        return name in self._index

    @property
    def heads(self) -> np.ndarray:
        """Armature-space rest head positions (n, 3)."""
        return self.rest[:, :3, 3]

    def world_heads(self) -> np.ndarray:
        """World-space rest head positions (n, 3)."""
        return apply_points(self.world, self.heads)

    def world_tails(self) -> np.ndarray:
        return apply_points(self.world, self.tails)

    def children(self, i: int) -> list[int]:
        return [c for c in range(len(self)) if self.parents[c] == i]

    def local_rest(self) -> np.ndarray:
        """inv(rest[parent]) @ rest[b] for every bone (root: its rest)."""
        out = self.rest.copy()
        has = self.parents >= 0
        out[has] = np.linalg.inv(self.rest[self.parents[has]]) @ self.rest[has]
        return out

    def world_scale(self) -> float:
        """Uniform scale of the object matrix (FBX armatures often carry 0.01)."""
        return float(np.cbrt(abs(np.linalg.det(self.world[:3, :3]))))

    def height(self) -> float:
        """Rest height in world units: vertical extent of heads and tails."""
        pts = np.concatenate([self.world_heads(), self.world_tails()])
        return float(np.ptp(pts[:, 2])) or 1.0


@dataclass
class Motion:
    """Per-frame armature-space pose matrices of a skeleton's bones."""

    pose: np.ndarray  # (frames, n, 4, 4)
    fps: float
    frame_start: int = 1

    @property
    def frames(self) -> int:
        return int(self.pose.shape[0])

    def world(self, skel: Skeleton) -> np.ndarray:
        """World matrices (frames, n, 4, 4)."""
        return skel.world @ self.pose


def apply_points(m: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Apply 4x4 matrices to (..., 3) points."""
    return p @ m[..., :3, :3].swapaxes(-1, -2) + m[..., :3, 3] if m.ndim > 2 else (
        p @ m[:3, :3].T + m[:3, 3])


def compose(rot: np.ndarray, loc: np.ndarray) -> np.ndarray:
    """Build (..., 4, 4) from (..., 3, 3) rotations and (..., 3) locations."""
    out = np.zeros(rot.shape[:-2] + (4, 4))
    out[..., :3, :3] = rot
    out[..., :3, 3] = loc
    out[..., 3, 3] = 1.0
    return out


def bone_major(frames: int, n: int, *tail: int, dtype=np.float64) -> np.ndarray:
    """An empty (frames, n, *tail) array stored bone by bone, so that each bone's
    track ``a[:, i]`` is one contiguous block: the solver works bone by bone on
    clips of thousands of frames, and a frame-major layout makes every such slice
    a strided gather over the whole array (several times slower)."""
    return np.empty((n, frames, *tail), dtype=dtype).swapaxes(0, 1)


def forward_kinematics(skel: Skeleton, basis: np.ndarray,
                       out: np.ndarray | None = None) -> np.ndarray:
    """Armature-space pose matrices (F, n, 4, 4) from basis matrices (F, n, 4, 4),
    stored bone-major (:func:`bone_major`). ``out`` may be ``basis`` itself: each
    basis track is read once, by its own bone, so the pose can replace it."""
    local = skel.local_rest()
    if out is None:
        out = bone_major(*basis.shape, dtype=basis.dtype)
    frames = basis.shape[0]
    for i, p in enumerate(skel.parents):
        if p < 0:
            np.matmul(local[i], basis[:, i], out=out[:, i])
        else:
            # parent @ local as one (4F x 4) @ (4 x 4) GEMM (the parent's track is
            # contiguous), then the batched product with the basis.
            parent_local = (out[:, p].reshape(frames * 4, 4) @ local[i]).reshape(frames, 4, 4)
            np.matmul(parent_local, basis[:, i], out=out[:, i])
    return out


def basis_from_pose(skel: Skeleton, pose: np.ndarray) -> np.ndarray:
    """Inverse of :func:`forward_kinematics`: basis matrices from pose matrices."""
    local_inv = np.linalg.inv(skel.local_rest())
    pose_inv = affine_inverse(pose)
    out = np.empty_like(pose)
    for i, p in enumerate(skel.parents):
        if p < 0:
            out[:, i] = local_inv[i] @ pose[:, i]
        else:
            out[:, i] = local_inv[i] @ pose_inv[:, p] @ pose[:, i]
    return out


def affine_inverse(m: np.ndarray) -> np.ndarray:
    """Inverse of (..., 4, 4) affine matrices via the 3x3 block (batched, cheap)."""
    a_inv = inverse3(m[..., :3, :3])
    out = np.zeros_like(m)
    out[..., :3, :3] = a_inv
    out[..., :3, 3] = -(a_inv @ m[..., :3, 3, None])[..., 0]
    out[..., 3, 3] = 1.0
    return out


def rotations(m: np.ndarray) -> np.ndarray:
    """Pure rotation part of (..., 4, 4) matrices, scale stripped."""
    return orthonormalize(m[..., :3, :3])
