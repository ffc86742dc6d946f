"""The shot's deforming meshes and skeleton, read per frame in bulk.

Topology (triangles, corner -> loop ids, per-vertex part labels) is read once;
each frame then costs one ``frame_set`` plus ``foreach_get`` of the evaluated
positions and normals, in the domain Blender keeps them in (FACTS.md: the
``position`` attribute is ~25x faster than ``vertices.co``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property

import bpy
import numpy as np

from ...core.bonemap import auto_map
from ...core.passes.encodings import PART_ID, part_of_joint
from ...core.passes.irradiance import LightEmission
from ...core.retarget.reference_pose import reference_frames
from ..retarget.armature_io import read_skeleton
from .scene_reader import camera_for


def outward_closed(tris: np.ndarray, pos: np.ndarray) -> bool:
    """A closed, consistently wound triangle mesh whose normals point outwards:
    every directed edge is used as often as its reverse (a closed oriented
    surface, touching sheets allowed) and the signed volume is positive."""
    if not len(tris):
        return False
    directed = np.concatenate([tris[:, [0, 1]], tris[:, [1, 2]], tris[:, [2, 0]]])
    n = int(directed.max()) + 1
    key = directed[:, 0].astype(np.int64) * n + directed[:, 1]
    rev = directed[:, 1].astype(np.int64) * n + directed[:, 0]
    k_u, k_c = np.unique(key, return_counts=True)
    r_u, r_c = np.unique(rev, return_counts=True)
    if len(k_u) != len(r_u) or not (np.array_equal(k_u, r_u) and np.array_equal(k_c, r_c)):
        return False
    v = pos.astype(np.float64)[tris]
    volume = np.einsum("ij,ij->i", v[:, 0], np.cross(v[:, 1], v[:, 2])).sum() / 6.0
    return bool(volume > 0)


def _read_normals(me) -> tuple[str, np.ndarray]:
    """The mesh's normals in the domain Blender computes them in (smooth meshes per
    vertex, flat ones per face, mixed or custom per corner): the same values as
    ``corner_normals``, without expanding a smooth mesh's normals to every corner
    (several times fewer to read, transform and normalise)."""
    domain = me.normals_domain
    if domain == "POINT":
        data, n = me.vertex_normals, len(me.vertices)
    elif domain == "FACE":
        data, n = me.polygon_normals, len(me.polygons)
    else:
        domain, data, n = "CORNER", me.corner_normals, len(me.loops)
    out = np.empty(n * 3, np.float32)
    data.foreach_get("vector", out)
    return domain, out.reshape(-1, 3)


def render_uv_name(me) -> str | None:
    """The UV map renderers use (the active render one), or None without UVs."""
    layers = list(me.uv_layers)
    if not layers:
        return None
    return next((u.name for u in layers if u.active_render), layers[0].name)


def _update_view_layer() -> None:
    bpy.context.view_layer.update()


@contextmanager
def rest_position_attribute(objects: list[bpy.types.Object],
                            update: Callable[[], None] = _update_view_layer
                            ) -> Iterator[None]:
    """Have Blender evaluate the ``rest_position`` attribute on ``objects`` for the
    duration, then put each object's flag back as it was (never left in a file).
    ``update``: what re-evaluates the depsgraph read (default: the view layer's)."""
    saved = [(ob, getattr(ob, REST_FLAG)) for ob in objects if hasattr(ob, REST_FLAG)]
    try:
        for ob, was in saved:
            if not was:
                setattr(ob, REST_FLAG, True)
        update()
        yield
    finally:
        for ob, was in saved:
            if getattr(ob, REST_FLAG) != was:
                setattr(ob, REST_FLAG, was)
        update()


class ShotError(ValueError):
    """The shot cannot give passes; the message says why and what to do."""


@dataclass
class FrameGeometry:
    positions: np.ndarray  # (V, 3) world
    corner_normals: np.ndarray  # (T, 3, 3) float32 world, unit
    camera: object  # core.camera.Camera
    joints: dict | None  # canonical -> (head, tail, matrix) world, for the skeleton pass
    lights: list[SceneLight] = field(default_factory=list)  # this frame's, manifest order


@dataclass
class SurfaceAttributes:
    """What stays fixed to the skin over a shot, per vertex / triangle corner of
    ``ShotGeometry.tris``: the canonical coordinates the neural renderer samples."""

    rest_positions: np.ndarray  # (V, 3) float32 object space of each mesh's rest mesh
    corner_uvs: np.ndarray  # (T, 3, 2) float32 active render UV map, 0 without one
    has_uv: np.ndarray  # (T,) bool: the triangle's mesh has a UV map


@dataclass
class SceneLight:
    """One scene light at one frame, world space."""

    name: str
    type: str  # SUN, POINT, SPOT, AREA
    position: np.ndarray  # (3,) world
    direction: np.ndarray  # (3,) unit, towards the light (a sun's light travels along -it)
    color: np.ndarray = field(default_factory=lambda: np.ones(3))  # linear RGB
    energy: float = 1.0  # a sun's strength, else power in W
    spot_size: float = np.pi
    spot_blend: float = 0.0

    def to_dict(self) -> dict:
        return {"name": self.name, "type": self.type,
                "position": [float(x) for x in self.position],
                "direction": [float(x) for x in self.direction],
                "color": [float(x) for x in self.color], "energy": float(self.energy)}

    def emission(self) -> LightEmission:
        """What the irradiance pass needs of this light."""
        return LightEmission(self.type, self.position, self.direction, self.color,
                             self.energy, self.spot_size, self.spot_blend)


#: Most lights the light_visibility pass carries (one channel each).
MAX_LIGHTS = 4
#: The object flag that makes Blender keep each vertex's position before shape keys
#: and modifiers as the ``rest_position`` attribute through the modifier stack.
REST_FLAG, REST_ATTRIBUTE = "add_rest_position_attribute", "rest_position"


#: The skin training's key light (train-skin adds it to a character file without
#: lights): a sun at this XYZ Euler rotation and strength.
TRAINING_SUN_EULER = (np.radians(50.0), 0.0, np.radians(25.0))
TRAINING_SUN_ENERGY = 3.0
TRAINING_SUN_NAME = "SkinSun (training rig)"


def training_sun() -> SceneLight:
    """The training rig's sun as a :class:`SceneLight`: what a shot without a light of
    its own is painted under (its passes' light visibility follows it)."""
    x, y, z = TRAINING_SUN_EULER
    rx = np.array([[1, 0, 0], [0, np.cos(x), -np.sin(x)], [0, np.sin(x), np.cos(x)]])
    ry = np.array([[np.cos(y), 0, np.sin(y)], [0, 1, 0], [-np.sin(y), 0, np.cos(y)]])
    rz = np.array([[np.cos(z), -np.sin(z), 0], [np.sin(z), np.cos(z), 0], [0, 0, 1]])
    direction = (rz @ ry @ rx)[:, 2]  # Blender's XYZ Euler: the light looks down its -Z
    return SceneLight(TRAINING_SUN_NAME, "SUN", np.zeros(3), direction / np.linalg.norm(direction),
                      energy=TRAINING_SUN_ENERGY)


#: The world train-skin gives a character file without one (what a new world's Background
#: node renders in Blender 5.0), and the world_light pass's world for a shot without one.
TRAINING_WORLD_COLOUR = (0.05, 0.05, 0.05)


def world_colour(scene: bpy.types.Scene) -> tuple[np.ndarray, str | None]:
    """(the world's light as one linear colour, its strength included; a warning or
    None). The world_light pass lights by it. Cycles renders a world's node tree: the
    active World Output's Background node, its Color (an Environment Texture read as its
    image's mean) times its Strength. Other trees are read as the world's viewport
    colour, and the warning says so; a scene without a world gets the training world."""
    world = scene.world
    if world is None:
        return np.asarray(TRAINING_WORLD_COLOUR, np.float64), (
            "the scene has no world: its world light is the training world's")
    tree = world.node_tree  # Blender 5 renders every world by its nodes (use_nodes: gone)
    if tree is None:
        return np.array(world.color[:3], np.float64), None
    outs = [n for n in tree.nodes if n.type == "OUTPUT_WORLD"]
    out = next((n for n in outs if n.is_active_output), outs[0] if outs else None)
    if out is None or not out.inputs["Surface"].is_linked:
        return np.zeros(3), None  # Cycles renders a world without output black
    node = out.inputs["Surface"].links[0].from_node
    approx = (np.array(world.color[:3], np.float64),
              f"world {world.name!r}: its node tree is read as its viewport colour "
              "(the world_light pass knows a Background node's colour or image)")
    if node.type != "BACKGROUND" or node.inputs["Strength"].is_linked:
        return approx
    colour = node.inputs["Color"]
    strength = float(node.inputs["Strength"].default_value)
    if not colour.is_linked:
        return np.array(colour.default_value[:3], np.float64) * strength, None
    tex = colour.links[0].from_node
    image = getattr(tex, "image", None) if tex.type == "TEX_ENVIRONMENT" else None
    if image is None or not image.size[0]:
        return approx
    px = np.empty(image.size[0] * image.size[1] * image.channels, np.float32)
    image.pixels.foreach_get(px)
    rgb = px.reshape(-1, image.channels)[:, :3].astype(np.float64)
    if not image.is_float and image.colorspace_settings.name == "sRGB":
        rgb = np.where(rgb <= 0.04045, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)
    return rgb.mean(axis=0) * strength, None


def scene_lights(scene: bpy.types.Scene) -> list[bpy.types.Object]:
    """The lights that render, by name (a stable order every farm worker agrees on)."""
    return sorted((o for o in scene.objects if o.type == "LIGHT" and not o.hide_render
                   and o.visible_get()), key=lambda o: o.name)[:MAX_LIGHTS]


def light_at(ob: bpy.types.Object) -> SceneLight:
    mw = np.array(ob.matrix_world, np.float64)
    z = mw[:3, 2]
    data = ob.data
    spot = data.type == "SPOT"
    return SceneLight(ob.name, data.type, mw[:3, 3].copy(),
                      z / max(float(np.linalg.norm(z)), 1e-12),
                      np.array(data.color[:3], np.float64), float(data.energy),
                      float(data.spot_size) if spot else np.pi,
                      float(data.spot_blend) if spot else 0.0)


def render_meshes(scene: bpy.types.Scene) -> list[bpy.types.Object]:
    """The meshes a render of ``scene`` shows (visible, not hidden from render)."""
    return [o for o in scene.objects if o.type == "MESH" and not o.hide_render
            and o.visible_get()]


def parent_bone(ob: bpy.types.Object) -> str | None:
    """The bone ``ob`` rides rigidly: its own parent bone, or the nearest ancestor's
    (a glTF node on a bone with meshes below it); None if it hangs from none."""
    while ob.parent is not None:
        if ob.parent_type == "BONE" and ob.parent.type == "ARMATURE":
            return ob.parent_bone or None
        ob = ob.parent
    return None


def find_armature(meshes: list[bpy.types.Object]) -> bpy.types.Object | None:
    """The armature deforming ``meshes`` (the first Armature modifier's), or None."""
    for ob in meshes:
        for mod in ob.modifiers:
            if mod.type == "ARMATURE" and mod.object is not None:
                return mod.object
    return None


class ShotGeometry:
    """Reads the scene's visible meshes (concatenated) and the driving armature.

    By default through the view layer's depsgraph, moving the scene's frame; a render
    engine gives its own ``depsgraph`` and ``set_frame`` (``RenderEngine.frame_set``,
    which re-evaluates that depsgraph), so a render reads what it renders."""

    def __init__(self, scene: bpy.types.Scene, width: int, height: int,
                 depsgraph: bpy.types.Depsgraph | None = None,
                 set_frame: Callable[[int], None] | None = None,
                 need_camera: bool = True) -> None:
        self.scene = scene
        self.depsgraph = depsgraph
        self.set_frame = set_frame or scene.frame_set
        self.width, self.height = width, height
        self.objects = render_meshes(scene)
        if not self.objects:
            raise ShotError("the scene has no visible mesh to render")
        try:
            if need_camera:  # fail early without one (a viewport brings its own)
                camera_for(scene, width=width, height=height)
        except ValueError as e:
            raise ShotError(str(e)) from None
        self.armature = find_armature(self.objects)
        self.bone_map: dict[str, str] = {}
        self.head_rest: np.ndarray | None = None
        self.warnings: list[str] = []
        self._bone_index: dict[str, int] | None = None
        if self.armature is not None:
            skel = read_skeleton(self.armature)
            bmap = auto_map(skel)
            self.bone_map = dict(bmap.bones) if not bmap.missing_core else {}
            if self.bone_map and "head" in self.bone_map:
                # The head's rotation in the canonical pose (facing -Y): tells the
                # skeleton pass where the face is.
                ref = reference_frames(skel, self.bone_map)
                self.head_rest = ref[skel.index(self.bone_map["head"])]
            if bmap.missing_core:
                self.warnings.append(
                    f"armature {self.armature.name!r} has no humanoid map (missing "
                    f"{', '.join(bmap.missing_core)}): the skeleton pass is skipped")
        else:
            self.warnings.append("no armature deforms the meshes: the skeleton pass is skipped")
        self._read_topology()
        self.lights = scene_lights(scene)
        n_lights = len([o for o in scene.objects if o.type == "LIGHT" and not o.hide_render
                        and o.visible_get()])
        self.light_warning = None
        if n_lights > MAX_LIGHTS:
            self.light_warning = (f"the scene has {n_lights} lights: light_visibility carries "
                                  f"the first {MAX_LIGHTS} by name")
        self._surface: SurfaceAttributes | None = None
        self._albedo = None

    @cached_property
    def world(self) -> tuple[np.ndarray, str | None]:
        """(:func:`world_colour`, its warning), read once: an environment image is read
        whole. Read it on the main thread (``render.iter_frames`` does) before a worker
        rasterises: only that thread may touch Blender's data."""
        return world_colour(self.scene)

    def _evaluated(self, ob: bpy.types.Object):
        dg = self.depsgraph or bpy.context.evaluated_depsgraph_get()
        return ob.evaluated_get(dg)

    def _update(self) -> None:
        """Re-evaluate the depsgraph read, at the frame it shows."""
        if self.depsgraph is None:
            bpy.context.view_layer.update()
        else:
            self.set_frame(self.scene.frame_current)

    def _read_topology(self) -> None:
        tris, labels, counts, cull, index = [], [], [], [], []
        v_off = 0
        for ob in self.objects:
            ev = self._evaluated(ob)
            me = ev.to_mesh()
            try:
                lt = me.loop_triangles
                t = np.empty(len(lt) * 3, np.int32)
                lt.foreach_get("vertices", t)
                lo = np.empty(len(lt) * 3, np.int32)
                lt.foreach_get("loops", lo)
                po = np.empty(len(lt), np.int32)
                lt.foreach_get("polygon_index", po)
                t = t.reshape(-1, 3)
                pos = np.empty(len(me.vertices) * 3, np.float32)
                me.attributes["position"].data.foreach_get("vector", pos)
                mirrored = np.linalg.det(np.array(ev.matrix_world)[:3, :3]) < 0
                cull.append(np.full(len(t), outward_closed(t, pos.reshape(-1, 3))
                                    and not mirrored))
                tris.append(t + v_off)
                # Where each triangle corner's normal lives, for each domain Blender
                # may store normals in (see _read_normals).
                index.append({"POINT": t, "FACE": np.repeat(po[:, None], 3, axis=1),
                              "CORNER": lo.reshape(-1, 3)})
                labels.append(self._vertex_parts(ob, me))
                counts.append((len(me.vertices), len(me.polygons), len(me.loops)))
                v_off += len(me.vertices)
            finally:
                ev.to_mesh_clear()
        self.tris = np.concatenate(tris)
        self._normal_index = index
        self.vertex_parts = np.concatenate(labels).astype(np.uint8)
        self.counts = counts
        # Triangles of closed, outward-facing meshes: their back faces can never be
        # the first surface a camera ray outside them meets, so the fast engine
        # skips them (about half the rasterising), with identical pictures.
        self.cullable = np.concatenate(cull)

    def surface_attributes(self) -> SurfaceAttributes:
        """Rest positions and UVs of every mesh, read once (on the thread that may call
        Blender). Rest positions are Blender's own ``rest_position`` attribute: the
        vertex before shape keys and modifiers, carried through the stack, so the same
        skin point keeps it whatever the pose, corrective shape keys included; Cycles
        reads the very same attribute (``cycles_passes``)."""
        if self._surface is not None:
            return self._surface
        rest, uvs, has = [], [], []
        with rest_position_attribute(self.objects, self._update):
            for ob, counts, index in zip(self.objects, self.counts, self._normal_index,
                                         strict=True):
                ev = self._evaluated(ob)
                me = ev.to_mesh()
                try:
                    if (len(me.vertices), len(me.polygons), len(me.loops)) != counts:
                        raise ShotError(f"mesh {ob.name!r} changes its topology over the shot "
                                        "(remesh/geometry nodes?): passes need fixed topology")
                    r = np.empty(counts[0] * 3, np.float32)
                    attr = me.attributes.get(REST_ATTRIBUTE)
                    if attr is None or attr.data_type != "FLOAT_VECTOR" or attr.domain != "POINT":
                        # A modifier that drops attributes: the undeformed mesh instead
                        attr = me.attributes["position"]
                    attr.data.foreach_get("vector", r)
                    rest.append(r.reshape(-1, 3))
                    uv = render_uv_name(me)
                    corners = index["CORNER"]
                    if uv is None:
                        uvs.append(np.zeros(corners.shape + (2,), np.float32))
                    else:
                        buf = np.empty(counts[2] * 2, np.float32)
                        me.attributes[uv].data.foreach_get("vector", buf)
                        uvs.append(buf.reshape(-1, 2)[corners])
                    has.append(np.full(len(corners), uv is not None))
                finally:
                    ev.to_mesh_clear()
        self._surface = SurfaceAttributes(np.concatenate(rest), np.concatenate(uvs),
                                          np.concatenate(has))
        return self._surface

    def albedo_surface(self):
        """Each triangle's base-colour source (see ``materials``), read once."""
        if self._albedo is None:
            from .materials import read_albedo_surface

            self._albedo = read_albedo_surface(
                self.objects, self._evaluated,
                [ix["FACE"][:, 0] for ix in self._normal_index],
                [ix["CORNER"] for ix in self._normal_index],
                self.surface_attributes().corner_uvs)
        return self._albedo

    @cached_property
    def texture_islands(self) -> np.ndarray:
        """(T,) the run of continuously textured triangles each triangle is in (UV seams
        and material changes part them; ``core.passes.albedo.texture_islands``)."""
        from ...core.passes.albedo import texture_islands

        surf = self.albedo_surface()
        return texture_islands(self.tris, surf.tri_source, surf.corner_uvs, surf.corner_colors)

    def _vertex_parts(self, ob: bpy.types.Object, me) -> np.ndarray:
        """Part id per vertex from its dominant deforming bone's canonical joint; a mesh
        that rides a bone rigidly (parented to it, or to an empty on it) takes that
        bone's where no weight says otherwise."""
        n = len(me.vertices)
        part = np.full(n, PART_ID["accessory"], np.uint8)
        if not self.bone_map:
            return part
        canon_of_bone = {b: c for c, b in self.bone_map.items()}
        part[:] = part_of_joint(canon_of_bone.get(parent_bone(ob)))
        group_part = np.full(max(len(ob.vertex_groups), 1), PART_ID["accessory"], np.uint8)
        for g in ob.vertex_groups:
            group_part[g.index] = part_of_joint(canon_of_bone.get(g.name))
        best = np.zeros(n)
        # Vertex weights have no bulk accessor; one pass over the vertices at set-up.
        for v in me.vertices:
            for ge in v.groups:
                if ge.weight > best[v.index] and ge.group < len(group_part):
                    best[v.index] = ge.weight
                    part[v.index] = group_part[ge.group]
        return part

    def frame(self, f: int, with_joints: bool = False) -> FrameGeometry:
        """Evaluate frame ``f``: world positions, corner normals, camera, joints."""
        self.set_frame(f)
        return self.current(with_joints=with_joints)

    def current(self, camera=None, with_joints: bool = False) -> FrameGeometry:
        """The meshes as the depsgraph shows them now (a pose being edited, unkeyed, is
        read as it is), seen by ``camera`` (a ``core.camera.Camera``; default: the scene
        camera at this size)."""
        pos, nrm = [], []
        for ob, counts, index in zip(self.objects, self.counts, self._normal_index,
                                     strict=True):
            ev = self._evaluated(ob)
            me = ev.to_mesh()
            try:
                nv = counts[0]
                if (len(me.vertices), len(me.polygons), len(me.loops)) != counts:
                    raise ShotError(f"mesh {ob.name!r} changes its topology over the shot "
                                    "(remesh/geometry nodes?): passes need fixed topology")
                p = np.empty(nv * 3, np.float32)
                me.attributes["position"].data.foreach_get("vector", p)
                domain, n = _read_normals(me)
            finally:
                ev.to_mesh_clear()
            mw = np.array(ev.matrix_world, np.float64)
            pos.append(p.reshape(-1, 3) @ mw[:3, :3].T + mw[:3, 3])
            normal_m = np.linalg.inv(mw[:3, :3]).T.astype(np.float32)
            # Renormalised per vertex after the transform, as Cycles does when it bakes an
            # object's transform into its mesh (a scaled object's normals then match
            # Cycles to 0.01°, against 0.2° when only the interpolated normal is
            # normalised; see test_passes_accuracy).
            nw = n @ normal_m.T
            nw /= np.sqrt(np.maximum(np.einsum("ij,ij->i", nw, nw), 1e-24))[:, None]
            nrm.append(np.take(nw, index[domain], axis=0))  # 4x faster than nw[idx]
        positions = np.concatenate(pos)
        corner_normals = np.concatenate(nrm)
        # Camera, lights and bones as evaluated (a render's depsgraph moves its own
        # copies of them, not the objects the scene holds).
        if camera is None:
            camera = self.camera()
        joints = self._joints() if with_joints and self.bone_map else None
        return FrameGeometry(positions, corner_normals, camera, joints,
                             [light_at(self._evaluated(o)) for o in self.lights]
                             or [training_sun()])

    def camera(self):
        """The scene camera as the depsgraph read shows it now (``core.camera.Camera``)."""
        cam_obj = self.scene.camera
        return camera_for(self.scene, None if cam_obj is None else self._evaluated(cam_obj),
                          width=self.width, height=self.height)

    def _joints(self) -> dict:
        arm = self._evaluated(self.armature)
        bones = arm.pose.bones
        n = len(bones)
        # Two bulk reads instead of a Python loop over the bones (~40x faster).
        # Blender flattens matrices column by column: transpose each back.
        mats = np.empty(n * 16, np.float32)
        bones.foreach_get("matrix", mats)
        tails = np.empty(n * 3, np.float32)
        bones.foreach_get("tail", tails)
        mats = mats.reshape(n, 4, 4).transpose(0, 2, 1).astype(np.float64)
        tails = tails.reshape(n, 3).astype(np.float64)
        if self._bone_index is None:
            self._bone_index = {pb.name: i for i, pb in enumerate(bones)}
        mw = np.array(arm.matrix_world, np.float64)
        pairs = [(c, self._bone_index[b]) for c, b in self.bone_map.items()
                 if b in self._bone_index]
        idx = np.array([i for _, i in pairs], np.int64)
        m = mw @ mats[idx]  # (J, 4, 4) world
        heads = m[:, :3, 3]
        tails_w = tails[idx] @ mw[:3, :3].T + mw[:3, 3]
        rots = m[:, :3, :3] / np.linalg.norm(m[:, :3, :3], axis=1, keepdims=True)
        return {c: (heads[k], tails_w[k], rots[k]) for k, (c, _) in enumerate(pairs)}
