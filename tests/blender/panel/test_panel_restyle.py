"""The Restyle panel as an animator drives it, in the real ``bpy`` module against a live
backend: the live Backend section, the pipeline and model dropdowns, reference images and
diffusion controls sent exactly as the CLI sends them, presets, progress and Cancel in the
panel, the Results buttons, and settings that survive save and reload."""

from __future__ import annotations

import json
import textwrap
import time
from pathlib import Path

import bpy  # the old settings class below names bpy.props in its annotations
import numpy as np
import pytest
from conftest import demo_walk_blend
from test_client import free_url
from test_panel import Drawn


@pytest.fixture(scope="module")
def shot_blend(tmp_path_factory) -> Path:
    """The demo character walking (4 frames), camera following."""
    return demo_walk_blend(tmp_path_factory.mktemp("panel_restyle_shot"), frames=4)


@pytest.fixture
def addon(bpy_clean):
    import painted_skin
    from painted_skin.addon.blender.restyle import backend_status

    painted_skin.register()
    backend_status.LIVE.status = None
    backend_status.LIVE.gate.__init__(backend_status.LIVE.gate.interval_s)
    try:
        yield bpy_clean
    finally:
        painted_skin.unregister()


@pytest.fixture
def opens(monkeypatch) -> list:
    """Every OPEN an in-process backend accepted (its parsed request), in order."""
    from painted_skin.backend import sessions

    seen: list = []
    real = sessions.parse_open

    def spy(msg, default):
        req = real(msg, default)
        seen.append(req)
        return req

    monkeypatch.setattr(sessions, "parse_open", spy)
    return seen


def _open_shot(bpy, path: Path, frames: tuple[int, int] = (1, 3)):
    bpy.ops.wm.open_mainfile(filepath=str(path))
    scene = bpy.context.scene
    scene.frame_start, scene.frame_end = frames
    return scene


def _wait(thread) -> None:
    assert thread is not None, "no ping was started"
    thread.join(5)
    assert not thread.is_alive()


# ------------------------------------------------------------------- backend section, live

def test_timer_pings_without_blocking_and_the_panel_reads_the_reply(addon, serve) -> None:
    from painted_skin.addon.blender.restyle import backend_status
    from painted_skin.addon.blender.restyle import ui as restyle_ui

    bpy = addon
    _, url = serve()
    s = bpy.context.scene.painted_skin_restyle
    s.url = url
    t0 = time.monotonic()
    assert backend_status.tick() == backend_status.TICK_S
    assert time.monotonic() - t0 < 0.2  # the ping runs in a thread
    _wait(backend_status.LIVE._thread)
    st = backend_status.LIVE.status
    assert st.ok and st.url == url and "echo" in st.pipelines and st.devices == ("cpu",)
    assert st.queue_depth == 0
    assert restyle_ui._STATUS["text"].startswith(f"{url}: v") and restyle_ui._STATUS["ok"]
    # Not more than every ~2 s: the next tick right away sends nothing.
    assert backend_status.poll_backend(url) is None

    # A backend that went away: the line says so after the next ping, the UI never waits.
    s.url = dead = free_url()
    backend_status.LIVE.gate._last = None  # 2 s later
    t0 = time.monotonic()
    backend_status.tick()
    assert time.monotonic() - t0 < 0.2
    _wait(backend_status.LIVE._thread)
    assert not backend_status.LIVE.status.ok
    assert restyle_ui._STATUS["text"] == f"no backend at {dead}"


def test_status_reply_becomes_dropdown_items(serve) -> None:
    from painted_skin.addon.blender.client.backend_client import BackendClient
    from painted_skin.addon.core.backend.status import (
        CUSTOM,
        DEFAULT_ITEM,
        FALLBACK_PIPELINES,
        model_items,
        parse_status,
        pipeline_items,
    )
    from painted_skin.backend.pipelines import registry
    from painted_skin.backend.skin import registry as skin_registry

    _, url = serve()
    with BackendClient(url, timeout_s=5) as c:
        reply = c.status()
    st = parse_status(url, reply)
    ids = [i for i, *_ in pipeline_items(st, "echo")]
    assert ids == [*reply["pipelines"], CUSTOM]
    assert ids[:-1] == registry.names()
    # A value saved in the .blend that this backend lacks stays selectable.
    assert [i for i, *_ in pipeline_items(st, "mine")][-2:] == ["mine", CUSTOM]
    # Before any reply: the built-in names, which are the backend's own.
    assert [i for i, *_ in pipeline_items(None, "echo")] == [*FALLBACK_PIPELINES, CUSTOM]
    assert set(registry.register_builtin()) <= set(FALLBACK_PIPELINES)
    assert skin_registry.DEFAULT_MODEL in [i for i, *_ in model_items(None, "skin", "")]
    # The backend's registries name its models; loaded ones join them (loaded_models).
    assert "demo" in st.available["skin"] and st.models == {}
    st = parse_status(url, {**reply, "loaded_models": ['skin@cpu model="scene"', "echo@cpu"],
                            "models": {"skin": ["demo", "hero"]}})
    assert [i for i, *_ in model_items(st, "skin", "")] == [DEFAULT_ITEM, "demo", "hero",
                                                             "scene", CUSTOM]
    assert st.models == {"skin": ("scene",)}  # what the panel calls loaded
    # A reply with fields of the wrong type never breaks the panel.
    assert parse_status(url, {"pipelines": "echo", "queue_depth": "x"}).pipelines == ()


def test_pipeline_and_model_dropdowns_follow_the_backend(addon, serve) -> None:
    from painted_skin.addon.blender.restyle import backend_status
    from painted_skin.addon.blender.restyle.settings import restyle_args
    from painted_skin.addon.core.backend.status import CUSTOM, DEFAULT_ITEM

    bpy = addon
    s = bpy.context.scene.painted_skin_restyle
    assert s.pipeline_menu == "echo"
    s.pipeline_menu = "sd15-controlnet"  # offered before any backend answered
    assert restyle_args(s)["pipeline"] == "sd15-controlnet"

    _, url = serve()
    s.url = url
    backend_status.tick()
    _wait(backend_status.LIVE._thread)
    served = backend_status.LIVE.status.pipelines
    for name in served:  # each pipeline the backend reports can be chosen
        s.pipeline_menu = name
        assert s.pipeline == name and not s.pipeline_custom
    with pytest.raises(TypeError):
        s.pipeline_menu = "not-served"

    # Custom…: the typed name is what is sent.
    s.pipeline_menu = CUSTOM
    assert s.pipeline_custom
    s.pipeline = "my-pipeline"
    assert s.pipeline_menu == CUSTOM and restyle_args(s)["pipeline"] == "my-pipeline"

    # The skin model button sets strings; the dropdowns show them.
    s.pipeline_custom = False
    s.pipeline, s.model = "skin", "scene"
    assert (s.pipeline_menu, s.model_menu) == ("skin", "scene")
    s.model_menu = "demo"
    assert restyle_args(s)["options"]["model"] == "demo"
    # Choosing another pipeline drops a model it would refuse.
    s.pipeline_menu = "echo"
    assert s.model == "" and "model" not in restyle_args(s)["options"]
    # "Default" is a real choice (an empty identifier would be a separator in Blender)
    s.pipeline_menu = "skin"
    assert s.model_menu == DEFAULT_ITEM
    s.model_menu = "demo"
    s.model_menu = DEFAULT_ITEM
    assert s.model == "" and "model" not in restyle_args(s)["options"]


def test_old_blend_with_string_pipeline_loads_and_restyles_the_same(bpy_clean, tmp_path) -> None:
    """A .blend saved before the dropdowns (``pipeline``/``model`` plain strings)."""
    import painted_skin
    from painted_skin.addon.blender.restyle.settings import restyle_args

    assert bpy is bpy_clean

    class PS_RestyleSettings(bpy.types.PropertyGroup):  # the old definition
        url: bpy.props.StringProperty(name="URL", default="")
        pipeline: bpy.props.StringProperty(name="Pipeline", default="echo")
        model: bpy.props.StringProperty(name="Model", default="")
        steps: bpy.props.IntProperty(name="Steps", default=4)

    bpy.utils.register_class(PS_RestyleSettings)
    bpy.types.Scene.painted_skin_restyle = bpy.props.PointerProperty(type=PS_RestyleSettings)
    old = bpy.context.scene.painted_skin_restyle
    old.pipeline, old.model, old.steps = "sd15-controlnet", "local-example", 7
    path = tmp_path / "old.blend"
    bpy.ops.wm.save_as_mainfile(filepath=str(path))
    del bpy.types.Scene.painted_skin_restyle
    bpy.utils.unregister_class(PS_RestyleSettings)

    painted_skin.register()
    try:
        bpy.ops.wm.open_mainfile(filepath=str(path))
        s = bpy.context.scene.painted_skin_restyle
        assert (s.pipeline_menu, s.model_menu) == ("sd15-controlnet", "local-example")
        args = restyle_args(s)
        assert args["pipeline"] == "sd15-controlnet"
        assert args["options"] == {"steps": 7, "temporal": True, "model": "local-example"}
    finally:
        painted_skin.unregister()


# ------------------------------------------------------- options and references, as the CLI

def _png(path: Path, rgb: np.ndarray) -> Path:
    from painted_skin.addon.blender.passes.image_io import write_png

    return write_png(path, rgb)


def _set_panel(bpy, s, ref_file: Path, ref_image: Path) -> None:
    s.pipeline, s.prompt, s.negative_prompt, s.seed = "echo", "oil paint", "blurry", 11
    s.width, s.height, s.steps, s.temporal, s.cross_frame = 32, 32, 6, False, "first"
    s.use_guidance, s.guidance_scale = True, 5.5
    s.use_strength, s.strength = True, 0.35
    s.use_controlnet_scales = True
    s.depth_scale, s.normal_scale, s.openpose_scale = 0.9, 0.25, 1.2
    s.use_ref_strength, s.ref_strength = True, 0.7
    s.extra_options = '{"scheduler": "lcm", "controlnet": {"depth": {"end": 0.8}}}'
    a = s.references.add()
    a.filepath = str(ref_file)
    b = s.references.add()
    b.image = bpy.data.images.load(str(ref_image))
    off = s.references.add()  # kept in the list, not sent
    off.filepath, off.use = str(ref_file), False


CLI_OPTIONS = {"steps": 6, "temporal": False, "cross_frame": "first", "guidance_scale": 5.5,
               "temporal_strength": 0.35, "ip_adapter_scale": 0.7, "scheduler": "lcm",
               "controlnet": {"depth": {"scale": 0.9, "end": 0.8}, "normal": {"scale": 0.25},
                              "openpose": {"scale": 1.2}}}


def _same_open(a, b) -> None:
    for k in ("pipeline", "prompt", "negative", "seed", "width", "height", "options"):
        assert getattr(a, k) == getattr(b, k), k
    assert len(a.refs) == len(b.refs)
    for x, y in zip(a.refs, b.refs, strict=True):
        np.testing.assert_array_equal(x, y)


def test_panel_sends_what_the_cli_sends_and_a_saved_file_sends_it_again(
        addon, serve, opens, shot_blend, tmp_path, capsys) -> None:
    from painted_skin import cli

    bpy = addon
    _, url = serve()
    rng = np.random.default_rng(3)
    ref_file = _png(tmp_path / "front.png", rng.integers(0, 256, (20, 16, 3), np.uint8))
    ref_image = _png(tmp_path / "side.png", rng.integers(0, 256, (12, 24, 3), np.uint8))

    options = tmp_path / "options.json"
    options.write_text(json.dumps(CLI_OPTIONS))
    argv = ["restyle", str(shot_blend), "--out", str(tmp_path / "cli"), "--frames", "1-4",
            "--size", "32x32", "--pipeline", "echo", "--url", url, "--seed", "11",
            "--prompt", "oil paint", "--negative-prompt", "blurry",
            "--options", str(options), "--ref", str(ref_file), "--ref",
            str(ref_image)]
    assert cli.main(argv) == 0, capsys.readouterr().err

    scene = _open_shot(bpy, shot_blend, (1, 4))  # the file's range, as the CLI's run
    s = scene.painted_skin_restyle
    s.url, s.out_dir = url, str(tmp_path / "panel")
    _set_panel(bpy, s, ref_file, ref_image)
    assert bpy.ops.painted_skin.restyle() == {"FINISHED"}
    assert len(opens) == 2
    _same_open(opens[1], opens[0])
    assert len(opens[1].refs) == 2

    # Every shot setting is in the .blend: a farm node that opens it sends the same.
    saved = tmp_path / "saved.blend"
    bpy.ops.wm.save_as_mainfile(filepath=str(saved))
    bpy.ops.wm.read_factory_settings(use_empty=True)
    scene = _open_shot(bpy, saved, (1, 4))
    scene.painted_skin_restyle.out_dir = str(tmp_path / "reloaded")
    assert bpy.ops.painted_skin.restyle() == {"FINISHED"}
    _same_open(opens[2], opens[0])


def test_a_farm_node_renders_what_the_artist_saved(addon, serve, opens, shot_blend, tmp_path,
                                                  capsys) -> None:
    """``restyle --from-scene``: the settings saved in the .blend, read by a Blender that
    does not have the add-on enabled (a farm node), are what the panel sent."""
    import painted_skin
    from painted_skin import cli

    bpy = addon
    _, url = serve()
    rng = np.random.default_rng(5)
    ref_file = _png(tmp_path / "front.png", rng.integers(0, 256, (20, 16, 3), np.uint8))
    ref_image = _png(tmp_path / "side.png", rng.integers(0, 256, (12, 24, 3), np.uint8))
    scene = _open_shot(bpy, shot_blend, (1, 4))
    s = scene.painted_skin_restyle
    s.url, s.out_dir = url, str(tmp_path / "panel")
    _set_panel(bpy, s, ref_file, ref_image)
    assert bpy.ops.painted_skin.restyle() == {"FINISHED"}
    saved = tmp_path / "saved.blend"
    bpy.ops.wm.save_as_mainfile(filepath=str(saved))
    painted_skin.unregister()
    try:
        bpy.ops.wm.read_factory_settings(use_empty=True)
        farm = ["restyle", str(saved), "--from-scene", "--frames", "1-4", "--url", url]
        assert cli.main([*farm, "--out", str(tmp_path / "farm")]) == 0, \
            capsys.readouterr().err
        _same_open(opens[1], opens[0])
        assert not hasattr(bpy.types.Scene, "painted_skin_restyle")  # left as it found it
        # what the command line gives wins, key by key for the options
        assert cli.main([*farm, "--out", str(tmp_path / "farm2"), "--seed", "99",
                         "--options", '{"steps": 2}']) == 0
        assert opens[2].seed == 99 and opens[2].options["steps"] == 2
        assert opens[2].options["guidance_scale"] == 5.5
        # a shot saved without Restyle settings: one line, exit 2
        bare = tmp_path / "bare.blend"
        bpy.ops.wm.read_factory_settings(use_empty=True)
        bpy.ops.wm.open_mainfile(filepath=str(shot_blend))
        bpy.ops.wm.save_as_mainfile(filepath=str(bare))
        capsys.readouterr()
        assert cli.main(["restyle", str(bare), "--from-scene", "--url", url,
                         "--out", str(tmp_path / "bare")]) == 2
        assert "holds no Restyle settings" in capsys.readouterr().err
    finally:
        painted_skin.register()  # the fixture unregisters


def test_reference_from_pixels_and_a_bad_reference(addon, tmp_path) -> None:
    from painted_skin.addon.blender.passes.geometry import ShotError
    from painted_skin.addon.blender.restyle.settings import reference_images

    bpy = addon
    s = bpy.context.scene.painted_skin_restyle
    rgb = np.random.default_rng(1).integers(0, 256, (6, 5, 3), np.uint8)
    img = bpy.data.images.new("painted", 5, 6)
    rgba = np.concatenate([rgb, np.full((6, 5, 1), 255, np.uint8)], -1)[::-1]  # bottom row first
    img.pixels.foreach_set((rgba.astype(np.float32) / 255).ravel())
    s.references.add().image = img
    [got] = reference_images(s)
    np.testing.assert_array_equal(got, rgb)

    s.references.add().filepath = str(tmp_path / "absent.png")
    with pytest.raises(ShotError, match=r"reference 2 .*absent\.png.*remove the row"):
        reference_images(s)
    s.references.add()  # an empty row
    s.references[1].use = False
    with pytest.raises(ShotError, match="reference 3: it names no image or file"):
        reference_images(s)


def test_presets_set_documented_values(addon) -> None:
    from painted_skin.addon.blender.restyle.settings import PRESETS

    bpy = addon
    scene = bpy.context.scene
    scene.render.resolution_x, scene.render.resolution_y = 1920, 1080
    s = scene.painted_skin_restyle
    assert bpy.ops.painted_skin.restyle_preset(preset="FAST") == {"FINISHED"}
    assert (s.steps, s.width, s.cross_frame) == (PRESETS["FAST"]["steps"], 384, "off")
    assert s.height % 8 == 0 and abs(s.width / s.height - 16 / 9) < 0.05
    assert bpy.ops.painted_skin.restyle_preset(preset="FINAL") == {"FINISHED"}
    assert (s.steps, s.width, s.cross_frame) == (PRESETS["FINAL"]["steps"], 768, "first")
    assert s.steps > PRESETS["FAST"]["steps"]


# ------------------------------------------------------------ progress, cancel, results

class _WM:
    def progress_begin(self, lo, hi):
        pass

    def progress_update(self, v):
        pass

    def progress_end(self):
        pass

    def event_timer_add(self, step, window=None):
        return object()

    def event_timer_remove(self, timer):
        pass

    def modal_handler_add(self, op):
        pass


class _Workspace:
    def status_text_set(self, text):
        pass


def test_panel_shows_progress_and_its_cancel_button_stops_the_run(
        addon, serve, shot_blend, tmp_path) -> None:
    """The modal operator driven with a fake window (the bpy module has none): while it
    runs the panel has n/N and a Cancel operator, Restyle Shot is greyed out."""
    from types import SimpleNamespace

    from painted_skin.addon.blender.restyle import loop as restyle
    from painted_skin.addon.blender.restyle import panel as restyle_panel
    from painted_skin.addon.blender.restyle import ui as restyle_ui

    bpy = addon
    _, url = serve()
    scene = _open_shot(bpy, shot_blend, (1, 4))
    s = scene.painted_skin_restyle
    s.url, s.width, s.height, s.out_dir = url, 32, 32, str(tmp_path)
    with pytest.raises(RuntimeError, match="no restyle is running"):
        bpy.ops.painted_skin.restyle_cancel()

    class Op:
        op = restyle_ui.PS_OT_restyle
        invoke, modal, _finish, _release, _on_result, _tell = (
            op.invoke, op.modal, op._finish, op._release, op._on_result, op._tell)
        _timer = None

        def report(self, kind, text):
            self.last = text

    ctx = SimpleNamespace(window=object(), window_manager=_WM(), workspace=_Workspace(),
                          scene=scene, screen=None, preferences=bpy.context.preferences)
    op = Op()
    ret = op.invoke(ctx, SimpleNamespace(type="NONE", value="NOTHING"))
    assert ret == {"RUNNING_MODAL"}
    assert restyle_panel.ActiveRun.progress() == (0, 4)
    assert not bpy.ops.painted_skin.restyle.poll()  # one run at a time
    deadline = time.monotonic() + 20
    while op._done < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
        ret = op.modal(ctx, SimpleNamespace(type="TIMER", value="NOTHING"))
    assert restyle_panel.ActiveRun.progress() == (op._done, 4)
    assert bpy.ops.painted_skin.restyle_cancel() == {"FINISHED"}
    while ret == {"RUNNING_MODAL"} and time.monotonic() < deadline:
        time.sleep(0.01)
        ret = op.modal(ctx, SimpleNamespace(type="TIMER", value="NOTHING"))
    assert ret == {"CANCELLED"} and "stopped" in op.last
    # the summary stays in the panel after the status bar's message is gone
    assert bpy.context.scene.painted_skin_restyle.last_report == op.last
    assert str(tmp_path) in op.last
    assert restyle_panel.ActiveRun.progress() is None
    done = [f for f in range(1, 5) if restyle.frame_done(tmp_path, f)]
    assert 1 <= len(done) < 4


def test_results_buttons(addon, serve, shot_blend, tmp_path) -> None:
    from painted_skin.addon.blender.passes.image_io import read_image
    from painted_skin.addon.blender.restyle import results_ui
    from painted_skin.addon.blender.restyle.loop import result_path

    bpy = addon
    _, url = serve()
    scene = _open_shot(bpy, shot_blend, (1, 3))
    s = scene.painted_skin_restyle
    s.url, s.width, s.height, s.out_dir = url, 32, 24, str(tmp_path)
    # Greyed out, with the reason, until there is something to show.
    for name in ("open_result", "compare", "add_to_sequencer", "open_output_folder"):
        assert not getattr(bpy.ops.painted_skin, name).poll(), name
    with pytest.raises(RuntimeError, match="nothing restyled yet"):
        bpy.ops.painted_skin.open_result()
    s.pipeline = ""
    with pytest.raises(RuntimeError, match="choose a pipeline"):
        bpy.ops.painted_skin.restyle()
    s.pipeline = "echo"
    assert bpy.ops.painted_skin.restyle() == {"FINISHED"}

    # No Image Editor on the screen: one is split off, showing the 3-frame sequence.
    screen = bpy.context.window_manager.windows[0].screen
    assert not [a for a in screen.areas if a.type == "IMAGE_EDITOR"]
    for _ in range(2):  # a second press reuses it
        assert bpy.ops.painted_skin.open_result() == {"FINISHED"}
        editors = [a for a in screen.areas if a.type == "IMAGE_EDITOR"]
        assert len(editors) == 1
    img = bpy.data.images["Painted Skin Restyled"]
    space = editors[0].spaces.active
    assert img.source == "SEQUENCE" and space.image == img
    assert (space.image_user.frame_start, space.image_user.frame_duration) == (1, 3)

    ref = _png(tmp_path / "ref.png", np.full((48, 24, 3), 200, np.uint8))
    s.references.add().filepath = str(ref)
    scene.frame_set(2)
    assert bpy.ops.painted_skin.compare() == {"FINISHED"}
    side = read_image(results_ui.compare_path(tmp_path, 2))
    # passes | gap | restyled | gap | reference scaled to the frame height
    assert side.shape == (24, 32 + 4 + 32 + 4 + 12, 3)
    np.testing.assert_array_equal(side[:, 36:68], read_image(result_path(tmp_path, 2)))
    assert (side[:, 72:] == 200).all()
    assert side[:, :32].any()  # the passes tile shows the character
    assert not list((tmp_path / "compare").glob(".*"))  # no temp file left
    # With the Passes step's beauty render of the frame, it joins after the passes.
    scene.painted_skin_passes.out_dir = str(tmp_path / "passes")
    (tmp_path / "passes" / "beauty").mkdir(parents=True)
    beauty = np.zeros((24, 32, 4), np.uint8)
    beauty[..., 1], beauty[:12, :, 3] = 100, 255  # green where opaque, transparent below
    _png(tmp_path / "passes" / "beauty" / "0002.png", beauty)
    assert bpy.ops.painted_skin.compare() == {"FINISHED"}
    side = read_image(results_ui.compare_path(tmp_path, 2))
    assert side.shape == (24, 3 * (32 + 4) + 12, 3)
    assert (side[:12, 36:68, 1] == 100).all() and not side[12:, 36:68].any()
    np.testing.assert_array_equal(side[:, 72:104], read_image(result_path(tmp_path, 2)))

    assert bpy.ops.painted_skin.add_to_sequencer() == {"FINISHED"}
    strip = scene.sequence_editor.strips["Painted Skin Restyled"]
    assert len(strip.elements) == 3
    assert bpy.ops.painted_skin.open_output_folder() == {"FINISHED"}


# ----------------------------------------------------------------------------- drawing

_DRAW_SCRIPT = textwrap.dedent("""
    import json, types
    import bpy, painted_skin
    from painted_skin.addon.blender.restyle import backend_status, panel as restyle_panel
    from painted_skin.addon.core.backend.status import parse_status

    def draw():
        # The panels' own draw() into a real UILayout (a popover block), with the 3D
        # viewport's sidebar as context: what Blender does for the N panel.
        win = bpy.context.window_manager.windows[0]
        area = next(a for a in win.screen.areas if a.type == "VIEW_3D")
        region = next(r for r in area.regions if r.type == "UI")
        out = []
        with bpy.context.temp_override(window=win, area=area, region=region):
            for name in ("PS_PT_backend", "PS_PT_restyle", "PS_PT_restyle_controls",
                         "PS_PT_restyle_references", "PS_PT_restyle_results"):
                pop = bpy.context.window_manager.popover_begin__internal()
                getattr(bpy.types, name).draw(pop, bpy.context)
                out.append(pop.layout.introspect())
        return out

    bpy.ops.wm.read_factory_settings(use_empty=True)
    painted_skin.register()
    s = bpy.context.scene.painted_skin_restyle
    s.url, s.out_dir = "tcp://127.0.0.1:9", "/tmp/painted-skin-draw-test-nothing-here"
    s.references.add()
    out = {"idle": draw()}
    backend_status.LIVE.record(parse_status(s.url, {
        "version": "1", "devices": ["cpu"], "pipelines": ["echo", "skin"],
        "loaded_models": ['skin@cpu model="scene"'], "queue_depth": 2, "sessions": 1}))
    s.pipeline_custom = True
    restyle_panel.ActiveRun.op = types.SimpleNamespace(_done=2, _frames=[1, 2, 3, 4],
                                                       _client=None)
    out["running"] = draw()
    print("LAYOUT" + json.dumps(out), flush=True)
    import os
    os._exit(0)  # the undisplayed popover blocks are never freed: skip the leak report
""")


def test_panel_draws_backend_settings_progress_and_results() -> None:
    """The panels' draw() against a real layout (:class:`test_panel.Drawn`)."""
    drawn = Drawn(_DRAW_SCRIPT)
    ops, props, texts = drawn.ops, drawn.props, drawn.texts

    idle, running = "idle", "running"
    assert {"PS_RestyleSettings.pipeline_menu", "PS_RestyleSettings.model_menu",
            "PS_RestyleSettings.guidance_scale", "PS_RestyleSettings.depth_scale",
            "PS_RestyleReference.use", "PS_RestyleReference.filepath"} <= props(idle)
    assert "PS_RestyleSettings.pipeline" not in props(idle)  # the free text only for Custom…
    assert "PS_RestyleSettings.pipeline" in props(running)
    assert "bpy.ops.painted_skin.restyle()" in ops(idle)
    assert {"bpy.ops.painted_skin.open_result()", "bpy.ops.painted_skin.compare()",
            "bpy.ops.painted_skin.add_to_sequencer()",
            "bpy.ops.painted_skin.open_output_folder()"} <= ops(idle)
    assert "nothing restyled yet" in " ".join(texts(idle))  # wrapped to the sidebar
    # The live status: device, pipelines, models, queue.
    assert {"Device: cpu", "Queue: 2, 1 session(s)"} <= set(texts(running))
    joined = " ".join(texts(running))  # the lists wrap to the sidebar's width
    assert "Pipelines: echo, skin" in joined and "Models loaded: skin: scene" in joined
    # While a restyle runs: n/N frames and Cancel instead of Restyle Shot.
    assert "2/4 frames" in texts(running)
    assert "bpy.ops.painted_skin.restyle_cancel()" in ops(running)
    assert "bpy.ops.painted_skin.restyle()" not in ops(running)


def test_the_backend_line_says_whose_backend_answers(addon) -> None:
    """A backend found at the default address that this Blender did not start, with no
    URL set here, is shown as found — never as linked to the panel; a URL set here (or
    Connect, which sets it) makes it the animator's."""
    from painted_skin.addon.blender.restyle import panel as restyle_panel
    from painted_skin.addon.core.backend.status import BackendStatus

    bpy = addon
    s = bpy.context.scene.painted_skin_restyle
    s.url = ""
    st = BackendStatus(url="tcp://127.0.0.1:5555", version="1", devices=("cpu",))
    assert restyle_panel.backend_origin(bpy.context, st) == restyle_panel.FOUND
    s.url = "tcp://127.0.0.1:5555"
    assert restyle_panel.backend_origin(bpy.context, st) == restyle_panel.GIVEN
    assert restyle_panel.backend_origin(bpy.context, BackendStatus(url=s.url, error="no")) \
        is None
