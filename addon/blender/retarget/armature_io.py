"""Blender armatures <-> the array types of ``core.skeleton``, in bulk.

Reading uses ``foreach_get`` and F-Curve keys directly (no ``frame_set`` per
frame); writing builds one Action with the Blender 5.0 slot/channelbag API and
fills each F-Curve with ``keyframe_points.add`` + ``foreach_set``.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Generator

import bpy
import numpy as np
from bpy_extras import anim_utils

from ...core.rig.skeleton import Motion, Skeleton, bone_major, forward_kinematics
from ...core.rig.transforms import (
    euler_to_matrix,
    matrix_to_euler,
    matrix_to_quat,
    quat_continuity,
    quat_to_matrix,
    unwrap_euler,
)

_PATH = re.compile(r'^pose\.bones\["((?:[^"\\]|\\.)*)"\]\.(\w+)$')
# Keyframe.interpolation's enum values (foreach_set takes the numbers).
_INTERPOLATION = {"CONSTANT": 0, "LINEAR": 1, "BEZIER": 2}


def read_skeleton(obj: bpy.types.Object) -> Skeleton:
    """Rest skeleton of an armature object, bones sorted parent-first."""
    bones = obj.data.bones
    n = len(bones)
    raw = np.empty(n * 16, dtype=np.float32)
    bones.foreach_get("matrix_local", raw)
    rest = raw.reshape(n, 4, 4).transpose(0, 2, 1).astype(np.float64)  # column-major
    tails = np.empty(n * 3, dtype=np.float32)
    bones.foreach_get("tail_local", tails)
    names = [b.name for b in bones]
    parent_name = [b.parent.name if b.parent else None for b in bones]
    order = _parent_first(names, parent_name)
    index = {names[i]: k for k, i in enumerate(order)}
    parents = [index[parent_name[i]] if parent_name[i] else -1 for i in order]
    return Skeleton(
        names=[names[i] for i in order],
        parents=np.array(parents),
        rest=rest[order],
        tails=tails.reshape(n, 3).astype(np.float64)[order],
        world=np.array(obj.matrix_world, dtype=np.float64),
    )


def _parent_first(names: list[str], parents: list[str | None]) -> list[int]:
    depth = {}
    lookup = dict(zip(names, parents, strict=True))
    for name in names:
        d, p = 0, lookup[name]
        while p is not None:
            d, p = d + 1, lookup[p]
        depth[name] = d
    return sorted(range(len(names)), key=lambda i: (depth[names[i]], i))


def action_channelbag(obj: bpy.types.Object):
    """The channelbag of the object's assigned action slot, or None."""
    ad = obj.animation_data
    if ad is None or ad.action is None or ad.action_slot is None:
        return None
    return anim_utils.action_get_channelbag_for_slot(ad.action, ad.action_slot)


def action_frame_range(obj: bpy.types.Object) -> tuple[int, int]:
    """First and last keyed frame (rounded) of the object's action."""
    cb = action_channelbag(obj)
    if cb is None or not len(cb.fcurves):
        raise ValueError(f"armature {obj.name!r} has no animation to retarget")
    lo, hi = np.inf, -np.inf
    for fc in cb.fcurves:
        a, b = fc.range()
        lo, hi = min(lo, a), max(hi, b)
    return int(np.floor(lo + 1e-6)), int(np.ceil(hi - 1e-6))


def _sample_all(fcurves: list, frames: np.ndarray) -> np.ndarray:
    """Values (len(fcurves), nf) of F-Curves on integer ``frames``. Keys are used
    directly when they sit on exactly those frames (the common baked-mocap case):
    all such curves are read into one buffer and checked at once; any other curve
    is evaluated frame by frame."""
    nf = len(frames)
    out = np.empty((len(fcurves), nf))
    direct = [k for k, fc in enumerate(fcurves)
              if len(fc.keyframe_points) == nf and not len(fc.modifiers)]
    co = np.empty((len(direct), nf * 2), dtype=np.float32)  # the property's own type
    for row, k in zip(co, direct, strict=True):
        fcurves[k].keyframe_points.foreach_get("co", row)
    co = co.reshape(len(direct), nf, 2)
    # np.allclose(keys, frames, atol=1e-4) per curve (in float64), without its overhead.
    on_frames = (np.abs(co[..., 0] - frames) <= 1e-4 + 1e-5 * np.abs(frames)).all(axis=1)
    out[direct] = co[..., 1]
    keys_used = np.zeros(len(fcurves), dtype=bool)
    keys_used[direct] = on_frames
    for k in np.flatnonzero(~keys_used):
        out[k] = [fcurves[k].evaluate(float(f)) for f in frames]
    return out


def read_motion(obj: bpy.types.Object, skel: Skeleton,
                frame_range: tuple[int, int] | None = None) -> Motion:
    """Per-frame pose matrices of the armature's action (no frame_set needed)."""
    start, end = frame_range or action_frame_range(obj)
    frames = np.arange(start, end + 1, dtype=np.float64)
    nf = len(frames)
    cb = action_channelbag(obj)
    matched = [(fc, m) for fc in (cb.fcurves if cb is not None else ())
               if (m := _PATH.match(fc.data_path))]
    values = _sample_all([fc for fc, _ in matched], frames)
    channels: dict[tuple[str, str], dict[int, np.ndarray]] = {}
    for (fc, m), v in zip(matched, values, strict=True):
        name = m.group(1).replace('\\"', '"').replace("\\\\", "\\")
        channels.setdefault((name, m.group(2)), {})[fc.array_index] = v

    basis = bone_major(nf, len(skel), 4, 4)  # each bone's track contiguous
    for i, name in enumerate(skel.names):
        pb = obj.pose.bones[name]
        loc = _channel(channels, name, "location", pb.location, nf)
        scale = _channel(channels, name, "scale", pb.scale, nf)
        mode = pb.rotation_mode
        if mode == "QUATERNION":
            rot = quat_to_matrix(_channel(channels, name, "rotation_quaternion",
                                          pb.rotation_quaternion, nf))
        elif mode == "AXIS_ANGLE":
            aa = _channel(channels, name, "rotation_axis_angle", pb.rotation_axis_angle, nf)
            half = aa[:, :1] / 2
            q = np.concatenate([np.cos(half), aa[:, 1:] / np.maximum(
                np.linalg.norm(aa[:, 1:], axis=1, keepdims=True), 1e-12) * np.sin(half)], 1)
            rot = quat_to_matrix(q)
        else:
            rot = euler_to_matrix(_channel(channels, name, "rotation_euler",
                                           pb.rotation_euler, nf), mode)
        track = basis[:, i]  # compose(), in place
        if len(scale) == 1 and (scale == 1.0).all():
            track[:, :3, :3] = rot  # unscaled (the usual case): rot * 1 is rot
        else:
            np.multiply(rot, scale[:, None, :], out=track[:, :3, :3])
        track[:, :3, 3] = loc
        track[:, 3, :3] = 0.0
        track[:, 3, 3] = 1.0
    return Motion(pose=forward_kinematics(skel, basis, out=basis), fps=_scene_fps(),
                  frame_start=start)


def _channel(channels, name: str, prop: str, default, nf: int) -> np.ndarray:
    """(nf, k) values of a property, its animated channels over the pose bone's
    own values; (1, k) (broadcasting over the frames) where nothing is animated."""
    default = np.array(default, dtype=np.float64)[None]
    keyed = {idx: v for idx, v in channels.get((name, prop), {}).items()
             if idx < default.shape[1]}
    if not keyed:
        return default
    out = np.repeat(default, nf, axis=0)
    for idx, values in keyed.items():
        out[:, idx] = values
    return out


def _scene_fps() -> float:
    r = bpy.context.scene.render
    return r.fps / r.fps_base


def write_action(obj: bpy.types.Object, skel: Skeleton, basis_rot: np.ndarray,
                 basis_loc: np.ndarray, keyed: np.ndarray, frame_start: int,
                 name: str) -> bpy.types.Action:
    """Bake basis rotations (F, n, 3, 3) and locations (F, n, 3) of the ``keyed``
    bones into a new Action.

    Rotations are written in each pose bone's own rotation mode; location only
    where a bone actually translates and is not connected to its parent.
    The action is assigned to ``obj``; on any error it is removed again.
    """
    steps = write_action_steps(obj, skel, basis_rot, basis_loc, keyed, frame_start, name)
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value


def write_action_steps(obj: bpy.types.Object, skel: Skeleton, basis_rot: np.ndarray,
                       basis_loc: np.ndarray, keyed: np.ndarray, frame_start: int,
                       name: str, slice_s: float = 0.02
                       ) -> Generator[float, None, bpy.types.Action]:
    """:func:`write_action` in slices for a caller with an event loop: yields the
    fraction of bones written each time ``slice_s`` seconds have gone by, and returns the
    action. The action is assigned only at the end; closing the generator before that
    (the panel's Cancel) removes the unfinished one, so nothing half-baked is left."""
    frames = basis_rot.shape[0]
    xs = np.arange(frame_start, frame_start + frames, dtype=np.float64)
    action = bpy.data.actions.new(name)
    try:
        action.use_fake_user = False
        slot = action.slots.new(id_type="OBJECT", name=obj.name)
        cb = anim_utils.action_ensure_channelbag_for_slot(action, slot)
        # Bone by bone: the solver stores each bone's track contiguously
        # (bone-major), so a bone's conversion works on one small block in cache.
        bones = np.flatnonzero(keyed)
        last = time.perf_counter()
        for done, i in enumerate(bones):
            if time.perf_counter() - last > slice_s:
                yield done / len(bones)
                last = time.perf_counter()
            bname = skel.names[i]
            pb = obj.pose.bones[bname]
            path = f'pose.bones["{_escape(bname)}"]'
            mode = pb.rotation_mode
            rot = basis_rot[:, i]
            if mode == "QUATERNION":
                values, prop = quat_continuity(matrix_to_quat(rot)), "rotation_quaternion"
            elif mode == "AXIS_ANGLE":
                q = quat_continuity(matrix_to_quat(rot))
                angle = 2 * np.arccos(np.clip(q[:, 0], -1, 1))
                axis = q[:, 1:] / np.maximum(np.linalg.norm(q[:, 1:], axis=1, keepdims=True), 1e-12)
                axis[np.linalg.norm(q[:, 1:], axis=1) < 1e-12] = (0.0, 1.0, 0.0)
                values, prop = np.concatenate([angle[:, None], axis], 1), "rotation_axis_angle"
            else:
                values, prop = unwrap_euler(matrix_to_euler(rot, mode)), "rotation_euler"
            add_curves(cb, f"{path}.{prop}", values, xs, bname)
            loc = basis_loc[:, i]
            if not pb.bone.use_connect and np.abs(loc).max() > 1e-6:
                add_curves(cb, f"{path}.location", loc, xs, bname)
        ad = obj.animation_data or obj.animation_data_create()
        ad.action = action
        ad.action_slot = slot
    except BaseException:  # an error, or the generator closed (cancelled) mid-bake
        with contextlib.suppress(ReferenceError):  # gone already: File > New, a reload
            bpy.data.actions.remove(action)
        raise
    return action


def _escape(name: str) -> str:
    return name.replace("\\", "\\\\").replace('"', '\\"')


def add_curves(cb, data_path: str, values: np.ndarray, xs: np.ndarray, group: str,
               interpolation: str = "LINEAR") -> None:
    """One F-Curve per column of ``values`` in the channelbag ``cb``, keyed on the
    consecutive integer frames ``xs`` with ``interpolation`` ("LINEAR": a retargeted
    action; "BEZIER": the baked cape, smooth between frames for motion blur and subframe
    renders) and auto-clamped handles, bit for bit what ``keyframe_points.add`` +
    ``foreach_set`` + ``update()`` make. Built through the curve's sample points: their
    ``co`` is a plain array that ``foreach_set`` copies in one go (the keyframes' ``co``
    go key by key), and ``convert_to_keyframes`` makes the keys and their handles in C."""
    interp = np.full(len(xs), _INTERPOLATION[interpolation], dtype=np.int32)
    co = np.empty((len(xs), 2), dtype=np.float32)
    co[:, 0] = xs
    if len(xs) < 2:  # a lone key: keyed directly (its handles are not computed alike)
        for k in range(values.shape[1]):
            fc = cb.fcurves.new(data_path, index=k, group_name=group)
            fc.keyframe_points.add(len(xs))
            co[:, 1] = values[:, k]
            fc.keyframe_points.foreach_set("co", co.ravel())
            fc.keyframe_points.foreach_set("interpolation", interp)
            fc.update()
        return
    start, end = int(xs[0]), int(xs[0]) + len(xs)  # samples cover [start, end)
    for k in range(values.shape[1]):
        fc = cb.fcurves.new(data_path, index=k, group_name=group)
        fc.keyframe_points.add(1)  # sampling needs a curve; its one key is replaced
        fc.convert_to_samples(start, end)
        co[:, 1] = values[:, k]
        fc.sampled_points.foreach_set("co", co.ravel())
        fc.convert_to_keyframes(start, end)  # linear keys
        if interpolation != "LINEAR":
            fc.keyframe_points.foreach_set("interpolation", interp)
