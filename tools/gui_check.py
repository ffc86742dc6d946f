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
quits with exit code 0 only when every check passed. ``tests/gui`` runs it. The checks
live in ``gui_checks_retarget.py`` and ``gui_checks_render.py``, what they share in
``gui_harness.py``; this script orders them and reports.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path

import bpy

# The check modules sit beside this script (Blender runs it as a file, not a package).
sys.path.insert(0, str(Path(__file__).resolve().parent))
from gui_checks_engine import (  # noqa: E402
    check_engine_f12,
    check_engine_starts_its_backend,
    check_engine_viewport,
)
from gui_checks_layout import check_panel_shots, check_preview_keeps_the_editors  # noqa: E402
from gui_checks_render import (  # noqa: E402
    check_backend_start,
    check_backend_status,
    check_backend_stop,
    check_open_file_while_running,
    check_passes,
    check_restyle,
    check_train,
    check_undo_while_running,
)
from gui_checks_retarget import (  # noqa: E402
    check_batch,
    check_browser_cancel,
    check_retarget,
    check_retarget_cancel,
    check_retarget_esc,
    check_sidebar,
)
from gui_harness import (  # noqa: E402
    DATA,
    Check,
    ConsoleTap,
    Context,
    Steps,
    enable_extension,
    press_escape,
    take_reports,
)


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
    # Before the two that open a file: the panel as it is with the character in it.
    ("panel_shots", check_panel_shots),
    ("open_file_while_running", check_open_file_while_running),
    ("undo_while_running", check_undo_while_running),
    ("preview_keeps_the_editors", check_preview_keeps_the_editors),
    # Last: they open the demo shot in place of the retargeted character.
    ("engine_viewport", check_engine_viewport),
    ("engine_f12", check_engine_f12),
    ("engine_starts_its_backend", check_engine_starts_its_backend),
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
