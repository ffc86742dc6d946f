"""The demo character's UV charts and its one packed texture atlas.

One atlas for body and cape, so a UV names one surface point of the whole
character (what a neural texture sampled at the UV pass needs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import bpy
import numpy as np

from ...addon.core.rig.transforms import normalize
from .. import textures
from .body import BodyPart, CapeGrid, flat_material
from .skeleton import BODY_REGIONS, vec3

# --------------------------------------------------------------------------- UVs and textures

UV_MAP = "UVMap"
# One atlas for the body and the cape, so that a UV names one surface point of the
# whole character (what a neural texture sampled at the UV pass needs): about 2.1 mm
# per texel at seed 0, where a 512² full-body render has ~3.7 mm per pixel.
ATLAS_PX = 1024
_GUTTER_PX = 4
_RIM_SQUEEZE = 0.25  # the cape's 8 mm rim is one colour: a quarter of the texel density


@dataclass
class _Chart:
    """One UV island: a body piece unrolled about its axis, or a flat cape sheet."""

    name: str
    region: str
    radius: float  # around = theta * radius (metres); the cape: the widest row's width
    length: float
    lo: np.ndarray  # (2,) lowest (around, along) of its loops, metres
    hi: np.ndarray
    half_width: tuple[np.ndarray, np.ndarray] | None = None  # cape: (s, width / 2)

    def texels(self, u: np.ndarray, v: np.ndarray) -> textures.Texels:
        hw = None if self.half_width is None else np.interp(v, *self.half_width)
        return textures.Texels(self.name, (u / self.radius).astype(np.float32),
                               v.astype(np.float32), self.radius, self.length, hw)


def _part_axis(p: BodyPart) -> tuple[np.ndarray, np.ndarray, float]:
    """Start, unit direction and length of the axis a part is unrolled about."""
    if p.b is not None:
        ab = p.b - p.a
        length = float(np.linalg.norm(ab))
        return p.a, ab / length, length
    d = {"head": vec3(0, 0, 1), "hair": vec3(0, 0, 1), "nose": vec3(0, -1, 0)}.get(
        p.chart, vec3(math.copysign(1.0, p.a[0]), 0, 0))
    half = float(np.abs(d) @ p.sizes)
    return p.a - d * half, d, 2 * half


def _loop_topology(me: bpy.types.Mesh) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per loop: its vertex and face; per face: its loop count."""
    total = np.empty(len(me.polygons), dtype=np.int64)
    me.polygons.foreach_get("loop_total", total)
    vert = np.empty(len(me.loops), dtype=np.int64)
    me.loops.foreach_get("vertex_index", vert)
    return vert, np.repeat(np.arange(len(total)), total), total


def _unwrap_faces(theta: np.ndarray, loop_face: np.ndarray, total: np.ndarray) -> np.ndarray:
    """Keep each face's angles together across the seam at +-pi (its mean within +-pi)."""
    first = np.repeat(np.cumsum(total) - total, total)
    ref = theta[first]
    t = ref + np.mod(theta - ref + np.pi, 2 * np.pi) - np.pi
    mean = np.bincount(loop_face, t, len(total)) / total
    shift = np.where(mean > np.pi, -2 * np.pi, np.where(mean < -np.pi, 2 * np.pi, 0.0))
    return t + shift[loop_face]


def body_charts(me: bpy.types.Mesh, parts: list[BodyPart], face_part: np.ndarray,
                 face_region: np.ndarray, verts: np.ndarray, vdist: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, list[_Chart]]:
    """Per-loop (around, along) metres and chart index, and the charts, for the body.

    A face belongs to the chart of its nearest part, split by material; each of
    its loops is unrolled about the axis of that chart's part nearest to the loop's
    vertex, so the faces of one chart agree on their shared vertices. Angles run
    from the chart's front (-Y, or +Z for pieces along Y such as the feet), so the
    seams sit at the back and under the soles.
    """
    loop_vert, loop_face, total = _loop_topology(me)
    groups = list(dict.fromkeys(p.chart for p in parts))
    part_group = np.array([groups.index(p.chart) for p in parts])
    axes = [_part_axis(p) for p in parts]
    charts_of = [p.chart for p in parts]
    if "head" in charts_of and "hair" in charts_of:  # one axis: the hairline agrees on both
        head, hair = charts_of.index("head"), charts_of.index("hair")
        a, d, length = axes[hair]
        axes[hair] = (np.array([*axes[head][0][:2], a[2]]), d, length)
    theta = np.zeros(len(loop_vert))
    along = np.zeros(len(loop_vert))
    radial = np.zeros(len(loop_vert))
    loop_group = part_group[face_part][loop_face]
    for gi in range(len(groups)):
        members = np.nonzero(part_group == gi)[0]
        loops = np.nonzero(loop_group == gi)[0]
        mean_axis = normalize(sum(axes[k][1] * axes[k][2] for k in members))
        ref = vec3(0, 0, 1) if abs(mean_axis[1]) > 0.8 else vec3(0, -1, 0)
        offsets = np.concatenate([[0.0], np.cumsum([axes[k][2] for k in members])[:-1]])
        if parts[members[0]].b is None:  # blobs (the head and its ears): the first one's axis
            offsets[:] = 0.0
            for k in members[1:]:
                axes[k] = axes[members[0]]
        lv = loop_vert[loops]
        near = np.argmin(vdist[members][:, lv], axis=0)
        for j, k in enumerate(members):
            sel = loops[near == j]
            a, d, _ = axes[k]
            front = normalize(ref - d * (ref @ d))
            side = np.cross(d, front)
            q = verts[loop_vert[sel]] - a
            along[sel] = offsets[j] + q @ d
            theta[sel] = np.arctan2(q @ side, q @ front)
            radial[sel] = np.linalg.norm(q - np.outer(q @ d, d), axis=1)
    theta = _unwrap_faces(theta, loop_face, total)
    keys = list(dict.fromkeys(zip(part_group[face_part].tolist(), face_region.tolist(),
                                  strict=True)))
    face_chart = np.array([keys.index(k) for k in zip(part_group[face_part].tolist(),
                                                      face_region.tolist(), strict=True)])
    loop_chart = face_chart[loop_face]
    uv = np.zeros((len(loop_vert), 2))
    charts = []
    for ci, (gi, ri) in enumerate(keys):
        sel = loop_chart == ci
        members = np.nonzero(part_group == gi)[0]
        r = max(float(np.median(radial[sel])), 1e-3)
        uv[sel] = np.stack([theta[sel] * r, along[sel]], axis=1)
        charts.append(_Chart(groups[gi], BODY_REGIONS[ri], r,
                             float(axes[members[0]][2] if parts[members[0]].b is None
                                   else sum(axes[k][2] for k in members)),
                             uv[sel].min(axis=0), uv[sel].max(axis=0)))
    return uv, loop_chart, charts


def cape_charts(me: bpy.types.Mesh, grid: CapeGrid) -> tuple[np.ndarray, np.ndarray,
                                                                list[_Chart]]:
    """Per-loop metres and chart index for the cape: outer sheet, inner sheet, rim.

    The sheets are laid out as the grid's rectangle (across x arc length), the outer
    one mirrored so that it reads unmirrored from behind; the rim is one strip
    around the perimeter.
    """
    loop_vert, loop_face, total = _loop_topology(me)
    off = grid.nu * grid.nv
    side, rest = np.divmod(loop_vert, off)
    j, i = np.divmod(rest, grid.nu)
    wref = float(grid.width.max())
    n_sheet = 2 * (grid.nu - 1) * (grid.nv - 1)
    face_kind = np.where(np.arange(len(total)) < n_sheet, 0, 2)
    kind = face_kind[loop_face]
    kind = np.where(kind == 0, 1 - side, 2)  # 0 outer, 1 inner, 2 rim
    uv = np.stack([np.where(side == 1, -1.0, 1.0) * grid.u[i] * wref, grid.s[j]], axis=1)
    # The rim: position along the perimeter (unwrapped per face) and across the slab.
    co = np.empty(len(me.vertices) * 3, dtype=np.float32)
    me.vertices.foreach_get("co", co)
    co = co.reshape(-1, 3)
    rim_faces = np.nonzero(face_kind == 2)[0]
    first = (np.cumsum(total) - total)[rim_faces]
    a, b = loop_vert[first], loop_vert[first + 1]
    seg = np.linalg.norm(co[b] - co[a], axis=1) * _RIM_SQUEEZE
    start = np.concatenate([[0.0], np.cumsum(seg)[:-1]])
    corner = first[:, None] + np.arange(4)  # loops: (p0, side 0), (p1, 0), (p1, 1), (p0, 1)
    uv[corner, 0] = start[:, None] + seg[:, None] * np.array([0, 1, 1, 0])
    uv[corner, 1] = 0.02 * np.array([0, 0, 1, 1])
    length = float(grid.s[-1])
    hw = (grid.s, grid.width / 2)
    charts = []
    for ci, cname in enumerate(("cape_outer", "cape_inner", "cape_rim")):
        sel = kind == ci
        charts.append(_Chart(cname, "cape", wref, length, uv[sel].min(axis=0),
                             uv[sel].max(axis=0), hw if ci < 2 else None))
    return uv, kind, charts


def bake_atlas(meshes: list[tuple[bpy.types.Mesh, np.ndarray, np.ndarray, list[_Chart]]],
                palette: textures.Palette, seed: int, name: str) -> bpy.types.Image:
    """Pack every chart into one image, write each mesh's UVs, paint and pack the image.

    Each chart is painted by its material's painter; the UV map becomes each mesh's
    active and active-render map. Returns the packed image.
    """
    charts = [c for _, _, _, cs in meshes for c in cs]
    pk = textures.pack_charts(np.array([np.maximum(c.hi - c.lo, 1e-3) for c in charts]),
                              ATLAS_PX, _GUTTER_PX)
    noise = textures.Noise(seed)
    pixels = np.empty((ATLAS_PX, ATLAS_PX, 4), dtype=np.float32)
    pixels[..., :3] = textures.linear_to_srgb(np.array(palette.base["skin"]))
    pixels[..., 3] = textures.ROUGHNESS["skin"]
    place = {}
    for c, origin, size in zip(charts, pk.origin, pk.size, strict=True):
        place[id(c)] = origin
        x0, y0 = np.maximum(origin - _GUTTER_PX, 0)
        x1, y1 = np.minimum(origin + size + _GUTTER_PX, ATLAS_PX)
        u = c.lo[0] + (np.arange(x0, x1) + 0.5 - origin[0]) / pk.scale
        v = c.lo[1] + (np.arange(y0, y1) + 0.5 - origin[1]) / pk.scale
        uu, vv = np.meshgrid(u, v)
        pixels[y0:y1, x0:x1] = textures.paint(c.region, c.texels(uu, vv), palette, noise, seed)
    img = bpy.data.images.new(f"{name}_atlas", ATLAS_PX, ATLAS_PX, alpha=True)
    img.alpha_mode = "CHANNEL_PACKED"  # alpha carries roughness, not coverage
    img.pixels.foreach_set(pixels.ravel())  # rows bottom-up, as Blender stores them
    img.pack()
    for me, uv_m, loop_chart, cs in meshes:
        origin = np.array([place[id(c)] for c in cs])[loop_chart]
        lo = np.array([c.lo for c in cs])[loop_chart]
        uv = (origin + (uv_m - lo) * pk.scale) / ATLAS_PX
        layer = me.uv_layers.new(name=UV_MAP)
        layer.data.foreach_set("uv", uv.astype(np.float32).ravel())
        me.uv_layers.active = layer
        layer.active_render = True
    return img


def textured_material(region: str, color: tuple[float, float, float], name: str,
                       image: bpy.types.Image) -> bpy.types.Material:
    """The flat material with its Base Color and Roughness read from ``image`` on the UV map."""
    mat = flat_material(region, color, name)
    tree = mat.node_tree
    bsdf = next(n for n in tree.nodes if n.type == "BSDF_PRINCIPLED")
    uv = tree.nodes.new("ShaderNodeUVMap")
    uv.uv_map = UV_MAP
    tex = tree.nodes.new("ShaderNodeTexImage")
    tex.image = image
    tex.interpolation = "Linear"
    tex.extension = "EXTEND"
    uv.location, tex.location = (-700, 300), (-450, 300)
    tree.links.new(uv.outputs["UV"], tex.inputs["Vector"])
    tree.links.new(tex.outputs["Color"], bsdf.inputs["Base Color"])
    tree.links.new(tex.outputs["Alpha"], bsdf.inputs["Roughness"])
    return mat
