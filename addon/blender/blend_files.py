""".blend files for headless jobs: save one atomically, open a shot and pick its camera.

The CLI, the demo builders and the tests all need these; they live in the Blender
layer (not in the CLI) so that nothing below the command line has to import it.
"""

from __future__ import annotations

import os
from pathlib import Path

import bpy

from ..core.files.atomic import output_target, replace_atomic
from ..core.files.frame_ranges import Frames, check_in_scene, parse_frames
from .retarget.importers import held_output


class ShotFileError(ValueError):
    """A shot file Blender cannot open; the message names the file and the fix."""


class CameraNotFound(ValueError):
    """``--camera`` names no camera object of the shot; the message lists the cameras."""


def save_blend_atomic(path: str | os.PathLike[str]) -> None:
    """Save the current Blender file to ``path`` via a temp file + rename. A symlink
    is saved through to its target; a device, FIFO or folder at ``path`` is refused
    (``UnwritableOutput``); a failed save (disk full) raises ``OSError`` in one line."""
    path = Path(path)
    target = output_target(path, ".blend file")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.stem}.{os.getpid()}.tmp.blend")
    try:
        try:
            bpy.ops.wm.save_as_mainfile(filepath=str(tmp), copy=True, check_existing=False)
        except RuntimeError as e:  # Blender's save failed: the disk, not the input
            why = " ".join(str(e).split()).removeprefix("Error: ")
            raise OSError(f"cannot save {str(path)!r} ({why}): free some disk space or "
                          "choose another folder") from None
        replace_atomic(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
        Path(str(tmp) + "1").unlink(missing_ok=True)  # Blender's backup file


def open_shot(path: str | os.PathLike[str]) -> bpy.types.Scene:
    """Open the .blend ``path`` and return its scene. A damaged file (garbage,
    truncated, a bare header) raises :class:`ShotFileError` in one line instead of
    Blender's RuntimeError."""
    path = Path(path)
    try:
        with held_output():  # Blender's own error lines: the one below says it all
            bpy.ops.wm.open_mainfile(filepath=str(path))
    except RuntimeError as e:
        why = next((ln.strip() for ln in reversed(str(e).splitlines()) if ln.strip()), "")
        why = why.removeprefix("Error: ")
        raise ShotFileError(f"cannot open the shot {str(path)!r}: it is not a readable .blend "
                            f"file ({why[:160]}); give a .blend saved by Blender, or re-save "
                            "it") from None
    return bpy.context.scene


def use_camera(scene: bpy.types.Scene, name: str) -> None:
    """``--camera``: "auto" adds a camera following the character (not saved into
    the .blend); another value names the camera object to render through."""
    if name == "auto":
        from .passes.auto_camera import add_follow_camera

        add_follow_camera(scene)
        return
    cam = bpy.data.objects.get(name)
    if cam is None or cam.type != "CAMERA":
        have = sorted(o.name for o in bpy.data.objects if o.type == "CAMERA")
        raise CameraNotFound(f"--camera {name!r} is not a camera in this file (cameras: "
                             f"{', '.join(have) or 'none'}; or --camera auto)")
    scene.camera = cam


def open_shot_frames(shot: str | os.PathLike[str], frames: str | None = None,
                     camera: str | None = None, *,
                     opened: bool = False) -> tuple[bpy.types.Scene, Frames]:
    """Open ``shot``, apply ``camera`` (see :func:`use_camera`); the scene and the
    frames of ``frames`` (default: the scene's range; a range outside the scene's is
    refused, for every command). ``frames`` is parsed before the slow open.
    ``opened``: Blender already has the shot open (a farm runs ``blender shot.blend``),
    so the current scene is used as it is."""
    wanted = parse_frames(frames) if frames else None
    scene = bpy.context.scene if opened else open_shot(shot)
    if camera:
        use_camera(scene, camera)
    if wanted is None:
        wanted = range(scene.frame_start, scene.frame_end + 1)
    return scene, check_in_scene(wanted, scene.frame_start, scene.frame_end)
