"""The demo's second shot: real motion the model never trained on, seen from behind.

The wave through the demo's camera is where a skin model looks its best. This shot is
where it was worst: the CMU 05_06 dance (a clip no training set may hold) retargeted
onto the demo character, its cape baked, through a camera that follows it from behind,
so the character turns its back (and the cape) away from the key light. Painted by the
same backend as the wave, against Cycles at the training target; it adds two rows to
the demo's contact sheet and its own score to ``metrics.json``. Skipped, with a note,
where ../shared/data (the clip's home) is absent.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import bpy

CLIP = "bvh/cmu_motionbuilder_friendly/05_06.bvh"
FRAMES = 12
#: From behind, a little above, the whole body framed (bench skin's ``behind`` camera).
AZIMUTH, ELEVATION, DISTANCE, LENS, AIM = 180.0, 6.0, 1.1, 50.0, 0.5


@dataclass
class BehindShot:
    clip: Path
    frames: list[int]


def shared_clip() -> Path | None:
    """The dance's file in ../shared/data (``$PAINTED_SKIN_SHARED`` overrides), or None."""
    from ..addon.core.files.paths import shared_data

    return shared_data(CLIP)


def build_behind_shot(arm: bpy.types.Object, clip: Path, fps: float,
                      frames: int = FRAMES) -> BehindShot:
    """Retarget ``clip`` onto ``arm`` at ``fps`` (its middle ``frames`` frames are the
    shot), bake the cape over them and make the scene's camera one that follows the
    character from behind. Changes the open scene: run it after the main shot is done."""
    from ..addon.blender.retarget.api import retarget_clip
    from ..addon.blender.skin import dataset as D
    from .character import bake_spring_bones

    scene = bpy.context.scene
    rep = retarget_clip(clip, arm, set_scene=False, fps=fps, frame_start=1)
    n = min(frames, rep.frames - 2)
    first = max(2, (rep.frames - n) // 2)
    shot = list(range(first, first + n))
    scene.frame_start, scene.frame_end = shot[0], shot[-1]
    bake_spring_bones(arm, (shot[0] - 1, shot[-1] + 1))
    orbit = D.Orbit(azimuth0=math.radians(AZIMUTH), turn=0.0,
                    elevation=math.radians(ELEVATION), distance=DISTANCE, lens=LENS,
                    aim_height=AIM)
    scene.camera = D.follow_camera(scene, arm, orbit, shot, "Demo_behind")
    return BehindShot(clip, shot)
