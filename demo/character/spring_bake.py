"""Baking the demo's spring bones (the cape) into the armature's action.

The parents' poses are sampled through Blender per frame; the chains are run by
the pure :mod:`.spring` simulator and keyed back as quaternions (Bezier keys, by
the writer retargeted actions use: ``armature_io.add_curves``).
"""

from __future__ import annotations

import json

import bpy
import numpy as np

from ...addon.blender.retarget.armature_io import add_curves
from ...addon.core.rig.transforms import matrix_to_quat, quat_continuity
from . import spring
from .skeleton import COLLIDER_PROP, SPRING_PROP


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
    through :func:`demo.spring.simulate` and written as per-frame quaternion keys
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
    """Replace the bone's quaternion curves by one Bezier key per frame: the cape's
    motion between frames (motion blur, subframe renders) stays smooth."""
    path = f'pose.bones["{bone}"].rotation_quaternion'
    for fc in [fc for fc in cb.fcurves if fc.data_path == path]:
        cb.fcurves.remove(fc)
    add_curves(cb, path, quat, np.asarray(frames, dtype=np.float64), bone, "BEZIER")
