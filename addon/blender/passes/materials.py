"""Read each material's base colour into :class:`~..core.passes.albedo.AlbedoSource`.

What it reads: the Cycles output's surface shader, a Principled (or Diffuse) BSDF, and
its Base Color: a constant, an RGB node, or an Image Texture (at a UV Map node's map or
the render UV map), through reroutes. That covers what glTF / FBX importers and most
hand-made characters build. Anything else (procedural textures, mixes) falls back to
the material's viewport colour and is reported, so the pass never silently lies.

The surface's roughness (the ``specular`` pass's lobe) is read the same way from the
BSDF's Roughness: a constant, or an Image Texture's Color or Alpha (the demo keeps it in
its colour image's alpha); anything else takes the material's viewport roughness and is
reported.
"""

from __future__ import annotations

from dataclasses import dataclass, field

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
    # Per source, its roughness read the same way (every channel the one value).
    roughness: list[AlbedoSource] = field(default_factory=list)
    rough_approximated: list[str] = field(default_factory=list)


def _from(socket: bpy.types.NodeSocket) -> bpy.types.Node | None:
    """The node feeding ``socket``, through reroutes; None when unlinked."""
    return _from_output(socket)[0]


def _from_output(socket: bpy.types.NodeSocket) -> tuple[bpy.types.Node | None, str]:
    """The node feeding ``socket`` and the name of its output, through reroutes."""
    while socket.is_linked:
        link = socket.links[0]
        if not link.is_valid or link.is_muted:
            return None, ""
        node = link.from_node
        if node.bl_idname != "NodeReroute":
            return node, link.from_socket.name
        socket = node.inputs[0]
    return None, ""


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


#: Blender's default Principled BSDF's roughness (a surface without a material).
DEFAULT_ROUGHNESS = 0.5
#: Rec. 709 luminance: how Blender turns a colour into the float a Roughness socket takes.
_LUMINANCE = np.array([0.2126, 0.7152, 0.0722], np.float32)


def _image_value(image: bpy.types.Image, output: str, cache: dict[str, np.ndarray]
                 ) -> np.ndarray | None:
    """(H, W, 3) float32, the one value an Image Texture's ``output`` (Color or Alpha)
    gives a float socket, in every channel; None for an image without pixels."""
    key = f"{image.name}\0{output}"
    if key in cache:
        return cache[key]
    w, h = image.size
    if w == 0 or h == 0:
        return None
    if output == "Color" and image.channels >= 3:
        one = _image_pixels(image, cache) @ _LUMINANCE  # shares the base colour's read
    else:
        buf = np.empty(w * h * image.channels, np.float32)
        image.pixels.foreach_get(buf)
        px = buf.reshape(h, w, image.channels)
        if output == "Alpha":
            one = px[..., 3] if image.channels == 4 else np.ones((h, w), np.float32)
        else:
            one = px[..., 0]
    cache[key] = np.ascontiguousarray(np.repeat(one[..., None], 3, axis=-1), np.float32)
    return cache[key]


def roughness_source(mat: bpy.types.Material | None,
                     cache: dict[str, np.ndarray]) -> AlbedoSource:
    """The roughness ``mat`` gives a surface, as a source read like the base colour
    (every channel the roughness); ``exact`` False where the viewport's stands in."""
    def constant(r: float, exact: bool = True) -> AlbedoSource:
        return AlbedoSource(color=np.full(3, float(r), np.float32), exact=exact)

    if mat is None:
        return constant(DEFAULT_ROUGHNESS)
    viewport = constant(float(mat.roughness), exact=False)
    out = mat.node_tree.get_output_node("CYCLES") if mat.node_tree is not None else None
    bsdf = _from(out.inputs["Surface"]) if out is not None else None
    if bsdf is None:
        return viewport
    if bsdf.bl_idname == "ShaderNodeBsdfDiffuse":
        return constant(1.0)  # no gloss of its own: the broadest lobe
    if bsdf.bl_idname != "ShaderNodeBsdfPrincipled":
        return viewport
    socket = bsdf.inputs["Roughness"]
    node, output = _from_output(socket)
    if node is None:
        return constant(socket.default_value)
    if node.bl_idname == "ShaderNodeValue":
        return constant(node.outputs[0].default_value)
    if node.bl_idname == "ShaderNodeTexImage" and node.image is not None:
        vec = _from(node.inputs["Vector"])
        values = _image_value(node.image, output, cache)
        if values is None or (vec is not None and vec.bl_idname != "ShaderNodeUVMap"):
            return viewport
        return AlbedoSource(color=np.ones(3, np.float32), image=values,
                            uv_map=(vec.uv_map or None) if vec is not None else None,
                            extension=node.extension, interpolation=node.interpolation)
    return viewport


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
    rough: list[AlbedoSource] = []
    rough_approx: list[str] = []
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
                rough.append(roughness_source(mat, cache))
                if not rough[-1].exact:
                    rough_approx.append(key)
            index.append(key_of[key])
        me = ev.to_mesh()
        try:
            mi = np.zeros(len(me.polygons), np.int32)
            if len(me.polygons):
                me.polygons.foreach_get("material_index", mi)
            slot = np.clip(mi[polys], 0, len(index) - 1)
            tri_source.append(np.asarray(index, np.int32)[slot])
            for src in [x for i in set(index) for x in (sources[i], rough[i])]:
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
    return AlbedoSurface(sources, np.concatenate(tri_source), uvs, approximated, rough,
                         rough_approx)
