"""The demo shot: the procedural character, a generated clip retargeted onto it and its
cape baked, saved as ``shot.blend`` (``painted-skin demo`` and its runner)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import bpy

from ..addon.blender.blend_files import save_blend_atomic
from ..addon.blender.retarget.api import RetargetReport, retarget_clip
from ..addon.blender.session import reset_scene
from ..addon.motion import write_clip
from .character import bake_spring_bones, build_demo_character, setup_demo_scene


def build_demo_shot(out: Path, frames: int = 96, fps: float = 24.0,
                    kind: str = "walk") -> RetargetReport:
    """The demo: procedural character + generated clip -> ``out/shot.blend``."""

    out.mkdir(parents=True, exist_ok=True)
    reset_scene()
    arm = build_demo_character()
    setup_demo_scene(arm)
    with tempfile.TemporaryDirectory() as tmp:
        clip = Path(tmp) / f"{kind}.bvh"
        write_clip(clip, kind, frames=frames, fps=fps, convention="cmu")
        report = retarget_clip(clip, arm)
    start, end = bpy.context.scene.frame_start, bpy.context.scene.frame_end
    bake_spring_bones(arm, (start, end))
    save_blend_atomic(out / "shot.blend")
    return report
