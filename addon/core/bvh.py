"""BVH reading, validation and writing (pure Python + numpy, no bpy).

Conventions, chosen to match Blender's own importer (``io_anim_bvh``) exactly:

- A joint's local rotation is built from its rotation channels in the order the
  file lists them: ``Zrotation Xrotation Yrotation`` means ``R = Rz @ Rx @ Ry``
  acting on column vectors (intrinsic rotations in listed order).
- A joint without position channels sits at ``parent + W_parent @ OFFSET``; a
  joint with position channels replaces its OFFSET by them (missing position
  components count as 0). For the root this means its world position is the
  position channels alone: the root OFFSET only places the rest pose.
- :func:`bvh_to_skeleton_motion` converts BVH (Y-up, usually cm) into Blender
  (Z-up, metres) like ``import_anim.bvh(axis_forward='-Z', axis_up='Y')``: the
  axis conversion ``C`` maps (x, y, z) to (x, -z, y). Every bone's rest rotation
  is ``C`` and its basis rotation is the file's local rotation, so
  ``skeleton.forward_kinematics`` reproduces the importer's bone heads.
- File frame ``k`` (0-based) is Blender frame ``1 + k`` (``Motion.frame_start``).
"""

from __future__ import annotations

import numpy as np

from .bvh_clip import (  # noqa: F401 - the public names, importable from here
    AXIS_CONVERSION,
    CHANNEL_NAMES,
    MAX_FRAME_TIME,
    MAX_FRAMES,
    MAX_JOINTS,
    MAX_VALUE,
    MIN_FRAME_TIME,
    BvhClip,
    BvhError,
    channel_matrices,
    forward_kinematics_bvh,
    matrices_to_channels,
)
from .bvh_read import parse_bvh, parse_bvh_header_fps, read_bvh_header, validate_bvh  # noqa: F401
from .bvh_write import format_bvh, make_clip, write_bvh, write_bvh_clip  # noqa: F401
from .skeleton import Motion, Skeleton, compose, forward_kinematics

# --------------------------------------------------------------------------- conversion

def bvh_basis(clip: BvhClip, scale: float = 0.01) -> tuple[Skeleton, np.ndarray]:
    """Skeleton (rest rotation ``C`` on every bone) and basis matrices (F, n, 4, 4)."""
    c = AXIS_CONVERSION
    heads = clip.rest_positions() * scale
    rest = compose(np.broadcast_to(c, (clip.num_joints, 3, 3)), heads @ c.T)
    skel = Skeleton(list(clip.names), clip.parents.copy(), rest, _tails(clip, scale) @ c.T)
    # Basis location lives in the bone's rest frame (rotation C): the BVH-axis delta
    # between the position channels and the OFFSET they replace.
    loc = np.zeros((clip.num_frames, clip.num_joints, 3))
    moving = [j for j in range(clip.num_joints) if clip.has_position(j)]
    if moving:
        trans = clip.local_translations()
        loc[:, moving] = (trans[:, moving] - clip.offsets[moving]) * scale
    return skel, compose(clip.local_rotations(), loc)


def bvh_to_skeleton_motion(clip: BvhClip, scale: float = 0.01) -> tuple[Skeleton, Motion]:
    """Convert to Blender's Z-up space like ``import_anim.bvh(global_scale=scale,
    axis_forward='-Z', axis_up='Y')``; world bone heads match the importer's."""
    skel, basis = bvh_basis(clip, scale)
    return skel, Motion(forward_kinematics(skel, basis), fps=clip.fps, frame_start=1)


def _tails(clip: BvhClip, scale: float) -> np.ndarray:
    """Rest tails (BVH axes, scaled) chosen like Blender's importer: End Site, else the
    only child's head, else the mean of the children's heads; never zero length."""
    heads = clip.rest_positions() * scale
    tails = heads.copy()
    kids: list[list[int]] = [[] for _ in range(clip.num_joints)]
    for j, p in enumerate(clip.parents):
        if p >= 0:
            kids[p].append(j)
    for j in range(clip.num_joints):
        if j in clip.end_sites:
            tails[j] = heads[j] + clip.end_sites[j] * scale
        elif kids[j]:
            tails[j] = heads[kids[j]].mean(axis=0)
    lengths = np.linalg.norm(clip.offsets, axis=-1) * abs(scale)
    typical = float(lengths[lengths > 0].mean()) if np.any(lengths > 0) else abs(scale)
    short = np.linalg.norm(tails - heads, axis=-1) < 1e-3 * typical
    tails[short, 1] += 0.25 * typical
    return tails


