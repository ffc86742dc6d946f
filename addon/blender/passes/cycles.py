"""Reference control passes from Cycles: depth, normals, mask, motion vectors, beauty,
world positions, and the canonical surface coordinates (rest position, UV).

One frame is rendered on the CPU with 1 sample whose position is the pixel centre (film
filter width 0.01 px), so depth / normal / mask equal an analytic rasteriser sampled at
pixel centres. Passes go through a multilayer EXR in a temporary folder and come back as
float32 arrays, **top row first**, in the conventions of :mod:`..core.camera`.

Cycles' raw ``Vector`` pass (found by experiment, pinned by
``tests/blender/passes/test_cycles_passes.py``): in pixels, x right and **y up**
(Blender's bottom-up image axes), with

- ``(X, Y) = position in the previous frame - position now``;
- ``(Z, W) = position now - position in the next frame``.

The project's flows are "position in the other frame minus position now" with u right and
v down, so ``flow_prev = (X, -Y)`` and ``flow_next = (-Z, W)``. Background pixels get 0.

Rest positions and UVs come from two colour AOVs that every material of the rendered
meshes writes for the duration of the render (:func:`canonical_aovs`): an Attribute node
reading Blender's ``rest_position`` attribute (the object flag that makes Blender keep
it is turned on for the render only) and a UV Map node (the active render map). Nodes,
AOVs, flags and temporary materials are removed after, whatever happens.

Light visibility has no Cycles pass (Cycles X dropped the shadow pass, and a lit-render
ratio would depend on materials, light size and noise): :func:`ray_light_visibility`
traces it with Blender's own BVH (``scene.ray_cast``), exactly, per pixel.
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

from .geometry import REST_ATTRIBUTE
from .image_io import read_exr_layers
from .scene_reader import camera_for

#: Cycles writes this depth where a pixel sees no surface.
CYCLES_BACKGROUND_DEPTH = 1e10
#: EXR channels the passes need (Combined RGB only for the beauty).
#: The Diffuse Color pass's layer name: Blender 5's, then older releases'.
DIFFUSE_COLOR = ("Diffuse Color", "DiffCol")
_PASS_CHANNELS = {"Depth": "Z", "Normal": "XYZ", "Vector": "XYZW", "Combined": "A"}
#: Largest side a pass render accepts (memory/time guard).
MAX_SIZE = 8192
#: The AOVs that carry the canonical surface coordinates, and the object property that
#: tells Cycles which meshes have a UV map.
REST_AOV, UV_AOV, HAS_UV_PROP = "painted_skin_rest", "painted_skin_uv", "painted_skin_has_uv"
_NODE_TAG = "painted_skin_tmp"


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
    hit = out["mask"] > 0.5
    if f"{vl_name}.Position.X" in layers:
        out["position"] = np.where(hit[..., None], _layer(layers, vl_name, "Position", "XYZ"),
                                   0.0).astype(np.float32)
    diffcol = next((n for n in DIFFUSE_COLOR if f"{vl_name}.{n}.R" in layers), None)
    if diffcol is not None:
        out["albedo"] = np.where(hit[..., None], _layer(layers, vl_name, diffcol, "RGB"),
                                 0.0).astype(np.float32)
    if f"{vl_name}.{REST_AOV}.R" in layers:
        for key, aov in (("rest_position", REST_AOV), ("uv", UV_AOV)):
            out[key] = np.where(hit[..., None], _layer(layers, vl_name, aov, "RGB"),
                                0.0).astype(np.float32) + 0.0
    return out


def _render_frame(scene: bpy.types.Scene, vl: bpy.types.ViewLayer, frame: int,
                  out_dir: str, want_beauty: bool, extras: frozenset[str] = frozenset()
                  ) -> dict[str, np.ndarray]:
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
    if "position" in extras:
        names += [f"{vl.name}.Position.{c}" for c in "XYZ"]
    if "canonical" in extras:
        names += [f"{vl.name}.{a}.{c}" for a in (REST_AOV, UV_AOV) for c in "RGB"]
    if "albedo" in extras:
        names += [f"{vl.name}.{n}.{c}" for n in DIFFUSE_COLOR for c in "RGB"]
    return passes_from_layers(read_exr_layers(files[0], names), vl.name, rot, want_beauty)


@contextmanager
def _extra_passes(scene: bpy.types.Scene, vl: bpy.types.ViewLayer,
                  extras: frozenset[str]) -> Iterator[None]:
    """Turn on the Position and Diffuse Color passes and / or the canonical AOVs for the
    duration."""
    bad = set(extras) - {"position", "canonical", "albedo"}
    if bad:
        raise ValueError(f"unknown extra pass(es) {sorted(bad)}: use position, canonical, "
                         "albedo")
    had_position, had_diffcol = vl.use_pass_position, vl.use_pass_diffuse_color
    try:
        if "position" in extras:
            vl.use_pass_position = True
        if "albedo" in extras:
            vl.use_pass_diffuse_color = True
        if "canonical" in extras:
            with canonical_aovs(scene, vl):
                yield
        else:
            yield
    finally:
        if vl.use_pass_position != had_position:
            vl.use_pass_position = had_position
        if vl.use_pass_diffuse_color != had_diffcol:
            vl.use_pass_diffuse_color = had_diffcol


def _rendered_meshes(scene: bpy.types.Scene) -> list[bpy.types.Object]:
    return [o for o in scene.objects if o.type == "MESH" and not o.hide_render
            and o.visible_get()]


def _add_aov_nodes(mat: bpy.types.Material) -> list:
    """Nodes in ``mat`` that write the rest position and (u, v, has_uv) AOVs."""
    nt = mat.node_tree
    nodes = []

    def node(kind: str):
        n = nt.nodes.new(kind)
        n.label = _NODE_TAG
        nodes.append(n)
        return n

    rest = node("ShaderNodeAttribute")
    rest.attribute_type, rest.attribute_name = "GEOMETRY", REST_ATTRIBUTE
    out_rest = node("ShaderNodeOutputAOV")
    out_rest.aov_name = REST_AOV
    nt.links.new(rest.outputs["Vector"], out_rest.inputs["Color"])
    uv = node("ShaderNodeUVMap")  # no map named: the active render one
    split = node("ShaderNodeSeparateXYZ")
    nt.links.new(uv.outputs["UV"], split.inputs["Vector"])
    has = node("ShaderNodeAttribute")
    has.attribute_type, has.attribute_name = "OBJECT", HAS_UV_PROP
    join = node("ShaderNodeCombineXYZ")
    nt.links.new(split.outputs["X"], join.inputs["X"])
    nt.links.new(split.outputs["Y"], join.inputs["Y"])
    nt.links.new(has.outputs["Fac"], join.inputs["Z"])
    out_uv = node("ShaderNodeOutputAOV")
    out_uv.aov_name = UV_AOV
    nt.links.new(join.outputs["Vector"], out_uv.inputs["Color"])
    return nodes


def _fill_empty_slots(ob: bpy.types.Object, tmp: list[bpy.types.Material],
                      filled: list[tuple[bpy.types.Object, int | None]]) -> None:
    """Give ``ob``'s empty material slots (or a slot-less mesh one slot) the temporary
    material, created once into ``tmp``; each change is recorded in ``filled``."""
    empty = [i for i, slot in enumerate(ob.material_slots) if slot.material is None]
    if ob.material_slots and not empty:
        return
    if not tmp:
        tmp.append(bpy.data.materials.new("painted_skin_aov_tmp"))
    if not ob.material_slots:
        ob.data.materials.append(tmp[0])
        filled.append((ob, None))
    for i in empty:
        filled.append((ob, i))
        ob.material_slots[i].material = tmp[0]


def _prepare_meshes(objects: list[bpy.types.Object], tmp: list[bpy.types.Material],
                    filled: list[tuple[bpy.types.Object, int | None]],
                    props: list[bpy.types.Object]) -> dict[str, bpy.types.Material]:
    """Fill the meshes' empty slots, flag those with a UV map; their materials by name."""
    from .geometry import render_uv_name

    mats: dict[str, bpy.types.Material] = {}
    for ob in objects:
        _fill_empty_slots(ob, tmp, filled)
        for slot in ob.material_slots:
            if slot.material is not None:
                mats[slot.material.name] = slot.material
        if render_uv_name(ob.data) is not None and HAS_UV_PROP not in ob:
            ob[HAS_UV_PROP] = 1.0
            props.append(ob)
    return mats


def _undo_canonical(vl: bpy.types.ViewLayer, aovs: list[str],
                    added_nodes: list[tuple[bpy.types.Material, list]],
                    props: list[bpy.types.Object],
                    filled: list[tuple[bpy.types.Object, int | None]],
                    tmp: list[bpy.types.Material]) -> None:
    """Remove what :func:`canonical_aovs` added, in reverse order of adding."""
    for mat, nodes in added_nodes:
        for n in nodes:
            mat.node_tree.nodes.remove(n)
    for ob in props:
        if HAS_UV_PROP in ob:
            del ob[HAS_UV_PROP]
    for ob, i in reversed(filled):
        if i is None:  # the mesh had no slot (pop would leave an empty one)
            ob.data.materials.clear()
        else:
            ob.material_slots[i].material = None
    for mat in tmp:
        bpy.data.materials.remove(mat)
    for name in aovs:
        aov = vl.aovs.get(name)
        if aov is not None:
            vl.aovs.remove(aov)


@contextmanager
def canonical_aovs(scene: bpy.types.Scene, vl: bpy.types.ViewLayer) -> Iterator[None]:
    """For the duration: two colour AOVs on ``vl``, AOV-writing nodes in every material
    of the rendered meshes (a temporary material where a mesh has none), the
    ``rest_position`` flag on and a has-UV property on meshes with a UV map. All of it
    is removed on exit, so nothing is left in the user's file."""
    from .geometry import rest_position_attribute

    objects = _rendered_meshes(scene)
    aovs: list[str] = []
    added_nodes: list[tuple[bpy.types.Material, list]] = []
    props: list[bpy.types.Object] = []
    filled: list[tuple[bpy.types.Object, int | None]] = []
    tmp: list[bpy.types.Material] = []
    try:
        for name in (REST_AOV, UV_AOV):
            aov = vl.aovs.add()
            aov.name, aov.type = name, "COLOR"
            aovs.append(aov.name)
        mats = _prepare_meshes(objects, tmp, filled, props)
        for mat in mats.values():
            if mat.node_tree is None:
                raise RuntimeError(f"material {mat.name!r} has no node tree: the canonical "
                                   "passes need node materials")
            added_nodes.append((mat, _add_aov_nodes(mat)))
        with rest_position_attribute(objects):
            yield
    finally:
        _undo_canonical(vl, aovs, added_nodes, props, filled, tmp)


def render_cycles_frames(scene: bpy.types.Scene, frames: Iterable[int], width: int,
                         height: int, want_beauty: bool = False, tmpdir: str | None = None,
                         extras: Iterable[str] = ()
                         ) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
    """Render several frames under one set-up (settings applied once, restored at the
    end); yields ``(frame, passes)`` as :func:`render_cycles_passes` returns them."""
    extras = frozenset(extras)
    out_dir = tempfile.mkdtemp(prefix="painted-skin-cycles-", dir=tmpdir)
    try:
        with cycles_pass_settings(scene, width, height, want_beauty, out_dir) as vl, \
                _extra_passes(scene, vl, extras):
            for f in frames:
                yield int(f), _render_frame(scene, vl, f, out_dir, want_beauty, extras)
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)


def render_cycles_passes(scene: bpy.types.Scene, frame: int, width: int, height: int,
                         want_beauty: bool = False, tmpdir: str | None = None,
                         extras: Iterable[str] = ()) -> dict[str, np.ndarray]:
    """Render one frame's passes with Cycles; every scene setting is restored after.

    Returns float32 arrays, top row first: ``depth`` (H, W) planar metres along the view
    axis (background +inf), ``normal_world`` and ``normal_camera`` (H, W, 3) unit normals
    (camera space: x right, y up, +z towards the camera; background 0), ``mask`` (H, W)
    alpha in [0, 1], ``flow_prev`` / ``flow_next`` (H, W, 2) pixels (u right, v down) from
    where the surface point is now to where it is in the previous / next frame
    (background 0), and ``beauty`` (H, W, 4) linear RGBA when ``want_beauty``.
    ``extras``: "position" adds ``position`` (H, W, 3) world; "canonical" adds
    ``rest_position`` (H, W, 3) and ``uv`` (H, W, 3) = (u, v, has_uv) (background 0).
    """
    extras = frozenset(extras)
    out_dir = tempfile.mkdtemp(prefix="painted-skin-cycles-", dir=tmpdir)
    try:
        with cycles_pass_settings(scene, width, height, want_beauty, out_dir) as vl, \
                _extra_passes(scene, vl, extras):
            return _render_frame(scene, vl, frame, out_dir, want_beauty, extras)
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)


def ray_light_visibility(scene: bpy.types.Scene, position: np.ndarray, mask: np.ndarray,
                         cam, lights: list, lift: np.ndarray | None = None,
                         smooth: np.ndarray | None = None, eps: float = 1e-4) -> np.ndarray:
    """The reference light visibility: (H, W, len(lights)) float32, 1 where the surface
    point at each covered pixel sees the light (definition in :mod:`..core.shadow`).

    A camera ray towards each pixel's surface point (``position`` (H, W, 3) world, e.g.
    Cycles' Position pass) finds the surface in Blender's BVH and its face normal; a
    shadow ray from just off the visible side of that face towards each light
    (``SceneLight``-like: type, position, direction) then decides. Exact, with no bias
    and no sampling noise, but one Python call per ray (about 10 µs): a reference, not
    a fast path. ``lift`` and ``smooth`` (H, W, 3): each pixel's smooth-surface lift and
    smooth normal, so the ray near a smooth terminator starts as Cycles starts it.
    """
    from mathutils import Vector

    from ...core.passes.shadow import lift_amount

    dg = bpy.context.evaluated_depsgraph_get()
    h, w = mask.shape
    out = np.zeros((h, w, len(lights)), np.float32)
    eye = np.asarray(cam.world[:3, 3], np.float64)
    back = np.asarray(cam.world[:3, 2], np.float64)
    back /= np.linalg.norm(back)
    far = float(cam.far) * 2.0
    for i, j in zip(*np.nonzero(mask), strict=True):
        p = np.asarray(position[i, j], np.float64)
        start = p + back * (np.dot(eye - p, back)) if cam.ortho else eye
        ray = p - start
        dist = float(np.linalg.norm(ray))
        hit, loc, normal, *_ = scene.ray_cast(dg, Vector(start), Vector(ray / dist),
                                              distance=dist * 1.01 + 1e-3)
        if hit:
            p, n = np.array(loc), np.array(normal)
        else:  # the camera ray grazed an edge: keep the pass's point, facing the camera
            n = -ray / dist
        if np.dot(n, ray) > 0:
            n = -n
        origin = p + n * eps * max(1.0, float(np.abs(p).max()))
        up = None if lift is None or smooth is None else np.asarray(lift[i, j], np.float64)
        for k, li in enumerate(lights):
            if li.type == "SUN":
                d, reach = np.asarray(li.direction, np.float64), far
            else:
                d = np.asarray(li.position, np.float64) - origin
                reach = float(np.linalg.norm(d))
                d = d / max(reach, 1e-12)
            start = origin
            if up is not None and up.any():
                ns = np.asarray(smooth[i, j], np.float64)
                amount = float(lift_amount(ns[None], n[None], d[None])[0])
                if np.dot(n, d) <= 0 and (amount <= 0 or np.dot(ns, d) <= 0):
                    continue
                # from the smooth surface; its own facet blocks it when turned away
                start = (origin if np.dot(n, d) > 0 else p) + up * amount
            elif np.dot(n, d) <= 0:
                continue  # the visible side faces away from the light
            blocked = scene.ray_cast(dg, Vector(start), Vector(d), distance=reach)[0]
            out[i, j, k] = 0.0 if blocked else 1.0
    return out
