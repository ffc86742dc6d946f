"""The window checks of the Retarget panel: the sidebar, Retarget (progress, Cancel,
Esc), and Retarget Several Clips through its real file browser."""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable, Generator
from pathlib import Path

import bpy
from gui_harness import (
    Check,
    Context,
    Steps,
    action_frames,
    call,
    expected_frames,
    pick_tab,
    poll,
    settle,
    show_sidebar,
    ui_context,
    viewport_key,
    wait_until,
    xdo,
)


def check_sidebar(ctx: Context, check: Check) -> Steps:
    show_sidebar()
    yield from wait_until(check, pick_tab, lambda: None, 10, "the sidebar's tabs")
    yield from settle(check, 1.0)
    region = ui_context()["region"]
    check.expect(region.active_panel_category == "Painted Skin",
                 f"the sidebar shows {region.active_panel_category!r}, not Painted Skin")
    pkg = ctx.addon.package
    check.details["restyle_loaded"] = f"{pkg}.addon.blender.restyle.ui" in sys.modules
    check.expect(check.details["restyle_loaded"], "the Restyle step did not load "
                 "(the bundled pyzmq wheel?)")
    ctx.screens.take("sidebar")
    yield from settle(check, 0.5)


def check_retarget(ctx: Context, check: Check) -> Steps:
    ops, scene = ctx.addon.mod("retarget.operators"), bpy.context.scene
    importers = ctx.addon.mod("retarget.importers")
    for name in ("Cube", "Camera"):  # the factory scene's: Add Camera frames the character
        if name in bpy.data.objects:
            bpy.data.objects.remove(bpy.data.objects[name])
    with bpy.context.temp_override(**ui_context()):
        arm = importers.import_character(ctx.args.character)
    ctx.armature = arm
    s = scene.painted_skin_retarget
    s.source_kind, s.source_path, s.target_object = "FILE", ctx.args.clip, arm
    check.details["character"] = arm.name
    check.expect(poll(bpy.ops.painted_skin.retarget), "Retarget is greyed out")
    t0 = time.monotonic()
    result = call(bpy.ops.painted_skin.retarget, "INVOKE_DEFAULT")
    check.details["invoke_returned"] = sorted(result)
    check.details["invoke_s"] = round(time.monotonic() - t0, 3)
    if not check.expect("RUNNING_MODAL" in result, f"invoke returned {sorted(result)}, "
                        "not RUNNING_MODAL: the retarget did not run in the background"):
        return
    shot = [False]

    def text():
        job = ops.running_job()
        if job is not None and job.done >= 1 and not shot[0]:
            shot[0] = True
            ctx.screens.take("retarget_running")
        return None if job is None else f"Retargeting {job.progress_text}"

    yield from wait_until(check, lambda: ops.running_job() is None, text,
                          ctx.args.check_timeout, "the retarget to finish")
    check.expect(len(check.ticks) >= 3, f"the progress text changed only {len(check.ticks)} "
                 "time(s): not modal")
    ad = arm.animation_data
    action = ad.action if ad is not None else None
    check.details["last_report"] = s.last_report
    if check.expect(action is not None, "the armature has no Action after the retarget"):
        want = expected_frames(scene, ctx.args.clip)
        got = action_frames(action)
        check.details.update(action=action.name, action_frames=got,
                             expected_frames=round(want, 1))
        check.expect(abs(got - want) <= 2, f"the Action has {got} frames; the clip lasts "
                     f"{want:.1f} frames at the scene's rate")
        check.expect(s.last_report.startswith(action.name),
                     f"the panel's report {s.last_report!r} does not name {action.name!r}")
    ctx.screens.take("retarget_done")
    yield from settle(check, 0.3)


def _retarget_started(ctx: Context, check: Check, timeout: float
                      ) -> Generator[float, None, Callable[[], str | None] | None]:
    """Press Retarget and wait for its first stage to run; the function giving the
    panel's progress text (None: it did not start as a background job)."""
    ops = ctx.addon.mod("retarget.operators")
    result = call(bpy.ops.painted_skin.retarget, "INVOKE_DEFAULT")
    if not check.expect("RUNNING_MODAL" in result, f"invoke returned {sorted(result)}"):
        return None

    def text() -> str | None:
        job = ops.running_job()
        return None if job is None else f"Retargeting {job.progress_text}"

    yield from wait_until(check, lambda: ops.running_job() is None or
                          ops.running_job().done >= 1, text, timeout, "the first stage")
    return text


def _stop_a_retarget(ctx: Context, check: Check, stop: Callable[[], object], how: str
                     ) -> Steps:
    """Start a retarget, ``stop()`` it once its first stage has run: the armature keeps
    its Action, no Action is left behind, the panel says it was cancelled."""
    ops, arm = ctx.addon.mod("retarget.operators"), ctx.armature
    if not check.expect(arm is not None and arm.animation_data is not None
                        and arm.animation_data.action is not None,
                        "no previous Action to keep (the retarget check failed)"):
        return
    before, n_actions = arm.animation_data.action, len(bpy.data.actions)
    text = yield from _retarget_started(ctx, check, ctx.args.check_timeout)
    if text is None:
        return
    stop()
    yield from wait_until(check, lambda: ops.running_job() is None, text, 30,
                          f"the retarget to stop on {how}")
    after = arm.animation_data.action
    check.expect(after == before, f"the armature's Action is {after and after.name!r}, "
                 f"not the previous {before.name!r}")
    check.expect(len(bpy.data.actions) == n_actions,
                 f"{len(bpy.data.actions) - n_actions} Action(s) left behind by {how}")
    s = bpy.context.scene.painted_skin_retarget
    check.details["last_report"] = s.last_report
    check.expect("cancel" in s.last_report, f"the panel says {s.last_report!r}")


def check_retarget_cancel(ctx: Context, check: Check) -> Steps:
    """The panel's Cancel button while it runs."""
    def press_cancel() -> None:
        check.details["cancel_poll"] = poll(bpy.ops.painted_skin.cancel_retarget)
        if check.expect(check.details["cancel_poll"], "Cancel is greyed out while it runs"):
            call(bpy.ops.painted_skin.cancel_retarget)

    yield from _stop_a_retarget(ctx, check, press_cancel, "Cancel")
    check.expect(poll(bpy.ops.painted_skin.retarget), "Retarget stays greyed out after Cancel")


def check_retarget_esc(ctx: Context, check: Check) -> Steps:
    """Esc pressed over the viewport while it runs (a real key event)."""
    yield from _stop_a_retarget(
        ctx, check, lambda: check.expect(viewport_key("Escape"),
                                         "no key could be pressed (xdotool)"), "Esc")


def _batch_folder(ctx: Context) -> Path:
    folder = ctx.out / "batch_clips"
    folder.mkdir(exist_ok=True)
    for clip in ctx.args.batch_clips:
        link = folder / Path(clip).name
        if not link.exists():
            link.symlink_to(Path(clip).resolve())
    return folder


def _file_browser():
    for win in bpy.context.window_manager.windows:
        for area in win.screen.areas:
            if area.type == "FILE_BROWSER":
                return win, area
    return None




def browser_keys(*keys: str) -> bool:
    """Point at the file browser's own window (the smallest visible Blender window) and
    press ``keys`` there; False when no such window is found."""
    sizes = []
    for wid in xdo("search", "--onlyvisible", "--name", "Blender").split():
        geo = dict(re.findall(r"(WIDTH|HEIGHT)=(\d+)", xdo("getwindowgeometry", "--shell", wid)))
        if geo:
            sizes.append((int(geo["WIDTH"]) * int(geo["HEIGHT"]), wid, geo))
    if len(sizes) < 2:
        return False
    _, wid, geo = min(sizes)
    xdo("mousemove", "--window", wid, str(int(geo["WIDTH"]) // 2),
        str(int(geo["HEIGHT"]) // 2))
    for key in keys:
        xdo("key", "--clearmodifiers", key)
    return True


def open_browser(ctx: Context, check: Check) -> Steps:
    """Retarget Several Clips' button: its file browser opens on the folder of both
    clips."""
    folder = _batch_folder(ctx)
    result = call(bpy.ops.painted_skin.retarget_batch, "INVOKE_DEFAULT")
    check.details["invoke_returned"] = sorted(result)
    yield from wait_until(check, lambda: _file_browser() is not None, lambda: None, 10,
                          "the file browser")
    found = _file_browser()
    if found is not None:
        found[1].spaces.active.params.directory = str(folder).encode() + b"/"
        yield from settle(check, 1.0)


def start_batch(ctx: Context, check: Check) -> Steps:
    """Retarget Several Clips as the animator does: the file browser opens, both clips
    are selected (A), Accept (Return). Falls back to calling the operator with the files
    when the browser cannot be reached."""
    folder = _batch_folder(ctx)
    yield from open_browser(ctx, check)
    if _file_browser() is not None and browser_keys("a"):
        yield from settle(check, 0.5)
        ctx.screens.take("batch_file_browser")
        yield from settle(check, 0.5)
        browser_keys("Return")
        yield from wait_until(check, lambda: _file_browser() is None, lambda: None, 10,
                              "the file browser to close")
        check.details["path"] = "file browser"
        return
    check.problems.append("the file browser could not be driven (xdotool)")
    check.details["path"] = "exec"
    call(bpy.ops.painted_skin.retarget_batch, "EXEC_DEFAULT", directory=str(folder),
         files=[{"name": Path(c).name} for c in ctx.args.batch_clips], in_background=True)


def check_browser_cancel(ctx: Context, check: Check) -> Steps:
    """Cancel in the batch's file browser (Esc): nothing runs, nothing breaks."""
    n_actions = len(bpy.data.actions)
    yield from open_browser(ctx, check)
    if not check.expect(_file_browser() is not None, "no file browser opened"):
        return
    check.expect(browser_keys("Escape"), "the file browser could not be reached (xdotool)")
    yield from wait_until(check, lambda: _file_browser() is None, lambda: None, 10,
                          "the file browser to close")
    yield from settle(check, 0.5)
    check.expect(len(bpy.data.actions) == n_actions, "the cancelled browser made Actions")
    check.expect(poll(bpy.ops.painted_skin.retarget), "Retarget is greyed out afterwards")


def check_batch(ctx: Context, check: Check, cancel_at: int | None) -> Steps:
    ops, arm = ctx.addon.mod("retarget.operators"), ctx.armature
    if not check.expect(arm is not None, "no character (the retarget check failed)"):
        return
    n_actions = len(bpy.data.actions)
    names_before = {a.name for a in bpy.data.actions}
    yield from start_batch(ctx, check)
    cancelled = [False]

    def text():
        job = ops.running_job()
        if job is None:
            return None
        if cancel_at is not None and not cancelled[0] and job.index + 1 >= cancel_at \
                and job.current is not None and job.current.done >= 1:
            cancelled[0] = True
            check.details["cancel_poll"] = poll(bpy.ops.painted_skin.cancel_retarget)
            call(bpy.ops.painted_skin.cancel_retarget)
        return job.progress_text

    started = time.monotonic()
    yield from wait_until(check, lambda: ops.running_job() is not None or
                          time.monotonic() - started > 5, text, 10, "the batch to start")
    check.expect(ops.running_job() is not None, "the batch is not running in the background")
    yield from wait_until(check, lambda: ops.running_job() is None, text,
                          ctx.args.check_timeout, "the batch to end")
    s = bpy.context.scene.painted_skin_retarget
    check.details["last_report"] = s.last_report
    made = sorted({a.name for a in bpy.data.actions} - names_before)
    check.details["actions_made"] = made
    stems = [Path(c).stem for c in ctx.args.batch_clips]
    if cancel_at is None:
        check.expect(len(bpy.data.actions) == n_actions + 2, f"{len(made)} Action(s) made, "
                     "not one per clip")
        check.expect(s.last_report.startswith("2/2 clips"), f"the panel says "
                     f"{s.last_report!r}")
        for stem in stems:
            check.expect(any(n.startswith(stem) for n in made), f"no Action named {stem}")
        kept = [t.name for t in arm.animation_data.nla_tracks]
        check.details["nla_tracks"] = kept
        check.expect(any(stems[0] in t for t in kept),
                     f"the first clip's Action is not stashed on an NLA track: {kept}")
    else:
        check.expect(cancelled[0], "the batch ended before Cancel could be pressed")
        check.expect(check.details.get("cancel_poll", False), "Cancel is greyed out")
        check.expect(len(made) == cancel_at - 1, f"{len(made)} Action(s) made; "
                     f"{cancel_at - 1} expected before the cancelled clip")
        check.expect("cancelled" in s.last_report, f"the panel says {s.last_report!r}")
    ctx.screens.take("batch_done" if cancel_at is None else "batch_cancelled")
    yield from settle(check, 0.3)


