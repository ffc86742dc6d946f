"""Stage 1 of :func:`~.auto_map`, and preset maps: naming conventions scored
against an armature.

Every preset (:mod:`.presets`) is matched by how many of its names the armature has,
exactly or after normalisation (namespaces such as ``mixamorig:`` / ``Armature|``,
prefixes ``DEF-``/``ORG-``/``Bip01``, case and separators ignored); the one that best
fits the hierarchy wins if it covers the core joints.

Pure Python, no bpy.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..rig.humanoid import CORE, JOINT_BY_NAME
from ..rig.skeleton import Skeleton
from .bone_map import BoneMap
from .names import bare_name, normalize_name
from .tree import BoneTree, hierarchy_stats

# alternative names -> (bone index, quality: 2 exact, 1 but for namespace/case, 0 normalised)
Finder = Callable[[tuple[str, ...]], tuple[int, int] | None]
_CONFIDENCE = (0.9, 0.95, 1.0)  # by quality


def preset_finder(skel: Skeleton) -> Finder:
    """A lookup of a preset joint's alternative names among ``skel``'s bones."""
    names = skel.names
    exact = {n: i for i, n in enumerate(names)}
    lower: dict[str, list[int]] = {}
    norm: dict[str, list[int]] = {}
    for i, n in enumerate(names):
        lower.setdefault(bare_name(n), []).append(i)
        norm.setdefault(normalize_name(n), []).append(i)

    def find(alts: tuple[str, ...]) -> tuple[int, int] | None:
        """(bone, quality): 2 exact, 1 same but for namespace/case, 0 normalised."""
        for a in alts:
            if a in exact:
                return exact[a], 2
        for table, key, quality in ((lower, bare_name, 1), (norm, normalize_name, 0)):
            for a in alts:
                hits = table.get(key(a), [])
                if len(hits) == 1:
                    return hits[0], quality
        return None

    return find


def match_preset(find: Finder, preset: Any) -> dict[str, tuple[int, int]]:
    """canonical -> (bone, quality) for each joint of ``preset`` found, each bone once."""
    found: dict[str, tuple[int, int]] = {}
    for canon, alts in preset.bones.items():
        hit = find(alts)
        if hit is not None and hit[0] not in {f[0] for f in found.values()}:
            found[canon] = hit
    return found


def preset_map(preset: Any, names: list[str], found: Mapping[str, tuple[int, int]]) -> BoneMap:
    """The BoneMap of what :func:`match_preset` found (confidence by match quality)."""
    bm = BoneMap(preset=preset.name)
    for canon, (i, quality) in found.items():
        bm.set(canon, names[i], _CONFIDENCE[quality], f"preset:{preset.name}")
    return bm


def best_preset(tree: BoneTree, presets: list[Any]) -> BoneMap | None:
    """The map of the preset fitting ``tree`` best, or None if none covers the core."""
    find = preset_finder(tree.skel)
    best: tuple[Any, ...] | None = None
    for preset in presets:
        found = match_preset(find, preset)
        if not all(c in found for c in CORE):
            continue
        idx = {c: f[0] for c, f in found.items()}
        violations, gaps = hierarchy_stats(tree, idx)
        quality = sum(f[1] for f in found.values())
        # Body joints first: a preset that matches many fingers but skips a spine
        # bone (Mixamo names on a CMU rig) must lose to one that maps the body.
        body = sum(1 for c in found if JOINT_BY_NAME[c].group not in ("finger", "twist"))
        score = (-violations, body, -gaps, len(found), quality,
                 len(found) / len(preset.bones), preset.priority)
        if best is None or score > best[0]:
            best = (score, preset, found)
    if best is None:
        return None
    _, preset, found = best
    return preset_map(preset, tree.skel.names, found)
