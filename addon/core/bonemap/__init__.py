"""Bone maps: which armature bone plays which canonical humanoid joint.

:func:`auto_map` guesses a map for any :class:`Skeleton` in three stages:

1. presets (:mod:`.by_preset`): every convention under ``rigs/presets`` is
   scored by how many of its names the armature has (exactly, or after normalisation:
   namespaces such as ``mixamorig:`` / ``Armature|``, prefixes ``DEF-``/``ORG-``/
   ``Bip01``, case and separators are ignored); the best one wins if it covers the
   core joints;
2. names (:mod:`.by_name`): tokens (side + body part + number) against a
   synonym table (:mod:`.names`), with the hierarchy deciding conflicts
   (CMU-3dsMax ``LeftShoulder`` is an upper arm because a ``LeftCollar`` sits above
   it; spine segments are spread along the hips-to-neck path);
3. topology/geometry (:mod:`.by_topology`) for whatever is still missing:
   legs are the two chains reaching the floor, the head the highest chain end, arms
   the widest branches off the spine; sides come from rest positions and the facing
   of the feet.

The map type and its files are in :mod:`.bone_map`; this module is the public
face: import from here.

Pure Python + numpy, no bpy.
"""

from __future__ import annotations

from .bone_map import BoneMap, BoneMapError, check_canonical
from .match import auto_map, resolve_map
from .names import ARM_ROLES, LEG_ROLES, bone_side, closest_bone, normalize_name, strip_name

__all__ = ["ARM_ROLES", "LEG_ROLES", "BoneMap", "BoneMapError", "auto_map", "bone_side",
           "check_canonical", "closest_bone", "normalize_name", "resolve_map", "strip_name"]
