"""A shot without a light of its own (what ``retarget`` writes) is painted as the skin
model learnt: its passes follow the training rig's sun, exactly as if that sun were in
the scene, and the commands say so."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import demo_walk_blend


@pytest.fixture(scope="module")
def shot(tmp_path_factory) -> Path:
    return demo_walk_blend(tmp_path_factory.mktemp("unlit_shot"), frames=4)


def test_an_unlit_shot_is_lit_by_the_training_sun(bpy_clean, shot):
    from painted_skin.addon.blender.passes.geometry import TRAINING_SUN_NAME
    from painted_skin.addon.blender.restyle.loop import lighting_note, shot_frames, wire_passes
    from painted_skin.addon.blender.skin.train import ensure_lighting

    bpy = bpy_clean
    bpy.ops.wm.open_mainfile(filepath=str(shot))
    scene = bpy.context.scene
    for ob in [o for o in scene.objects if o.type == "LIGHT"]:
        bpy.data.objects.remove(ob)
    assert "training's sun" in lighting_note(scene)
    _, unlit = next(shot_frames(scene, [2], 64, 64, passes=wire_passes("skin")))
    on = unlit["mask"] > 0
    vis = unlit["light_visibility"][..., 0]
    assert vis[on].any() and not vis[on].all()  # lit and shadowed parts, not all dark
    ensure_lighting(scene)  # the training rig's real sun, as train-skin adds it
    assert lighting_note(scene) is None
    _, lit = next(shot_frames(scene, [2], 64, 64, passes=wire_passes("skin")))
    np.testing.assert_array_equal(lit["light_visibility"], unlit["light_visibility"])
    assert TRAINING_SUN_NAME not in [o.name for o in scene.objects]


def test_restyle_says_an_unlit_shot_is_painted_under_the_training_sun(bpy_clean, shot,
                                                                      skin_backend, tmp_path,
                                                                      capsys):
    from painted_skin import cli
    from painted_skin.addon.blender.blend_files import save_blend_atomic

    bpy = bpy_clean
    bpy.ops.wm.open_mainfile(filepath=str(shot))
    for ob in [o for o in bpy.context.scene.objects if o.type == "LIGHT"]:
        bpy.data.objects.remove(ob)
    unlit = tmp_path / "unlit.blend"
    save_blend_atomic(unlit)
    assert cli.main(["restyle", str(unlit), "--frames", "1", "--size", "64x64", "--out",
                     str(tmp_path / "out"), "--pipeline", "skin", "--url", skin_backend]) == 0
    assert "note: the shot has no light" in capsys.readouterr().out
