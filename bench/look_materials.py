"""The looks ``bench look`` scores: each a change to the character's Blender materials,
so Cycles renders the truth of the look in any frame (the keys are its Cycles frames).

- ``ill``: a skin state: the colours desaturated, darkened and tinted green.
- ``toon``: a cel look: Cycles' Toon BSDF with a hard terminator (two bands), a flat fill
  in the shadow band and dark outlines where the surface turns away from the camera.
- ``hatched``: diagonal ink hatching in UV space over the colours, lit as before.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import bpy

LOOKS = ("ill", "toon", "hatched")


def _colour_source(tree: bpy.types.NodeTree, bsdf: bpy.types.Node) -> bpy.types.NodeSocket:
    """The socket feeding the BSDF's Base Color (an RGB node holding its value when
    nothing is linked)."""
    sock = bsdf.inputs["Base Color"]
    if sock.is_linked:
        return sock.links[0].from_socket
    rgb = tree.nodes.new("ShaderNodeRGB")
    rgb.outputs[0].default_value = tuple(sock.default_value)
    return rgb.outputs[0]


def _ill(tree: bpy.types.NodeTree, bsdf: bpy.types.Node, src: bpy.types.NodeSocket) -> None:
    hsv = tree.nodes.new("ShaderNodeHueSaturation")
    hsv.inputs["Hue"].default_value = 0.5
    hsv.inputs["Saturation"].default_value = 0.45
    hsv.inputs["Value"].default_value = 0.85
    tree.links.new(src, hsv.inputs["Color"])
    tint = tree.nodes.new("ShaderNodeMix")
    tint.data_type, tint.blend_type = "RGBA", "MULTIPLY"
    tint.inputs["Factor"].default_value = 1.0
    tree.links.new(hsv.outputs["Color"], tint.inputs["A"])
    tint.inputs["B"].default_value = (0.72, 0.95, 0.62, 1.0)
    tree.links.new(tint.outputs["Result"], bsdf.inputs["Base Color"])


def _toon(tree: bpy.types.NodeTree, bsdf: bpy.types.Node, src: bpy.types.NodeSocket) -> None:
    out = next(n for n in tree.nodes if n.type == "OUTPUT_MATERIAL")
    toon = tree.nodes.new("ShaderNodeBsdfToon")
    toon.component = "DIFFUSE"
    toon.inputs["Size"].default_value = 0.5
    toon.inputs["Smooth"].default_value = 0.0
    tree.links.new(src, toon.inputs["Color"])
    fill = tree.nodes.new("ShaderNodeEmission")
    fill.inputs["Strength"].default_value = 0.3
    tree.links.new(src, fill.inputs["Color"])
    lit = tree.nodes.new("ShaderNodeAddShader")
    tree.links.new(toon.outputs[0], lit.inputs[0])
    tree.links.new(fill.outputs[0], lit.inputs[1])
    facing = tree.nodes.new("ShaderNodeLayerWeight")
    facing.inputs["Blend"].default_value = 0.5
    edge = tree.nodes.new("ShaderNodeMath")
    edge.operation = "GREATER_THAN"
    edge.inputs[1].default_value = 0.72
    tree.links.new(facing.outputs["Facing"], edge.inputs[0])
    ink = tree.nodes.new("ShaderNodeEmission")
    ink.inputs["Color"].default_value = (0.02, 0.015, 0.02, 1.0)
    mix = tree.nodes.new("ShaderNodeMixShader")
    tree.links.new(edge.outputs[0], mix.inputs["Fac"])
    tree.links.new(lit.outputs[0], mix.inputs[1])
    tree.links.new(ink.outputs[0], mix.inputs[2])
    tree.links.new(mix.outputs[0], out.inputs["Surface"])


def _hatched(tree: bpy.types.NodeTree, bsdf: bpy.types.Node, src: bpy.types.NodeSocket) -> None:
    coords = tree.nodes.new("ShaderNodeTexCoord")
    wave = tree.nodes.new("ShaderNodeTexWave")
    wave.wave_type, wave.bands_direction = "BANDS", "DIAGONAL"
    wave.inputs["Scale"].default_value = 24.0
    wave.inputs["Distortion"].default_value = 0.0
    wave.inputs["Detail"].default_value = 0.0
    tree.links.new(coords.outputs["UV"], wave.inputs["Vector"])
    line = tree.nodes.new("ShaderNodeMapRange")  # fac 0..1 -> ink 0.35 on the lines, 1 off
    line.inputs["From Min"].default_value = 0.3
    line.inputs["From Max"].default_value = 0.45
    line.inputs["To Min"].default_value = 0.35
    line.inputs["To Max"].default_value = 1.0
    tree.links.new(wave.outputs["Fac"], line.inputs["Value"])
    mul = tree.nodes.new("ShaderNodeMix")
    mul.data_type, mul.blend_type = "RGBA", "MULTIPLY"
    mul.inputs["Factor"].default_value = 1.0
    tree.links.new(src, mul.inputs["A"])
    tree.links.new(line.outputs["Result"], mul.inputs["B"])
    tree.links.new(mul.outputs["Result"], bsdf.inputs["Base Color"])


_BUILDERS = {"ill": _ill, "toon": _toon, "hatched": _hatched}


def look_material(mat: bpy.types.Material, look: str) -> bpy.types.Material:
    """A copy of ``mat`` in ``look`` (the original is untouched)."""
    new = mat.copy()
    new.name = f"{mat.name}_{look}"
    tree = new.node_tree
    bsdf = next((n for n in tree.nodes if n.type == "BSDF_PRINCIPLED"), None)
    if bsdf is None:
        return new
    _BUILDERS[look](tree, bsdf, _colour_source(tree, bsdf))
    return new


@contextmanager
def wearing(meshes: list[bpy.types.Object], look: str | None) -> Iterator[None]:
    """The meshes in ``look`` (None: as they are) for the block; their materials after."""
    if look is None:
        yield
        return
    copies: dict[str, bpy.types.Material] = {}
    saved = []
    for obj in meshes:
        for slot in obj.material_slots:
            if slot.material is None:
                continue
            saved.append((slot, slot.material))
            if slot.material.name not in copies:
                copies[slot.material.name] = look_material(slot.material, look)
            slot.material = copies[slot.material.name]
    try:
        yield
    finally:
        for slot, mat in saved:
            slot.material = mat
        for mat in copies.values():
            bpy.data.materials.remove(mat)
