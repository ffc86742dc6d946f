"""Register a module's Blender classes and the Scene settings that point at them."""

from __future__ import annotations

import textwrap

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


def draw_running(layout, factor: float, text: str, cancel: str) -> None:
    """A running job in a sidebar panel: a progress bar that holds ``text`` across the
    panel's whole width (a label sharing a row with a button is cut to a few characters
    at the sidebar's default width), and the ``cancel`` operator under it."""
    col = layout.column(align=True)
    col.progress(factor=min(max(float(factor), 0.0), 1.0), type="BAR", text=text)
    col.operator(cancel, text="Cancel", icon="CANCEL")


def wrapped_label(layout, context, text: str, icon: str = "NONE") -> None:
    """``text`` over as many lines as the region's width needs: Blender's labels do not
    wrap, they cut the end off (a report's warnings, a batch's failed clips)."""
    region = getattr(context, "region", None)
    width = (region.width if region is not None else 0) or 300
    scale = (context.preferences.system.ui_scale if context.preferences else 0) or 1.0
    chars = max(16, int(width / (7.0 * scale)) - 4)
    lines = [w for para in text.splitlines() for w in (textwrap.wrap(para, chars) or [""])]
    for k, line in enumerate(lines or [""]):
        layout.label(text=line, icon=icon if k == 0 else "BLANK1")


def labelled(layout, data, prop: str, text: str | None = None, **kw) -> None:
    """``data.prop`` under its own label: beside its field a label gets a third of the
    sidebar's default width (292 px) and is cut to a few letters ("Charact…"), and a path
    or object name loses its end; above it both are whole. ``text``: the label (default:
    the property's name, as Blender would show it)."""
    name = text if text is not None else data.bl_rna.properties[prop].name
    col = layout.column(align=True)
    col.label(text=name)
    col.prop(data, prop, text="", **kw)


class _PollReason:
    """A stand-in for an operator class while its poll runs: keeps what the poll says."""

    message: str | None = None

    @classmethod
    def poll_message_set(cls, message: str, *_args) -> None:
        cls.message = message


def greyed_out_because(op_cls: type, context) -> str | None:
    """Why ``op_cls``'s button is greyed out (its poll's own message), or None when it
    can run: shown in the panel under the button, where a tooltip needs a hover."""
    poll = getattr(op_cls, "poll", None)
    if poll is None:
        return None
    _PollReason.message = None
    ok = poll.__func__(_PollReason, context)
    return None if ok else (_PollReason.message or "not available yet")


def draw_hint(layout, context, op_cls: type) -> None:
    """The reason ``op_cls`` cannot run yet, as a wrapped line (nothing when it can)."""
    why = greyed_out_because(op_cls, context)
    if why:
        wrapped_label(layout, context, why, icon="INFO")
