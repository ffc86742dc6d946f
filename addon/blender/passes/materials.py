"""Read each material's base colour into :class:`~..core.passes.albedo.AlbedoSource`.

What it reads: the Cycles output's surface shader, a Principled (or Diffuse) BSDF, and
its Base Color times 1 - Metallic, through the nodes real characters put there:
constants, RGB and Value nodes, Image Textures (at a UV Map node's map or the render UV
map), colour attributes (glTF's vertex colours: one colour over the mesh, or varying and
multiplied into the rest), and the per-texel arithmetic
between them (Mix, Math, Separate / Combine Color, Invert, Gamma, Map Range, Clamp,
Color Ramp: ``core.passes.shader_values``). That covers what the glTF and FBX importers
build (a base colour times its factor and the vertex colours, a metallic-roughness image
split into channels) and most hand-made characters. Anything else (procedural textures,
node groups, a varying colour attribute through more than a product) falls back to the
material's viewport colour and is reported, so the pass never silently lies.

The surface's roughness (the ``specular`` pass's lobe) is read the same way from the
BSDF's Roughness (a colour feeding it gives its luminance, as Blender converts), and its
reflectance (F0) from the IOR, Specular IOR Level, Specular Tint and Metallic, and its
clear coat (weight, roughness, F0); anything else takes the material's viewport roughness
(F0 0.04, no coat) and is reported.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import bpy
import numpy as np

from ...core.passes import shader_values as SV
from ...core.passes.albedo import DEFAULT_ALBEDO, AlbedoSource, srgb_to_linear
from ...core.passes.irradiance import SPECULAR_F0


@dataclass
class AlbedoSurface:
    """Per triangle of a shot: which source paints it and the UVs its image is read at."""

    sources: list[AlbedoSource]
    tri_source: np.ndarray  # (T,) int32 index into sources
    corner_uvs: dict[str | None, np.ndarray]  # UV-map name (None: render) -> (T, 3, 2)
    approximated: list[str]  # names of materials read only approximately
    # Per source, its roughness and its reflectance at normal incidence (F0), read the
    # same way (every channel the one value).
    roughness: list[AlbedoSource] = field(default_factory=list)
    rough_approximated: list[str] = field(default_factory=list)  # roughness or F0 guessed
    f0: list[AlbedoSource] = field(default_factory=list)
    # Per source, its coat: (Coat Weight, Coat Roughness, the coat's F0) as three channels
    coat: list[AlbedoSource] = field(default_factory=list)
    # Colour-attribute name (as the sources name it) -> (T, 3, 3) linear colour per corner
    corner_colors: dict[str, np.ndarray] = field(default_factory=dict)


def _from(socket: bpy.types.NodeSocket) -> bpy.types.Node | None:
    """The node feeding ``socket``, through reroutes; None when unlinked."""
    src = _source_socket(socket)
    return None if src is None else src.node


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

#: The Image Texture outputs followed (a colour, and its alpha as a float).
_IMAGE_OUTPUTS = ("Color", "Alpha")


def _image_alpha(image: bpy.types.Image, cache: dict[str, np.ndarray]) -> np.ndarray | None:
    """(H, W, 3) float32: the image's alpha in every channel (1 without one)."""
    key = f"{image.name}\0Alpha"
    if key not in cache:
        w, h = image.size
        if w == 0 or h == 0:
            return None
        if image.channels == 4:
            buf = np.empty(w * h * 4, np.float32)
            image.pixels.foreach_get(buf)
            one = buf.reshape(h, w, 4)[..., 3]
        else:
            one = np.ones((h, w), np.float32)
        cache[key] = np.ascontiguousarray(np.repeat(one[..., None], 3, axis=-1), np.float32)
    return cache[key]


def _color_attribute(me: bpy.types.Mesh, name: str):
    """Colour attribute ``name`` of ``me`` ("" its render one), or None."""
    attrs = me.color_attributes
    return attrs.get(name or attrs.default_color_name or "")


def corner_colors(me: bpy.types.Mesh, name: str, corners: np.ndarray) -> np.ndarray:
    """(T, 3, 3) linear RGB of colour attribute ``name`` at ``corners`` (T, 3) loop
    indices of ``me`` (black where the mesh lacks it)."""
    attr = _color_attribute(me, name)
    if attr is None or not len(attr.data):
        return np.zeros((*corners.shape, 3), np.float32)
    buf = np.empty(len(attr.data) * 4, np.float32)
    attr.data.foreach_get("color", buf)  # linear for byte and float colours alike
    rgb = buf.reshape(-1, 4)[:, :3]
    if attr.domain == "POINT":
        vert = np.empty(len(me.loops), np.int32)
        me.loops.foreach_get("vertex_index", vert)
        return rgb[vert[corners]]
    return rgb[corners]


def uniform_color(meshes: Sequence[bpy.types.Mesh], name: str) -> np.ndarray | None:
    """(4,) linear RGBA of colour attribute ``name`` ("" the render one) where it is the
    same on every corner of every mesh; None where it varies or a mesh lacks it."""
    value = None
    for me in meshes:
        attr = _color_attribute(me, name)
        if attr is None:
            return None
        if not len(attr.data):
            continue
        buf = np.empty(len(attr.data) * 4, np.float32)
        attr.data.foreach_get("color", buf)  # linear for byte and float colours alike
        px = buf.reshape(-1, 4)
        lo, hi = px.min(axis=0), px.max(axis=0)
        if (hi - lo).max() > 1e-3 or (value is not None and np.abs(value - lo).max() > 1e-3):
            return None
        value = lo
    return value


class _TreeReader:
    """What a material's nodes give a socket, as a :class:`~..core.passes.shader_values.
    ShaderValue`: constants, images at a UV map, and the per-texel arithmetic nodes
    between them (see that module); :class:`SV.Unsupported` for anything else.

    ``meshes``: the meshes wearing the material (a Color Attribute node is followed where
    it is one colour over them, as glTF's importer leaves a mesh without vertex colours)."""

    def __init__(self, cache: dict[str, np.ndarray], meshes: Sequence[bpy.types.Mesh] = ()):
        self.cache = cache
        self.meshes = meshes

    def socket(self, socket: bpy.types.NodeSocket) -> SV.ShaderValue:
        """The value ``socket`` takes: its link's, converted to the socket's type, else
        its own."""
        src = _source_socket(socket)
        if src is None:
            if socket.type not in ("VALUE", "RGBA"):
                raise SV.Unsupported(f"a {socket.type.lower()} socket")
            return SV.constant(socket.default_value)
        value = self.output(src.node, src)
        if socket.type == "VALUE" and src.type == "RGBA":
            return SV.to_float(value)
        return value

    def _input(self, node: bpy.types.Node, key: str) -> SV.ShaderValue:
        sock = next((i for i in node.inputs if i.identifier == key), None)
        if sock is None:
            sock = node.inputs[key]
        return self.socket(sock)

    def output(self, node: bpy.types.Node, out: bpy.types.NodeSocket) -> SV.ShaderValue:
        """The value ``node`` puts on its output ``out``."""
        kind, name, i = node.bl_idname, out.name, self._input
        if kind in ("ShaderNodeRGB", "ShaderNodeValue"):
            return SV.constant(out.default_value)
        if kind == "ShaderNodeTexImage":
            return self._image(node, name)
        if kind == "ShaderNodeVertexColor":
            return self._color_attribute(node.layer_name, name)
        if kind == "ShaderNodeMix":
            if node.data_type == "RGBA":
                return SV.mix(node.blend_type, i(node, "Factor_Float"), i(node, "A_Color"),
                              i(node, "B_Color"), node.clamp_factor, node.clamp_result)
            if node.data_type == "FLOAT":
                return SV.mix("MIX", i(node, "Factor_Float"), i(node, "A_Float"),
                              i(node, "B_Float"), node.clamp_factor)
            raise SV.Unsupported(f"a {node.data_type.lower()} Mix node")
        if kind == "ShaderNodeMixRGB":
            return SV.mix(node.blend_type, i(node, "Fac"), i(node, "Color1"),
                          i(node, "Color2"), True, node.use_clamp)
        if kind in ("ShaderNodeSeparateColor", "ShaderNodeSeparateRGB"):
            if getattr(node, "mode", "RGB") != "RGB":
                raise SV.Unsupported(f"a {node.mode} Separate Color node")
            return SV.channel(i(node, node.inputs[0].identifier), "RGB".index(name[0]))
        if kind == "ShaderNodeCombineColor":
            if node.mode != "RGB":
                raise SV.Unsupported(f"a {node.mode} Combine Color node")
            return SV.combine(i(node, "Red"), i(node, "Green"), i(node, "Blue"))
        if kind == "ShaderNodeMath":
            ins = [self.socket(s) for s in node.inputs[:3]]
            return SV.math(node.operation, *ins, clamp=node.use_clamp)
        if kind == "ShaderNodeInvert":
            return SV.invert(i(node, "Fac"), i(node, "Color"))
        if kind == "ShaderNodeGamma":
            return SV.gamma(i(node, "Color"), i(node, "Gamma"))
        if kind == "ShaderNodeMapRange":
            if node.data_type != "FLOAT" or node.interpolation_type != "LINEAR" \
                    or name != "Result":
                raise SV.Unsupported("a Map Range node other than float and linear")
            return SV.map_range(*(i(node, k) for k in ("Value", "From Min", "From Max",
                                                         "To Min", "To Max")), node.clamp)
        if kind == "ShaderNodeClamp":
            return SV.clamp_range(i(node, "Value"), i(node, "Min"), i(node, "Max"),
                                  node.clamp_type == "MINMAX")
        if kind == "ShaderNodeValToRGB":
            table = self._ramp_table(node)
            fn = SV.ramp_alpha if name == "Alpha" else SV.ramp
            return fn(i(node, "Fac"), table, node.color_ramp.interpolation != "CONSTANT")
        raise SV.Unsupported(f"a {node.bl_label or kind} node")

    def _color_attribute(self, layer: str, output: str) -> SV.ShaderValue:
        rgba = uniform_color(self.meshes, layer)
        if rgba is not None:
            return SV.constant(rgba[3] if output == "Alpha" else rgba[:3])
        if output == "Alpha" or any(_color_attribute(me, layer) is None for me in self.meshes):
            raise SV.Unsupported("a colour attribute's alpha, or one a mesh lacks")
        return SV.attribute(layer)

    @staticmethod
    def _ramp_table(node: bpy.types.Node) -> np.ndarray:
        ramp = node.color_ramp
        n = SV.RAMP_TABLE_SIZE
        return np.array([tuple(ramp.evaluate(k / (n - 1))) for k in range(n)], np.float32)

    def _image(self, node: bpy.types.Node, output: str) -> SV.ShaderValue:
        image = node.image
        if image is None or image.source not in ("FILE", "GENERATED") \
                or node.projection != "FLAT" or output not in _IMAGE_OUTPUTS:
            raise SV.Unsupported("an Image Texture without a single flat image")
        vec = _from(node.inputs["Vector"])
        if vec is not None and vec.bl_idname != "ShaderNodeUVMap":
            raise SV.Unsupported("an Image Texture read at other coordinates than a UV map")
        pixels = (_image_alpha if output == "Alpha" else _image_pixels)(image, self.cache)
        if pixels is None:
            raise SV.Unsupported("an Image Texture without pixels")
        uv_map = (vec.uv_map or None) if vec is not None else None
        return SV.image(pixels, SV.Sampler(uv_map, node.extension, node.interpolation))


def _source_socket(socket: bpy.types.NodeSocket) -> bpy.types.NodeSocket | None:
    """The output socket feeding ``socket``, through reroutes; None when unlinked (or
    its link muted: the socket's own value)."""
    while socket.is_linked:
        link = socket.links[0]
        if not link.is_valid or link.is_muted:
            return None
        if link.from_node.bl_idname != "NodeReroute":
            return link.from_socket
        socket = link.from_node.inputs[0]
    return None


def _as_source(value: SV.ShaderValue, scale: np.ndarray | float = 1.0) -> AlbedoSource:
    """``value`` times ``scale`` as a source the passes read."""
    scale = np.broadcast_to(np.asarray(scale, np.float32), (3,)).copy()
    if not value.is_image:
        return AlbedoSource(color=value.value * scale, attribute=value.attribute)
    s = value.sampler
    return AlbedoSource(color=scale, image=value.value, uv_map=s.uv_map,
                        extension=s.extension, interpolation=s.interpolation,
                        attribute=value.attribute)


def _surface_bsdf(mat: bpy.types.Material) -> bpy.types.Node | None:
    out = mat.node_tree.get_output_node("CYCLES") if mat.node_tree is not None else None
    return _from(out.inputs["Surface"]) if out is not None else None


def roughness_source(mat: bpy.types.Material | None, cache: dict[str, np.ndarray],
                     meshes: Sequence[bpy.types.Mesh] = ()) -> AlbedoSource:
    """The roughness ``mat`` gives a surface, as a source read like the base colour
    (every channel the roughness); ``exact`` False where the viewport's stands in."""
    if mat is None:
        return AlbedoSource(color=np.full(3, DEFAULT_ROUGHNESS, np.float32))
    viewport = AlbedoSource(color=np.full(3, float(mat.roughness), np.float32), exact=False)
    bsdf = _surface_bsdf(mat)
    if bsdf is None:
        return viewport
    if bsdf.bl_idname == "ShaderNodeBsdfDiffuse":
        return AlbedoSource(color=np.ones(3, np.float32))  # no gloss: the broadest lobe
    if bsdf.bl_idname != "ShaderNodeBsdfPrincipled":
        return viewport
    try:
        return _as_source(_TreeReader(cache, meshes).socket(bsdf.inputs["Roughness"]))
    except SV.Unsupported:
        return viewport


def f0_source(mat: bpy.types.Material | None, cache: dict[str, np.ndarray],
              meshes: Sequence[bpy.types.Mesh] = ()) -> AlbedoSource:
    """The reflectance at normal incidence ``mat``'s gloss has (the ``specular`` pass's
    F0, a colour), as Cycles' Principled BSDF derives it: ((IOR - 1) / (IOR + 1))² times
    twice the Specular IOR Level (0.5 leaves it; at most 0.99), times the Specular Tint,
    mixed by Metallic with the metal's (the base colour); a Diffuse BSDF has none.
    ``exact`` False where the default 0.04 stands in for a tree this does not follow."""
    default = AlbedoSource(color=np.full(3, SPECULAR_F0, np.float32))
    if mat is None:
        return default
    bsdf = _surface_bsdf(mat)
    if bsdf is not None and bsdf.bl_idname == "ShaderNodeBsdfDiffuse":
        return AlbedoSource(color=np.zeros(3, np.float32))
    if bsdf is None or bsdf.bl_idname != "ShaderNodeBsdfPrincipled":
        return AlbedoSource(color=default.color, exact=False)
    reader = _TreeReader(cache, meshes)
    try:
        ins = [reader.socket(bsdf.inputs[k]) for k in ("IOR", "Specular IOR Level")]
        tint = reader.socket(bsdf.inputs["Specular Tint"])
        metallic = reader.socket(bsdf.inputs["Metallic"])
        if metallic.is_image or np.any(metallic.value > 0.0):
            base = reader.socket(bsdf.inputs["Base Color"])
            return _as_source(SV.apply(principled_f0, *ins, tint, base, metallic))
        return _as_source(SV.apply(dielectric_f0, *ins, tint))
    except SV.Unsupported:
        return AlbedoSource(color=default.color, exact=False)


#: A surface without a coat: weight 0 (its roughness and F0 then unused).
NO_COAT = (0.0, 0.03, 0.04)


def coat_source(mat: bpy.types.Material | None, cache: dict[str, np.ndarray],
                meshes: Sequence[bpy.types.Mesh] = ()) -> AlbedoSource:
    """The clear coat over ``mat``'s gloss (glTF's clearcoat; lacquer, a visor) as three
    channels: Coat Weight, Coat Roughness and its F0 from Coat IOR, as Cycles' Principled
    BSDF layers it; weight 0 without one. ``exact`` False where the tree is not read."""
    none = AlbedoSource(color=np.array(NO_COAT, np.float32))
    bsdf = _surface_bsdf(mat) if mat is not None else None
    if bsdf is None or bsdf.bl_idname != "ShaderNodeBsdfPrincipled":
        return none
    reader = _TreeReader(cache, meshes)
    try:
        weight = reader.socket(bsdf.inputs["Coat Weight"])
        if not weight.is_image and not np.any(weight.value > 0.0):
            return none
        f0 = SV.apply(lambda i: dielectric_f0(i, 0.5, 1.0), reader.socket(bsdf.inputs["Coat IOR"]))
        return _as_source(SV.combine(SV.apply(lambda w: np.clip(w, 0.0, 1.0), weight),
                                     reader.socket(bsdf.inputs["Coat Roughness"]), f0))
    except SV.Unsupported:
        return AlbedoSource(color=none.color, exact=False)


def dielectric_f0(ior: np.ndarray, level: np.ndarray, tint: np.ndarray) -> np.ndarray:
    """Cycles' Principled F0 from its IOR, Specular IOR Level and Specular Tint."""
    f0 = ((ior - 1.0) / np.where(ior + 1.0 != 0.0, ior + 1.0, 1.0)) ** 2
    return np.minimum(f0 * 2.0 * level, 0.99) * tint


def principled_f0(ior: np.ndarray, level: np.ndarray, tint: np.ndarray, base: np.ndarray,
                  metallic: np.ndarray) -> np.ndarray:
    """The F0 of Cycles' Principled mix of its dielectric and its metal (whose F0 is the
    base colour: gold reflects gold), weighted by Metallic."""
    m = np.clip(metallic, 0.0, 1.0)
    return (1.0 - m) * dielectric_f0(ior, level, tint) + m * base


def _viewport(mat: bpy.types.Material | None) -> AlbedoSource:
    col = DEFAULT_ALBEDO if mat is None else tuple(mat.diffuse_color)[:3]
    return AlbedoSource(color=np.array(col, np.float32), exact=mat is None)


def albedo_source(mat: bpy.types.Material | None, cache: dict[str, np.ndarray],
                  meshes: Sequence[bpy.types.Mesh] = ()) -> AlbedoSource:
    """The base colour ``mat`` gives a surface (see the module doc for what is read);
    ``meshes``: the meshes wearing it (for its colour attributes)."""
    if mat is None or mat.node_tree is None:  # Blender 5: a material's nodes are always on
        return _viewport(mat)
    bsdf = _surface_bsdf(mat)
    if bsdf is None or bsdf.bl_idname not in ("ShaderNodeBsdfPrincipled",
                                              "ShaderNodeBsdfDiffuse"):
        return _viewport(mat)
    reader = _TreeReader(cache, meshes)
    try:
        if bsdf.bl_idname == "ShaderNodeBsdfDiffuse":
            return _as_source(reader.socket(bsdf.inputs["Color"]))
        base = reader.socket(bsdf.inputs["Base Color"])
        metallic = reader.socket(bsdf.inputs["Metallic"])
        if not metallic.is_image:  # a scale: the base colour's image is shared, not copied
            return _as_source(base, 1.0 - metallic.value)
        return _as_source(SV.multiply(base, SV.apply(lambda m: 1.0 - m, metallic)))
    except SV.Unsupported:
        return _viewport(mat)


def material_wearers(objects: Sequence[bpy.types.Object]) -> dict[str, list[bpy.types.Mesh]]:
    """Per material name, the meshes among ``objects`` that wear it."""
    out: dict[str, list[bpy.types.Mesh]] = {}
    for ob in objects:
        if ob.type != "MESH":
            continue
        for slot in ob.material_slots:
            if slot.material is not None and ob.data not in out.setdefault(slot.material.name, []):
                out[slot.material.name].append(ob.data)
    return out


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
    f0: list[AlbedoSource] = []
    coat: list[AlbedoSource] = []
    colors: dict[str, np.ndarray] = {}
    t_off = 0
    wearers = material_wearers(objects)
    for ob, polys, corners in zip(objects, polygon_of_tri, corners_of_tri, strict=True):
        ev = evaluated(ob)
        slots = [s.material for s in ev.material_slots] or [None]
        index = []
        for mat in slots:
            key = mat.name if mat is not None else ""
            if key not in key_of:
                key_of[key] = len(sources)
                sources.append(albedo_source(mat, cache, wearers.get(key, ())))
                if not sources[-1].exact:
                    approximated.append(key)
                rough.append(roughness_source(mat, cache, wearers.get(key, ())))
                f0.append(f0_source(mat, cache, wearers.get(key, ())))
                coat.append(coat_source(mat, cache, wearers.get(key, ())))
                if not (rough[-1].exact and f0[-1].exact and coat[-1].exact):
                    rough_approx.append(key)
            index.append(key_of[key])
        me = ev.to_mesh()
        try:
            mi = np.zeros(len(me.polygons), np.int32)
            if len(me.polygons):
                me.polygons.foreach_get("material_index", mi)
            slot = np.clip(mi[polys], 0, len(index) - 1)
            tri_source.append(np.asarray(index, np.int32)[slot])
            for src in [x for i in set(index) for x in (sources[i], rough[i], f0[i], coat[i])]:
                if src.attribute is not None:
                    cols = colors.setdefault(src.attribute,
                                             np.zeros((len(render_uvs), 3, 3), np.float32))
                    cols[t_off:t_off + len(polys)] = corner_colors(me, src.attribute, corners)
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
                         rough_approx, f0, coat, colors)
