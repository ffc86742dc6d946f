"""Projection of 3D keypoints through a camera, each tested against a depth buffer
(visible, occluded or out of view: :class:`Keypoints`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..passes.camera import Camera
from ..passes.jit import KERNEL_ERRORS, disable, enabled, njit
from .formats import BODY25_TO_COCO18, MARGINS, OCCLUDED_CONFIDENCE
from .points import body_scale


@dataclass
class Keypoints:
    """Projected keypoints of one set (body, hand or face)."""

    xy: np.ndarray  # (N, 2) pixel uv, project convention (centres at +0.5)
    depth: np.ndarray  # (N,) planar depth, metres (NaN where missing)
    present: np.ndarray  # (N,) bool: a 3D point exists
    in_view: np.ndarray  # (N,) bool: present, within near/far and inside the image
    visible: np.ndarray  # (N,) bool: in view and not occluded

    def __len__(self) -> int:
        return len(self.present)

    @property
    def occluded(self) -> np.ndarray:
        return self.in_view & ~self.visible

    @property
    def confidence(self) -> np.ndarray:
        """1 visible, OCCLUDED_CONFIDENCE occluded in view, 0 otherwise."""
        return np.where(self.visible, 1.0, np.where(self.occluded, OCCLUDED_CONFIDENCE, 0.0))

    def take(self, index: np.ndarray) -> Keypoints:
        """A subset / reordering (e.g. BODY25_TO_COCO18)."""
        return Keypoints(self.xy[index], self.depth[index], self.present[index],
                         self.in_view[index], self.visible[index])

    def to_coco18(self) -> Keypoints:
        """COCO-18 body from a BODY_25 body (returned unchanged when already 18)."""
        if len(self) == 18:
            return self
        if len(self) != 25:
            raise ValueError(f"expected a 25- or 18-point body, got {len(self)}")
        return self.take(BODY25_TO_COCO18)


def _sample_min(buffer: np.ndarray, xy: np.ndarray, window: int) -> np.ndarray:
    """Min of ``buffer`` over a (2w+1)^2 pixel window around each uv (clamped at borders),
    pixels that are non-finite or <= 0 (empty) counting as +inf.

    Only the sampled pixels are read and cleaned: cleaning (and casting to float64) the
    whole buffer first cost more than all the rest of the skeleton pass.
    """
    if enabled() and buffer.dtype in (np.float32, np.float64):
        out = np.empty(len(xy))
        try:
            _sample_min_jit(buffer, np.ascontiguousarray(xy, np.float64), int(window), out)
            return out
        except KERNEL_ERRORS as e:
            disable(e)
    h, w = buffer.shape
    off = np.arange(-window, window + 1)
    col = np.clip(np.floor(xy[:, 0]).astype(int), 0, w - 1)
    row = np.clip(np.floor(xy[:, 1]).astype(int), 0, h - 1)
    rows = np.clip(row[:, None, None] + off[None, :, None], 0, h - 1)
    cols = np.clip(col[:, None, None] + off[None, None, :], 0, w - 1)
    v = buffer[rows, cols].reshape(len(xy), -1).astype(float)
    with np.errstate(invalid="ignore"):
        v[~(np.isfinite(v) & (v > 0))] = np.inf
    return v.min(axis=1) if len(xy) else np.full(0, np.inf)


@njit
def _sample_min_jit(buffer, xy, window, out):  # pragma: no cover - compiled
    """:func:`_sample_min`'s numpy path as a loop (a min of the same values: identical)."""
    h, w = buffer.shape
    for n in range(xy.shape[0]):
        col = min(max(int(math.floor(xy[n, 0])), 0), w - 1)
        row = min(max(int(math.floor(xy[n, 1])), 0), h - 1)
        best = np.inf
        for di in range(-window, window + 1):
            r = min(max(row + di, 0), h - 1)
            for dj in range(-window, window + 1):
                v = float(buffer[r, min(max(col + dj, 0), w - 1)])
                if math.isfinite(v) and v > 0.0 and v < best:
                    best = v
        out[n] = best


def project_keypoints(points3d: np.ndarray, cam: Camera, depth_buffer: np.ndarray | None = None,
                      tolerance: float = 0.03, margin: float | np.ndarray = 0.0,
                      window: int = 1) -> Keypoints:
    """Project (N, 3) world points (NaN rows = missing) and test their visibility.

    In view: near <= depth <= far and 0 <= u < width, 0 <= v < height. With a (H, W)
    planar-depth buffer (non-finite or <= 0 = empty), a point in view is visible when
    ``depth <= min(buffer over a (2*window+1)^2 window) + tolerance + margin``; ``margin``
    (scalar or (N,), metres) is how deep the joint sits inside the surface (see MARGINS).
    """
    p = np.asarray(points3d, float).reshape(-1, 3)
    present = np.all(np.isfinite(p), axis=1)
    xy, depth = cam.project_world(np.where(present[:, None], p, 0.0))
    xy = np.where(present[:, None], xy, np.nan)
    depth = np.where(present, depth, np.nan)
    with np.errstate(invalid="ignore"):
        in_view = (present & (depth >= cam.near) & (depth <= cam.far)
                   & (xy[:, 0] >= 0) & (xy[:, 0] < cam.width)
                   & (xy[:, 1] >= 0) & (xy[:, 1] < cam.height))
    visible = in_view.copy()
    if depth_buffer is not None and in_view.any():
        buf = np.asarray(depth_buffer)
        if buf.shape != (cam.height, cam.width):
            raise ValueError(f"depth buffer is {buf.shape}, camera is "
                             f"{(cam.height, cam.width)} (rows, columns)")
        idx = np.flatnonzero(in_view)
        surface = _sample_min(buf, xy[idx], window)
        allow = tolerance + np.broadcast_to(np.asarray(margin, float), (len(p),))[idx]
        visible[idx] = depth[idx] <= surface + allow
    return Keypoints(xy=xy, depth=depth, present=present, in_view=in_view, visible=visible)


@lru_cache(maxsize=16)
def _margins(sets: tuple[tuple[str, int], ...]) -> np.ndarray:
    """MARGINS of the concatenated sets (name, point count); 0 for a set without any."""
    return np.concatenate([np.broadcast_to(np.asarray(MARGINS.get(k, 0.0), float), (n,))
                           for k, n in sets])


def project_skeleton(points: dict[str, np.ndarray], cam: Camera,
                     depth_buffer: np.ndarray | None = None, tolerance: float = 0.03,
                     scale: float | None = None, window: int = 1) -> dict[str, Keypoints]:
    """:func:`project_keypoints` for every set of :func:`joints_3d`, with the per-joint
    MARGINS scaled by ``scale`` (default :func:`body_scale`)."""
    s = body_scale(points) if scale is None else scale
    # All sets in one projection and one depth test: the per-call overhead dominated.
    sets = {k: np.asarray(v, float).reshape(-1, 3) for k, v in points.items()}
    if not sets:
        return {}
    margin = _margins(tuple((k, len(v)) for k, v in sets.items())) * s
    both = project_keypoints(np.concatenate(list(sets.values())), cam, depth_buffer,
                             tolerance, margin, window)
    out, start = {}, 0
    for k, v in sets.items():
        out[k] = both.take(slice(start, start + len(v)))
        start += len(v)
    return out
