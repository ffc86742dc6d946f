"""The panel as an animator first meets it, for the tutorial's pictures: the sidebar at
its default width, scrolled panel by panel from Retarget to Results, a screenshot each
(``tools/gui_check.py --only panel_shots``; ``docs/img/`` keeps them)."""

from __future__ import annotations

import bpy
from gui_harness import Check, Context, Steps, call, settle, ui_context

# One screen of the sidebar at 1600x1000 shows about two panels; a scroll step moves
# it some 40 px: this many screens of STEPS steps reach the Results panel from the top.
SCREENS = 7
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
