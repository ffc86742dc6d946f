"""The canonical humanoid, kept importable here: it lives in :mod:`addon.core.humanoid`."""

from __future__ import annotations

from ..addon.core.humanoid import (
    AIM_CHILD,
    CORE,
    FINGER_SEGMENTS,
    FINGERS,
    JOINT_BY_NAME,
    JOINTS,
    NAMES,
    REFERENCE_DIRECTIONS,
    SIDES,
    Joint,
    canonical_parent,
    mirror,
)

__all__ = ["AIM_CHILD", "CORE", "FINGERS", "FINGER_SEGMENTS", "JOINTS", "JOINT_BY_NAME", "NAMES",
           "REFERENCE_DIRECTIONS", "SIDES", "Joint", "canonical_parent", "mirror"]
