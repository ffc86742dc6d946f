"""The parsed BVH clip (:class:`BvhClip`), its limits and error, and the channel
maths (rotation channels to matrices and back, forward kinematics in file axes).
The conventions are those of the package (:mod:`painted_skin.addon.core.bvh`)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..rig.transforms import axis_angle_to_matrix, matrix_to_euler

MAX_FRAMES = 1_000_000
# Blender's BVH importer slows down steeply with the joint count (20,000 joints: ~107 s);
# real skeletons have tens to a few hundred joints.
MAX_JOINTS = 1_000
# OFFSETs and motion values beyond this (file units, usually cm; degrees) are not a body:
# 1e300 makes Blender's importer and the retarget's SVD fail.
MAX_VALUE = 1e6
# Frame Time bounds: 1 to 1000 fps (Blender's fps is an int; 1e-300 s overflows it).
MIN_FRAME_TIME, MAX_FRAME_TIME = 0.001, 1.0
CHANNEL_NAMES = ("Xposition", "Yposition", "Zposition", "Xrotation", "Yrotation", "Zrotation")
_AXES = {"X": 0, "Y": 1, "Z": 2}
# BVH (Y-up) -> Blender (Z-up): (x, y, z) -> (x, -z, y).
AXIS_CONVERSION = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, -1.0], [0.0, 1.0, 0.0]])


class BvhError(ValueError):
    """A BVH file that cannot be used; the message says what is wrong and how to fix it."""


@dataclass
class BvhClip:
    """A parsed BVH file: hierarchy plus the raw motion table."""

    names: list[str]
    parents: np.ndarray  # (n,) int, -1 for roots, parent before child
    offsets: np.ndarray  # (n, 3) OFFSET of each joint, file units
    channels: list[tuple[str, ...]]  # per joint, e.g. ("Zrotation", "Xrotation", "Yrotation")
    end_sites: dict[int, np.ndarray]  # joint index -> End Site OFFSET
    frame_time: float
    frames: np.ndarray  # (F, C) channel values, degrees for rotations
    source: str = "<text>"
    warnings: list[str] = field(default_factory=list)
    # joints whose name another joint had: (name in the file, read as, line), as Blender's
    # importer renames them ("Spine" -> "Spine.001")
    renamed: list[tuple[str, str, int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.parents = np.asarray(self.parents, dtype=np.int64)
        self.offsets = np.asarray(self.offsets, dtype=np.float64).reshape(-1, 3)
        self.frames = np.asarray(self.frames, dtype=np.float64)
        self.channels = [tuple(c) for c in self.channels]
        self.end_sites = {int(k): np.asarray(v, dtype=np.float64) for k, v in
                          self.end_sites.items()}

    @property
    def num_joints(self) -> int:
        return len(self.names)

    @property
    def num_frames(self) -> int:
        return int(self.frames.shape[0])

    @property
    def num_channels(self) -> int:
        return sum(len(c) for c in self.channels)

    @property
    def fps(self) -> float:
        return 1.0 / self.frame_time

    @property
    def channel_starts(self) -> np.ndarray:
        """Column of each joint's first channel in :attr:`frames`."""
        sizes = [len(c) for c in self.channels]
        return np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)

    def index(self, name: str) -> int:
        return self.names.index(name)

    def rotation_order(self, j: int) -> str:
        """Rotation axes as listed in the file, e.g. ``"ZXY"``."""
        return "".join(c[0] for c in self.channels[j] if c.endswith("rotation"))

    def has_position(self, j: int) -> bool:
        return any(c.endswith("position") for c in self.channels[j])

    def channel_values(self, j: int, kind: str) -> np.ndarray:
        """(F, k) values of joint ``j``'s ``"rotation"`` or ``"position"`` channels."""
        start = self.channel_starts[j]
        cols = [start + i for i, c in enumerate(self.channels[j]) if c.endswith(kind)]
        return self.frames[:, cols]

    def local_rotations(self) -> np.ndarray:
        """(F, n, 3, 3) local rotation of every joint and frame."""
        out = np.empty((self.num_frames, self.num_joints, 3, 3))
        for j in range(self.num_joints):
            out[:, j] = channel_matrices(self.channel_values(j, "rotation"),
                                         self.rotation_order(j))
        return out

    def local_translations(self) -> np.ndarray:
        """(F, n, 3) translation of each joint from its parent, in the parent's frame."""
        out = np.broadcast_to(self.offsets, (self.num_frames,) + self.offsets.shape).copy()
        for j in range(self.num_joints):
            if self.has_position(j):
                out[:, j] = 0.0
                vals = self.channel_values(j, "position")
                axes = [_AXES[c[0]] for c in self.channels[j] if c.endswith("position")]
                out[:, j, axes] = vals
        return out

    def world_positions(self) -> np.ndarray:
        """(F, n, 3) BVH-space (file units, Y-up) joint positions."""
        return forward_kinematics_bvh(self.parents, self.local_rotations(),
                                      self.local_translations())[1]

    def file_order(self) -> list[int]:
        """Joint indices in the order a BVH file lists them (depth-first)."""
        kids: list[list[int]] = [[] for _ in range(self.num_joints)]
        for j, p in enumerate(self.parents):
            if p >= 0:
                kids[p].append(j)
        order: list[int] = []
        stack = [int(j) for j in np.flatnonzero(self.parents < 0)][::-1]
        while stack:
            j = stack.pop()
            order.append(j)
            stack.extend(kids[j][::-1])
        return order

    def in_file_order(self) -> BvhClip:
        """This clip with its joints (and motion columns) in depth-first file order."""
        order = self.file_order()
        if order == list(range(self.num_joints)):
            return self
        new = {old: k for k, old in enumerate(order)}
        starts = self.channel_starts
        cols = np.concatenate([np.arange(starts[j], starts[j] + len(self.channels[j]))
                               for j in order]).astype(np.int64)
        parents = [new[int(self.parents[j])] if self.parents[j] >= 0 else -1 for j in order]
        return BvhClip([self.names[j] for j in order], np.array(parents), self.offsets[order],
                       [self.channels[j] for j in order],
                       {new[j]: v for j, v in self.end_sites.items()}, self.frame_time,
                       self.frames[:, cols], self.source, list(self.warnings))

    def rest_positions(self) -> np.ndarray:
        """(n, 3) BVH-space rest joint positions (accumulated OFFSETs)."""
        out = np.zeros_like(self.offsets)
        for j, p in enumerate(self.parents):
            out[j] = self.offsets[j] + (out[p] if p >= 0 else 0.0)
        return out


# --------------------------------------------------------------------------- rotation helpers

def channel_matrices(degrees: np.ndarray, axes: str) -> np.ndarray:
    """(F, k) rotation channel values in degrees, listed ``axes`` -> (F, 3, 3).

    ``axes="ZXY"`` gives ``Rz @ Rx @ Ry`` (the BVH convention).
    """
    degrees = np.asarray(degrees, dtype=np.float64)
    m = np.broadcast_to(np.eye(3), degrees.shape[:-1] + (3, 3)).copy()
    for i, ax in enumerate(axes):
        e = np.zeros(3)
        e[_AXES[ax]] = 1.0
        m = m @ axis_angle_to_matrix(np.broadcast_to(e, degrees.shape[:-1] + (3,)),
                                     np.radians(degrees[..., i]))
    return m


def matrices_to_channels(m: np.ndarray, axes: str, unwrap: bool = True) -> np.ndarray:
    """(F, 3, 3) rotations -> (F, 3) channel degrees for the listed ``axes`` (3 distinct)."""
    if sorted(axes) != ["X", "Y", "Z"]:
        raise ValueError(f"rotation order {axes!r} must name X, Y and Z once each")
    # BVH "ZXY" (Rz @ Rx @ Ry) is Blender's Euler order "YXZ".
    e = matrix_to_euler(np.asarray(m, dtype=np.float64), axes[::-1])
    vals = e[..., [_AXES[a] for a in axes]]
    if unwrap and vals.ndim >= 2 and len(vals) > 1:
        vals = np.unwrap(vals, axis=0)
    return np.degrees(vals)


def forward_kinematics_bvh(parents: np.ndarray, local_rot: np.ndarray,
                           local_pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """BVH FK: world rotations (F, n, 3, 3) and positions (F, n, 3)."""
    world_rot = np.empty_like(local_rot)
    world_pos = np.empty_like(local_pos)
    for j, p in enumerate(parents):
        if p < 0:
            world_rot[:, j] = local_rot[:, j]
            world_pos[:, j] = local_pos[:, j]
        else:
            world_rot[:, j] = world_rot[:, p] @ local_rot[:, j]
            world_pos[:, j] = world_pos[:, p] + np.einsum(
                "fij,fj->fi", world_rot[:, p], local_pos[:, j])
    return world_rot, world_pos


# --------------------------------------------------------------------------- reading

