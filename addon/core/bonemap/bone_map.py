"""The bone map type: canonical joint -> armature bone, its checks and its files.

A :class:`BoneMap` is what the matchers produce and what users edit: saved as TOML
or JSON (atomically), loaded with one-line errors naming the fix, checked against
an armature before use.

Pure Python, no bpy.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..files.atomic import write_text_atomic
from ..rig.humanoid import CORE, JOINT_BY_NAME, NAMES
from ..rig.skeleton import Skeleton
from .names import closest_bone


class BoneMapError(ValueError):
    """A bone map that cannot be used; the message says what and how to fix it."""


def check_canonical(names: Iterable[str], where: str = "bone map") -> None:
    """Raise BoneMapError if any name is not a canonical joint of addon/core/rig/humanoid.py."""
    bad = [n for n in names if n not in JOINT_BY_NAME]
    if bad:
        hints = []
        for n in bad:
            close = difflib.get_close_matches(n, NAMES, n=1)
            hints.append(f"{n!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        raise BoneMapError(
            f"{where}: unknown canonical joint {', '.join(hints)}; keys must be names from "
            f"addon/core/rig/humanoid.py such as hips, leftUpperArm, rightIndexProximal")


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
        """A copy with entries in addon/core/rig/humanoid.py order."""
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
    lines = ["# Painted Skin bone map: canonical joint (addon/core/rig/humanoid.py) = "
             "armature bone."]
    for section, table in data.items():
        lines += ["", f"[{section}]"]
        lines += [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in table.items()]
    return "\n".join(lines) + "\n"
