"""Bone names: normalising them, reading their side and body part, the synonym tables.

What the name stage of :func:`~.auto_map` knows about how rigs name bones
(``mixamorig:LeftArm``, ``thigh_l``, ``upperleg.R``, ``Bip01 L Calf``...), kept apart
from the matchers so that the tables can grow without touching the search.

Pure Python, no bpy.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

_NAMESPACE = re.compile(r"^.*[:|]")
_PREFIX = re.compile(r"^(?:def|org|mch)[-_.]|^bip0*1[\s_]+", re.IGNORECASE)
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")


def strip_name(name: str) -> str:
    """Drop namespaces (``mixamorig:``, ``Armature|``) and rig prefixes (DEF-, Bip01)."""
    return _PREFIX.sub("", _NAMESPACE.sub("", name.strip()))


@lru_cache(maxsize=16384)  # pure; auto-mapping asks for every preset name per armature
def bare_name(name: str) -> str:
    """Lower case without the namespace: ``mixamorig:LeftArm`` -> ``leftarm``; the
    middle of the three preset match qualities (exact, bare, normalised)."""
    return _NAMESPACE.sub("", name.strip()).lower()


@lru_cache(maxsize=16384)
def normalize_name(name: str) -> str:
    """Lower-case, separator-free key: ``mixamorig1:Left_Arm`` -> ``leftarm``."""
    return re.sub(r"[^a-z0-9]", "", strip_name(name).lower())


_SIDES = {"left": "left", "l": "left", "lf": "left", "lft": "left",
          "right": "right", "r": "right", "rt": "right", "rgt": "right"}
# Words that may be glued to a lower-case side letter: "lhand", "rfingers".
_GLUE = ("hand", "thumb", "fingers", "finger", "index", "foot", "toe", "shoulder", "elbow",
         "wrist", "hip", "knee", "ankle", "collar", "clavicle", "arm", "forearm", "leg",
         "thigh", "shin", "calf", "upperarm", "uparm", "shldr", "mid", "middle", "ring",
         "pinky", "little")
_HELPER = {"ik", "pole", "target", "tgt", "ctrl", "ctl", "control", "leaf", "end", "nub",
           "site", "top", "tip", "mch", "wgt", "helper", "ikfk", "fk", "tweak", "socket",
           "prop", "weapon", "attach", "eye", "eyes", "jaw", "tongue", "breast", "vis"}
_HELPER_SUBTREE = {"ik", "pole", "target", "tgt", "ctrl", "ctl", "control", "mch", "wgt",
                   "prop", "weapon"}
FINGER_WORDS = {"thumb": "Thumb", "index": "Index", "pointer": "Index", "middle": "Middle",
                 "mid": "Middle", "ring": "Ring", "pinky": "Little", "pinkie": "Little",
                 "little": "Little", "small": "Little", "fingers": "Index"}
META_WORDS = {"metacarpal", "meta", "carpal", "mc", "palm"}
SEG_WORDS = {"proximal": 0, "intermediate": 1, "medial": 1, "middle": 1, "distal": 2}
_IGNORE = {"j", "bip", "jnt", "bone", "cc", "base", "bend", "b", "c", "def", "org", "sk",
           "bn", "mixamorig"}

# body-part key -> [(role, score)]: sided for bones that carry a side token
SIDED_SYNONYMS: dict[str, list[tuple[str, float]]] = {}
UNSIDED_SYNONYMS: dict[str, list[tuple[str, float]]] = {}


def _syn(table: dict[str, list[tuple[str, float]]], role: str, score: float,
         *keys: str) -> None:
    for k in keys:
        table.setdefault(k, []).append((role, score))


_syn(SIDED_SYNONYMS, "Shoulder", 0.95, "clavicle", "collar", "clav", "scapula", "shoulderbase")
_syn(SIDED_SYNONYMS, "Shoulder", 0.8, "shoulder")
_syn(SIDED_SYNONYMS, "UpperArm", 0.95, "upperarm", "uparm", "armupper", "shldr", "humerus")
_syn(SIDED_SYNONYMS, "UpperArm", 0.8, "arm")
_syn(SIDED_SYNONYMS, "UpperArm", 0.6, "shoulder")
_syn(SIDED_SYNONYMS, "LowerArm", 0.95, "forearm", "lowerarm", "loarm", "armlower", "radius", "ulna")
_syn(SIDED_SYNONYMS, "LowerArm", 0.85, "elbow")
_syn(SIDED_SYNONYMS, "Hand", 0.9, "wrist")
_syn(SIDED_SYNONYMS, "Hand", 0.85, "hand")
_syn(SIDED_SYNONYMS, "Hand", 0.4, "palm")
_syn(SIDED_SYNONYMS, "UpperLeg", 0.95, "upperleg", "upleg", "thigh", "legupper", "femur")
_syn(SIDED_SYNONYMS, "UpperLeg", 0.8, "hip")
_syn(SIDED_SYNONYMS, "UpperLeg", 0.5, "leg")
_syn(SIDED_SYNONYMS, "LowerLeg", 0.95, "lowerleg", "loleg", "shin", "calf", "leglower", "tibia")
_syn(SIDED_SYNONYMS, "LowerLeg", 0.85, "knee")
_syn(SIDED_SYNONYMS, "LowerLeg", 0.75, "leg")
_syn(SIDED_SYNONYMS, "Foot", 0.9, "foot", "ankle")
_syn(SIDED_SYNONYMS, "Toes", 0.95, "toe", "toes", "toebase", "ball")
_syn(SIDED_SYNONYMS, "Toes", 0.4, "foot")
_syn(UNSIDED_SYNONYMS, "hips", 0.95, "hips", "hip", "pelvis")
_syn(UNSIDED_SYNONYMS, "neck", 0.9, "neck", "lowerneck", "necklower", "neckbase")
_syn(UNSIDED_SYNONYMS, "neck", 0.6, "neckupper", "upperneck")
_syn(UNSIDED_SYNONYMS, "head", 0.95, "head", "skull")
TWISTABLE = ("UpperArm", "LowerArm", "UpperLeg", "LowerLeg")
ARM_ROLES = ("Shoulder", "UpperArm", "LowerArm", "Hand")
LEG_ROLES = ("UpperLeg", "LowerLeg", "Foot", "Toes")


@dataclass
class ParsedName:
    """A bone name read as side + body-part words + number, with helper flags."""

    side: str | None
    key: str  # joined body-part words
    words: list[str]
    number: int | None
    helper: bool
    helper_subtree: bool


def parse_name(name: str) -> ParsedName:
    """Split ``name`` into tokens (camel case, digits, a side letter glued to a body
    part as in ``lhand``) and read its side, words and first number."""
    raw = [t.lower() for t in _CAMEL.findall(strip_name(name))]
    toks: list[str] = []
    for t in raw:
        if len(t) > 2 and t[0] in "lr" and t[1:] in _GLUE:
            toks += [t[0], t[1:]]
        else:
            toks.append(t)
    side = None
    words: list[str] = []
    number = None
    for t in toks:
        if side is None and t in _SIDES:
            side = _SIDES[t]
        elif t.isdigit():
            if number is None:
                number = int(t)
        elif t not in _IGNORE:
            words.append(t)
    helper = any(w in _HELPER for w in words) or bool(re.search(r"(end|nub|leaf)$", "".join(words)))
    return ParsedName(side, "".join(words), words, number, helper,
                      any(w in _HELPER_SUBTREE for w in words))


# --------------------------------------------------------------------------- lookups


def side_of_canonical(canonical: str | None) -> str | None:
    """"left" / "right" of a canonical joint name (``leftUpperLeg``), else None."""
    if canonical:
        for side in ("left", "right"):
            if canonical.startswith(side):
                return side
    return None


def bone_side(name: str) -> str | None:
    """"left", "right" or None, from a bone name in any common convention:
    ``LeftArm``, ``thigh_l``, ``upperleg.R``, ``UpperArmL``, ``lThigh``, ``L_Foot``."""
    return parse_name(name).side


def closest_bone(name: str, names: Iterable[str], canonical: str | None = None) -> str | None:
    """The bone of ``names`` a mistyped ``name`` most likely meant, or None.

    Case-insensitive (``thigh_L_typo`` is closest to ``thigh_l``, not ``thigh_r``)
    and side-aware: the side comes from the canonical joint the name is mapped to
    (``leftUpperLeg``), else from the name itself; bones of the other side are never
    suggested when a bone of that side is close enough.
    """
    names = list(names)
    if not names:
        return None
    side = side_of_canonical(canonical) or bone_side(name)
    pool = names
    if side is not None:
        same = [n for n in names if bone_side(n) == side]
        pool = same or names
    key = name.lower()
    matcher = difflib.SequenceMatcher()
    matcher.set_seq2(key)
    best: tuple[float, int, str] | None = None
    for k, n in enumerate(pool):
        matcher.set_seq1(n.lower())
        if matcher.real_quick_ratio() < 0.6 or matcher.quick_ratio() < 0.6:
            continue
        r = matcher.ratio()
        if r >= 0.6 and (best is None or r > best[0]):
            best = (r, k, n)
    if best is None and pool is not names:  # nothing close on that side: any side
        return closest_bone(name, [n for n in names if n not in pool])
    return best[2] if best else None
