"""Every setting an animator sees in the Painted Skin panels explains itself: each
property of every registered Painted Skin PropertyGroup (and the add-on preferences)
has a tooltip (``description=``), in the real ``bpy`` module."""

from __future__ import annotations

import bpy
import pytest

# Blender's own properties of every PropertyGroup / AddonPreferences, not ours to describe.
BUILTIN = {"rna_type", "name", "bl_idname"}


def _groups() -> list[type]:
    """The add-on's PropertyGroup and AddonPreferences classes (imported, not registered)."""
    from painted_skin.addon.blender import registration  # noqa: F401 (classes)
    from painted_skin.addon.blender.engine import settings  # noqa: F401 (classes)
    from painted_skin.addon.blender.restyle import ui as restyle_ui  # noqa: F401 (classes)

    out: list[type] = []
    stack = [bpy.types.PropertyGroup, bpy.types.AddonPreferences]
    while stack:
        for sub in stack.pop().__subclasses__():
            stack.append(sub)
            if sub.__module__.startswith("painted_skin.") and sub not in out:
                out.append(sub)
    return sorted(out, key=lambda c: c.__name__)


GROUPS = _groups()


@pytest.fixture(scope="module")
def registered():
    import painted_skin

    bpy.ops.wm.read_factory_settings(use_empty=True)
    painted_skin.register()
    try:
        yield bpy
    finally:
        painted_skin.unregister()


def _undescribed(cls: type) -> list[str]:
    return [p.identifier for p in cls.bl_rna.properties
            if p.identifier not in BUILTIN and not p.description.strip()]


@pytest.mark.parametrize("group", GROUPS, ids=[c.__name__ for c in GROUPS])
def test_every_setting_has_a_tooltip(registered, group) -> None:
    assert group.is_registered, f"{group.__name__} is not registered by painted_skin.register()"
    assert not _undescribed(group), (f"{group.__name__}: properties without a description= "
                                     f"(tooltip): {', '.join(_undescribed(group))}")


def test_the_walk_covers_every_group_the_scene_settings_reach(registered) -> None:
    """A group nested in the Scene settings (a collection's rows) is checked too."""
    names = {c.bl_rna.identifier for c in GROUPS}
    seen: set[str] = set()
    todo = [p.fixed_type for p in bpy.types.Scene.bl_rna.properties
            if p.identifier.startswith("painted_skin_")]
    assert len(todo) >= 4  # retarget, passes, skin, restyle
    while todo:
        struct = todo.pop()
        if struct.identifier in seen:
            continue
        seen.add(struct.identifier)
        todo += [p.fixed_type for p in struct.properties
                 if p.type in ("POINTER", "COLLECTION") and p.fixed_type is not None
                 and p.fixed_type.identifier.startswith("PS_")]
    assert seen <= names, f"groups the walk misses: {sorted(seen - names)}"


def test_a_missing_tooltip_is_caught(registered) -> None:
    """The check itself: a group with an undescribed property fails it."""
    class PS_TooltipProbe(bpy.types.PropertyGroup):
        said: bpy.props.IntProperty(name="Said", description="Explained")
        unsaid: bpy.props.IntProperty(name="Unsaid")

    bpy.utils.register_class(PS_TooltipProbe)
    try:
        assert _undescribed(PS_TooltipProbe) == ["unsaid"]
    finally:
        bpy.utils.unregister_class(PS_TooltipProbe)
