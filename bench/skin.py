"""``painted-skin bench skin``: the skin model against Cycles and two baselines, same shots.

The demo character plays motion the model never saw, through the demo's own camera: the
held-out generated motion (``skin_dataset.HELD_OUT_CLIPS``) and, when ../shared/data has
it, the real clip CMU 131_01 retargeted onto the character. Per frame the fast engine
makes the model's input passes, Cycles renders the reference at the model's training
quality (size and samples from the model's ``report.json``; denoised, as the training
targets were), and the model (ONNX, onnxruntime on the CPU) paints the frame. Two
non-learned baselines fitted on the model's own training frames paint the same frames
(:mod:`backend.skin.baselines`): each part its mean colour, and the mean training colour
per texel of a 256² UV grid.

Figures are masked (the character's pixels only, :mod:`backend.evaluate.metrics`): PSNR,
SSIM, FLIP, the warping error (Lai et al. 2018, with the shot's own motion and depth)
as a ratio to the Cycles reference's own, and the least-squares slope of PSNR over the
shot (drift). Timings are ms/frame on this CPU, the first frame excluded (Cycles builds
its scene there, onnxruntime plans its graph). Last line::

    skin psnr: <dB> ssim: <v> flip: <v> warp_ratio: <v> speedup_vs_cycles: <v>

the model's figures on the generated held-out shot.
"""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import bpy
import numpy as np

from ..addon.blender.passes.geometry import ShotGeometry
from ..addon.blender.passes.render import PassOptions, iter_frames
from ..addon.blender.retarget.api import retarget_clip
from ..addon.blender.session import reset_scene
from ..addon.blender.skin import dataset as D
from ..backend.evaluate import metrics
from ..backend.skin import features, runtime
from ..backend.skin.baselines import PartMean, UVLookup

REPO = Path(__file__).resolve().parents[1]
DEFAULT_MODEL = REPO / "rigs" / "skin_models" / "demo"
SHARED_DATA = Path(os.environ.get("PAINTED_SKIN_SHARED", REPO.parent / "shared")) / "data"
REAL_CLIP = "bvh/cmu_3dsmax_friendly/131_01.bvh"  # "Start Walk Stop"
DEFAULT_FRAMES = 48
FPS = 24.0
UV_GRID = 256
FALLBACK_FRAMES_PER_CLIP = 8  # a training set rendered here when the model's is gone
# The skin model's targets on held-out motion.
TARGETS = {"psnr": 28.7, "ssim": 0.97, "warp_ratio": 1.1, "slope": 0.005}
METHODS = ("model", "part-mean", "uv-lookup")


class SkinBenchError(ValueError):
    """The benchmark cannot run as asked; the message names the fix."""


@dataclass
class ModelInfo:
    """What the model folder says about its training: the quality Cycles must match."""

    folder: Path
    size: int
    samples: int
    train: Path | None
    multiple: int


@dataclass
class ShotResult:
    name: str
    frames: list[int]
    rows: dict[str, dict[str, float]]
    cycles_ms: float
    notes: list[str] = field(default_factory=list)


def model_info(folder: Path) -> ModelInfo:
    """Read the model folder's config and report (raises :class:`SkinBenchError`)."""
    try:
        cfg = runtime.read_config(folder)
    except runtime.ModelFolderError as e:
        raise SkinBenchError(f"{e} (or pass --model DIR)") from None
    report_path = folder / runtime.REPORT
    report = {}
    if report_path.is_file():
        try:
            report = json.loads(report_path.read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise SkinBenchError(f"{report_path} is unreadable ({e}): re-export the model "
                                 "with painted-skin train-skin") from None
    ds = report.get("dataset") or {}
    train = ds.get("train")
    return ModelInfo(folder=folder, size=int(ds.get("size", 128)),
                     samples=int(ds.get("samples", 16)),
                     train=Path(train) if train else None,
                     multiple=int(cfg.get("size_multiple", 1)))


def _load_training(folder: Path, fingerprint: dict) -> list[tuple[dict, np.ndarray]] | None:
    """The training frames' mask, parts, uv and beauty (all the baselines read), or None
    when the folder is gone or holds another character's renders."""
    meta = folder / "dataset.json"
    if not meta.is_file():
        return None
    try:
        if json.loads(meta.read_text()).get("fingerprint") != fingerprint:
            return None
    except (OSError, json.JSONDecodeError):
        return None
    out = []
    for f in sorted(folder.glob("[!.]*.npz")):
        with np.load(f, allow_pickle=False) as z:
            out.append(({k: z[k] for k in ("mask", "parts", "uv")}, z["beauty"]))
    return out or None


def training_frames(info: ModelInfo, arm: bpy.types.Object, fingerprint: dict
                    ) -> tuple[list[tuple[dict, np.ndarray]], str]:
    """The model's own training frames, else a small set of the same clips rendered now
    (kept in the train-skin cache, so a second run reuses it)."""
    if info.train is not None:
        frames = _load_training(info.train, fingerprint)
        if frames:
            return frames, f"the model's training set ({len(frames)} frames, {info.train})"
    from ..addon.blender.skin.train import DEFAULT_CACHE

    spec = D.DatasetSpec(size=info.size, frames_per_clip=FALLBACK_FRAMES_PER_CLIP,
                         samples=info.samples)
    folder = D.dataset_folder(DEFAULT_CACHE, spec, fingerprint)
    print(f"bench skin: the model's training set is not on this machine; rendering "
          f"{len(spec.clips) * spec.frames_per_clip} frames of its clips into {folder}",
          file=sys.stderr)
    D.build_dataset(arm, folder, spec)
    frames = _load_training(folder, fingerprint)
    if not frames:
        raise SkinBenchError(f"no training frames in {folder}: delete it and run again")
    return frames, f"a re-rendered training set ({len(frames)} frames, {folder})"


def _real_clip() -> Path | None:
    path = SHARED_DATA / REAL_CLIP
    return path if path.is_file() else None


def _generated_shot(arm: bpy.types.Object, tmp: Path, kind: str, seed: int,
                    frames: int) -> list[int]:
    """Retarget a generated clip (one spare frame each side for the motion pass)."""
    from ..addon.motion import write_clip

    clip = write_clip(tmp / f"{kind}_{seed}.bvh", kind, frames=frames + 2, fps=FPS, seed=seed)
    retarget_clip(clip, arm)
    return list(range(2, 2 + frames))


def _real_shot(arm: bpy.types.Object, clip: Path, frames: int) -> list[int]:
    """Retarget the real clip at 24 fps; the shot is its middle ``frames`` frames."""
    scene = bpy.context.scene
    scene.render.fps, scene.render.fps_base = int(FPS), 1.0
    rep = retarget_clip(clip, arm, set_scene=False, fps=FPS, frame_start=1)
    scene.frame_start, scene.frame_end = 1, rep.frames
    n = min(frames, rep.frames - 2)
    first = max(2, (rep.frames - n) // 2)
    return list(range(first, first + n))


def _mean_ms(times: list[float]) -> float:
    """Mean ms/frame without the first (warm-up) frame."""
    t = times[1:] if len(times) > 1 else times
    return float(np.mean(t)) * 1000.0


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


def run_shot(name: str, scene: bpy.types.Scene, frames: list[int], size: int, samples: int,
             skin: runtime.SkinModel, baselines: dict[str, PartMean | UVLookup],
             tmp: Path) -> ShotResult:
    """Passes, Cycles (timed), the model (timed) and the baselines on one shot; scored."""
    geo = ShotGeometry(scene, size, size)
    opts = PassOptions(frames=range(frames[0], frames[-1] + 1), width=size, height=size,
                       engine="fast", passes=D.PASSES)
    opts.validate()
    passes = {f: arrays for f, _, arrays, _ in iter_frames(scene, geo, opts, frames)}
    notes = []
    empty = [f for f in frames if not (np.asarray(passes[f]["mask"]) > 0).any()]
    if empty:
        notes.append(f"{len(empty)} frame(s) without the character in view left out")
    frames = [f for f in frames if f not in empty]
    if not frames:
        raise SkinBenchError(f"{name}: the character is out of view in every frame")
    refs, cycles_t = {}, []
    with D.beauty_settings(scene, size, samples):
        for f in frames:
            t0 = time.perf_counter()
            refs[f] = D.render_beauty(scene, f, tmp)
            cycles_t.append(time.perf_counter() - t0)
    outs: dict[str, dict[int, np.ndarray]] = {m: {} for m in METHODS}
    model_t, prev_out, prev_f = [], None, None
    for f in frames:
        p = passes[f]
        t0 = time.perf_counter()
        prev = None
        if skin.temporal and prev_out is not None and prev_f == f - 1:
            prev = features.warp_previous_output(prev_out, p["motion"], p["depth"],
                                                 passes[prev_f]["depth"])
        prev_out = skin.render(p, prev)
        model_t.append(time.perf_counter() - t0)
        outs["model"][f], prev_f = prev_out, f
        for method, baseline in baselines.items():
            outs[method][f] = baseline.paint(p)
    rows = {m: score(frames, passes, refs, outs[m]) for m in METHODS}
    rows["model"]["ms"] = _mean_ms(model_t)
    return ShotResult(name, frames, rows, _mean_ms(cycles_t), notes)


def _fmt(x: float, digits: int) -> str:
    return "n/a" if not math.isfinite(x) else f"{x:.{digits}f}"


def table(shots: list[ShotResult]) -> list[str]:
    """The rows printed: per shot, each method and the Cycles reference."""
    head = (f"{'shot':<34} {'method':<10} {'psnr':>7} {'ssim':>7} {'flip':>7} "
            f"{'warp_ratio':>10} {'psnr_slope':>11} {'ms/frame':>9}")
    lines = [head, "-" * len(head)]
    for s in shots:
        for m in METHODS:
            r = s.rows[m]
            ms = _fmt(r["ms"], 1) if "ms" in r else "-"
            lines.append(f"{s.name:<34} {m:<10} {_fmt(r['psnr'], 2):>7} "
                         f"{_fmt(r['ssim'], 4):>7} {_fmt(r['flip'], 4):>7} "
                         f"{_fmt(r['warp_ratio'], 3):>10} {_fmt(r['slope'], 4):>11} {ms:>9}")
        lines.append(f"{s.name:<34} {'cycles':<10} {'(reference)':>7} {'':>7} {'':>7} "
                     f"{'1.000':>10} {'':>11} {_fmt(s.cycles_ms, 1):>9}")
    return lines


def targets(shot: ShotResult) -> str:
    """Which of the targets (:data:`TARGETS`) the model meets on ``shot``."""
    r = shot.rows["model"]
    checks = [("psnr>=28.7", r["psnr"] >= TARGETS["psnr"]),
              ("ssim>=0.97", r["ssim"] >= TARGETS["ssim"]),
              ("warp_ratio<=1.1", r["warp_ratio"] <= TARGETS["warp_ratio"]),
              ("|slope|<=0.005", abs(r["slope"]) <= TARGETS["slope"]),
              ("faster than cycles", r["ms"] < shot.cycles_ms)]
    return "targets: " + ", ".join(f"{n} {'met' if ok else 'MISSED'}" for n, ok in checks)


def main(model: str | None = None, frames: int | None = None, size: int | None = None) -> int:
    """Run the benchmark (see the module doc); returns 0. Bad input raises
    :class:`SkinBenchError` (a ValueError: the CLI's exit 2)."""
    from ..demo.character import build_demo_character, setup_demo_scene

    info = model_info(Path(model) if model else DEFAULT_MODEL)
    frames = DEFAULT_FRAMES if frames is None else int(frames)
    size = info.size if size is None else int(size)
    if frames < 2:
        raise SkinBenchError(f"--frames {frames}: give at least 2 (the warping error needs a "
                             "pair)")
    if size < 16 or size % info.multiple:
        raise SkinBenchError(f"--size {size}: give a multiple of {info.multiple} of at least "
                             f"16 (the model trained at {info.size})")
    reset_scene()
    arm = build_demo_character()
    setup_demo_scene(arm)
    scene = bpy.context.scene
    fingerprint = D.character_fingerprint(arm)
    skin = runtime.load_model(info.folder, fingerprint)
    train, source = training_frames(info, arm, fingerprint)
    uv = UVLookup(train, UV_GRID)
    baselines: dict[str, PartMean | UVLookup] = {"part-mean": uv.part_mean, "uv-lookup": uv}
    del train
    kind, seed = D.HELD_OUT_CLIPS[0]
    shots: list[ShotResult] = []
    with tempfile.TemporaryDirectory(prefix="painted-skin-bench-skin-") as tmp_name:
        tmp = Path(tmp_name)
        todo = _generated_shot(arm, tmp, kind, seed, frames)
        shots.append(run_shot(f"{kind} seed {seed} (held-out, generated)", scene, todo, size,
                              info.samples, skin, baselines, tmp))
        clip = _real_clip()
        if clip is None:
            print(f"bench skin: {SHARED_DATA / REAL_CLIP} is absent: the real-clip shot is "
                  "skipped", file=sys.stderr)
        else:
            todo = _real_shot(arm, clip, frames)
            shots.append(run_shot("CMU 131_01 (real, retargeted)", scene, todo, size,
                                  info.samples, skin, baselines, tmp))
    print(f"model: {info.folder} (onnxruntime CPU); Cycles at the training quality: "
          f"{size}x{size}, {info.samples} samples + denoising; {os.cpu_count()} CPU(s)")
    print(f"baselines fitted on {source}; UV lookup {UV_GRID}² grid, "
          f"{uv.coverage():.0%} of the seen parts' texels hit")
    for s in shots:
        for note in s.notes:
            print(f"bench skin: {s.name}: {note}", file=sys.stderr)
    print(f"shots: {frames} frames each at {FPS:g} fps through the demo camera; masked "
          "metrics against Cycles; psnr_slope in dB/frame; warp_ratio = warping error / "
          "Cycles'")
    for line in table(shots):
        print(line)
    main_shot = shots[0]
    print(targets(main_shot))
    r = main_shot.rows["model"]
    speedup = metrics.ratio(main_shot.cycles_ms, r["ms"])
    print(f"skin psnr: {_fmt(r['psnr'], 2)} ssim: {_fmt(r['ssim'], 4)} "
          f"flip: {_fmt(r['flip'], 4)} warp_ratio: {_fmt(r['warp_ratio'], 3)} "
          f"speedup_vs_cycles: {_fmt(speedup, 2)}")
    return 0
