"""``painted-skin bench passes``: the fast engine against Cycles, same shot.

Both engines make the same passes (depth, normal, mask, skeleton, motion) of
the same frames of the demo shot at 512²; the figures compare their arrays:
mask IoU, median relative depth error, mean normal angle and motion-vector
end-point error on pixels both cover.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import bpy
import numpy as np

from ..addon.blender.passes.geometry import ShotGeometry
from ..addon.blender.passes.render import PassOptions, iter_frames
from ..addon.blender.retarget.api import retarget_clip
from ..addon.blender.session import reset_scene
from ..addon.core.passes import jit

PASSES = ("depth", "normal", "mask", "skeleton", "motion")


def _demo_shot(tmp: Path, frames: int) -> bpy.types.Scene:
    from ..addon.motion import write_clip
    from ..demo.character import build_demo_character, setup_demo_scene

    reset_scene()
    arm = build_demo_character()
    setup_demo_scene(arm)
    retarget_clip(write_clip(tmp / "walk.bvh", "walk", frames=frames + 2, fps=24), arm)
    return bpy.context.scene


def compare(a: dict[int, dict], b: dict[int, dict]) -> dict[str, float]:
    """Accuracy of engine output ``a`` against the reference ``b`` (per-frame arrays)."""
    inter = union = 0
    depth_rel, angles, epe = [], [], []
    for f, fa in a.items():
        fb = b[f]
        ma, mb = fa["mask"], fb["mask"]
        inter += int((ma & mb).sum())
        union += int((ma | mb).sum())
        both = ma & mb
        depth_rel.append(np.abs(fa["depth"][both] - fb["depth"][both]) / fb["depth"][both])
        cos = np.clip(np.sum(fa["normal"][both] * fb["normal"][both], axis=-1), -1.0, 1.0)
        angles.append(np.degrees(np.arccos(cos)))
        for k in (0, 2):
            d = fa["motion"][both][:, k:k + 2] - fb["motion"][both][:, k:k + 2]
            epe.append(np.linalg.norm(d, axis=-1))
    return {"iou": inter / max(union, 1),
            "depth_rel": float(np.median(np.concatenate(depth_rel))),
            "normal_deg": float(np.mean(np.concatenate(angles))),
            "flow_epe": float(np.mean(np.concatenate(epe)))}


def main(frames: int = 24, size: int = 512) -> int:
    """Engine time per frame (arrays + skeleton, no file encoding: both engines share
    the writer), the ratio, and the accuracy of fast against cycles."""
    with tempfile.TemporaryDirectory() as tmp:
        scene = _demo_shot(Path(tmp), frames)
        todo = list(range(2, 2 + frames))
        out: dict[str, dict[int, dict]] = {}
        timings = {}
        for engine in ("cycles", "fast"):
            opts = PassOptions(frames=range(2, 2 + frames), width=size, height=size,
                               engine=engine, passes=PASSES)
            opts.validate()
            geo = ShotGeometry(scene, size, size)
            # One untimed frame first: loads (or compiles, on a cold cache) the fast
            # engine's kernels and lets Cycles build its scene once.
            for _ in iter_frames(scene, geo, opts, todo[:1]):
                pass
            # Timed: each frame's arrays are dropped once yielded, as the writer drops
            # them after writing (holding all of them would time page faults of fresh
            # memory instead of the engine). The arrays compared come from a second,
            # untimed run: both engines are deterministic.
            t0 = time.perf_counter()
            for _ in iter_frames(scene, geo, opts, todo):
                pass
            timings[engine] = (time.perf_counter() - t0) / frames * 1000
            out[engine] = {f: arrays for f, _, arrays, _ in iter_frames(scene, geo, opts, todo)}
        acc = compare(out["fast"], out["cycles"])
    ratio = timings["cycles"] / timings["fast"]
    print(f"shot: demo character walking, {frames} frames at {size}x{size}, passes "
          f"{','.join(PASSES)}")
    kernels = "numba kernels" if jit.enabled() else "numpy kernels (pip install numba: faster)"
    print(f"cycles: {timings['cycles']:.0f} ms/frame   fast: {timings['fast']:.1f} ms/frame "
          f"(engine: arrays + skeleton, file writing excluded; {kernels})")
    print(f"passes speedup: {ratio:.1f}x iou: {acc['iou']:.4f} depth_rel: {acc['depth_rel']:.2e} "
          f"normal_deg: {acc['normal_deg']:.3f} flow_epe: {acc['flow_epe']:.3f}")
    return 0
