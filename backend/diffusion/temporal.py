"""Temporal consistency from the renderer's motion vectors (pure numpy).

Conventions (``addon.core.encodings.CONVENTIONS["motion"]``): the motion pass of
frame t is (H, W, 4) pixels; channels 0, 1 = (u, v) to the previous frame, 2, 3 =
to the next frame: *where this pixel's surface point is in that frame minus
where it is now*, u right, v down. So for a pixel p of frame t its surface point
is at ``p + flow_prev(p)`` in frame t-1, and a backward warp of frame t-1 into
frame t samples frame t-1 there (bilinearly). Pixel p = (column j, row i); any
constant pixel-centre offset cancels.

Occlusion is exact from depth: a pixel of frame t is valid when the surface it
shows was visible in the other frame, i.e. the other frame's depth at the
displaced position equals this pixel's depth within a relative tolerance
(objects move in depth between frames too, hence the tolerance).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = [
    "sample_bilinear", "warp_previous", "occlusion_mask", "fill_holes", "temporal_init",
    "strength_schedule", "warping_error", "downsample_flow", "warp_torch", "synthetic_shot",
]


def _grid(flow: np.ndarray, origin: tuple[int, int] = (0, 0)
          ) -> tuple[np.ndarray, np.ndarray]:
    """Where each pixel of ``flow`` points: (x, y) in the other frame's pixels;
    ``origin``: the (row, column) of ``flow``'s first pixel in that frame (a window)."""
    h, w = flow.shape[:2]
    jj, ii = np.meshgrid(np.arange(origin[1], origin[1] + w, dtype=np.float32),
                         np.arange(origin[0], origin[0] + h, dtype=np.float32))
    f = flow.astype(np.float32, copy=False)
    return jj + f[..., 0], ii + f[..., 1]


def sample_bilinear(img: np.ndarray, x: np.ndarray, y: np.ndarray, eps: float = 1e-3
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Sample ``img`` (H, W) or (H, W, C) at float pixel positions ``x`` (column),
    ``y`` (row). Returns (float32 values, inside) with ``inside`` False where the
    position lies outside the image (those values are edge-clamped)."""
    h, w = img.shape[:2]
    inside = (x >= -eps) & (x <= w - 1 + eps) & (y >= -eps) & (y <= h - 1 + eps)
    xc = np.clip(x, 0.0, w - 1.0)
    yc = np.clip(y, 0.0, h - 1.0)
    x0 = np.minimum(np.floor(xc).astype(np.intp), max(w - 2, 0))
    y0 = np.minimum(np.floor(yc).astype(np.intp), max(h - 2, 0))
    x1 = np.minimum(x0 + 1, w - 1)
    y1 = np.minimum(y0 + 1, h - 1)
    fx = (xc - x0).astype(np.float32)
    fy = (yc - y0).astype(np.float32)
    src = img.astype(np.float32, copy=False)
    if src.ndim == 3:
        fx, fy = fx[..., None], fy[..., None]
    top = src[y0, x0] * (1 - fx) + src[y0, x1] * fx
    bot = src[y1, x0] * (1 - fx) + src[y1, x1] * fx
    return top * (1 - fy) + bot * fy, inside


def warp_previous(prev: np.ndarray, flow_prev: np.ndarray, fill: float = 0.0,
                  origin: tuple[int, int] = (0, 0)) -> tuple[np.ndarray, np.ndarray]:
    """Backward-warp the previous frame's image ``prev`` (H, W[, C], any dtype)
    into the current frame: ``out(p) = prev(p + flow_prev(p))``, bilinear.

    ``flow_prev`` is (H, W, >=2): the current frame's motion channels 0, 1, or a window
    of them whose first pixel is ``origin`` (row, column) of the frame: the result is
    then the whole frame's warp in that window (a trainer's crop costs the crop).
    Returns (warped float32, inside); pixels whose source lies outside get ``fill``.
    An integer flow reproduces ``prev``'s pixels exactly.
    """
    x, y = _grid(flow_prev, origin)
    out, inside = sample_bilinear(prev, x, y)
    out[~inside] = fill
    return out, inside


def occlusion_mask(depth_now: np.ndarray, depth_other: np.ndarray, flow_to_other: np.ndarray,
                   rel_tol: float = 0.05, abs_tol: float = 1e-3,
                   include_background: bool = True, origin: tuple[int, int] = (0, 0)
                   ) -> np.ndarray:
    """(H, W) bool: True where this frame's pixel shows a surface that was also
    visible in the other frame.

    ``depth_*`` are planar depths in metres (+inf empty); ``flow_to_other`` is
    this frame's motion towards the other frame (channels 0, 1 for the previous
    frame, 2, 3 for the next). The other frame's depth is read at the displaced
    position (nearest pixel, so silhouettes never blend) and must match within
    ``rel_tol * depth + abs_tol``. Background pixels (empty in both) count as
    valid when ``include_background`` (static camera: the renderer writes zero
    motion on the background). ``depth_now`` and ``flow_to_other`` may be a window of
    this frame whose first pixel is ``origin`` (row, column), as in :func:`warp_previous`.
    """
    x, y = _grid(flow_to_other, origin)
    h, w = depth_other.shape
    inside = (x > -0.5) & (x < w - 0.5) & (y > -0.5) & (y < h - 0.5)
    xi = np.clip(np.rint(x).astype(np.intp), 0, w - 1)
    yi = np.clip(np.rint(y).astype(np.intp), 0, h - 1)
    d_other = depth_other.astype(np.float32, copy=False)[yi, xi]
    d_now = depth_now.astype(np.float32, copy=False)
    fin_now, fin_other = np.isfinite(d_now), np.isfinite(d_other)
    with np.errstate(invalid="ignore"):
        same = np.abs(d_other - d_now) <= rel_tol * np.abs(d_now) + abs_tol
    valid = fin_now & fin_other & same
    if include_background:
        valid |= ~fin_now & ~fin_other
    return valid & inside


def fill_holes(img: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Fill pixels where ``valid`` is False from the valid ones around them
    (push-pull: average down a pyramid of valid pixels, paste back up).
    Returns float32 of ``img``'s shape; unchanged where valid."""
    src = img.astype(np.float32)
    if valid.all() or not valid.any():
        return src
    chan = src[..., None] if src.ndim == 2 else src
    w = valid.astype(np.float32)
    out = _push_pull(chan * w[..., None], w)
    out = np.where(valid[..., None], chan, out)
    return out[..., 0] if src.ndim == 2 else out


def _push_pull(c: np.ndarray, w: np.ndarray) -> np.ndarray:
    h, wd = w.shape
    if (w > 0).all() or (h == 1 and wd == 1):
        return c / np.maximum(w, 1e-12)[..., None]
    ph, pw = h % 2, wd % 2
    cp = np.pad(c, ((0, ph), (0, pw), (0, 0)))
    wp = np.pad(w, ((0, ph), (0, pw)))
    h2, w2 = cp.shape[0] // 2, cp.shape[1] // 2
    c2 = cp.reshape(h2, 2, w2, 2, -1).sum(axis=(1, 3))
    w2_ = wp.reshape(h2, 2, w2, 2).sum(axis=(1, 3))
    coarse = _push_pull(c2, w2_)
    up = np.repeat(np.repeat(coarse, 2, axis=0), 2, axis=1)[:h, :wd]
    return np.where((w > 0)[..., None], c / np.maximum(w, 1e-12)[..., None], up)


def temporal_init(prev_rgb: np.ndarray, flow_prev: np.ndarray, depth_now: np.ndarray,
                  depth_prev: np.ndarray, fresh: np.ndarray | None = None,
                  rel_tol: float = 0.05) -> tuple[np.ndarray, np.ndarray]:
    """The img2img init of the current frame: the previous restyled frame
    warped by the motion vectors where its surface was visible, and ``fresh``
    (default: the warped frame's valid colours pushed into the holes) where not.

    Returns (init uint8 (H, W, 3), valid (H, W) bool).
    """
    warped, _ = warp_previous(prev_rgb, flow_prev)
    valid = occlusion_mask(depth_now, depth_prev, flow_prev[..., :2], rel_tol=rel_tol)
    if fresh is None:
        fresh = fill_holes(warped, valid)
    init = np.where(valid[..., None], warped, fresh.astype(np.float32))
    return np.clip(np.rint(init), 0, 255).astype(np.uint8), valid


def strength_schedule(valid_fraction: float, base: float = 0.5, max_strength: float = 0.9,
                      gamma: float = 1.0) -> float:
    """img2img strength of a warped frame: ``base`` when every pixel was
    visible before, rising to ``max_strength`` as the valid fraction falls
    (more new surface needs more denoising)."""
    vf = float(np.clip(valid_fraction, 0.0, 1.0))
    return float(np.clip(base + (max_strength - base) * (1.0 - vf) ** gamma, 0.0, 1.0))


def _as_unit(frame: np.ndarray) -> np.ndarray:
    f = frame.astype(np.float32)
    return f / 255.0 if frame.dtype == np.uint8 else f


def warping_error(frames: Sequence[np.ndarray], flows: Sequence[np.ndarray],
                  masks: Sequence[np.ndarray] | None = None) -> float:
    """Warping error of Lai et al. 2018 with the renderer's flow:
    mean over t of ``Σ M·‖V_t − warp(V_{t+1})‖² / Σ M``.

    ``frames``: T images (uint8 read as /255, or float); ``flows[t]``: frame t's
    motion to the next frame (its channels 2, 3; (H, W, 2) or the full (H, W, 4)
    pass); ``masks[t]``: frame t's non-occluded mask (:func:`occlusion_mask`
    with the next frame), all-True when None. Pixels warped from outside the
    image are excluded too.
    """
    if len(frames) < 2:
        return 0.0
    if len(flows) != len(frames) - 1:
        raise ValueError(f"need {len(frames) - 1} flows for {len(frames)} frames")
    errs = []
    for t in range(len(frames) - 1):
        f = flows[t]
        f = f[..., 2:4] if f.shape[-1] == 4 else f
        warped, inside = warp_previous(_as_unit(frames[t + 1]), f)
        m = inside if masks is None else inside & masks[t].astype(bool)
        n = m.sum()
        if n == 0:
            continue
        d = ((_as_unit(frames[t]) - warped) ** 2).reshape(m.shape + (-1,)).sum(-1)
        errs.append(float(d[m].sum() / n))
    return float(np.mean(errs)) if errs else 0.0


def downsample_flow(flow: np.ndarray, factor: int) -> np.ndarray:
    """Flow at 1/``factor`` resolution (block mean, in the small image's pixels)."""
    h, w, c = flow.shape
    hh, ww = h // factor, w // factor
    f = flow[: hh * factor, : ww * factor].astype(np.float32)
    return f.reshape(hh, factor, ww, factor, c).mean(axis=(1, 3)) / factor


def warp_torch(x: Any, flow: np.ndarray) -> Any:
    """Backward-warp a torch tensor (N, C, H, W) by ``flow`` (H, W, >=2) with
    ``grid_sample`` (bilinear, border padding): latents of the previous frame."""
    import torch
    import torch.nn.functional as F

    n, _, h, w = x.shape
    gx, gy = _grid(flow[..., :2])
    gx = 2.0 * gx / max(w - 1, 1) - 1.0
    gy = 2.0 * gy / max(h - 1, 1) - 1.0
    grid = torch.from_numpy(np.stack([gx, gy], -1)).to(x.device, x.dtype)[None]
    grid = grid.expand(n, -1, -1, -1)
    return F.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=True)


def synthetic_shot(n_frames: int = 4, height: int = 64, width: int = 64, speed: float = 2.0,
                   radius: float | None = None, depth: float = 2.0) -> list[dict[str, np.ndarray]]:
    """Passes of a generated shot (the renderer's conventions): a sphere moving
    right by ``speed`` pixels a frame over an empty background, with depth,
    normal, skeleton (a vertical limb), mask and exact motion vectors."""
    r = radius or min(height, width) / 4
    jj, ii = np.meshgrid(np.arange(width, dtype=np.float32), np.arange(height, dtype=np.float32))
    shot = []
    for t in range(n_frames):
        cx, cy = width / 3 + speed * t, height / 2
        dx, dy = (jj - cx) / r, (ii - cy) / r
        rr = dx * dx + dy * dy
        on = rr < 1.0
        nz = np.sqrt(np.clip(1.0 - rr, 0.0, 1.0))
        d = np.where(on, depth - 0.2 * nz, np.inf).astype(np.float32)
        normal = np.where(on[..., None], np.stack([dx, -dy, nz], -1), 0).astype(np.float16)
        skel = np.zeros((height, width, 3), np.uint8)
        col = int(round(cx))
        if 0 <= col < width:
            skel[int(cy - r):int(cy + r), max(col - 1, 0):col + 2] = (255, 0, 85)
        motion = np.zeros((height, width, 4), np.float16)
        motion[on, 0] = -speed if t > 0 else 0.0
        motion[on, 2] = speed if t < n_frames - 1 else 0.0
        mask = (on * 255).astype(np.uint8)
        parts = on.astype(np.uint8) * 2
        shot.append({"depth": d, "normal": normal, "skeleton": skel, "mask": mask,
                     "motion": motion, "parts": parts})
    return shot
