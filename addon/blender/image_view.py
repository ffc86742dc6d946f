"""Showing an image to the animator: in the screen's Image Editor, or in one opened beside
the area the button was pressed in (never in place of another editor: turning the
Properties editor into an Image Editor lost it), fitted to the view so the whole image
shows."""

from __future__ import annotations

import bpy


def image_editors(context) -> list[bpy.types.Area]:
    """The screen's Image Editors; with none, the area the button was pressed in (or the
    largest) is split and its new half becomes one. [] where there is no window
    (headless)."""
    screen = context.screen
    if getattr(context, "window", None) is None or screen is None:
        return []
    found = [a for a in screen.areas if a.type == "IMAGE_EDITOR"]
    if found:
        return found
    area = getattr(context, "area", None) or max(screen.areas, key=lambda a: a.width * a.height)
    before = set(screen.areas[:])
    with context.temp_override(area=area):
        bpy.ops.screen.area_split(direction="VERTICAL", factor=0.5)
    new = [a for a in screen.areas if a not in before]
    editor = new[0] if new else area
    editor.type = "IMAGE_EDITOR"
    return [editor]


def show_image(context, image: bpy.types.Image, fit: bool = True) -> bool:
    """``image`` in the Image Editors (made as :func:`image_editors` says), each fitted to
    its view; False where there is no window to show it in."""
    areas = image_editors(context)
    for area in areas:
        area.spaces.active.image = image
        region = next((r for r in area.regions if r.type == "WINDOW"), None)
        if fit and region is not None:
            with context.temp_override(area=area, region=region):
                bpy.ops.image.view_all(fit_view=True)
    return bool(areas)
