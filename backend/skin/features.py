"""The passes of one frame -> the skin network's input tensor (numpy only).

The tensor is (C, H, W) float32; its channel layout is :func:`layout` of the
model's inputs and is written into the model folder's config, so a runtime
builds exactly what the network was trained on (a model from before an input
existed keeps its own layout). The first six channels are the
surface coordinates the learned textures are sampled at: (u, v, has_uv) from the
``uv`` pass and the ``rest_position`` pass scaled into [-1, 1] by the training
set's rest-pose bounds. The rest are per-pixel conditioning for the U-Net.

The temporal input is the previous *output* warped into this frame by the
renderer's motion vectors, valid only where depth says the surface was visible
then (``backend.diffusion.temporal``), so the network can copy what it painted
a frame ago instead of repainting it (no flicker), and sees where it must paint
fresh.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ...wire.messages import E_BAD_ARRAY
from ..diffusion import temporal

NUM_PARTS = 16  # addon.core.encodings.PARTS: background + 15 labels
NUM_LIGHTS = 4
COORDS = (("uv", 3), ("rest_position", 3))
# name -> channels of every conditioning input a model may take, in this order
CONDITIONING = {
    "normal_world": 3, "normal": 3, "view_dir": 3, "light_visibility": NUM_LIGHTS,
    "irradiance": 3, "specular": 3, "albedo": 3, "depth_rel": 1, "mask": 1, "parts": NUM_PARTS,
}
TEMPORAL = (("prev_rgb", 3), ("prev_valid", 1))
DEFAULT_INPUTS = tuple(CONDITIONING)
# the pass each input is made from
PASS_OF = {"depth_rel": "depth", "prev_rgb": "motion", "prev_valid": "motion"}


class FeatureError(ValueError):
    """A frame's passes cannot make the network's input; the message names the fix. The
    client's to fix: the backend answers it as ``bad_array`` (``reply_code``)."""

    reply_code = E_BAD_ARRAY


def layout(inputs: Sequence[str] = DEFAULT_INPUTS, temporal_input: bool = False
           ) -> list[list]:
    """[[name, channels], ...] of the input tensor: coordinates, the chosen
    conditioning inputs (in :data:`CONDITIONING` order), then the temporal ones."""
    unknown = sorted(set(inputs) - set(CONDITIONING))
    if unknown:
        raise FeatureError(f"unknown skin-model input(s) {', '.join(unknown)}; "
                           f"known: {', '.join(CONDITIONING)}")
    out = [[n, c] for n, c in COORDS]
    out += [[n, c] for n, c in CONDITIONING.items() if n in inputs]
    if temporal_input:
        out += [[n, c] for n, c in TEMPORAL]
    return out


def channels(lay: Sequence[Sequence]) -> int:
    return int(sum(int(c) for _, c in lay))


def offset(lay: Sequence[Sequence], name: str) -> int | None:
    """The first channel of input ``name`` in layout ``lay`` (None: not in it)."""
    c = 0
    for n, k in lay:
        if n == name:
            return c
        c += int(k)
    return None


def required_passes(lay: Sequence[Sequence]) -> list[str]:
    """The pass names a frame must carry for this layout (``depth`` always: the
    temporal input's occlusion test and depth_rel need it)."""
    names = {PASS_OF.get(n, n) for n, _ in lay} | {"mask", "depth"}
    return sorted(names)


def rest_bounds(frames: Sequence[dict[str, np.ndarray]]) -> list[list[float]]:
    """[[lo x, y, z], [hi x, y, z]] of the rest positions seen on the character
    over ``frames`` (padded 5 %): the box the 3-D feature grid spans."""
    lo = np.full(3, np.inf)
    hi = np.full(3, -np.inf)
    for p in frames:
        on = np.asarray(p["mask"]) > 0
        if on.any():
            r = np.asarray(p["rest_position"], np.float32)[on]
            lo, hi = np.minimum(lo, r.min(0)), np.maximum(hi, r.max(0))
    if not np.isfinite(lo).all():
        raise FeatureError("no frame shows the character (every mask is empty): "
                           "render frames where it is in view")
    pad = np.maximum((hi - lo) * 0.05, 1e-3)
    return [(lo - pad).tolist(), (hi + pad).tolist()]


def depth_relative(depth: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """(H, W) depth relative to the camera's distance to the character (the
    median depth on it): ``(d - ref) / ref``, 0 where empty. Scale-free, so a
    camera that moves in or out does not change what the network sees."""
    d = np.asarray(depth, np.float32)
    on = (np.asarray(mask) > 0) & np.isfinite(d)
    out = np.zeros(d.shape, np.float32)
    if on.any():
        ref = float(np.median(d[on]))
        out[on] = (d[on] - ref) / max(ref, 1e-6)
    return out


def warp_previous_output(prev_rgb: np.ndarray, motion: np.ndarray, depth_now: np.ndarray,
                         depth_prev: np.ndarray, rel_tol: float = 0.05,
                         window: tuple[int, int, int, int] | None = None
                         ) -> tuple[np.ndarray, np.ndarray]:
    """The previous output (H, W, 3) uint8 or [0, 1] float, warped into this frame.

    Returns (rgb float32 (H, W, 3) in [0, 1], 0 where not valid; valid (H, W) bool):
    valid where this pixel's surface was on the character and visible in the
    previous frame (depth test at the displaced position). ``window`` (row, column,
    height, width): only that window of this frame, exactly as the whole frame's
    warp has it there (the trainer warps only its crop)."""
    prev = np.asarray(prev_rgb)
    prev = prev.astype(np.float32) / 255.0 if prev.dtype == np.uint8 else prev.astype(np.float32)
    flow = np.asarray(motion, np.float32)[..., :2]
    now = np.asarray(depth_now, np.float32)
    origin = (0, 0)
    if window is not None:
        y0, x0, h, w = window
        flow, now, origin = flow[y0:y0 + h, x0:x0 + w], now[y0:y0 + h, x0:x0 + w], (y0, x0)
    warped, inside = temporal.warp_previous(prev, flow, origin=origin)
    valid = inside & temporal.occlusion_mask(now, np.asarray(depth_prev, np.float32), flow,
                                             rel_tol=rel_tol, include_background=False,
                                             origin=origin)
    warped[~valid] = 0.0
    return warped, valid


def _pass(passes: dict[str, np.ndarray], name: str, shape: tuple[int, ...]) -> np.ndarray:
    a = passes.get(name)
    if a is None:
        raise FeatureError(f"the skin model needs the {name!r} pass: enable it in the "
                           "render passes")
    a = np.asarray(a)
    if a.shape[:2] != shape[:2] or (len(shape) == 3 and (a.ndim != 3 or a.shape[2] < shape[2])):
        raise FeatureError(f"pass {name!r} is {list(a.shape)}, expected {list(shape)}: "
                           "render every pass at the same size")
    return a


def frame_features(passes: dict[str, np.ndarray], lay: Sequence[Sequence],
                   bounds: Sequence[Sequence[float]],
                   previous: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """(C, H, W) float32 input of one frame for layout ``lay``.

    ``bounds``: the model's rest-pose box (:func:`rest_bounds`). ``previous``:
    (warped rgb (H, W, 3), valid (H, W)) from :func:`warp_previous_output`, for
    a layout with the temporal input; None there means a fresh frame (all zero,
    as the network was trained to see for a shot's first frame)."""
    if passes.get("mask") is None:
        raise FeatureError("the skin model needs the 'mask' pass: enable it in the render passes")
    mask = np.asarray(passes["mask"])
    h, w = mask.shape[:2]
    on = (mask > 0).astype(np.float32)
    out = np.zeros((channels(lay), h, w), np.float32)
    lo = np.asarray(bounds[0], np.float32)
    hi = np.asarray(bounds[1], np.float32)
    c = 0
    for name, n in lay:
        n = int(n)
        dst = out[c:c + n]
        if name == "rest_position":
            r = _pass(passes, name, (h, w, 3)).astype(np.float32)[..., :3]
            r = np.clip(2.0 * (r - lo) / np.maximum(hi - lo, 1e-6) - 1.0, -1.0, 1.0)
            dst[:] = np.moveaxis(r, -1, 0) * on
        elif name == "depth_rel":
            dst[0] = depth_relative(_pass(passes, "depth", (h, w)), mask)
        elif name == "mask":
            dst[0] = on
        elif name == "parts":
            parts = _pass(passes, "parts", (h, w)).astype(np.intp)
            if parts.max(initial=0) >= NUM_PARTS:
                raise FeatureError(f"parts pass holds id {int(parts.max())} (at most "
                                   f"{NUM_PARTS - 1}): use the labels of encodings.PARTS")
            dst[parts, np.arange(h)[:, None], np.arange(w)[None, :]] = 1.0
            dst *= on  # nothing off the character: the mask channel says where that is
        elif name == "prev_rgb":
            if previous is not None:
                dst[:] = np.moveaxis(np.asarray(previous[0], np.float32), -1, 0)
        elif name == "prev_valid":
            if previous is not None:
                dst[0] = np.asarray(previous[1], np.float32)
        else:
            raw = _pass(passes, name, (h, w, n))
            a = raw.astype(np.float32)[..., :n]
            if raw.dtype == np.uint8:  # light_visibility travels as 0/255 bytes
                a /= 255.0
            dst[:] = np.moveaxis(np.nan_to_num(a), -1, 0) * on
        c += n
    return out
