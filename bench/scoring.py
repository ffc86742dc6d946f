"""Scoring a shot's painted frames against their truth, without Blender.

What ``bench skin`` and ``bench look`` measure, in a module that imports neither bpy nor
the add-on's Blender layer, so the same figures come from frames rendered elsewhere (the
GPU check, :mod:`bench.gpu_skin`, runs on a machine without Blender)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..backend.evaluate import metrics
from ..backend.skin import features, runtime


@dataclass
class Shot:
    name: str
    frames: list[int]
    passes: dict[int, dict[str, np.ndarray]]
    truth: dict[str, dict[int, np.ndarray]]  # look -> frame -> RGBA uint8


def score(frames: list[int], passes: dict[int, dict], refs: dict[int, np.ndarray],
          tests: dict[int, np.ndarray]) -> dict[str, float]:
    """Masked PSNR / SSIM / FLIP (means over frames), PSNR slope (dB/frame) and the
    warping error of ``tests`` and of ``refs`` over consecutive pairs, and their ratio."""
    psnr, ssim, flip, warp_t, warp_r = [], [], [], [], []
    for f in frames:
        m, ref, test = passes[f]["mask"] > 0, refs[f][..., :3], tests[f]
        psnr.append(metrics.masked_psnr(ref, test, m))
        ssim.append(metrics.masked_ssim(ref, test, m))
        flip.append(metrics.masked_flip(ref, test, m))
    for a, b in zip(frames, frames[1:], strict=False):
        if b != a + 1:
            continue
        pa, pb = passes[a], passes[b]
        flow = pa["motion"][..., 2:4]
        valid = metrics.visible_in_next(pa["mask"] > 0, pa["depth"], pb["depth"], flow,
                                        pb["motion"][..., 0:2], pb["mask"] > 0)
        warp_t.append(metrics.pair_warping_error(tests[a], tests[b], flow, valid))
        warp_r.append(metrics.pair_warping_error(refs[a][..., :3], refs[b][..., :3], flow,
                                                 valid))
    wt, wr = metrics.finite_mean(warp_t), metrics.finite_mean(warp_r)
    return {"psnr": float(np.mean(psnr)), "ssim": float(np.mean(ssim)),
            "flip": float(np.mean(flip)), "warp": wt, "warp_reference": wr,
            "warp_ratio": metrics.ratio(wt, wr), "slope": metrics.slope_per_frame(frames, psnr)}


def paint_model(model: runtime.SkinModel, shot: Shot) -> dict[int, np.ndarray]:
    """Every frame of the shot through the model, each fed its previous output."""
    outs: dict[int, np.ndarray] = {}
    prev_out, prev_f = None, None
    for f in shot.frames:
        p = shot.passes[f]
        prev = None
        if model.temporal and prev_out is not None and prev_f == f - 1:
            prev = features.warp_previous_output(prev_out, p["motion"], p["depth"],
                                                 shot.passes[prev_f]["depth"])
        # as the skin pipeline sends (and chains) it: Cycles' black film off the character
        painted = model.render(p, prev)
        prev_out = np.where(np.asarray(p["mask"])[..., None] > 0, painted, np.uint8(0))
        outs[f], prev_f = prev_out, f
    return outs
