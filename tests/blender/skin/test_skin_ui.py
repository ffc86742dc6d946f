"""The Skin Model panel: Train runs ``painted-skin train-skin`` on the saved file as a
child process and reports how it ended; a model trained here is served by a local backend
started from the panel under the name "scene"."""

from __future__ import annotations

import json
import sys
import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest


@pytest.fixture
def registered(bpy_clean):
    from painted_skin.addon.blender.restyle import ui as restyle_ui
    from painted_skin.addon.blender.skin import ui as skin_ui

    skin_ui.register()
    restyle_ui.register()
    yield bpy_clean
    restyle_ui.unregister()
    skin_ui.unregister()


def _saved_demo(bpy, folder: Path) -> Path:
    from painted_skin.demo.character import build_demo_character, setup_demo_scene

    arm = build_demo_character()
    setup_demo_scene(arm)
    path = folder / "hero.blend"
    bpy.ops.wm.save_as_mainfile(filepath=str(path))
    return path


def test_train_needs_a_saved_file_and_builds_the_cli_command(registered, tmp_path):
    from painted_skin.addon.blender.skin import ui as skin_ui

    bpy = registered
    assert not bpy.ops.painted_skin.train_skin.poll()  # unsaved: nothing to read
    blend = _saved_demo(bpy, tmp_path)
    assert bpy.ops.painted_skin.train_skin.poll()
    cmd = skin_ui.train_command(str(blend), str(tmp_path / "m"), 5, 128, "cpu", True, "/py")
    assert cmd[:3] == [sys.executable, "-m", "painted_skin.cli"]
    assert cmd[3:] == ["train-skin", "--character", str(blend), "--out", str(tmp_path / "m"),
                       "--minutes", "5", "--size", "128", "--device", "cpu", "--resume",
                       "--python", "/py"]
    s = bpy.context.scene.painted_skin_skin
    s.size, s.detail = "256", "256"  # the detail frames must be larger than the Size
    assert not bpy.ops.painted_skin.train_skin.poll()
    s.detail = "512"
    assert bpy.ops.painted_skin.train_skin.poll()
    button = SimpleNamespace(frames_per_clip=24, samples=16)  # the operator's own fields
    cmd = skin_ui.PS_OT_train_skin._command(button, bpy.context)
    assert cmd[cmd.index("--size") + 1] == "256" and cmd[cmd.index("--detail-size") + 1] == "512"
    s.detail = "0"
    assert "--detail-size" not in skin_ui.PS_OT_train_skin._command(button, bpy.context)


def test_a_model_trained_here_is_served_by_the_panels_backend_as_scene(registered, tmp_path):
    from painted_skin.addon.blender.client import local_backend

    bpy = registered
    _saved_demo(bpy, tmp_path)
    s = bpy.context.scene.painted_skin_skin
    s.model_dir = str(tmp_path / "model")
    assert bpy.ops.painted_skin.use_skin_model() == {"FINISHED"}
    r = bpy.context.scene.painted_skin_restyle
    assert (r.pipeline, r.model) == ("skin", "demo")  # nothing trained yet: the demo's own
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    assert bpy.ops.painted_skin.use_skin_model() == {"FINISHED"}
    assert r.model == "scene"
    env = local_backend.backend_env(None)
    models = tomllib.loads(Path(env["PAINTED_SKIN_SKIN_MODELS"]).read_text())["models"]
    assert Path(models["scene"]["path"]) == (tmp_path / "model").resolve()
    assert "demo" in models  # the registry's own models stay


@pytest.mark.slow
def test_train_button_trains_a_model_headless(registered, tmp_path):
    bpy = registered
    _saved_demo(bpy, tmp_path)
    s = bpy.context.scene.painted_skin_skin
    s.model_dir, s.minutes, s.size = str(tmp_path / "model"), 0.05, "128"
    backend = Path(__file__).resolve().parents[3] / ".venv-backend" / "bin" / "python"
    if not backend.is_file():
        pytest.skip("no .venv-backend (torch) to train in")
    assert bpy.ops.painted_skin.train_skin(frames_per_clip=2, samples=2) == {"FINISHED"}
    report = json.loads((tmp_path / "model" / "report.json").read_text())
    assert report["dataset"]["size"] == 128 and "held_out" in report
    # the model records the passes it learned: a later add-on names it when they change
    from painted_skin.wire import VALUES_VERSION

    config = json.loads((tmp_path / "model" / "config.json").read_text())
    assert config["pass_version"] == VALUES_VERSION


def test_the_scene_registry_file_goes_with_the_local_backend(bpy_clean, tmp_path) -> None:
    """The registry file the panel writes for the scene's skin models is written whole
    (quoted names) and removed when the local backend stops: nothing left in /tmp."""
    import tomllib

    from painted_skin.addon.blender.client import local_backend

    path = local_backend.LOCAL.registry_with({"odd name.x": str(tmp_path / "model")})
    try:
        assert tomllib.loads(path.read_text())["models"]["odd name.x"]["path"] == str(
            tmp_path / "model")
    finally:
        local_backend.stop_local_backend()
    assert not path.exists()


def _model_folder(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    return folder


def test_nothing_trained_for_another_character_is_said_not_replaced_by_demo(registered,
                                                                          tmp_path):
    """Trained Here with nothing trained, for a character that is not the demo's: the
    button is greyed out with the reason instead of quietly picking the demo's model
    (which the backend then refused only after Restyle Shot)."""
    bpy = registered
    bpy.ops.mesh.primitive_cube_add()
    cube = bpy.context.object
    cube.name = "Mannequin_Body"
    arm = bpy.data.objects.new("Rig", bpy.data.armatures.new("Rig"))
    bpy.context.scene.collection.objects.link(arm)
    cube.modifiers.new("Armature", "ARMATURE").object = arm
    s, r = bpy.context.scene.painted_skin_skin, bpy.context.scene.painted_skin_restyle
    s.model_dir = str(tmp_path / "model")
    r.pipeline, r.model = "echo", ""
    assert not bpy.ops.painted_skin.use_skin_model.poll()
    with pytest.raises(RuntimeError, match="no skin model is trained for this character"):
        bpy.ops.painted_skin.use_skin_model()
    assert (r.pipeline, r.model) == ("echo", "")  # nothing changed
    # The Restyle panel's Model "Default" with the skin pipeline is the same quiet demo.
    bpy.ops.object.camera_add()
    bpy.context.scene.camera = bpy.context.object
    r.out_dir = str(tmp_path / "out")
    assert bpy.ops.painted_skin.restyle.poll()  # echo: nothing to pick
    r.pipeline = "skin"
    assert not bpy.ops.painted_skin.restyle.poll()
    with pytest.raises(RuntimeError, match="default model is the demo character's"):
        bpy.ops.painted_skin.restyle()


def test_the_picker_chooses_what_restyle_paints_with(registered, tmp_path):
    """Trained here ("scene"), a model folder trained elsewhere ("folder", served by a
    backend started from the panel) or a name in the backend's registry."""
    from painted_skin.addon.blender.client import local_backend

    bpy = registered
    s, r = bpy.context.scene.painted_skin_skin, bpy.context.scene.painted_skin_restyle
    s.model_dir = str(tmp_path / "here")
    assert s.model_choice == "scene"
    s.model_choice = "folder"
    s.model_folder = str(tmp_path / "nothing")
    assert not bpy.ops.painted_skin.use_skin_model.poll()  # greyed out, with the reason
    with pytest.raises(RuntimeError, match="holds no config.json"):
        bpy.ops.painted_skin.use_skin_model()
    s.model_folder = str(_model_folder(tmp_path / "hero"))
    assert bpy.ops.painted_skin.use_skin_model() == {"FINISHED"}
    assert (r.pipeline, r.model) == ("skin", "folder")
    env = local_backend.backend_env(None)
    models = tomllib.loads(Path(env["PAINTED_SKIN_SKIN_MODELS"]).read_text())["models"]
    assert Path(models["folder"]["path"]) == (tmp_path / "hero").resolve()
    assert "scene" not in models  # nothing trained here yet

    s.model_choice = "registry"
    assert not bpy.ops.painted_skin.use_skin_model.poll()
    with pytest.raises(RuntimeError, match="no model name given"):
        bpy.ops.painted_skin.use_skin_model()
    assert r.model == "folder"  # a refused pick changes nothing
    s.model_name = "demo"
    assert bpy.ops.painted_skin.use_skin_model() == {"FINISHED"}
    assert r.model == "demo"
    local_backend.stop_local_backend()


def test_the_panel_says_when_the_picked_model_learned_older_passes(registered, tmp_path):
    """The Skin Model panel names a model (trained here or picked) that learned another
    add-on's passes before the animator restyles with it; one of these passes, nothing."""
    import os

    from painted_skin.addon.blender.skin import ui as skin_ui
    from painted_skin.wire import VALUES_VERSION

    bpy = registered
    s = bpy.context.scene.painted_skin_skin
    s.model_choice, s.model_folder = "folder", str(_model_folder(tmp_path / "old"))
    assert "older add-on's passes" in skin_ui.chosen_model_note(bpy.context)  # unrecorded
    cfg = tmp_path / "old" / "config.json"
    for version, says in ((VALUES_VERSION - 1, "older add-on's passes"),
                          (VALUES_VERSION + 1, "update the add-on"), (VALUES_VERSION, None)):
        cfg.write_text(json.dumps({"pass_version": version}))
        os.utime(cfg, ns=(version, version))  # read again: another version of the file
        note = skin_ui.chosen_model_note(bpy.context)
        assert (note is None) if says is None else (says in note), (version, note)
    s.model_choice = "registry"  # the backend's to read: the shot's OPEN tells
    s.model_name = "demo"
    assert skin_ui.chosen_model_note(bpy.context) is None
