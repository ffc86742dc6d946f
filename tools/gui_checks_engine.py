"""Window checks of the Painted Skin render engine (run by ``gui_check.py``): the 3D
Viewport's Rendered mode paints the demo character through the local backend and draws
it, navigating while it paints keeps each redraw short, and F12 writes the painted frame.
"""

from __future__ import annotations

import importlib
import math
import tempfile
import time
from pathlib import Path

import bpy
from gui_harness import (
    Check,
    Context,
    Steps,
    call,
    redraw,
    settle,
    ui_context,
    wait_until,
)


def _view3d():
    ctx = ui_context()
    area = ctx["area"]
    region = next(r for r in area.regions if r.type == "WINDOW")
    return area, region, area.spaces.active


def _demo_shot(ctx: Context) -> Steps:
    """The demo character waving (the embedded model paints it), in the window's scene:
    ``demo.shot.build_demo_shot``'s steps, each in the new file's own window context."""
    pkg = ctx.addon.package
    character = importlib.import_module(f"{pkg}.demo.character")
    motion = importlib.import_module(f"{pkg}.addon.motion")
    api = importlib.import_module(f"{pkg}.addon.blender.retarget.api")
    bpy.ops.wm.read_homefile(use_empty=True, use_factory_startup=True)
    yield 0.5  # the new file's window draws
    with tempfile.TemporaryDirectory() as tmp, bpy.context.temp_override(**ui_context()):
        arm = character.build_demo_character()
        character.setup_demo_scene(arm)
        clip = Path(tmp) / "wave.bvh"
        motion.write_clip(clip, "wave", frames=24, fps=24.0, convention="cmu")
        api.retarget_clip(clip, arm)


def _local_backend(ctx: Context, check: Check) -> Steps:
    """The local backend, started from the panel (Start Local Backend) when it is not
    running: these checks run last, after the Backend section's own stopped it."""
    ui = ctx.addon.mod("restyle.ui")
    if ui.LOCAL.running() or not ctx.args.backend_python:
        return
    bpy.context.preferences.addons[ctx.addon.package].preferences.python = \
        ctx.args.backend_python
    result = call(bpy.ops.painted_skin.backend_start, "INVOKE_DEFAULT")
    check.details["backend_start"] = sorted(result)
    status = ctx.addon.mod("restyle.backend_status")
    yield from wait_until(check, lambda: ui.LOCAL.running() and status.LIVE.status is not None
                          and status.LIVE.status.ok, lambda: status.LINE["text"],
                          ctx.args.backend_timeout, "the local backend")


def check_engine_viewport(ctx: Context, check: Check) -> Steps:
    """Rendered mode paints: a frame drawn whose mask shows the character; orbiting the
    view repaints it and its redraws stay under 50 ms; the still view is painted again at
    the region's full size."""
    restyle_ui = ctx.addon.mod("restyle.ui")
    yield from _local_backend(ctx, check)
    if not restyle_ui.LOCAL.running():
        check.details["skipped"] = "no local backend (no --backend-python)"
        return
    view_mod = ctx.addon.mod("engine.view")
    yield from _demo_shot(ctx)
    scene = bpy.context.scene
    scene.render.engine = "PAINTED_SKIN"
    scene.painted_skin_engine.url = restyle_ui.LOCAL.url
    scene.painted_skin_engine.start_local = False
    scene.frame_set(scene.frame_start + 6)
    area, region, space = _view3d()
    space.shading.type = "RENDERED"
    rv3d = space.region_3d
    rv3d.view_perspective = "PERSP"
    rv3d.view_location = (0.0, 0.0, 0.9)
    rv3d.view_distance = 4.0
    redraw()

    def view():
        return view_mod.VIEWS[-1] if view_mod.VIEWS else None

    def painted() -> bool:
        v = view()
        return (v is not None and v.job is not None and v.job.latest is not None
                and v.drawn_serial == v.job.latest.serial)

    def text() -> str | None:
        v = view()
        if v is None:
            return "no Rendered view yet"
        if v.job is None:
            return v.message
        return v.job.error or ("painting" if v.job.busy else "waiting")

    yield from wait_until(check, painted, text, ctx.args.check_timeout, "a painted frame")
    v = view()
    if not check.expect(painted(), f"nothing painted: {text()}"):
        return
    first = v.job.latest
    check.details["first_frame"] = {"size": list(first.rgb.shape[:2]),
                                    "character_px": int(first.mask.sum()),
                                    "latency_ms": round(1000 * first.latency_s, 1)}
    check.expect(first.mask.any() and first.rgb[first.mask].std() > 5,
                 "the painted frame shows no character")
    ctx.screens.take("engine_viewport")
    for area in ui_context()["screen"].areas:  # Render Properties, as the user sees them
        if area.type == "PROPERTIES":
            area.spaces.active.context = "RENDER"
            area.tag_redraw()
    yield 0.5
    ctx.screens.take("engine_render_properties")
    # Orbit the view a step a tick while the worker paints: redraws stay short.
    v.draw_s.clear()
    start = first.serial
    for k in range(24):
        rv3d.view_rotation.rotate(_turn(math.radians(7.5)))
        region.tag_redraw()
        check.tick(f"orbit step {k + 1}")
        yield 0.05
    draws = sorted(v.draw_s)
    # The still view is painted again at the region's full size.
    yield from wait_until(check, lambda: (v.job.latest is not None and v.job.latest.full
                                          and v.drawn_serial == v.job.latest.serial),
                          text, ctx.args.check_timeout, "the still view at full size")
    check.expect(v.job.latest.full, "the still view was not painted at full size")
    check.details["full_size"] = list(v.job.latest.rgb.shape[:2])
    check.details["redraws"] = len(draws)
    check.details["redraw_ms_max"] = round(1000 * draws[-1], 1) if draws else None
    check.details["frames_painted_while_orbiting"] = v.job.latest.serial - start
    check.expect(len(draws) >= 10, f"only {len(draws)} redraws while orbiting")
    # Software GL on two cores that the backend is painting on: a redraw can lose the
    # processor now and then, so nine in ten, not every one, are held to 50 ms.
    p90 = draws[int(0.9 * (len(draws) - 1))] if draws else 1.0
    check.details["redraw_ms_p90"] = round(1000 * p90, 1)
    check.expect(p90 < 0.05, f"one redraw in ten held the UI {1000 * p90:.0f} ms or more "
                 "(≥ 50 ms)")
    check.expect(v.job.latest.serial - start >= 2, "orbiting painted fewer than 2 new frames")
    # Refinement off: once the moved view is painted, an idle view is not redrawn.
    scene.painted_skin_engine.viewport_refine = False
    rv3d.view_rotation.rotate(_turn(math.radians(10.0)))
    region.tag_redraw()
    yield 0.1
    yield from wait_until(check, lambda: (not v.job.busy and v.job.latest is not None
                                          and v.drawn_serial == v.job.latest.serial),
                          text, 60, "the view painted without refinement")
    yield from settle(check, 0.3)
    before = v.draw_count
    yield from settle(check, 1.5)
    check.details["idle_redraws_in_1_5_s"] = v.draw_count - before
    check.expect(v.draw_count - before <= 3, f"an idle view was redrawn "
                 f"{v.draw_count - before} times in 1.5 s")
    scene.painted_skin_engine.viewport_refine = True
    check.details["view_draw_ms_max_all"] = round(1000 * max(v.draw_s), 1)
    check.details["snapshot_ms_max"] = round(1000 * max(a for a, _ in v.parts_s), 1)
    check.details["texture_draw_ms_max"] = round(1000 * max(b for _, b in v.parts_s), 1)
    check.expect(v.job.error is None, f"the view shows an error: {v.job.error}")
    ctx.screens.take("engine_viewport_orbited")


def _turn(angle: float):
    from mathutils import Quaternion

    return Quaternion((0.0, 0.0, 1.0), angle)


def check_engine_f12(ctx: Context, check: Check) -> Steps:
    """F12 with the engine writes the painted frame (Render Result saved as PNG); the
    local backend is stopped after it."""
    if not ctx.addon.mod("restyle.ui").LOCAL.running():
        check.details["skipped"] = "no local backend (see engine_viewport)"
        return
    scene = bpy.context.scene
    if scene.render.engine != "PAINTED_SKIN":
        check.details["skipped"] = "the viewport check set no scene up"
        return
    _, _, space = _view3d()
    space.shading.type = "SOLID"  # one painter at a time on this machine's two cores
    views = ctx.addon.mod("engine.view").VIEWS
    t0 = time.monotonic()
    yield from wait_until(check, lambda: not views, lambda: f"{len(views)} Rendered view(s)",
                          10, "the Rendered view to close")
    check.details["rendered_view_closed_s"] = round(time.monotonic() - t0, 2)
    check.expect(not views, "leaving Rendered mode left its painter running")
    scene.render.resolution_x = scene.render.resolution_y = 128
    scene.render.resolution_percentage = 100
    path = ctx.out / "engine_f12.png"
    scene.render.filepath = str(path)
    t0 = time.monotonic()
    with bpy.context.temp_override(**ui_context()):
        result = bpy.ops.render.render(write_still=True)
    check.details["seconds"] = round(time.monotonic() - t0, 2)
    check.details["returned"] = sorted(result)
    check.expect(path.is_file(), "F12 wrote no file")
    if path.is_file():
        img = bpy.data.images.load(str(path))
        px = list(img.pixels[:])
        check.details["nonblack"] = sum(1 for k in range(0, len(px), 4) if px[k] > 0.02)
        check.expect(check.details["nonblack"] > 100, "the F12 frame is empty")
    # F12 as a click gives it: the render runs as a job beside the UI (not on its thread).
    scene.frame_set(scene.frame_current + 1)
    with bpy.context.temp_override(**ui_context()):
        check.details["invoke_returned"] = sorted(bpy.ops.render.render("INVOKE_DEFAULT"))
    yield 0.2
    yield from wait_until(check, lambda: not bpy.app.is_job_running("RENDER"),
                          lambda: "rendering", 120, "the F12 render job")
    invoked = ctx.out / "engine_f12_invoked.png"
    bpy.data.images["Render Result"].save_render(filepath=str(invoked))
    img = bpy.data.images.load(str(invoked))
    px = list(img.pixels[:])
    check.details["invoked_nonblack"] = sum(1 for k in range(0, len(px), 4) if px[k] > 0.02)
    check.expect(check.details["invoked_nonblack"] > 100, "the invoked F12 painted nothing")
    ctx.screens.take("engine_f12_window")
    call(bpy.ops.painted_skin.backend_stop)
    yield from settle(check, 0.3)


def check_engine_starts_its_backend(ctx: Context, check: Check) -> Steps:
    """Rendered mode with no backend running and Start Local Backend on: the viewport's
    worker starts one (its Python and the scene's models read on the UI thread), the view
    says what it waits on meanwhile, then paints; the UI goes on all the while."""
    ui = ctx.addon.mod("restyle.ui")
    view_mod = ctx.addon.mod("engine.view")
    scene = bpy.context.scene
    if scene.render.engine != "PAINTED_SKIN" or not ctx.args.backend_python:
        check.details["skipped"] = "the viewport check set no scene up, or no Backend Python"
        return
    if ui.LOCAL.running():
        call(bpy.ops.painted_skin.backend_stop)
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"tcp://127.0.0.1:{sock.getsockname()[1]}"
    s = scene.painted_skin_engine
    s.url, s.start_local = url, True
    area, region, space = _view3d()
    space.shading.type = "RENDERED"
    redraw()
    seen: list[str] = []

    def text() -> str | None:
        v = view_mod.VIEWS[-1] if view_mod.VIEWS else None
        if v is None or v.job is None:
            return None
        said = v.drawn_error
        if said and said not in seen:
            seen.append(said)
        return said or ("painting" if v.job.busy else "waiting")

    def painted() -> bool:
        v = view_mod.VIEWS[-1] if view_mod.VIEWS else None
        return (v is not None and v.job is not None and v.job.latest is not None
                and v.drawn_serial == v.job.latest.serial)

    yield from wait_until(check, painted, text, ctx.args.backend_timeout + 60,
                          "a frame painted through the backend the view started")
    check.details["said_while_waiting"] = seen
    check.details["backend_started_here"] = ui.LOCAL.running() and ui.LOCAL.url == url
    check.expect(painted(), "nothing painted")
    check.expect(check.details["backend_started_here"], "no local backend was started")
    check.expect(any("reaching the backend" in t for t in seen),
                 "the view said nothing while the backend started")
    ctx.screens.take("engine_viewport_started_backend")
    space.shading.type = "SOLID"
    call(bpy.ops.painted_skin.backend_stop)
    yield from settle(check, 0.3)
