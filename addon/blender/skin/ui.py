"""The Skin Model panel: train the scene character's skin model without leaving Blender,
and restyle the shot with it.

Training renders hundreds of frames and trains for minutes, so it runs as a child
process (``painted-skin train-skin`` in this Blender, or in the bpy module's Python),
followed by a :class:`TrainingRun`: the panel shows a bar over the trainer's steps and its
last line, Esc or *Cancel* sends it Ctrl-C (it saves a checkpoint: *Resume* continues).
Headless (``blender -b``), the operator waits for the child instead.
"""

from __future__ import annotations

import collections
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import bpy
from bpy.props import BoolProperty, EnumProperty, FloatProperty, IntProperty, StringProperty

from ....wire import VALUES_VERSION, values_age
from ..classes import (
    SidebarPanel,
    draw_hint,
    labelled,
    register_classes,
    unregister_classes,
    wrapped_label,
)
from ..out_paths import PATH_OPTIONS
from ..passes.geometry import render_meshes
from ..preferences import preferences
from . import look
from .train import DEFAULT_MINUTES

# The panel's one training: the running (or last) :class:`TrainingRun`.
_RUN: dict = {"job": None}


class PS_SkinSettings(bpy.types.PropertyGroup):
    model_dir: StringProperty(name="Model Folder", subtype="DIR_PATH", default="//skin_model/",
                              options=PATH_OPTIONS,
                              description="Where Train writes the skin model (config, ONNX "
                                          "graph, report)")
    minutes: FloatProperty(name="Minutes", default=DEFAULT_MINUTES, min=0.01, max=24 * 60,
                           description="Training time budget (the schedule is fitted to it)")
    size: EnumProperty(name="Size", default="128", items=[
        ("128", "128²", "Fast; the default on a CPU"),
        ("256", "256²", "Sharper; for a GPU"),
        ("512", "512²", "Sharpest; for a GPU")],
        description="Resolution the model is trained and paints at")
    detail: EnumProperty(name="Detail", default="0", items=[
        ("0", "No Detail Frames", "Train on frames of the Size only"),
        ("256", "Detail 256²", "Also render the motions at 256² (8 frames a motion, about 5 "
                               "more minutes on a CPU): sharper close-ups and 256² paintings"),
        ("512", "Detail 512²", "Also render the motions at 512² (the neural texture gains a "
                               "512² level): sharper 512² paintings")],
        description="Train the finest texture on larger frames too (larger than the Size)")
    device: EnumProperty(name="Device", default="cpu", items=[
        ("cpu", "CPU", "Train on the CPU"), ("cuda", "CUDA", "Train on an NVIDIA GPU")],
        description="Where the Backend Python trains")
    resume: BoolProperty(name="Resume", default=False,
                         description="Continue the last (interrupted) training of this folder")
    model_choice: EnumProperty(name="Restyle With", default="scene", items=[
        ("scene", "Trained Here", "The model Train wrote to the Model Folder above"),
        ("folder", "Model Folder", "A skin model folder trained elsewhere (config.json, ONNX)"),
        ("registry", "Registry Name", "A model the backend's registry serves by name")],
        description="Which skin model Restyle paints with")
    model_folder: StringProperty(name="Trained Model", subtype="DIR_PATH", default="",
                                 options=PATH_OPTIONS,
                                 description="A skin model folder (the one train-skin wrote: "
                                             "config.json and the ONNX graph); a backend "
                                             "started from this panel serves it")
    model_name: StringProperty(name="Model Name", default="",
                               description="The name of a model in the backend's registry "
                                           "(e.g. demo, the embedded one)")


def _settings(context) -> PS_SkinSettings:
    return context.scene.painted_skin_skin


def _package_root() -> Path:
    """The folder that holds this add-on's ``painted_skin`` package (or the checkout)."""
    return Path(__file__).resolve().parents[3]


def train_command(blend: str, out: str, minutes: float, size: int, device: str, resume: bool,
                  python: str | None, extra: list[str] | None = None, detail: int = 0
                  ) -> list[str]:
    """The child's command line: ``painted-skin train-skin`` on the saved .blend, in the
    bpy module's Python, or in this Blender binary (the extension's files on its path);
    ``detail`` > 0: its ``--detail-size``."""
    args = ["train-skin", "--character", blend, "--out", out, "--minutes", f"{minutes:g}",
            "--size", str(size), "--device", device, *(["--resume"] if resume else []),
            *(["--detail-size", str(detail)] if detail else []),
            *(["--python", python] if python else []), *(extra or [])]
    return child_command(args)


def child_command(args: list[str]) -> list[str]:
    """``painted-skin ARGS`` as a child of this Blender: in the bpy module's Python, or in
    this Blender binary with the extension's files on its path."""
    root = _package_root()
    if not bpy.app.binary_path:
        return [sys.executable, "-m", "painted_skin.cli", *args]
    expr = (f"import sys; sys.path.insert(0, {str(root.parent)!r}); "
            "from painted_skin.cli import main; "
            "sys.exit(main(sys.argv[sys.argv.index('--') + 1:]))")
    return [bpy.app.binary_path, "-b", "--factory-startup", "--python-exit-code", "1",
            "--python-expr", expr, "--", *args]


# A tqdm bar's "done/total [" (the trainer's "skin:" bar over its steps).
_BAR = re.compile(r"(\d+)/(\d+) \[")
# Lines of a Blender render child that say nothing about the training.
_NOISE = ("Fra:", "Saved: '", "Time:")
_BANNER = ("Blender ", "Read blend:", "Read prefs:")
# Each phase's share of a run's time: rendering the training set, the held-out set, the
# larger detail set (``--detail-size`` only), then training.
PHASE_SHARE = {"training": 0.4, "held-out": 0.1, "detail": 0.2, "steps": 0.5}
# train-skin's line per rendered frame when its output is not a terminal (this child's).
_RENDERING = re.compile(r"^train-skin: rendering the (?P<what>training|held-out|\d+² detail) "
                        r"set: (?P<done>\d+)/(?P<total>\d+) frames")


class TrainingRun:
    """The trainer child process the panel steps on each timer tick: its output is read
    on a thread (tqdm redraws with \\r: each redraw is a line), :meth:`step` turns the
    lines into what the panel shows (``progress`` 0..1, ``status``), :meth:`cancel`
    sends Ctrl-C (the trainer finishes its step and saves a checkpoint; Resume
    continues). Kept apart from the operator so that it runs without a window."""

    def __init__(self, cmd: list[str], env: dict[str, str] | None = None) -> None:
        self.lines: collections.deque[str] = collections.deque(maxlen=50)
        # Bounded: a run nobody steps any more (the modal ended) keeps only its last lines.
        self._new: collections.deque[str] = collections.deque(maxlen=1000)
        self.progress = 0.0
        self.status = "training: starting…"
        self.code: int | None = None
        self.stopping = False  # Cancel asked: the status says so until the child ends
        self.phases = self.phases_of(cmd)
        self._ended: float | None = None  # when the child was first seen ended
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=env)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    @staticmethod
    def phases_of(cmd: list[str]) -> list[str]:
        """The phases a run of ``cmd`` goes through (keys of :data:`PHASE_SHARE`)."""
        return [p for p in PHASE_SHARE if p != "detail" or "--detail-size" in cmd]

    def _read(self) -> None:
        buf = b""
        while True:
            chunk = self.proc.stdout.read1(4096) if self.proc.stdout else b""
            if not chunk:
                break
            buf += chunk
            *lines, buf = buf.replace(b"\r", b"\n").split(b"\n")
            for ln in lines:
                text = ln.decode(errors="replace").strip()
                if text and not text.startswith(_NOISE) and "render  " not in text:
                    self._new.append(text)
        if buf.strip():
            self._new.append(buf.decode(errors="replace").strip())

    @property
    def running(self) -> bool:
        return self.code is None

    @property
    def last_line(self) -> str:
        return self.lines[-1] if self.lines else ""

    def _take(self, text: str) -> None:
        self.lines.append(text)
        if text.startswith(_BANNER):  # the child Blender's banner says nothing of the phase
            return
        m, rendering = _BAR.search(text), _RENDERING.match(text)
        n = len(self.phases)
        if rendering:  # the training, held-out and detail sets
            what = rendering["what"]
            key = "detail" if what.endswith("detail") else what
            phase = self.phases.index(key) if key in self.phases else 1  # (a detail set
            # the command did not name: counted with the held-out set)
            self._advance(phase, int(rendering["done"]) / max(1, int(rendering["total"])))
            text = (f"{phase + 1}/{n} rendering the {what} set: "
                    f"{rendering['done']}/{rendering['total']} frames")
        elif text.startswith("skin:") and m and int(m[2]) > 0:
            self._advance(n - 1, int(m[1]) / int(m[2]))
            text = f"{n}/{n} training: step {m[1]}/{m[2]}"
        elif text.startswith("model folder written:"):
            self.progress = 1.0
        else:
            text = "training: " + text
        if not self.stopping:
            self.status = text[:110]

    def _advance(self, phase: int, fraction: float) -> None:
        """The bar over the run's phases (their share of its time), never going back."""
        shares = [PHASE_SHARE[p] for p in self.phases]
        total = sum(shares)
        start = sum(shares[:phase])
        self.progress = max(self.progress, min(1.0, (start + shares[phase] * min(1.0, fraction))
                                               / total))

    def step(self) -> bool:
        """Take the lines read since the last tick; True once the child has ended
        (``code`` its exit status: 0 trained, 130 stopped with a checkpoint)."""
        if self.code is not None:
            return True
        code = self.proc.poll()
        if code is not None:
            # The last lines (the model folder's) come before the pipe's end; a grandchild
            # (the trainer under a Blender child) may hold the pipe open a while longer:
            # wait for them over a few ticks, never blocking one for long.
            self._ended = self._ended or time.monotonic()
            self._reader.join(0.05)
        while self._new:
            self._take(self._new.popleft())
        if code is None or (self._reader.is_alive() and time.monotonic() - self._ended < 5):
            return False
        self.code = code
        if self.proc.stdout is not None and not self._reader.is_alive():
            self.proc.stdout.close()  # (a reader still blocked on it keeps it: daemon)
        last = self.last_line
        if code not in (0, 130):  # the CLI's own error line, not Blender's closing banner
            last = next((ln for ln in reversed(self.lines)
                         if ln.startswith(("painted-skin: error:", "train-skin:"))), last)
        if code == 0:
            self.progress, self.status = 1.0, "trained: " + last
        elif code == 130 and last.startswith("train-skin: stopped"):  # while rendering
            self.status = "stopped: the frames rendered so far are kept (Train continues)"
        elif code == 130:
            self.status = "stopped (checkpoint saved: tick Resume and Train again)"
        else:
            self.status = f"training failed (exit {code}): {last}"
        return True

    def cancel(self) -> None:
        """Ctrl-C: the trainer stops after its current step with a checkpoint."""
        if self.code is None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            self.stopping, self.status = True, "stopping after this frame or step…"

    def wait(self, timeout_s: float | None = None, tick_s: float = 0.1) -> int:
        """Step until the child ends (headless: no timer); its exit code."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while not self.step():
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.proc.args, timeout_s)
            time.sleep(tick_s)
        return self.code


def training_running() -> bool:
    """A training started from the panel is still running (Train is greyed out)."""
    job = _RUN["job"]
    return job is not None and job.running and job.proc.poll() is None


class TrainerOperator:
    """What Train Skin Model and Learn Look share: ``_start(context)`` starts a trainer
    child (:func:`start_training`); in a window a timer steps it (the panel's bar and
    status), Esc cancels it (a checkpoint is saved); headless the operator waits."""

    done_text = "done"

    def _start(self, context) -> TrainingRun:
        raise NotImplementedError

    def _finished(self, job: TrainingRun):
        if job.code == 0:
            self.report({"INFO"}, f"{self.done_text}: {job.last_line}")
            return {"FINISHED"}
        self.report({"WARNING"} if job.code == 130 else {"ERROR"}, job.status)
        return {"CANCELLED"}

    def execute(self, context):
        job = self._start(context)
        job.wait()
        return self._finished(job)

    def invoke(self, context, event):
        if context.window is None:
            return self.execute(context)
        self._start(context)
        wm = context.window_manager
        self._timer = wm.event_timer_add(0.5, window=context.window)
        wm.modal_handler_add(self)
        return {"RUNNING_MODAL"}

    def modal(self, context, event):
        job = _RUN["job"]
        if event.type == "ESC" and event.value == "PRESS":
            cancel_training()
        if event.type != "TIMER":
            return {"PASS_THROUGH"}
        ended = job.step()
        for area in context.screen.areas:
            if area.type == "VIEW_3D":
                area.tag_redraw()
        if not ended:
            return {"RUNNING_MODAL"}
        context.window_manager.event_timer_remove(self._timer)
        return self._finished(job)


class PS_OT_train_skin(TrainerOperator, bpy.types.Operator):
    """Train the skin model of this file's character (renders its training set, then
    trains in the Backend Python); Esc or Cancel stops with a checkpoint"""

    bl_idname = "painted_skin.train_skin"
    bl_label = "Train Skin Model"
    done_text = "skin model trained"

    frames_per_clip: IntProperty(name="Frames per Clip", default=24, min=2,
                                 options={"HIDDEN"},
                                 description="Training frames rendered from each motion")
    samples: IntProperty(name="Samples", default=16, min=1, options={"HIDDEN"},
                         description="Cycles samples per training frame")

    @classmethod
    def poll(cls, context):
        if not render_meshes(context.scene):
            cls.poll_message_set("no character mesh in the scene: import or show the character "
                                 "to train on")
            return False
        if not bpy.data.filepath:
            cls.poll_message_set("Save the .blend first: training reads the saved character")
            return False
        if training_running():
            cls.poll_message_set("A training is running")
            return False
        s = _settings(context)
        if 0 < int(s.detail) <= int(s.size):
            cls.poll_message_set(f"Detail {s.detail}² must be larger than the Size "
                                 f"({s.size}²): choose a larger Detail or No Detail Frames")
            return False
        return True

    def _command(self, context) -> list[str]:
        s, p = _settings(context), preferences(context)
        python = bpy.path.abspath(p.python) if p is not None and p.python else None
        return train_command(bpy.data.filepath, bpy.path.abspath(s.model_dir), s.minutes,
                             int(s.size), s.device, s.resume, python,
                             ["--frames-per-clip", str(self.frames_per_clip),
                              "--samples", str(self.samples)], detail=int(s.detail))

    def _start(self, context) -> TrainingRun:
        if bpy.data.is_dirty:
            bpy.ops.wm.save_mainfile()
        job = start_training(self._command(context))
        return job



def start_training(cmd: list[str]) -> TrainingRun:
    """Start ``cmd`` (a trainer) as the panel's training: what its Cancel button and
    progress bar follow. The add-on's own folder goes on the child's path."""
    env = dict(os.environ)
    root = _package_root()
    if root.name == "painted_skin":  # an installed extension: its parent on the path
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(root.parent), env.get("PYTHONPATH")) if p)
    job = _RUN["job"] = TrainingRun(cmd, env)
    return job


def cancel_training() -> None:
    """The Cancel button (and Esc): Ctrl-C to the running training, if any."""
    job = _RUN["job"]
    if job is not None:
        job.cancel()


class PS_OT_cancel_training(bpy.types.Operator):
    """Stop the training; it saves a checkpoint first (Resume continues it)"""

    bl_idname = "painted_skin.cancel_training"
    bl_label = "Cancel"

    def execute(self, context):
        cancel_training()
        return {"FINISHED"}


class SkinModelError(ValueError):
    """The chosen skin model cannot be used; the message says how to fix it."""


def chosen_skin_model(context=None) -> str:
    """The registry name Restyle sends as its ``model`` option for the model the panel
    picks: "scene" (trained here; the embedded "demo" until one is), "folder" (a picked
    folder) or a registry name. A backend started from the panel serves the first two
    through :func:`scene_models`."""
    context = context or bpy.context
    s = _settings(context)
    if s.model_choice == "registry":
        if not s.model_name.strip():
            raise SkinModelError("no model name given: type a name the backend's registry "
                                 "serves (e.g. demo) or choose another model")
        return s.model_name.strip()
    if s.model_choice == "folder":
        folder = _folder(s.model_folder)
        if folder is None or not (folder / "config.json").is_file():
            raise SkinModelError(f"the model folder {s.model_folder or '(none)'!r} holds no "
                                 "config.json: pick a folder train-skin wrote")
        return "folder"
    if "scene" in scene_models(context):
        return "scene"
    if shows_the_demo_character(context.scene):
        return "demo"  # the embedded model is the demo character's own
    raise SkinModelError("no skin model is trained for this character yet (the embedded "
                         "'demo' model paints the demo character only): press Train Skin "
                         "Model, or pick a Model Folder or Registry Name trained for it")


# The demo character's mesh names start so (the embedded "demo" model learned it).
DEMO_MESH_PREFIX = "PaintedSkinDemo"


def shows_the_demo_character(scene: bpy.types.Scene) -> bool:
    """Whether the scene's character is the demo's (by its mesh names: cheap enough for
    a poll that runs on every redraw)."""
    meshes = render_meshes(scene)
    return bool(meshes) and all(m.name.startswith(DEMO_MESH_PREFIX) for m in meshes)


def _folder(path: str) -> Path | None:
    return Path(bpy.path.abspath(path)) if path.strip() else None


class PS_OT_use_skin_model(bpy.types.Operator):
    """Restyle with the skin model: the Restyle section's pipeline becomes "skin" and its
    model the one picked here (a backend started from this panel serves a model trained
    here as "scene" and a picked folder as "folder")"""

    bl_idname = "painted_skin.use_skin_model"
    bl_label = "Restyle with Skin Model"

    @classmethod
    def poll(cls, context):
        if not hasattr(context.scene, "painted_skin_restyle"):
            cls.poll_message_set("the Restyle section is not available (see its panel)")
            return False
        try:
            chosen_skin_model(context)
        except SkinModelError as e:
            cls.poll_message_set(str(e))
            return False
        return True

    def execute(self, context):
        try:
            name = chosen_skin_model(context)
        except SkinModelError as e:
            self.report({"ERROR"}, str(e))
            return {"CANCELLED"}
        r = context.scene.painted_skin_restyle
        r.pipeline, r.model = "skin", name
        self.report({"INFO"}, f"Restyle paints with the skin model {name!r}")
        return {"FINISHED"}


def scene_models(context=None) -> dict[str, str]:
    """Models a local backend started from the panel may serve besides the registry's:
    this scene's trained folder as "scene", the picked model folder as "folder"."""
    context = context or bpy.context
    s = getattr(context.scene, "painted_skin_skin", None)
    if s is None:
        return {}
    out = {}
    for name, path in (("scene", s.model_dir), ("folder", s.model_folder)):
        folder = _folder(path)
        if folder is not None and (folder / "config.json").is_file():
            out[name] = str(folder)
    return out


#: A model folder's config this size or more is not one train-skin wrote (the backend's
#: limit too): the panel reads no further.
MAX_CONFIG_BYTES = 1024 * 1024
_PASS_NOTES: dict[tuple[str, int], str | None] = {}


def model_pass_note(folder: Path) -> str | None:
    """One line for the panel when the model in ``folder`` learned other passes than this
    add-on renders (its config's ``pass_version``): told before a restyle, not only as
    the shot opens. Read once per version of the file (the panel redraws often)."""
    cfg = folder / "config.json"
    try:
        st = cfg.stat()
    except OSError:
        return None
    key = (str(cfg), st.st_mtime_ns)
    if key not in _PASS_NOTES:
        learned: object = VALUES_VERSION  # unreadable: the backend says why on OPEN
        if st.st_size < MAX_CONFIG_BYTES:
            try:
                learned = json.loads(cfg.read_text()).get("pass_version")
            except (OSError, UnicodeDecodeError, ValueError, AttributeError):
                pass
        age = values_age(learned)
        _PASS_NOTES.clear()  # one folder at a time is what the panel shows
        _PASS_NOTES[key] = None if age is None else (
            "This model learned a newer add-on's passes: update the add-on" if age == "newer"
            else "This model learned an older add-on's passes: it paints these with some "
                 "loss. Train it again for the best painting")
    return _PASS_NOTES[key]


def chosen_model_note(context) -> str | None:
    """The panel's line on the model Restyle would paint with, where it is a folder here
    (trained here or picked) that learned other passes; None otherwise."""
    try:
        name = chosen_skin_model(context)
    except SkinModelError:
        return None
    folder = scene_models(context).get(name)
    return model_pass_note(Path(folder)) if folder else None


def model_looks(context, model: str) -> list[str]:
    """The looks of the skin model Restyle names ``model`` ("scene" or "folder": the
    Skin Model panel's folders; a registry name: its base only, the backend's to read)."""
    folder = scene_models(context).get(model)
    names = []
    root = Path(folder) / "looks" if folder else None
    if root is not None and root.is_dir():
        names = sorted(p.name for p in root.iterdir()
                       if look.LOOK_NAME.fullmatch(p.name) and (p / "config.json").is_file())
    return ["base", *names]


def look_option(look: str, mix_with: str, mix: float) -> str | dict[str, float] | None:
    """Restyle's ``look`` option from the panel: a look, or two mixed (None: the base)."""
    if mix_with not in ("", "none", look) and mix > 0.0:
        if mix >= 1.0:
            return mix_with
        return {look: round(1.0 - mix, 4), mix_with: round(mix, 4)}
    return None if look in ("", "base") else look


class PS_PT_skin(SidebarPanel, bpy.types.Panel):
    bl_idname = "PS_PT_skin"
    bl_label = "Skin Model"
    bl_order = 3

    def draw(self, context):
        s = _settings(context)
        col = self.layout.column()
        labelled(col, s, "model_dir")
        col.prop(s, "minutes")
        row = col.row(align=True)
        row.prop(s, "size", text="")
        row.prop(s, "device", text="")
        col.prop(s, "detail", text="")
        col.prop(s, "resume")
        job = _RUN["job"]
        if training_running():
            col.operator(PS_OT_cancel_training.bl_idname, icon="CANCEL")
        else:
            col.operator(PS_OT_train_skin.bl_idname, icon="PLAY")
            draw_hint(col, context, PS_OT_train_skin)
        if job is not None:
            col.progress(factor=job.progress, type="BAR", text=job.status[:120])
        col.separator()
        labelled(col, s, "model_choice")
        if s.model_choice == "folder":
            labelled(col, s, "model_folder")
        elif s.model_choice == "registry":
            labelled(col, s, "model_name")
        note = chosen_model_note(context)
        if note:
            wrapped_label(col, context, note, icon="ERROR")
        if hasattr(context.scene, "painted_skin_restyle"):
            col.operator(PS_OT_use_skin_model.bl_idname, icon="BRUSH_DATA")
            draw_hint(col, context, PS_OT_use_skin_model)


CLASSES = (PS_SkinSettings, PS_OT_train_skin, PS_OT_cancel_training, PS_OT_use_skin_model,
           PS_PT_skin)


def register() -> None:
    register_classes(CLASSES, painted_skin_skin=PS_SkinSettings)


def unregister() -> None:
    cancel_training()
    unregister_classes(CLASSES, "painted_skin_skin")
