"""``painted-skin demo``: the product's main job end to end on the embedded default.

The demo character performs a motion its skin model never saw in training (``wave``),
the fast engine renders its passes, a local backend paints every frame with the embedded
skin model over ZeroMQ, Cycles renders the same frames as the reference, and the results
land in one folder: the painted frames, a side-by-side GIF and a contact sheet (passes |
painted | Cycles), and ``metrics.json`` (masked PSNR/SSIM/FLIP and flicker against
Cycles, timings).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path

import bpy
import numpy as np

from ..addon.blender.passes.image_io import read_image, write_png
from ..addon.core.files.atomic import write_json_atomic, write_text_atomic

Bar = Callable[[str, int], Callable[[int, int, int], None] | None]
SHEET_FRAMES = 6


class DemoError(ValueError):
    """The demo cannot run as asked; the message says why and the fix."""


def _free_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{s.getsockname()[1]}"


def _digest(*parts: bytes | str | Path) -> str:
    """sha256 of ``parts`` (files by content): what a kept output was made from."""
    h = hashlib.sha256()
    for part in parts:
        data = part.read_bytes() if isinstance(part, Path) else (
            part.encode() if isinstance(part, str) else part)
        h.update(len(data).to_bytes(8, "little") + data)
    return h.hexdigest()


def keep_if_made_from(folder: Path, key: str) -> None:
    """Empty the demo's own ``folder`` unless its outputs were made from ``key``.

    A rerun resumes (frames kept), but frames painted from another shot or another
    model — the code changed the motion, a new model was committed — would be scored
    against references they do not match."""
    stamp = folder / ".made-from"
    if stamp.is_file() and stamp.read_text() == key:
        return
    if folder.is_dir() and any(folder.iterdir()):
        # only what a demo made: its stamp, or (from before stamps) the demo's own outputs
        ours = stamp.is_file() or all((folder.parent / n).is_file()
                                      for n in ("metrics.json", "shot.blend"))
        if not ours:
            raise DemoError(f"{folder} holds files the demo did not write: give the demo "
                            "an --out folder of its own")
        shutil.rmtree(folder)
    folder.mkdir(parents=True, exist_ok=True)
    write_text_atomic(stamp, key)


def keep_what_matches(out: Path, frames: list[int], size: int, samples: int,
                      model: Path) -> None:
    """A shot folder's paintings and Cycles frames are kept only when made from these
    passes (their depth files), this size and samples, and (paintings) this model."""
    depth = [out / "passes" / "depth" / f"{f:04d}.exr" for f in frames]
    key = _digest(f"{size} {samples}", *(p for p in depth if p.is_file()))
    keep_if_made_from(out / "restyle", _digest(key, model / "config.json",
                                               *sorted(model.glob("*.onnx"))))
    keep_if_made_from(out / "cycles", key)


def model_folder(name: str) -> tuple[Path, dict]:
    """The registry's folder for ``name`` and its training report."""
    from ..backend.skin import registry

    folder = registry.resolve(name)
    if not (folder / "config.json").is_file():
        raise DemoError(f"skin model {name!r} has no model at {folder}: train it with "
                        f"'painted-skin train-skin --character demo --out {folder}'")
    report_path = folder / "report.json"
    report = json.loads(report_path.read_text()) if report_path.is_file() else {}
    return folder, report


def _tile(img: np.ndarray, size: int) -> np.ndarray:
    """(size, size, 3) uint8, nearest-neighbour scaled (a tiny frame stays crisp)."""
    img = np.asarray(img)
    if img.ndim == 2:
        img = np.repeat(img[..., None], 3, axis=2)
    img = img[..., :3].astype(np.uint8)
    ys = (np.arange(size) * img.shape[0] // size)
    xs = (np.arange(size) * img.shape[1] // size)
    return img[ys][:, xs]


def _labelled(row: np.ndarray, text: str) -> np.ndarray:
    from PIL import Image, ImageDraw

    im = Image.fromarray(row)
    ImageDraw.Draw(im).text((4, 2), text, fill=(255, 255, 255))
    return np.asarray(im)


def _crop_to_character(passes: Path, frames: list[int], tile: int
                       ) -> Callable[[np.ndarray], np.ndarray]:
    """A function cropping an image to the character's box over the shot (plus a
    margin) and scaling it to ``tile``: the sheet shows the character rather than the
    empty frame around it."""
    box = np.zeros_like(np.asarray(read_image(passes / "mask" / f"{frames[0]:04d}.png")),
                        bool)
    for f in frames:
        box |= np.asarray(read_image(passes / "mask" / f"{f:04d}.png")) > 0
    ys, xs = np.nonzero(box) if box.any() else (np.array([0, box.shape[0] - 1]),
                                                 np.array([0, box.shape[1] - 1]))
    side = int(max(ys.max() - ys.min(), xs.max() - xs.min()) * 1.1) + 4
    cy, cx = (ys.min() + ys.max()) // 2, (xs.min() + xs.max()) // 2
    y0 = int(np.clip(cy - side // 2, 0, max(box.shape[0] - side, 0)))
    x0 = int(np.clip(cx - side // 2, 0, max(box.shape[1] - side, 0)))

    def crop(img: np.ndarray) -> np.ndarray:
        return _tile(np.asarray(img)[y0:y0 + side, x0:x0 + side], tile)

    return crop


def _pick(frames: list[int]) -> list[int]:
    return [frames[round(i * (len(frames) - 1) / (SHEET_FRAMES - 1))]
            for i in range(min(SHEET_FRAMES, len(frames)))]


#: Another shot's rows on the sheet: ((frames, passes, painted, reference), label of the
#: painted row, label of the reference row).
ExtraRows = tuple[tuple[list[int], Path, Path, Path], str, str]


def write_contact_sheet(out: Path, frames: list[int], passes: Path, painted: Path,
                        reference: Path, tile: int = 256,
                        extra: list[ExtraRows] | tuple = ()) -> tuple[Path, Path]:
    """``contact_sheet.png`` (rows: passes, painted, Cycles; a few frames across; then
    painted and Cycles of each ``extra`` shot) and ``side_by_side.gif`` (every frame of
    the main shot: passes | painted | Cycles)."""
    from PIL import Image

    crop = _crop_to_character(passes, frames, tile)

    def row_of(f: int) -> list[np.ndarray]:
        return [crop(read_image(passes / "normal_color" / f"{f:04d}.png")),
                crop(read_image(painted / f"{f:04d}.png")),
                crop(read_image(reference / f"{f:04d}.png"))]

    columns = [row_of(f) for f in _pick(frames)]
    rows = [np.concatenate([c[r] for c in columns], axis=1) for r in range(3)]
    rows = [_labelled(r, t) for r, t in zip(rows, ("passes (normals)", "painted by the skin "
                                                   "model", "Cycles"), strict=True)]
    width = rows[0].shape[1]
    for (x_frames, x_passes, x_painted, x_ref), painted_label, ref_label in extra:
        x_crop = _crop_to_character(x_passes, x_frames, tile)
        for folder, label in ((x_painted, painted_label), (x_ref, ref_label)):
            row = np.concatenate([x_crop(read_image(folder / f"{f:04d}.png"))
                                  for f in _pick(x_frames)], axis=1)
            row = np.pad(row, ((0, 0), (0, max(width - row.shape[1], 0)), (0, 0)))
            rows.append(_labelled(row[:, :width], label))
    sheet = write_png(out / "contact_sheet.png", np.concatenate(rows, axis=0))
    gif = out / "side_by_side.gif"
    tmp = gif.with_name(f".{gif.name}.tmp")
    images = [Image.fromarray(np.concatenate(row_of(f), axis=1)) for f in frames]
    images[0].save(tmp, format="GIF", save_all=True, append_images=images[1:], duration=42,
                   loop=0)
    tmp.replace(gif)
    return sheet, gif


SCORE_KEYS = ("psnr", "ssim", "flip", "warp_frames", "warp_reference", "warp_ratio",
              "psnr_slope_db_per_frame")


def _cycles(scene: bpy.types.Scene, shot: list[int], size: int, samples: int, folder: Path,
            progress: Callable[[int, int, int], None] | None) -> float | None:
    """Cycles at the training target into ``folder/NNNN.png`` (frames there are kept);
    returns ms per frame rendered now (None when every frame was kept)."""
    from ..addon.blender.skin.dataset import beauty_settings, render_beauty

    rendered, seconds = 0, 0.0
    with beauty_settings(scene, size, samples):
        for i, f in enumerate(shot):
            ref = folder / f"{f:04d}.png"
            if not ref.is_file():
                t0 = time.monotonic()
                rgba = render_beauty(scene, f, folder)
                seconds += time.monotonic() - t0
                rendered += 1
                write_png(ref, rgba[..., :3])
            if progress:
                progress(i + 1, len(shot), f)
    return seconds * 1000.0 / rendered if rendered else None


def _behind_shot(out: Path, scene: bpy.types.Scene, size: int, samples: int, folder: Path,
                 model: str, url: str, bar: Bar | None) -> tuple[dict, ExtraRows] | None:
    """The real dance from behind (:mod:`.behind`) painted by the running backend and
    scored against Cycles: (its metrics, its contact-sheet rows); None (and a note)
    without ../shared/data."""
    from ..addon.blender.passes.render import PassOptions, make_passes
    from ..addon.blender.restyle.loop import RestyleRequest, restyle_shot
    from ..backend.evaluate.score import score
    from .behind import build_behind_shot, shared_clip

    clip = shared_clip()
    if clip is None:
        print("demo: note: ../shared/data is absent: no real-clip shot from behind",
              file=sys.stderr)
        return None
    arm = next(o for o in scene.objects if o.type == "ARMATURE")
    shot = build_behind_shot(arm, clip, scene.render.fps / scene.render.fps_base)
    frames = shot.frames
    make_passes(scene, PassOptions(frames=range(frames[0], frames[-1] + 1), width=size,
                                   height=size), out / "passes",
                progress=bar("behind passes", len(frames)) if bar else None)
    keep_what_matches(out, frames, size, samples, folder)
    request = RestyleRequest.make(out / "restyle", url=url, frames=frames, size=size,
                                  pipeline="skin", options={"model": model})
    restyle_shot(scene, request, progress=bar("behind paint", len(frames)) if bar else None)
    _cycles(scene, frames, size, samples, out / "cycles",
            bar("behind cycles", len(frames)) if bar else None)
    painted = out / "restyle" / "restyled"
    summary = score(out / "cycles", painted, out / "passes", json_path=out / "score.json")
    metrics = {"clip": str(clip), "camera": "behind", "frames": len(frames),
               "score": {k: summary[k] for k in SCORE_KEYS}}
    rows = ((frames, out / "passes", painted, out / "cycles"),
            "real dance (CMU 05_06) from behind: painted", "Cycles")
    return metrics, rows


def run_demo(out: Path, frames: int = 48, fps: float = 24.0, kind: str = "wave",
             model: str = "demo", bar: Bar | None = None) -> dict:
    """Everything above into ``out``; returns what went into ``metrics.json``."""
    from ..addon.blender.passes.render import PassOptions, make_passes
    from ..addon.blender.restyle.loop import (
        RestyleRequest,
        restyle_shot,
        start_local_backend,
        stop_local_backend,
    )
    from ..addon.blender.skin.dataset import TRAIN_CLIPS
    from ..backend.evaluate.score import score
    from .shot import build_demo_shot

    folder, report = model_folder(model)
    dataset = report.get("dataset", {})
    size, samples = int(dataset.get("size", 128)), int(dataset.get("samples", 16))
    if kind in {k for k, _ in TRAIN_CLIPS}:
        print(f"demo: note: {kind!r} is a training motion; the held-out one is 'wave'",
              file=sys.stderr)
    timings: dict[str, float | None] = {}
    t0 = time.monotonic()
    retarget = build_demo_shot(out, frames=frames, fps=fps, kind=kind)
    scene = bpy.context.scene
    shot = list(range(scene.frame_start, scene.frame_end + 1))
    timings["retarget_s"] = time.monotonic() - t0

    t0 = time.monotonic()
    make_passes(scene, PassOptions(frames=range(shot[0], shot[-1] + 1), width=size,
                                   height=size), out / "passes",
                progress=bar("passes", len(shot)) if bar else None)
    timings["passes_s"] = time.monotonic() - t0

    keep_what_matches(out, shot, size, samples, folder)
    url = _free_url()
    t0 = time.monotonic()
    start_local_backend(sys.executable, url, timeout_s=120)
    try:
        timings["backend_start_s"] = time.monotonic() - t0
        t0 = time.monotonic()
        request = RestyleRequest.make(out / "restyle", url=url, frames=shot, size=size,
                                      pipeline="skin", options={"model": model})
        restyled = restyle_shot(scene, request,
                                progress=bar("paint", len(shot)) if bar else None)
        written = int(restyled["written"])  # frames painted now (a rerun keeps the rest)
        timings["paint_ms_per_frame"] = ((time.monotonic() - t0) * 1000 / written
                                         if written else None)

        timings["cycles_ms_per_frame"] = _cycles(scene, shot, size, samples, out / "cycles",
                                                 bar("cycles", len(shot)) if bar else None)
        # Last: it changes the open scene (another motion, another camera).
        behind = _behind_shot(out / "behind", scene, size, samples, folder, model, url, bar)
    finally:
        stop_local_backend()

    painted = out / "restyle" / "restyled"
    summary = score(out / "cycles", painted, out / "passes", json_path=out / "score.json")
    extra = [] if behind is None else [behind[1]]
    sheet, gif = write_contact_sheet(out, shot, out / "passes", painted, out / "cycles",
                                     extra=extra)
    metrics = {
        "motion": kind, "frames": len(shot), "size": size, "model": str(folder),
        "held_out_motion": kind not in {k for k, _ in TRAIN_CLIPS},
        "score": {k: summary[k] for k in SCORE_KEYS},
        "model_training": report.get("held_out"),
        "behind": None if behind is None else behind[0],
        "timings": {k: None if v is None else round(v, 2) for k, v in timings.items()},
        "restyle": {k: restyled[k] for k in ("frames", "written", "skipped")},
        "retarget": {"frames": retarget.frames},
        "outputs": {"painted": str(painted), "cycles": str(out / "cycles"),
                    "contact_sheet": str(sheet), "side_by_side": str(gif),
                    "score": str(out / "score.json")},
    }
    write_json_atomic(out / "metrics.json", _finite(metrics))
    return metrics


def _finite(value):
    """NaN/inf as null: metrics.json is strict JSON."""
    if isinstance(value, float):
        return value if np.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value
