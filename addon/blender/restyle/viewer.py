"""The restyled frames in Blender: an image sequence in every Image Editor, and
optionally a strip in the Sequencer (one per run of consecutive frames)."""

from __future__ import annotations

from pathlib import Path

import bpy

from .output import frame_done, result_path

RESULT_IMAGE = "Painted Skin Restyled"
VSE_STRIP = "Painted Skin Restyled"


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

