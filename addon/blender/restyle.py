"""Restyle a shot through a backend: passes computed in memory, streamed over
ZeroMQ, each returned frame written as ``OUT/restyled/####.png``.

    from painted_skin.addon.blender.restyle import restyle_shot
    restyle_shot(bpy.context.scene, "/tmp/shot", "tcp://127.0.0.1:5555",
                 frames=range(1, 49), size=512, pipeline="echo", seed=7)

The files on disk are the source of truth: a frame whose PNG exists is not
computed or sent again, so a re-run (or a farm chunk) resumes. Headless (and in
the bpy module, where timers never fire) the shot runs in a blocking loop on the
client's ``zmq.Poller``; in the UI a modal operator polls the same client on an
event timer (progress in the status bar, Esc cancels) and shows the result as an
image sequence. Also here: the Backend/Restyle panel with "Start local backend" and "Connect".
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import bpy
import numpy as np
from bpy.props import BoolProperty, EnumProperty, FloatProperty, IntProperty, StringProperty

from ...wire import CANONICAL_PASSES, CONTROL_PASSES, WIRE_PASSES, to_wire
from ..core.atomic import check_writable, read_json, write_json_atomic, write_npy_atomic
from ..core.backend_probe import no_python_message
from ..core.folder_lock import FolderRun, join_run
from ..core.frame_ranges import check_in_scene
from .classes import register_classes, unregister_classes
from .client import DEFAULT_URL, BackendClient, BackendError, BackendUnavailable, Result
from .out_paths import PATH_OPTIONS, UnwritableOutput, output_folder
from .passes import DEFAULT_PASSES, PassOptions, iter_frames, shot_depth_range
from .preferences import PS_AddonPreferences, addon_package, preferences  # noqa: F401 (API)
from .shot_geometry import ShotError, ShotGeometry

RESTYLED = "restyled"
CARRY = "carry"
SETTINGS_FILE = "restyle.json"
RESULT_IMAGE = "Painted Skin Restyled"
VSE_STRIP = "Painted Skin Restyled"
# The settings that make a frame's picture; frames on disk made with others are refused.
SHOT_KEYS = ("pipeline", "prompt", "negative_prompt", "seed", "width", "height", "options")

Progress = Callable[[int, int, int], None]  # (done, total, frame)


def result_path(out: Path, f: int) -> Path:
    return Path(out) / RESTYLED / f"{f:04d}.png"


def frame_done(out: Path, f: int) -> bool:
    return result_path(out, f).exists()


def carry_path(out: Path, f: int) -> Path:
    """A temporal frame's final latents (``carry/####.npy``): what resumes the chain."""
    return Path(out) / CARRY / f"{f:04d}.npy"


# Pipelines whose frames never depend on the frames before them.
STATELESS_PIPELINES = frozenset({"echo"})


class ChainBroken(ShotError):
    """A temporal frame whose previous frame is neither done nor in this run."""


def _cross_frame(options: dict | None) -> str | None:
    cf = (options or {}).get("cross_frame")
    return None if cf in (None, False, "", "off", "none") else "first" if cf is True else str(cf)


def is_temporal(pipeline: str | None, options: dict | None) -> bool:
    """Whether each frame warps the previous output (the stateful pipelines' default,
    unless ``temporal`` is false). Told from the settings alone, so that every farm
    chunk decides alike before it talks to a backend."""
    return pipeline not in STATELESS_PIPELINES and (options or {}).get("temporal", True) \
        is not False


def is_chained(pipeline: str | None, options: dict | None) -> bool:
    """Whether a frame's picture depends on frames before it (temporal, or anchored by
    cross-frame attention): such a shot is only the same when painted in order."""
    return is_temporal(pipeline, options) or (pipeline not in STATELESS_PIPELINES
                                              and _cross_frame(options) is not None)


def check_chain(out: Path, frames: list[int], start: int, pipeline: str | None,
                options: dict | None) -> None:
    """Refuse a chained shot's run that would begin a chain anywhere but at ``start``
    (the shot's first frame): its frame f continues frame f - 1, which must be on disk
    in ``out`` already or come earlier in this run. A farm chunk that runs before the
    one it continues is thus refused, rather than silently painting a different shot."""
    if not is_chained(pipeline, options):
        return
    earlier: set[int] = set()  # frames this run paints before the next one
    for f in frames:
        if f > start and f - 1 not in earlier and not frame_done(out, f) \
                and not frame_done(out, f - 1):
            raise ChainBroken(
                f"frame {f} continues the temporal chain from frame {f - 1}, which {out} "
                f"does not hold yet: restyle frames {start}-{f - 1} first (on a farm: make "
                "each chunk wait for the one before), or pass --options "
                "'{\"temporal\": false}' to paint frames independently")
        earlier.add(f)


class CarrySource:
    """``carry_for`` of a shot (see :meth:`BackendClient.start_shot`): frame f - 1's
    restyled RGB (its PNG), final latents (its ``carry`` file) and depth (kept from
    the passes sent, or computed again: the same arrays), so a resumed run or a
    restarted backend continues a temporal chain exactly. None where f - 1 has no
    carry (not temporal, not done, or a fresh start)."""

    KEEP = 8  # depths of the most recent frames sent

    def __init__(self, scene: bpy.types.Scene, out: Path, width: int, height: int,
                 engine: str = "fast", options: dict | None = None,
                 first: int | None = None, pipeline: str | None = None) -> None:
        self.scene, self.out, self.size, self.engine = scene, Path(out), (width, height), engine
        self.depths: dict[int, np.ndarray] = {}
        self.cross_frame = _cross_frame(options)
        self.first = first  # the chain's first frame: the "first" anchor
        # A temporal pipeline without latents (the skin model) carries RGB and depth only.
        self.temporal = pipeline is not None and is_temporal(pipeline, options)

    def _passes(self, f: int) -> dict[str, np.ndarray]:
        """Frame f's wire passes, computed again (the same arrays as when first sent)."""
        frame_now = self.scene.frame_current
        try:
            _, arrays = next(shot_frames(self.scene, [f], *self.size, self.engine))
        finally:
            self.scene.frame_set(frame_now)
        self.depths[f] = arrays["depth"]
        return arrays

    def primers(self, f: int) -> list[tuple[int, dict[str, np.ndarray]]]:
        """``primers_for``: with cross-frame attention a new backend session must see
        the anchor again before frame f: the run's first frame ("first"; then exact),
        or frame f - 1 with its own carry ("previous"; its own anchor is not re-run, so
        f attends to a close, not identical, copy of it)."""
        anchor = {"first": self.first, "previous": f - 1}.get(self.cross_frame or "")
        if anchor is None or anchor >= f or not frame_done(self.out, anchor):
            return []
        return [(anchor, {**self._passes(anchor), **(self(anchor) or {})})]

    def remembering(self, frames: Iterator[tuple[int, dict]]) -> Iterator[tuple[int, dict]]:
        """Pass ``frames`` on, keeping the last few frames' depth."""
        for f, arrays in frames:
            self.depths[f] = arrays["depth"]
            while len(self.depths) > self.KEEP:
                del self.depths[min(self.depths)]
            yield f, arrays

    def __call__(self, f: int) -> dict[str, np.ndarray] | None:
        from .image_io import read_image

        prev = f - 1
        lat = carry_path(self.out, prev)
        if not (frame_done(self.out, prev) and (lat.exists() or self.temporal)):
            return None
        try:
            latents = np.load(lat, allow_pickle=False) if lat.exists() else None
            rgb = read_image(result_path(self.out, prev))[..., :3]
        except (OSError, ValueError):
            return None  # damaged: the chain starts afresh here, as before carries existed
        depth = self.depths.get(prev)
        if depth is None:
            depth = self._passes(prev)["depth"]
        carry = {"carry_rgb": np.ascontiguousarray(rgb, np.uint8), "carry_depth": depth}
        if latents is not None:
            carry["carry_latents"] = latents
        return carry


# -- passes on the wire ------------------------------------------------------------------------

def wire_arrays(arrays: dict[str, np.ndarray], skeleton: tuple | None,
                width: int, height: int) -> dict[str, np.ndarray]:
    """The passes of one frame in their wire dtypes, in wire order (``wire.passes``:
    depth +inf where empty, normals in camera space, motion prev (u, v), next (u, v)
    in pixels, mask and light visibility 0/255); the skeleton is the OpenPose drawing,
    black when the shot has none."""
    out = {}
    for name, p in WIRE_PASSES.items():
        if name == "skeleton":
            out[name] = (to_wire(name, skeleton[0]) if skeleton is not None
                         else np.zeros(p.shape(height, width), p.dtype))
        elif name in arrays:
            out[name] = to_wire(name, arrays[name])
    return out


# Pipelines that paint from the canonical surface passes get them too (they cost ~130 ms
# a 512² frame, so the others do not).
PIPELINE_PASSES = {"skin": CANONICAL_PASSES}


def wire_passes(pipeline: str) -> tuple[str, ...]:
    """The passes a frame of ``pipeline`` carries."""
    return CONTROL_PASSES + PIPELINE_PASSES.get(pipeline, ())


def shot_frames(scene: bpy.types.Scene, frames: list[int], width: int, height: int,
                engine: str = "fast", passes: tuple[str, ...] = DEFAULT_PASSES
                ) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
    """(frame, wire arrays) for ``frames``, computed lazily one frame at a time."""
    if not frames:
        return
    geo = ShotGeometry(scene, width, height)
    opts = PassOptions(frames=range(min(frames), max(frames) + 1), width=width, height=height,
                       engine=engine, passes=passes)
    opts.validate()
    for f, _, arrays, skel in iter_frames(scene, geo, opts, frames):
        yield f, wire_arrays(arrays, skel, width, height)


def pipeline_options(scene: bpy.types.Scene, pipeline: str, options: dict) -> dict:
    """What a pipeline needs from the scene besides the passes: the skin model is tied
    to one character, so its OPEN carries the scene character's fingerprint (a model
    trained for another character is refused before any frame)."""
    if pipeline != "skin" or "character" in options:
        return options
    from .shot_geometry import _find_armature, _render_meshes
    from .skin_dataset import character_fingerprint

    arm = _find_armature(_render_meshes(scene))
    if arm is None:
        raise ShotError("the skin pipeline paints a rigged character: the scene's meshes are "
                        "deformed by no armature")
    return {**options, "character": character_fingerprint(arm)}


def shot_options(scene: bpy.types.Scene, out: Path, width: int, height: int,
                 options: dict | None) -> dict:
    """``options`` plus the shot's depth range (``depth_near``/``depth_far``).

    The backend turns depth into its control image with these; without them it
    would fix them from the first frame *it* sees, so a resumed, reconnected or
    failed-over shot would be quantised differently and jump. The range comes
    from the whole scene range (like the passes' depth16), or from this
    folder's settings file when a run already fixed it.
    """
    options = dict(options or {})
    if "depth_near" in options and "depth_far" in options:
        return options
    path = out / SETTINGS_FILE
    try:
        old = json.loads(path.read_text()).get("options", {}) if path.exists() else {}
    except (OSError, json.JSONDecodeError):
        old = {}
    if "depth_near" in old and "depth_far" in old:
        near, far = old["depth_near"], old["depth_far"]
    else:
        frame_now = scene.frame_current
        try:
            geo = ShotGeometry(scene, width, height)
            near, far = shot_depth_range(geo, range(scene.frame_start, scene.frame_end + 1))
        finally:
            scene.frame_set(frame_now)
    options.setdefault("depth_near", float(near))
    options.setdefault("depth_far", float(far))
    return options


def _settings_diff(out: Path, settings: dict) -> list[str]:
    """The shot settings that differ from the folder's settings file (none: no file)."""
    path = out / SETTINGS_FILE
    if not path.exists():
        return []
    try:
        old = read_json(path, "restyle settings")
    except ValueError as e:
        raise ShotError(str(e)) from None
    return [k for k in SHOT_KEYS if old.get(k) != settings.get(k)]


def _check_settings(out: Path, settings: dict) -> FolderRun:
    """Refuse to mix frames made with other settings in one folder: frames on disk,
    or another run writing it now with other settings. Returns the folder lock this
    run holds until it is closed (runs with the same settings share the folder)."""
    def write() -> None:
        diff = _settings_diff(out, settings)
        if diff and any((out / RESTYLED).glob("[0-9]*.png")):
            raise ShotError(f"{out} holds frames restyled with other settings "
                            f"({', '.join(diff)}): use another output folder or delete it")
        write_json_atomic(out / SETTINGS_FILE, settings, indent=1)

    def busy() -> ShotError:
        return ShotError(f"another restyle with other settings "
                         f"({', '.join(_settings_diff(out, settings))}) is writing into "
                         f"{out} now: wait for it to finish, or use another output folder")

    return join_run(out, lambda: not _settings_diff(out, settings), write, busy)


def _size(size: int | tuple[int, int]) -> tuple[int, int]:
    return (size, size) if isinstance(size, int) else (int(size[0]), int(size[1]))


def restyle_shot(scene: bpy.types.Scene, out_dir: str | Path, url: str = DEFAULT_URL,
                 frames: Iterable[int] | None = None, size: int | tuple[int, int] = 512,
                 pipeline: str = "echo", prompt: str = "", seed: int = 0,
                 negative_prompt: str = "", options: dict | None = None,
                 refs: Iterable[np.ndarray] = (), keys=None, engine: str = "fast",
                 client: BackendClient | None = None, timeout_s: float = 30.0,
                 progress: Progress | None = None, cancelled: Callable[[], bool] | None = None,
                 on_dead: Callable[[], None] | None = None,
                 chain_start: int | None = None) -> dict:
    """Restyle ``frames`` (default: the scene range) into ``out_dir/restyled``;
    blocking. Frames already on disk are skipped. ``size``: int or (width, height).
    ``chain_start``: where a temporal shot's chain begins (default: the first frame
    of ``frames``); a run that would begin it elsewhere is refused (:func:`check_chain`),
    so farm chunks given the shot's first frame paint what one run would.
    Returns a summary (frames, written, skipped, dropped, reconnects, seconds)."""
    out = check_writable(out_dir, "restyle output folder")
    width, height = _size(size)
    frames = list(frames if frames is not None else range(scene.frame_start,
                                                            scene.frame_end + 1))
    if frames:  # the same check as the passes': frames within the scene's range
        check_in_scene(range(min(frames), max(frames) + 1), scene.frame_start, scene.frame_end)
    options = pipeline_options(scene, pipeline, shot_options(scene, out, width, height,
                                                             options))
    settings = {"pipeline": pipeline, "prompt": prompt, "negative_prompt": negative_prompt,
                "seed": seed, "width": width, "height": height, "options": options}
    start = frames[0] if chain_start is None or not frames else chain_start
    check_chain(out, frames, start, pipeline, options)  # before anything is written
    with _check_settings(out, settings):  # held while this run writes the folder
        todo = [f for f in frames if not frame_done(out, f)]
        done = len(frames) - len(todo)
        summary = {"frames": len(frames), "skipped": done, "written": 0, "dropped": 0,
                   "reconnects": 0, "seconds": 0.0, "out": str(out / RESTYLED)}
        if progress:
            progress(done, len(frames), frames[0] if frames else 0)
        if not todo:
            return summary
        (out / RESTYLED).mkdir(parents=True, exist_ok=True)
        own = client is None
        if client is None:
            client = BackendClient(url, keys=keys, timeout_s=timeout_s, on_dead=on_dead)
        frame_now = scene.frame_current
        t0 = time.monotonic()
        carry = CarrySource(scene, out, width, height, engine, options, start, pipeline)

        def on_result(r: Result) -> None:
            nonlocal done
            write_result(out, r, width, height)
            done += 1
            summary["written"] += 1
            if progress:
                progress(done, len(frames), r.frame)

        try:
            client.open(pipeline, width, height, prompt=prompt,
                        negative_prompt=negative_prompt, seed=seed, options=options, refs=refs)
            passes = shot_frames(scene, todo, width, height, engine, wire_passes(pipeline))
            run = client.run_shot(carry.remembering(passes), on_result, cancelled=cancelled,
                                  carry_for=carry, primers_for=carry.primers)
            summary["dropped"] = run["dropped"]
            summary["reconnects"] = run["reconnects"]
        finally:
            scene.frame_set(frame_now)
            if own:
                client.close()
        summary["seconds"] = time.monotonic() - t0
        return summary


def write_result(out: Path, r: Result, width: int, height: int) -> Path:
    """Write one returned frame atomically (PNG, top row first); a temporal frame's
    latents first (the PNG marks the frame done)."""
    from .image_io import write_png

    rgb = np.asarray(r.rgb)
    if rgb.dtype != np.uint8 or rgb.shape != (height, width, 3):
        raise BackendError("bad_array", f"frame {r.frame}: expected uint8 ({height}, {width}, "
                                        f"3), got {rgb.dtype} {rgb.shape}", frame=r.frame)
    latents = r.extra.get("carry_latents")
    if latents is not None:
        write_npy_atomic(carry_path(out, r.frame), latents)
    return write_png(result_path(out, r.frame), rgb)


# -- local backend ---------------------------------------------------------------------------

_LOCAL: dict = {"proc": None, "url": None, "log": None, "python": None}
_STATUS = {"text": "not connected", "ok": False, "log_tail": ""}


def _has_own_package(python: str) -> bool:
    """Whether ``python`` imports a ``painted_skin`` of its own (pip or editable install:
    then it runs that one, with its backend extras, rather than the extension's files)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    try:
        proc = subprocess.run([python, "-c", "import importlib.util, sys; sys.exit(0 if "
                               "importlib.util.find_spec('painted_skin') else 3)"],
                              env=env, capture_output=True, timeout=30, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0


def _backend_env(python: str | None = None) -> dict[str, str]:
    """The child's environment: inside an extension (bl_ext.<repo>.painted_skin) its
    folder is named painted_skin, so its parent on PYTHONPATH makes `-m painted_skin`
    import these very files, unless ``python`` has a painted_skin installed (the
    editable install needs nothing)."""
    env = dict(os.environ)
    models = _scene_models()
    if models:  # the registry the backend serves: its own plus this scene's trained model
        env["PAINTED_SKIN_SKIN_MODELS"] = str(_registry_with(models))
    root = Path(__file__).resolve().parents[2]
    if root.name == "painted_skin" and not (python and _has_own_package(python)):
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(root.parent),
                                                         env.get("PYTHONPATH")) if p)
    return env


def _scene_models() -> dict[str, str]:
    try:
        from .skin_ui import scene_models

        return scene_models()
    except (AttributeError, ImportError):  # no scene (bpy module before a file is open)
        return {}


def _registry_with(models: dict[str, str]) -> Path:
    """A skin-model registry file: the embedded one's models plus ``models``."""
    reg = Path(__file__).resolve().parents[2] / "backend" / "skin" / "registry.toml"
    base = os.environ.get("PAINTED_SKIN_SKIN_MODELS") or str(reg)
    lines = []
    try:
        import tomllib

        with open(base, "rb") as fh:
            for name, table in tomllib.load(fh).get("models", {}).items():
                folder = Path(os.path.expanduser(table["path"]))
                folder = folder if folder.is_absolute() else Path(base).parent / folder
                lines.append((name, str(folder.resolve())))
    except (OSError, ValueError, KeyError, TypeError):
        pass
    lines += [(n, str(Path(f).resolve())) for n, f in models.items()]
    path = Path(tempfile.gettempdir()) / f"painted-skin-models-{os.getpid()}.toml"
    path.write_text("".join(f"[models.{n}]\npath = {json.dumps(f)}\n\n" for n, f in lines))
    return path


def backend_python(configured: str) -> str:
    """The Python that runs the local backend: the preference, or, in the bpy module
    (a venv's Python runs Blender), that Python. Blender's own Python has neither torch
    nor the bundled wheels on a child's path, so a Blender with no preference set gets
    a BackendError saying how to set one, before anything starts."""
    if configured:
        return bpy.path.abspath(configured)
    if not bpy.app.binary_path:
        return sys.executable
    raise BackendError("no_python", no_python_message())


def _bind_url(url: str) -> str:
    return url.replace("localhost", "127.0.0.1")


def launch_local_backend(python: str, url: str, command: list[str] | None = None
                         ) -> subprocess.Popen:
    """Start ``<python> -m painted_skin.backend serve --bind URL`` (the
    handler behind ``painted-skin serve``, without the rest of the CLI) and return
    at once; its output goes to a log file named in error messages."""
    python = python or sys.executable
    if not command and not os.path.isfile(python):
        raise BackendError("no_python", f"Backend Python {python!r} does not exist: set "
                                        "Preferences > Add-ons > Painted Skin > Backend Python "
                                        "to the python of an environment with "
                                        "painted-skin[backend] installed")
    cmd = command or [python, "-m", "painted_skin.backend", "serve",
                      "--bind", _bind_url(url)]
    tail = re.sub(r"[^\w.-]", "_", url.rsplit(":", 1)[-1])  # a port, or an ipc:// path
    log = Path(tempfile.gettempdir()) / f"painted-skin-backend-{tail}.log"
    with open(log, "ab") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT,
                                env=_backend_env(None if command else python),
                                stdin=subprocess.DEVNULL)
    _LOCAL.update(proc=proc, url=url, log=log, python=python, command=command)
    return proc


def start_local_backend(python: str, url: str = DEFAULT_URL, timeout_s: float = 60.0,
                        command: list[str] | None = None) -> dict:
    """Launch the local backend and wait until it answers PING; returns the PONG.
    Raises BackendError saying why (exited early, with its log; or no answer)."""
    stop_local_backend()
    proc = launch_local_backend(python, url, command)
    deadline = time.monotonic() + timeout_s
    with BackendClient(url, timeout_s=1.0) as c:
        while True:
            code = proc.poll()
            if code is not None:
                raise BackendError("exited", exit_message(proc))
            try:
                return c.ping(timeout_s=min(1.0, max(0.1, deadline - time.monotonic())))
            except BackendUnavailable:
                if time.monotonic() > deadline:
                    stop_local_backend()
                    raise BackendError("timeout", f"the backend did not answer within "
                                                  f"{timeout_s:.0f} s; log: {_LOCAL['log']}"
                                       ) from None


def _log_tail(n: int = 2000) -> str:
    log = _LOCAL.get("log")
    if not log or not Path(log).exists():
        return ""
    return Path(log).read_text(errors="replace")[-n:]


def exit_message(proc: subprocess.Popen) -> str:
    """Why the local backend died: its command, its exit code and its log's last lines
    (a missing package, a port in use...)."""
    return (f"the backend exited with code {proc.returncode} ({' '.join(map(str, proc.args))})"
            f"; log {_LOCAL.get('log')}:\n{_log_tail()}")


def restart_local_if_dead() -> None:
    """``on_dead`` hook: relaunch the local backend we started if it has exited (the
    client's reconnection then finds it); other backends are left alone."""
    proc = _LOCAL.get("proc")
    if proc is not None and proc.poll() is not None:
        launch_local_backend(_LOCAL["python"], _LOCAL["url"], _LOCAL.get("command"))


def stop_local_backend() -> None:
    proc = _LOCAL.get("proc")
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    _LOCAL["proc"] = None


# -- preferences, settings ---------------------------------------------------------------------

class PS_RestyleSettings(bpy.types.PropertyGroup):
    url: StringProperty(name="URL", default="",
                        description="Backend address (empty: the add-on preferences' URL)")
    pipeline: StringProperty(name="Pipeline", default="echo")
    model: StringProperty(name="Model", default="",
                          description="Model registry name (empty: the pipeline's default)")
    steps: IntProperty(name="Steps", default=4, min=1, max=100,
                       description="Denoising steps (4-8 with a few-step scheduler)")
    temporal: BoolProperty(name="Temporal", default=True,
                           description="Start each frame from the previous one warped by the "
                                       "motion vectors (steadier frames)")
    cross_frame: EnumProperty(name="Cross-Frame", default="off", items=[
        ("off", "Off", "Plain attention"),
        ("first", "First Frame", "Every frame also attends to the shot's first frame"),
        ("previous", "Previous Frame", "Every frame also attends to the frame before")])
    extra_options: StringProperty(name="Extra Options", default="",
                                  description='More pipeline options as a JSON object, e.g. '
                                              '{"scheduler": "lcm", "controlnets": ["depth"]}')
    prompt: StringProperty(name="Prompt", default="")
    negative_prompt: StringProperty(name="Negative", default="")
    seed: IntProperty(name="Seed", default=0, min=0)
    width: IntProperty(name="Width", default=512, min=16, max=8192)
    height: IntProperty(name="Height", default=512, min=16, max=8192)
    out_dir: StringProperty(name="Output", subtype="DIR_PATH", default="//restyle/",
                            options=PATH_OPTIONS)
    use_vse: BoolProperty(name="Add VSE Strip", default=False,
                          description="Also put the result in the Sequencer")


def _settings(context) -> PS_RestyleSettings:
    return context.scene.painted_skin_restyle


def backend_url(context) -> str:
    s, p = _settings(context), preferences(context)
    return s.url or (p.url if p is not None else "") or DEFAULT_URL


def _keys(context) -> str | None:
    p = preferences(context)
    return bpy.path.abspath(p.keys_dir) if p is not None and p.keys_dir else None


def _out(context) -> Path:
    return output_folder(_settings(context).out_dir, "restyle")


def show_results(context, out: Path, frames: list[int], use_vse: bool = False
                 ) -> bpy.types.Image | None:
    """The restyled frames as an image sequence in every Image Editor (and a VSE strip)."""
    have = [f for f in frames if frame_done(out, f)]
    if not have:
        return None
    first = result_path(out, have[0])
    img = bpy.data.images.get(RESULT_IMAGE)
    if img is not None:
        bpy.data.images.remove(img)
    img = bpy.data.images.load(str(first), check_existing=False)
    img.name = RESULT_IMAGE
    img.source = "SEQUENCE"
    for area in context.screen.areas if context.screen else ():
        if area.type == "IMAGE_EDITOR":
            space = area.spaces.active
            space.image = img
            iu = space.image_user
            iu.frame_start, iu.frame_duration = have[0], have[-1] - have[0] + 1
            iu.frame_offset, iu.use_auto_refresh = have[0] - 1, True
    if use_vse:
        scene = context.scene
        ed = scene.sequence_editor or scene.sequence_editor_create()
        for old in [s for s in ed.strips if s.name.startswith(VSE_STRIP)]:
            ed.strips.remove(old)
        # One strip per run of consecutive frames, so a missing frame leaves a gap
        # instead of shifting every later frame.
        runs: list[list[int]] = []
        for f in have:
            if runs and f == runs[-1][-1] + 1:
                runs[-1].append(f)
            else:
                runs.append([f])
        for run in runs:
            strip = ed.strips.new_image(VSE_STRIP, str(result_path(out, run[0])), channel=2,
                                        frame_start=run[0])
            for f in run[1:]:
                strip.elements.append(result_path(out, f).name)
    return img


# -- operators ---------------------------------------------------------------------------------

def error_text(e: Exception) -> str:
    """The message an operator reports; a backend that only has the echo pipeline was
    started with a Python lacking the diffusion packages: say where to fix that."""
    text = str(e)
    if isinstance(e, BackendError) and "unknown pipeline" in e.message and \
            e.message.rstrip().endswith(": echo"):
        text += (" (the backend's Python has no diffusion packages: set Preferences > "
                 "Add-ons > Painted Skin > Backend Python to a Python with "
                 "painted-skin[backend] installed, e.g. .venv-backend/bin/python, and start "
                 "the backend again)")
    return text


def restyle_args(s: PS_RestyleSettings) -> dict:
    """The panel's settings as :func:`restyle_shot` arguments (options: the panel's
    fields, then the Extra Options JSON over them)."""
    options: dict = {"steps": s.steps, "temporal": s.temporal}
    if s.model:
        options["model"] = s.model
    if s.cross_frame != "off":
        options["cross_frame"] = s.cross_frame
    if s.extra_options.strip():
        try:
            extra = json.loads(s.extra_options)
        except ValueError as e:
            raise ShotError(f"Extra Options is not valid JSON ({e}): write an object, e.g. "
                            '{"scheduler": "lcm"}') from None
        if not isinstance(extra, dict):
            raise ShotError('Extra Options must be a JSON object, e.g. {"scheduler": "lcm"}')
        options.update(extra)
    return {"pipeline": s.pipeline, "prompt": s.prompt, "negative_prompt": s.negative_prompt,
            "seed": s.seed, "options": options}


class PS_OT_restyle(bpy.types.Operator):
    """Restyle the scene's frame range through the backend (Esc cancels; re-running resumes)"""

    bl_idname = "painted_skin.restyle"
    bl_label = "Restyle Shot"

    _timer = None

    def _args(self, context) -> dict:
        return restyle_args(_settings(context))

    def execute(self, context):
        # Headless (blender -b, the bpy module): no event loop, run blocking.
        s = _settings(context)
        try:
            summary = restyle_shot(context.scene, _out(context), backend_url(context),
                                   size=(s.width, s.height), keys=_keys(context),
                                   on_dead=restart_local_if_dead, **self._args(context))
        except (ShotError, BackendError, UnwritableOutput, OSError) as e:
            self.report({"ERROR"}, error_text(e))
            return {"CANCELLED"}
        self.report({"INFO"}, f"restyled: {summary['written'] + summary['skipped']}/"
                              f"{summary['frames']} frames in {summary['out']}")
        return {"FINISHED"}

    def invoke(self, context, event):
        if context.window is None:
            return self.execute(context)
        s, scene = _settings(context), context.scene
        self._frames = list(range(scene.frame_start, scene.frame_end + 1))
        try:
            args = self._args(context)
            self._out = _out(context)
            args["options"] = pipeline_options(scene, args["pipeline"], shot_options(
                scene, self._out, s.width, s.height, args.get("options")))
            self._run_lock = _check_settings(self._out, {**args, "width": s.width,
                                                         "height": s.height})
            todo = [f for f in self._frames if not frame_done(self._out, f)]
            self._done, self._frame_now = len(self._frames) - len(todo), scene.frame_current
            if not todo:
                self._run_lock.close()
                show_results(context, self._out, self._frames, s.use_vse)
                self.report({"INFO"}, "restyle: every frame is already done")
                return {"FINISHED"}
            self._client = BackendClient(backend_url(context), keys=_keys(context),
                                         on_dead=restart_local_if_dead)
            pipeline = args.pop("pipeline")
            self._client.open(pipeline, s.width, s.height, wait=False, **args)
            (self._out / RESTYLED).mkdir(parents=True, exist_ok=True)
            w, h = s.width, s.height
            carry = CarrySource(scene, self._out, w, h, options=args.get("options"),
                                first=self._frames[0], pipeline=pipeline)
            frames = shot_frames(scene, todo, w, h, passes=wire_passes(pipeline))
            self._client.start_shot(carry.remembering(frames),
                                    lambda r: self._on_result(r, w, h), carry_for=carry,
                                    primers_for=carry.primers)
        except (ShotError, BackendError, UnwritableOutput, OSError) as e:
            if getattr(self, "_run_lock", None) is not None:
                self._run_lock.close()
            if getattr(self, "_client", None) is not None:
                self._client.close()
                self._client = None
            self.report({"ERROR"}, error_text(e))
            return {"CANCELLED"}
        wm = context.window_manager
        wm.progress_begin(0, len(self._frames))
        wm.progress_update(self._done)
        self._timer = wm.event_timer_add(0.05, window=context.window)
        wm.modal_handler_add(self)
        return {"RUNNING_MODAL"}

    def _on_result(self, r: Result, width: int, height: int) -> None:
        write_result(self._out, r, width, height)
        self._done += 1

    def modal(self, context, event):
        shot = self._client.shot
        if event.type == "ESC" and event.value == "PRESS":
            self._client.cancel()
            context.workspace.status_text_set("Painted Skin restyle: cancelling…")
            return {"RUNNING_MODAL"}
        if event.type != "TIMER":
            return {"PASS_THROUGH"}
        try:
            # One new frame per tick: computing passes costs ~0.1 s at 512².
            self._client.poll_once(0, max_send=1)
        except Exception as e:  # disk full, a bad frame...: never leave the UI half-done
            self.report({"ERROR"}, str(e))
            return self._finish(context)
        if shot.error is not None:
            self.report({"ERROR"}, error_text(shot.error))
            return self._finish(context)
        context.window_manager.progress_update(self._done)
        step = (f", frame {shot.last_progress[0]} step {shot.last_progress[1]}/"
                f"{shot.last_progress[2]}" if shot.last_progress else "")
        context.workspace.status_text_set(
            f"Painted Skin restyle: {self._done}/{len(self._frames)} frames{step} — Esc to stop")
        if shot.done:
            return self._finish(context)
        return {"RUNNING_MODAL"}

    def _finish(self, context):
        wm = context.window_manager
        wm.event_timer_remove(self._timer)
        wm.progress_end()
        context.workspace.status_text_set(None)
        shot = self._client.shot
        self._client.close(timeout_s=0.2)  # the UI must not wait on a dead backend
        self._run_lock.close()
        context.scene.frame_set(self._frame_now)
        show_results(context, self._out, self._frames, _settings(context).use_vse)
        ok = shot is not None and shot.error is None and not shot.cancelled
        self.report({"INFO"} if ok else {"WARNING"},
                    f"restyle: {self._done}/{len(self._frames)} frames"
                    + ("" if ok else " (stopped; run again to resume)"))
        return {"FINISHED"} if ok else {"CANCELLED"}


class PS_OT_backend_connect(bpy.types.Operator):
    """Ping the backend at the URL and show its status"""

    bl_idname = "painted_skin.backend_connect"
    bl_label = "Connect"

    url: StringProperty(name="URL", default="", description="Empty: the panel's URL")
    timeout: FloatProperty(name="Timeout", default=3.0, min=0.1, description="Seconds")

    def execute(self, context):
        url = self.url or backend_url(context)
        if self.url:
            _settings(context).url = self.url
        try:
            with BackendClient(url, keys=_keys(context), timeout_s=self.timeout) as c:
                st = c.status()
        except BackendError as e:
            _STATUS.update(text=f"no backend at {url}", ok=False)
            self.report({"ERROR"}, str(e))
            return {"CANCELLED"}
        _STATUS.update(text=status_line(url, st), ok=True)
        self.report({"INFO"}, _STATUS["text"])
        return {"FINISHED"}


def status_line(url: str, st: dict) -> str:
    devices = ", ".join(map(str, st.get("devices") or [])) or "?"
    return (f"{url}: v{st.get('version', '?')}, {devices}, queue {st.get('queue_depth', 0)}, "
            f"{st.get('sessions', 0)} session(s)")


def _log_lines(text: str, n: int = 6) -> str:
    return "\n".join(text.strip().splitlines()[-n:])


def _redraw(context) -> None:
    for window in getattr(context.window_manager, "windows", []):
        for area in window.screen.areas:
            if area.type in ("VIEW_3D", "PREFERENCES"):
                area.tag_redraw()


class PS_OT_backend_start(bpy.types.Operator):
    """Start `painted-skin serve` here with the preferences' Backend Python; the panel shows
    its progress, and its log's last lines if it fails"""

    bl_idname = "painted_skin.backend_start"
    bl_label = "Start Local Backend"

    timeout: IntProperty(name="Timeout", default=60, min=1)

    def _python(self, context) -> str:
        p = preferences(context)
        return backend_python(p.python if p is not None else "")

    def _failed(self, e: BackendError):
        _STATUS.update(text="local backend failed to start", ok=False,
                       log_tail=_log_lines(e.message if e.code == "exited" else _log_tail()))
        self.report({"ERROR"}, str(e))
        return {"CANCELLED"}

    def execute(self, context):
        # Headless (blender -b, the bpy module): no event loop, wait here.
        try:
            start_local_backend(self._python(context), backend_url(context), self.timeout)
        except BackendError as e:
            return self._failed(e)
        _STATUS["log_tail"] = ""
        return bpy.ops.painted_skin.backend_connect()

    def invoke(self, context, event):
        if context.window is None:
            return self.execute(context)
        url = backend_url(context)
        try:
            stop_local_backend()
            self._proc = launch_local_backend(self._python(context), url)
        except BackendError as e:
            return self._failed(e)
        self._client = BackendClient(url, timeout_s=1.0)
        self._t0 = time.monotonic()
        _STATUS.update(text="starting local backend…", ok=False, log_tail="")
        wm = context.window_manager
        self._timer = wm.event_timer_add(0.25, window=context.window)
        wm.modal_handler_add(self)
        return {"RUNNING_MODAL"}

    def modal(self, context, event):
        if event.type != "TIMER":
            return {"PASS_THROUGH"}
        waited = time.monotonic() - self._t0
        outcome = None
        if self._proc.poll() is not None:
            outcome = self._failed(BackendError("exited", exit_message(self._proc)))
        else:
            try:
                self._client.ping(timeout_s=0.05)
                outcome = "up"
            except BackendUnavailable:
                if waited > self.timeout:
                    stop_local_backend()
                    outcome = self._failed(BackendError(
                        "timeout", f"the backend did not answer within {self.timeout} s; "
                                   f"log: {_LOCAL['log']}"))
        if outcome is None:
            _STATUS["text"] = f"starting local backend… {waited:.0f} s"
            _redraw(context)
            return {"RUNNING_MODAL"}
        context.window_manager.event_timer_remove(self._timer)
        self._client.close(timeout_s=0.1)
        _redraw(context)
        if outcome == "up":
            return bpy.ops.painted_skin.backend_connect()
        return outcome


class PS_OT_backend_stop(bpy.types.Operator):
    """Stop the local backend started from this Blender"""

    bl_idname = "painted_skin.backend_stop"
    bl_label = "Stop Local Backend"

    def execute(self, context):
        stop_local_backend()
        _STATUS.update(text="local backend stopped", ok=False)
        return {"FINISHED"}


class PS_PT_restyle(bpy.types.Panel):
    bl_idname = "PS_PT_restyle"
    bl_label = "Restyle"
    bl_space_type = "VIEW_3D"
    bl_region_type = "UI"
    bl_category = "Painted Skin"

    def draw(self, context):
        s = _settings(context)
        col = self.layout.column()
        col.label(text=_STATUS["text"], icon="LINKED" if _STATUS["ok"] else "UNLINKED")
        for line in _STATUS.get("log_tail", "").splitlines():
            col.label(text=line[:120])
        p = preferences(context)
        if bpy.app.binary_path and p is not None and not p.python:
            col.label(text="Set Preferences > Add-ons > Painted Skin > Backend Python",
                      icon="INFO")
            col.label(text="to start a local backend (or Connect to a running one)")
        row = col.row(align=True)
        row.prop(s, "url", text="")
        row.operator("painted_skin.backend_connect", text="", icon="FILE_REFRESH")
        row = col.row(align=True)
        proc = _LOCAL.get("proc")
        if proc is not None and proc.poll() is None:
            row.operator("painted_skin.backend_stop", icon="CANCEL")
        else:
            row.operator("painted_skin.backend_start", icon="PLAY")
        col.separator()
        col.prop(s, "pipeline")
        col.prop(s, "model")
        col.prop(s, "prompt")
        col.prop(s, "negative_prompt")
        row = col.row(align=True)
        row.prop(s, "seed")
        row.prop(s, "steps")
        row = col.row(align=True)
        row.prop(s, "temporal")
        row.prop(s, "cross_frame", text="")
        col.prop(s, "extra_options")
        row = col.row(align=True)
        row.prop(s, "width")
        row.prop(s, "height")
        col.prop(s, "out_dir")
        col.prop(s, "use_vse")
        col.operator("painted_skin.restyle", icon="BRUSH_DATA")


CLASSES = (PS_RestyleSettings, PS_OT_restyle, PS_OT_backend_connect,
           PS_OT_backend_start, PS_OT_backend_stop, PS_PT_restyle)


def register() -> None:
    register_classes(CLASSES, painted_skin_restyle=PS_RestyleSettings)


def unregister() -> None:
    stop_local_backend()
    unregister_classes(CLASSES, "painted_skin_restyle")
