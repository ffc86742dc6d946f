"""Register a module's Blender classes and the Scene settings that point at them."""

from __future__ import annotations

import bpy


def register_classes(classes: tuple, **scene_settings: type) -> None:
    """Register ``classes`` in order, then ``Scene.<name>`` PointerProperties."""
    for cls in classes:
        bpy.utils.register_class(cls)
    for name, group in scene_settings.items():
        setattr(bpy.types.Scene, name, bpy.props.PointerProperty(type=group))


def unregister_classes(classes: tuple, *scene_settings: str) -> None:
    """Undo :func:`register_classes` (settings first, classes in reverse)."""
    for name in scene_settings:
        delattr(bpy.types.Scene, name)
    for cls in reversed(classes):
        bpy.utils.unregister_class(cls)


class SidebarPanel:
    """Where every Painted Skin panel sits: the 3D Viewport's sidebar (N), its own tab.
    A mixin: ``class PS_PT_x(SidebarPanel, bpy.types.Panel)``."""

    bl_space_type = "VIEW_3D"
    bl_region_type = "UI"
    bl_category = "Painted Skin"
