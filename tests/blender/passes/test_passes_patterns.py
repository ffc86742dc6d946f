"""Passes named by a farm's output pattern (``render/passes/shot_####``): each pass in
its own folder, every file named by the pattern, resume and frame lists as with a plain
folder, and a bad pattern refused before anything is written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import demo_walk_blend

PASSES = ("depth", "mask", "skeleton")


@pytest.fixture(scope="module")
def shot_blend(tmp_path_factory) -> Path:
    return demo_walk_blend(tmp_path_factory.mktemp("shot"), frames=8)


def _render(bpy, shot: Path, out: str, frames):
    from painted_skin.addon.blender.passes.render import PassOptions, make_passes, split_passes_out

    bpy.ops.wm.open_mainfile(filepath=str(shot))
    folder, names = split_passes_out(out)
    opts = PassOptions(frames=frames, width=32, height=32, passes=PASSES)
    return Path(folder), make_passes(bpy.context.scene, opts, Path(folder), names=names)


def _files(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}


def test_a_pattern_names_every_pass_file_of_each_frame(bpy_clean, shot_blend, tmp_path):
    folder, summary = _render(bpy_clean, shot_blend, str(tmp_path / "render/passes/shot_###"),
                              range(2, 4))
    assert folder == tmp_path / "render/passes" and summary["written"] == 2
    want = {f"{sub}/shot_{f:03d}.{ext}" for f in (2, 3) for sub, ext in (
        ("depth", "exr"), ("depth16", "png"), ("depth8", "png"), ("mask", "png"),
        ("skeleton", "png"), ("skeleton", "json"), ("skeleton_coco18", "json"),
        ("camera", "json"))}
    assert _files(folder) == want | {"manifest.json"}
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["files"]["depth"] == ["depth/shot_###.exr", "depth16/shot_###.png",
                                          "depth8/shot_###.png"]
    assert manifest["frame_pattern"] == "shot_###"


def test_a_plain_folder_keeps_its_layout(bpy_clean, shot_blend, tmp_path):
    folder, _ = _render(bpy_clean, shot_blend, str(tmp_path / "passes"), [2])
    assert "depth/0002.exr" in _files(folder) and "camera/0002.json" in _files(folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    assert "frame_pattern" not in manifest and manifest["files"]["mask"] == ["mask/####.png"]


def test_a_pattern_run_resumes_and_takes_frame_lists(bpy_clean, shot_blend, tmp_path):
    from painted_skin.addon.core.files.frame_ranges import parse_frames

    out, frames = str(tmp_path / "sh010_####_v2"), parse_frames("3,5-7")
    folder, first = _render(bpy_clean, shot_blend, out, frames)
    assert first["written"] == 4
    assert sorted(p.name for p in (folder / "mask").iterdir()) == [
        f"sh010_{f:04d}_v2.png" for f in (3, 5, 6, 7)]
    (folder / "depth" / "sh010_0006_v2.exr").unlink()
    stamp = {p: p.stat().st_mtime_ns for p in folder.rglob("*.png")}
    _, again = _render(bpy_clean, shot_blend, out, frames)
    assert (again["written"], again["done"]) == (1, 4)
    assert (folder / "depth" / "sh010_0006_v2.exr").exists()
    changed = {p.name for p, t in stamp.items() if p.stat().st_mtime_ns != t}
    assert changed == {"sh010_0006_v2.png"}


def test_a_folder_refuses_a_second_naming(bpy_clean, shot_blend, tmp_path):
    from painted_skin.addon.blender.passes.geometry import ShotError

    _render(bpy_clean, shot_blend, str(tmp_path / "shot_####"), [2])
    with pytest.raises(ShotError, match="holds passes named shot_####"):
        _render(bpy_clean, shot_blend, str(tmp_path / "take_####"), [3])
    with pytest.raises(ShotError, match="holds passes named shot_####"):
        _render(bpy_clean, shot_blend, str(tmp_path), [3])
    assert not list(tmp_path.rglob("take_*")) and not (tmp_path / "mask/0003.png").exists()


@pytest.mark.parametrize(("out", "match"), [
    ("shot.exr", "names a .exr file"),
    ("shot_####.exr", "ends in .exr.*drop the extension"),
    ("shot_##_v##", "2 runs of '#'"),
    ("sh_##/shot", "path separator after its '#' run"),
])
def test_a_bad_pattern_is_one_clear_error_before_any_file(bpy_clean, shot_blend, tmp_path,
                                                          out, match):
    from painted_skin.addon.core.files.frame_patterns import FramePatternError

    with pytest.raises(FramePatternError, match=match) as e:
        _render(bpy_clean, shot_blend, str(tmp_path / "render" / out), [2])
    assert "\n" not in str(e.value) and isinstance(e.value, ValueError)
    assert not (tmp_path / "render").exists()


@pytest.mark.parametrize(("value", "folder"), [("//render/shot_####", "render"),
                                               ("//shot_####", ""), ("//passes/", "passes")])
def test_the_panel_takes_a_pattern_beside_the_blend(bpy_clean, shot_blend, value, folder):
    from painted_skin.addon.blender.out_paths import passes_output

    bpy_clean.ops.wm.open_mainfile(filepath=str(shot_blend))
    path, names = passes_output(value)
    assert path == (shot_blend.parent / folder).resolve()
    assert names.name(7) == ("0007" if "#" not in value else "shot_0007")


def test_the_panels_render_passes_writes_the_pattern(bpy_clean, shot_blend, tmp_path):
    """Render Passes with a pattern in the Passes folder field names its files by it, and
    the Results compare finds the beauty frame there."""
    import painted_skin

    bpy = bpy_clean
    bpy.ops.wm.open_mainfile(filepath=str(shot_blend))
    painted_skin.register()
    try:
        scene = bpy.context.scene
        scene.frame_start = scene.frame_end = 2
        s = scene.painted_skin_passes
        s.out_dir = str(tmp_path / "render" / "sh010_####")
        assert bpy.ops.painted_skin.render_passes() == {"FINISHED"}
        files = _files(tmp_path / "render")
        assert "manifest.json" in files and "camera/sh010_0002.json" in files
        assert not any(f.endswith("/0002.json") for f in files)
        s.out_dir = str(tmp_path / "render" / "sh010_##.exr")
        with pytest.raises(RuntimeError, match="ends in .exr"):
            bpy.ops.painted_skin.render_passes()
    finally:
        painted_skin.unregister()
