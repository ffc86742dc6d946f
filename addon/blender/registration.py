"""Register the add-on's classes in dependency order (props, operators, panel)."""

from __future__ import annotations

import bpy

from . import operators, panel, props


def register() -> None:
    props.register()
    for cls in operators.CLASSES + panel.CLASSES:
        bpy.utils.register_class(cls)


def unregister() -> None:
    for cls in reversed(operators.CLASSES + panel.CLASSES):
        bpy.utils.unregister_class(cls)
    props.unregister()
