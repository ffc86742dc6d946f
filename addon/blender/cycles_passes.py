"""Reference control passes from Cycles: depth, normals, mask, motion vectors, beauty.

One frame is rendered on the CPU with 1 sample whose position is the pixel centre (film
filter width 0.01 px), so depth / normal / mask equal an analytic rasteriser sampled at
pixel centres. Passes go through a multilayer EXR in a temporary folder and come back as
float32 arrays, **top row first**, in the conventions of :mod:`..core.camera`.

Cycles' raw ``Vector`` pass (found by experiment, pinned by
``tests/test_cycles_passes.py``): in pixels, x right and **y up** (Blender's bottom-up
image axes), with

- ``(X, Y) = position in the previous frame - position now``;
- ``(Z, W) = position now - position in the next frame``.

The project's flows are "position in the other frame minus position now" with u right and
v down, so ``flow_prev = (X, -Y)`` and ``flow_next = (-Z, W)``. Background pixels get 0.
"""

from __future__ import annotations

import glob
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import bpy
import numpy as np

from .image_io import read_exr_layers
from .scene_reader import camera_for

#: Cycles writes this depth where a pixel sees no surface.
CYCLES_BACKGROUND_DEPTH = 1e10
#: EXR channels the passes need (Combined RGB only for the beauty).
_PASS_CHANNELS = {"Depth": "Z", "Normal": "XYZ", "Vector": "XYZW", "Combined": "A"}
#: Largest side a pass render accepts (memory/time guard).
MAX_SIZE = 8192


def _check_size(width: int, height: int) -> None:
    for name, v in (("width", width), ("height", height)):
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool):
            raise TypeError(f"{name} must be an int, got {v!r}")
        if not 1 <= v <= MAX_SIZE:
            raise ValueError(f"{name}={v} is outside 1..{MAX_SIZE} pixels")


def _pass_view_layer(scene: bpy.types.Scene) -> bpy.types.ViewLayer:
    """The view layer to render: the context's when it belongs to ``scene``, else the
    first one that is enabled for rendering (else the first one)."""
    ctx = getattr(bpy.context, "view_layer", None)
    if ctx is not None and bpy.context.scene == scene:
        return ctx
    for vl in scene.view_layers:
        if vl.use:
            return vl
    return scene.view_layers[0]


class _Settings:
    """Set attributes, remembering the old values to restore them in reverse order."""

    def __init__(self) -> None:
        self._saved: list[tuple[Any, str, Any]] = []

    def set(self, owner: Any, attr: str, value: Any) -> None:
        if not hasattr(owner, attr):
            return  # absent in this Blender version
        self._saved.append((owner, attr, getattr(owner, attr)))
        setattr(owner, attr, value)

    def restore(self) -> list[str]:
        errors = []
        for owner, attr, value in reversed(self._saved):
            try:
                if getattr(owner, attr) != value:
                    setattr(owner, attr, value)
            except Exception as exc:  # keep restoring the rest
                errors.append(f"{attr}: {exc}")
        self._saved.clear()
        return errors


@contextmanager
def cycles_pass_settings(scene: bpy.types.Scene, width: int, height: int,
                         want_beauty: bool = False, output_dir: str | None = None
                         ) -> Iterator[bpy.types.ViewLayer]:
    """Configure ``scene`` for pass rendering (Cycles CPU, 1 centred sample, passes on,
    motion blur off, transparent film, multilayer EXR into ``output_dir``) and restore
    every changed setting and the current frame on exit, even on error. Yields the view
    layer that will be rendered."""
    _check_size(width, height)
    r, cy, im = scene.render, scene.cycles, scene.render.image_settings
    frame, subframe = scene.frame_current, scene.frame_subframe
    vl = _pass_view_layer(scene)
    s = _Settings()
    # Image settings restore in a fixed order (media type before format before depth).
    saved_im = {a: getattr(im, a) for a in
                ("media_type", "file_format", "color_mode", "color_depth", "exr_codec")
                if hasattr(im, a)}
    try:
        s.set(r, "engine", "CYCLES")
        s.set(cy, "device", "CPU")
        s.set(cy, "samples", 1)
        s.set(cy, "use_adaptive_sampling", False)
        s.set(cy, "use_denoising", False)
        s.set(cy, "time_limit", 0.0)
        # One sample at the pixel centre: a 0.01 px box filter puts it within 0.005 px.
        s.set(cy, "pixel_filter_type", "BOX")
        s.set(cy, "filter_width", 0.01)
        s.set(cy, "seed", 0)
        s.set(cy, "use_animated_seed", False)
        s.set(cy, "sample_offset", 0)
        if not want_beauty:
            # Z / Normal / Vector / alpha come from the camera ray's first hit only.
            s.set(cy, "max_bounces", 0)
        s.set(r, "resolution_x", int(width))
        s.set(r, "resolution_y", int(height))
        s.set(r, "resolution_percentage", 100)
        s.set(r, "use_border", False)
        s.set(r, "film_transparent", True)
        s.set(r, "use_motion_blur", False)  # else Cycles leaves the Vector pass empty
        s.set(r, "use_compositing", False)
        s.set(r, "use_sequencer", False)
        s.set(r, "use_freestyle", False)
        s.set(r, "use_multiview", False)
        s.set(r, "use_stamp", False)
        s.set(r, "use_file_extension", True)
        s.set(r, "use_overwrite", True)
        s.set(r, "use_placeholder", False)
        s.set(r, "use_single_layer", False)
        if output_dir is not None:
            s.set(r, "filepath", os.path.join(output_dir, "passes"))
        for other in scene.view_layers:
            s.set(other, "use", other == vl)
        for p in ("use_pass_combined", "use_pass_z", "use_pass_normal", "use_pass_vector"):
            s.set(vl, p, True)
        im.media_type = "MULTI_LAYER_IMAGE"
        im.color_depth = "32"
        im.exr_codec = "NONE"  # fastest to write and read; the file is temporary
        yield vl
    finally:
        errors = s.restore()
        for attr, value in saved_im.items():
            try:
                if getattr(im, attr) != value:
                    setattr(im, attr, value)
            except Exception as exc:
                errors.append(f"image_settings.{attr}: {exc}")
        if (scene.frame_current, scene.frame_subframe) != (frame, subframe):
            scene.frame_set(frame, subframe=subframe)
        if errors:
            print("painted-skin: could not restore " + "; ".join(errors))


def _layer(layers: dict[str, np.ndarray], vl_name: str, pass_name: str,
           channels: str) -> np.ndarray:
    """(H, W, len(channels)) of one pass from :func:`read_exr_layers` output."""
    out = []
    for c in channels:
        key = f"{vl_name}.{pass_name}.{c}"
        if key not in layers:  # single-layer naming fallback
            key = next((k for k in layers if k.endswith(f".{pass_name}.{c}")), key)
        if key not in layers:
            raise RuntimeError(f"Cycles wrote no {pass_name}.{c} channel "
                               f"(got {sorted(layers)[:12]})")
        out.append(layers[key])
    return np.stack(out, axis=-1).astype(np.float32, copy=False)


def passes_from_layers(layers: dict[str, np.ndarray], vl_name: str,
                       cam_rotation: np.ndarray, want_beauty: bool = False
                       ) -> dict[str, np.ndarray]:
    """Convert raw Cycles EXR channels to the project's pass arrays (see module doc)."""
    depth = _layer(layers, vl_name, "Depth", "Z")[..., 0].copy()
    depth[depth >= CYCLES_BACKGROUND_DEPTH * 0.5] = np.inf
    n = _layer(layers, vl_name, "Normal", "XYZ")
    norm = np.linalg.norm(n, axis=-1, keepdims=True)
    n = np.where(norm > 1e-12, n / np.maximum(norm, 1e-12), 0.0).astype(np.float32)
    rot = np.asarray(cam_rotation, np.float64)[:3, :3]
    rot = rot / np.linalg.norm(rot, axis=0, keepdims=True)  # strip scale
    n_cam = (n @ rot).astype(np.float32)  # row form of R^T n: world -> camera
    vec = _layer(layers, vl_name, "Vector", "XYZW")
    flow_prev = np.stack([vec[..., 0], -vec[..., 1]], axis=-1)
    flow_next = np.stack([-vec[..., 2], vec[..., 3]], axis=-1)
    alpha = _layer(layers, vl_name, "Combined", "A")[..., 0]
    out = {
        "depth": depth,
        "normal_world": n,
        "normal_camera": n_cam,
        "mask": np.clip(alpha, 0.0, 1.0),
        "flow_prev": flow_prev.astype(np.float32) + 0.0,  # + 0.0 turns -0 into 0
        "flow_next": flow_next.astype(np.float32) + 0.0,
    }
    if want_beauty:
        out["beauty"] = _layer(layers, vl_name, "Combined", "RGBA")
    return out


def _render_frame(scene: bpy.types.Scene, vl: bpy.types.ViewLayer, frame: int,
                  out_dir: str, want_beauty: bool) -> dict[str, np.ndarray]:
    """Render the current settings at ``frame`` into ``out_dir`` and read the passes."""
    for old in glob.glob(os.path.join(out_dir, "*.exr")):
        os.unlink(old)
    scene.frame_set(int(frame))
    rot = camera_for(scene).world[:3, :3]  # raises a clear error when there is no camera
    bpy.ops.render.render(write_still=True, scene=scene.name, layer=vl.name)
    files = glob.glob(os.path.join(out_dir, "*.exr"))
    if len(files) != 1:
        raise RuntimeError(f"Cycles wrote {len(files)} EXR files into {out_dir}, expected 1")
    names = [f"{vl.name}.{p}.{c}" for p, cs in _PASS_CHANNELS.items() for c in cs]
    if want_beauty:
        names += [f"{vl.name}.Combined.{c}" for c in "RGB"]
    return passes_from_layers(read_exr_layers(files[0], names), vl.name, rot, want_beauty)


def render_cycles_frames(scene: bpy.types.Scene, frames: Iterable[int], width: int,
                         height: int, want_beauty: bool = False, tmpdir: str | None = None
                         ) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
    """Render several frames under one set-up (settings applied once, restored at the
    end); yields ``(frame, passes)`` as :func:`render_cycles_passes` returns them."""
    out_dir = tempfile.mkdtemp(prefix="painted-skin-cycles-", dir=tmpdir)
    try:
        with cycles_pass_settings(scene, width, height, want_beauty, out_dir) as vl:
            for f in frames:
                yield int(f), _render_frame(scene, vl, f, out_dir, want_beauty)
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)


def render_cycles_passes(scene: bpy.types.Scene, frame: int, width: int, height: int,
                         want_beauty: bool = False, tmpdir: str | None = None
                         ) -> dict[str, np.ndarray]:
    """Render one frame's passes with Cycles; every scene setting is restored after.

    Returns float32 arrays, top row first: ``depth`` (H, W) planar metres along the view
    axis (background +inf), ``normal_world`` and ``normal_camera`` (H, W, 3) unit normals
    (camera space: x right, y up, +z towards the camera; background 0), ``mask`` (H, W)
    alpha in [0, 1], ``flow_prev`` / ``flow_next`` (H, W, 2) pixels (u right, v down) from
    where the surface point is now to where it is in the previous / next frame
    (background 0), and ``beauty`` (H, W, 4) linear RGBA when ``want_beauty``.
    """
    out_dir = tempfile.mkdtemp(prefix="painted-skin-cycles-", dir=tmpdir)
    try:
        with cycles_pass_settings(scene, width, height, want_beauty, out_dir) as vl:
            return _render_frame(scene, vl, frame, out_dir, want_beauty)
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)
