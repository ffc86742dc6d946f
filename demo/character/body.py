"""The demo character's body and cape geometry: metaballs laid along the bones,
polygonised into a closed mesh, with region labels and skin weights.

The cape is a thin closed slab shaped to the back and weighted to its bone chain.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import bpy
import numpy as np

from ...addon.core.rig.transforms import matrix_to_quat, normalize
from .skeleton import BODY_REGIONS, PART_PROP, BoneSpec, vec3

# Metaball field: s * (1 - d^2 / r^2)^3 summed, surface where it equals the threshold.
_STIFF = 2.0
_THRESH = 0.6
_BLOB_K = math.sqrt(1.0 - (_THRESH / _STIFF) ** (1.0 / 3.0))  # surface / field radius
_RESOLUTION = 0.012  # polygoniser cube size: ~17k vertices for the whole body



# --------------------------------------------------------------------------- body shape


@dataclass
class BodyPart:
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
          split: float = 2.0, region2: str = "") -> list[BodyPart]:
    hint = vec3(1, 0, 0) if hint is None else hint
    # Finger segments share one chart per finger, the toe shares the foot's.
    stem, _, side = bone.rpartition(".")
    chart = {"toe": f"foot.{side}"}.get(stem, bone)
    if stem.startswith(("f_", "thumb")):
        chart = f"{stem.split('.')[0]}.{side}"
    out = []
    for i in range(len(pts) - 1):
        out.append(BodyPart(bone, region, pts[i], pts[i + 1], radii[i], radii[i + 1],
                         _frame(pts[i + 1] - pts[i], hint), vec3(1.0, sy, sz),
                         last=i == len(pts) - 2, split=split, region2=region2, chart=chart))
    return out


def _blob(bone: str, region: str, centre: np.ndarray, semi: np.ndarray, chart: str) -> BodyPart:
    return BodyPart(bone, region, centre, None, 0.0, 0.0, np.eye(3), semi, chart=chart)


def body_parts(bones: dict[str, BoneSpec], scale: float) -> list[BodyPart]:
    s = scale
    parts: list[BodyPart] = []
    # Torso: elliptic cross-sections (depth/width) along the spine line.
    zs = [.85, .96, 1.07, 1.19, 1.31, 1.41, 1.47]
    half_w = [.125, .158, .142, .145, .158, .158, .085]
    depth = [.80, .74, .74, .72, .70, .64, .75]
    owners = ["spine", "spine", "spine.001", "spine.002", "spine.003", "spine.003"]
    region = ["trousers", "trousers", "shirt", "shirt", "shirt", "shirt"]
    spine_y = np.interp(zs, [.96, 1.07, 1.19, 1.31, 1.45], [.015, .01, 0, .005, .015])
    for i in range(len(zs) - 1):
        a, b = vec3(0, spine_y[i], zs[i]) * s, vec3(0, spine_y[i + 1], zs[i + 1]) * s
        d = (depth[i] + depth[i + 1]) / 2
        parts += [BodyPart(owners[i], region[i], a, b, half_w[i] * s, half_w[i + 1] * s,
                        _frame(b - a, vec3(1, 0, 0)), vec3(1, 1, d), last=i == len(zs) - 2,
                        chart="pelvis" if region[i] == "trousers" else "torso")]
    parts += _tube("spine.004", "skin", [vec3(0, .008, 1.42) * s, vec3(0, -.004, 1.60) * s],
                   [.054 * s, .048 * s])
    parts.append(_blob("spine.006", "skin", vec3(0, -.012, 1.645) * s, vec3(.082, .098, .112) * s,
                       "head"))
    parts.append(_blob("spine.006", "hair", vec3(0, -.001, 1.667) * s, vec3(.089, .101, .099) * s,
                       "hair"))
    parts.append(_blob("spine.006", "skin", vec3(0, -.108, 1.632) * s, vec3(.013, .02, .024) * s,
                       "nose"))
    for x in (-1, 1):
        parts.append(_blob("spine.006", "skin", vec3(.083 * x, -.005, 1.64) * s,
                           vec3(.012, .022, .03) * s, "head"))

    for sfx in ("L", "R"):
        def bn(n: str, sfx: str = sfx) -> BoneSpec:
            return bones[f"{n}.{sfx}"]

        sh, ua, fa, hand = bn("shoulder"), bn("upper_arm"), bn("forearm"), bn("hand")
        parts += _tube(sh.name, "shirt", [sh.head + vec3(0, .01, .01) * s, sh.tail],
                       [.05 * s, .056 * s])
        parts += _tube(ua.name, "shirt", [ua.head, ua.tail], [.052 * s, .041 * s],
                       hint=vec3(0, 1, 0), split=.55, region2="skin")
        parts += _tube(fa.name, "skin", [fa.head, fa.tail], [.04 * s, .029 * s],
                       hint=vec3(0, 1, 0))
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
        parts += _tube(th.name, "trousers", [th.head + vec3(0, 0, .03) * s, th.tail],
                       [.082 * s, .054 * s], hint=vec3(0, -1, 0), sz=1.0)
        parts += _tube(shin.name, "trousers", [shin.head, shin.tail], [.052 * s, .038 * s],
                       split=.86, region2="shoes")
        x = foot.head[0]
        heel, ball = vec3(x / s, .04, .048) * s, vec3(foot.tail[0] / s, -.08, .036) * s
        parts += _tube(foot.name, "shoes", [heel, ball], [.044 * s, .048 * s], sz=.78)
        parts[-1].last = False
        parts += _tube(toe.name, "shoes", [ball, toe.tail + vec3(0, -.005, .012) * s],
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


def metaball_elements(parts: list[BodyPart]) -> list[tuple]:
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


def surface_distance(parts: list[BodyPart], pts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
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


def part_regions(parts: list[BodyPart], pts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Region name index (into BODY_REGIONS) and index of the part nearest each point."""
    dist, tpar = surface_distance(parts, pts)
    owner = np.argmin(dist, axis=0)
    t = tpar[owner, np.arange(len(pts))]
    names = np.array([BODY_REGIONS.index(p.region) for p in parts])
    split = np.array([p.split for p in parts])
    second = np.array([BODY_REGIONS.index(p.region2) if p.region2 else 0 for p in parts])
    return np.where(t >= split[owner], second[owner], names[owner]), owner


def body_weights(parts: list[BodyPart], bones: list[BoneSpec], dist: np.ndarray
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


def flat_material(region: str, color: tuple[float, float, float], name: str) -> bpy.types.Material:
    mat = bpy.data.materials.new(f"{name}_{region}")
    mat.diffuse_color = (*color, 1.0)
    mat[PART_PROP] = region
    tree = mat.node_tree
    bsdf = next((n for n in tree.nodes if n.type == "BSDF_PRINCIPLED"), None) if tree else None
    if bsdf is not None:
        bsdf.inputs["Base Color"].default_value = (*color, 1.0)
        bsdf.inputs["Roughness"].default_value = 0.8 if region != "hair" else 0.5
    return mat


def assign_weights(obj: bpy.types.Object, groups: list[str], top: np.ndarray,
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


def polygonise_closed(elements: list[tuple], name: str, scene: bpy.types.Scene) -> bpy.types.Mesh:
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


def mesh_positions(me: bpy.types.Mesh) -> np.ndarray:
    co = np.empty(len(me.vertices) * 3, dtype=np.float32)
    me.vertices.foreach_get("co", co)
    return co.reshape(-1, 3).astype(np.float64)


@dataclass
class CapeGrid:
    """The cape's sheet grid: ``nu`` across at ``u`` (-0.5..0.5 of the width), ``nv``
    rows at arc length ``s`` from the top, each ``width`` wide."""

    nu: int
    nv: int
    u: np.ndarray
    s: np.ndarray
    width: np.ndarray


def cape_geometry(chain: np.ndarray, body: np.ndarray, scale: float
                   ) -> tuple[np.ndarray, list[tuple[int, ...]], np.ndarray, CapeGrid]:
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
    outer = inner + vec3(0, thick, 0)
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
    return verts, faces, arc_v, CapeGrid(nu, nv, u, s, width)


def cape_weights(arc_v: np.ndarray, chain: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Two bones per vertex: hat functions centred on each bone's midpoint (0 = parent)."""
    seg = np.linalg.norm(np.diff(chain, axis=0), axis=1)
    joints = np.concatenate([[0], np.cumsum(seg)])
    centres = np.concatenate([[0.0], (joints[:-1] + joints[1:]) / 2])  # parent at the top
    k = np.clip(np.searchsorted(centres, arc_v, side="right") - 1, 0, len(centres) - 2)
    t = np.clip((arc_v - centres[k]) / (centres[k + 1] - centres[k]), 0.0, 1.0)
    top = np.stack([k, k + 1], axis=1)
    tw = np.stack([1 - t, t], axis=1)
    return top, tw


def back_profile(body: np.ndarray, z: float, scale: float) -> float:
    band = body[(np.abs(body[:, 2] - z) < 0.03 * scale) & (np.abs(body[:, 0]) < 0.12 * scale)]
    return float(band[:, 1].max()) if len(band) else 0.1 * scale
