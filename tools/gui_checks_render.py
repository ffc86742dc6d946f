"""The window checks of the other panels: Render Passes, the Backend section (status,
Start, Stop), Restyle, Train Skin Model, and a new file or an undo while a job runs."""

from __future__ import annotations

import os
from pathlib import Path

import bpy
from gui_checks_retarget import _retarget_started
from gui_harness import (
    Check,
    Context,
    Steps,
    call,
    poll,
    press_stop,
    redraw,
    settle,
    ui_context,
    viewport_key,
    wait_until,
)


def _passes_setup(ctx: Context, folder: str, frames: int) -> None:
    scene = bpy.context.scene
    if scene.camera is None:
        call(bpy.ops.painted_skin.add_camera)
    scene.frame_start, scene.frame_end = 1, frames
    p = scene.painted_skin_passes
    p.width = p.height = ctx.args.size
    p.out_dir = str(ctx.out / folder) + "/"


def _frames_written(folder: Path) -> dict[str, int]:
    if not folder.is_dir():
        return {}
    return {d.name: len([f for f in d.iterdir() if f.is_file()])
            for d in sorted(folder.iterdir()) if d.is_dir()}


def check_passes(ctx: Context, check: Check, cancel_after: int | None,
                 how: str = "button") -> Steps:
    pui = ctx.addon.mod("passes.ui")
    frames = ctx.args.frames if cancel_after is None else ctx.args.frames * 4
    folder = check.name  # a folder per check: a second cancelled run must not resume
    _passes_setup(ctx, folder, frames)
    check.expect(poll(bpy.ops.painted_skin.render_passes), "Render Passes is greyed out")
    result = call(bpy.ops.painted_skin.render_passes, "INVOKE_DEFAULT")
    check.details["invoke_returned"] = sorted(result)
    if not check.expect("RUNNING_MODAL" in result, f"invoke returned {sorted(result)}"):
        return
    pressed = [False]

    def text():
        if not pui.RENDER["running"]:
            return None
        run_text = pui.RENDER["text"]
        done = int(run_text.split("/")[0] or 0) if run_text else 0
        if done == 2 and cancel_after is None and not pressed[0]:
            pressed[0] = True
            ctx.screens.take("passes_running")
        if cancel_after is not None and done >= cancel_after and not pressed[0]:
            pressed[0] = True
            check.details["cancel_poll"] = poll(bpy.ops.painted_skin.cancel_passes)
            press_stop(how, bpy.ops.painted_skin.cancel_passes)
        return f"Rendering {run_text}"

    yield from wait_until(check, lambda: not pui.RENDER["running"], text,
                          ctx.args.check_timeout, "the passes")
    written = _frames_written(ctx.out / folder)
    check.details["files_per_folder"] = written
    # 0/N and a count or two, seen from this timer while the frames rendered (a cancel at
    # frame 2 may end the run before a third count is seen).
    wanted = 3 if cancel_after is None else 2
    check.expect(len(check.ticks) >= wanted, f"the progress text changed only "
                 f"{len(check.ticks)} time(s): not modal")
    check.expect((ctx.out / folder / "manifest.json").is_file(), "no manifest.json written")
    counts = [n for name, n in written.items() if name != "camera"]
    if cancel_after is None:
        check.expect(bool(counts) and min(counts) >= frames,
                     f"not every pass folder has {frames} frames: {written}")
    else:
        check.expect(pressed[0] and check.details.get("cancel_poll", False),
                     "Cancel was not available while rendering")
        done = written.get("camera", 0)
        check.details["frames_done"] = done
        check.expect(cancel_after <= done < frames, f"{done} of {frames} frames written after "
                     f"Cancel at {cancel_after}")
        check.expect(poll(bpy.ops.painted_skin.render_passes),
                     "Render Passes stays greyed out after Cancel")
    yield from settle(check, 0.3)


def check_backend_status(ctx: Context, check: Check) -> Steps:
    """The Backend section's heartbeat: drawing the panel starts the status timer, whose
    pings (none answer here) end in a clear line, without freezing the UI."""
    status = ctx.addon.mod("restyle.backend_status")
    redraw()
    yield from wait_until(check, lambda: bpy.app.timers.is_registered(status.tick),
                          lambda: status.LINE["text"], 10, "the status timer to start")
    check.details["timer_registered"] = bpy.app.timers.is_registered(status.tick)
    yield from wait_until(check, lambda: status.LIVE.status is not None,
                          lambda: status.LINE["text"], 15, "a status reply")
    yield from settle(check, 3.0)  # more pings: the gap shows whether they block
    check.details["line"] = status.LINE["text"]
    check.expect(status.LIVE.status is not None, "no STATUS ping finished")


def check_backend_start(ctx: Context, check: Check) -> Steps:
    status, ui = ctx.addon.mod("restyle.backend_status"), ctx.addon.mod("restyle.ui")
    prefs = bpy.context.preferences.addons[ctx.addon.package].preferences
    prefs.python = ""
    try:  # the button's error report reaches a script as a RuntimeError
        result = call(bpy.ops.painted_skin.backend_start, "INVOKE_DEFAULT")
    except RuntimeError as e:
        result = {"CANCELLED"}
        check.details["no_python_error"] = str(e)
    check.details["no_python_returned"] = sorted(result)
    lines = []
    yield from wait_until(check, lambda: len(lines) > 40, lambda: lines.append(
        status.LINE["text"]) or status.LINE["text"], 10, "the status line")
    check.details["no_python_line"] = status.LINE["text"]
    check.details["no_python_log"] = status.LINE["log_tail"]
    check.expect("CANCELLED" in result, f"with no Backend Python set, Start returned "
                 f"{sorted(result)}")
    check.expect("Backend Python" in check.details.get("no_python_error", ""),
                 "Start's error does not say that a Backend Python must be set")
    # What the panel draws with no Backend Python set (restyle_panel.draw_backend).
    check.details["panel_hint_shown"] = bool(bpy.app.binary_path) and not prefs.python
    check.expect(check.details["panel_hint_shown"], "the panel shows no Backend Python hint")
    if "failed" not in status.LINE["text"] and any("failed" in t for _, t in check.ticks):
        check.details["note"] = ("the panel's 'failed to start' line was replaced by the "
                                 "next status ping within 2 s")
    ctx.screens.take("backend_no_python")
    yield from settle(check, 0.5)
    if not ctx.args.backend_python:
        check.details["real_backend"] = "skipped (no --backend-python)"
        return
    prefs.python = ctx.args.backend_python
    result = call(bpy.ops.painted_skin.backend_start, "INVOKE_DEFAULT")
    check.details["start_returned"] = sorted(result)
    if not check.expect("RUNNING_MODAL" in result, f"Start returned {sorted(result)}"):
        return
    yield from wait_until(check, lambda: not status.LINE["busy"],
                          lambda: status.LINE["text"], ctx.args.backend_timeout,
                          "the local backend")
    yield from wait_until(check, lambda: status.LIVE.status is not None
                          and status.LIVE.status.ok, lambda: status.LINE["text"], 10,
                          "a STATUS reply from it")
    st = status.LIVE.status
    check.details["status"] = {"ok": bool(st and st.ok), "devices": list(st.devices) if st
                               else [], "pipelines": list(st.pipelines) if st else [],
                               "log_tail": status.LINE["log_tail"]}
    check.expect(bool(st and st.ok), f"the backend did not come up: {status.LINE['text']}")
    ctx.screens.take("backend_up")
    yield from settle(check, 3.0)
    ctx.backend_up = bool(st and st.ok) and ui.LOCAL.running()


def check_restyle(ctx: Context, check: Check, cancel_after: int | None,
                  how: str = "button") -> Steps:
    """Restyle Shot through the local backend's echo pipeline: "n/N frames" in the panel,
    the restyled frames on disk; or Cancel after ``cancel_after`` frames."""
    panel = ctx.addon.mod("restyle.panel")
    if not ctx.backend_up:
        check.details["skipped"] = "no local backend (see backend_start)"
        return
    scene = bpy.context.scene
    frames = ctx.args.frames if cancel_after is None else ctx.args.frames * 4
    scene.frame_start, scene.frame_end = 1, frames
    r = scene.painted_skin_restyle
    r.pipeline, r.width, r.height = "echo", ctx.args.size, ctx.args.size
    folder = ctx.out / check.name
    r.out_dir = str(folder) + "/"
    check.expect(poll(bpy.ops.painted_skin.restyle), "Restyle Shot is greyed out")
    result = call(bpy.ops.painted_skin.restyle, "INVOKE_DEFAULT")
    check.details["invoke_returned"] = sorted(result)
    if not check.expect("RUNNING_MODAL" in result, f"invoke returned {sorted(result)}"):
        return
    pressed = [False]

    def text():
        progress = panel.ActiveRun.progress()
        if progress is None:
            return None
        if cancel_after is not None and progress[0] >= cancel_after and not pressed[0]:
            pressed[0] = True
            check.details["cancel_poll"] = poll(bpy.ops.painted_skin.restyle_cancel)
            press_stop(how, bpy.ops.painted_skin.restyle_cancel)
        if cancel_after is None and progress[0] == 2 and not pressed[0]:
            pressed[0] = True
            ctx.screens.take("restyle_running")
        return f"{progress[0]}/{progress[1]} frames"

    yield from wait_until(check, lambda: panel.ActiveRun.op is None, text,
                          ctx.args.check_timeout, "the restyle")
    written = _frames_written(folder)
    check.details["files_per_folder"] = written
    done = written.get("restyled", 0)
    # 0/N, then a later count seen from this timer while it ran: the UI's event loop
    # went on during the restyle (echo paints a burst of frames once the session opens,
    # so more counts are not guaranteed).
    check.expect(len(check.ticks) >= 2, f"the progress text changed only "
                 f"{len(check.ticks)} time(s): not modal")
    if cancel_after is None:
        check.expect(done == frames, f"{done} of {frames} restyled frames written")
    else:
        check.expect(check.details.get("cancel_poll", False), "Cancel is greyed out")
        check.expect(cancel_after <= done < frames, f"{done} of {frames} frames written after "
                     f"Cancel at {cancel_after}")
        check.expect(poll(bpy.ops.painted_skin.restyle), "Restyle stays greyed out")
    yield from settle(check, 0.3)


def check_backend_stop(ctx: Context, check: Check) -> Steps:
    ui = ctx.addon.mod("restyle.ui")
    if not ui.LOCAL.running():
        check.details["skipped"] = "no local backend running"
        return
    call(bpy.ops.painted_skin.backend_stop)
    yield from settle(check, 1.0)
    check.expect(not ui.LOCAL.running(), "the local backend still runs after Stop")
    check.expect(not poll(bpy.ops.painted_skin.backend_stop), "Stop is still offered")


def check_train(ctx: Context, check: Check, cancel: bool, how: str = "button") -> Steps:
    """Train Skin Model on the saved shot (a tiny budget): the panel's status line over
    the ticks, and the child's end; or Cancel (Ctrl-C to the trainer) once it reports."""
    skin = ctx.addon.mod("skin.ui")
    if not ctx.args.backend_python:
        check.details["skipped"] = "no --backend-python (the trainer needs torch)"
        return
    if not bpy.data.filepath:
        call(bpy.ops.wm.save_as_mainfile, filepath=str(ctx.out / "shot.blend"))
    scene = bpy.context.scene
    scene.frame_start, scene.frame_end = 1, ctx.args.frames
    sk = scene.painted_skin_skin
    sk.model_dir = str(ctx.out / f"{check.name}_model") + "/"
    sk.minutes, sk.size, sk.device = ctx.args.train_minutes, "128", "cpu"
    prefs = bpy.context.preferences.addons[ctx.addon.package].preferences
    prefs.python = ctx.args.backend_python
    # A dataset cache of this run's own (the trainer child inherits the variable): each
    # check renders its set, so Cancel lands while the child works.
    os.environ["PAINTED_SKIN_CACHE"] = str(ctx.out / f"skin-cache-{check.name}")
    check.expect(poll(bpy.ops.painted_skin.train_skin), "Train Skin Model is greyed out")
    result = call(bpy.ops.painted_skin.train_skin, "INVOKE_DEFAULT", frames_per_clip=2,
                  samples=1)
    check.details["invoke_returned"] = sorted(result)
    if not check.expect("RUNNING_MODAL" in result, f"invoke returned {sorted(result)}"):
        return
    pressed = [False]

    def text():
        job = skin._RUN["job"]
        if job is None:
            return None
        working = any(line.startswith(("parsing bvh", "train-skin:", "skin:"))
                      for line in job.lines)
        if cancel and not pressed[0] and working:
            pressed[0] = True
            press_stop(how, bpy.ops.painted_skin.cancel_training)
        return f"{job.progress:.2f} {job.status}"

    yield from wait_until(check, lambda: not skin.training_running() and
                          skin._RUN["job"].code is not None, text,
                          ctx.args.train_timeout, "the training to end")
    job = skin._RUN["job"]
    check.details.update(code=job.code, status=job.status, last_lines=list(job.lines)[-8:])
    if job.code is None and job.proc.poll() is None:
        job.cancel()
    check.expect(len(check.ticks) >= 2, f"the status changed only {len(check.ticks)} "
                 "time(s): not modal")
    if cancel:
        check.expect(pressed[0], "the trainer never reported: Cancel was not pressed")
        check.expect(job.code is not None, "the trainer did not stop on Cancel")
        check.expect("failed" not in job.status, f"after Cancel the panel says "
                     f"{job.status!r}, not that it stopped")
    else:
        check.expect(job.code == 0, f"the training ended with exit {job.code}: {job.status}")
    check.expect(poll(bpy.ops.painted_skin.train_skin), "Train stays greyed out")


def check_open_file_while_running(ctx: Context, check: Check) -> Steps:
    """File > New while a retarget runs: Blender ends the modal (its cancel()); the
    panel of the new file offers Retarget again, nothing is left running."""
    ops, pui = ctx.addon.mod("retarget.operators"), ctx.addon.mod("passes.ui")
    arm = ctx.armature
    if not check.expect(arm is not None, "no character (the retarget check failed)"):
        return
    if (yield from _retarget_started(ctx, check, 60)) is None:
        return
    ctx.armature = None
    call(bpy.ops.wm.read_homefile, app_template="")
    yield from settle(check, 1.0)
    check.expect(ops.running_job() is None, "the retarget still counts as running in the "
                 "new file: its Cancel button stays")
    check.expect(not pui.RENDER["running"], "passes count as running")
    check.expect(hasattr(bpy.context.scene, "painted_skin_retarget"),
                 "the add-on's settings are gone in the new file")


def check_undo_while_running(ctx: Context, check: Check) -> Steps:
    """Ctrl+Z over the viewport while a retarget runs: no crash, it ends with a report,
    and Retarget is offered again."""
    ops = ctx.addon.mod("retarget.operators")
    importers = ctx.addon.mod("retarget.importers")
    with bpy.context.temp_override(**ui_context()):
        arm = importers.import_character(ctx.args.character)
    s = bpy.context.scene.painted_skin_retarget
    s.source_kind, s.source_path, s.target_object = "FILE", ctx.args.clip, arm
    call(bpy.ops.ed.undo_push, message="character for the undo check")
    text = yield from _retarget_started(ctx, check, 60)
    if text is None:
        return
    check.expect(viewport_key("ctrl+z"), "no key could be pressed (xdotool)")
    yield from wait_until(check, lambda: ops.running_job() is None, text,
                          ctx.args.check_timeout, "the retarget to end after undo")
    yield from settle(check, 0.5)
    check.details["last_report"] = bpy.context.scene.painted_skin_retarget.last_report
    check.expect(ops.running_job() is None, "the retarget still runs after undo")


