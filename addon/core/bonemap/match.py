"""The bone-map searches: :func:`auto_map` (presets, then names, then topology) and
:func:`resolve_map` (a map, a map file or a preset name, checked against a rig).

Pure Python + numpy, no bpy.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..rig.humanoid import CORE
from ..rig.skeleton import Skeleton
from .bone_map import BoneMap
from .by_name import by_name
from .by_preset import best_preset, match_preset, preset_finder, preset_map
from .by_topology import by_topology
from .presets import all_presets, get_preset
from .tree import BoneTree, check_hierarchy


def auto_map(skel: Skeleton, presets: Iterable[Any] | None = None) -> BoneMap:
    """Guess the canonical joints of ``skel``: presets, then names, then topology."""
    if presets is None:
        presets = all_presets()
    tree = BoneTree(skel)
    bm = best_preset(tree, list(presets))
    if bm is not None:
        _fill_from_names(tree, bm)
    else:
        bm = BoneMap()
        by_name(tree, bm)
        missing = [c for c in CORE if c not in bm.bones]
        if missing:
            by_topology(tree, bm)
    check_hierarchy(tree, bm)
    bm.refresh(skel)
    if bm.missing_core:
        bm.ambiguous.append(
            "no bone found for core joint(s) " + ", ".join(bm.missing_core)
            + "; map them by hand (is this a humanoid?)")
    return bm.sorted()


def _fill_from_names(tree: BoneTree, bm: BoneMap) -> None:
    """Add joints the chosen preset lacks (often fingers) from the name stage."""
    named = BoneMap()
    by_name(tree, named)
    used = set(bm.bones.values())
    for canon, bone in named.bones.items():
        if canon not in bm.bones and bone not in used:
            bm.set(canon, bone, named.confidence.get(canon, 0.8), "name")
            used.add(bone)


def resolve_map(spec: str | os.PathLike[str] | BoneMap, skel: Skeleton) -> BoneMap:
    """A BoneMap for ``skel`` from a BoneMap, a map file path or a preset name.

    Preset names resolve against the armature: each joint takes the first of its
    alternative names present (namespaces/case/prefixes ignored); joints whose bones
    are absent are left out and reported. Maps and files must name existing bones.
    """
    if isinstance(spec, BoneMap):
        spec.validate(skel)
        return spec.refresh(skel)
    text = os.fspath(spec)
    if Path(text).suffix.lower() in (".toml", ".json") or os.sep in text or "/" in text:
        return BoneMap.load(text, skel)
    preset = get_preset(text)
    tree = BoneTree(skel)
    bm = preset_map(preset, skel.names, match_preset(preset_finder(skel), preset))
    check_hierarchy(tree, bm)
    bm.refresh(skel)
    if bm.missing_core:
        bm.ambiguous.append(
            f"preset {preset.name}: no bone for core joint(s) {', '.join(bm.missing_core)}")
    return bm.sorted()
