"""The commands of ``painted-skin`` that work on shots in Blender: ``retarget``,
``demo``, ``train-skin``, ``passes`` and ``restyle``, with the argument checks they
share. :mod:`.cli` builds the parser and runs them; importing this module imports no
bpy (each command imports what it runs), so ``--help`` stays fast.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .addon.core.files.atomic import check_writable, write_json_atomic
from .addon.core.files.paths import check_distinct, removed_if_left_empty
from .wire.options import RefWeightsError
from .wire.options import ref_weights as check_ref_weights

EXIT_BAD_INPUT = 2


class BadInput(Exception):
    """Raised for user errors; printed without a traceback, exit 2."""


def _retarget_options(args: argparse.Namespace):
    from .addon.core.retarget.solve import RetargetOptions

    return RetargetOptions(in_place=args.in_place, foot_lock=not args.no_foot_lock,
                           ground=args.ground, keep_posture=args.keep_posture)


def cmd_retarget(args: argparse.Namespace) -> int:
    from .addon.blender import session
    from .addon.blender.blend_files import save_blend_atomic

    source = Path(args.source)
    if source.is_dir():
        from .addon.blender.retarget.importers import CLIP_TYPES

        clips = sorted(p for p in source.iterdir() if p.suffix.lower() in CLIP_TYPES)
        if not clips:
            raise BadInput(f"folder {str(source)!r} has no clips ({', '.join(sorted(CLIP_TYPES))})")
    elif source.exists():
        clips = [source]
    else:
        raise BadInput(f"--source {str(source)!r} does not exist: give a clip file or a folder")
    inputs = {"--source": source, "--target": args.target,
              **{f"--source clip {c.name}": c for c in clips if c != source}}
    for opt, value in (("--map", args.map), ("--target-map", args.target_map)):
        if Path(value).is_file():
            inputs[opt] = value
    if args.fps is not None and not (math.isfinite(args.fps) and 1 <= args.fps <= 1000):
        raise BadInput(f"--fps {args.fps:g} is not a frame rate: give one in 1..1000, e.g. 24")
    check_distinct({"--out": args.out, "--report": args.report}, inputs)
    if args.out:  # outputs checked before the work, not after it
        if Path(args.out).suffix.lower() != ".blend":
            raise BadInput(f"--out {args.out!r} must name a .blend file, e.g. shot.blend")
        check_writable(args.out, "--out file", folder=False)
    if args.report:
        check_writable(args.report, "--report file", folder=False)
    failures: list[tuple[Path, str]] | None = [] if args.keep_going else None
    result = session.retarget_files(clips, Path(args.target), args.map, args.target_map,
                                    _retarget_options(args), progress=_progress_bar(len(clips)),
                                    clip_action=args.clip_action, failures=failures,
                                    fps=args.fps)
    for clip, why in failures or ():
        print(f"painted-skin: error: {clip.name}: {why}", file=sys.stderr)
    if not result:
        raise BadInput(f"none of the {len(clips)} clip(s) could be retargeted")
    out = Path(args.out) if args.out else None
    if out:
        save_blend_atomic(out)
    reports = [r.to_dict() for r in result]
    if args.report:
        write_json_atomic(Path(args.report), reports[0] if len(reports) == 1 else reports)
    for r in reports:
        for w in r["warnings"]:
            print(f"warning: {w}", file=sys.stderr)
        skate = r["foot_skate_cm_before"], r["foot_skate_cm_after"]
        print(f"{r['action']}: {r['frames']} frames @ {r['fps']:g} fps, "
              f"{len(r['pairs'])} joints mapped, foot skate {_fmt(skate[0])} -> {_fmt(skate[1])} "
              f"cm/frame")
    if out:
        print(f"Saved: '{out}'")
    if failures:
        print(f"painted-skin: {len(failures)} of {len(clips)} clips failed (above); the "
              f"others were retargeted", file=sys.stderr)
        return EXIT_BAD_INPUT
    return 0


def _fmt(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.2f}"


def _progress_bar(total: int):
    """A tqdm bar over clips when tqdm is there and stderr is a terminal."""
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    bar = tqdm(total=total, unit="clip", disable=not sys.stderr.isatty())

    def update(done: int, name: str) -> None:
        bar.set_description(name)
        bar.n = done
        bar.refresh()

    return update


def cmd_demo(args: argparse.Namespace) -> int:
    import bpy

    from .addon.blender.passes.render import PassOptions, make_passes
    from .addon.core.passes.raster import tune_allocator
    from .demo.shot import build_demo_shot

    out = Path(args.out)
    tune_allocator()
    if not args.no_paint:
        if not (_have(".backend.skin.registry") and _have(".backend.evaluate.score")):
            raise BadInput("the demo paints with the skin model, whose backend code this "
                           "install lacks (the Blender extension ships none): run it from a "
                           "checkout or pip install painted-skin, or pass --no-paint")
        from .demo import run_demo

        m = run_demo(out, frames=args.frames, fps=args.fps, kind=args.kind, model=args.model,
                     bar=lambda _what, total: _frame_bar(total))
        sc = m["score"]
        def per_frame(ms: float | None) -> str:
            return "frames kept from the last run" if ms is None else f"{ms:.0f} ms/frame"

        print(f"demo: {m['frames']} frames of {m['motion']!r} (held out from training: "
              f"{m['held_out_motion']}) painted by the skin model at {m['size']}²: "
              f"{per_frame(m['timings']['paint_ms_per_frame'])} (Cycles: "
              f"{per_frame(m['timings']['cycles_ms_per_frame'])})")
        print(f"demo: against Cycles: masked PSNR {sc['psnr']:.2f} dB, SSIM {sc['ssim']:.3f}, "
              f"FLIP {sc['flip']:.3f}, warp_ratio {sc['warp_ratio']:.2f}")
        if m.get("behind"):
            bs = m["behind"]["score"]
            print(f"demo: a real dance (CMU 05_06, never trained on) from behind, "
                  f"{m['behind']['frames']} frames: masked PSNR {bs['psnr']:.2f} dB, "
                  f"SSIM {bs['ssim']:.3f}, FLIP {bs['flip']:.3f}, "
                  f"warp_ratio {bs['warp_ratio']:.2f}")
        for name, path in m["outputs"].items():
            print(f"  {name}: {path}")
        print(f"  metrics: {out / 'metrics.json'}")
        return 0
    report = build_demo_shot(out, frames=args.frames, fps=args.fps, kind=args.kind)
    write_json_atomic(out / "report.json", report.to_dict())
    print(f"demo: {report.frames} frames of {args.kind!r} retargeted onto the demo character; "
          f"foot skate {_fmt(report.foot_skate_cm_before)} -> "
          f"{_fmt(report.foot_skate_cm_after)} cm/frame")
    print(f"Saved: '{out / 'shot.blend'}'")
    print(f"Report: '{out / 'report.json'}'")
    scene = bpy.context.scene
    frames = range(scene.frame_start, scene.frame_end + 1)
    summary = make_passes(scene, PassOptions(frames=frames, width=512, height=512),
                          out / "passes", progress=_frame_bar(len(frames)))
    print(f"Passes: {summary['done']} frames in '{out / 'passes'}'")
    return 0


def cmd_train_skin(args: argparse.Namespace) -> int:
    from .addon.blender.skin.train import DEFAULT_CACHE, TrainRequest, train_skin

    check_distinct({"--out": args.out, "--cache": args.cache or DEFAULT_CACHE},
                   {"--character": None if args.character == "demo" else args.character,
                    "--python": args.python})

    def bar(what: str, total: int):
        if not sys.stderr.isatty():  # the panel's child, a farm's log: a line per frame
            def line(done: int, _total: int) -> None:
                print(f"train-skin: rendering the {what} set: {done}/{total} frames",
                      flush=True)
            return line
        progress = _frame_bar(total)
        return None if progress is None else lambda done, _t: progress(done, total, done)

    req = TrainRequest(character=args.character, out=Path(args.out), minutes=args.minutes,
                       size=args.size, device=args.device, resume=args.resume,
                       python=args.python, cache=Path(args.cache) if args.cache
                       else DEFAULT_CACHE, frames_per_clip=args.frames_per_clip,
                       samples=args.samples, steps=args.steps, temporal=args.temporal,
                       lights=args.lights, motions=tuple(args.motion),
                       init_from=args.init_from, detail_size=args.detail_size)
    return train_skin(req, progress=bar, characters={"demo": _demo_character})


def cmd_learn_look(args: argparse.Namespace) -> int:
    from .addon.blender.skin.look import LookRequest, learn_look, suggest_frames

    if args.suggest is not None:
        if args.suggest < 1:
            raise BadInput(f"--suggest {args.suggest}: give how many keyframes, 1 or more")
        _check_shot(args)
        scene, frames = _open_shot(args)
        keys = suggest_frames(scene, list(frames), args.suggest)
        print("suggested keyframes: " + ", ".join(map(str, keys)))
        return 0
    if not args.keys or not args.out:
        raise BadInput("learn-look needs --keys DIR and --out DIR (or --suggest K to choose "
                       "the frames to paint)")
    base = _model_folder(args.base, "--base")
    check_distinct({"--out": args.out}, {"--shot": args.shot, "--keys": args.keys,
                                         "--base": None if args.look else base})
    req = LookRequest(shot=Path(args.shot), keys=Path(args.keys), base=base,
                      out=Path(args.out), camera=args.camera, look=args.look,
                      minutes=args.minutes, steps=args.steps, device=args.device,
                      resume=args.resume, python=args.python)
    return learn_look(req)


def _model_folder(spec: str, flag: str) -> Path:
    """A skin model given as a folder, or as a name of the skin-model registry
    (``$PAINTED_SKIN_SKIN_MODELS``, else the backend's own file beside this package;
    ``demo``: the embedded model)."""
    import os

    from .addon.blender.skin.train import EMBEDDED_MODEL
    from .addon.core.backend.skin_registry import REGISTRY_ENV, RegistryError, read_registry

    if (Path(spec) / "config.json").is_file():
        return Path(spec)
    path = Path(os.environ.get(REGISTRY_ENV)
                or Path(__file__).resolve().parent / "backend" / "skin" / "registry.toml")
    try:
        names = read_registry(path) if path.is_file() else {}
    except RegistryError as e:
        raise BadInput(f"{flag} {spec}: {e}") from None
    if spec in names:
        return names[spec]
    if spec == "demo":
        return EMBEDDED_MODEL
    raise BadInput(f"{flag} {spec}: not a model folder (no config.json) nor a model of the "
                   f"registry {path} (it has: {', '.join(sorted(names)) or 'nothing'})")


def _demo_character():
    """``--character demo``: the procedural demo character in its lit scene."""
    from .demo.character import build_demo_character, setup_demo_scene

    arm = build_demo_character()
    setup_demo_scene(arm)
    return arm


MIN_SIZE, MAX_SIZE = 16, 8192  # as the passes allow (addon/blender/passes/output.py)


def _shown(text: str) -> str:
    return repr(text if len(text) <= 40 else text[:37] + "...")


def _parse_size(text: str) -> tuple[int, int]:
    """``--size WIDTHxHEIGHT`` (or one number for a square), each 16..8192."""
    w, _, h = text.lower().partition("x")
    w, h = w.strip(), (h or w).strip()
    if not (w.isascii() and w.isdigit() and h.isascii() and h.isdigit()):
        raise BadInput(f"--size {_shown(text)}: use WIDTHxHEIGHT, e.g. 512x512")
    if len(w) > 5 or len(h) > 5 or not all(MIN_SIZE <= int(v) <= MAX_SIZE for v in (w, h)):
        raise BadInput(f"--size {_shown(text)}: width and height must lie within "
                       f"{MIN_SIZE}..{MAX_SIZE} pixels")
    return int(w), int(h)


def _parse_passes(text: str) -> tuple[str, ...]:
    passes = tuple(p.strip() for p in text.split(",") if p.strip())
    if not passes:
        raise BadInput(f"--passes {_shown(text)} names no pass: give a comma list, e.g. "
                       "depth,normal,skeleton")
    return passes


def cmd_passes(args: argparse.Namespace) -> int:

    from .addon.blender.passes.render import PassOptions, make_passes, pass_file, split_passes_out
    from .addon.core.files.frame_patterns import blend_relative
    from .addon.core.passes.raster import tune_allocator

    tune_allocator()  # a render process of our own: keep freed memory (see raster.py)

    _check_shot(args)
    width, height = _parse_size(args.size)
    passes = _parse_passes(args.passes)
    # A farm's output pattern (//render/passes/shot_####) or a folder; "//": the shot's.
    folder, names = split_passes_out(blend_relative(args.out, args.shot))
    check_distinct({"--out": folder}, {"shot": args.shot})
    with removed_if_left_empty(folder):  # a failed run leaves no empty folder behind
        check_writable(folder, "--out folder")
        scene, frames = _open_shot(args)
        opts = PassOptions(frames=frames, width=width, height=height, engine=args.engine,
                           passes=passes,
                           openpose_normalized=args.openpose_normalized,
                           beauty_samples=args.beauty_samples,
                           beauty_denoise=not args.no_beauty_denoise)
        bar = _frame_bar(len(frames))
        out = Path(folder)
        shown = next((sub for p, sub in (("normal", "normal_color"), ("depth", "depth16"),
                                         ("mask", "mask"), ("skeleton", "skeleton"),
                                         ("parts", "parts_color")) if p in passes), None)

        progress = _saved_lines(bar, lambda f: pass_file(out, shown, "png", f, names)
                                if shown else None)
        summary = make_passes(scene, opts, out, progress=progress, names=names)
    for w in summary["warnings"]:
        print(f"warning: {w}", file=sys.stderr)
    print(f"passes: {summary['done']}/{summary['frames']} frames done ({summary['written']} "
          f"written now) in {summary['out']} "
          f"(near {summary['near']:.3f} m, far {summary['far']:.3f} m)")
    return 0


def _check_shot(args: argparse.Namespace) -> None:
    """``shot`` must be a .blend file (checked before any other work)."""
    shot = Path(args.shot)
    if not shot.is_file() or shot.suffix.lower() != ".blend":
        verb = {"passes": "render"}.get(args.command, args.command)
        raise BadInput(f"{str(shot)!r} is not a .blend file: give the shot to {verb}")


def _open_shot(args: argparse.Namespace):
    """Open ``args.shot`` with ``--camera``; the scene and ``--frames`` (see
    :func:`~.addon.blender.blend_files.open_shot_frames`)."""
    from .addon.blender.blend_files import open_shot_frames

    # the farm entry: Blender opened the shot itself (``blender -b shot.blend -P ...``)
    return open_shot_frames(args.shot, args.frames, args.camera,
                            opened=getattr(args, "shot_open", False))


def _parse_options(text: str | None) -> dict:
    """``--options``: a JSON object, or a .json / .toml file holding one."""
    import json

    if not text:
        return {}
    path = Path(text)
    try:
        if path.suffix.lower() in (".json", ".toml") and path.is_file():
            if path.suffix.lower() == ".toml":
                import tomllib

                data = tomllib.loads(path.read_text())
            else:
                data = json.loads(path.read_text())
        else:
            data = json.loads(text)
    except (OSError, ValueError, RecursionError) as e:
        why = "nested too deeply" if isinstance(e, RecursionError) else str(e)[:120]
        raise BadInput(f"--options {_shown(text)}: {why} (give a JSON object, e.g. "
                       "'{\"steps\": 4}', or a .json/.toml file)") from None
    if not isinstance(data, dict):
        raise BadInput(f"--options {_shown(text)} is not a JSON object / TOML table")
    return data


def parse_look(text: str) -> str | dict[str, float]:
    """``--look ill`` -> "ill"; ``--look young=0.3,old=0.7`` -> {"young": 0.3, "old": 0.7}."""
    if "=" not in text:
        return text.strip()
    mix = {}
    for part in text.split(","):
        name, _, weight = part.partition("=")
        try:
            mix[name.strip()] = float(weight)
        except ValueError:
            raise BadInput(f"--look {_shown(text)}: write a look's name, or names and "
                           "weights such as young=0.3,old=0.7") from None
    return mix


def cmd_restyle(args: argparse.Namespace) -> int:

    from .addon.blender.client.backend_client import BackendError, BackendUnavailable, check_url
    from .addon.blender.passes.image_io import read_image
    from .addon.blender.restyle.loop import (
        RequestError,
        RestyleRequest,
        restyle_shot,
        result_path,
    )
    from .addon.blender.restyle.output import frame_names

    check_url(args.url, args.keys)  # before anything is written into --out
    _check_shot(args)
    names = _restyle_names(args)  # may move --out to the folder of a render-output path
    if args.size is not None:
        _parse_size(args.size)  # checked before the shot opens
    options = _parse_options(args.options)
    if args.look:
        if args.pipeline not in (None, "skin"):
            raise BadInput(f"--look is a skin model's: it paints with the skin pipeline, not "
                           f"--pipeline {args.pipeline}")
        options["look"] = parse_look(args.look)
    models = _skin_model_folder(args)
    if models:
        if args.pipeline not in (None, "skin"):
            raise BadInput(f"--skin-model paints with the skin pipeline, not --pipeline "
                           f"{args.pipeline}: leave --pipeline out or give skin")
        args.pipeline, options["model"] = "skin", SKIN_MODEL_NAME
    refs = []
    for ref in args.ref or ():
        try:
            img = read_image(ref)
        except OSError as e:
            raise BadInput(f"--ref {ref!r}: {e}") from None
        refs.append(img[..., :3] if img.ndim == 3 else img[..., None].repeat(3, -1))
    try:
        ref_weights = cli_ref_weights(args.ref_weight, len(refs))
    except RefWeightsError as e:
        raise BadInput(str(e)) from None
    options_file = args.options and Path(args.options).suffix.lower() in (".json", ".toml")
    inputs = {"shot": args.shot, "--options": args.options if options_file else None,
              "--keys": args.keys, "--skin-model": args.skin_model,
              **{f"--ref {r}": r for r in args.ref or ()}}
    check_distinct({"--out": args.out}, inputs)
    with removed_if_left_empty(args.out):  # a failed start leaves no empty folder behind
        check_writable(args.out, "--out folder")
        scene, frames = _open_shot(args)
        # One request, checked once, before a backend is reached; its chain starts at the
        # shot's first frame, so farm chunks paint what one run would.
        try:
            request = RestyleRequest.make(
                args.out, frames=frames, url=args.url, keys=args.keys, timeout_s=args.timeout,
                chain_start=scene.frame_start,
                **_restyle_settings(args, scene, options, refs, ref_weights))
        except RequestError as e:
            raise BadInput(str(e)) from None
    if request.pipeline == "skin":
        _note_lighting(scene)
    bar = _frame_bar(len(frames))
    out = Path(args.out)

    progress = _saved_lines(bar, lambda f: result_path(out, f))

    try:
        with _stoppable_run(args.start_backend, args.url, models) as stop:
            with frame_names(names):
                summary = restyle_shot(scene, request, progress=progress,
                                       cancelled=lambda: stop["asked"])
    except BackendUnavailable as e:
        print(f"painted-skin: error: {e} (start one: painted-skin serve --bind {args.url}; "
              "or pass --start-backend PYTHON)", file=sys.stderr)
        return 1
    except BackendError as e:
        print(f"painted-skin: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT if e.code == "bad_message" else 1
    done = summary["skipped"] + summary["written"]
    print(f"restyle: {done}/{summary['frames']} frames done ({summary['written']} written "
          f"now, {summary['dropped']} dropped) in {summary['out']}")
    if summary.get("notice"):
        print(f"restyle: note: {summary['notice']}", file=sys.stderr)
    return 130 if stop["asked"] else 0


def cmd_render(args: argparse.Namespace) -> int:
    """``render``: the shot's frames through Blender's render pipeline and the Painted
    Skin engine (see :mod:`.addon.blender.engine.headless`)."""

    from .addon.blender.client.backend_client import BackendError, BackendUnavailable, check_url
    from .addon.blender.engine import headless
    from .addon.blender.engine.frame_painter import NoBackend
    from .addon.core.files.frame_patterns import blend_relative, split_output_path

    if args.url is not None:
        check_url(args.url, args.keys)
    _check_shot(args)
    size = _parse_size(args.size) if args.size is not None else None
    models = _skin_model_folder(args)
    if models and args.model is not None:
        raise BadInput("give --skin-model DIR or --model NAME, not both")
    args.out = blend_relative(args.out, args.shot)
    folder, _ = split_output_path(args.out, "", "--out")  # a bad # run is one line here
    check_distinct({"--out": folder}, {"shot": args.shot, "--keys": args.keys,
                                       "--skin-model": args.skin_model})
    try:
        headless.ensure_registered()
    except headless.RenderFailed as e:
        raise BadInput(str(e)) from None
    with removed_if_left_empty(folder):
        check_writable(folder, "--out folder")
        scene, frames = _open_shot(args)
        _engine_settings(scene, args, size)
        if models:
            scene.painted_skin_engine.model = SKIN_MODEL_NAME
    _note_lighting(scene)
    replaced = headless.use_standard_view(scene)  # for this run; the shot is not saved
    if replaced:
        print(f"render: View Transform {replaced} -> Standard for this run (the painting "
              "is display-ready; Render Properties > Painted Skin > Use Standard View keeps "
              "F12 the same)")
    bar = _frame_bar(len(frames))

    def progress(done: int, total: int, frame: int, path: Path | None) -> None:
        if bar:
            bar(done, total, frame)
        if path is not None:
            print(f"Saved: '{path}'", flush=True)

    try:
        with _stoppable_run(args.start_backend, scene.painted_skin_engine.url,
                            models) as stop:
            summary = headless.render_frames(scene, list(frames), args.out,
                                             progress=progress,
                                             cancelled=lambda: stop["asked"])
    except BackendError as e:  # the backend --start-backend starts did not come up
        print(f"painted-skin: error: {e}", file=sys.stderr)
        return 1
    except headless.RenderFailed as e:
        cause = e.cause
        if isinstance(cause, (BackendUnavailable, NoBackend)):
            url = scene.painted_skin_engine.url
            why = f"no backend answers at {url}" if isinstance(cause, NoBackend) else str(e)
            print(f"painted-skin: error: {why} (start one: painted-skin serve --bind {url}; "
                  "or pass --start-backend PYTHON)", file=sys.stderr)
            return 1
        if isinstance(cause, BackendError) and cause.code != "bad_message":
            print(f"painted-skin: error: {e}", file=sys.stderr)
            return 1
        raise BadInput(str(e)) from None
    done = summary["skipped"] + summary["written"]
    print(f"render: {done}/{summary['frames']} frames done ({summary['written']} written "
          f"now) in {summary['folder']}")
    return 130 if stop["asked"] else 0


def _note_lighting(scene) -> None:
    from .addon.blender.restyle.loop import lighting_note

    note = lighting_note(scene)
    if note:
        print(f"note: {note}", flush=True)


#: The registry name a ``--skin-model DIR`` is served under by the backend the command
#: starts (the panel's name for a picked model folder).
SKIN_MODEL_NAME = "folder"


def _skin_model_folder(args: argparse.Namespace) -> dict[str, str]:
    """``--skin-model DIR``: the models the started backend serves besides its registry
    (empty without the option). A backend the command does not start reads its own
    registry only: a client never makes a backend read a path of its choosing."""
    folder = getattr(args, "skin_model", None)
    if folder is None:
        return {}
    if not (Path(folder) / "config.json").is_file():
        raise BadInput(f"--skin-model {folder!r} holds no config.json: give a folder that "
                       "train-skin wrote")
    if not args.start_backend:
        raise BadInput("--skin-model needs --start-backend PYTHON (the backend started for "
                       "the run serves the folder); a backend running elsewhere serves the "
                       "names of its registry: --options '{\"model\": NAME}'")
    return {SKIN_MODEL_NAME: str(Path(folder).resolve())}


@contextmanager
def _stoppable_run(start_backend: str | None, url: str,
                   models: dict[str, str] | None = None) -> Iterator[dict[str, bool]]:
    """A run that Ctrl-C (or a farm's stop) ends cleanly: ``stop["asked"]`` is set, and
    the frames written so far are kept; with ``start_backend`` (a Python) a local backend
    serves ``url`` (and ``models`` beside its registry) for the run, stopped after it."""
    import signal

    from .addon.blender.client.local_backend import start_local_backend, stop_local_backend

    stop = {"asked": False}

    def on_int(*_: object) -> None:
        stop["asked"] = True

    old = signal.signal(signal.SIGINT, on_int)
    try:
        if start_backend:
            # No --skin-model: the backend serves the scene's models too, as the panel's.
            start_local_backend(start_backend, url, timeout_s=120.0, models=models or None)
        yield stop
    finally:
        signal.signal(signal.SIGINT, old)
        if start_backend:
            stop_local_backend()


def _engine_settings(scene, args: argparse.Namespace, size: tuple[int, int] | None) -> None:
    """The command line over the shot's Render Properties ▸ Painted Skin (not saved)."""
    s = scene.painted_skin_engine
    if args.url is not None:
        s.url = args.url
    if not s.url.strip():
        from .wire.endpoints import DEFAULT_URL

        s.url = DEFAULT_URL
    if args.model is not None:
        s.model = args.model
    s.start_local = False  # a backend is started by --start-backend, or runs already
    if size is not None:
        scene.render.resolution_x, scene.render.resolution_y = size
        scene.render.resolution_percentage = 100
    if args.keys is not None:
        s.keys = str(Path(args.keys).absolute())


def cli_ref_weights(given: Sequence[str] | None, n_refs: int) -> list[float] | None:
    """``--ref-weight W`` (repeatable, in ``--ref`` order) as ``ref_weights``; None when
    none is given. Raises :class:`RefWeightsError` for a count that differs from the
    ``--ref`` count or a value that is not a non-negative number."""
    if not given:
        return None
    if len(given) != n_refs:
        raise RefWeightsError(f"{len(given)} --ref-weight for {n_refs} --ref: give one "
                              "--ref-weight per --ref, in the same order (or none)")
    values: list[Any] = []
    for w in given:
        try:
            values.append(float(w))
        except ValueError:
            raise RefWeightsError(f"--ref-weight {w!r} is not a number: write e.g. "
                                  "--ref-weight 0.5") from None
    try:
        return check_ref_weights(values, n_refs)
    except RefWeightsError as e:
        raise RefWeightsError(f"--ref-weight: {e}") from None


def merged_ref_weights(first: Sequence[float] | None, n_first: int,
                       second: Sequence[float] | None, n_second: int) -> list[float] | None:
    """The weights of two reference lists sent one after the other (a shot's saved
    references, then the command line's): each list's own, 1.0 each where it has none;
    None when neither has weights."""
    if first is None and second is None:
        return None
    return [*(first if first is not None else [1.0] * n_first),
            *(second if second is not None else [1.0] * n_second)]


#: ``restyle``'s values where neither the command line nor (``--from-scene``) the shot set one.
RESTYLE_DEFAULTS = {"pipeline": "sd15-controlnet", "prompt": "", "negative_prompt": "",
                    "seed": 0, "size": (512, 512)}


def _restyle_settings(args: argparse.Namespace, scene, options: dict, refs: list,
                      ref_weights: list[float] | None = None) -> dict:
    """The shot's settings: the command line's, over the Restyle panel's saved in the
    .blend with ``--from-scene`` (options merged key by key, references added), over
    :data:`RESTYLE_DEFAULTS`."""
    given = {"pipeline": args.pipeline, "prompt": args.prompt,
             "negative_prompt": args.negative_prompt, "seed": args.seed,
             "size": _parse_size(args.size) if args.size is not None else None}
    base: dict = dict(RESTYLE_DEFAULTS, options={}, refs=[])
    if args.from_scene:
        from .addon.blender.restyle.settings import saved_settings

        try:
            base.update(saved_settings(scene))
        except ValueError as e:  # no saved settings, a bad reference image...
            raise BadInput(str(e)) from None
    out = {k: v if v is not None else base[k] for k, v in given.items()}
    opts = {**base["options"], **options}
    # The saved references' weights, then the command line's (1.0 where a list has none).
    w = merged_ref_weights(base["options"].get("ref_weights"), len(base["refs"]),
                           ref_weights if ref_weights is not None else options.get("ref_weights"),
                           len(refs))
    if w is not None:
        opts["ref_weights"] = w
    return {**out, "options": opts, "refs": base["refs"] + refs}


def _restyle_names(args: argparse.Namespace):
    """How ``restyle`` names its frames: ``--frame-pattern`` inside OUT/restyled, or a
    render-output path as ``--out`` (``/farm/sh010/shot_####.png``: its folder becomes
    the output folder, holding the frames themselves). ``//`` is the shot's folder."""
    from .addon.blender.restyle.output import DEFAULT_FRAMES, RESTYLED, frames_pattern
    from .addon.core.files.frame_patterns import blend_relative, split_output_path

    args.out = blend_relative(args.out, args.shot)
    folder, names = split_output_path(args.out, ".png", "--out")
    if names is not None:
        if args.frame_pattern is not None:
            raise BadInput(f"--out {args.out!r} is a frame pattern and --frame-pattern is "
                           "given too: give one of them")
        args.out = folder
        return names
    if args.frame_pattern is None:
        return DEFAULT_FRAMES
    return frames_pattern(args.frame_pattern, RESTYLED)


def _saved_lines(bar, image_of):
    """A progress callback: the bar, and a ``Saved: '<image>'`` line for each frame
    written now (what Flamenco/Deadline show per frame; not for the frames skipped,
    which the first call reports)."""
    last: dict[str, int | None] = {"done": None}

    def progress(done: int, total: int, frame: int) -> None:
        if bar:
            bar(done, total, frame)
        written, last["done"] = last["done"] is not None and done > last["done"], done
        image = image_of(frame)
        if written and image is not None and image.exists():
            print(f"Saved: '{image}'", flush=True)

    return progress


def _frame_bar(total: int):
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    bar = tqdm(total=total, unit="frame", disable=not sys.stderr.isatty())

    def update(done: int, _total: int, frame: int) -> None:
        bar.n = done
        bar.set_description(f"frame {frame}")
        bar.refresh()

    return update


def _have(module: str) -> bool:
    """Whether the package holds ``module`` (relative to it)."""
    import importlib.util

    try:
        return importlib.util.find_spec(module, __package__) is not None
    except ModuleNotFoundError:
        return False
