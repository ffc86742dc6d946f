"""What the window checks share: the report of each check (:class:`Check`), the
window and its sidebar, keys and screenshots, the installed add-on, and the waits a
check yields from. Imported by ``gui_check.py`` and its check modules, inside Blender."""

from __future__ import annotations

import argparse
import importlib
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Generator
from pathlib import Path

import bpy

DATA = Path(os.environ.get("PAINTED_SKIN_SHARED", "/work/shared")) / "data"
TICK_S = 0.05  # the driver's own timer: a long gap between its ticks is a frozen UI



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


def xdo(*args: str) -> str:
    """Run xdotool (the only way to reach a file browser: Blender refuses a context
    override of its temporary screen); its output, or "" without it."""
    tool = shutil.which("xdotool")
    if not tool or not os.environ.get("DISPLAY"):
        return ""
    return subprocess.run([tool, *args], capture_output=True, text=True,
                          timeout=10).stdout


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



# --- the run ---------------------------------------------------------------------------

class Context:
    """What the checks share."""

    def __init__(self, args: argparse.Namespace, out: Path, tap: ConsoleTap) -> None:
        self.args, self.out, self.tap = args, out, tap
        self.screens = Screens(out)
        self.addon: Addon | None = None
        self.armature = None
        self.backend_up = False

