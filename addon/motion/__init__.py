"""Procedural humanoid motion written as real BVH files (numpy only, no bpy).

One generic ~1.75 m humanoid (canonical joint names, BVH space: Y-up, cm, facing
+Z, its left on +X, T-pose rest) is animated by :func:`canonical_motion`; the
same motion is then written in one of three naming/rest conventions:

- ``"cmu"``: CMU / cgspeed MotionBuilder-friendly names (Hips, LHipJoint,
  LeftUpLeg, ..., LowerBack, Spine, Spine1, Neck, Neck1, Head, LeftShoulder,
  LeftArm, ..., fingers LeftHandThumb1..3, LeftHandIndex1..3, ...), T-pose,
  channels ``Zrotation Yrotation Xrotation``, root OFFSET 0 (like CMU files).
- ``"mixamo"``: Mixamo names (mixamorig:Hips, mixamorig:Spine..Spine2, ...),
  T-pose, channels ``Zrotation Xrotation Yrotation``, root OFFSET at the rest
  hips height.
- ``"apose"``: Unreal Engine 4 mannequin names (pelvis, spine_01..03, neck_01,
  head, clavicle_l, upperarm_l, lowerarm_l, hand_l, thumb_01_l, index_01_l, ...,
  thigh_l, calf_l, foot_l, ball_l) with an A-pose rest (upper arms swung 45°
  down about the forward axis), channels ``Yrotation Xrotation Zrotation``,
  root OFFSET at the rest hips height.

Whatever the convention, the world joint positions are the same. Feet are
placed first (planted during stance) and the legs solved by two-bone IK, so
there is no foot skate unless ``slide_noise`` adds some on purpose.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ..core.bvh import BvhClip, make_clip, write_bvh_clip
from .gaits import RUN, WALK, build_jump, build_run, build_sit, build_walk, build_wave
from .pose import CanonicalMotion, rx, ry, rz
from .rom import build_rom
from .skeleton import (
    ANKLE_HEIGHT,
    CONVENTION_MAPS,
    CONVENTION_SPECS,
    CONVENTIONS,
    FLAT,
    HEEL,
    HEEL_VEC,
    HIPS_HEIGHT,
    KINDS,
    NAMES,
    OFFSETS,
    PARENTS,
    SHIN,
    SWING,
    THIGH,
    TOE,
    TOE_VEC,
    Convention,
    convention_layout,
)

_BUILDERS = {
    "walk": lambda t, fps, rng: build_walk(t, fps, rng),
    "turn": lambda t, fps, rng: build_walk(t, fps, rng, turn=True),
    "run": build_run,
    "jump": build_jump,
    "wave": build_wave,
    "sit": build_sit,
    "rom": build_rom,
}


def _slide(t: np.ndarray, amount_m: float, rng: np.random.Generator) -> np.ndarray:
    """Smooth horizontal drift (F, 3) in cm, peak about ``amount_m`` metres, zero at t=0."""
    out = np.zeros((len(t), 3))
    for axis in (0, 2):
        freqs = rng.uniform(0.15, 0.5, 3)
        phases = rng.uniform(0, 2 * np.pi, 3)
        wave = sum(np.sin(2 * np.pi * f * t + p) - np.sin(p) for f, p in zip(freqs, phases,
                                                                               strict=True))
        out[:, axis] = wave / 3.0
    peak = np.abs(out).max()
    return out * (100.0 * amount_m / peak) if peak > 0 else out


def canonical_motion(kind: str, frames: int = 120, fps: float = 30.0, seed: int = 0,
                     slide_noise: float = 0.0) -> CanonicalMotion:
    """The motion on the canonical T-pose skeleton (BVH space, cm).

    ``slide_noise``: peak horizontal root drift in metres added after the feet were
    planted, so the feet skate by that much (for foot-lock tests).
    """
    if kind not in _BUILDERS:
        raise ValueError(f"unknown motion kind {kind!r}; use one of {KINDS}")
    if frames < 1 or fps <= 0:
        raise ValueError("frames must be >= 1 and fps > 0")
    rng = np.random.default_rng([seed, KINDS.index(kind)])
    t = np.arange(frames) / float(fps)
    pose, _ = _BUILDERS[kind](t, fps, rng)
    root = pose.root.copy()
    if slide_noise:
        root += _slide(t, slide_noise, np.random.default_rng([seed, 99]))
    return CanonicalMotion(kind, root, pose.local, float(fps))


def foot_phases(kind: str, frames: int = 120, fps: float = 30.0,
                seed: int = 0) -> dict[str, np.ndarray]:
    """Contact phase of each foot per frame: SWING, HEEL (rocking on the heel point),
    FLAT (ankle still) or TOE (rolling over the toe joint, which stays still).

    Keys ``"left"``/``"right"``; ``slide_noise`` does not change them.
    """
    if kind not in _BUILDERS:
        raise ValueError(f"unknown motion kind {kind!r}; use one of {KINDS}")
    rng = np.random.default_rng([seed, KINDS.index(kind)])
    t = np.arange(frames) / float(fps)
    _, phases = _BUILDERS[kind](t, fps, rng)
    if phases is None:
        return {s: np.full(frames, FLAT) for s in ("left", "right")}
    return phases


# ----------------------------------------------------------------------------- output


def to_convention(motion: CanonicalMotion, convention: str = "cmu") -> BvhClip:
    """Write the canonical motion with a convention's names, rest pose and channels."""
    lay = convention_layout(convention)
    conv = CONVENTION_SPECS[convention]
    w_rot, _ = motion.world()
    w_conv = w_rot[:, lay.source] @ lay.swing.swapaxes(-1, -2)
    local = w_conv.copy()
    has = lay.parents >= 0
    local[:, has] = w_conv[:, lay.parents[has]].swapaxes(-1, -2) @ w_conv[:, has]
    return make_clip(lay.names, lay.parents, lay.offsets, conv.order, motion.root, local,
                     1.0 / motion.fps, lay.end_sites)


def generate(kind: str, frames: int = 120, fps: float = 30.0, convention: str = "cmu",
             seed: int = 0, slide_noise: float = 0.0) -> BvhClip:
    """A generated clip as a :class:`BvhClip` (Y-up, cm)."""
    return to_convention(canonical_motion(kind, frames, fps, seed, slide_noise), convention)


def write_clip(path: str | os.PathLike, kind: str, frames: int = 120, fps: float = 30.0,
               convention: str = "cmu", seed: int = 0, slide_noise: float = 0.0) -> Path:
    """Generate a clip and write it as a BVH file (atomically); returns the path."""
    return write_bvh_clip(path, generate(kind, frames, fps, convention, seed, slide_noise))


def write_demo_clips(folder: str | os.PathLike, frames: int = 120,
                     fps: float = 30.0) -> list[Path]:
    """Every kind in every convention: ``<folder>/<convention>_<kind>.bvh``."""
    folder = Path(folder)
    return [write_clip(folder / f"{conv}_{kind}.bvh", kind, frames, fps, conv)
            for conv in CONVENTIONS for kind in KINDS]


__all__ = [
    "ANKLE_HEIGHT", "CONVENTIONS", "CONVENTION_MAPS", "FLAT", "HEEL", "HEEL_VEC", "HIPS_HEIGHT",
    "KINDS", "NAMES", "OFFSETS", "PARENTS", "RUN", "SHIN", "SWING", "THIGH", "TOE", "TOE_VEC",
    "WALK", "BvhClip", "CanonicalMotion", "Convention", "canonical_motion", "foot_phases",
    "generate", "rx", "ry", "rz", "to_convention", "write_clip", "write_demo_clips",
]
