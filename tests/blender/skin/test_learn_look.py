"""``painted-skin learn-look`` on a real shot: painted keys (or diffusion-painted ones, from
``restyle`` with tiny random components) become a look in a multi-look folder, which
``restyle --look`` paints; bad keys are refused in one line; the Looks panel."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
from conftest import demo_walk_blend

REPO = Path(__file__).resolve().parents[3]
BACKEND_PY = REPO / ".venv-backend" / "bin" / "python"
SIZE = 64


def _backend_has(modules: str) -> bool:
    if not BACKEND_PY.exists():
        return False
    probe = subprocess.run([str(BACKEND_PY), "-c", f"import {modules}"], capture_output=True,
                           timeout=120)
    return probe.returncode == 0


needs_torch = pytest.mark.skipif(not _backend_has("torch"),
                                 reason="no backend environment with torch (make backend)")


@pytest.fixture(scope="module")
def shot(tmp_path_factory) -> Path:
    """The demo walk, rendered at 64² (keys are painted at the render size)."""
    import bpy
    from painted_skin.addon.blender.blend_files import save_blend_atomic

    path = demo_walk_blend(tmp_path_factory.mktemp("look_shot"), frames=6)
    bpy.ops.wm.open_mainfile(filepath=str(path))
    r = bpy.context.scene.render
    r.resolution_x = r.resolution_y = SIZE
    r.resolution_percentage = 100
    save_blend_atomic(path)
    return path


def paint_keys(folder: Path, frames: list[int], size: int = SIZE) -> Path:
    """Keys an artist might paint: the whole frame one warm colour, opaque."""
    from painted_skin.addon.blender.passes.image_io import write_png

    folder.mkdir(parents=True, exist_ok=True)
    for f in frames:
        img = np.zeros((size, size, 4), np.uint8)
        img[...] = (200, 90, 40, 255)
        write_png(folder / f"{f:04d}.png", img)
    return folder


def cli(*args: str) -> int:
    from painted_skin import cli as cli_module

    return cli_module.main(list(args))


@needs_torch
def test_learn_look_writes_a_look_restyle_paints(bpy_clean, shot, tmp_path, skin_backend):
    from painted_skin.addon.blender.passes.image_io import read_image
    from painted_skin.addon.core.files.paths import files_digest
    from test_client import free_url

    keys = paint_keys(tmp_path / "keys", [2, 5])
    out = tmp_path / "model"
    assert cli("learn-look", "--shot", str(shot), "--keys", str(keys), "--out", str(out),
               "--look", "warm", "--steps", "3", "--python", str(BACKEND_PY)) == 0
    cfg = json.loads((out / "looks" / "warm" / "config.json").read_text())
    assert cfg["look"]["name"] == "warm" and cfg["look"]["key_frames"] == 2
    assert cfg["look"]["keys"] == files_digest(sorted(keys.glob("*.png")))
    assert (out / "config.json").is_file()  # the base, copied beside its look
    painted = {}
    for look in ("base", "warm"):
        dest = tmp_path / f"rs_{look}"
        assert cli("restyle", str(shot), "--frames", "1-2", "--size", f"{SIZE}x{SIZE}",
                   "--out", str(dest), "--skin-model", str(out), "--look", look,
                   "--start-backend", str(BACKEND_PY), "--url", free_url()) == 0
        painted[look] = read_image(dest / "restyled" / "0002.png").astype(np.float64)
    assert np.abs(painted["base"] - painted["warm"]).max() > 0  # the look paints itself


@needs_torch
def test_bad_keys_are_refused_in_one_line(bpy_clean, shot, tmp_path, capsys):
    out = tmp_path / "model"
    wrong = paint_keys(tmp_path / "wrong", [2], size=32)
    assert cli("learn-look", "--shot", str(shot), "--keys", str(wrong), "--out", str(out),
               "--steps", "1", "--python", str(BACKEND_PY)) == 2
    assert "paint the keys at the shot's render size" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.txt").write_text("no keys here")
    assert cli("learn-look", "--shot", str(shot), "--keys", str(empty), "--out", str(out),
               "--steps", "1", "--python", str(BACKEND_PY)) == 2
    assert "no NNNN.png keyframes" in capsys.readouterr().err
    keys = paint_keys(tmp_path / "keys", [2])
    assert cli("learn-look", "--shot", str(shot), "--keys", str(keys), "--out", str(out),
               "--resume", "--python", str(BACKEND_PY)) == 2
    assert "no checkpoint" in capsys.readouterr().err
    assert cli("learn-look", "--shot", str(shot), "--keys", str(keys), "--out", str(out),
               "--look", "base", "--python", str(BACKEND_PY)) == 2
    assert not out.exists()  # nothing half-written


@pytest.mark.skipif(not _backend_has("torch, diffusers"),
                    reason="no backend environment with torch and diffusers (make backend)")
def test_diffusion_painted_keys_become_a_look(bpy_clean, shot, tmp_path):
    """restyle paints chosen frames with the (tiny random) diffusion pipeline; learn-look
    takes its output folder as it is."""
    from test_client import free_url

    painted = tmp_path / "painted"
    options = json.dumps({"tiny": True, "steps": 2, "scheduler": "lcm", "temporal": False})
    assert cli("restyle", str(shot), "--frames", "2,5", "--size", f"{SIZE}x{SIZE}", "--out",
               str(painted), "--pipeline", "sd15-controlnet", "--prompt", "a bronze statue",
               "--options", options, "--start-backend", str(BACKEND_PY), "--url",
               free_url()) == 0
    assert cli("learn-look", "--shot", str(shot), "--keys", str(painted / "restyled"),
               "--out", str(tmp_path / "bronze"), "--steps", "2", "--python",
               str(BACKEND_PY)) == 0
    cfg = json.loads((tmp_path / "bronze" / "config.json").read_text())
    assert cfg["look"]["key_frames"] == 2


def test_the_looks_panel_lists_keys_and_restyle_sends_the_mix(bpy_clean, shot, tmp_path):
    import bpy
    import painted_skin
    from painted_skin.addon.blender.skin import looks_ui

    bpy.ops.wm.open_mainfile(filepath=str(shot))
    painted_skin.register()
    try:
        scene = bpy.context.scene
        bpy.ops.painted_skin.add_look()
        look = looks_ui.active_look(bpy.context)
        assert look.name == "look1" and look.keys_dir == "//looks/look1/"
        look.name = "ill state!"  # made a valid name
        assert look.name == "ill_state_"
        paint_keys(looks_ui.keys_folder(look), [3, 4])
        assert looks_ui.key_frames(look) == [3, 4]
        # the looks of the model folder Restyle paints with reach its options
        model = tmp_path / "model"
        (model / "looks" / "ill").mkdir(parents=True)
        (model / "config.json").write_text("{}")
        (model / "looks" / "ill" / "config.json").write_text("{}")
        scene.painted_skin_skin.model_dir = str(model)
        from painted_skin.addon.blender.skin.ui import model_looks

        assert model_looks(bpy.context, "scene") == ["base", "ill"]
        r = scene.painted_skin_restyle
        from painted_skin.addon.blender.restyle.settings import restyle_options

        r.pipeline, r.model = "skin", "scene"
        r.look = "base"
        assert "look" not in restyle_options(r)
        r.look_mix_with, r.look_mix = "ill", 0.25
        assert restyle_options(r)["look"] == {"base": 0.75, "ill": 0.25}
        scene.painted_skin_looks.suggest_count = 2
        assert bpy.ops.painted_skin.suggest_keyframes() == {"FINISHED"}
        picked = [int(x) for x in scene.painted_skin_looks.suggested.split(",")]
        assert len(picked) == 2 and all(scene.frame_start <= f <= scene.frame_end
                                        for f in picked)
        bpy.ops.painted_skin.remove_look()
        assert len(scene.painted_skin_looks.looks) == 0
    finally:
        painted_skin.unregister()


def test_paint_keyframe_saves_the_models_painting_as_the_key(bpy_clean, shot, tmp_path,
                                                            skin_backend):
    """Paint Keyframe: the skin model paints the current frame (the underlay) into the
    look's folder as NNNN.png at the render size; a second press keeps the artist's file."""
    import bpy
    import painted_skin
    from painted_skin.addon.blender.passes.image_io import read_image
    from painted_skin.addon.blender.skin import looks_ui

    bpy.ops.wm.open_mainfile(filepath=str(shot))
    painted_skin.register()
    try:
        scene = bpy.context.scene
        scene.painted_skin_restyle.url = skin_backend
        bpy.ops.painted_skin.add_look()
        look = looks_ui.active_look(bpy.context)
        look.keys_dir = str(tmp_path / "keys")
        scene.frame_set(3)
        assert bpy.ops.painted_skin.paint_keyframe() == {"FINISHED"}
        key = tmp_path / "keys" / "0003.png"
        img = np.asarray(read_image(key))
        assert img.shape[:2] == (SIZE, SIZE) and img[..., :3].std() > 5
        key.write_bytes(key.read_bytes())  # the artist's painting, as saved
        before = key.stat().st_mtime_ns
        assert bpy.ops.painted_skin.paint_keyframe() == {"FINISHED"}
        assert key.stat().st_mtime_ns == before  # opened, not painted over
    finally:
        painted_skin.unregister()


@needs_torch
def test_learn_look_button_adds_the_look_to_the_model_folder(bpy_clean, shot, tmp_path):
    """Learn Look (headless: the operator waits for its child) learns the active look's
    keys into the Model Folder, starting from the embedded model until one is trained."""
    import bpy
    import painted_skin
    from painted_skin.addon.blender.skin import looks_ui

    bpy.ops.wm.open_mainfile(filepath=str(shot))
    painted_skin.register()
    try:
        scene = bpy.context.scene
        scene.painted_skin_skin.model_dir = str(tmp_path / "model")
        bpy.ops.painted_skin.add_look()
        look = looks_ui.active_look(bpy.context)
        look.name = "warm"
        look.keys_dir = str(tmp_path / "keys")
        paint_keys(tmp_path / "keys", [2])
        scene.painted_skin_looks.minutes = 0.1
        assert bpy.ops.painted_skin.learn_look() == {"FINISHED"}
        assert (tmp_path / "model" / "looks" / "warm" / "config.json").is_file()
        assert (tmp_path / "model" / "config.json").is_file()  # the base beside it
    finally:
        painted_skin.unregister()
