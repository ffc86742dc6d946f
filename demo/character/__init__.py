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
  its axis, and one packed 1024² atlas for both, painted by ``demo.textures``
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
from pathlib import Path

import bpy
import numpy as np
from mathutils import Vector

from ...addon.blender.blend_files import save_blend_atomic
from .. import textures
from .body import (
    assign_weights,
    back_profile,
    body_parts,
    body_weights,
    cape_geometry,
    cape_weights,
    flat_material,
    is_closed,
    mesh_positions,
    metaball_elements,
    part_regions,
    polygonise_closed,
    surface_distance,
)
from .skeleton import (
    A_POSE_DEG,
    BODY_REGIONS,
    CAPE_BONES,
    CAPE_PARENT,
    COLLIDER_PROP,
    DEMO_BONE_MAP,
    MATERIALS,
    PART_PROP,
    SPRING_PROP,
    BoneSpec,
    skeleton_bones,
    vec3,
)
from .spring_bake import bake_spring_bones
from .uv import (
    ATLAS_PX,
    UV_MAP,
    bake_atlas,
    body_charts,
    cape_charts,
    textured_material,
)


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

    bones = skeleton_bones(scale, apose)
    by_name = {b.name: b for b in bones}
    parts = body_parts(by_name, scale)

    # Body surface.
    me = polygonise_closed(metaball_elements(parts), name, scene)
    pts = mesh_positions(me)
    lift = -pts[:, 2].min()
    pts[:, 2] += lift
    me.vertices.foreach_set("co", pts.astype(np.float32).ravel())

    # Cape chain: hangs from between the shoulder blades, clear of the back.
    zs = np.array([1.43, 1.23, 1.03, 0.83, 0.63]) * scale
    ys = np.array([back_profile(pts, z, scale) for z in zs]) + 0.022 * scale
    ys = np.maximum.accumulate(ys)  # never leans back into the body further down
    chain = np.stack([np.zeros_like(zs), ys, zs], axis=1)
    for k, cname in enumerate(CAPE_BONES):
        bones.append(BoneSpec(cname, CAPE_PARENT if k == 0 else CAPE_BONES[k - 1],
                           chain[k], chain[k + 1], k > 0, vec3(0, 1, 0)))

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
    region_idx, face_part = part_regions(parts, centres.reshape(-1, 3).astype(np.float64)
                                     - vec3(0, 0, lift))
    me.polygons.foreach_set("material_index", region_idx.astype(np.int32))
    me.shade_smooth()
    body_pts = pts - vec3(0, 0, lift)
    vdist, _ = surface_distance(parts, body_pts)
    verts, faces, arc_v, grid = cape_geometry(chain, pts, scale)
    cape_me = bpy.data.meshes.new(f"{name}_Cape")
    cape_me.from_pydata(verts.tolist(), [], faces)

    colours = {k: tuple(np.clip(np.array(c) * (1 + 0.12 * jitter[2 + i % 6]), 0, 1))
               for i, (k, c) in enumerate(MATERIALS.items())}
    if textured:
        atlas = bake_atlas(
            [(me, *body_charts(me, parts, face_part, region_idx, body_pts, vdist)),
             (cape_me, *cape_charts(cape_me, grid))],
            textures.Palette.from_seed(colours, seed), seed, name)
        mats = {k: textured_material(k, c, name, atlas) for k, c in colours.items()}
    else:
        mats = {k: flat_material(k, c, name) for k, c in colours.items()}
    for region in BODY_REGIONS:
        me.materials.append(mats[region])
    cape_me.materials.append(mats["cape"])

    body_obj = bpy.data.objects.new(f"{name}_Body", me)
    body_obj[PART_PROP] = "body"
    body_obj["painted_skin_regions"] = list(BODY_REGIONS)
    scene.collection.objects.link(body_obj)
    body_bones = [b for b in bones if b.name not in CAPE_BONES]
    top, tw = body_weights(parts, body_bones, vdist)
    assign_weights(body_obj, [b.name for b in body_bones], top, tw)

    cape_obj = bpy.data.objects.new(f"{name}_Cape", cape_me)
    cape_obj[PART_PROP] = "cape"
    scene.collection.objects.link(cape_obj)
    ctop, ctw = cape_weights(arc_v, chain)
    assign_weights(cape_obj, [CAPE_PARENT, *CAPE_BONES], ctop, ctw)

    for obj in (body_obj, cape_obj):
        obj.parent = arm_obj
        mod = obj.modifiers.new("Armature", "ARMATURE")
        mod.object = arm_obj
    return arm_obj


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
    "A_POSE_DEG", "ATLAS_PX", "BODY_REGIONS", "CAPE_BONES", "CAPE_PARENT", "COLLIDER_PROP",
    "DEMO_BONE_MAP", "MATERIALS", "PART_PROP", "SPRING_PROP", "UV_MAP",
    "bake_spring_bones", "build_demo_character", "is_closed", "save_demo_blend",
    "setup_demo_scene",
]
