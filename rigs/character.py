"""A procedural demo character: a Rigify-metarig-named humanoid with a skinned body and a cape.

``build_demo_character`` makes, in the current scene and in about a second:

* an armature in an A-pose (~1.75 m, feet on z=0, facing -Y, its left on +X) whose
  bones carry Blender metarig names (``spine`` .. ``spine.006``, ``upper_arm.L``,
  ``f_index.01.L`` ...): ``DEMO_BONE_MAP`` maps the canonical humanoid onto them;
* a closed (watertight) body mesh polygonised from metaballs laid along the bones,
  with skin / shirt / trousers / shoes / hair materials by region;
* a cape: a thin closed slab skinned to a chain of ``cape.NNN`` bones under the
  upper chest (bone collection "Accessory"), animated by ``bake_spring_bones``;
* (by default) a UV map on both meshes, one chart per body piece unrolled about
  its axis, and one packed 1024² atlas for both, painted by ``rigs.textures``
  (checked shirt with an emblem, a face, jeans with seams, pockets and a belt,
  laced boots, a bordered cape with an emblem; roughness in the alpha channel),
  so that the look has to be learned rather than read off the part labels.

Everything is deterministic: the same seed gives the same vertices, weights, UVs
and texture pixels.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

import bpy
import numpy as np
from mathutils import Vector

from ..addon.blender.blend_files import save_blend_atomic
from ..addon.core.humanoid import FINGER_SEGMENTS, FINGERS
from ..addon.core.transforms import matrix_to_quat, normalize, quat_continuity
from . import spring, textures

# --------------------------------------------------------------------------- names

_FINGER_BONES = {"Thumb": "thumb", "Index": "f_index", "Middle": "f_middle",
                 "Ring": "f_ring", "Little": "f_pinky"}
_SIDE_SUFFIX = {"left": "L", "right": "R"}


def _demo_bone_map() -> dict[str, str]:
    m = {
        "hips": "spine", "spine": "spine.001", "chest": "spine.002",
        "upperChest": "spine.003", "neck": "spine.004", "head": "spine.006",
    }
    for side, sfx in _SIDE_SUFFIX.items():
        m.update({
            f"{side}Shoulder": f"shoulder.{sfx}", f"{side}UpperArm": f"upper_arm.{sfx}",
            f"{side}LowerArm": f"forearm.{sfx}", f"{side}Hand": f"hand.{sfx}",
            f"{side}UpperLeg": f"thigh.{sfx}", f"{side}LowerLeg": f"shin.{sfx}",
            f"{side}Foot": f"foot.{sfx}", f"{side}Toes": f"toe.{sfx}",
        })
        for finger in FINGERS:
            for i, seg in enumerate(FINGER_SEGMENTS[finger]):
                m[f"{side}{finger}{seg}"] = f"{_FINGER_BONES[finger]}.0{i + 1}.{sfx}"
    return m


DEMO_BONE_MAP: dict[str, str] = _demo_bone_map()
CAPE_BONES: tuple[str, ...] = ("cape.001", "cape.002", "cape.003", "cape.004")
CAPE_PARENT = "spine.003"
MATERIALS: dict[str, tuple[float, float, float]] = {
    "skin": (0.80, 0.58, 0.46),
    "shirt": (0.13, 0.33, 0.62),
    "trousers": (0.16, 0.16, 0.20),
    "shoes": (0.36, 0.20, 0.09),
    "hair": (0.09, 0.05, 0.03),
    "cape": (0.62, 0.07, 0.09),
}
BODY_REGIONS: tuple[str, ...] = ("skin", "shirt", "trousers", "shoes", "hair")
PART_PROP = "painted_skin_part"
SPRING_PROP = "painted_skin_spring"
COLLIDER_PROP = "painted_skin_spring_colliders"

A_POSE_DEG = 42.0  # upper arms below horizontal at rest

# Metaball field: s * (1 - d^2 / r^2)^3 summed, surface where it equals the threshold.
_STIFF = 2.0
_THRESH = 0.6
_BLOB_K = math.sqrt(1.0 - (_THRESH / _STIFF) ** (1.0 / 3.0))  # surface / field radius
_RESOLUTION = 0.012  # polygoniser cube size: ~17k vertices for the whole body


# --------------------------------------------------------------------------- skeleton


@dataclass
class _Bone:
    name: str
    parent: str | None
    head: np.ndarray
    tail: np.ndarray
    connect: bool
    z_axis: np.ndarray  # roll: the bone's Z axis points this way as far as it can


def _v(*c: float) -> np.ndarray:
    return np.array(c, dtype=np.float64)


def _rot(axis: np.ndarray, deg: float, v: np.ndarray) -> np.ndarray:
    """Rotate ``v`` about unit ``axis`` by ``deg`` degrees (Rodrigues)."""
    a = normalize(axis)
    t = math.radians(deg)
    return v * math.cos(t) + np.cross(a, v) * math.sin(t) + a * (a @ v) * (1 - math.cos(t))


def _skeleton(scale: float, apose: float) -> list[_Bone]:
    """Bones of the left side and centre; the right side is their mirror image."""
    fwd, back, up = _v(0, -1, 0), _v(0, 1, 0), _v(0, 0, 1)
    b: list[_Bone] = []

    def add(name: str, parent: str | None, head: np.ndarray, tail: np.ndarray,
            connect: bool, z_axis: np.ndarray) -> None:
        b.append(_Bone(name, parent, head * scale, tail * scale, connect, z_axis))

    spine = [_v(0, .015, .96), _v(0, .01, 1.07), _v(0, 0, 1.19), _v(0, .005, 1.31),
             _v(0, .015, 1.45), _v(0, -.005, 1.56), _v(0, -.005, 1.74)]
    names = ["spine", "spine.001", "spine.002", "spine.003", "spine.004", "spine.006"]
    for i, n in enumerate(names):
        add(n, names[i - 1] if i else None, spine[i], spine[i + 1], i > 0, fwd)

    for s in ("L",):
        sh_head, sh_tail = _v(.025, -.01, 1.415), _v(.17, .015, 1.425)
        add(f"shoulder.{s}", "spine.003", sh_head, sh_tail, False, up)
        a = math.radians(apose)
        d1 = _v(math.cos(a), 0, -math.sin(a))
        # A slight elbow bend: the forearm turns 12 degrees forward.
        d2 = normalize(_rot(normalize(np.cross(d1, fwd)), 12.0, d1))
        shoulder = _v(.185, .015, 1.415)
        elbow = shoulder + d1 * .285
        wrist = elbow + d2 * .255
        knuckle = wrist + d2 * .085
        add(f"upper_arm.{s}", f"shoulder.{s}", shoulder, elbow, False, back)
        add(f"forearm.{s}", f"upper_arm.{s}", elbow, wrist, True, back)
        # Hand frame: palm normal faces the thigh (inward-down), 'across' runs thumb->pinky.
        palm_n = normalize(np.cross(back, d2))
        palm_n = -palm_n if palm_n[0] > 0 else palm_n
        across = normalize(np.cross(palm_n, d2))
        across = across if across[1] > 0 else -across
        add(f"hand.{s}", f"forearm.{s}", wrist, knuckle, True, -palm_n)
        fingers = {  # offset across, offset back along the hand, splay deg, lengths
            "f_index": (-.027, .000, -7.0, (.042, .025, .020)),
            "f_middle": (-.009, -.002, -2.0, (.047, .029, .021)),
            "f_ring": (.009, -.006, 3.0, (.043, .027, .020)),
            "f_pinky": (.026, -.014, 9.0, (.034, .021, .018)),
        }
        for fname, (off, back_off, splay, lens) in fingers.items():
            d = normalize(_rot(palm_n, -splay, d2))
            p = knuckle + across * off + d2 * back_off
            parent = f"hand.{s}"
            for j, ln in enumerate(lens):
                d = normalize(_rot(np.cross(palm_n, d), -8.0, d))  # curl toward the palm
                q = p + d * ln
                add(f"{fname}.0{j + 1}.{s}", parent, p, q, j > 0, -palm_n)
                parent, p = f"{fname}.0{j + 1}.{s}", q
        d = normalize(_rot(palm_n, 38.0, d2))  # thumb: toward the front of the hand...
        d = normalize(_rot(np.cross(palm_n, d), -18.0, d))  # ...and over the palm
        p = wrist + d2 * .018 - across * .02 + palm_n * .008
        parent = f"hand.{s}"
        for j, ln in enumerate((.040, .032, .027)):
            q = p + d * ln
            add(f"thumb.0{j + 1}.{s}", parent, p, q, j > 0, -palm_n)
            parent, p = f"thumb.0{j + 1}.{s}", q
            d = normalize(_rot(np.cross(palm_n, d), -8.0, d))

        hip, knee, ankle = _v(.095, 0, .93), _v(.095, -.015, .51), _v(.095, .02, .09)
        ball, toe = _v(.1, -.085, .025), _v(.1, -.15, .025)
        add(f"thigh.{s}", "spine", hip, knee, False, fwd)
        add(f"shin.{s}", f"thigh.{s}", knee, ankle, True, fwd)
        add(f"foot.{s}", f"shin.{s}", ankle, ball, True, up)
        add(f"toe.{s}", f"foot.{s}", ball, toe, True, up)

    mirrored = []
    flip = _v(-1, 1, 1)
    for bone in b:
        if bone.name.endswith(".L"):
            mirrored.append(_Bone(
                bone.name[:-1] + "R",
                bone.parent[:-1] + "R" if bone.parent.endswith(".L") else bone.parent,
                bone.head * flip, bone.tail * flip, bone.connect, bone.z_axis * flip))
    return b + mirrored


# --------------------------------------------------------------------------- body shape


@dataclass
class _Part:
    """A piece of the body: a tapered tube (a->b) or an ellipsoid blob (b is None)."""

    bone: str
    region: str
    a: np.ndarray
    b: np.ndarray | None
    ra: float  # tube: surface radius at a; blob: unused
    rb: float
    frame: np.ndarray  # columns: local x (along the tube), y, z in world
    sizes: np.ndarray  # tube: (1, sy, sz) cross-section aspect; blob: semi-axes
    last: bool = True  # tube: also place a ball at b
    split: float = 2.0  # tube: region2 from this fraction of the length on
    region2: str = ""
    chart: str = ""  # the UV chart it is unrolled into (consecutive parts may share one)


def _frame(x: np.ndarray, hint: np.ndarray) -> np.ndarray:
    x = normalize(x)
    y = normalize(hint - x * (hint @ x))
    return np.stack([x, y, np.cross(x, y)], axis=1)


def _tube(bone: str, region: str, pts: list[np.ndarray], radii: list[float],
          hint: np.ndarray | None = None, sy: float = 1.0, sz: float = 1.0,
          split: float = 2.0, region2: str = "") -> list[_Part]:
    hint = _v(1, 0, 0) if hint is None else hint
    # Finger segments share one chart per finger, the toe shares the foot's.
    stem, _, side = bone.rpartition(".")
    chart = {"toe": f"foot.{side}"}.get(stem, bone)
    if stem.startswith(("f_", "thumb")):
        chart = f"{stem.split('.')[0]}.{side}"
    out = []
    for i in range(len(pts) - 1):
        out.append(_Part(bone, region, pts[i], pts[i + 1], radii[i], radii[i + 1],
                         _frame(pts[i + 1] - pts[i], hint), _v(1.0, sy, sz),
                         last=i == len(pts) - 2, split=split, region2=region2, chart=chart))
    return out


def _blob(bone: str, region: str, centre: np.ndarray, semi: np.ndarray, chart: str) -> _Part:
    return _Part(bone, region, centre, None, 0.0, 0.0, np.eye(3), semi, chart=chart)


def _body_parts(bones: dict[str, _Bone], scale: float) -> list[_Part]:
    s = scale
    parts: list[_Part] = []
    # Torso: elliptic cross-sections (depth/width) along the spine line.
    zs = [.85, .96, 1.07, 1.19, 1.31, 1.41, 1.47]
    half_w = [.125, .158, .142, .145, .158, .158, .085]
    depth = [.80, .74, .74, .72, .70, .64, .75]
    owners = ["spine", "spine", "spine.001", "spine.002", "spine.003", "spine.003"]
    region = ["trousers", "trousers", "shirt", "shirt", "shirt", "shirt"]
    spine_y = np.interp(zs, [.96, 1.07, 1.19, 1.31, 1.45], [.015, .01, 0, .005, .015])
    for i in range(len(zs) - 1):
        a, b = _v(0, spine_y[i], zs[i]) * s, _v(0, spine_y[i + 1], zs[i + 1]) * s
        d = (depth[i] + depth[i + 1]) / 2
        parts += [_Part(owners[i], region[i], a, b, half_w[i] * s, half_w[i + 1] * s,
                        _frame(b - a, _v(1, 0, 0)), _v(1, 1, d), last=i == len(zs) - 2,
                        chart="pelvis" if region[i] == "trousers" else "torso")]
    parts += _tube("spine.004", "skin", [_v(0, .008, 1.42) * s, _v(0, -.004, 1.60) * s],
                   [.054 * s, .048 * s])
    parts.append(_blob("spine.006", "skin", _v(0, -.012, 1.645) * s, _v(.082, .098, .112) * s,
                       "head"))
    parts.append(_blob("spine.006", "hair", _v(0, -.001, 1.667) * s, _v(.089, .101, .099) * s,
                       "hair"))
    parts.append(_blob("spine.006", "skin", _v(0, -.108, 1.632) * s, _v(.013, .02, .024) * s,
                       "nose"))
    for x in (-1, 1):
        parts.append(_blob("spine.006", "skin", _v(.083 * x, -.005, 1.64) * s,
                           _v(.012, .022, .03) * s, "head"))

    for sfx in ("L", "R"):
        def bn(n: str, sfx: str = sfx) -> _Bone:
            return bones[f"{n}.{sfx}"]

        sh, ua, fa, hand = bn("shoulder"), bn("upper_arm"), bn("forearm"), bn("hand")
        parts += _tube(sh.name, "shirt", [sh.head + _v(0, .01, .01) * s, sh.tail],
                       [.05 * s, .056 * s])
        parts += _tube(ua.name, "shirt", [ua.head, ua.tail], [.052 * s, .041 * s],
                       hint=_v(0, 1, 0), split=.55, region2="skin")
        parts += _tube(fa.name, "skin", [fa.head, fa.tail], [.04 * s, .029 * s],
                       hint=_v(0, 1, 0))
        palm_n = -hand.z_axis
        d = normalize(hand.tail - hand.head)
        across = normalize(np.cross(palm_n, d))
        parts += _tube(hand.name, "skin", [hand.head, hand.tail - d * .01 * s],
                       [.027 * s, .041 * s], hint=across, sz=.42)
        for f in ("thumb", "f_index", "f_middle", "f_ring", "f_pinky"):
            r0 = {"thumb": .0125, "f_pinky": .0092}.get(f, .0105) * s
            segs = [bn(f"{f}.0{j}") for j in (1, 2, 3)]
            for j, seg in enumerate(segs):
                parts += _tube(seg.name, "skin", [seg.head, seg.tail],
                               [r0 * (1 - .06 * j), r0 * (1 - .06 * (j + 1))])
                parts[-1].last = j == 2
        th, shin, foot, toe = bn("thigh"), bn("shin"), bn("foot"), bn("toe")
        parts += _tube(th.name, "trousers", [th.head + _v(0, 0, .03) * s, th.tail],
                       [.082 * s, .054 * s], hint=_v(0, -1, 0), sz=1.0)
        parts += _tube(shin.name, "trousers", [shin.head, shin.tail], [.052 * s, .038 * s],
                       split=.86, region2="shoes")
        x = foot.head[0]
        heel, ball = _v(x / s, .04, .048) * s, _v(foot.tail[0] / s, -.08, .036) * s
        parts += _tube(foot.name, "shoes", [heel, ball], [.044 * s, .048 * s], sz=.78)
        parts[-1].last = False
        parts += _tube(toe.name, "shoes", [ball, toe.tail + _v(0, -.005, .012) * s],
                       [.048 * s, .034 * s], sz=.72)
    return parts


def _tube_field_radius(rho: np.ndarray, step: np.ndarray) -> np.ndarray:
    """Field radius of balls spaced ``step`` apart whose union is a tube of radius ``rho``.

    A dense line of balls (field s(1-d^2/r^2)^3) sums to s r u^3.5 (32/35) / step at
    distance rho, u = 1 - rho^2/r^2; solve s r u^3.5 (32/35) / step = threshold.
    """
    lo, hi = rho * 1.0001, rho * 6.0
    for _ in range(60):
        r = (lo + hi) / 2
        u = 1 - (rho / r) ** 2
        f = _STIFF * r * u**3.5 * (32 / 35) / step
        lo, hi = np.where(f < _THRESH, r, lo), np.where(f < _THRESH, hi, r)
    return (lo + hi) / 2


def _metaball_elements(parts: list[_Part]) -> list[tuple]:
    """(type, co, quat, radius, (sx, sy, sz)) for every metaball element."""
    out: list[tuple] = []
    for p in parts:
        quat = tuple(matrix_to_quat(p.frame))
        if p.b is None:
            r = float(p.sizes.max()) / _BLOB_K
            sizes = p.sizes / (r * _BLOB_K)
            out.append(("ELLIPSOID", p.a, quat, r, sizes))
            continue
        length = float(np.linalg.norm(p.b - p.a))
        # Balls ~0.6 surface radii apart: the field ripple stays well below a voxel.
        n = max(1, math.ceil(length / (0.6 * min(p.ra, p.rb))))
        t = np.arange(n + 1 if p.last else n) / n
        rho = p.ra + (p.rb - p.ra) * t
        radii = _tube_field_radius(rho, np.full_like(rho, length / n))
        for ti, ri in zip(t, radii, strict=True):
            out.append(("ELLIPSOID", p.a + (p.b - p.a) * ti, quat, float(ri), p.sizes))
    return out


def _surface_distance(parts: list[_Part], pts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Approximate signed distance of points to every part (P, n) and the tube parameter."""
    dist = np.empty((len(parts), len(pts)))
    tpar = np.zeros((len(parts), len(pts)))
    for i, p in enumerate(parts):
        if p.b is None:
            q = (pts - p.a) @ p.frame
            e = np.linalg.norm(q / p.sizes, axis=-1)
            r = np.linalg.norm(q, axis=-1)
            dist[i] = r * (1 - 1 / np.maximum(e, 1e-9))
            continue
        ab = p.b - p.a
        t = np.clip((pts - p.a) @ ab / (ab @ ab), 0.0, 1.0)
        q = (pts - (p.a + t[:, None] * ab)) @ p.frame
        rho = p.ra + (p.rb - p.ra) * t
        e = np.linalg.norm(q / p.sizes, axis=-1) / rho
        r = np.linalg.norm(q, axis=-1)
        dist[i] = r * (1 - 1 / np.maximum(e, 1e-9))
        tpar[i] = t
    return dist, tpar


def _regions(parts: list[_Part], pts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Region name index (into BODY_REGIONS) and index of the part nearest each point."""
    dist, tpar = _surface_distance(parts, pts)
    owner = np.argmin(dist, axis=0)
    t = tpar[owner, np.arange(len(pts))]
    names = np.array([BODY_REGIONS.index(p.region) for p in parts])
    split = np.array([p.split for p in parts])
    second = np.array([BODY_REGIONS.index(p.region2) if p.region2 else 0 for p in parts])
    return np.where(t >= split[owner], second[owner], names[owner]), owner


def _body_weights(parts: list[_Part], bones: list[_Bone], dist: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Top-4 bone indices and normalised weights (V, 4) for body vertices.

    Hand-rolled instead of ARMATURE_AUTO (bone heat) so the result is exact, fast
    and deterministic, and cannot fail on touching fingers: every vertex belongs
    to the nearest part; its bone and the bone's parent and children (never a
    sibling such as the other thigh or the next finger) share it by how close
    their own parts come, with a Gaussian falloff one-half the local radius wide.
    """
    names = [b.name for b in bones]
    index = {n: i for i, n in enumerate(names)}
    nb = len(bones)
    npts = dist.shape[1]
    part_bone = np.array([index[p.bone] for p in parts])
    bone_dist = np.full((nb, npts), np.inf)
    for i in range(len(parts)):
        np.minimum(bone_dist[part_bone[i]], dist[i], out=bone_dist[part_bone[i]])
    owner_part = np.argmin(dist, axis=0)
    owner = part_bone[owner_part]
    radius = np.array([max(p.ra, p.rb) if p.b is not None else float(p.sizes.min())
                       for p in parts])
    width = np.maximum(0.5 * radius[owner_part], 0.004)
    near = np.eye(nb, dtype=bool)
    for i, bone in enumerate(bones):
        if bone.parent in index:
            near[i, index[bone.parent]] = near[index[bone.parent], i] = True
    excess = (bone_dist - bone_dist[owner, np.arange(npts)]) / width
    w = np.where(near[owner].T, np.exp(-np.square(np.maximum(excess, 0.0))), 0.0)
    top = np.argsort(-w, axis=0, kind="stable")[:4].T
    tw = np.take_along_axis(w.T, top, axis=1)
    tw /= tw.sum(axis=1, keepdims=True)
    return top, tw


# --------------------------------------------------------------------------- bpy helpers


def _material(region: str, color: tuple[float, float, float], name: str) -> bpy.types.Material:
    mat = bpy.data.materials.new(f"{name}_{region}")
    mat.diffuse_color = (*color, 1.0)
    mat[PART_PROP] = region
    tree = mat.node_tree
    bsdf = next((n for n in tree.nodes if n.type == "BSDF_PRINCIPLED"), None) if tree else None
    if bsdf is not None:
        bsdf.inputs["Base Color"].default_value = (*color, 1.0)
        bsdf.inputs["Roughness"].default_value = 0.8 if region != "hair" else 0.5
    return mat


def _assign_weights(obj: bpy.types.Object, groups: list[str], top: np.ndarray,
                    tw: np.ndarray) -> None:
    vgs = [obj.vertex_groups.new(name=g) for g in groups]
    for k in range(top.shape[1]):
        for v in np.nonzero(tw[:, k] > 0)[0].tolist():
            vgs[top[v, k]].add((v,), float(tw[v, k]), "REPLACE")


def is_closed(me: bpy.types.Mesh) -> bool:
    """Every edge is shared by exactly two faces (a watertight, manifold surface)."""
    loops = np.empty(len(me.loops), dtype=np.int64)
    me.loops.foreach_get("edge_index", loops)
    counts = np.bincount(loops, minlength=len(me.edges))
    return bool(len(me.polygons)) and bool(np.all(counts == 2))


def _polygonise(elements: list[tuple], name: str, scene: bpy.types.Scene) -> bpy.types.Mesh:
    """Polygonise the metaballs; retry at nearby resolutions until the mesh is closed.

    The marching-cubes polygoniser can, rarely, join two nearly touching sheets
    with an edge of four faces; a slightly different cube size avoids it.
    """
    me = None
    for factor in (1.0, 0.97, 1.03, 0.94, 1.06, 0.91):
        if me is not None:
            bpy.data.meshes.remove(me)
        me = _polygonise_once(elements, name, scene, _RESOLUTION * factor)
        if is_closed(me):
            break
    return me


def _polygonise_once(elements: list[tuple], name: str, scene: bpy.types.Scene,
                     resolution: float) -> bpy.types.Mesh:
    mb = bpy.data.metaballs.new(f"{name}_metaballs")
    mb.resolution = mb.render_resolution = resolution
    mb.threshold = _THRESH
    mb.update_method = "UPDATE_ALWAYS"
    for kind, co, quat, radius, sizes in elements:
        e = mb.elements.new(type=kind)
        e.co = tuple(co)
        e.rotation = quat
        e.radius = radius
        e.size_x, e.size_y, e.size_z = (float(c) for c in sizes)
        e.stiffness = _STIFF
    # Metaball objects sharing a base name fuse; this one's name is unique on purpose.
    ob = bpy.data.objects.new(f"PaintedSkinMetaballBody{id(mb)}", mb)
    scene.collection.objects.link(ob)
    try:
        dg = bpy.context.evaluated_depsgraph_get()
        dg.update()
        me = bpy.data.meshes.new_from_object(ob.evaluated_get(dg))
    finally:
        bpy.data.objects.remove(ob)
        bpy.data.metaballs.remove(mb)
    me.name = f"{name}_Body"
    return me


def _mesh_positions(me: bpy.types.Mesh) -> np.ndarray:
    co = np.empty(len(me.vertices) * 3, dtype=np.float32)
    me.vertices.foreach_get("co", co)
    return co.reshape(-1, 3).astype(np.float64)


@dataclass
class _CapeGrid:
    """The cape's sheet grid: ``nu`` across at ``u`` (-0.5..0.5 of the width), ``nv``
    rows at arc length ``s`` from the top, each ``width`` wide."""

    nu: int
    nv: int
    u: np.ndarray
    s: np.ndarray
    width: np.ndarray


def _cape_geometry(chain: np.ndarray, body: np.ndarray, scale: float
                   ) -> tuple[np.ndarray, list[tuple[int, ...]], np.ndarray, _CapeGrid]:
    """A closed slab hanging along ``chain`` (k+1, 3): vertices, quads, arc parameter, grid."""
    nu, nv, thick = 13, 22, 0.008 * scale
    seg = np.linalg.norm(np.diff(chain, axis=0), axis=1)
    arc = np.concatenate([[0], np.cumsum(seg)])
    s = np.linspace(0, arc[-1], nv)
    centre = np.stack([np.interp(s, arc, chain[:, i]) for i in range(3)], axis=1)
    width = np.interp(s / arc[-1], [0, 1], [0.30 * scale, 0.50 * scale])
    u = np.linspace(-0.5, 0.5, nu)
    grid = np.repeat(centre[:, None, :], nu, axis=1)
    grid[..., 0] += u[None, :] * width[:, None]
    grid[..., 1] -= 0.35 * (u[None, :] * width[:, None]) ** 2 / scale  # wrap forward a little
    # Keep clear of the body: push whole rows back (smoothly) where the back is fuller.
    near = body[body[:, 1] > 0]
    push = np.zeros(nv)
    for j in range(nv):
        zband = near[np.abs(near[:, 2] - grid[j, 0, 2]) < 0.03 * scale]
        for i in range(nu):
            m = np.abs(zband[:, 0] - grid[j, i, 0]) < 0.03 * scale
            if m.any():
                push[j] = max(push[j], zband[m, 1].max() + 0.015 * scale - grid[j, i, 1])
    push = np.maximum.accumulate(np.convolve(np.pad(push, 2, mode="edge"), np.ones(5) / 5, "valid"))
    grid[..., 1] += np.maximum.accumulate(push)[:, None]
    inner = grid.reshape(-1, 3)
    outer = inner + _v(0, thick, 0)
    verts = np.concatenate([inner, outer])
    off = nu * nv

    def vid(j: int, i: int, side: int) -> int:
        return side * off + j * nu + i

    faces: list[tuple[int, ...]] = []
    for j in range(nv - 1):
        for i in range(nu - 1):
            a, b, c, d = vid(j, i, 0), vid(j, i + 1, 0), vid(j + 1, i + 1, 0), vid(j + 1, i, 0)
            faces.append((a, d, c, b))  # inner sheet faces the body (-Y)
            faces.append(tuple(x + off for x in (a, b, c, d)))
    ring = ([(0, i) for i in range(nu - 1)] + [(j, nu - 1) for j in range(nv - 1)]
            + [(nv - 1, i) for i in range(nu - 1, 0, -1)] + [(j, 0) for j in range(nv - 1, 0, -1)])
    for k in range(len(ring)):
        (j0, i0), (j1, i1) = ring[k], ring[(k + 1) % len(ring)]
        faces.append((vid(j0, i0, 0), vid(j1, i1, 0), vid(j1, i1, 1), vid(j0, i0, 1)))
    arc_v = np.tile(np.repeat(s, nu), 2)
    return verts, faces, arc_v, _CapeGrid(nu, nv, u, s, width)


def _cape_weights(arc_v: np.ndarray, chain: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Two bones per vertex: hat functions centred on each bone's midpoint (0 = parent)."""
    seg = np.linalg.norm(np.diff(chain, axis=0), axis=1)
    joints = np.concatenate([[0], np.cumsum(seg)])
    centres = np.concatenate([[0.0], (joints[:-1] + joints[1:]) / 2])  # parent at the top
    k = np.clip(np.searchsorted(centres, arc_v, side="right") - 1, 0, len(centres) - 2)
    t = np.clip((arc_v - centres[k]) / (centres[k + 1] - centres[k]), 0.0, 1.0)
    top = np.stack([k, k + 1], axis=1)
    tw = np.stack([1 - t, t], axis=1)
    return top, tw


def _back_profile(body: np.ndarray, z: float, scale: float) -> float:
    band = body[(np.abs(body[:, 2] - z) < 0.03 * scale) & (np.abs(body[:, 0]) < 0.12 * scale)]
    return float(band[:, 1].max()) if len(band) else 0.1 * scale


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


def _part_axis(p: _Part) -> tuple[np.ndarray, np.ndarray, float]:
    """Start, unit direction and length of the axis a part is unrolled about."""
    if p.b is not None:
        ab = p.b - p.a
        length = float(np.linalg.norm(ab))
        return p.a, ab / length, length
    d = {"head": _v(0, 0, 1), "hair": _v(0, 0, 1), "nose": _v(0, -1, 0)}.get(
        p.chart, _v(math.copysign(1.0, p.a[0]), 0, 0))
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


def _body_charts(me: bpy.types.Mesh, parts: list[_Part], face_part: np.ndarray,
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
        ref = _v(0, 0, 1) if abs(mean_axis[1]) > 0.8 else _v(0, -1, 0)
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


def _cape_charts(me: bpy.types.Mesh, grid: _CapeGrid) -> tuple[np.ndarray, np.ndarray,
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


def _bake_atlas(meshes: list[tuple[bpy.types.Mesh, np.ndarray, np.ndarray, list[_Chart]]],
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


def _textured_material(region: str, color: tuple[float, float, float], name: str,
                       image: bpy.types.Image) -> bpy.types.Material:
    """The flat material with its Base Color and Roughness read from ``image`` on the UV map."""
    mat = _material(region, color, name)
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


def build_demo_character(name: str = "PaintedSkinDemo", seed: int = 0,
                         textured: bool = True) -> bpy.types.Object:
    """Build the demo character in the current scene; returns the armature object.

    Seed 0 is the reference figure; other seeds vary height (+-4%), the A-pose
    angle (+-2 degrees), the colours slightly and the textures' noise and details,
    deterministically. ``textured`` gives every mesh a UV map and packed image
    textures (colour, and roughness in alpha); without it the materials are flat.
    """
    scene = bpy.context.scene
    rng = np.random.default_rng(seed)
    jitter = rng.uniform(-1, 1, 8) if seed else np.zeros(8)
    scale = 1.0 + 0.04 * jitter[0]
    apose = A_POSE_DEG + 2.0 * jitter[1]

    bones = _skeleton(scale, apose)
    by_name = {b.name: b for b in bones}
    parts = _body_parts(by_name, scale)

    # Body surface.
    me = _polygonise(_metaball_elements(parts), name, scene)
    pts = _mesh_positions(me)
    lift = -pts[:, 2].min()
    pts[:, 2] += lift
    me.vertices.foreach_set("co", pts.astype(np.float32).ravel())

    # Cape chain: hangs from between the shoulder blades, clear of the back.
    zs = np.array([1.43, 1.23, 1.03, 0.83, 0.63]) * scale
    ys = np.array([_back_profile(pts, z, scale) for z in zs]) + 0.022 * scale
    ys = np.maximum.accumulate(ys)  # never leans back into the body further down
    chain = np.stack([np.zeros_like(zs), ys, zs], axis=1)
    for k, cname in enumerate(CAPE_BONES):
        bones.append(_Bone(cname, CAPE_PARENT if k == 0 else CAPE_BONES[k - 1],
                           chain[k], chain[k + 1], k > 0, _v(0, 1, 0)))

    # Armature.
    arm = bpy.data.armatures.new(name)
    arm_obj = bpy.data.objects.new(name, arm)
    scene.collection.objects.link(arm_obj)
    body_coll = arm.collections.new("Body")
    acc_coll = arm.collections.new("Accessory")
    view_layer = bpy.context.view_layer
    prev_active = view_layer.objects.active
    view_layer.objects.active = arm_obj
    bpy.ops.object.mode_set(mode="EDIT")
    try:
        for b in bones:
            eb = arm.edit_bones.new(b.name)
            eb.head, eb.tail = b.head.tolist(), b.tail.tolist()
            eb.align_roll(b.z_axis.tolist())
            if b.parent:
                eb.parent = arm.edit_bones[b.parent]
                eb.use_connect = b.connect
            (acc_coll if b.name in CAPE_BONES else body_coll).assign(eb)
    finally:
        bpy.ops.object.mode_set(mode="OBJECT")
        view_layer.objects.active = prev_active
    for cname in CAPE_BONES:
        arm.bones[cname][SPRING_PROP] = True
        arm_obj.pose.bones[cname].rotation_mode = "QUATERNION"
    arm.display_type = "STICK"
    arm_obj["painted_skin_demo"] = True
    arm_obj["painted_skin_bone_map"] = json.dumps(DEMO_BONE_MAP)
    arm_obj[COLLIDER_PROP] = json.dumps({
        "spine": 0.10 * scale, "spine.001": 0.095 * scale, "spine.002": 0.10 * scale,
        "thigh.L": 0.07 * scale, "thigh.R": 0.07 * scale,
        "shin.L": 0.06 * scale, "shin.R": 0.06 * scale})

    # Body and cape meshes; then their materials (flat, or textured on a UV atlas).
    centres = np.empty(len(me.polygons) * 3, dtype=np.float32)
    me.polygons.foreach_get("center", centres)
    region_idx, face_part = _regions(parts, centres.reshape(-1, 3).astype(np.float64)
                                     - _v(0, 0, lift))
    me.polygons.foreach_set("material_index", region_idx.astype(np.int32))
    me.shade_smooth()
    body_pts = pts - _v(0, 0, lift)
    vdist, _ = _surface_distance(parts, body_pts)
    verts, faces, arc_v, grid = _cape_geometry(chain, pts, scale)
    cape_me = bpy.data.meshes.new(f"{name}_Cape")
    cape_me.from_pydata(verts.tolist(), [], faces)

    colours = {k: tuple(np.clip(np.array(c) * (1 + 0.12 * jitter[2 + i % 6]), 0, 1))
               for i, (k, c) in enumerate(MATERIALS.items())}
    if textured:
        atlas = _bake_atlas(
            [(me, *_body_charts(me, parts, face_part, region_idx, body_pts, vdist)),
             (cape_me, *_cape_charts(cape_me, grid))],
            textures.Palette.from_seed(colours, seed), seed, name)
        mats = {k: _textured_material(k, c, name, atlas) for k, c in colours.items()}
    else:
        mats = {k: _material(k, c, name) for k, c in colours.items()}
    for region in BODY_REGIONS:
        me.materials.append(mats[region])
    cape_me.materials.append(mats["cape"])

    body_obj = bpy.data.objects.new(f"{name}_Body", me)
    body_obj[PART_PROP] = "body"
    body_obj["painted_skin_regions"] = list(BODY_REGIONS)
    scene.collection.objects.link(body_obj)
    body_bones = [b for b in bones if b.name not in CAPE_BONES]
    top, tw = _body_weights(parts, body_bones, vdist)
    _assign_weights(body_obj, [b.name for b in body_bones], top, tw)

    cape_obj = bpy.data.objects.new(f"{name}_Cape", cape_me)
    cape_obj[PART_PROP] = "cape"
    scene.collection.objects.link(cape_obj)
    ctop, ctw = _cape_weights(arc_v, chain)
    _assign_weights(cape_obj, [CAPE_PARENT, *CAPE_BONES], ctop, ctw)

    for obj in (body_obj, cape_obj):
        obj.parent = arm_obj
        mod = obj.modifiers.new("Armature", "ARMATURE")
        mod.object = arm_obj
    return arm_obj


# --------------------------------------------------------------------------- spring bake


def _spring_chains(arm_obj: bpy.types.Object) -> list[tuple[str, list[str]]]:
    """(parent bone, [chain bones root->tip]) for bones tagged as spring bones."""
    bones = arm_obj.data.bones
    tagged = [b for b in bones if b.get(SPRING_PROP)
              or any(c.name == "Accessory" for c in b.collections)]
    names = {b.name for b in tagged}
    chains = []
    for b in tagged:
        if b.parent is None or b.parent.name in names:
            continue
        chain = [b.name]
        while True:
            kids = [c for c in bones[chain[-1]].children if c.name in names]
            if not kids:
                break
            chain.append(sorted(kids, key=lambda c: c.name)[0].name)
        chains.append((b.parent.name, chain))
    return chains


def _matrix(m) -> np.ndarray:
    return np.array(m, dtype=np.float64)


def bake_spring_bones(
    armature_obj: bpy.types.Object,
    action_frame_range: tuple[int, int] | None = None,
    params: spring.SpringParams | None = None,
    use_colliders: bool = True,
) -> list[str]:
    """Simulate the armature's spring chains over the animated body and key them.

    Chains are the bones tagged ``painted_skin_spring`` (or in the "Accessory"
    collection). Their parents' poses are sampled per frame, the chains are run
    through :func:`rigs.spring.simulate` and written as per-frame quaternion keys
    into the armature's active action (its slot's channelbag), replacing earlier
    keys on those bones. Returns the baked bone names.
    """
    from bpy_extras import anim_utils

    ad = armature_obj.animation_data
    if ad is None or ad.action is None:
        raise ValueError(f"{armature_obj.name!r} has no active action to bake into")
    action = ad.action
    if action_frame_range is None:
        action_frame_range = tuple(int(round(f)) for f in action.frame_range)
    f0, f1 = int(action_frame_range[0]), int(action_frame_range[1])
    frames = list(range(f0, f1 + 1))
    chains = _spring_chains(armature_obj)
    if not chains or not frames:
        return []
    scene = bpy.context.scene
    fps = scene.render.fps / scene.render.fps_base
    colliders = json.loads(armature_obj.get(COLLIDER_PROP, "{}")) if use_colliders else {}
    colliders = {k: v for k, v in colliders.items() if k in armature_obj.pose.bones}
    parents = sorted({p for p, _ in chains})

    pose = {n: np.empty((len(frames), 4, 4)) for n in parents}
    caps = np.empty((len(frames), len(colliders), 2, 3))
    world = np.empty((len(frames), 4, 4))
    current = scene.frame_current
    try:
        for i, f in enumerate(frames):
            scene.frame_set(f)
            ev = armature_obj.evaluated_get(bpy.context.evaluated_depsgraph_get())
            world[i] = _matrix(ev.matrix_world)
            for n in parents:
                pose[n][i] = _matrix(ev.pose.bones[n].matrix)
            for j, n in enumerate(colliders):
                pb = ev.pose.bones[n]
                caps[i, j, 0], caps[i, j, 1] = pb.head, pb.tail
    finally:
        scene.frame_set(current)
    caps = caps @ world[:, None, :3, :3].swapaxes(-1, -2) + world[:, None, None, :3, 3]
    radii = np.array(list(colliders.values()), dtype=np.float64)

    slot = ad.action_slot
    if slot is None:
        raise ValueError(f"{armature_obj.name!r}'s action has no slot assigned")
    cb = anim_utils.action_ensure_channelbag_for_slot(action, slot)
    baked: list[str] = []
    data = armature_obj.data
    for parent, names in chains:
        rest_parent = _matrix(data.bones[parent].matrix_local)
        rest = np.stack([_matrix(data.bones[n].matrix_local) for n in names])
        chain = spring.SpringChain(np.linalg.inv(rest_parent) @ rest,
                                   np.array([data.bones[n].length for n in names]))
        result = spring.simulate(chain, world @ pose[parent], fps, params,
                                 caps if len(radii) else None, radii if len(radii) else None)
        arm_space = np.linalg.inv(world)[:, None] @ result.matrices  # (F, n, 4, 4)
        prev_pose, prev_rest = pose[parent], rest_parent
        for k, n in enumerate(names):
            local_rest = np.linalg.inv(prev_rest) @ rest[k]
            basis = np.linalg.inv(local_rest) @ np.linalg.inv(prev_pose) @ arm_space[:, k]
            quat = quat_continuity(matrix_to_quat(basis[:, :3, :3]))
            _write_quaternion_keys(cb, n, frames, quat)
            armature_obj.pose.bones[n].rotation_mode = "QUATERNION"
            prev_pose, prev_rest = arm_space[:, k], rest[k]
            baked.append(n)
    return baked


def _write_quaternion_keys(cb, bone: str, frames: list[int], quat: np.ndarray) -> None:
    path = f'pose.bones["{bone}"].rotation_quaternion'
    for fc in [fc for fc in cb.fcurves if fc.data_path == path]:
        cb.fcurves.remove(fc)
    x = np.asarray(frames, dtype=np.float64)
    for i in range(4):
        fc = cb.fcurves.new(path, index=i, group_name=bone)
        fc.keyframe_points.add(len(frames))
        co = np.stack([x, quat[:, i]], 1).astype(np.float32).ravel()
        fc.keyframe_points.foreach_set("co", co)
        fc.update()


# --------------------------------------------------------------------------- demo file


def setup_demo_scene(arm: bpy.types.Object, scene: bpy.types.Scene | None = None) -> None:
    """A three-quarter camera that follows the character across the floor, a sun,
    a world colour and 512² render settings."""
    scene = scene or bpy.context.scene
    scene.render.resolution_x = scene.render.resolution_y = 512
    height = max((v[2] for c in arm.children for v in c.bound_box), default=1.75)
    cam_data = bpy.data.cameras.new("DemoCamera")
    cam = bpy.data.objects.new("DemoCamera", cam_data)
    # Three-quarter front view; the camera keeps its offset to the hips in the
    # floor plane (Copy Location with offset), so a walk stays framed.
    cam_data.lens = 45.0
    cam.location = (1.9, -3.0, 0.62 * height)
    aim = Vector((0.0, 0.0, 0.5 * height)) - Vector(cam.location)
    cam.rotation_euler = aim.to_track_quat("-Z", "Y").to_euler()
    follow = cam.constraints.new("COPY_LOCATION")
    follow.target, follow.subtarget = arm, DEMO_BONE_MAP["hips"]
    follow.use_z = False
    follow.use_offset = True
    scene.collection.objects.link(cam)
    scene.camera = cam
    sun_data = bpy.data.lights.new("DemoSun", "SUN")
    sun_data.energy = 3.0
    sun = bpy.data.objects.new("DemoSun", sun_data)
    sun.rotation_euler = (math.radians(50.0), 0.0, math.radians(25.0))
    scene.collection.objects.link(sun)
    world = bpy.data.worlds.new("DemoWorld")
    world.color = (0.05, 0.055, 0.065)
    bg = world.node_tree.nodes.get("Background") if world.node_tree else None
    if bg is not None:
        bg.inputs["Color"].default_value = (0.05, 0.055, 0.065, 1.0)
    scene.world = world


def save_demo_blend(path: str | os.PathLike, seed: int = 0) -> Path:
    """Build the demo into a new scene (camera, sun, world) and save it atomically.

    The new scene becomes the window's active scene and is what the file opens
    on; the session's other data is saved along with it (``save_as_mainfile``
    with ``copy=True``, so the session's own file path is unchanged).
    """
    path = Path(path).resolve()
    scene = bpy.data.scenes.new("PaintedSkinDemo")
    window = bpy.context.window
    if window is not None:
        window.scene = scene
    scene.render.fps = 24
    scene.frame_start, scene.frame_end = 1, 48
    with bpy.context.temp_override(scene=scene, view_layer=scene.view_layers[0]):
        arm = build_demo_character(seed=seed)
    setup_demo_scene(arm, scene)
    save_blend_atomic(path)
    return path


__all__ = [
    "BODY_REGIONS", "CAPE_BONES", "CAPE_PARENT", "DEMO_BONE_MAP", "ATLAS_PX", "MATERIALS",
    "UV_MAP",
    "bake_spring_bones", "build_demo_character", "is_closed", "save_demo_blend",
    "setup_demo_scene",
]
