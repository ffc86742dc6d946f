"""``painted-skin bench skin``: the skin model against Cycles and two baselines, same shots.

A matrix of cells. The demo character plays motion the model never saw: the held-out
generated motion (``skin_dataset.HELD_OUT_CLIPS``) and, when ../shared/data has them, the
real clips CMU 131_01 and CMU 05_06 (a dance no training set may hold) retargeted onto
it; each through six cameras (the demo's own, then five that follow the character:
three-quarter front, behind, low, high and a close-up) under two light rigs (the scene's,
and the same lights turned 140 degrees about the character, so the key comes from
behind). Per frame the fast engine
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

    skin psnr: <mean> min_psnr: <worst cell> ssim: <mean> min_ssim: <worst> flip: <mean>
    warp_ratio: <the cell farthest from 1> speedup_vs_cycles: <x>

(one line), over every cell: the worst case, not the best shot.

``--converged N`` also renders each cell with Cycles at N samples (denoised, same seed)
and scores that render as if it were a painting: its warp ratio is where a
nearly noise-free truth falls. The training target's 16 samples leave denoised noise
that does not follow the surface, so its warping error is partly noise; where the
converged render also falls below 0.8, a painting there is not losing detail, it is
missing the reference's noise (the targets line names those cells).
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
from ..addon.blender.skin import dataset as D
from ..backend.evaluate import metrics
from ..backend.skin import features, runtime, stabilize
from ..backend.skin.baselines import PartMean, UVLookup
from .scoring import score

REPO = Path(__file__).resolve().parents[1]
DEFAULT_MODEL = REPO / "rigs" / "skin_models" / "demo"
SHARED_DATA = Path(os.environ.get("PAINTED_SKIN_SHARED", REPO.parent / "shared")) / "data"
REAL_CLIP = D.HELD_OUT_REAL  # CMU 131_01, "Start Walk Stop"
DEFAULT_FRAMES = 48
FPS = 24.0
UV_GRID = 256
FALLBACK_FRAMES_PER_CLIP = 8  # a training set rendered here when the model's is gone
# The skin model's targets: every cell, and the mean over cells.
TARGETS = {"psnr": 27.0, "ssim": 0.95, "mean_psnr": 29.0, "mean_ssim": 0.975,
           "warp_low": 0.8, "warp_high": 1.1, "speedup": 5.0}
NEVER_TRAINED_CLIP = "bvh/cmu_motionbuilder_friendly/05_06.bvh"  # the dance
#: name -> (azimuth deg from the front, elevation deg, distance factor, lens mm, aim
#: height): cameras that follow the character (``skin_dataset.Orbit``'s terms).
CAMERAS = {"three_quarter": (35.0, 8.0, 1.1, 50.0, 0.5), "behind": (180.0, 6.0, 1.1, 50.0, 0.5),
           "low": (20.0, -14.0, 1.1, 40.0, 0.45), "high": (-30.0, 45.0, 1.2, 50.0, 0.5),
           "close_up": (15.0, 5.0, 0.45, 60.0, 0.82)}
LIGHT_TURN_DEG = 140.0
MATRIX_FRAMES = 24
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


def run_shot(name: str, scene: bpy.types.Scene, frames: list[int], size: int, samples: int,
             skin: runtime.SkinModel, baselines: dict[str, PartMean | UVLookup],
             tmp: Path, blend: float = stabilize.DEFAULT_STRENGTH,
             converged: int = 0) -> ShotResult:
    """Passes, Cycles (timed), the model (timed, serving blend ``blend``) and the
    baselines on one shot; scored. ``converged`` > 0: Cycles at that many samples is
    scored too (row ``converged``)."""
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
        prev_out = skin.render(p, prev, stabilize_strength=blend)
        model_t.append(time.perf_counter() - t0)
        outs["model"][f], prev_f = prev_out, f
        for method, baseline in baselines.items():
            outs[method][f] = baseline.paint(p)
    rows = {m: score(frames, passes, refs, outs[m]) for m in METHODS}
    rows["model"]["ms"] = _mean_ms(model_t)
    if converged:
        with D.beauty_settings(scene, size, converged):
            hi = {f: D.render_beauty(scene, f, tmp)[..., :3] for f in frames}
        rows["converged"] = score(frames, passes, refs, hi)
    return ShotResult(name, frames, rows, _mean_ms(cycles_t), notes)


def _fmt(x: float, digits: int) -> str:
    return "n/a" if not math.isfinite(x) else f"{x:.{digits}f}"


def _follow_camera(scene: bpy.types.Scene, arm: bpy.types.Object, name: str,
                   frames: list[int]) -> bpy.types.Object:
    """A camera that keeps the character framed from ``CAMERAS[name]``, keyed per frame."""
    az, el, dist, lens, aim = CAMERAS[name]
    orbit = D.Orbit(azimuth0=math.radians(az), turn=0.0, elevation=math.radians(el),
                    distance=dist, lens=lens, aim_height=aim)
    return D.follow_camera(scene, arm, orbit, frames, f"Bench_{name}")


class _TurnedLights:
    """The scene's lights turned ``deg`` about the vertical through ``centre``, and back."""

    def __init__(self, scene: bpy.types.Scene, deg: float, centre: np.ndarray) -> None:
        from mathutils import Matrix

        self.saved = [(o, o.matrix_world.copy()) for o in scene.objects if o.type == "LIGHT"]
        c = Matrix.Translation(tuple(float(x) for x in centre))
        self.turn = c @ Matrix.Rotation(math.radians(deg), 4, "Z") @ c.inverted()

    def __enter__(self) -> _TurnedLights:
        for o, mw in self.saved:
            o.matrix_world = self.turn @ mw
        return self

    def __exit__(self, *exc: object) -> None:
        for o, mw in self.saved:
            o.matrix_world = mw


def _shots(arm: bpy.types.Object, tmp: Path, frames: int) -> list[tuple[str, object]]:
    """(name, a function that retargets the shot and returns its frames) per motion."""
    kind, seed = D.HELD_OUT_CLIPS[0]
    shots: list[tuple[str, object]] = [
        (f"{kind}", lambda: _generated_shot(arm, tmp, kind, seed, frames))]
    for label, rel in (("cmu_131_01", REAL_CLIP), ("cmu_05_06", NEVER_TRAINED_CLIP)):
        path = SHARED_DATA / rel
        if path.is_file():
            shots.append((label, lambda p=path: _real_shot(arm, p, frames)))
        else:
            print(f"bench skin: {path} is absent: its cells are skipped", file=sys.stderr)
    return shots


def cell_table(cells: list[ShotResult]) -> list[str]:
    """One row per cell: the model's figures, the baselines' PSNR, both timings."""
    conv = any("converged" in c.rows for c in cells)
    head = (f"{'cell':<36} {'psnr':>6} {'ssim':>6} {'flip':>6} {'warp':>6} "
            f"{'uv_psnr':>7} {'pm_psnr':>7} {'ms':>6} {'cyc_ms':>7}"
            + (f" {'cv_warp':>7} {'cv_ssim':>7}" if conv else ""))
    lines = [head, "-" * len(head)]
    for c in cells:
        r = c.rows["model"]
        line = (f"{c.name:<36} {_fmt(r['psnr'], 2):>6} {_fmt(r['ssim'], 3):>6} "
                f"{_fmt(r['flip'], 3):>6} {_fmt(r['warp_ratio'], 2):>6} "
                f"{_fmt(c.rows['uv-lookup']['psnr'], 2):>7} "
                f"{_fmt(c.rows['part-mean']['psnr'], 2):>7} {_fmt(r['ms'], 1):>6} "
                f"{_fmt(c.cycles_ms, 1):>7}")
        if conv:
            cv = c.rows.get("converged", {})
            line += (f" {_fmt(cv.get('warp_ratio', math.nan), 2):>7} "
                     f"{_fmt(cv.get('ssim', math.nan), 3):>7}")
        lines.append(line)
    return lines


def _outside_band(w: float) -> int:
    """-1 below the warp band, 1 above it, 0 inside (or undefined)."""
    if not math.isfinite(w):
        return 0
    return -1 if w < TARGETS["warp_low"] else 1 if w > TARGETS["warp_high"] else 0


def warp_misses(cells: list[ShotResult]) -> tuple[list[str], list[str]]:
    """The cells whose warp ratio is outside the band, and of those the ones where the
    converged Cycles render (when measured) is outside on the same side: there the
    band asks the painting for the reference's noise, not for detail. A cell without a
    warp ratio (no pair of frames to warp) is a miss too: the band is not shown met."""
    miss, shared = [], []
    for c in cells:
        w = c.rows["model"]["warp_ratio"]
        side = _outside_band(w)
        if math.isfinite(w) and not side:
            continue
        miss.append(c.name)
        cv = c.rows.get("converged")
        if side and cv is not None and _outside_band(cv["warp_ratio"]) == side:
            shared.append(c.name)
    return miss, shared


def summary(cells: list[ShotResult]) -> dict[str, float]:
    """Means and worst cells of the model's figures over the matrix."""
    rows = [c.rows["model"] for c in cells]
    warps = [r["warp_ratio"] for r in rows if math.isfinite(r["warp_ratio"])]
    # the worst warp ratio: the one farthest outside (or nearest the edge of) the band
    worst_warp = max(warps, key=lambda w: max(TARGETS["warp_low"] - w,
                                              w - TARGETS["warp_high"])) if warps else math.nan
    return {"psnr": float(np.mean([r["psnr"] for r in rows])),
            "min_psnr": float(min(r["psnr"] for r in rows)),
            "ssim": float(np.mean([r["ssim"] for r in rows])),
            "min_ssim": float(min(r["ssim"] for r in rows)),
            "flip": float(np.mean([r["flip"] for r in rows])), "warp_ratio": worst_warp,
            "speedup": metrics.ratio(float(np.mean([c.cycles_ms for c in cells])),
                                     float(np.mean([r["ms"] for r in rows])))}


def target_line(s: dict[str, float], cells: list[ShotResult]) -> str:
    """Which of the targets (:data:`TARGETS`) the model meets over the matrix."""
    low = [c.name for c in cells if c.rows["model"]["psnr"] < TARGETS["psnr"]
           or c.rows["model"]["ssim"] < TARGETS["ssim"]]
    warp, shared = warp_misses(cells)
    checks = [(f"every cell >= {TARGETS['psnr']:g} dB / {TARGETS['ssim']:g}", not low),
              (f"mean >= {TARGETS['mean_psnr']:g} dB / {TARGETS['mean_ssim']:g}",
               s["psnr"] >= TARGETS["mean_psnr"] and s["ssim"] >= TARGETS["mean_ssim"]),
              (f"warp_ratio in [{TARGETS['warp_low']:g}, {TARGETS['warp_high']:g}]", not warp),
              (f">= {TARGETS['speedup']:g}x faster than Cycles",
               s["speedup"] >= TARGETS["speedup"])]
    out = "targets: " + ", ".join(f"{n} {'met' if ok else 'MISSED'}" for n, ok in checks)
    if low:
        out += f"\n  cells under the quality bar ({len(low)}): {', '.join(low)}"
    if warp:
        out += f"\n  cells outside the warp band ({len(warp)}): {', '.join(warp)}"
    if shared:
        out += (f"\n  of those, the converged Cycles render is outside on the same side "
                f"({len(shared)}): {', '.join(shared)}")
    return out


def _character(character: str | None) -> bpy.types.Object:
    """The demo character in its scene, or a character file in a fresh scene lit as
    train-skin lit it (the training rig's sun where the file has no light)."""
    from ..addon.blender.skin.train import load_character
    from ..demo.character import build_demo_character, setup_demo_scene

    def demo() -> bpy.types.Object:
        arm = build_demo_character()
        setup_demo_scene(arm)
        return arm

    try:
        return load_character(character or "demo", {"demo": demo})
    except D.DatasetError as e:
        raise SkinBenchError(str(e)) from None


def main(model: str | None = None, frames: int | None = None, size: int | None = None,
         cameras: list[str] | None = None, lights: list[str] | None = None,
         character: str | None = None, blend: float | None = None,
         converged: int | None = None) -> int:
    """Run the benchmark (see the module doc); returns 0. Bad input raises
    :class:`SkinBenchError` (a ValueError: the CLI's exit 2). ``character``: a
    character file the model was trained on (default: the demo); it has no camera of
    its own, so its cells use the following cameras only. ``blend``: the serving blend
    with the previous output (``stabilize``; default restyle's), so its trade between
    flicker and lag can be measured on the matrix. ``converged``: Cycles' samples for the
    nearly noise-free render each cell also scores (none by default; it costs about
    ``converged / samples`` times the reference's render time)."""
    try:
        blend = stabilize.check_strength(blend)
    except stabilize.StabilizeError as e:
        raise SkinBenchError(f"--{e}") from None
    info = model_info(Path(model) if model else DEFAULT_MODEL)
    frames = MATRIX_FRAMES if frames is None else int(frames)
    size = info.size if size is None else int(size)
    own_camera = character in (None, "demo")
    cams = (["demo"] if own_camera else []) + list(CAMERAS) if cameras is None \
        else list(cameras)
    if "demo" in cams and not own_camera:
        raise SkinBenchError("--cameras demo: only the demo character has the demo's "
                             f"camera; choose from {', '.join(CAMERAS)}")
    rigs = ["scene", "turned"] if lights is None else list(lights)
    bad = [c for c in cams if c != "demo" and c not in CAMERAS]
    if bad:
        raise SkinBenchError(f"--cameras {','.join(bad)}: choose from demo, "
                             f"{', '.join(CAMERAS)}")
    if [r for r in rigs if r not in ("scene", "turned")]:
        raise SkinBenchError(f"--lights {','.join(rigs)}: choose from scene, turned")
    if frames < 2:
        raise SkinBenchError(f"--frames {frames}: give at least 2 (the warping error needs a "
                             "pair)")
    if size < 16 or size % info.multiple:
        raise SkinBenchError(f"--size {size}: give a multiple of {info.multiple} of at least "
                             f"16 (the model trained at {info.size})")
    converged = int(converged or 0)
    if converged and converged <= info.samples:
        raise SkinBenchError(f"--converged {converged}: give more samples than the training "
                             f"target's {info.samples} (e.g. {info.samples * 8})")
    arm = _character(character)
    scene = bpy.context.scene
    demo_camera = scene.camera
    fingerprint = D.character_fingerprint(arm)
    skin = runtime.load_model(info.folder, fingerprint)
    train, source = training_frames(info, arm, fingerprint)
    uv = UVLookup(train, UV_GRID)
    baselines: dict[str, PartMean | UVLookup] = {"part-mean": uv.part_mean, "uv-lookup": uv}
    del train
    cells: list[ShotResult] = []
    with tempfile.TemporaryDirectory(prefix="painted-skin-bench-skin-") as tmp_name:
        tmp = Path(tmp_name)
        for shot_name, retarget in _shots(arm, tmp, frames):
            todo = retarget()
            scene.frame_set(todo[0])
            centre, _ = D.body_centre(D.character_meshes(arm))
            for cam_name in cams:
                cam = demo_camera if cam_name == "demo" else _follow_camera(scene, arm,
                                                                            cam_name, todo)
                scene.camera = cam
                try:
                    for rig in rigs:
                        turn = LIGHT_TURN_DEG if rig == "turned" else 0.0
                        with _TurnedLights(scene, turn, centre):
                            cells.append(run_shot(f"{shot_name}/{cam_name}/{rig}", scene,
                                                  todo, size, info.samples, skin, baselines,
                                                  tmp, blend, converged))
                        print(f"bench skin: {cells[-1].name}: "
                              f"{cells[-1].rows['model']['psnr']:.2f} dB", file=sys.stderr,
                              flush=True)
                finally:
                    scene.camera = demo_camera
                    if cam is not demo_camera:
                        D.remove_camera(cam)
    print(f"model: {info.folder} (onnxruntime CPU; serving blend {blend:g}); Cycles at the "
          f"training quality: {size}x{size}, {info.samples} samples + denoising; "
          f"{os.cpu_count()} CPU(s)")
    if converged:
        print(f"converged reference: Cycles at {converged} samples + denoising, scored "
              "against the training-quality render as a painting is (cv_warp, cv_ssim)")
    print(f"baselines fitted on {source}; UV lookup {UV_GRID}² grid, "
          f"{uv.coverage():.0%} of the seen parts' texels hit")
    notice = runtime.passes_notice(skin.config, info.folder.name)
    if notice:  # figures of a model on passes it did not learn are not its own
        print(f"bench skin: {notice}", file=sys.stderr)
    for c in cells:
        for note in c.notes:
            print(f"bench skin: {c.name}: {note}", file=sys.stderr)
    print(f"cells: motion/camera/lights, {frames} frames each at {FPS:g} fps; masked metrics "
          "against Cycles; warp = warping error / Cycles'; uv_psnr, pm_psnr: the UV-lookup "
          "and part-mean baselines; ms: the model's ms/frame, cyc_ms: Cycles'")
    for line in cell_table(cells):
        print(line)
    s = summary(cells)
    print(target_line(s, cells))
    print(f"skin psnr: {_fmt(s['psnr'], 2)} min_psnr: {_fmt(s['min_psnr'], 2)} "
          f"ssim: {_fmt(s['ssim'], 4)} min_ssim: {_fmt(s['min_ssim'], 4)} "
          f"flip: {_fmt(s['flip'], 4)} warp_ratio: {_fmt(s['warp_ratio'], 3)} "
          f"speedup_vs_cycles: {_fmt(s['speedup'], 2)}")
    return 0
