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
  axis conversion ``C`` maps (x, y, z) to (x, -z, y). The bones are the importer's
  (:mod:`.rest`: its tails, its roll-0 axes), so ``skeleton.forward_kinematics``
  reproduces the importer's pose matrices, rotations included, not only its heads.
- File frame ``k`` (0-based) is Blender frame ``1 + k`` (``Motion.frame_start``).
"""

from __future__ import annotations

import numpy as np

from ..rig.skeleton import Motion, Skeleton, compose, forward_kinematics
from .clip import (  # noqa: F401 - the public names, importable from here
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
from .read import parse_bvh, parse_bvh_header_fps, read_bvh_header, validate_bvh  # noqa: F401
from .rest import bone_axes, importer_rest
from .write import format_bvh, make_clip, write_bvh, write_bvh_clip  # noqa: F401

# --------------------------------------------------------------------------- conversion

def bvh_basis(clip: BvhClip, scale: float = 0.01) -> tuple[Skeleton, np.ndarray]:
    """Skeleton and basis matrices (F, n, 4, 4) as Blender's importer makes them: its
    rest bones (:mod:`.rest`: heads, tails and roll-0 axes ``E`` in BVH axes, then
    turned by ``C``), and each joint's local rotation seen from its bone,
    ``E.T @ R @ E``."""
    c = AXIS_CONVERSION
    heads, tails = importer_rest(clip, scale)
    axes = bone_axes(heads, tails)
    skel = Skeleton(list(clip.names), clip.parents.copy(), compose(c @ axes, heads @ c.T),
                    tails @ c.T)
    axes_t = axes.swapaxes(-1, -2)
    rot = axes_t @ clip.local_rotations() @ axes
    # Basis location lives in the bone's rest frame: the BVH-axis delta between the
    # position channels and the OFFSET they replace, turned into the bone's axes.
    loc = np.zeros((clip.num_frames, clip.num_joints, 3))
    moving = [j for j in range(clip.num_joints) if clip.has_position(j)]
    if moving:
        delta = (clip.local_translations()[:, moving] - clip.offsets[moving]) * scale
        loc[:, moving] = np.einsum("jab,fjb->fja", axes_t[moving], delta)
    return skel, compose(rot, loc)


def bvh_to_skeleton_motion(clip: BvhClip, scale: float = 0.01) -> tuple[Skeleton, Motion]:
    """Convert to Blender's Z-up space like ``import_anim.bvh(global_scale=scale,
    axis_forward='-Z', axis_up='Y', rotate_mode='NATIVE')``: the same rest bones and
    pose matrices, in double precision where the importer keys float32 Euler curves."""
    skel, basis = bvh_basis(clip, scale)
    return skel, Motion(forward_kinematics(skel, basis), fps=clip.fps, frame_start=1)


