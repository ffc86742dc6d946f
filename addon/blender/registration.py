"""Register the add-on's classes in dependency order (props, operators, panels)."""

from __future__ import annotations

import bpy

from . import operators, panel, passes_ui, props, restyle


def register() -> None:
    props.register()
    for cls in operators.CLASSES + panel.CLASSES:
        bpy.utils.register_class(cls)
    passes_ui.register()
    restyle.register()


def unregister() -> None:
    restyle.unregister()
    passes_ui.unregister()
    for cls in reversed(operators.CLASSES + panel.CLASSES):
        bpy.utils.unregister_class(cls)
    props.unregister()
