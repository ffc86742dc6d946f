"""``painted-skin train-skin``: learn a character's skin model from its own renders.

Blender renders the training set (``skin_dataset``); the trainer runs in the backend's
Python (torch lives there, bpy pins numpy<2), as a child process whose progress bar, Ctrl-C
(checkpoint, then ``--resume``) and exit code pass straight through.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import bpy

from ...core.files.atomic import check_writable, write_json_atomic
from ...core.files.paths import removed_if_left_empty
from . import dataset as D

REPO = Path(__file__).resolve().parents[3]
DEFAULT_CACHE = Path(os.environ.get("PAINTED_SKIN_CACHE",
                                    Path.home() / ".cache" / "painted-skin")) / "skin-data"


#: What a plain ``train-skin`` (and the panel's Train) runs: a character of the user's own
#: reaches every quality target of ``bench skin`` so. The KayKit mannequin with an empty
#: cache, 2 CPU cores: 18.5 minutes of wall time, rendering included (12 minutes of
#: training: 19.7, held out 34.90 dB against 34.78, the bench's mean 36.32 dB both), so
#: a busier machine still keeps within 20. Twice the frames beat more steps (12 frames a
#: clip: 0.949 worst SSIM, 24 frames 0.951; held out 32.04 / 32.18 dB).
DEFAULT_MINUTES = 10.0
DEFAULT_FRAMES_PER_CLIP = 24
MAX_SAMPLES = 4096
#: Frames a clip of the ``--detail-size`` set: the same motions and orbits as the
#: training set, sampled sparsely (the larger frames cost ~4x each to render).
DETAIL_FRAMES_PER_CLIP = 8
MAX_FRAMES_PER_CLIP = 10_000
TRAINER_MODULE = "painted_skin.backend.skin.train"  # run in the backend's Python
#: The embedded model: the network a user's own character starts from.
EMBEDDED_MODEL = Path(__file__).resolve().parents[3] / "rigs" / "skin_models" / "demo"


@dataclass
class TrainRequest:
    character: str  # a .blend/.glb/.fbx path, or "demo"
    out: Path
    minutes: float | None = None  # None: DEFAULT_MINUTES, or no budget when steps is given
    size: int = 128
    device: str = "cpu"
    resume: bool = False
    python: str | None = None
    cache: Path = DEFAULT_CACHE
    frames_per_clip: int = DEFAULT_FRAMES_PER_CLIP
    samples: int = 16
    steps: int | None = None
    seed: int = 0
    temporal: bool = True  # steadier shots; the embedded model is trained so
    lights: str = "varied"  # dataset.LIGHT_RIGS
    motions: tuple[str, ...] = ()  # real mocap files to train on too
    # a skin model folder whose network starts training; None: the embedded model for
    # a character of the user's own (its shading carries over), nothing for the demo;
    # "none": from scratch
    init_from: str | None = None
    # also render the motions at this size (DETAIL_FRAMES_PER_CLIP a clip) and train on
    # them beside the main set: a model that paints larger frames and close-ups well
    detail_size: int | None = None

    def problems(self) -> list[str]:
        """What keeps this request from running, one line each ([]: none): checked before
        a frame renders, since rendering the set takes minutes."""
        bad = []
        if self.minutes is not None and not (math.isfinite(self.minutes) and self.minutes > 0):
            bad.append(f"--minutes {self.minutes:g}: give a positive number of minutes (or "
                       "--steps alone, for the whole schedule)")
        if self.steps is not None and self.steps < 1:
            bad.append(f"--steps {self.steps}: give 1 or more training steps")
        if not 1 <= self.samples <= MAX_SAMPLES:
            bad.append(f"--samples {self.samples}: give 1..{MAX_SAMPLES} Cycles samples "
                       "(16, denoised, is the skin model's training target)")
        if not 1 <= self.frames_per_clip <= MAX_FRAMES_PER_CLIP:
            bad.append(f"--frames-per-clip {self.frames_per_clip}: give 1.."
                       f"{MAX_FRAMES_PER_CLIP}")
        if self.size not in (64, 128, 256, 512):
            bad.append(f"--size {self.size}: use 128, 256 or 512 (64 also works)")
        if self.detail_size is not None and (self.detail_size not in (128, 256, 512)
                                             or self.detail_size <= self.size):
            bad.append(f"--detail-size {self.detail_size}: give 128, 256 or 512, larger "
                       f"than --size {self.size}")
        if not re.fullmatch(r"cpu|cuda(:\d+)?|mps", self.device):
            bad.append(f"--device {self.device!r}: use cpu, cuda (or cuda:N) or mps")
        if self.lights not in D.LIGHT_RIGS:
            bad.append(f"--lights {self.lights}: use {' or '.join(D.LIGHT_RIGS)}")
        bad += [f"--motion {m}: no such file (give a .bvh, .fbx, .glb or .gltf clip)"
                for m in self.motions if not Path(m).is_file()]
        bad += [f"--motion {m}: not a mocap clip (give a .bvh, .fbx, .glb or .gltf)"
                for m in self.motions if Path(m).is_file() and not D.is_motion_file(m)]
        if self.init_from not in (None, "none") and \
                not (Path(self.init_from) / "config.json").is_file():
            bad.append(f"--init-from {self.init_from}: not a skin model folder (no "
                       "config.json); give one train-skin wrote, e.g. rigs/skin_models/demo")
        if self.resume and not self.checkpoint().is_file():
            bad.append(f"--resume: no checkpoint at {self.checkpoint()} (train without "
                       "--resume to start a new model)")
        return bad

    def start_from(self) -> Path | None:
        """The model whose network this run starts from (see ``init_from``)."""
        if self.init_from == "none":
            return None
        if self.init_from:
            return Path(self.init_from)
        prior = EMBEDDED_MODEL
        return prior if self.character != "demo" and (prior / "config.json").is_file() \
            else None

    def checkpoint(self) -> Path:
        """Where the trainer keeps its checkpoint (its default: beside the model folder)."""
        return Path(f"{str(self.out).rstrip('/')}.ckpt")

    def budget(self) -> float | None:
        """The training time budget in minutes; None: the schedule runs whole (``steps``
        given alone, so the documented command reproduces a model exactly)."""
        if self.minutes is not None:
            return self.minutes or None
        return None if self.steps else DEFAULT_MINUTES


def trainer_command(req: TrainRequest, python: str, train_dir: Path, held_dir: Path,
                    fingerprint: Path, extra: Path, no_albedo: bool = False,
                    detail_dir: Path | None = None) -> list[str]:
    """The backend trainer's command line for ``req`` over rendered frame folders;
    ``no_albedo``: the model does not read the albedo pass; ``detail_dir``: the
    ``--detail-size`` frames."""
    cmd = [python, "-m", TRAINER_MODULE, "--frames", str(train_dir),
           "--eval-frames", str(held_dir), "--out", str(req.out), "--fingerprint",
           str(fingerprint), "--report-extra", str(extra), "--device", req.device,
           "--seed", str(req.seed), "--crop", str(min(64 if req.size <= 128 else 128,
                                                      req.size))]
    if req.budget():
        cmd += ["--minutes", f"{req.budget():g}"]
    if req.steps:
        cmd += ["--steps", str(req.steps)]
    if req.resume:
        cmd.append("--resume")
    if req.temporal:
        cmd.append("--temporal")
    if no_albedo:
        cmd.append("--no-albedo")
    if detail_dir is not None:
        cmd += ["--detail-frames", str(detail_dir)]
    start = req.start_from()
    if start is not None:
        cmd += ["--init-from", str(start.resolve())]
    return cmd


def dataset_specs(req: TrainRequest) -> tuple[D.DatasetSpec, D.DatasetSpec]:
    """(training, held-out) renders of ``req``: the generated motions plus windows of
    its real clips; held out, the generated wave under the scene's lights and, where
    ../shared/data has it (and the run does not train on it), the middle of a real clip
    (:data:`dataset.HELD_OUT_REAL`)."""
    from ...core.files.paths import shared_data

    clips = D.TRAIN_CLIPS + D.motion_windows(req.motions, req.frames_per_clip, 24.0)
    spec = D.DatasetSpec(size=req.size, frames_per_clip=req.frames_per_clip, clips=clips,
                         samples=req.samples, seed=req.seed, lights=req.lights)
    held_frames = max(12, req.frames_per_clip // 2)
    held_clips = D.HELD_OUT_CLIPS
    real = shared_data(D.HELD_OUT_REAL)
    if real is not None and real.resolve() not in {Path(m).resolve() for m in req.motions}:
        held_clips += (D.middle_window(real, held_frames, 24.0),)
    held = D.DatasetSpec(size=req.size, frames_per_clip=held_frames, clips=held_clips,
                         samples=req.samples, seed=req.seed + 1000)
    return spec, held


def detail_spec(req: TrainRequest) -> D.DatasetSpec | None:
    """The ``--detail-size`` render: the training set's motions and orbits at that size,
    :data:`DETAIL_FRAMES_PER_CLIP` frames a clip; None without the option."""
    if req.detail_size is None:
        return None
    return dataset_specs(dataclasses.replace(req, size=req.detail_size,
                                             frames_per_clip=DETAIL_FRAMES_PER_CLIP))[0]


def ensure_lighting(scene: bpy.types.Scene) -> None:
    """Training needs fixed world lighting: a character file without lights gets the
    demo's sun and a neutral world (the same every run)."""
    from ..passes.geometry import TRAINING_SUN_ENERGY, TRAINING_SUN_EULER, TRAINING_WORLD_COLOUR

    if not any(o.type == "LIGHT" for o in scene.objects):
        sun_data = bpy.data.lights.new("SkinSun", "SUN")
        sun_data.energy = TRAINING_SUN_ENERGY
        sun = bpy.data.objects.new("SkinSun", sun_data)
        sun.rotation_euler = tuple(float(a) for a in TRAINING_SUN_EULER)
        scene.collection.objects.link(sun)
    if scene.world is None:
        world = bpy.data.worlds.new("SkinWorld")
        world.color = TRAINING_WORLD_COLOUR
        bg = world.node_tree.nodes.get("Background") if world.node_tree else None
        if bg is not None:  # what renders: the node tree's Background
            bg.inputs["Color"].default_value = (*TRAINING_WORLD_COLOUR, 1.0)
        scene.world = world


def load_character(spec: str,
                   characters: Mapping[str, Callable[[], bpy.types.Object]] | None = None,
                   ) -> bpy.types.Object:
    """The character to learn, in a fresh scene: a built-in one by name (``characters``:
    the CLI passes the demo's builder for ``demo``; this layer never imports the demo),
    or a file."""
    from ..retarget.importers import import_character
    from ..session import reset_scene

    reset_scene()
    if characters and spec in characters:
        return characters[spec]()
    path = Path(spec)
    if not path.is_file():
        raise D.DatasetError(f"--character {spec}: no such file (give a .blend, .glb, .gltf or "
                             ".fbx character, or 'demo')")
    arm = import_character(path)
    scene = bpy.context.scene
    ensure_lighting(scene)
    return D.check_character(arm, str(path))


def backend_python(given: str | None) -> str:
    """The Python that trains: ``--python``, else the repository's ``.venv-backend``, else
    this Python when it has torch."""
    if given:
        if not Path(given).is_file():
            raise D.DatasetError(f"--python {given}: no such file (the python of an "
                                 "environment with painted-skin[backend])")
        return given
    local = REPO / ".venv-backend" / "bin" / "python"
    if local.is_file():
        return str(local)
    import importlib.util

    if importlib.util.find_spec("torch") is not None:
        return sys.executable
    raise D.DatasetError("no Python with torch to train in: pass --python "
                         "<env>/bin/python of an environment with painted-skin[backend] "
                         "(e.g. 'make backend' makes .venv-backend)")


def _check_out(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise D.DatasetError(f"--out {out} is a file: give a folder for the model")
    if out.is_dir() and any(out.iterdir()) and not (out / "config.json").is_file():
        raise D.DatasetError(f"--out {out} is a folder that is not a skin model: give a new "
                             "or an existing model folder")


def probe_folder(path: Path, what: str) -> None:
    """Refuse a folder that cannot be made or written (``/proc/x``, below a file), and
    leave none behind: the trainer makes it when it writes the model."""
    with removed_if_left_empty(path, always=True):
        check_writable(path, what)


def trainer_env() -> dict[str, str]:
    """The trainer's environment, unbuffered (the panel shows its lines as they come),
    without this add-on's folder on ``PYTHONPATH`` (the panel's child Blender has it
    there): an installed extension carries no ``backend/skin``, so the trainer can only
    come from the backend Python's own install, which that folder would hide."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    ours = REPO.parent if REPO.name == "painted_skin" else None  # the folder holding us
    paths = [p for p in env.pop("PYTHONPATH", "").split(os.pathsep) if p and Path(p) != ours]
    if paths:
        env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def check_trainer(python: str, env: dict[str, str]) -> None:
    """Refuse before a frame renders when ``python`` cannot run the trainer (minutes of
    rendering for nothing, then an import error)."""
    probe = ("import importlib.util, sys; "
             f"sys.exit(0 if importlib.util.find_spec({TRAINER_MODULE!r}) else 3)")
    try:
        proc = subprocess.run([python, "-c", probe], env=env, capture_output=True,
                              timeout=120, stdin=subprocess.DEVNULL)
        ok = proc.returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    if not ok:
        raise D.DatasetError(
            f"the Python that trains ({python}) has no Painted Skin trainer "
            f"({TRAINER_MODULE}): install painted-skin[backend] into that environment, or "
            "pick another (--python; in the panel: Preferences > Add-ons > Painted Skin > "
            "Backend Python)")


def train_skin(req: TrainRequest, progress=None,
               characters: Mapping[str, Callable[[], bpy.types.Object]] | None = None) -> int:
    """Render (or reuse) the training and held-out sets, then train; returns the
    trainer's exit code (0, 2 bad input, 130 stopped: a checkpoint, or the frames
    rendered so far, are kept for the next run)."""
    # Under ``blender -b`` Blender's own SIGINT handler takes a first Ctrl-C as a render
    # break only: Python's puts it back, so Ctrl-C (the panel's Cancel) stops the dataset
    # render or, while training, reaches the trainer (which saves a checkpoint).
    # A farm's or ``timeout``'s SIGTERM stops it the same way (temp files removed, the
    # trainer checkpointed), never mid-write.
    if threading.current_thread() is threading.main_thread():
        _STOP.clear()
        previous = signal.signal(signal.SIGINT, _interrupt)
        previous_term = signal.signal(signal.SIGTERM, _interrupt)
        try:
            return _train_skin(req, progress, characters)
        except KeyboardInterrupt:
            print("train-skin: stopped before training (the frames rendered so far are "
                  "kept: Train again continues)", file=sys.stderr, flush=True)
            return 130
        finally:
            if previous is not None:  # None: Blender's own C handler, not restorable
                signal.signal(signal.SIGINT, previous)
            signal.signal(signal.SIGTERM, previous_term if previous_term is not None
                          else signal.SIG_DFL)
    return _train_skin(req, progress, characters)


_STOP = threading.Event()  # set by Ctrl-C or SIGTERM; the dataset render checks it per frame


def _interrupt(signum: int, _frame: object) -> None:
    _STOP.set()
    raise KeyboardInterrupt(f"signal {signum}")


def _train_skin(req: TrainRequest, progress=None,
                characters: Mapping[str, Callable[[], bpy.types.Object]] | None = None) -> int:
    bad = req.problems()
    if bad:
        raise D.DatasetError("; ".join(bad))
    _check_out(req.out)
    python = backend_python(req.python)
    env = trainer_env()
    check_trainer(python, env)
    probe_folder(req.out, "--out model folder")
    check_writable(req.cache, "--cache folder")
    arm = load_character(req.character, characters)
    fingerprint = D.character_fingerprint(arm)
    for name in D.uv_report(arm):
        print(f"train-skin: mesh {name!r} has no UV map: its skin is learned from its rest "
              "positions (a 3-D feature grid) instead", file=sys.stderr)
    approximated = D.albedo_report(arm)
    if approximated:
        print(f"train-skin: material(s) {', '.join(approximated)} are more than the albedo "
              "pass reads (a procedural texture or a mix): the model learns the character's "
              "colours itself instead of reading them", file=sys.stderr)
    spec, held = dataset_specs(req)
    start = req.start_from()
    if start is not None and req.init_from is None:
        print(f"train-skin: starting from the embedded model's network ({start}): what it "
              "learned of shading carries over; --init-from none starts from scratch",
              file=sys.stderr)
    train_dir = D.dataset_folder(req.cache, spec, fingerprint)
    held_dir = D.dataset_folder(req.cache, held, fingerprint)
    sets = [("training", spec, train_dir), ("held-out", held, held_dir)]
    detail = detail_spec(req)
    detail_dir = None if detail is None else D.dataset_folder(req.cache, detail, fingerprint)
    if detail is not None:
        sets.append((f"{req.detail_size}² detail", detail, detail_dir))
    for what, sp, folder in sets:
        bar = progress(what, len(sp.clips) * sp.frames_per_clip) if progress else None
        res = D.build_dataset(arm, folder, sp, progress=bar, cancelled=_STOP.is_set)
        print(f"train-skin: {what} set: {res.frames} frames ({res.rendered} rendered now) in "
              f"{folder}", flush=True)
    with tempfile.TemporaryDirectory(prefix="painted-skin-train-") as tmp:
        fp = Path(tmp) / "fingerprint.json"
        fp.write_text(json.dumps(fingerprint))
        extra = Path(tmp) / "extra.json"
        write_json_atomic(extra, {"character": req.character, "dataset": {
            "train": str(train_dir), "held_out": str(held_dir), "size": req.size,
            "train_clips": [list(c) for c in spec.clips],
            "held_out_clips": [list(c) for c in held.clips], "samples": req.samples,
            **({} if detail is None else {"detail": {
                "frames": str(detail_dir), "size": detail.size,
                "frames_per_clip": detail.frames_per_clip}})}})
        cmd = trainer_command(req, python, train_dir, held_dir, fp, extra,
                              no_albedo=bool(approximated), detail_dir=detail_dir)
        proc = subprocess.Popen(cmd, env=env)
        while True:  # the trainer finishes its step and saves a checkpoint: wait for it
            try:
                return proc.wait()
            except KeyboardInterrupt:  # each Ctrl-C to it too (it only sets a flag)
                proc.send_signal(signal.SIGINT)
