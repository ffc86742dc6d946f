"""Output folders the panels name: Blender paths ("//" = beside the .blend) checked
before any work, so a run never starts into a folder it cannot write."""

from __future__ import annotations

from pathlib import Path

import bpy

from ..core.files.atomic import UnwritableOutput, check_writable
from ..core.files.frame_patterns import FramePattern

# StringProperty options for an output folder: "//" paths are legal (no warning)
PATH_OPTIONS = {"PATH_SUPPORTS_BLEND_RELATIVE"}


def output_folder(value: str, what: str) -> Path:
    """The absolute, writable folder ``value`` names. A "//" path in a file never
    saved would land in the process's working folder: refused, with the fix."""
    if value.startswith("//") and not bpy.data.filepath:
        raise UnwritableOutput(f"the {what} folder {value!r} is relative to the .blend file, "
                               "which is not saved yet: save the file first, or choose an "
                               "absolute folder")
    if not value.strip():
        raise UnwritableOutput(f"no {what} folder is set: choose one")
    return check_writable(bpy.path.abspath(value), f"{what} folder")


def passes_output(value: str) -> tuple[Path, FramePattern]:
    """The passes output ``value`` names: a folder, or a farm's pattern such as
    ``//render/passes/shot_####`` (see :func:`.passes_output.split_passes_out`), as the
    absolute, writable folder and the names of each frame's files. A bad pattern is
    refused before the folder is made."""
    from .passes.output import split_passes_out

    folder, names = split_passes_out(value)
    return output_folder(folder, "passes"), names


__all__ = ["PATH_OPTIONS", "UnwritableOutput", "output_folder", "passes_output"]
