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
