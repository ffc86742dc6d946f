"""Bone maps: which armature bone plays which canonical humanoid joint.

:func:`auto_map` guesses a map for any :class:`Skeleton` in three stages:

1. presets: every convention under ``rigs/presets`` is scored by how many of its
   names the armature has (exactly, or after normalisation: namespaces such as
   ``mixamorig:`` / ``Armature|``, prefixes ``DEF-``/``ORG-``/``Bip01``, case and
   separators are ignored); the best one wins if it covers the core joints;
2. names: tokens (side + body part + number) against a synonym table, with the
   hierarchy deciding conflicts (CMU-3dsMax ``LeftShoulder`` is an upper arm
   because a ``LeftCollar`` sits above it; spine segments are spread along the
   hips-to-neck path);
3. topology/geometry for whatever is still missing: legs are the two chains
   reaching the floor, the head the highest chain end, arms the widest branches
   off the spine; sides come from rest positions and the facing of the feet.

Pure Python + numpy, no bpy.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from ...rigs.humanoid import CORE, FINGER_SEGMENTS, FINGERS, JOINT_BY_NAME, NAMES
from .atomic import write_text_atomic
from .skeleton import Skeleton


class BoneMapError(ValueError):
    """A bone map that cannot be used; the message says what and how to fix it."""


# --------------------------------------------------------------------------- BoneMap


def check_canonical(names: Iterable[str], where: str = "bone map") -> None:
    """Raise BoneMapError if any name is not a canonical joint of rigs/humanoid.py."""
    bad = [n for n in names if n not in JOINT_BY_NAME]
    if bad:
        hints = []
        for n in bad:
            close = difflib.get_close_matches(n, NAMES, n=1)
            hints.append(f"{n!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        raise BoneMapError(
            f"{where}: unknown canonical joint {', '.join(hints)}; keys must be names from "
            f"rigs/humanoid.py such as hips, leftUpperArm, rightIndexProximal")


def _side_of_canonical(canonical: str | None) -> str | None:
    if canonical:
        for side in ("left", "right"):
            if canonical.startswith(side):
                return side
    return None


def bone_side(name: str) -> str | None:
    """"left", "right" or None, from a bone name in any common convention:
    ``LeftArm``, ``thigh_l``, ``upperleg.R``, ``UpperArmL``, ``lThigh``, ``L_Foot``."""
    return _parse(name).side


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
    side = _side_of_canonical(canonical) or bone_side(name)
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


@dataclass
class BoneMap:
    """canonical joint -> bone name, with per-entry confidence (0..1) and source.

    ``source`` is "preset:<name>", "name", "topology" or "user". ``unmapped`` lists
    the armature's bones that play no canonical joint, ``ambiguous`` notes choices
    worth a look, ``missing_core`` the core joints nothing was found for.
    """

    bones: dict[str, str] = field(default_factory=dict)
    confidence: dict[str, float] = field(default_factory=dict)
    source: dict[str, str] = field(default_factory=dict)
    unmapped: list[str] = field(default_factory=list)
    ambiguous: list[str] = field(default_factory=list)
    missing_core: list[str] = field(default_factory=list)
    preset: str | None = None

    def __getitem__(self, canonical: str) -> str:
        return self.bones[canonical]

    def __contains__(self, canonical: object) -> bool:
        return canonical in self.bones

    def __len__(self) -> int:
        return len(self.bones)

    def get(self, canonical: str, default: str | None = None) -> str | None:
        return self.bones.get(canonical, default)

    def set(self, canonical: str, bone: str, confidence: float = 1.0,
            source: str = "user") -> None:
        """Map ``canonical`` to ``bone`` (a user edit by default)."""
        check_canonical([canonical])
        if not isinstance(bone, str) or not bone:
            raise BoneMapError(f"{canonical}: bone name must be a non-empty string")
        self.bones[canonical] = bone
        self.confidence[canonical] = float(confidence)
        self.source[canonical] = source

    def remove(self, canonical: str) -> None:
        for d in (self.bones, self.confidence, self.source):
            d.pop(canonical, None)

    def inverse(self) -> dict[str, str]:
        """bone name -> canonical joint."""
        return {b: c for c, b in self.bones.items()}

    def sorted(self) -> BoneMap:
        """A copy with entries in rigs/humanoid.py order."""
        order = {n: i for i, n in enumerate(NAMES)}
        keys = sorted(self.bones, key=order.__getitem__)
        return BoneMap(
            bones={k: self.bones[k] for k in keys},
            confidence={k: self.confidence.get(k, 1.0) for k in keys},
            source={k: self.source.get(k, "user") for k in keys},
            unmapped=list(self.unmapped), ambiguous=list(self.ambiguous),
            missing_core=list(self.missing_core), preset=self.preset)

    # -- checks against an armature

    def validate(self, skel: Skeleton) -> None:
        """Raise BoneMapError if a mapped bone is missing or used twice."""
        check_canonical(self.bones)
        missing = [(c, b) for c, b in self.bones.items() if b not in skel]
        if missing:
            lines = []
            for c, b in missing:
                close = closest_bone(b, skel.names, canonical=c)
                lines.append(f"{c} = {b!r}" + (f" (closest bone: {close!r})" if close else ""))
            raise BoneMapError(
                "bones not in the armature: " + "; ".join(lines)
                + ". Fix the names or delete those lines, then reload the map.")
        seen: dict[str, str] = {}
        for c, b in self.bones.items():
            if b in seen:
                raise BoneMapError(
                    f"bone {b!r} is mapped to both {seen[b]} and {c}; a bone can play one "
                    f"joint only, remove one of the two lines")
            seen[b] = c

    def refresh(self, skel: Skeleton) -> BoneMap:
        """Recompute ``unmapped`` and ``missing_core`` for ``skel``; returns self."""
        used = set(self.bones.values())
        self.unmapped = [n for n in skel.names if n not in used]
        self.missing_core = [c for c in CORE if c not in self.bones]
        return self

    # -- (de)serialisation

    def to_dict(self) -> dict[str, Any]:
        m = self.sorted()
        meta: dict[str, Any] = {"format": "painted-skin-bonemap", "version": 1}
        if m.preset:
            meta["preset"] = m.preset
        return {
            "meta": meta,
            "bones": dict(m.bones),
            "confidence": {k: round(v, 4) for k, v in m.confidence.items()},
            "source": dict(m.source),
            "report": {"unmapped": list(m.unmapped), "ambiguous": list(m.ambiguous),
                       "missing_core": list(m.missing_core)},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "bone map") -> BoneMap:
        """Build from :meth:`to_dict` output (only ``bones`` is required)."""
        if not isinstance(data, Mapping):
            raise BoneMapError(f"{where}: expected a table/object at the top level")
        table = data.get("bones")
        if not isinstance(table, Mapping):
            raise BoneMapError(
                f"{where}: no [bones] table; write one line per joint under [bones], "
                f'e.g. leftUpperArm = "mixamorig:LeftArm"')
        check_canonical(table, where=where)
        bm = cls(preset=(data.get("meta") or {}).get("preset"))
        conf = data.get("confidence") or {}
        src = data.get("source") or {}
        for canon, bone in table.items():
            if not isinstance(bone, str) or not bone:
                raise BoneMapError(
                    f"{where}: {canon} must be one bone name in quotes, got {bone!r}")
            c = conf.get(canon, 1.0)
            if not isinstance(c, int | float) or not 0.0 <= float(c) <= 1.0:
                raise BoneMapError(f"{where}: confidence of {canon} must be a number in 0..1")
            bm.set(canon, bone, float(c), str(src.get(canon, "user")))
        report = data.get("report") or {}
        for key in ("unmapped", "ambiguous", "missing_core"):
            value = report.get(key, [])
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise BoneMapError(f"{where}: report.{key} must be a list of strings")
            setattr(bm, key, list(value))
        return bm

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write TOML (``.toml``) or JSON (``.json``) atomically."""
        path = Path(path)
        suffix = path.suffix.lower()
        if suffix == ".json":
            text = json.dumps(self.to_dict(), indent=2, ensure_ascii=False) + "\n"
        elif suffix == ".toml":
            text = _to_toml(self.to_dict())
        else:
            raise BoneMapError(f"{path.name}: bone maps are saved as .toml or .json")
        write_text_atomic(path, text)

    @classmethod
    def load(cls, path: str | os.PathLike[str], skel: Skeleton | None = None) -> BoneMap:
        """Read a map saved by :meth:`save` (or a preset file); check it against ``skel``."""
        path = Path(path)
        suffix = path.suffix.lower()
        try:
            raw = path.read_bytes()
        except OSError as exc:
            raise BoneMapError(f"cannot read bone map {path}: {exc.strerror}") from exc
        try:
            if suffix == ".json":
                data = json.loads(raw.decode("utf-8"))
            elif suffix == ".toml":
                import tomllib

                data = tomllib.loads(raw.decode("utf-8"))
            else:
                raise BoneMapError(f"{path.name}: bone maps are .toml or .json files")
        except (ValueError, UnicodeDecodeError) as exc:
            if isinstance(exc, BoneMapError):
                raise
            kind = "JSON" if suffix == ".json" else "TOML"
            raise BoneMapError(f"{path.name}: not valid {kind}: {exc}") from exc
        bm = cls.from_dict(data, where=path.name)
        if skel is not None:
            try:
                bm.validate(skel)
            except BoneMapError as exc:
                raise BoneMapError(f"{path.name}: {exc}") from None
            bm.refresh(skel)
        return bm


def _toml_str(s: str) -> str:
    out = []
    for ch in s:
        if ch == "\\":
            out.append("\\\\")
        elif ch == '"':
            out.append('\\"')
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _toml_key(k: str) -> str:
    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else _toml_str(k)


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, str):
        return _toml_str(v)
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise TypeError(f"cannot write {type(v).__name__} to TOML")


def _to_toml(data: dict[str, dict[str, Any]]) -> str:
    lines = ["# Painted Skin bone map: canonical joint (rigs/humanoid.py) = armature bone."]
    for section, table in data.items():
        lines += ["", f"[{section}]"]
        lines += [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in table.items()]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- names

_NAMESPACE = re.compile(r"^.*[:|]")
_PREFIX = re.compile(r"^(?:def|org|mch)[-_.]|^bip0*1[\s_]+", re.IGNORECASE)
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")


def strip_name(name: str) -> str:
    """Drop namespaces (``mixamorig:``, ``Armature|``) and rig prefixes (DEF-, Bip01)."""
    return _PREFIX.sub("", _NAMESPACE.sub("", name.strip()))


@lru_cache(maxsize=16384)  # pure; auto-mapping asks for every preset name per armature
def _bare(name: str) -> str:
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
_FINGER_WORDS = {"thumb": "Thumb", "index": "Index", "pointer": "Index", "middle": "Middle",
                 "mid": "Middle", "ring": "Ring", "pinky": "Little", "pinkie": "Little",
                 "little": "Little", "small": "Little", "fingers": "Index"}
_META_WORDS = {"metacarpal", "meta", "carpal", "mc", "palm"}
_SEG_WORDS = {"proximal": 0, "intermediate": 1, "medial": 1, "middle": 1, "distal": 2}
_IGNORE = {"j", "bip", "jnt", "bone", "cc", "base", "bend", "b", "c", "def", "org", "sk",
           "bn", "mixamorig"}

# body-part key -> [(role, score)], for bones that carry a side token
_SIDED: dict[str, list[tuple[str, float]]] = {}
_UNSIDED: dict[str, list[tuple[str, float]]] = {}


def _syn(table: dict[str, list[tuple[str, float]]], role: str, score: float,
         *keys: str) -> None:
    for k in keys:
        table.setdefault(k, []).append((role, score))


_syn(_SIDED, "Shoulder", 0.95, "clavicle", "collar", "clav", "scapula", "shoulderbase")
_syn(_SIDED, "Shoulder", 0.8, "shoulder")
_syn(_SIDED, "UpperArm", 0.95, "upperarm", "uparm", "armupper", "shldr", "humerus")
_syn(_SIDED, "UpperArm", 0.8, "arm")
_syn(_SIDED, "UpperArm", 0.6, "shoulder")
_syn(_SIDED, "LowerArm", 0.95, "forearm", "lowerarm", "loarm", "armlower", "radius", "ulna")
_syn(_SIDED, "LowerArm", 0.85, "elbow")
_syn(_SIDED, "Hand", 0.9, "wrist")
_syn(_SIDED, "Hand", 0.85, "hand")
_syn(_SIDED, "Hand", 0.4, "palm")
_syn(_SIDED, "UpperLeg", 0.95, "upperleg", "upleg", "thigh", "legupper", "femur")
_syn(_SIDED, "UpperLeg", 0.8, "hip")
_syn(_SIDED, "UpperLeg", 0.5, "leg")
_syn(_SIDED, "LowerLeg", 0.95, "lowerleg", "loleg", "shin", "calf", "leglower", "tibia")
_syn(_SIDED, "LowerLeg", 0.85, "knee")
_syn(_SIDED, "LowerLeg", 0.75, "leg")
_syn(_SIDED, "Foot", 0.9, "foot", "ankle")
_syn(_SIDED, "Toes", 0.95, "toe", "toes", "toebase", "ball")
_syn(_SIDED, "Toes", 0.4, "foot")
_syn(_UNSIDED, "hips", 0.95, "hips", "hip", "pelvis")
_syn(_UNSIDED, "neck", 0.9, "neck", "lowerneck", "necklower", "neckbase")
_syn(_UNSIDED, "neck", 0.6, "neckupper", "upperneck")
_syn(_UNSIDED, "head", 0.95, "head", "skull")
_TWISTABLE = ("UpperArm", "LowerArm", "UpperLeg", "LowerLeg")
ARM_ROLES = ("Shoulder", "UpperArm", "LowerArm", "Hand")
LEG_ROLES = ("UpperLeg", "LowerLeg", "Foot", "Toes")


@dataclass
class _Parsed:
    side: str | None
    key: str  # joined body-part words
    words: list[str]
    number: int | None
    helper: bool
    helper_subtree: bool


def _parse(name: str) -> _Parsed:
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
    return _Parsed(side, "".join(words), words, number, helper,
                   any(w in _HELPER_SUBTREE for w in words))


# --------------------------------------------------------------------------- tree helpers


class _Tree:
    """Parent/child/depth queries over a Skeleton, with helper bones flagged."""

    def __init__(self, skel: Skeleton) -> None:
        self.skel = skel
        self.n = len(skel)
        self.parents = [int(p) for p in skel.parents]
        self.children: list[list[int]] = [[] for _ in range(self.n)]
        for i, p in enumerate(self.parents):
            if p >= 0:
                self.children[p].append(i)
        self.depth = [0] * self.n
        for i, p in enumerate(self.parents):
            self.depth[i] = self.depth[p] + 1 if p >= 0 else 0
        self.parsed = [_parse(n) for n in skel.names]
        self.excluded = [False] * self.n
        for i, p in enumerate(self.parents):
            self.excluded[i] = self.parsed[i].helper_subtree or (p >= 0 and self.excluded[p])
        self.heads = skel.world_heads()
        self.tails = skel.world_tails()

    def usable(self, i: int) -> bool:
        return not self.excluded[i] and not self.parsed[i].helper

    def ancestors(self, i: int) -> list[int]:
        out = []
        p = self.parents[i]
        while p >= 0:
            out.append(p)
            p = self.parents[p]
        return out

    def is_ancestor(self, a: int, b: int) -> bool:
        """True when ``a`` is a strict ancestor of ``b``."""
        p = self.parents[b]
        while p >= 0:
            if p == a:
                return True
            p = self.parents[p]
        return False

    def lca(self, nodes: Iterable[int]) -> int | None:
        nodes = list(nodes)
        if not nodes:
            return None
        common = [nodes[0], *self.ancestors(nodes[0])]
        for n in nodes[1:]:
            chain = {n, *self.ancestors(n)}
            common = [c for c in common if c in chain]
        return common[0] if common else None

    def path_between(self, top: int, bottom: int) -> list[int]:
        """Bones strictly between ``top`` and its descendant ``bottom``, top first."""
        out = []
        p = self.parents[bottom]
        while p >= 0 and p != top:
            out.append(p)
            p = self.parents[p]
        return out[::-1] if p == top else []


# --------------------------------------------------------------------------- auto_map


def auto_map(skel: Skeleton, presets: Iterable[Any] | None = None) -> BoneMap:
    """Guess the canonical joints of ``skel``: presets, then names, then topology."""
    if presets is None:
        from ...rigs.presets import all_presets

        presets = all_presets()
    tree = _Tree(skel)
    bm = _best_preset(tree, list(presets))
    if bm is not None:
        _fill_from_names(tree, bm)
    else:
        bm = BoneMap()
        _by_name(tree, bm)
        missing = [c for c in CORE if c not in bm.bones]
        if missing:
            _by_topology(tree, bm)
    _check_hierarchy(tree, bm)
    bm.refresh(skel)
    if bm.missing_core:
        bm.ambiguous.append(
            "no bone found for core joint(s) " + ", ".join(bm.missing_core)
            + "; map them by hand (is this a humanoid?)")
    return bm.sorted()


def _fill_from_names(tree: _Tree, bm: BoneMap) -> None:
    """Add joints the chosen preset lacks (often fingers) from the name stage."""
    named = BoneMap()
    _by_name(tree, named)
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
    from ...rigs.presets import get_preset

    preset = get_preset(text)
    tree = _Tree(skel)
    found = _match_preset(tree, _preset_finder(skel), preset)
    bm = BoneMap(preset=preset.name)
    for canon, (i, quality) in found.items():
        bm.set(canon, skel.names[i], (0.9, 0.95, 1.0)[quality], f"preset:{preset.name}")
    _check_hierarchy(tree, bm)
    bm.refresh(skel)
    if bm.missing_core:
        bm.ambiguous.append(
            f"preset {preset.name}: no bone for core joint(s) {', '.join(bm.missing_core)}")
    return bm.sorted()


def _preset_finder(skel: Skeleton):
    names = skel.names
    exact = {n: i for i, n in enumerate(names)}
    lower: dict[str, list[int]] = {}
    norm: dict[str, list[int]] = {}
    for i, n in enumerate(names):
        lower.setdefault(_bare(n), []).append(i)
        norm.setdefault(normalize_name(n), []).append(i)

    def find(alts: tuple[str, ...]) -> tuple[int, int] | None:
        """(bone, quality): 2 exact, 1 same but for namespace/case, 0 normalised."""
        for a in alts:
            if a in exact:
                return exact[a], 2
        for table, key, quality in ((lower, _bare, 1), (norm, normalize_name, 0)):
            for a in alts:
                hits = table.get(key(a), [])
                if len(hits) == 1:
                    return hits[0], quality
        return None

    return find


def _match_preset(tree: _Tree, find, preset: Any) -> dict[str, tuple[int, int]]:
    found: dict[str, tuple[int, int]] = {}
    for canon, alts in preset.bones.items():
        hit = find(alts)
        if hit is not None and hit[0] not in {f[0] for f in found.values()}:
            found[canon] = hit
    return found


def _best_preset(tree: _Tree, presets: list[Any]) -> BoneMap | None:
    names = tree.skel.names
    find = _preset_finder(tree.skel)
    best: tuple[Any, ...] | None = None
    for preset in presets:
        found = _match_preset(tree, find, preset)
        if not all(c in found for c in CORE):
            continue
        idx = {c: f[0] for c, f in found.items()}
        violations, gaps = _hierarchy_stats(tree, idx)
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
    bm = BoneMap(preset=preset.name)
    for canon, (i, quality) in found.items():
        bm.set(canon, names[i], (0.9, 0.95, 1.0)[quality], f"preset:{preset.name}")
    return bm


def _hierarchy_stats(tree: _Tree, idx: Mapping[str, int]) -> tuple[int, int]:
    """(joints not below their mapped canonical parent, bones skipped in between)."""
    violations = gaps = 0
    present = set(idx)
    for canon, i in idx.items():
        parent = _canon_parent(canon, present)
        if parent is None:
            continue
        p = idx[parent]
        if not tree.is_ancestor(p, i):
            violations += 1
        else:
            gaps += tree.depth[i] - tree.depth[p] - 1
    return violations, gaps


def _canon_parent(name: str, present: set[str]) -> str | None:
    parent = JOINT_BY_NAME[name].parent
    while parent is not None and parent not in present:
        parent = JOINT_BY_NAME[parent].parent
    return parent


def _check_hierarchy(tree: _Tree, bm: BoneMap) -> None:
    idx = {c: tree.skel.index(b) for c, b in bm.bones.items() if b in tree.skel}
    present = set(idx)
    for canon, i in idx.items():
        parent = _canon_parent(canon, present)
        if parent is not None and not tree.is_ancestor(idx[parent], i):
            bm.ambiguous.append(
                f"{canon} {bm.bones[canon]!r} is not below {parent} {bm.bones[parent]!r} "
                f"(IK or helper hierarchy?)")


# -- stage 2: names


def _by_name(tree: _Tree, bm: BoneMap) -> None:
    used: set[int] = set()
    names = tree.skel.names

    def put(canon: str, i: int, conf: float, src: str = "name") -> None:
        bm.set(canon, names[i], round(min(conf, 1.0), 3), src)
        used.add(i)

    sided: dict[tuple[str, str], list[tuple[int, float]]] = {}
    unsided: dict[str, list[tuple[int, float]]] = {}
    twist: dict[tuple[str, str], list[int]] = {}
    fingers: dict[tuple[str, str], list[int]] = {}
    for i, p in enumerate(tree.parsed):
        if not tree.usable(i):
            continue
        words = set(p.words)
        finger = next((_FINGER_WORDS[w] for w in p.words if w in _FINGER_WORDS), None)
        if finger is None and "finger" in words and p.number is not None and 1 <= p.number <= 5 \
                and words & (set(_SEG_WORDS) | _META_WORDS):
            finger = FINGERS[p.number - 1]  # Rokoko style LeftFinger2Medial
        if p.side and finger:
            if words & _META_WORDS and finger != "Thumb":
                continue
            fingers.setdefault((p.side, finger), []).append(i)
            continue
        if "twist" in words or "roll" in words:
            base = p.key.replace("twist", "").replace("roll", "")
            roles = [r for r, _ in _SIDED.get(base, []) if r in _TWISTABLE]
            if p.side and roles:
                twist.setdefault((p.side, roles[0]), []).append(i)
            continue
        if p.side:
            for role, score in _SIDED.get(p.key, []):
                sided.setdefault((p.side, role), []).append((i, score))
        else:
            for role, score in _UNSIDED.get(p.key, []):
                unsided.setdefault(role, []).append((i, score))

    # limbs, per side: best hierarchy-consistent assignment of the chain roles
    for side in ("left", "right"):
        for roles in (ARM_ROLES, LEG_ROLES):
            cands = {r: _rank(tree, sided.get((side, r), [])) for r in roles}
            choice, notes = _assign_chain(tree, roles, cands)
            for role, (i, score) in choice.items():
                put(f"{side}{role}", i, score)
            bm.ambiguous += [f"{side}{n}" for n in notes]

    # hips: the named candidate above legs and head, else their common ancestor
    legs = [tree.skel.index(bm.bones[f"{s}UpperLeg"]) for s in ("left", "right")
            if f"{s}UpperLeg" in bm.bones]
    heads = sorted((i for i, _ in unsided.get("head", []) if i not in used),
                   key=lambda i: tree.depth[i])
    head = heads[0] if heads else None
    targets = legs + ([head] if head is not None else [])
    hips = None
    hip_cands = [i for i, _ in unsided.get("hips", []) if i not in used]
    ok = [i for i in hip_cands if all(t == i or tree.is_ancestor(i, t) for t in targets)]
    if ok:
        hips = max(ok, key=lambda i: tree.depth[i]) if targets else ok[0]
        put("hips", hips, 0.9)
    elif len(targets) >= 2:
        hips = tree.lca(targets)
        if hips is not None and hips not in targets and hips not in used:
            put("hips", hips, 0.6, "topology")
            if hip_cands:
                bm.ambiguous.append(
                    f"hips: {names[hip_cands[0]]!r} does not carry the legs; used their "
                    f"common parent {names[hips]!r}")
        else:
            hips = None
    if head is not None and (hips is None or tree.is_ancestor(hips, head)):
        put("head", head, 0.9)
    else:
        head = None

    # neck: the lowest neck-named bone between hips and head
    neck = None
    if head is not None:
        necks = [i for i, _ in unsided.get("neck", []) if i not in used
                 and tree.is_ancestor(i, head) and (hips is None or tree.is_ancestor(hips, i))]
        if necks:
            neck = min(necks, key=lambda i: tree.depth[i])
            put("neck", neck, 0.85)

    # spine segments spread along the hips -> neck/head path, up to where the arms branch
    if hips is not None and head is not None:
        top = neck if neck is not None else head
        path = [i for i in tree.path_between(hips, top) if i not in used]
        arm_roots = [tree.skel.index(bm.bones[f"{s}{r}"]) for s in ("left", "right")
                     for r in ("Shoulder", "UpperArm") if f"{s}{r}" in bm.bones]
        branch = tree.lca(arm_roots) if len(arm_roots) >= 2 else None
        if branch is not None and branch in path:
            above = path[path.index(branch) + 1:]
            path = path[: path.index(branch) + 1]
            if neck is None and len(above) == 1:
                put("neck", above[0], 0.6, "topology")
        for canon, i in _spread_spine(path).items():
            put(canon, i, 0.8)

    # twists: the lowest-numbered twist bone below its limb bone
    for (side, role), bones in twist.items():
        limb = bm.bones.get(f"{side}{role}")
        if limb is None:
            continue
        li = tree.skel.index(limb)
        below = [i for i in bones if i not in used and tree.is_ancestor(li, i)]
        if below:
            i = min(below, key=lambda i: (tree.parsed[i].number or 0, tree.depth[i]))
            put(f"{side}{role}Twist", i, 0.85)

    # fingers: order each finger's bones along its chain
    for (side, finger), bones in fingers.items():
        bones = sorted((i for i in bones if i not in used),
                       key=lambda i: (tree.depth[i], tree.parsed[i].number or 0))
        for seg, i in zip(FINGER_SEGMENTS[finger], bones, strict=False):
            put(f"{side}{finger}{seg}", i, 0.85)


def _rank(tree: _Tree, cands: list[tuple[int, float]]) -> list[tuple[int, float]]:
    """Best candidates first; among equal 'palm' siblings prefer the middle one."""
    if not cands:
        return []
    palms = [i for i, _ in cands if tree.parsed[i].key == "palm"]
    bonus: dict[int, float] = {}
    if len(palms) >= 3:
        palms.sort(key=lambda i: (tree.parsed[i].number or 0, i))
        bonus[palms[len(palms) // 2]] = 0.01
    out = [(i, s + bonus.get(i, 0.0) - 1e-4 * tree.depth[i]) for i, s in cands]
    out.sort(key=lambda t: -t[1])
    return out[:6]


def _assign_chain(tree: _Tree, roles: tuple[str, ...],
                  cands: dict[str, list[tuple[int, float]]]
                  ) -> tuple[dict[str, tuple[int, float]], list[str]]:
    """Pick one bone per role so that each lies below the previous one; max total score."""
    best: tuple[float, dict[str, tuple[int, float]]] = (-1e9, {})

    def rec(k: int, prev: int | None, total: float, chosen: dict[str, tuple[int, float]]):
        nonlocal best
        if k == len(roles):
            if total > best[0]:
                best = (total, dict(chosen))
            return
        role = roles[k]
        core = role not in ("Shoulder", "Toes")
        rec(k + 1, prev, total - (1.0 if core else 0.0), chosen)
        taken = {i for i, _ in chosen.values()}
        for i, score in cands[role]:
            if i in taken:
                continue
            penalty = 0.0
            if prev is not None and not tree.is_ancestor(prev, i):
                penalty = 0.6
            chosen[role] = (i, score)
            rec(k + 1, i, total + score - penalty, chosen)
            del chosen[role]

    rec(0, None, 0.0, {})
    choice = best[1]
    notes = []
    for role, (i, score) in choice.items():
        rivals = [j for j, s in cands[role] if j != i and abs(s - score) < 0.02
                  and j not in {c for c, _ in choice.values()}]
        if rivals:
            notes.append(f"{role}: chose {tree.skel.names[i]!r} over "
                         + ", ".join(repr(tree.skel.names[j]) for j in rivals))
    return choice, notes


def _spread_spine(path: list[int]) -> dict[str, int]:
    """spine / chest / upperChest over the bones between hips and neck."""
    n = len(path)
    if n == 0:
        return {}
    if n == 1:
        return {"spine": path[0]}
    if n == 2:
        return {"spine": path[0], "chest": path[1]}
    return {"spine": path[0], "chest": path[round((n - 1) / 2)], "upperChest": path[-1]}


# -- stage 3: topology and geometry


def _by_topology(tree: _Tree, bm: BoneMap) -> None:
    """Fill missing core joints from the shape of the tree and the rest positions."""
    skel = tree.skel
    ok = [i for i in range(tree.n) if not tree.excluded[i]
          and not (tree.parsed[i].helper and not tree.children[i])]
    if len(ok) < 5:
        return
    okset = set(ok)
    kids = {i: [c for c in tree.children[i] if c in okset] for i in ok}
    leaves = [i for i in ok if not kids[i]]
    heads, tails = tree.heads, tree.tails
    z = heads[:, 2]
    height = float(np.ptp(np.concatenate([heads[ok, 2], tails[ok, 2]]))) or 1.0
    zmin = float(min(heads[ok, 2].min(), tails[ok, 2].min()))
    low = [i for i in leaves if z[i] < zmin + 0.2 * height]
    top_leaf = max(leaves, key=lambda i: z[i])
    if len(low) < 2 or top_leaf in low:
        return
    # two feet: low leaves whose chains split where the spine leaves (not inside one
    # leg), splitting as deep as possible (not at a ground root), lowest, widest apart
    pairs = []
    for a in low:
        for b in low:
            if a >= b:
                continue
            split = tree.lca([a, b])
            if split is None or split != tree.lca([a, b, top_leaf]):
                continue
            pairs.append((tree.depth[split], -float(z[a] + z[b]),
                          float(np.linalg.norm(heads[a, :2] - heads[b, :2])), a, b))
    if not pairs:
        return
    *_, a, b = max(pairs)
    best = (a, b)
    hips = tree.lca([a, b])
    if hips is None:
        return
    legs = []
    for leaf in best:
        chain = [*tree.path_between(hips, leaf), leaf]
        legs.append(_segment(tree, chain, ("UpperLeg", "LowerLeg", "Foot", "Toes"), lead=0))
    # facing: toes point forward; left = up x forward
    fwd = np.zeros(3)
    for seg in legs:
        if "Foot" in seg:
            end = seg.get("Toes")
            tip = heads[end] if end is not None else tails[seg["Foot"]]
            fwd += tip - heads[seg["Foot"]]
    fwd[2] = 0.0
    lateral = heads[best[0]] - heads[best[1]]
    lateral[2] = 0.0
    perp = np.cross([0.0, 0.0, 1.0], lateral)
    if np.linalg.norm(perp) < 1e-9:
        perp = np.array([0.0, -1.0, 0.0])
    perp /= np.linalg.norm(perp)
    if abs(float(fwd @ perp)) < 1e-6 * height:
        facing = perp if perp[1] <= 0 else -perp  # undecidable: assume Blender's -Y
        bm.ambiguous.append("topology: facing undecided from the feet, assumed -Y")
    else:
        facing = perp if float(fwd @ perp) > 0 else -perp
    left_dir = np.cross([0.0, 0.0, 1.0], facing)
    origin = heads[hips]

    def side_of(i: int) -> str:
        return "left" if float((heads[i] - origin) @ left_dir) > 0 else "right"

    found: dict[str, int] = {"hips": hips}
    for leaf, seg in zip(best, legs, strict=True):
        s = side_of(leaf)
        for role, i in seg.items():
            found[f"{s}{role}"] = i
    # arms: the widest branches off the hips -> head path
    spine_path = [*tree.path_between(hips, top_leaf), top_leaf]
    on_path = set(spine_path)
    reach = {}
    for s in spine_path:
        for c in kids[s]:
            if c in on_path:
                continue
            sub = _subtree(kids, c)
            lat = (heads[sub] - origin) @ left_dir
            far = sub[int(np.argmax(np.abs(lat)))]
            reach.setdefault(side_of(far), []).append((float(np.abs(lat).max()), c, s))
    branch = None
    for side in ("left", "right"):
        if not reach.get(side):
            continue
        _, c, s = max(reach[side])
        chain = [c]
        while kids[chain[-1]]:
            nxt = max(kids[chain[-1]], key=lambda k: float(
                np.abs((heads[_subtree(kids, k)] - origin) @ left_dir).max()))
            if len(kids[chain[-1]]) >= 3:
                break  # a hand: fingers branch here
            chain.append(nxt)
        # the upper arm starts at the shoulder joint, well off the body's midline;
        # a clavicle starts near it
        wide = [k for k, i in enumerate(chain)
                if abs(float((heads[i] - origin) @ left_dir)) >= 0.06 * height]
        if wide and len(chain) - wide[0] >= 2:
            j = wide[0]
            seg = dict(zip(("UpperArm", "LowerArm", "Hand"), chain[j:j + 3], strict=False))
            if j >= 1:
                seg["Shoulder"] = chain[j - 1]
        else:
            seg = _segment(tree, chain, ("UpperArm", "LowerArm", "Hand"), lead=1)
        for role, i in seg.items():
            found[f"{side}{role}"] = i
        branch = s if branch is None or tree.is_ancestor(branch, s) else branch
    if branch is None:
        branch = spine_path[max(0, len(spine_path) - 3)]
    idx = spine_path.index(branch)
    found.update(_spread_spine(spine_path[:idx + 1]))
    above = spine_path[idx + 1:]
    if len(above) >= 2:
        # an end marker on top of the skull: the last step is much longer than the one before
        prev = heads[above[-3]] if len(above) >= 3 else heads[branch]
        last = float(np.linalg.norm(heads[above[-1]] - heads[above[-2]]))
        if last > 1.3 * float(np.linalg.norm(heads[above[-2]] - prev)):
            above = above[:-1]
    if above:
        found["head"] = above[-1]
        if len(above) >= 2:
            found["neck"] = above[0]
    taken = {skel.index(b) for b in bm.bones.values()}
    for canon, i in found.items():
        if canon in bm.bones or i in taken:
            continue
        taken.add(i)
        conf = 0.6 if canon in CORE else 0.5
        bm.set(canon, skel.names[i], conf, "topology")


def _subtree(kids: Mapping[int, list[int]], root: int) -> list[int]:
    out, stack = [], [root]
    while stack:
        i = stack.pop()
        out.append(i)
        stack.extend(kids.get(i, []))
    return out


def _segment(tree: _Tree, chain: list[int], roles: tuple[str, ...], lead: int) -> dict[str, int]:
    """Assign roles along a limb chain: the two longest consecutive bones are the
    upper and lower limb; those after them follow; with ``lead`` a bone before
    them is the shoulder/clavicle."""
    if len(chain) < 2:
        return {}
    heads, tails = tree.heads, tree.tails
    lengths = [float(np.linalg.norm(heads[chain[k + 1]] - heads[chain[k]]))
               for k in range(len(chain) - 1)]
    lengths.append(float(np.linalg.norm(tails[chain[-1]] - heads[chain[-1]])))
    j = max(range(len(chain) - 1), key=lambda k: lengths[k] + lengths[k + 1] - 1e-6 * k)
    out = {}
    for k, role in enumerate(roles):
        if j + k < len(chain):
            out[role] = chain[j + k]
    if lead and j >= 1:
        out["Shoulder"] = chain[j - 1]
    return out
