"""The restyle output folder's layout and rules: where frames and carries go, the
settings file that keeps one folder to one set of settings (with the folder lock that
runs sharing it hold), and the temporal chain check.

The files on disk are the source of truth: a frame whose PNG exists is done, so a
re-run (or a farm chunk) resumes; a chained shot's frame needs the frame before it.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterable, Iterator
from contextvars import ContextVar
from pathlib import Path

import numpy as np

from ....wire.options import CrossFrameError
from ....wire.options import cross_frame_mode as wire_cross_frame_mode
from ...core.files.atomic import read_json, write_json_atomic
from ...core.files.folder_lock import FolderRun, hold_tag, join_run, tag_in_use, update_settings
from ...core.files.frame_patterns import FramePattern, parse_frame_pattern
from ..passes.geometry import ShotError

RESTYLED = "restyled"
CARRY = "carry"
SETTINGS_FILE = "restyle.json"
# The settings that make a frame's picture; frames on disk made with others are refused.
SHOT_KEYS = ("pipeline", "prompt", "negative_prompt", "seed", "width", "height", "options",
             "refs")
# Pipelines whose frames never depend on the frames before them.
STATELESS_PIPELINES = frozenset({"echo"})


#: Where a run writes its frames inside the output folder: ``restyled/####.png``
#: unless the run was given a farm's pattern (see :func:`frame_names`).
DEFAULT_FRAMES = FramePattern(RESTYLED, "", 4, ".png")
PATTERN_KEY = "frame_pattern"  # in the settings file: one folder, one naming
MODEL_KEY = "model_id"  # in the settings file: the backend's identity of the model that
# painted the frames (OPENED's ``model_id``), kept across runs that share the settings
_FRAMES: ContextVar[FramePattern] = ContextVar("restyle_frames", default=DEFAULT_FRAMES)


def frames_pattern(text: str, folder: str = RESTYLED) -> FramePattern:
    """A restyle frame pattern (``shot_####``, ``shot_####.png``) inside ``folder``
    of the output folder ("": the output folder itself)."""
    p = parse_frame_pattern(text, ".png", "--frame-pattern")
    if p.folder:
        raise ShotError(f"--frame-pattern {text!r} holds a folder: give only the file "
                        "name (e.g. shot_####.png), or put the pattern at the end of --out")
    return FramePattern(folder, p.prefix, p.digits, p.suffix)


@contextlib.contextmanager
def frame_names(pattern: FramePattern) -> Iterator[FramePattern]:
    """Name the frames of the restyle run(s) inside this block by ``pattern``. The
    layout functions below take (out, frame) everywhere a run reads or writes a
    frame; the pattern belongs to the run, so it is set once around it."""
    token = _FRAMES.set(pattern)
    try:
        yield pattern
    finally:
        _FRAMES.reset(token)


def result_path(out: Path, f: int) -> Path:
    return _FRAMES.get().path(out, f)


def frame_done(out: Path, f: int) -> bool:
    return result_path(out, f).exists()


def carry_path(out: Path, f: int) -> Path:
    """A temporal frame's final latents (``carry/####.npy``): what resumes the chain."""
    return Path(out) / CARRY / f"{f:04d}.npy"


class ChainBroken(ShotError):
    """A temporal frame whose previous frame is neither done nor in this run."""


def cross_frame_mode(options: dict | None) -> str | None:
    """The cross-frame attention anchor of ``options`` ("first", "previous"), None: off
    (the wire's vocabulary). A value outside it counts as anchored: the backend refuses
    it on OPEN, and until then the shot is treated as one painted in order."""
    cf = (options or {}).get("cross_frame")
    try:
        return wire_cross_frame_mode(cf)
    except CrossFrameError:
        return str(cf)


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
                                              and cross_frame_mode(options) is not None)


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


def shot_settings(pipeline: str, prompt: str, negative_prompt: str, seed: int, width: int,
                  height: int, options: dict, refs: Iterable = ()) -> dict:
    """What a folder's frames were painted with (:data:`SHOT_KEYS`), as ``restyle.json``
    records it; the references only when there are some (older folders have none)."""
    settings = {"pipeline": pipeline, "prompt": prompt, "negative_prompt": negative_prompt,
                "seed": seed, "width": width, "height": height, "options": options}
    key = refs_key(refs)
    return {**settings, "refs": key} if key else settings


def refs_key(refs: Iterable) -> str | None:
    """The reference images as a shot setting (``settings["refs"]``): their digest and
    how the pipelines combine them (a weighted mean of their embeddings), so frames
    painted with other references, or combined otherwise, are never resumed into.
    None without references (the key is then left out, as in older folders)."""
    h, n = hashlib.sha256(), 0
    for ref in refs:
        a = np.ascontiguousarray(ref)
        h.update(f"{a.dtype}{a.shape}".encode())
        h.update(a.tobytes())
        n += 1
    return f"mean:{n}:{h.hexdigest()[:32]}" if n else None


def _settings_diff(out: Path, settings: dict) -> list[str]:
    """The shot settings that differ from the folder's settings file (none: no file)."""
    if not (out / SETTINGS_FILE).exists():
        return []
    old = _stamp(out)
    # the frame names too: two runs naming frames otherwise must not share the folder
    return [k for k in (*SHOT_KEYS, PATTERN_KEY) if old.get(k) != settings.get(k)]


def _check_names(out: Path, names: FramePattern) -> None:
    """Refuse a run naming its frames otherwise than the frames already in ``out``:
    a resumed farm task would not see them, and paint the shot a second time."""
    path = out / SETTINGS_FILE
    if not path.exists():
        return
    try:
        old = read_json(path, "restyle settings").get(PATTERN_KEY) or DEFAULT_FRAMES.text()
    except ValueError as e:
        raise ShotError(str(e)) from None
    if old != names.text():
        raise ShotError(f"{out} holds frames named {old} (this run: {names.text()}): "
                        f"pass --frame-pattern as before, or use another output folder")


def check_settings(out: Path, settings: dict) -> FolderRun:
    """Refuse to mix frames made with other settings in one folder: frames on disk,
    or another run writing it now with other settings. Returns the folder lock this
    run holds until it is closed (runs with the same settings share the folder)."""
    names = _FRAMES.get()
    _check_names(out, names)
    if names != DEFAULT_FRAMES:
        settings = {**settings, PATTERN_KEY: names.text()}

    def write() -> None:
        diff = _settings_diff(out, settings)
        if diff and any((out / names.folder).glob(names.glob())):
            raise ShotError(f"{out} holds frames restyled with other settings "
                            f"({', '.join(diff)}): use another output folder or delete it")
        kept = {} if diff else {k: v for k, v in _stamp(out).items() if k == MODEL_KEY}
        write_json_atomic(out / SETTINGS_FILE, {**settings, **kept}, indent=1)

    def busy() -> ShotError:
        return ShotError(f"another restyle with other settings "
                         f"({', '.join(_settings_diff(out, settings))}) is writing into "
                         f"{out} now: wait for it to finish, or use another output folder")

    return join_run(out, lambda: not _settings_diff(out, settings), write, busy)


def _stamp(out: Path) -> dict:
    """The folder's settings file ({}: none)."""
    path = out / SETTINGS_FILE
    if not path.exists():
        return {}
    try:
        stamp = read_json(path, "restyle settings")
    except ValueError as e:
        raise ShotError(str(e)) from None
    if not isinstance(stamp, dict) or not isinstance(stamp.get(MODEL_KEY, ""), str):
        raise ShotError(f"the restyle settings {str(path)!r} are damaged (not a table, or its "
                        f"{MODEL_KEY!r} is not text): delete the file, or restyle into "
                        "another folder")
    return stamp


class ModelChanged(ShotError):
    """The frames on disk were painted by another version of the model."""


def check_model(out: Path, model_id: str | None, model: str, run: FolderRun) -> None:
    """Refuse to add frames painted by another version of the model to those in ``out``:
    the backend's ``model_id`` (OPENED) against the one the settings file recorded (a
    skin model retrained into the same folder, weights swapped behind a registry name
    keep every setting, not the picture). Records it when the folder has none yet;
    a backend that tells none (an older one) is not checked. A run that another run
    with another version is writing now is refused too, frames or not (farm chunks
    starting together on two backends). ``run``: this run's hold on the folder
    (:func:`check_settings`); call it after OPEN and before any frame is written."""
    if not model_id:
        return

    def update() -> None:
        stamp = _stamp(out)
        old = stamp.get(MODEL_KEY)
        if old != model_id:
            names = _FRAMES.get()
            if old and (tag_in_use(out, old) or any((out / names.folder).glob(names.glob()))):
                raise ModelChanged(f"the frames in {out} were painted by another version "
                                   f"of model {model!r} (then {old}, now {model_id}): use "
                                   "another output folder or delete it")
            write_json_atomic(out / SETTINGS_FILE, {**stamp, MODEL_KEY: model_id}, indent=1)
        hold_tag(out, run, model_id)  # while this run paints, no other version starts

    update_settings(out, update)
