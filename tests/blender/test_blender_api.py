"""The manifest's ``blender_version_min`` is the truth: every version-sensitive Blender API
the add-on calls is listed here with the release that introduced it, each is checked to
exist in the bpy this suite runs (5.0.1), and the manifest may not claim an older Blender
than the newest of them. A new ``anim_utils`` helper or a renamed property must be added
here to pass."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MANIFEST = tomllib.loads((REPO / "blender_manifest.toml").read_text())

# (what, how to find it in bpy, first Blender release that has it), from Blender's
# Python API change logs (docs.blender.org/api/<v>/change_log.html) and release notes.
APIS = [
    ("Action.slots (slotted actions)", ("type_prop", "Action", "slots"), (4, 4)),
    ("Action.layers", ("type_prop", "Action", "layers"), (4, 4)),
    ("AnimData.action_slot", ("type_prop", "AnimData", "action_slot"), (4, 4)),
    ("SequenceEditor.strips (was .sequences)", ("type_prop", "SequenceEditor", "strips"),
     (4, 4)),
    ("ImageFormatSettings.media_type", ("type_prop", "ImageFormatSettings", "media_type"),
     (5, 0)),
    ("FCurve.convert_to_keyframes", ("type_func", "FCurve", "convert_to_keyframes"), (2, 80)),
    ("anim_utils.action_get_channelbag_for_slot", ("anim_utils",
                                                   "action_get_channelbag_for_slot"), (4, 4)),
    ("anim_utils.action_get_first_suitable_slot", ("anim_utils",
                                                   "action_get_first_suitable_slot"), (4, 4)),
    ("anim_utils.action_ensure_channelbag_for_slot", ("anim_utils",
                                                      "action_ensure_channelbag_for_slot"),
     (5, 0)),
    ("bpy.ops.extensions.package_install_files", ("op", "extensions",
                                                  "package_install_files"), (4, 2)),
    # 5.0 keeps add-on (RNA-defined) properties apart from custom ones: ID.keys() no
    # longer lists them; the farm's --from-scene reads the saved panel settings there
    ("ID.bl_system_properties_get", ("type_func", "ID", "bl_system_properties_get"), (5, 0)),
]


def _exists(how: tuple[str, ...]) -> bool:
    import bpy
    from bpy_extras import anim_utils

    kind = how[0]
    if kind == "type_prop":
        return how[2] in getattr(bpy.types, how[1]).bl_rna.properties
    if kind == "type_func":
        return how[2] in getattr(bpy.types, how[1]).bl_rna.functions
    if kind == "anim_utils":
        return callable(getattr(anim_utils, how[1], None))
    if kind == "op":
        return how[2] in dir(getattr(bpy.ops, how[1]))
    raise AssertionError(kind)


@pytest.mark.parametrize("what,how,first", APIS, ids=[a[0] for a in APIS])
def test_api_exists_in_the_tested_blender(what, how, first):
    assert _exists(how), f"{what} is missing from bpy 5.0.1"


def test_manifest_minimum_is_the_newest_api_used():
    minimum = tuple(int(v) for v in MANIFEST["blender_version_min"].split("."))
    newest = max(first for _, _, first in APIS)
    assert minimum[:2] >= newest, \
        f"blender_version_min {MANIFEST['blender_version_min']} is older than {newest}"
    assert minimum[:2] == newest, "blender_version_min claims less than it could: lower it"


def _shipped_sources() -> list[Path]:
    return [p for sub in ("addon", "rigs") for p in (REPO / sub).rglob("*.py")] \
        + [REPO / "cli.py", REPO / "api.py"]


def test_every_anim_utils_helper_the_code_calls_is_listed():
    listed = {how[1] for _, how, _ in APIS if how[0] == "anim_utils"}
    used = set()
    for path in _shipped_sources():
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and node.value.id == "anim_utils":
                used.add(node.attr)
    assert used, "no anim_utils call found: the scan is broken"
    assert sorted(used - listed) == []


def test_the_removed_legacy_action_api_is_not_used():
    """Blender 5.0 removed ``Action.fcurves``/``Action.groups``: F-curves are reached
    through channelbags. ``.fcurves`` may only be read from a channelbag variable."""
    offenders = []
    for path in _shipped_sources():
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Attribute) and node.attr in ("fcurves", "groups") \
                    and isinstance(node.value, ast.Attribute) and node.value.attr == "action":
                offenders.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert offenders == []
