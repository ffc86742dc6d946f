"""What a real Blender window showed the panel getting wrong, each kept right here in the
``bpy`` module (the window check itself, ``tests/gui``, needs a Blender binary):

- a fresh scene (the CLI's, the trainer's) keeps the user's preferences — resetting them
  turns the extensions off, and Blender then deletes their wheels (pyzmq);
- a cancelled file browser of the batch retarget is not an error;
- training refuses, before it renders a frame, a Python that has no trainer, and a
  Ctrl-C while it renders ends it with "stopped", the rendered frames kept;
- a local backend that failed to start keeps its reason on the status line until a
  backend answers (the next ping used to replace it two seconds later);
- a Blender without OpenImageIO (a Linux distribution's) gets one line saying so.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


def test_a_fresh_scene_keeps_the_users_preferences(bpy_clean):
    from painted_skin.addon.blender.session import reset_scene

    bpy = bpy_clean
    view = bpy.context.preferences.view
    view.show_tooltips_python = not view.show_tooltips_python
    wanted = view.show_tooltips_python
    bpy.ops.mesh.primitive_cube_add()
    try:
        reset_scene()
        assert view.show_tooltips_python == wanted
        assert len(bpy.data.objects) == 0 and len(bpy.data.meshes) == 0
    finally:
        view.show_tooltips_python = not wanted


def test_cancelling_the_batch_file_browser_is_not_an_error(bpy_clean):
    """Blender calls ``cancel`` when the browser is closed, before any job began."""
    from painted_skin.addon.blender.retarget.operators import SteppedJobModal

    class BrowserClosed(SteppedJobModal):  # the operator as Blender hands it back then
        pass

    BrowserClosed().cancel(bpy_clean.context)


def test_a_job_whose_character_was_removed_says_so_not_a_python_error(bpy_clean):
    """Undo or a file opened while a retarget runs removes the data under it: the report
    says what happened and what to do, not Blender's ReferenceError text."""
    from painted_skin.addon.blender.retarget.operators import stopped_line

    ob = bpy_clean.data.objects.new("Gone", None)
    bpy_clean.data.objects.remove(ob)
    try:
        ob.name  # noqa: B018 - the access Blender refuses once the object is gone
    except ReferenceError as e:
        line = stopped_line("retarget stopped", e)
    assert line.startswith("retarget stopped: the character or its scene was removed")
    assert "run it again" in line and "StructRNA" not in line
    other = stopped_line("retarget stopped", ValueError("bad bone"))
    assert other == "retarget stopped: ValueError: bad bone"


def _python_without_painted_skin(tmp_path: Path) -> Path:
    """A real Python that cannot import painted_skin (no site-packages)."""
    exe = tmp_path / "python"
    exe.write_text(f"#!/bin/sh\nexec {sys.executable} -I -S \"$@\"\n")
    exe.chmod(0o755)
    return exe


def test_training_with_a_python_without_the_trainer_stops_before_rendering(bpy_clean,
                                                                         tmp_path, capsys):
    from painted_skin import cli

    cache = tmp_path / "cache"
    code = cli.main(["train-skin", "--character", "demo", "--out", str(tmp_path / "m"),
                     "--cache", str(cache), "--python",
                     str(_python_without_painted_skin(tmp_path))])
    assert code == 2
    err = capsys.readouterr().err
    assert "has no Painted Skin trainer" in err and "painted-skin[backend]" in err
    assert not cache.exists() and not (tmp_path / "m").exists()  # nothing rendered


def test_ctrl_c_while_the_frames_render_stops_with_them_kept(bpy_clean, tmp_path,
                                                             monkeypatch, capsys):
    from painted_skin.addon.blender.skin import train as T

    rendered = []

    def render_until_interrupted(arm, folder, spec, progress=None, cancelled=None):
        rendered.append(folder)
        raise KeyboardInterrupt  # what Ctrl-C raises now that Python's handler is back

    monkeypatch.setattr(T.D, "build_dataset", render_until_interrupted)
    monkeypatch.setattr(T, "check_trainer", lambda python, env: None)
    req = T.TrainRequest(character="demo", out=tmp_path / "m", cache=tmp_path / "cache",
                         python=sys.executable)
    from painted_skin.demo.character import build_demo_character

    assert T.train_skin(req, characters={"demo": build_demo_character}) == 130 and rendered
    assert "train-skin: stopped before training" in capsys.readouterr().err


def test_a_stop_that_cycles_swallows_still_stops_the_frames(bpy_clean, tmp_path, monkeypatch,
                                                           capsys):
    """Cycles catches a KeyboardInterrupt raised while it renders and goes on (the
    panel's Cancel then stopped one frame a press, never the set): the stop is kept and
    honoured once that frame returns."""
    import os
    import signal

    import numpy as np
    from painted_skin.addon.blender.skin import dataset as D
    from painted_skin.addon.blender.skin import train as T
    from painted_skin.demo.character import build_demo_character

    renders = []

    def cycles_like(scene, frame, folder):
        renders.append(frame)
        try:
            os.kill(os.getpid(), signal.SIGINT)  # the panel's Cancel reaches the child
        except KeyboardInterrupt:
            pass  # what Cycles does with it
        return np.zeros((scene.render.resolution_y, scene.render.resolution_x, 3), np.uint8)

    monkeypatch.setattr(D, "render_beauty", cycles_like)
    monkeypatch.setattr(T, "check_trainer", lambda python, env: None)
    req = T.TrainRequest(character="demo", out=tmp_path / "m", cache=tmp_path / "cache",
                         python=sys.executable, size=64, frames_per_clip=3, samples=1)
    assert T.train_skin(req, characters={"demo": build_demo_character}) == 130
    assert renders == [1]  # the first frame, then the stop: not the whole set
    assert "train-skin: stopped before training" in capsys.readouterr().err


_SIGTERM_SCRIPT = """
import os, signal, sys, tempfile
from pathlib import Path
from painted_skin.addon.blender.skin import train as T
from painted_skin.demo.character import build_demo_character

def render(arm, folder, spec, progress=None, cancelled=None):  # a temp file, then a stop
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".png", dir=folder, prefix=".beauty-")
    os.close(fd)
    try:
        os.kill(os.getpid(), signal.SIGTERM)
    finally:
        Path(tmp).unlink(missing_ok=True)

T.D.build_dataset = render
T.check_trainer = lambda python, env: None
cache = Path(sys.argv[1]) / "cache"
req = T.TrainRequest(character="demo", out=Path(sys.argv[1]) / "m", cache=cache,
                     python=sys.executable)
code = T.train_skin(req, characters={"demo": build_demo_character})
print("CODE", code, sorted(p.name for p in cache.rglob(".beauty-*")))
"""


def test_sigterm_while_the_frames_render_stops_like_ctrl_c(tmp_path):
    """``timeout`` or a farm manager stopping train-skin (SIGTERM) ends it as Ctrl-C does:
    exit 130, the frame being written removed, no zero-byte temp file left in the cache."""
    proc = subprocess.run([sys.executable, "-c", _SIGTERM_SCRIPT, str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "CODE 130 []" in proc.stdout
    assert "train-skin: stopped before training" in proc.stderr


def test_a_failed_start_stays_on_the_status_line_until_a_backend_answers(bpy_clean):
    from painted_skin.addon.blender.restyle.backend_status import LINE, LIVE, show_failure
    from painted_skin.addon.core.backend.status import BackendStatus

    saved = dict(LINE)
    try:
        show_failure("local backend failed to start", "no module named torch")
        LIVE.record(BackendStatus(url="tcp://127.0.0.1:5555", error="no answer"))
        assert LINE["text"] == "local backend failed to start"
        assert LINE["log_tail"] == "no module named torch"
        LIVE.record(BackendStatus(url="tcp://127.0.0.1:5555", devices=["cpu"],
                                  pipelines=["echo"]))
        assert LINE["ok"] and LINE["text"] != "local backend failed to start"
        assert LINE["log_tail"] == ""
    finally:
        LINE.clear()
        LINE.update(saved)


def test_a_blender_without_openimageio_is_told_in_one_line(bpy_clean, monkeypatch,
                                                           tmp_path):
    from painted_skin.addon.blender.passes import image_io

    monkeypatch.setattr(image_io, "_OIIO", None)
    monkeypatch.setitem(sys.modules, "OpenImageIO", None)  # import fails
    monkeypatch.setattr(bpy_clean.utils, "resource_path", lambda kind: str(tmp_path))
    with pytest.raises(image_io.MissingOpenImageIO, match="python3-openimageio"):
        image_io.oiio()


def test_check_in_a_window_never_waits_on_the_probe(bpy_clean, monkeypatch):
    """*Check* runs the Backend Python (seconds: it imports torch); in a window it returns
    at once and a timer collects the answer (the UI froze for 10 s before)."""
    import threading
    from types import SimpleNamespace

    from painted_skin.addon.blender import preferences as P
    from painted_skin.addon.core.backend.probe import ProbeResult

    release, started = threading.Event(), threading.Event()

    def slow_probe(python, **_):
        started.set()
        assert release.wait(60)
        return ProbeResult(python=python, ok=True)

    monkeypatch.setattr(P, "probe_python", slow_probe)

    class WM:
        def event_timer_add(self, step, window=None):
            return object()

        def event_timer_remove(self, timer):
            pass

        def modal_handler_add(self, op):
            pass

    class Op:
        op = P.PS_OT_backend_check
        invoke, modal, execute = op.invoke, op.modal, op.execute
        _python, _report = op._python, op._report
        python, reports = "/some/python", []

        def report(self, kind, text):
            self.reports.append((kind, text))

    ctx = SimpleNamespace(window=object(), window_manager=WM(), screen=None,
                          preferences=bpy_clean.context.preferences)
    op = Op()
    assert op.invoke(ctx, None) == {"RUNNING_MODAL"}  # returned while the probe runs
    assert started.wait(60) and P.CHECKS["/some/python"] == "checking…"
    tick = SimpleNamespace(type="TIMER")
    assert op.modal(ctx, tick) == {"PASS_THROUGH"}  # still running: the UI goes on
    release.set()
    op._thread.join(60)
    assert op.modal(ctx, tick) == {"FINISHED"}
    assert P.CHECKS["/some/python"] != "checking…" and op.reports


def test_a_greyed_out_button_says_why_in_the_panel_and_the_selection_fills_character(
        bpy_clean):
    """The reason a main button is greyed out is a line under it (its poll's own words,
    not only a hover tooltip), and the selected character's armature fills Character."""
    import painted_skin
    from painted_skin.addon.blender.classes import greyed_out_because
    from painted_skin.addon.blender.retarget.operators import PS_OT_retarget
    from painted_skin.demo.character import build_demo_character

    painted_skin.register()
    try:
        s = bpy_clean.context.scene.painted_skin_retarget
        assert "Character field" in greyed_out_because(PS_OT_retarget, bpy_clean.context)
        arm = build_demo_character()
        body = next(o for o in bpy_clean.data.objects if o.type == "MESH" and o.parent is arm)
        bpy_clean.context.view_layer.objects.active = body  # a click on the body
        assert bpy_clean.ops.painted_skin.use_selected_character() == {"FINISHED"}
        assert s.target_object == arm
        assert "no clip chosen" in greyed_out_because(PS_OT_retarget, bpy_clean.context)
    finally:
        painted_skin.unregister()
