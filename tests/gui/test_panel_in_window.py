"""The panel's modal operators in a real Blender window: ``tools/gui_check.py`` runs
inside a Blender with a GUI (not the bpy module, whose timers never fire) and drives
Retarget (progress, Cancel), the batch retarget through its file browser, Render
Passes (progress, Cancel), the Backend section's live status and Start Local Backend
from ``bpy.app.timers`` callbacks, as clicks in the sidebar would; each check here
reads its record in the driver's report.

Needs ``PAINTED_SKIN_BLENDER`` (a Blender >= 5.0 binary with a GUI, or a wrapper that
runs one) and a display: ``PAINTED_SKIN_DISPLAY`` / ``DISPLAY``, else an ``Xvfb`` on the
PATH is started. Optional: ``PAINTED_SKIN_EXTENSION_ZIP`` (a prebuilt zip; default:
built here for that Blender's family), ``PAINTED_SKIN_BACKEND_PYTHON`` (default:
``.venv-backend/bin/python`` when present). Skipped without them (CI has no Blender).
On a Linux host without a GUI Blender, ``tools/gui_blender.sh`` makes one (Debian's, in
a chroot, on Xvfb :99); then ``PAINTED_SKIN_BLENDER=<dir>/blender
PAINTED_SKIN_DISPLAY=:99 make test-gui``."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DRIVER = REPO / "tools" / "gui_check.py"
BLENDER = os.environ.get("PAINTED_SKIN_BLENDER", "")
CACHE = Path(os.environ.get("PAINTED_SKIN_TEST_CACHE",
                            Path.home() / ".cache" / "painted-skin-tests"))
# Every check the driver runs, in its order (a check missing from the report fails).
CHECKS = ("install", "sidebar", "retarget", "retarget_cancel", "retarget_esc",
          "batch_browser_cancel", "batch", "batch_cancel", "passes", "passes_cancel",
          "passes_esc", "backend_status", "backend_start", "restyle", "restyle_cancel",
          "restyle_esc", "backend_stop", "train", "train_cancel", "train_esc",
          "open_file_while_running", "undo_while_running", "panel_shots",
          "preview_keeps_the_editors", "engine_viewport", "engine_f12",
          "engine_starts_its_backend")

pytestmark = [pytest.mark.slow, pytest.mark.shared_data]


def _blender_or_skip() -> str:
    if not BLENDER:
        pytest.skip("PAINTED_SKIN_BLENDER is not set: point it at a Blender >= 5.0 with a "
                    "GUI to check the panel in a real window")
    path = shutil.which(BLENDER)
    if path is None:
        pytest.skip(f"PAINTED_SKIN_BLENDER={BLENDER!r} is not an executable")
    return path


@pytest.fixture(scope="module")
def display():
    """A display Blender can open a window on: the given one, or a fresh Xvfb."""
    given = os.environ.get("PAINTED_SKIN_DISPLAY") or os.environ.get("DISPLAY")
    if given:
        yield given
        return
    xvfb = shutil.which("Xvfb")
    if xvfb is None:
        pytest.skip("no display: set PAINTED_SKIN_DISPLAY (or DISPLAY), or install Xvfb")
    read, write = os.pipe()
    proc = subprocess.Popen([xvfb, "-displayfd", str(write), "-screen", "0", "1600x1000x24",
                             "-nolisten", "tcp"], pass_fds=(write,),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.close(write)
    with os.fdopen(read) as fh:
        number = fh.readline().strip()
    if not number:
        proc.kill()
        pytest.skip("Xvfb did not start")
    yield f":{number}"
    proc.terminate()
    proc.wait(10)


def blender_version(blender: str) -> tuple[int, int]:
    out = subprocess.run([blender, "--version"], capture_output=True, text=True,
                         timeout=120).stdout
    m = re.search(r"Blender (\d+)\.(\d+)", out)
    assert m, f"{blender} --version printed no version:\n{out}"
    return int(m[1]), int(m[2])


def extension_zip(blender: str, out: Path) -> Path:
    """The given zip, or one built for ``blender``'s family (5.0: CPython 3.11; later:
    3.13), without numba: its wheels are tied to one CPython, which a distribution's
    Blender (its system Python) may not match."""
    given = os.environ.get("PAINTED_SKIN_EXTENSION_ZIP")
    if given:
        return Path(given)
    family = "5.0" if blender_version(blender) < (5, 1) else "5.1"
    proc = subprocess.run([sys.executable, str(REPO / "tools" / "build_extension.py"),
                           "--blender", family, "--platform", "linux-x64",
                           "--output-dir", str(out), "--stage-dir", str(out / "stage"),
                           "--cache-dir", str(CACHE / "wheels")],
                          capture_output=True, text=True, timeout=900, cwd=REPO)
    if proc.returncode != 0 and "could not download" in proc.stderr:
        pytest.skip(f"the package index cannot be reached: {proc.stderr.splitlines()[0]}")
    assert proc.returncode == 0, f"build_extension.py failed:\n{proc.stdout}\n{proc.stderr}"
    (zip_path,) = out.glob("*.zip")
    return zip_path


@pytest.fixture(scope="module")
def run(request, tmp_path_factory):
    """The driver's run: (exit code, report, console output)."""
    blender = _blender_or_skip()
    if sys.platform != "linux":
        pytest.skip("the driver builds and installs the linux-x64 zip")
    display = request.getfixturevalue("display")
    data = Path(os.environ.get("PAINTED_SKIN_SHARED", REPO.parent / "shared")) / "data"
    if not data.is_dir():
        pytest.skip("../shared/data is absent")
    tmp = tmp_path_factory.mktemp("gui")
    zip_path = extension_zip(blender, tmp / "zip")
    backend = os.environ.get("PAINTED_SKIN_BACKEND_PYTHON",
                             str(REPO / ".venv-backend" / "bin" / "python"))
    clips = data / "bvh" / "cmu_motionbuilder_friendly"
    cmd = [blender, "--factory-startup", "--python-exit-code", "1", "--python", str(DRIVER),
           "--", "--out", str(tmp / "out"), "--zip", str(zip_path),
           "--character", str(data / "characters" / "human-male.glb"),
           "--clip", str(clips / "01_01.bvh"),
           "--batch-clips", str(clips / "02_01.bvh"), str(clips / "05_06.bvh")]
    if Path(backend).is_file():
        cmd += ["--backend-python", backend]
    # Blender's user files (the installed extension) go to a fresh folder, never ~/.config.
    env = {**os.environ, "DISPLAY": display, "BLENDER_USER_RESOURCES": str(tmp / "res"),
           "PAINTED_SKIN_SHARED": str(data.parent)}
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1500)
    report_path = tmp / "out" / "report.json"
    assert report_path.is_file(), (f"the driver wrote no report (exit {proc.returncode}, "
                                   f"{time.monotonic() - t0:.0f} s):\n{proc.stdout[-4000:]}"
                                   f"\n{proc.stderr[-4000:]}")
    return proc.returncode, json.loads(report_path.read_text()), proc.stdout + proc.stderr


def _explain(check: dict) -> str:
    lines = [f"{check['name']}: " + "; ".join(check["problems"])]
    lines += [f"  tick {t:7.2f} s  {text}" for t, text in check["ticks"]]
    lines += [f"  report: {r}" for r in check["reports"]]
    lines += [tb for tb in check["tracebacks"]]
    if check.get("traceback"):
        lines.append(check["traceback"])
    return "\n".join(lines)


@pytest.mark.parametrize("name", CHECKS)
def test_check_passes_in_a_real_window(run, name):
    _, report, console = run
    by_name = {c["name"]: c for c in report["checks"]}
    assert name in by_name, (f"the driver did not run {name!r} (it ran "
                             f"{', '.join(by_name)}):\n{console[-3000:]}")
    check = by_name[name]
    assert check["ok"], _explain(check)


def test_modal_operators_show_progress_and_keep_the_ui_responsive(run):
    """Each long operator changed its panel text on several ticks (it ran modally) and
    no tick waited longer than one stage of work."""
    _, report, _ = run
    by_name = {c["name"]: c for c in report["checks"]}
    for name in ("retarget", "batch", "passes"):
        check = by_name.get(name)
        assert check is not None, f"{name} did not run"
        assert len(check["ticks"]) >= 3, _explain(check)
        assert check["max_gap_s"] < 30, _explain(check)


def test_driver_exits_zero_only_when_every_check_passed(run):
    code, report, console = run
    assert report["ok"] == all(c["ok"] for c in report["checks"])
    assert (code == 0) == report["ok"], f"exit code {code}, report ok={report['ok']}:\n" \
                                        f"{console[-3000:]}"
    for shot in report["screenshots"]:
        assert Path(shot).is_file() and Path(shot).stat().st_size > 0, shot
