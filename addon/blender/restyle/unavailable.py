"""The Restyle section when its network layer cannot load (pyzmq missing or broken).

Retarget and Passes never touch the network, so they must keep working; the Restyle
panel then stays in its place and says what failed and how to fix it, instead of the
whole add-on failing to register.
"""

from __future__ import annotations

import sys

import bpy

from ..classes import SidebarPanel

REASON = {"text": ""}


def fix_text() -> str:
    """How to get pyzmq into this Blender."""
    plat = {"win32": "windows_x64", "darwin": "macos_arm64 or macos_x64"}.get(
        sys.platform, "linux_x64")
    family = "blender5.1-" if bpy.app.version >= (5, 1, 0) else ""
    return (f"install the Painted Skin zip built for this system and Blender "
            f"{bpy.app.version[0]}.{bpy.app.version[1]} (painted_skin-<version>-{family}"
            f"{plat}.zip), which bundles pyzmq, or install pyzmq into Blender's Python")


class PS_PT_restyle(SidebarPanel, bpy.types.Panel):
    bl_idname = "PS_PT_restyle"
    bl_label = "Restyle"
    bl_order = 4

    def draw(self, context):
        col = self.layout.column()
        col.label(text="Restyle is unavailable:", icon="ERROR")
        col.label(text=REASON["text"])
        col.label(text="Fix: " + fix_text())


def register(reason: str) -> None:
    REASON["text"] = reason
    print(f"Painted Skin: Restyle disabled: {reason}. Fix: {fix_text()}", file=sys.stderr)
    bpy.utils.register_class(PS_PT_restyle)


def unregister() -> None:
    bpy.utils.unregister_class(PS_PT_restyle)
