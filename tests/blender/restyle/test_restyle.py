"""Restyle a real shot through a live backend: every frame written, re-runs
resume, the operators and the local-backend launcher work headless."""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import demo_walk_blend
from test_client import free_url, serve_command, start_backend, stop


@pytest.fixture(scope="module")
def shot_blend(tmp_path_factory) -> Path:
    """The demo character walking (12 frames), camera following."""
    return demo_walk_blend(tmp_path_factory.mktemp("restyle_shot"), frames=12)


@pytest.fixture(scope="module")
def backend_url():
    url = free_url()
    proc = start_backend(url)
    yield url
    stop(proc)


def open_shot(bpy, path: Path):
    bpy.ops.wm.open_mainfile(filepath=str(path))
    return bpy.context.scene


def test_restyle_shot_writes_every_frame_and_resumes(bpy_clean, shot_blend, backend_url,
                                                     tmp_path):
    from painted_skin.addon.blender.passes.geometry import ShotError
    from painted_skin.addon.blender.passes.image_io import read_image
    from painted_skin.addon.blender.restyle.loop import (
        RestyleRequest,
        restyle_shot,
        result_path,
        shot_frames,
    )
    from painted_skin.backend.pipelines.echo import echo_image
    from painted_skin.backend.server import frame_seed

    scene = open_shot(bpy_clean, shot_blend)
    frames = range(2, 8)
    seen: list[tuple[int, int, int]] = []
    s = restyle_shot(scene, RestyleRequest.make(tmp_path, url=backend_url, frames=frames,
                                                size=(48, 64), seed=5
                                               ), progress=lambda *p: seen.append(p))
    assert (s["written"], s["skipped"], s["frames"]) == (6, 0, 6)
    assert seen[-1][:2] == (6, 6)
    for f in frames:
        assert read_image(result_path(tmp_path, f)).shape == (64, 48, 3)
    # The file is the echo picture of that frame's passes under its frame seed.
    f, wire = next(shot_frames(scene, [4], 48, 64))
    np.testing.assert_array_equal(read_image(result_path(tmp_path, 4)),
                                  echo_image(wire, frame_seed(5, 4), 48, 64))
    assert wire["mask"].any() and wire["skeleton"].any()

    # The shot's depth range travels with the options (the backend must not fix it
    # from whichever frame it sees first) and is kept for resumed runs.
    import json

    opts = json.loads((tmp_path / "restyle.json").read_text())["options"]
    assert 0 < opts["depth_near"] < opts["depth_far"]

    # Re-run: only the missing frames are computed; the others are untouched.
    for f in (3, 6):
        result_path(tmp_path, f).unlink()
    stamp = {f: result_path(tmp_path, f).stat().st_mtime_ns for f in (2, 4, 5, 7)}
    s = restyle_shot(scene, RestyleRequest.make(tmp_path, url=backend_url, frames=frames,
                                                size=(48, 64), seed=5))
    assert (s["written"], s["skipped"]) == (2, 4)
    assert all(result_path(tmp_path, f).stat().st_mtime_ns == t for f, t in stamp.items())
    assert json.loads((tmp_path / "restyle.json").read_text())["options"] == opts
    assert restyle_shot(scene, RestyleRequest.make(tmp_path, url=backend_url, frames=frames,
                                                   size=(48, 64), seed=5))["written"] == 0
    with pytest.raises(ShotError, match="other settings"):
        restyle_shot(scene, RestyleRequest.make(tmp_path, url=backend_url, frames=frames,
                                                size=(48, 64), seed=6))


def test_a_rerun_with_other_reference_images_refuses(bpy_clean, shot_blend, backend_url,
                                                     tmp_path):
    """The reference images are a shot setting: frames painted with one set are never
    resumed with another (nor with none); the same images resume."""
    from painted_skin.addon.blender.passes.geometry import ShotError
    from painted_skin.addon.blender.restyle.loop import RestyleRequest, restyle_shot

    scene = open_shot(bpy_clean, shot_blend)
    front = np.full((8, 8, 3), 40, np.uint8)
    side = np.full((8, 8, 3), 90, np.uint8)
    run = {"frames": range(2, 4), "size": (48, 64), "seed": 5}
    assert restyle_shot(scene, RestyleRequest.make(tmp_path, url=backend_url, refs=[front], **run
                                                  ))["written"] == 2
    for refs in ([side], [front, side], []):
        with pytest.raises(ShotError, match=r"other settings \(refs\)"):
            restyle_shot(scene, RestyleRequest.make(tmp_path, url=backend_url, refs=refs,
                                                    frames=range(2, 5), size=(48, 64), seed=5))
    again = restyle_shot(scene, RestyleRequest.make(tmp_path, url=backend_url, refs=[front.copy()],
                                                    frames=range(2, 5), size=(48, 64), seed=5))
    assert (again["written"], again["skipped"]) == (1, 2)


@pytest.fixture
def restyle_registered(bpy_clean):
    from painted_skin.addon.blender.restyle import ui as restyle_ui

    restyle_ui.register()
    yield bpy_clean
    restyle_ui.unregister()


def test_operators_panel_and_results(restyle_registered, shot_blend, backend_url, tmp_path):
    from painted_skin.addon.blender.restyle import loop as restyle
    from painted_skin.addon.blender.restyle import ui as restyle_ui
    from painted_skin.addon.blender.restyle import viewer as restyle_viewer

    bpy = restyle_registered
    assert restyle.PS_AddonPreferences.bl_idname == "painted_skin"
    scene = open_shot(bpy, shot_blend)
    scene.frame_start, scene.frame_end = 1, 3
    s = scene.painted_skin_restyle
    s.url, s.width, s.height, s.out_dir = backend_url, 32, 32, str(tmp_path)
    assert bpy.ops.painted_skin.backend_connect() == {"FINISHED"}
    assert restyle_ui._STATUS["text"].startswith(backend_url)
    assert bpy.ops.painted_skin.restyle() == {"FINISHED"}
    assert all(restyle.frame_done(tmp_path, f) for f in (1, 2, 3))
    img = restyle_viewer.show_results(bpy.context, tmp_path, [1, 2, 3], use_vse=True)
    assert img.source == "SEQUENCE" and img.filepath.endswith("0001.png")
    strip = scene.sequence_editor.strips[restyle_viewer.VSE_STRIP]
    assert len(strip.elements) == 3 and strip.frame_final_duration == 3
    # A missing frame leaves a gap in the edit: later frames keep their time.
    restyle.result_path(tmp_path, 2).unlink()
    restyle_viewer.show_results(bpy.context, tmp_path, [1, 2, 3], use_vse=True)
    strips = sorted((s.frame_final_start, len(s.elements)) for s in scene.sequence_editor.strips
                    if s.name.startswith(restyle_viewer.VSE_STRIP))
    assert strips == [(1, 1), (3, 1)]
    s.url = free_url()  # nobody there
    with pytest.raises(RuntimeError, match="no answer from the backend"):
        bpy.ops.painted_skin.backend_connect(timeout=0.5)
    assert restyle_ui._STATUS["text"].startswith("no backend")


def test_start_local_backend(tmp_path):
    from painted_skin.addon.blender.client import local_backend
    from painted_skin.addon.blender.client.backend_client import BackendClient, BackendError
    from painted_skin.addon.blender.restyle import loop as restyle

    url = free_url()
    try:
        pong = restyle.start_local_backend(sys.executable, url, timeout_s=30)
        assert pong["type"] == "pong"
        proc = local_backend.LOCAL.proc
        assert proc.args == serve_command(url)
        # The on_dead hook brings back a local backend that died.
        proc.kill()
        proc.wait(5)
        restyle.restart_local_if_dead()
        with BackendClient(url, timeout_s=20) as c:
            assert c.ping()["type"] == "pong"
    finally:
        restyle.stop_local_backend()
    with pytest.raises(BackendError, match=r"exited with code 3(.|\n)*boom"):
        restyle.start_local_backend(sys.executable, url, timeout_s=10, command=[
            sys.executable, "-c", "import sys; print('boom', flush=True); sys.exit(3)"])


class _WM:
    def __init__(self):
        self.progress: list[int] = []
        self.timers = 0

    def progress_begin(self, lo, hi):
        self.total = hi

    def progress_update(self, v):
        self.progress.append(v)

    def progress_end(self):
        pass

    def event_timer_add(self, step, window=None):
        self.timers += 1
        return object()

    def event_timer_remove(self, timer):
        self.timers -= 1

    def modal_handler_add(self, op):
        pass


class _Workspace:
    def __init__(self):
        self.status: list[str | None] = []

    def status_text_set(self, text):
        self.status.append(text)


def _fake_modal_run(bpy, cancel_after: int | None = None) -> tuple[set, object, object]:
    """Drive the modal operator's methods with a fake window context (the bpy
    module has no windows): TIMER events until it finishes, Esc when asked."""
    from types import SimpleNamespace

    from painted_skin.addon.blender.restyle import ui as restyle_ui

    class Op:
        op = restyle_ui.PS_OT_restyle
        invoke, modal, _finish, _release = op.invoke, op.modal, op._finish, op._release
        _on_result, _tell = op._on_result, op._tell
        _timer = None
        reports: list = []

        def report(self, kind, text):
            self.reports.append((kind, text))

    ctx = SimpleNamespace(window=object(), window_manager=_WM(), workspace=_Workspace(),
                          scene=bpy.context.scene, screen=None,
                          preferences=bpy.context.preferences)
    op = Op()
    ret = op.invoke(ctx, SimpleNamespace(type="NONE", value="NOTHING"))
    deadline = time.monotonic() + 20
    while ret == {"RUNNING_MODAL"} and time.monotonic() < deadline:
        time.sleep(0.01)  # the event timer's period, shortened
        if cancel_after is not None and op._done >= cancel_after and not op._client.shot.cancelled:
            ret = op.modal(ctx, SimpleNamespace(type="ESC", value="PRESS"))
        ret = op.modal(ctx, SimpleNamespace(type="TIMER", value="NOTHING"))
    return ret, op, ctx


def test_modal_operator_progress_cancel_resume(restyle_registered, shot_blend, backend_url,
                                              tmp_path):
    from painted_skin.addon.blender.restyle import loop as restyle
    from painted_skin.addon.blender.restyle import viewer as restyle_viewer

    bpy = restyle_registered
    scene = open_shot(bpy, shot_blend)
    scene.frame_start, scene.frame_end = 1, 8
    s = scene.painted_skin_restyle
    s.url, s.width, s.height, s.out_dir = backend_url, 32, 32, str(tmp_path)
    ret, op, ctx = _fake_modal_run(bpy, cancel_after=2)
    assert ret == {"CANCELLED"} and "stopped" in op.reports[-1][1]
    done = [f for f in range(1, 9) if restyle.frame_done(tmp_path, f)]
    assert 2 <= len(done) < 8
    assert ctx.window_manager.timers == 0 and ctx.workspace.status[-1] is None
    assert any(t and "Esc to stop" in t for t in ctx.workspace.status)
    assert scene.frame_current == 1
    ret, op, ctx = _fake_modal_run(bpy)  # resumes: only the rest is computed
    assert ret == {"FINISHED"}
    assert all(restyle.frame_done(tmp_path, f) for f in range(1, 9))
    assert ctx.window_manager.progress[0] == len(done)
    assert bpy.data.images[restyle_viewer.RESULT_IMAGE].source == "SEQUENCE"


def test_cli_restyle_headless(serve, bpy_clean, tmp_path, capsys) -> None:
    """``painted-skin restyle``: a TD's / farm's way to restyle a shot without Blender's UI."""
    from conftest import demo_walk_blend
    from painted_skin import cli

    shot = demo_walk_blend(tmp_path / "shot", frames=6)
    _, ep = serve()
    out = tmp_path / "r"
    argv = ["restyle", str(shot), "--out", str(out), "--frames", "2-4", "--size", "32x32",
            "--pipeline", "echo", "--url", ep, "--seed", "3", "--options", '{"steps": 2}']
    assert cli.main(argv) == 0
    printed = capsys.readouterr().out
    assert sorted(p.name for p in (out / "restyled").iterdir()) == [
        "0002.png", "0003.png", "0004.png"]
    assert printed.count("Saved: '") == 3 and "3/3 frames done (3 written now" in printed
    assert cli.main(argv) == 0 and "(0 written now" in capsys.readouterr().out  # resumes
    assert cli.main([*argv[:-1], "{not json"]) == 2
    assert "--options" in capsys.readouterr().err
    dead = ["restyle", str(shot), "--out", str(tmp_path / "d"), "--frames", "1-1", "--size",
            "32x32", "--pipeline", "echo", "--url", "tcp://127.0.0.1:9", "--timeout", "1"]
    assert cli.main(dead) == 1
    assert "--start-backend" in capsys.readouterr().err


def test_panel_fields_become_pipeline_options(bpy_clean) -> None:
    import painted_skin
    from painted_skin.addon.blender.passes.geometry import ShotError
    from painted_skin.addon.blender.restyle.settings import restyle_args

    painted_skin.register()
    try:
        s = bpy_clean.context.scene.painted_skin_restyle
        s.pipeline, s.model, s.steps, s.temporal, s.cross_frame = "sd15-controlnet", "tiny", 6, \
            False, "first"
        s.extra_options = '{"scheduler": "lcm", "steps": 8}'
        args = restyle_args(s)
        assert args["pipeline"] == "sd15-controlnet"
        assert args["options"] == {"steps": 8, "temporal": False, "model": "tiny",
                                   "cross_frame": "first", "scheduler": "lcm"}
        s.extra_options = "[1, 2]"
        with pytest.raises(ShotError, match="JSON object"):
            restyle_args(s)
        s.extra_options = "{oops"
        with pytest.raises(ShotError, match="not valid JSON"):
            restyle_args(s)
    finally:
        painted_skin.unregister()


def test_canonical_passes_travel_to_the_backend_in_their_wire_dtypes(bpy_clean, shot_blend,
                                                                     backend_url):
    """A skin-style frame carries rest position, UV, world normal, view direction and
    light visibility; the backend accepts them (its pass table) and answers."""
    from painted_skin.addon.blender.client.backend_client import BackendClient
    from painted_skin.addon.blender.restyle.loop import shot_frames, wire_passes
    from painted_skin.backend.server import PASSES

    scene = open_shot(bpy_clean, shot_blend)
    f, wire = next(shot_frames(scene, [3], 40, 32, passes=wire_passes("skin")))
    assert set(wire_passes("skin")) - {"skeleton"} <= set(wire) | {"skeleton"}
    for name, (dtype, ch) in PASSES.items():
        assert wire[name].dtype == np.dtype(dtype), name
        assert wire[name].shape == ((32, 40, ch) if ch else (32, 40)), name
    on = wire["mask"] > 0
    assert np.abs(wire["rest_position"][on]).sum(axis=-1).min() > 0  # every pixel placed
    assert set(np.unique(wire["uv"][..., 2])) <= {0.0, 1.0}
    assert np.allclose(np.linalg.norm(wire["view_dir"][on].astype(np.float32), axis=-1), 1,
                       atol=2e-3)
    assert not wire["rest_position"][~on].any()
    assert set(np.unique(wire["light_visibility"])) <= {0, 255}
    results = []
    with BackendClient(backend_url, timeout_s=20) as c:
        c.open("echo", 40, 32)
        c.run_shot(iter([(f, wire)]), results.append)
    assert [r.frame for r in results] == [3]
    assert "normal_world" not in next(shot_frames(scene, [3], 40, 32))[1]  # echo: not sent


def test_start_local_backend_on_an_ipc_url(tmp_path):
    """An ``ipc://`` URL (a socket path, no port) starts a local backend too: its log
    file is named from the path, not opened inside a folder that does not exist."""
    from painted_skin.addon.blender.client import local_backend
    from painted_skin.addon.blender.client.backend_client import BackendClient
    from painted_skin.addon.blender.restyle import loop as restyle

    url = f"ipc://{tmp_path}/backend.sock"
    try:
        assert restyle.start_local_backend(sys.executable, url, timeout_s=30)["type"] == "pong"
        assert local_backend.LOCAL.log.parent == Path(tempfile.gettempdir())
        with BackendClient(url, timeout_s=20) as c:
            assert c.ping()["type"] == "pong"
    finally:
        restyle.stop_local_backend()
