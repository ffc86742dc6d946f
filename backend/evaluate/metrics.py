"""Image-sequence metrics inside a mask (pure functions: arrays in, numbers out).

Images are (H, W, 3) (a grey (H, W) image is repeated over three channels); uint8 and
uint16 are divided by their maximum, float arrays are taken as they are, in [0, 1].
Every difference is taken on float64, so no integer type can wrap around (evaluation
code that subtracts uint8 images reports PSNRs several dB too high).

Outside the mask nothing counts: PSNR and the warping error read only the mask's
pixels; SSIM and FLIP filter over a neighbourhood, so both images are first laid on
the same black background outside the mask, and their maps are averaged over the mask.
"""

from __future__ import annotations

import math

import numpy as np

from ..diffusion.temporal import occlusion_mask, warp_previous

PSNR_CAP_DB = 100.0  # identical images (MSE 0) score this instead of +inf
SSIM_SETTINGS = {"gaussian_weights": True, "sigma": 1.5, "use_sample_covariance": False,
                 "data_range": 1.0}  # Wang et al. 2004, as scikit-image documents it
FLIP_RANGE = "LDR"  # sRGB in [0, 1], FLIP's default viewing (0.7 m from a 0.7 m 4K screen)


class MetricInputError(ValueError):
    """Arrays a metric cannot compare; the message names the problem and the fix."""


def to_unit_float(img: np.ndarray) -> np.ndarray:
    """``img`` as float64 (H, W, 3) in [0, 1]: integers divided by their type's maximum,
    grey repeated, an alpha channel dropped."""
    a = np.asarray(img)
    if a.dtype.kind in "ui":
        a = a.astype(np.float64) / float(np.iinfo(a.dtype).max)
    else:
        a = a.astype(np.float64)
    if a.ndim == 2:
        a = a[..., None]
    if a.ndim != 3 or a.shape[-1] not in (1, 2, 3, 4):
        raise MetricInputError(f"an image must be (H, W), (H, W, 3) or (H, W, 4), got shape "
                               f"{np.shape(img)}: pass one frame at a time")
    if a.shape[-1] in (1, 2):
        a = np.repeat(a[..., :1], 3, axis=-1)
    return a[..., :3]


def _pair(ref: np.ndarray, test: np.ndarray, mask: np.ndarray
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r, t = to_unit_float(ref), to_unit_float(test)
    m = np.asarray(mask).astype(bool)
    if r.shape != t.shape or m.shape != r.shape[:2]:
        raise MetricInputError(f"sizes differ: reference {r.shape[:2]}, test {t.shape[:2]}, "
                               f"mask {m.shape}: render both at the same size")
    if not m.any():
        raise MetricInputError("the mask is empty: no pixel to compare (is the character "
                               "in front of the camera?)")
    return r, t, m


def masked_mse(ref: np.ndarray, test: np.ndarray, mask: np.ndarray) -> float:
    """Mean squared error over the mask's pixels and all three channels."""
    r, t, m = _pair(ref, test, mask)
    return float(np.mean((r[m] - t[m]) ** 2))


def psnr_from_mse(mse: float, cap_db: float = PSNR_CAP_DB) -> float:
    """10·log10(1 / MSE) for a peak of 1, at most ``cap_db`` (MSE 0 gives the cap)."""
    if mse <= 10.0 ** (-cap_db / 10.0):
        return float(cap_db)
    return float(-10.0 * np.log10(mse))


def masked_psnr(ref: np.ndarray, test: np.ndarray, mask: np.ndarray,
                cap_db: float = PSNR_CAP_DB) -> float:
    """PSNR in dB of ``test`` against ``ref`` over the mask (peak 1, floats in [0, 1]);
    identical images give ``cap_db`` (a finite number keeps means and slopes defined)."""
    return psnr_from_mse(masked_mse(ref, test, mask), cap_db)


FILTER_MARGIN_PX = 32  # > the SSIM window radius (5) and the FLIP filter radii at 67 ppd (<= 15)


def _on_black(r: np.ndarray, t: np.ndarray, m: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Both images black outside the mask, cut to the mask's box plus a margin wider than
    any filter: the same maps over the mask as the whole frame gives, several times
    faster for a character that fills a fraction of the frame."""
    ii, jj = np.nonzero(m)
    box = (slice(max(ii.min() - FILTER_MARGIN_PX, 0), ii.max() + FILTER_MARGIN_PX + 1),
           slice(max(jj.min() - FILTER_MARGIN_PX, 0), jj.max() + FILTER_MARGIN_PX + 1))
    m = m[box]
    keep = m[..., None]
    return np.where(keep, r[box], 0.0), np.where(keep, t[box], 0.0), m


def masked_ssim(ref: np.ndarray, test: np.ndarray, mask: np.ndarray) -> float:
    """Mean of scikit-image's SSIM map (Gaussian window, sigma 1.5) over the mask's pixels
    and the three channels; 1 for identical images."""
    from skimage.metrics import structural_similarity

    r, t, m = _pair(ref, test, mask)
    if min(r.shape[:2]) < 11:
        raise MetricInputError(f"SSIM needs images of at least 11x11 pixels, got "
                               f"{r.shape[1]}x{r.shape[0]}: render larger frames")
    r, t, m = _on_black(r, t, m)
    _, smap = structural_similarity(r, t, channel_axis=-1, full=True, **SSIM_SETTINGS)
    return float(np.mean(smap[m]))


def masked_flip(ref: np.ndarray, test: np.ndarray, mask: np.ndarray) -> float:
    """Mean of NVIDIA's LDR-FLIP error map over the mask (0 identical, 1 worst); both
    images are read as sRGB in [0, 1], seen at FLIP's default (67 pixels per degree)."""
    import flip_evaluator

    r, t, m = _pair(ref, test, mask)
    r, t, m = _on_black(np.clip(r, 0, 1), np.clip(t, 0, 1), m)
    emap, _, _ = flip_evaluator.evaluate(
        np.ascontiguousarray(r, np.float32), np.ascontiguousarray(t, np.float32),
        FLIP_RANGE, applyMagma=False, computeMeanError=False)
    return float(np.mean(np.asarray(emap)[..., 0][m]))


def visible_in_next(mask: np.ndarray, depth: np.ndarray, depth_next: np.ndarray,
                    flow_next: np.ndarray, flow_prev_next: np.ndarray | None = None,
                    mask_next: np.ndarray | None = None, rel_tol: float = 0.05,
                    abs_tol: float = 1e-3, round_trip_px: float = 1.0) -> np.ndarray:
    """(H, W) bool: the mask's pixels of frame t whose surface point is seen in frame t+1.

    ``flow_next`` is frame t's motion towards t+1 (the motion pass's channels 2, 3:
    where the point is in t+1 minus where it is now). The point lands at ``q = p +
    flow_next(p)``; it is occluded when q leaves the image or frame t+1's depth at q
    differs from its depth now by more than ``rel_tol·depth + abs_tol`` (something
    nearer covers it, or the surface is gone). With ``flow_prev_next`` (frame t+1's
    channels 0, 1) q must also lead back to within ``round_trip_px`` of p: this catches
    an occluder whose depth is within the tolerance (a hand just in front of the chest).
    With ``mask_next`` the four pixels the bilinear warp reads around q must all be on the
    character in t+1: at the silhouette the warp would mix in the background, which is
    outside the mask and must not count.
    """
    m = np.asarray(mask).astype(bool)
    fwd = np.asarray(flow_next, np.float32)[..., :2]
    valid = m & occlusion_mask(np.asarray(depth, np.float32), np.asarray(depth_next, np.float32),
                               fwd, rel_tol=rel_tol, abs_tol=abs_tol, include_background=False)
    h, w = m.shape
    ii, jj = np.mgrid[0:h, 0:w].astype(np.float32)
    x, y = jj + fwd[..., 0], ii + fwd[..., 1]
    if mask_next is not None:
        on = np.asarray(mask_next).astype(bool)
        fx, fy = np.floor(x), np.floor(y)
        x0 = np.clip(fx.astype(np.intp), 0, w - 1)
        y0 = np.clip(fy.astype(np.intp), 0, h - 1)
        x1 = np.minimum(x0 + (x > fx), w - 1)  # a tap of weight 0 is not read
        y1 = np.minimum(y0 + (y > fy), h - 1)
        valid &= on[y0, x0] & on[y0, x1] & on[y1, x0] & on[y1, x1]
    if flow_prev_next is not None:
        xi = np.clip(np.rint(x).astype(np.intp), 0, w - 1)
        yi = np.clip(np.rint(y).astype(np.intp), 0, h - 1)
        back = np.asarray(flow_prev_next, np.float32)[..., :2][yi, xi]
        miss = np.hypot(x + back[..., 0] - jj, y + back[..., 1] - ii)
        valid &= miss <= round_trip_px
    return valid


def pair_warping_error(frame: np.ndarray, frame_next: np.ndarray, flow_next: np.ndarray,
                       valid: np.ndarray) -> float:
    """Σ M·‖V_t − warp(V_{t+1})‖² / Σ M for one pair (Lai et al. 2018): ``warp(V_{t+1})(p)``
    samples frame t+1 bilinearly where p's surface point is then (``p + flow_next(p)``);
    M is ``valid`` (see :func:`visible_in_next`). NaN when M is empty."""
    a, b = to_unit_float(frame), to_unit_float(frame_next)
    if a.shape != b.shape or np.shape(valid) != a.shape[:2]:
        raise MetricInputError(f"sizes differ: frames {a.shape[:2]} and {b.shape[:2]}, mask "
                               f"{np.shape(valid)}: render both at the same size")
    warped, inside = warp_previous(b, np.asarray(flow_next, np.float32)[..., :2])
    m = np.asarray(valid).astype(bool) & inside
    if not m.any():
        return float("nan")
    # Both sides on float32, the warp's precision: a pattern moved exactly scores 0.
    d = a[m].astype(np.float32).astype(np.float64) - warped[m].astype(np.float64)
    return float((d ** 2).sum(axis=-1).mean())


def slope_per_frame(frames: list[int] | np.ndarray, values: list[float] | np.ndarray) -> float:
    """Least-squares slope of ``values`` over frame numbers (units per frame): a masked
    PSNR that falls over a long shot shows drift. NaN with fewer than two frames."""
    x = np.asarray(frames, np.float64)
    y = np.asarray(values, np.float64)
    keep = np.isfinite(y)
    if keep.sum() < 2 or np.ptp(x[keep]) == 0:
        return float("nan")
    return float(np.polyfit(x[keep], y[keep], 1)[0])


def ratio(frames: float, reference: float) -> float:
    """frames / reference; NaN when either is undefined, 1 when both are 0 (no flicker in
    either), inf when only the reference is flicker-free."""
    if not (math.isfinite(frames) and math.isfinite(reference)):
        return float("nan")
    if reference == 0.0:
        return 1.0 if frames == 0.0 else float("inf")
    return frames / reference


def finite_mean(values: list[float]) -> float:
    """Mean of the finite values (NaN when none)."""
    v = [x for x in values if math.isfinite(x)]
    return float(np.mean(v)) if v else float("nan")
