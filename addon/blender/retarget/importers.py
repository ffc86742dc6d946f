"""Import clips and characters with Blender's own importers, leaving no trace
on failure.

Every import runs inside :class:`SceneSnapshot`: whatever datablocks the
importer created are known, so a failed import (or a clip that was only read
for its motion) is removed completely — the user's scene stays as it was.
"""

from __future__ import annotations

import builtins
import contextlib
import ctypes
import io
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import bpy

from ...core.bvh import BvhError, validate_bvh

CLIP_TYPES = {".bvh", ".fbx", ".glb", ".gltf"}
_FORMATS = {".bvh": "BVH", ".fbx": "FBX", ".glb": "glTF", ".gltf": "glTF", ".blend": ".blend"}
_BOM = b"\xef\xbb\xbf"
CHARACTER_TYPES = {".blend", ".fbx", ".glb", ".gltf"}
# Datablock collections an importer may add to.
_COLLECTIONS = ("objects", "armatures", "meshes", "materials", "actions", "images",
                "textures", "lights", "cameras", "collections", "node_groups", "shape_keys",
                "curves")


class ImportFailed(ValueError):
    """A file could not be imported; the message says why and what to do."""


class SceneSnapshot:
    """Remembers the datablocks that exist now, to find or drop new ones."""

    def __init__(self) -> None:
        self.before = {c: set(getattr(bpy.data, c)) for c in _COLLECTIONS}

    def new(self, collection: str) -> list:
        return [d for d in getattr(bpy.data, collection) if d not in self.before[collection]]

    def remove_new(self, keep: tuple = ()) -> None:
        """Delete every datablock created since the snapshot, except ``keep``."""
        keep_ids = {id(k) for k in keep}
        for c in ("objects",) + tuple(x for x in _COLLECTIONS if x != "objects"):
            for d in self.new(c):
                if id(d) in keep_ids:
                    continue
                with contextlib.suppress(ReferenceError, RuntimeError):
                    getattr(bpy.data, c).remove(d)


@contextlib.contextmanager
def _fbx_light_workaround() -> Iterator[None]:
    """Blender 5.0.1's FBX importer sets ``lamp.cycles.cast_shadow``, which no
    longer exists, and aborts on any file with a light. Hide ``cycles`` from
    its ``hasattr`` check for the duration of the import (``use_shadow`` is
    still read)."""
    try:
        from io_scene_fbx import import_fbx
    except ImportError:  # pragma: no cover - add-on missing
        yield
        return

    def _hasattr(obj: object, name: str) -> bool:
        return False if name == "cycles" else builtins.hasattr(obj, name)

    import_fbx.hasattr = _hasattr
    try:
        yield
    finally:
        del import_fbx.hasattr


def check_file(path: Path, allowed: set[str], what: str) -> Path:
    path = Path(path)
    if not path.exists():
        raise ImportFailed(f"{what} {str(path)!r} does not exist: check the path")
    if path.is_dir():
        raise ImportFailed(f"{what} {str(path)!r} is a folder: give a file")
    if path.suffix.lower() not in allowed:
        raise ImportFailed(
            f"{what} {path.name!r} has an unsupported type {path.suffix or '(none)'}: "
            f"use one of {', '.join(sorted(allowed))}")
    return path


def importer_failure(what: str, path: Path, e: BaseException) -> ImportFailed:
    """One line for an importer's crash: Blender's operators raise a RuntimeError
    holding a whole traceback; its last line says what broke."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()
             and not ln.strip().startswith(("Location:", "File ", "^", "~"))]
    why = (lines[-1] if lines else type(e).__name__).removeprefix("Error: ")
    why = why if len(why) <= 160 else why[:157] + "..."
    kind = _FORMATS.get(path.suffix.lower(), path.suffix)
    return ImportFailed(f"could not import {what} {path.name!r} ({why}): the file is damaged "
                        f"or not a valid {kind} file; re-export it")


@contextlib.contextmanager
def held_output() -> Iterator[None]:
    """Hold what an importer prints (its own tracebacks, on both the Python and the
    C streams) and show it only if the import succeeds: a failure is reported in the
    one line of :func:`importer_failure` instead."""
    libc = ctypes.CDLL(None) if os.name == "posix" else None

    def flush() -> None:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:  # None in some GUI builds
                stream.flush()
        if libc is not None:
            libc.fflush(None)

    py_out, py_err = io.StringIO(), io.StringIO()
    saved, files = [], []
    try:
        flush()
        for fd in (1, 2):
            tmp = tempfile.TemporaryFile()
            files.append(tmp)
            saved.append(os.dup(fd))
            os.dup2(tmp.fileno(), fd)
    except OSError:  # no real stdout/stderr to redirect: run as is
        for fd, old in zip((1, 2), saved, strict=False):
            os.dup2(old, fd)
            os.close(old)
        for tmp in files:
            tmp.close()
        saved, files = [], []
    ok = False
    try:
        with contextlib.redirect_stdout(py_out), contextlib.redirect_stderr(py_err):
            yield
        ok = True
    finally:
        flush()
        for fd, old in zip((1, 2), saved, strict=False):
            os.dup2(old, fd)
            os.close(old)
        if ok:  # replay: Python's output, then what the C side wrote
            for stream, held, tmp in zip((sys.stdout, sys.stderr), (py_out, py_err),
                                         files or (None, None), strict=True):
                if stream is None:
                    continue
                stream.write(held.getvalue())
                if tmp is not None:
                    tmp.seek(0)
                    stream.write(tmp.read().decode("utf-8", "replace"))
        for tmp in files:
            tmp.close()


@contextlib.contextmanager
def _without_bom(path: Path) -> Iterator[Path]:
    """``path``, or a copy without its UTF-8 byte-order mark (same name, in a temp
    folder): the project's reader accepts a BOM, Blender's BVH importer does not."""
    with open(path, "rb") as fh:
        has_bom = fh.read(3) == _BOM
    if not has_bom:
        yield path
        return
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / path.name
        with open(path, "rb") as src, open(copy, "wb") as dst:
            src.seek(3)
            shutil.copyfileobj(src, dst)
        yield copy


def _run_importer(path: Path) -> None:
    ext = path.suffix.lower()
    fp = str(path)
    if ext == ".bvh":
        try:
            validate_bvh(path)
        except BvhError as e:
            raise ImportFailed(str(e)) from None
        with _without_bom(path) as clean, held_output():
            bpy.ops.import_anim.bvh(filepath=str(clean), global_scale=0.01,
                                    rotate_mode="NATIVE", axis_forward="-Z", axis_up="Y",
                                    update_scene_fps=False, update_scene_duration=False)
        return
    with held_output():
        if ext == ".fbx":
            with _fbx_light_workaround():
                bpy.ops.import_scene.fbx(filepath=fp, use_anim=True, ignore_leaf_bones=False,
                                         automatic_bone_orientation=False)
        elif ext in (".glb", ".gltf"):
            bpy.ops.import_scene.gltf(filepath=fp)
        elif ext == ".blend":
            _append_blend(path)


def _append_blend(path: Path) -> None:
    with bpy.data.libraries.load(str(path), link=False) as (src, dst):
        dst.objects = list(src.objects)
    scene_coll = bpy.context.scene.collection
    for ob in dst.objects:
        if ob is not None and ob.name not in scene_coll.objects:
            scene_coll.objects.link(ob)


def _pick_armature(objects: list, what: str, path: Path) -> bpy.types.Object:
    arms = [o for o in objects if o.type == "ARMATURE"]
    if not arms:
        raise ImportFailed(f"{what} {path.name!r} contains no armature: a skeleton is needed")
    return max(arms, key=lambda o: len(o.data.bones))


def import_character(path: str | Path) -> bpy.types.Object:
    """Import a rigged character; returns its armature (meshes stay parented)."""
    path = check_file(Path(path), CHARACTER_TYPES, "character")
    snap = SceneSnapshot()
    try:
        _run_importer(path)
        return _pick_armature(snap.new("objects"), "character", path)
    except ImportFailed:
        snap.remove_new()
        raise
    except Exception as e:  # importer crashed: clean up, then explain
        snap.remove_new()
        raise importer_failure("character", path, e) from e


@contextlib.contextmanager
def imported_clip(path: str | Path) -> Iterator[tuple[bpy.types.Object, list]]:
    """Import a motion clip, yield (its animated armature, the actions the import
    made), then remove every datablock the import created (read inside)."""
    path = check_file(Path(path), CLIP_TYPES, "clip")
    snap = SceneSnapshot()
    # The FBX importer sets the scene's frame rate to the file's: keep it while the
    # motion is read (read_motion samples at the scene rate), then put it back.
    render = bpy.context.scene.render
    rate = render.fps, render.fps_base
    try:
        try:
            _run_importer(path)
        except ImportFailed:
            raise
        except Exception as e:
            raise importer_failure("clip", path, e) from e
        arms = [o for o in snap.new("objects") if o.type == "ARMATURE"
                and o.animation_data is not None and o.animation_data.action is not None]
        if not arms:
            raise ImportFailed(f"clip {path.name!r} has no animated armature: nothing to retarget")
        yield max(arms, key=lambda o: len(o.data.bones)), snap.new("actions")
    finally:
        snap.remove_new()
        render.fps, render.fps_base = rate
