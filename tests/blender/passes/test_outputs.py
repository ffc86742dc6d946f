"""Outputs a farm or a TD relies on: readable file modes, outputs checked before
the work, one shot per passes folder, frames inside the scene, killed runs' temp
files cleaned, blend-relative folders refused in unsaved files."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import demo_walk_blend
from painted_skin import cli


@pytest.fixture(scope="module")
def shot_blend(tmp_path_factory) -> Path:
    return demo_walk_blend(tmp_path_factory.mktemp("shot"), frames=12)


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    from painted_skin.addon.core.files import atomic

    atomic._umask.cache_clear()
    yield
    os.umask(old)
    atomic._umask.cache_clear()


def _mode(p: Path) -> int:
    return p.stat().st_mode & 0o777


def test_written_files_follow_the_umask_not_0600(tmp_path, umask_022) -> None:
    from painted_skin.addon.blender.passes.image_io import write_exr, write_png
    from painted_skin.addon.core.files.atomic import write_json_atomic

    write_json_atomic(tmp_path / "m.json", {"a": 1})
    write_png(tmp_path / "i.png", np.zeros((4, 4, 3), np.uint8))
    write_exr(tmp_path / "d.exr", np.zeros((4, 4), np.float32), ["Z"])
    assert {p.name: _mode(p) for p in tmp_path.iterdir()} == {
        "m.json": 0o644, "i.png": 0o644, "d.exr": 0o644}  # as a plain open() would


def test_unwritable_outputs_are_refused_before_the_work(tmp_path, capsys) -> None:
    from painted_skin.addon.core.files.atomic import UnwritableOutput, check_writable

    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    with pytest.raises(UnwritableOutput, match="choose a folder"):
        check_writable(blocker / "sub", "passes folder")
    with pytest.raises(UnwritableOutput):
        check_writable(tmp_path, "--out file", folder=False)  # a folder, not a file
    assert check_writable(tmp_path / "new" / "deep", "x").is_dir()
    assert [p.name for p in (tmp_path / "new" / "deep").iterdir()] == []  # no probe left

    clip = tmp_path / "missing_ok.bvh"  # not read: the output check comes first
    clip.write_text("HIERARCHY\n")
    for extra, words in ((["--out", str(blocker / "x.blend")], "cannot write"),
                         (["--out", str(tmp_path / "shot.txt")], "must name a .blend"),
                         (["--report", str(blocker / "r.json")], "cannot write")):
        rc = cli.main(["retarget", "--source", str(clip), "--target", str(clip), *extra])
        assert rc == 2 and words in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file", "missing_ok.bvh", "new"]


def test_cli_passes_into_an_unwritable_folder(shot_blend, tmp_path, capsys, bpy_clean) -> None:
    blocker = tmp_path / "f"
    blocker.write_text("x")
    assert cli.main(["passes", str(shot_blend), "--out", str(blocker / "p")]) == 2
    assert "cannot write" in capsys.readouterr().err


def test_another_shot_into_the_same_folder_is_refused(bpy_clean, shot_blend, tmp_path) -> None:
    from painted_skin.addon.blender.passes.geometry import ShotError
    from painted_skin.addon.blender.passes.render import PassOptions, make_passes

    bpy = bpy_clean
    bpy.ops.wm.open_mainfile(filepath=str(shot_blend))
    opts = PassOptions(frames=range(1, 2), width=32, height=32, passes=("mask",))
    make_passes(bpy.context.scene, opts, tmp_path)
    shot = json.loads((tmp_path / "manifest.json").read_text())["shot"]
    assert shot["armature"] and shot["camera"] and shot["meshes"]
    make_passes(bpy.context.scene, PassOptions(frames=range(2, 3), width=32, height=32,
                                               passes=("mask",)), tmp_path)  # same shot: fine
    arm = next(o for o in bpy.data.objects if o.type == "ARMATURE")
    arm.animation_data.action.name = "another_take"
    with pytest.raises(ShotError, match="another shot.*action"):
        make_passes(bpy.context.scene, PassOptions(frames=range(3, 4), width=32, height=32,
                                                   passes=("mask",)), tmp_path)
    assert not (tmp_path / "mask" / "0003.png").exists()


def test_frames_outside_the_scene_are_refused(bpy_clean, shot_blend, tmp_path) -> None:
    from painted_skin.addon.blender.passes.geometry import ShotError
    from painted_skin.addon.blender.passes.render import PassOptions, make_passes

    bpy_clean.ops.wm.open_mainfile(filepath=str(shot_blend))
    scene = bpy_clean.context.scene
    with pytest.raises(ShotError, match=f"outside the scene's range {scene.frame_start}-"):
        make_passes(scene, PassOptions(frames=range(scene.frame_end, scene.frame_end + 5),
                                       width=32, height=32, passes=("mask",)), tmp_path / "o")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("pattern", ["", "sh010_####"])
def test_a_killed_runs_temp_files_are_cleaned_but_not_a_live_writers(
        bpy_clean, shot_blend, tmp_path, pattern) -> None:
    from painted_skin.addon.blender.passes.render import PassOptions, make_passes, split_passes_out

    bpy_clean.ops.wm.open_mainfile(filepath=str(shot_blend))
    (tmp_path / "mask").mkdir()
    prefix = pattern.rstrip("#")
    stale = tmp_path / "mask" / f".{prefix}0005.png.k1ll3d.tmp.png"
    live = tmp_path / "mask" / f".{prefix}0006.png.wr1t1n.tmp.png"
    for p in (stale, live):
        p.write_bytes(b"half")
    hour_ago = time.time() - 3600
    os.utime(stale, (hour_ago, hour_ago))
    folder, names = split_passes_out(str(tmp_path / pattern) if pattern else str(tmp_path))
    make_passes(bpy_clean.context.scene, PassOptions(frames=range(1, 2), width=32, height=32,
                                                     passes=("mask",)), Path(folder),
                names=names)
    assert not stale.exists() and live.exists()


def test_panel_refuses_a_blend_relative_folder_in_an_unsaved_file(
        bpy_clean, shot_blend, tmp_path, monkeypatch) -> None:
    import painted_skin

    bpy = bpy_clean
    bpy.ops.wm.open_mainfile(filepath=str(shot_blend))
    bpy.ops.wm.read_homefile(use_empty=True)  # an unsaved file...
    monkeypatch.chdir(tmp_path)
    painted_skin.register()
    try:
        s = bpy.context.scene.painted_skin_passes
        assert s.out_dir == "//passes/"
        with pytest.raises(RuntimeError, match="not saved yet"):
            bpy.ops.painted_skin.render_passes()
        r = bpy.context.scene.painted_skin_restyle
        assert r.out_dir == "//restyle/"
        with pytest.raises(RuntimeError, match="not saved yet"):
            bpy.ops.painted_skin.restyle()
    finally:
        painted_skin.unregister()
    assert list(tmp_path.iterdir()) == []  # nothing landed in the working folder


def test_cameras_switched_by_markers_are_one_shot(bpy_clean, shot_blend, tmp_path) -> None:
    """Markers bind cameras to frames: scene.camera then depends on the last frame set.
    Chunks (and frame-by-frame UI runs) of that shot must still be one shot."""
    from painted_skin.addon.blender.passes.render import PassOptions, make_passes

    bpy = bpy_clean
    bpy.ops.wm.open_mainfile(filepath=str(shot_blend))
    scene = bpy.context.scene
    first = scene.camera
    second = first.copy()
    second.name = "CamB"
    scene.collection.objects.link(second)
    scene.timeline_markers.new("a", frame=1).camera = first
    scene.timeline_markers.new("b", frame=4).camera = second
    for frames in (range(1, 3), range(5, 7), range(3, 4)):
        make_passes(scene, PassOptions(frames=frames, width=32, height=32, passes=("mask",)),
                    tmp_path)
    shot = json.loads((tmp_path / "manifest.json").read_text())["shot"]
    assert shot["camera"] == sorted([first.name, "CamB"])
    assert len(list((tmp_path / "mask").iterdir())) == 5


def test_resumed_cli_passes_print_saved_only_for_frames_written(shot_blend, tmp_path, capsys,
                                                               bpy_clean) -> None:
    out = tmp_path / "p"
    argv = ["passes", str(shot_blend), "--frames", "1-2", "--size", "32x32", "--passes",
            "mask", "--out", str(out)]
    assert cli.main(argv) == 0 and capsys.readouterr().out.count("Saved: '") == 2
    assert cli.main([*argv[:3], "1-3", *argv[4:]]) == 0
    assert capsys.readouterr().out.count("Saved: '") == 1  # frame 3 only
