"""``painted-skin learn-look``: a look learned from a few painted keyframes of a shot.

The keys are ``NNNN.png`` (the frame number, as ``restyle`` names its frames, so a
folder of diffusion-painted frames is taken as it is), RGB or RGBA at the shot's render
size; an alpha marks what the painter covered. Blender renders those frames' passes
(fast engine, the shot's or the given camera); the fine-tune runs in the backend's
Python (``painted_skin.backend.skin.look``) as a child process whose progress, Ctrl-C
(checkpoint, then ``--resume``) and exit code pass straight through, as ``train-skin``'s.
"""

from __future__ import annotations

import json
import math
import re
import signal
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

import bpy
import numpy as np

from ...core.files.paths import files_digest
from . import dataset as D
from .train import backend_python, check_trainer, trainer_env

LOOK_MODULE = "painted_skin.backend.skin.look"  # run in the backend's Python
KEY_FILE = re.compile(r"(\d{4,8})\.png")
MAX_KEYS = 64
LOOK_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")  # as the backend's runtime


@dataclass
class LookRequest:
    shot: Path  # the .blend
    keys: Path  # folder of NNNN.png
    base: Path  # the base skin-model folder
    out: Path
    camera: str | None = None
    look: str | None = None  # a name inside the multi-look folder ``out``
    minutes: float | None = None
    steps: int | None = None
    device: str = "cpu"
    resume: bool = False
    python: str | None = None

    def problems(self) -> list[str]:
        """What keeps the request from running, one line each ([]: none)."""
        bad = []
        if not self.shot.is_file() or self.shot.suffix.lower() != ".blend":
            bad.append(f"--shot {self.shot}: not a .blend file (give the shot the keys "
                       "were painted on)")
        if not self.keys.is_dir():
            bad.append(f"--keys {self.keys}: no such folder (give the folder of painted "
                       "NNNN.png keyframes)")
        if not (self.base / "config.json").is_file():
            bad.append(f"--base {self.base}: not a skin model folder (no config.json); give "
                       "one train-skin wrote, or a registry name such as demo")
        if self.minutes is not None and not (math.isfinite(self.minutes) and self.minutes > 0):
            bad.append(f"--minutes {self.minutes:g}: give a positive number of minutes")
        if self.steps is not None and self.steps < 1:
            bad.append(f"--steps {self.steps}: give 1 or more training steps")
        if self.look is not None and (self.look == "base" or not LOOK_NAME.fullmatch(self.look)):
            bad.append(f"--look {self.look!r}: a name of letters, digits, - and _ (up to 64), "
                       "not 'base' (the base model's own look)")
        if not re.fullmatch(r"cpu|cuda(:\d+)?|mps", self.device):
            bad.append(f"--device {self.device!r}: use cpu, cuda (or cuda:N) or mps")
        if self.out.exists() and not self.out.is_dir():
            bad.append(f"--out {self.out} is a file: give a folder for the look")
        return bad

    def target(self) -> Path:
        """The folder the look is written to."""
        return self.out / "looks" / self.look if self.look else self.out

    def checkpoint(self) -> Path:
        """Where the trainer keeps its checkpoint (its default: beside the look)."""
        t = self.target()
        return t.parent / f".{t.name}.look.ckpt"


def key_files(folder: Path) -> dict[int, Path]:
    """Frame -> key image of a folder of ``NNNN.png`` (other files are left alone)."""
    keys = {}
    for p in sorted(folder.iterdir()):
        m = KEY_FILE.fullmatch(p.name)
        if m and p.is_file():
            keys[int(m.group(1))] = p
    if not keys:
        raise D.DatasetError(f"--keys {folder}: no NNNN.png keyframes in it (name each "
                             "painted frame by its number, e.g. 0012.png)")
    if len(keys) > MAX_KEYS:
        raise D.DatasetError(f"--keys {folder}: {len(keys)} keyframes, at most {MAX_KEYS}: "
                             "a look needs a few well-chosen frames")
    return keys


def shot_character(scene: bpy.types.Scene, fingerprint: dict) -> bpy.types.Object:
    """The armature of the shot whose meshes the base model was trained on."""
    seen = []
    for obj in scene.objects:
        if obj.type != "ARMATURE" or not D.character_meshes(obj):
            continue
        fp = D.character_fingerprint(obj)
        if fp == fingerprint:
            return obj
        seen.append(obj.name)
    raise D.DatasetError(f"no character of the shot is the base model's (armatures: "
                         f"{', '.join(seen) or 'none'}): give the base model trained on this "
                         "character (train-skin --character SHOT.blend)")


def render_size(scene: bpy.types.Scene) -> tuple[int, int]:
    r = scene.render
    return (max(1, r.resolution_x * r.resolution_percentage // 100),
            max(1, r.resolution_y * r.resolution_percentage // 100))


def write_key_frames(scene: bpy.types.Scene, keys: dict[int, Path], out: Path) -> None:
    """Each key's passes (fast engine) and image as one ``.npz`` (what the trainer reads)."""
    from ..passes.geometry import ShotGeometry
    from ..passes.image_io import read_image
    from ..passes.render import PassOptions, iter_frames

    width, height = render_size(scene)
    images = {}
    for f, path in keys.items():
        img = np.asarray(read_image(path))
        if img.ndim == 2:
            img = np.repeat(img[..., None], 3, axis=2)
        if img.dtype != np.uint8:  # a 16-bit PNG
            img = (img.astype(np.float64) / np.iinfo(img.dtype).max * 255 + 0.5).astype(np.uint8)
        if img.shape[:2] != (height, width) or img.shape[2] not in (3, 4):
            raise D.DatasetError(f"key {path.name} is {img.shape[1]}x{img.shape[0]}, the shot "
                                 f"renders {width}x{height}: paint the keys at the shot's "
                                 "render size (RGB or RGBA)")
        images[f] = img
    frames = sorted(keys)
    opts = PassOptions(frames=range(frames[0], frames[-1] + 1), width=width, height=height,
                       engine="fast", passes=D.PASSES)
    opts.validate()
    geo = ShotGeometry(scene, width, height)
    for f, _, arrays, _ in iter_frames(scene, geo, opts, frames):
        np.savez(out / f"{f:04d}.npz", beauty=images[f], **arrays)


SUGGEST_SIDE = 128  # coverage is counted on a coarse UV grid: a small render suffices


def suggest_frames(scene: bpy.types.Scene, frames: list[int], k: int) -> list[int]:
    """The ``k`` frames of ``frames`` that show the most of the character's surface
    together (:func:`coverage.suggest_keys` over the fast engine's uv, mask and parts)."""
    from ...core.passes import coverage
    from ..passes.geometry import ShotGeometry
    from ..passes.render import PassOptions, iter_frames

    w, h = render_size(scene)
    scale = SUGGEST_SIDE / max(w, h)
    w, h = max(16, round(w * scale)), max(16, round(h * scale))
    opts = PassOptions(frames=range(frames[0], frames[-1] + 1), width=w, height=h,
                       engine="fast", passes=("uv", "mask", "parts"))
    opts.validate()
    shown = {f: coverage.texels(a["uv"], a["mask"], a["parts"])
             for f, _, a, _ in iter_frames(scene, ShotGeometry(scene, w, h), opts, frames)}
    return coverage.suggest_keys(shown, k)


def look_command(req: LookRequest, python: str, key_dir: Path, fp: Path, digest: str
                 ) -> list[str]:
    cmd = [python, "-m", LOOK_MODULE, "--keys", str(key_dir), "--base", str(req.base),
           "--out", str(req.out), "--device", req.device, "--fingerprint", str(fp),
           "--digest", digest]
    for flag, value in (("--look", req.look), ("--steps", req.steps),
                        ("--minutes", req.minutes)):
        if value is not None:
            cmd += [flag, str(value)]
    if req.resume:
        cmd.append("--resume")
    return cmd


def learn_look(req: LookRequest) -> int:
    """Render the keys' passes, then fine-tune; returns the trainer's exit code (0, 2 bad
    input, 130 stopped with a checkpoint: ``--resume`` continues)."""
    bad = req.problems()
    if bad:
        raise D.DatasetError("; ".join(bad))
    if req.resume and not req.checkpoint().is_file():
        raise D.DatasetError(f"--resume: no checkpoint at {req.checkpoint()} (learn without "
                             "--resume to start)")
    keys = key_files(req.keys)
    python = backend_python(req.python)
    env = trainer_env()
    check_trainer(python, env)
    from ..blend_files import open_shot, use_camera

    scene = open_shot(req.shot)
    if req.camera:
        use_camera(scene, req.camera)
    base_cfg = json.loads((req.base / "config.json").read_text())
    fingerprint = base_cfg.get("fingerprint") or {}
    shot_character(scene, fingerprint)
    with tempfile.TemporaryDirectory(prefix="painted-skin-look-") as tmp:
        key_dir = Path(tmp) / "keys"
        key_dir.mkdir()
        write_key_frames(scene, keys, key_dir)
        print(f"learn-look: {len(keys)} keyframe(s) ({', '.join(map(str, sorted(keys)))}) "
              f"with their passes; learning from {req.base}", flush=True)
        fp = Path(tmp) / "fingerprint.json"
        fp.write_text(json.dumps(fingerprint))
        cmd = look_command(req, python, key_dir, fp, files_digest(list(keys.values())))
        return _run_child(cmd, env)


def _run_child(cmd: list[str], env: dict[str, str]) -> int:
    """The trainer as a child process; Ctrl-C and SIGTERM reach it as a Ctrl-C (it
    finishes its step, saves a checkpoint and exits 130)."""
    proc = subprocess.Popen(cmd, env=env)
    main = threading.current_thread() is threading.main_thread()
    saved = {}
    if main:
        def forward(signum: int, _frame: object) -> None:
            proc.send_signal(signal.SIGINT)

        for sig in (signal.SIGINT, signal.SIGTERM):
            saved[sig] = signal.signal(sig, forward)
    try:
        return proc.wait()
    finally:
        for sig, old in saved.items():
            signal.signal(sig, old if old is not None else signal.SIG_DFL)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        sys.stdout.flush()
