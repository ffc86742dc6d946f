"""``painted-skin bench retarget``: this engine against the peers' method.

Both retarget the same long clip onto the demo character in one run:

- engine: read the clip's F-Curves, solve in numpy, write keys in bulk;
- peers: per-bone offset helper bones + Copy Rotation / Copy Location
  constraints, baked with ``bpy.ops.nla.bake(visual_keying=True)`` — what
  Rokoko, Expy Kit and friends do.

The helpers carry this engine's per-bone offsets (``C_src^T C_tgt``), so both
give the same limbs; the torso differs where the engine solves the spine and
neck as chains. The max joint-position difference over sampled frames (as a
fraction of character height) says how far apart the two poses are, and each
method's segment directions are measured against the source's own kinematics
(one best-fit rotation for the whole clip): limbs, torso (hips -> neck) and neck
(neck -> head).

It also times the clip's read — the project's BVH reader against Blender's importer,
which it replaces — and the panel's retarget of the clip: how long Blender's main thread
is held at a time (the longest timer tick), against the read alone as one blocking stage.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import bpy
import numpy as np
from mathutils import Matrix

from ..addon.blender.retarget.api import read_bvh_source, retarget_clip
from ..addon.blender.retarget.armature_io import read_motion, read_skeleton
from ..addon.blender.retarget.importers import imported_clip
from ..addon.blender.retarget.modal import RetargetJob
from ..addon.blender.session import reset_scene
from ..addon.core.bonemap import auto_map
from ..addon.core.retarget.reference_pose import reference_frames
from ..addon.core.retarget.solve import RetargetOptions, leg_length
from ..addon.core.rig.skeleton import rotations


def _clip(tmp: Path, frames: int) -> Path:
    from ..addon.motion import write_clip

    path = tmp / "long_walk.bvh"
    write_clip(path, "walk", frames=frames, fps=120.0, convention="cmu")
    return path


def _joint_positions(arm: bpy.types.Object, frames: list[int]) -> np.ndarray:
    scene = bpy.context.scene
    out = []
    for f in frames:
        scene.frame_set(f)
        mw = np.array(arm.matrix_world)
        heads = np.array([pb.head for pb in arm.pose.bones])
        out.append(heads @ mw[:3, :3].T + mw[:3, 3])
    return np.array(out)


# Canonical segments whose world direction is compared with the source's.
SEGMENTS: dict[str, tuple[tuple[str, str], ...]] = {
    "upper arms": (("leftUpperArm", "leftLowerArm"), ("rightUpperArm", "rightLowerArm")),
    "forearms": (("leftLowerArm", "leftHand"), ("rightLowerArm", "rightHand")),
    "thighs": (("leftUpperLeg", "leftLowerLeg"), ("rightUpperLeg", "rightLowerLeg")),
    "shins": (("leftLowerLeg", "leftFoot"), ("rightLowerLeg", "rightFoot")),
    "torso": (("hips", "neck"),),
    "neck": (("neck", "head"),),
}


def segment_errors(src_heads: np.ndarray, src_index: dict[str, int], tgt_heads: np.ndarray,
                   tgt_index: dict[str, int]) -> dict[str, np.ndarray]:
    """Per-frame angle (degrees, (F, k)) between each segment of the target and the
    same segment of the source, after one best-fit rotation for the whole clip.

    ``*_heads``: (F, n, 3) world joint positions; ``*_index``: canonical joint ->
    bone index. Segments a side lacks are left out.
    """
    pairs = {name: [(a, b) for a, b in segs
                    if {a, b} <= set(src_index) and {a, b} <= set(tgt_index)]
             for name, segs in SEGMENTS.items()}
    pairs = {k: v for k, v in pairs.items() if v}

    def vectors(heads: np.ndarray, index: dict[str, int]) -> dict[str, np.ndarray]:
        out = {}
        for k, segs in pairs.items():
            v = np.stack([heads[:, index[b]] - heads[:, index[a]] for a, b in segs], axis=1)
            out[k] = v / np.linalg.norm(v, axis=-1, keepdims=True)
        return out

    vs, vt = vectors(src_heads, src_index), vectors(tgt_heads, tgt_index)
    a = np.concatenate([v.reshape(-1, 3) for v in vs.values()])
    b = np.concatenate([v.reshape(-1, 3) for v in vt.values()])
    u, _, w = np.linalg.svd(b.T @ a)  # Kabsch: the rotation taking a onto b
    fit = u @ np.diag([1.0, 1.0, np.sign(np.linalg.det(u @ w))]) @ w
    return {k: np.degrees(np.arccos(np.clip(np.sum((vs[k] @ fit.T) * vt[k], axis=-1), -1, 1)))
            for k in vs}


def _canonical_index(arm: bpy.types.Object) -> dict[str, int]:
    names = [pb.name for pb in arm.pose.bones]
    return {c: names.index(b) for c, b in auto_map(read_skeleton(arm)).bones.items()
            if b in names}


def _peers_setup(src: bpy.types.Object, tgt: bpy.types.Object) -> None:
    """Helper bones on the source carrying each pair's offset; constraints on the target."""
    s_skel, t_skel = read_skeleton(src), read_skeleton(tgt)
    s_map, t_map = auto_map(s_skel).bones, auto_map(t_skel).bones
    c_s, c_t = reference_frames(s_skel, s_map), reference_frames(t_skel, t_map)
    scale = leg_length(t_skel, t_map) / leg_length(s_skel, s_map)
    src.matrix_world = Matrix.Scale(scale, 4) @ src.matrix_world
    r_rest = rotations(s_skel.world @ s_skel.rest)
    obj_rot = rotations(s_skel.world)
    pairs = [(c, s_map[c], t_map[c]) for c in t_map if c in s_map]
    bpy.context.view_layer.objects.active = src
    bpy.ops.object.mode_set(mode="EDIT")
    for c, sb, tb in pairs:
        i, j = s_skel.index(sb), t_skel.index(tb)
        world_rot = r_rest[i] @ c_s[i].T @ c_t[j]  # helper rest so that W = W_src @ offset
        eb = src.data.edit_bones.new(f"PS_offset_{c}")
        eb.head, eb.tail = (0.0, 0.0, 0.0), (0.0, 1.0, 0.0)  # non-zero length, or matrix= is lost
        parent = src.data.edit_bones[sb]
        m = np.eye(4)
        m[:3, :3] = obj_rot.T @ world_rot
        m[:3, 3] = parent.head
        eb.matrix = Matrix(m.tolist())
        eb.length = max(parent.length, 1e-3)
        eb.parent = parent
    bpy.ops.object.mode_set(mode="OBJECT")
    for c, sb, tb in pairs:
        pb = tgt.pose.bones[tb]
        con = pb.constraints.new("COPY_ROTATION")
        con.target, con.subtarget = src, f"PS_offset_{c}"
        if c == "hips":
            loc = pb.constraints.new("COPY_LOCATION")
            loc.target, loc.subtarget = src, sb


def read_times(clip: Path) -> tuple[float, float]:
    """Seconds to read ``clip`` into a skeleton and motion: (this reader, Blender's
    importer), the better of two runs each."""
    def parser() -> None:
        read_bvh_source(clip)

    def importer() -> None:
        with imported_clip(clip) as (arm, _):
            read_motion(arm, read_skeleton(arm))

    best = []
    for read in (parser, importer):
        runs = []
        for _ in range(2):
            t0 = time.perf_counter()
            read()
            runs.append(time.perf_counter() - t0)
        best.append(min(runs))
    return best[0], best[1]


def panel_ticks(clip: Path, target: bpy.types.Object) -> list[float]:
    """Seconds each timer tick of the panel's retarget holds the main thread."""
    job = RetargetJob(str(clip), target, action_name="panel", set_scene=False)
    ticks = []
    while True:
        t0 = time.perf_counter()
        ended = job.step()
        ticks.append(time.perf_counter() - t0)
        if ended:
            return ticks


def main(frames: int = 2400) -> int:
    """Run both methods, print frames/s, the ratio and the max difference."""
    reset_scene()
    from ..demo.character import build_demo_character

    tgt = build_demo_character()
    opts = RetargetOptions(ground="keep", foot_lock=False)
    with tempfile.TemporaryDirectory() as tmp:
        clip = _clip(Path(tmp), frames)
        with imported_clip(clip) as (src, _):
            start = int(src.animation_data.action.frame_range[0])
            end = start + frames - 1
            t0 = time.perf_counter()
            retarget_clip(src, tgt, options=opts, action_name="engine", set_scene=False)
            t_engine = time.perf_counter() - t0
            sample = list(range(start, end + 1, max(1, frames // 60)))
            ours = _joint_positions(tgt, sample)
            source = _joint_positions(src, sample)
            src_index = _canonical_index(src)

            tgt.animation_data.action = None
            for pb in tgt.pose.bones:
                pb.matrix_basis = Matrix()
            t0 = time.perf_counter()
            _peers_setup(src, tgt)
            bpy.context.view_layer.objects.active = tgt
            for ob in bpy.context.view_layer.objects:
                ob.select_set(ob == tgt)
            bpy.ops.object.mode_set(mode="POSE")
            bpy.ops.pose.select_all(action="SELECT")
            bpy.ops.nla.bake(frame_start=start, frame_end=end, only_selected=False,
                             visual_keying=True, clear_constraints=True, bake_types={"POSE"})
            bpy.ops.object.mode_set(mode="OBJECT")
            t_peers = time.perf_counter() - t0
            theirs = _joint_positions(tgt, sample)
        t_parser, t_importer = read_times(clip)
        ticks = panel_ticks(clip, tgt)
    height = read_skeleton(tgt).height()
    diff = float(np.abs(ours - theirs).max() / height)
    fps_engine, fps_peers = frames / t_engine, frames / t_peers
    ratio = fps_engine / fps_peers
    tgt_index = _canonical_index(tgt)
    errors = {method: segment_errors(source, src_index, pose, tgt_index)
              for method, pose in (("engine", ours), ("peers", theirs))}
    print(f"clip: generated walk, {frames} frames @ 120 fps; target: demo character")
    print(f"engine: {fps_engine:,.0f} frames/s ({t_engine:.3f} s)")
    print(f"peers (constraints + nla.bake visual keying): {fps_peers:,.0f} frames/s "
          f"({t_peers:.3f} s)")
    print(f"segment direction error against the source, deg mean / p95 over "
          f"{len(sample)} frames:")
    for seg in errors["engine"]:
        cells = "   ".join(f"{m} {errors[m][seg].mean():5.2f} / "
                           f"{np.percentile(errors[m][seg], 95):5.2f}" for m in errors)
        print(f"  {seg:<11} {cells}")
    print(f"read: this reader {t_parser:.3f} s, Blender's importer {t_importer:.3f} s "
          f"({t_importer / t_parser:.1f}x)")
    print(f"panel retarget: {len(ticks)} ticks, the longest holds Blender for "
          f"{max(ticks):.3f} s (the importer's read alone, one stage: {t_importer:.3f} s)")
    mean = {k: float(v.mean()) for k, v in errors["engine"].items()}
    print(f"retarget speedup: {ratio:.1f}x read_speedup: {t_importer / t_parser:.1f}x "
          f"longest_tick_s: {max(ticks):.3f} max_diff: {diff:.2e} "
          f"torso_deg: {mean.get('torso', float('nan')):.2f} "
          f"neck_deg: {mean.get('neck', float('nan')):.2f}")
    return 0
