"""Batch retargeting: a bad clip stops the batch with nothing written, unless
``--keep-going``, which skips it, keeps the others and says which failed."""

from __future__ import annotations

from pathlib import Path

import pytest
from painted_skin import cli
from painted_skin.addon import motion as gen
from painted_skin.addon.blender.blend_files import save_blend_atomic


@pytest.fixture
def character(tmp_path: Path, bpy_clean) -> Path:
    from painted_skin.demo.character import build_demo_character

    build_demo_character()
    path = tmp_path / "character.blend"
    save_blend_atomic(path)
    bpy_clean.ops.wm.read_factory_settings(use_empty=True)
    return path


def test_keep_going_skips_a_bad_clip(character, tmp_path, capsys, bpy_clean) -> None:
    clips = tmp_path / "clips"
    clips.mkdir()
    gen.write_clip(clips / "sit.bvh", "sit", frames=20, fps=24, convention="apose")
    (clips / "broken.bvh").write_text("HIERARCHY\nROOT Hips\n{\n OFFSET 0 0 0\n}\n")
    gen.write_clip(clips / "wave.bvh", "wave", frames=20, fps=24)
    out = tmp_path / "batch.blend"
    argv = ["retarget", "--source", str(clips), "--target", str(character), "--out", str(out)]
    assert cli.main(argv) == 2
    assert "broken" in capsys.readouterr().err and not out.exists()  # stopped, nothing saved

    assert cli.main([*argv, "--keep-going"]) == 2
    err = capsys.readouterr().err
    assert "broken.bvh" in err and "1 of 3 clips failed" in err
    bpy_clean.ops.wm.open_mainfile(filepath=str(out))
    arm = next(o for o in bpy_clean.data.objects if o.type == "ARMATURE")
    assert arm.animation_data.action.name == "wave"
    assert [t.strips[0].action.name for t in arm.animation_data.nla_tracks] == ["sit"]
    assert not any("broken" in a.name for a in bpy_clean.data.actions)


def test_keep_posture_reaches_the_report(character, tmp_path, bpy_clean) -> None:
    """``--keep-posture`` keeps the character's own torso posture; the report says
    which posture the run used, so a farm's log shows it."""
    import json

    clip = gen.write_clip(tmp_path / "walk.bvh", "walk", frames=12, fps=24)
    postures = {}
    for extra in ([], ["--keep-posture"]):
        report = tmp_path / f"report{len(extra)}.json"
        assert cli.main(["retarget", "--source", str(clip), "--target", str(character),
                         "--report", str(report), *extra]) == 0
        postures[bool(extra)] = json.loads(report.read_text())["posture"]
    assert postures == {False: "source", True: "character"}


def test_fps_resamples_a_capture_for_the_shot(character, tmp_path, bpy_clean) -> None:
    """``--fps 24`` bakes a 120 fps capture at 24 fps (a fifth of the frames, the same
    seconds) and the saved shot plays at 24; a rate that is not one is refused in a line."""
    import json

    clip = gen.write_clip(tmp_path / "fast.bvh", "walk", frames=120, fps=120)
    report, shot = tmp_path / "report.json", tmp_path / "shot.blend"
    assert cli.main(["retarget", "--source", str(clip), "--target", str(character),
                     "--report", str(report), "--out", str(shot), "--fps", "24"]) == 0
    r = json.loads(report.read_text())
    assert (r["fps"], r["source_fps"], r["frames"]) == (24.0, 120.0, 24)
    bpy_clean.ops.wm.open_mainfile(filepath=str(shot))
    scene = bpy_clean.context.scene
    assert scene.render.fps / scene.render.fps_base == 24
    assert scene.frame_end - scene.frame_start + 1 == 24
    assert cli.main(["retarget", "--source", str(clip), "--target", str(character),
                     "--fps", "0"]) == 2
