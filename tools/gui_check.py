"""Drive the Painted Skin panel's modal operators in a real Blender window.

The bpy module has no event loop (``bpy.app.timers`` never fire there), so the panel's
timer-driven operators only run in a Blender with a window. This script runs inside
one, from a ``bpy.app.timers`` callback, with the 3D viewport's sidebar as context, as
a click on the panel would, and checks: Retarget (progress, Cancel, Esc), Retarget
Several Clips through its real file browser (Accept, Cancel; the browser is reached
with xdotool), Render Passes (progress, Cancel), the Backend section's live status,
Start Local Backend (without and with a Backend Python), Restyle through its echo
pipeline (progress, Cancel), Train Skin Model (progress, Cancel), and a new file or an
undo while a retarget runs::

    blender --factory-startup --python-exit-code 1 --python tools/gui_check.py -- \
        --out DIR [--zip painted_skin-...zip] [--backend-python PY] [--only CHECK ...]

It writes ``DIR/report.json`` (per check: ok, problems, the progress text of each tick,
the longest gap between ticks, which shows whether the UI froze, and the Python
tracebacks and operator reports seen meanwhile) and screenshots (``import -window
root`` from ImageMagick: the window's own screenshot reads black on software GL), then
quits with exit code 0 only when every check passed. ``tests/gui`` runs it.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Generator, Iterator
from pathlib import Path

import bpy

DATA = Path(os.environ.get("PAINTED_SKIN_SHARED", "/work/shared")) / "data"
TICK_S = 0.05  # the driver's own timer: a long gap between its ticks is a frozen UI


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="gui_check.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="folder for report.json and screenshots")
    p.add_argument("--zip", help="install this extension zip first (else the installed one)")
    p.add_argument("--repo", default="user_default", help="extension repository to use")
    p.add_argument("--character", default=str(DATA / "characters" / "human-male.glb"))
    p.add_argument("--clip", default=str(DATA / "bvh" / "cmu_motionbuilder_friendly"
                                         / "01_01.bvh"), help="the long clip (Retarget)")
    p.add_argument("--batch-clips", nargs=2, default=[
        str(DATA / "bvh" / "cmu_motionbuilder_friendly" / n) for n in ("02_01.bvh",
                                                                       "05_06.bvh")])
    p.add_argument("--frames", type=int, default=6, help="frames of the Render Passes run")
    p.add_argument("--size", type=int, default=128, help="pass width and height")
    p.add_argument("--backend-python", default="",
                   help="a Python with painted-skin[backend]: also start the real backend")
    p.add_argument("--backend-timeout", type=float, default=120.0)
    p.add_argument("--train-minutes", type=float, default=0.2,
                   help="the Train check's budget (Skin Model panel's Minutes)")
    p.add_argument("--train-timeout", type=float, default=300.0)
    p.add_argument("--max-gap", type=float, default=30.0,
                   help="a tick gap above this many seconds fails the check (a frozen UI)")
    p.add_argument("--check-timeout", type=float, default=600.0,
                   help="seconds one check may take")
    p.add_argument("--only", action="append", help="run only these checks (repeatable)")
    return p.parse_args(argv)


class ConsoleTap:
    """Copies what goes to ``sys.stderr`` (Blender prints a failing operator's or
    timer's traceback there) so each check can report the tracebacks it caused."""

    def __init__(self, stream) -> None:
        self.stream, self.text = stream, []

    def write(self, s: str) -> int:
        self.text.append(s)
        return self.stream.write(s)

    def flush(self) -> None:
        self.stream.flush()

    def __getattr__(self, name):
        return getattr(self.stream, name)

    def mark(self) -> int:
        return len(self.text)

    def tracebacks(self, since: int) -> list[str]:
        text = "".join(self.text[since:])
        blocks = re.split(r"(?=Traceback \(most recent call last\):)", text)
        return [b.strip() for b in blocks if b.startswith("Traceback")]


class Check:
    """One check's record: its ticks (time, text), problems and details."""

    def __init__(self, name: str, tap: ConsoleTap) -> None:
        self.name, self.tap, self.mark = name, tap, tap.mark()
        self.t0 = self.last = time.monotonic()
        self.ticks: list[tuple[float, str]] = []
        self.max_gap = 0.0
        self.problems: list[str] = []
        self.details: dict = {}

    def tick(self, text: str | None) -> None:
        now = time.monotonic()
        self.max_gap = max(self.max_gap, now - self.last)
        self.last = now
        if text is not None and (not self.ticks or self.ticks[-1][1] != text):
            self.ticks.append((round(now - self.t0, 3), text))

    def expect(self, ok: bool, problem: str) -> bool:
        if not ok:
            self.problems.append(problem)
        return ok

    def record(self, max_gap: float, reports: list[str]) -> dict:
        tbs = self.tap.tracebacks(self.mark)
        if tbs:
            self.problems.append(f"{len(tbs)} Python traceback(s) in the console")
        if self.max_gap > max_gap:
            self.problems.append(f"the UI froze for {self.max_gap:.1f} s (limit {max_gap} s)")
        return {"name": self.name, "ok": not self.problems, "problems": self.problems,
                "seconds": round(time.monotonic() - self.t0, 2),
                "max_gap_s": round(self.max_gap, 3), "ticks": self.ticks,
                "tracebacks": tbs, "reports": reports, **self.details}


# --- the window ---------------------------------------------------------------------------

def main_window():
    return bpy.context.window_manager.windows[0]


def ui_context(window=None) -> dict:
    """The context a click in the 3D viewport's sidebar gives an operator."""
    win = window or main_window()
    area = next(a for a in win.screen.areas if a.type == "VIEW_3D")
    region = next(r for r in area.regions if r.type == "UI")
    return {"window": win, "screen": win.screen, "area": area, "region": region,
            "scene": win.scene}


def call(op: Callable, *args, ctx: dict | None = None, **kwargs) -> set[str]:
    with bpy.context.temp_override(**(ctx or ui_context())):
        return op(*args, **kwargs)


def poll(op, ctx: dict | None = None) -> bool:
    with bpy.context.temp_override(**(ctx or ui_context())):
        return op.poll()


def show_sidebar() -> None:
    """Open the 3D viewport's sidebar and turn the bottom area into an Info log (what the
    operators report). The tab is chosen once the sidebar has drawn (:func:`pick_tab`)."""
    ctx = ui_context()
    ctx["area"].spaces.active.show_region_ui = True
    for area in ctx["screen"].areas:
        if area.type == "DOPESHEET_EDITOR":
            area.type = "INFO"
    redraw()


def pick_tab(name: str = "Painted Skin") -> bool:
    """Show the sidebar tab ``name``; False while the sidebar has not drawn its tabs yet
    (Blender refuses the setting until then)."""
    region = ui_context()["region"]
    try:
        region.active_panel_category = name
    except (AttributeError, TypeError):
        return False
    redraw()
    return region.active_panel_category == name


def redraw() -> None:
    for win in bpy.context.window_manager.windows:
        for area in win.screen.areas:
            area.tag_redraw()


def info_area():
    return next((a for a in main_window().screen.areas if a.type == "INFO"), None)


def take_reports() -> list[str]:
    """The Info log's lines since the last call (then cleared): operator reports."""
    area = info_area()
    if area is None:
        return []
    win = main_window()
    ctx = {"window": win, "screen": win.screen, "area": area,
           "region": next(r for r in area.regions if r.type == "WINDOW")}
    wm = bpy.context.window_manager
    wm.clipboard = ""
    try:
        with bpy.context.temp_override(**ctx):
            bpy.ops.info.select_all(action="SELECT")
            bpy.ops.info.report_copy()
            bpy.ops.info.report_delete()
    except RuntimeError as e:
        return [f"(could not read the Info log: {e})"]
    # The log also echoes every operator a script ran ("bpy.ops..."): keep the reports.
    return [line for line in wm.clipboard.splitlines()
            if line.strip() and not line.startswith(("bpy.", "import "))]


class Screens:
    """Screenshots of the X display (ImageMagick ``import``), taken without blocking."""

    def __init__(self, out: Path) -> None:
        self.out, self.taken, self.procs = out, [], []
        self.tool = shutil.which("import")

    def take(self, name: str) -> None:
        path = self.out / f"{len(self.taken) + 1:02d}_{name}.png"
        if self.tool and os.environ.get("DISPLAY"):
            self.procs.append(subprocess.Popen([self.tool, "-window", "root", str(path)],
                                               stdout=subprocess.DEVNULL,
                                               stderr=subprocess.DEVNULL))
        else:
            call(bpy.ops.screen.screenshot, filepath=str(path))
        self.taken.append(str(path))

    def wait(self) -> None:
        for p in self.procs:
            p.wait(30)


def viewport_key(key: str) -> bool:
    """Press ``key`` with the pointer over the 3D viewport (where the panel's modal
    operators listen), as the animator would; False without xdotool."""
    win, area = main_window(), ui_context()["area"]
    # Window coordinates start bottom-left; X's top-left.
    x, y = area.x + area.width // 3, win.height - (area.y + area.height // 2)
    for wid in xdo("search", "--onlyvisible", "--name", "Blender").split()[:1]:
        xdo("mousemove", "--window", wid, str(x), str(y))
    return bool(shutil.which("xdotool")) and subprocess.run(
        [shutil.which("xdotool"), "key", key], capture_output=True, timeout=10
    ).returncode == 0


def press_stop(how: str, cancel_op: Callable) -> None:
    """Stop a running job as the animator would: its Cancel button ("button"), or the
    Esc key over the viewport ("esc")."""
    if how == "esc":
        viewport_key("Escape")
    else:
        call(cancel_op)


def press_escape() -> bool:
    """A real Esc key press in the Blender window (xdotool); False without xdotool."""
    tool = shutil.which("xdotool")
    if not tool:
        return False
    subprocess.run([tool, "search", "--name", "Blender", "windowfocus", "--sync"],
                   capture_output=True, timeout=10)
    return subprocess.run([tool, "key", "Escape"], capture_output=True,
                          timeout=10).returncode == 0


# --- the add-on ---------------------------------------------------------------------------

class Addon:
    """The installed extension's modules (``bl_ext.<repo>.painted_skin``)."""

    def __init__(self, package: str) -> None:
        self.package = package

    def mod(self, name: str):
        return importlib.import_module(f"{self.package}.addon.blender.{name}")


def enable_extension(args: argparse.Namespace) -> Addon:
    import addon_utils

    package = f"bl_ext.{args.repo}.painted_skin"
    if args.zip:
        if not Path(args.zip).is_file():
            raise FileNotFoundError(f"no extension zip at {args.zip}")
        with bpy.context.temp_override(**ui_context()):
            bpy.ops.extensions.package_install_files(filepath=str(Path(args.zip).resolve()),
                                                     repo=args.repo, enable_on_install=True)
    if package not in bpy.context.preferences.addons:
        addon_utils.enable(package, default_set=True, handle_error=None)
    if package not in bpy.context.preferences.addons:
        raise RuntimeError(f"{package} is not enabled: install the zip with --zip")
    return Addon(package)


def bvh_frames(path: str) -> tuple[int, float]:
    """(frames, frame time) from a BVH's MOTION header."""
    frames = frame_time = None
    with open(path, errors="replace") as fh:
        for line in fh:
            key, _, value = line.partition(":")
            if key.strip() == "Frames":
                frames = int(value)
            elif key.strip() == "Frame Time":
                frame_time = float(value)
                break
    return frames, frame_time


def expected_frames(scene, clip: str) -> float:
    frames, dt = bvh_frames(clip)
    return frames * dt * scene.render.fps / scene.render.fps_base


def action_frames(action) -> int:
    lo, hi = action.frame_range
    return int(round(hi - lo)) + 1


# --- the checks: generators that yield the seconds to the next tick -----------------------

Steps = Generator[float, None, None]


def wait_until(check: Check, done: Callable[[], bool], text: Callable[[], str | None],
               timeout: float, what: str) -> Steps:
    deadline = time.monotonic() + timeout
    while not done():
        check.tick(text())
        if time.monotonic() > deadline:
            check.problems.append(f"timed out after {timeout:.0f} s waiting for {what}")
            return
        yield TICK_S
    check.tick(text())


def settle(check: Check, seconds: float) -> Steps:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        check.tick(None)
        yield TICK_S


def check_sidebar(ctx: Context, check: Check) -> Steps:
    show_sidebar()
    yield from wait_until(check, pick_tab, lambda: None, 10, "the sidebar's tabs")
    yield from settle(check, 1.0)
    region = ui_context()["region"]
    check.expect(region.active_panel_category == "Painted Skin",
                 f"the sidebar shows {region.active_panel_category!r}, not Painted Skin")
    pkg = ctx.addon.package
    check.details["restyle_loaded"] = f"{pkg}.addon.blender.restyle_ui" in sys.modules
    check.expect(check.details["restyle_loaded"], "the Restyle step did not load "
                 "(the bundled pyzmq wheel?)")
    ctx.screens.take("sidebar")
    yield from settle(check, 0.5)


def check_retarget(ctx: Context, check: Check) -> Steps:
    ops, scene = ctx.addon.mod("operators"), bpy.context.scene
    importers = ctx.addon.mod("importers")
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
    ops = ctx.addon.mod("operators")
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
    ops, arm = ctx.addon.mod("operators"), ctx.armature
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


def xdo(*args: str) -> str:
    """Run xdotool (the only way to reach a file browser: Blender refuses a context
    override of its temporary screen); its output, or "" without it."""
    tool = shutil.which("xdotool")
    if not tool or not os.environ.get("DISPLAY"):
        return ""
    return subprocess.run([tool, *args], capture_output=True, text=True,
                          timeout=10).stdout


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
    ops, arm = ctx.addon.mod("operators"), ctx.armature
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
    pui = ctx.addon.mod("passes_ui")
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
    status = ctx.addon.mod("backend_status")
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
    status, ui = ctx.addon.mod("backend_status"), ctx.addon.mod("restyle_ui")
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
    panel = ctx.addon.mod("restyle_panel")
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
    ui = ctx.addon.mod("restyle_ui")
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
    skin = ctx.addon.mod("skin_ui")
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
    ops, pui = ctx.addon.mod("operators"), ctx.addon.mod("passes_ui")
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
    ops = ctx.addon.mod("operators")
    importers = ctx.addon.mod("importers")
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


# --- the run ------------------------------------------------------------------------------

class Context:
    """What the checks share."""

    def __init__(self, args: argparse.Namespace, out: Path, tap: ConsoleTap) -> None:
        self.args, self.out, self.tap = args, out, tap
        self.screens = Screens(out)
        self.addon: Addon | None = None
        self.armature = None
        self.backend_up = False


CHECKS: list[tuple[str, Callable[[Context, Check], Steps]]] = [
    ("sidebar", check_sidebar),
    ("retarget", check_retarget),
    ("retarget_cancel", check_retarget_cancel),
    ("retarget_esc", check_retarget_esc),
    ("batch_browser_cancel", check_browser_cancel),
    ("batch", lambda c, k: check_batch(c, k, None)),
    ("batch_cancel", lambda c, k: check_batch(c, k, 2)),
    ("passes", lambda c, k: check_passes(c, k, None)),
    ("passes_cancel", lambda c, k: check_passes(c, k, 2)),
    ("passes_esc", lambda c, k: check_passes(c, k, 2, "esc")),
    ("backend_status", check_backend_status),
    ("backend_start", check_backend_start),
    ("restyle", lambda c, k: check_restyle(c, k, None)),
    ("restyle_cancel", lambda c, k: check_restyle(c, k, 2)),
    ("restyle_esc", lambda c, k: check_restyle(c, k, 2, "esc")),
    ("backend_stop", check_backend_stop),
    ("train", lambda c, k: check_train(c, k, False)),
    ("train_cancel", lambda c, k: check_train(c, k, True)),
    ("train_esc", lambda c, k: check_train(c, k, True, "esc")),
    ("open_file_while_running", check_open_file_while_running),
    ("undo_while_running", check_undo_while_running),
]


def write_json_atomic(path: Path, data: dict) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w") as fh:
        json.dump(data, fh, indent=1)
    os.replace(tmp, path)


def run(ctx: Context) -> Iterator[float]:
    """Every check in order, then the report; yields the seconds to the next tick."""
    report = {"blender": bpy.app.version_string, "binary": bpy.app.binary_path,
              "python": sys.version.split()[0], "checks": [], "screenshots": []}
    try:
        setup = Check("install", ctx.tap)
        yield 1.0  # the window's first draws
        try:
            ctx.addon = enable_extension(ctx.args)
            report["extension"] = ctx.addon.package
            press_escape()  # the splash screen
        except Exception as e:
            setup.problems.append(f"{type(e).__name__}: {e}")
            setup.details["traceback"] = traceback.format_exc()
        report["checks"].append(setup.record(ctx.args.max_gap, take_reports()))
        if ctx.addon is not None:
            for name, fn in CHECKS:
                if ctx.args.only and name not in ctx.args.only:
                    continue
                check = Check(name, ctx.tap)
                try:
                    yield from fn(ctx, check)
                except Exception as e:
                    check.problems.append(f"the check itself failed: {type(e).__name__}: {e}")
                    check.details["traceback"] = traceback.format_exc()
                yield 0.2  # let the last reports reach the Info log
                report["checks"].append(check.record(ctx.args.max_gap, take_reports()))
                write_json_atomic(ctx.out / "report.json", report)
    finally:
        ctx.screens.wait()
        report["screenshots"] = ctx.screens.taken
        report["ok"] = bool(report["checks"]) and all(c["ok"] for c in report["checks"])
        write_json_atomic(ctx.out / "report.json", report)


def main() -> None:
    argv = sys.argv[sys.argv.index("--") + 1:] if "--" in sys.argv else []
    args = parse_args(argv)
    if bpy.app.background:
        sys.exit("gui_check.py needs a window: run Blender without -b (under Xvfb on a "
                 "server)")
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    tap = ConsoleTap(sys.stderr)
    sys.stderr = tap
    ctx = Context(args, out, tap)
    steps = run(ctx)

    def tick() -> float | None:
        try:
            return next(steps)
        except StopIteration:
            pass
        except Exception:
            traceback.print_exc()
        ok = json.loads((out / "report.json").read_text()).get("ok", False) \
            if (out / "report.json").is_file() else False
        print(f"gui_check: {'all checks passed' if ok else 'FAILED'}; report "
              f"{out / 'report.json'}", flush=True)
        sys.stderr.flush()
        if ok:
            bpy.ops.wm.quit_blender()
        else:
            os._exit(1)
        return None

    # Persistent: the checks open a new file, which drops the other timers.
    bpy.app.timers.register(tick, first_interval=1.0, persistent=True)


main()
