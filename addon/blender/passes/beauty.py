"""The beauty pass as a render: Cycles at the skin model's training target (a few
samples + denoising, the scene's own pixel filter and lights, the Standard view, a
transparent film), in its own render beside the passes' one-sample exact render. The
skin training's targets, its benchmarks, the demo and ``passes --passes beauty`` all
render it so: what a user compares a painting with is what the model learnt from."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import bpy
import numpy as np

#: The training target's Cycles samples (denoised): the default of every beauty render.
BEAUTY_SAMPLES = 16


@contextmanager
def beauty_settings(scene: bpy.types.Scene, size: int | tuple[int, int],
                    samples: int = BEAUTY_SAMPLES, denoise: bool = True) -> Iterator[None]:
    """Cycles as the training target: ``samples`` + denoising, Standard view (the
    beauty pass's convention), transparent film, at ``size`` (square, or (width,
    height)); the scene's settings come back after."""
    width, height = (size, size) if isinstance(size, int) else size
    r, cy, im = scene.render, scene.cycles, scene.render.image_settings
    saved = [(r, a, getattr(r, a)) for a in ("engine", "resolution_x", "resolution_y",
                                             "resolution_percentage", "film_transparent",
                                             "filepath")]
    saved += [(cy, a, getattr(cy, a)) for a in ("device", "samples", "use_denoising",
                                                "use_adaptive_sampling", "seed")]
    # Restored in reverse: a format before its depth and mode, a view transform before
    # its look (Blender refuses a depth or a look the current format or view lacks).
    saved += [(im, a, getattr(im, a)) for a in ("color_depth", "color_mode", "file_format")]
    vs = scene.view_settings
    saved += [(vs, a, getattr(vs, a)) for a in ("look", "view_transform")]
    try:
        r.engine = "CYCLES"
        r.resolution_x, r.resolution_y = int(width), int(height)
        r.resolution_percentage = 100
        r.film_transparent = True
        cy.device, cy.samples, cy.use_denoising = "CPU", int(samples), bool(denoise)
        cy.use_adaptive_sampling, cy.seed = False, 0
        im.file_format, im.color_mode, im.color_depth = "PNG", "RGBA", "8"
        vs.view_transform, vs.look = "Standard", "None"
        yield
    finally:
        for owner, attr, value in reversed(saved):
            setattr(owner, attr, value)


def render_beauty(scene: bpy.types.Scene, frame: int, folder: Path) -> np.ndarray:
    """One Cycles frame as (H, W, 4) uint8, top row first (inside
    :func:`beauty_settings`); a temporary PNG in ``folder``, removed after."""
    from .image_io import read_image

    scene.frame_set(frame)
    fd, tmp = tempfile.mkstemp(suffix=".png", dir=folder, prefix=".beauty-")
    os.close(fd)
    try:
        scene.render.filepath = tmp
        bpy.ops.render.render(write_still=True)
        return np.asarray(read_image(tmp), np.uint8)
    finally:
        Path(tmp).unlink(missing_ok=True)
