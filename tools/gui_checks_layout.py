"""The panel as an animator first meets it, for the tutorial's pictures: the sidebar at
its default width, scrolled panel by panel from Retarget to Results, a screenshot each
(``tools/gui_check.py --only panel_shots``; ``docs/img/`` keeps them)."""

from __future__ import annotations

import bpy
from gui_harness import Check, Context, Steps, call, settle, ui_context

# One screen of the sidebar at 1600x1000 shows about two panels; a scroll step moves
# it some 40 px: this many screens of STEPS steps reach the Results panel from the top.
SCREENS = 8
STEPS = 16


def check_panel_shots(ctx: Context, check: Check) -> Steps:
    """Fill the panel as after a first Detect Bone Map (a character picked, a clip
    read), then screenshot each screenful of the sidebar from the top."""
    s = bpy.context.scene.painted_skin_retarget
    if ctx.armature is not None and s.source_path:
        call(bpy.ops.painted_skin.detect_map)
    region = ui_context()["region"]
    check.details["sidebar_px"] = region.width
    for _ in range(SCREENS * STEPS):  # back to the top
        call(bpy.ops.view2d.scroll_up)
    yield from settle(check, 1.0)
    for k in range(SCREENS):
        ctx.screens.take(f"panel_{k}")
        yield from settle(check, 0.8)
        for _ in range(STEPS):
            call(bpy.ops.view2d.scroll_down)
        yield from settle(check, 0.5)


def check_preview_keeps_the_editors(ctx: Context, check: Check) -> Steps:
    """Preview Pass opens an Image Editor beside the sidebar's area, never in place of
    another editor (it turned the Properties editor into one), and fits the image."""
    scene = bpy.context.scene
    if scene.camera is None:
        call(bpy.ops.painted_skin.add_camera)
    screen = ui_context()["screen"]
    before = sorted(a.type for a in screen.areas)
    check.details["areas_before"] = before
    result = call(bpy.ops.painted_skin.preview_pass)
    check.details["preview"] = sorted(result)
    yield from settle(check, 1.0)
    after = sorted(a.type for a in screen.areas)
    check.details["areas_after"] = after
    lost = [t for t in set(before) if after.count(t) < before.count(t) and t != "IMAGE_EDITOR"]
    check.expect(not lost, f"Preview Pass replaced the {lost} area(s)")
    editors = [a for a in screen.areas if a.type == "IMAGE_EDITOR"]
    if check.expect(editors, "no Image Editor shows the preview"):
        area = editors[0]
        region = next(r for r in area.regions if r.type == "WINDOW")
        img, zoom = area.spaces.active.image, area.spaces.active.zoom
        shown = (img.size[0] * zoom[0], img.size[1] * zoom[1]) if img else (0, 0)
        check.details["shown_px"], check.details["region_px"] = shown, (region.width,
                                                                         region.height)
        check.expect(img is not None and shown[0] <= region.width + 1
                     and shown[1] <= region.height + 1,
                     f"the preview does not fit its view: {shown} in {region.width}x"
                     f"{region.height}")
    ctx.screens.take("preview_pass")
    yield from settle(check, 0.5)
