"""Bone-map presets: one TOML file per naming convention under ``rigs/presets``.

The files are data that ships beside the demo rigs; this loader is core so that
the bone-map matchers (core) can read them without importing anything of ``rigs``.

A preset file has ``[meta] name, description`` (optional ``priority``, used to
break ties between presets that fit an armature equally well) and a ``[bones]``
table ``canonical = "bone name"``. A value may also be a list of alternative
names; :func:`load_preset` takes the first, auto-mapping the first one present.

No bpy: plain data plus :mod:`tomllib`.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

from ..rig.humanoid import NAMES
from .bone_map import BoneMap, BoneMapError, check_canonical

# addon/core/bonemap/presets.py -> <package>/rigs/presets (the same layout in the extension zip)
PRESET_DIR = Path(__file__).resolve().parents[3] / "rigs" / "presets"


@dataclass(frozen=True)
class Preset:
    """One naming convention: canonical joint -> alternative bone names."""

    name: str
    description: str
    bones: dict[str, tuple[str, ...]]
    priority: int = 0
    path: Path | None = None


def _parse(path: Path) -> Preset:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise BoneMapError(f"preset {path.name}: not valid TOML ({exc})") from exc
    meta = data.get("meta", {})
    table = data.get("bones")
    if not isinstance(table, dict) or not table:
        raise BoneMapError(f"preset {path.name}: needs a non-empty [bones] table")
    check_canonical(table, where=f"preset {path.name}")
    bones: dict[str, tuple[str, ...]] = {}
    for key, value in table.items():
        alts = (value,) if isinstance(value, str) else tuple(value)
        if not alts or not all(isinstance(a, str) and a for a in alts):
            raise BoneMapError(
                f"preset {path.name}: {key} must be a bone name or a list of bone names")
        bones[key] = alts
    order = {n: i for i, n in enumerate(NAMES)}
    bones = dict(sorted(bones.items(), key=lambda kv: order[kv[0]]))
    return Preset(
        name=str(meta.get("name", path.stem)),
        description=str(meta.get("description", "")),
        bones=bones,
        priority=int(meta.get("priority", 0)),
        path=path,
    )


# path -> ((mtime_ns, size), parsed preset): a file is parsed again only when it
# changes, and a file added to or removed from the folder is seen on the next call.
_parsed: dict[Path, tuple[tuple[int, int], Preset]] = {}


def _all() -> dict[str, Preset]:
    out: dict[str, Preset] = {}
    seen = set()
    for path in sorted(PRESET_DIR.glob("*.toml")):
        try:
            st = path.stat()
        except FileNotFoundError:  # removed since the listing
            continue
        stamp = (st.st_mtime_ns, st.st_size)
        hit = _parsed.get(path)
        if hit is None or hit[0] != stamp:
            hit = _parsed[path] = (stamp, _parse(path))
        seen.add(path)
        out[hit[1].name] = hit[1]
    for gone in _parsed.keys() - seen:
        del _parsed[gone]
    return out


def list_presets() -> list[str]:
    """Names of the packaged presets, sorted."""
    return sorted(_all())


def all_presets() -> list[Preset]:
    """Every packaged preset, sorted by name."""
    presets = _all()
    return [presets[n] for n in sorted(presets)]


def get_preset(name: str) -> Preset:
    """The preset called ``name`` (raises BoneMapError listing the valid names)."""
    try:
        return _all()[name]
    except KeyError:
        raise BoneMapError(
            f"unknown preset {name!r}; available: {', '.join(list_presets())}") from None


def load_preset(name: str) -> BoneMap:
    """A BoneMap of the preset's first-choice names (confidence 1, source preset:<name>)."""
    preset = get_preset(name)
    bm = BoneMap(preset=preset.name)
    for canon, alts in preset.bones.items():
        bm.set(canon, alts[0], confidence=1.0, source=f"preset:{preset.name}")
    return bm
