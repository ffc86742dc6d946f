"""Read each material's base colour into :class:`~..core.passes.albedo.AlbedoSource`.

What it reads: the Cycles output's surface shader, a Principled (or Diffuse) BSDF, and
its Base Color: a constant, an RGB node, or an Image Texture (at a UV Map node's map or
the render UV map), through reroutes. That covers what glTF / FBX importers and most
hand-made characters build. Anything else (procedural textures, mixes) falls back to
the material's viewport colour and is reported, so the pass never silently lies.
"""

from __future__ import annotations

from dataclasses import dataclass

import bpy
import numpy as np

from ...core.passes.albedo import DEFAULT_ALBEDO, AlbedoSource, srgb_to_linear


@dataclass
class AlbedoSurface:
    """Per triangle of a shot: which source paints it and the UVs its image is read at."""

    sources: list[AlbedoSource]
    tri_source: np.ndarray  # (T,) int32 index into sources
    corner_uvs: dict[str | None, np.ndarray]  # UV-map name (None: render) -> (T, 3, 2)
    approximated: list[str]  # names of materials read only approximately


def _from(socket: bpy.types.NodeSocket) -> bpy.types.Node | None:
    """The node feeding ``socket``, through reroutes; None when unlinked."""
    while socket.is_linked:
        link = socket.links[0]
        if not link.is_valid or link.is_muted:
            return None
        node = link.from_node
        if node.bl_idname != "NodeReroute":
            return node
        socket = node.inputs[0]
    return None


def _image_pixels(image: bpy.types.Image, cache: dict[str, np.ndarray]) -> np.ndarray | None:
    """(H, W, 3) float32 linear, row 0 at the bottom; None for an image without pixels."""
    if image.name in cache:
        return cache[image.name]
    w, h = image.size
    if w == 0 or h == 0 or image.channels < 3:
        return None
    buf = np.empty(w * h * image.channels, np.float32)
    image.pixels.foreach_get(buf)
    rgb = buf.reshape(h, w, image.channels)[..., :3]
    # Byte images hand over their stored (encoded) values; float images are linear.
    if not image.is_float and image.colorspace_settings.name == "sRGB":
        rgb = srgb_to_linear(rgb)
    cache[image.name] = np.ascontiguousarray(rgb, np.float32)
    return cache[image.name]


def _viewport(mat: bpy.types.Material | None) -> AlbedoSource:
    col = DEFAULT_ALBEDO if mat is None else tuple(mat.diffuse_color)[:3]
    return AlbedoSource(color=np.array(col, np.float32), exact=mat is None)


def albedo_source(mat: bpy.types.Material | None,
                  cache: dict[str, np.ndarray]) -> AlbedoSource:
    """The base colour ``mat`` gives a surface (see the module doc for what is read)."""
    if mat is None or mat.node_tree is None:  # Blender 5: a material's nodes are always on
        return _viewport(mat)
    out = mat.node_tree.get_output_node("CYCLES")
    bsdf = _from(out.inputs["Surface"]) if out is not None else None
    if bsdf is None or bsdf.bl_idname not in ("ShaderNodeBsdfPrincipled",
                                              "ShaderNodeBsdfDiffuse"):
        return _viewport(mat)
    principled = bsdf.bl_idname == "ShaderNodeBsdfPrincipled"
    base = bsdf.inputs["Base Color" if principled else "Color"]
    scale = 1.0
    if principled:
        metallic = bsdf.inputs["Metallic"]
        if metallic.is_linked:
            return _viewport(mat)
        scale = 1.0 - float(metallic.default_value)
    node = _from(base)
    if node is None:
        return AlbedoSource(color=np.array(base.default_value[:3], np.float32) * scale)
    if node.bl_idname == "ShaderNodeRGB":
        return AlbedoSource(color=np.array(node.outputs[0].default_value[:3],
                                           np.float32) * scale)
    if node.bl_idname == "ShaderNodeTexImage" and node.image is not None:
        pixels = _image_pixels(node.image, cache)
        vec = _from(node.inputs["Vector"])
        if pixels is None or (vec is not None and vec.bl_idname != "ShaderNodeUVMap"):
            return _viewport(mat)
        uv_map = (vec.uv_map or None) if vec is not None else None
        return AlbedoSource(color=np.full(3, scale, np.float32), image=pixels,
                            uv_map=uv_map, extension=node.extension,
                            interpolation=node.interpolation)
    return _viewport(mat)


def read_albedo_surface(objects: list[bpy.types.Object], evaluated, polygon_of_tri: list,
                        corners_of_tri: list, render_uvs: np.ndarray) -> AlbedoSurface:
    """Sources and per-triangle lookups of ``objects`` (their evaluated meshes).

    ``polygon_of_tri`` / ``corners_of_tri``: per object, (T_i,) polygon and (T_i, 3)
    loop indices of its triangles; ``render_uvs``: (T, 3, 2) of the render UV map."""
    sources: list[AlbedoSource] = []
    key_of: dict[str, int] = {}
    cache: dict[str, np.ndarray] = {}
    tri_source, named, approximated = [], {}, []
    t_off = 0
    for ob, polys, corners in zip(objects, polygon_of_tri, corners_of_tri, strict=True):
        ev = evaluated(ob)
        slots = [s.material for s in ev.material_slots] or [None]
        index = []
        for mat in slots:
            key = mat.name if mat is not None else ""
            if key not in key_of:
                key_of[key] = len(sources)
                sources.append(albedo_source(mat, cache))
                if not sources[-1].exact:
                    approximated.append(key)
            index.append(key_of[key])
        me = ev.to_mesh()
        try:
            mi = np.zeros(len(me.polygons), np.int32)
            if len(me.polygons):
                me.polygons.foreach_get("material_index", mi)
            slot = np.clip(mi[polys], 0, len(index) - 1)
            tri_source.append(np.asarray(index, np.int32)[slot])
            for src in (sources[i] for i in set(index)):
                name = src.uv_map
                if name is None:
                    continue
                layer = me.uv_layers.get(name)
                arr = named.setdefault(name, np.zeros_like(render_uvs))
                if layer is not None:
                    buf = np.empty(len(me.loops) * 2, np.float32)
                    layer.data.foreach_get("uv", buf)
                    arr[t_off:t_off + len(polys)] = buf.reshape(-1, 2)[corners]
        finally:
            ev.to_mesh_clear()
        t_off += len(polys)
    uvs = {None: render_uvs, **named}
    return AlbedoSurface(sources, np.concatenate(tri_source), uvs, approximated)
