"""Careless input loses nothing: outputs never replace special files or the run's own
inputs, damaged files and edge values get one line (exit 2), a full disk one line
(exit 1), and every command validates ``--frames`` / ``--passes`` the same way."""

from __future__ import annotations

import json
import os
import resource
import signal
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import demo_walk_blend
from painted_skin import cli
from painted_skin.addon import motion as gen
from painted_skin.addon.blender.blend_files import save_blend_atomic


@pytest.fixture(scope="module")
def character(tmp_path_factory) -> Path:
    import bpy
    from painted_skin.demo.character import build_demo_character

    bpy.ops.wm.read_factory_settings(use_empty=True)
    build_demo_character()
    path = tmp_path_factory.mktemp("character") / "character.blend"
    save_blend_atomic(path)
    return path


@pytest.fixture(scope="module")
def clip(tmp_path_factory) -> Path:
    return gen.write_clip(tmp_path_factory.mktemp("clip") / "walk.bvh", "walk", frames=8,
                          fps=24)


@pytest.fixture(scope="module")
def shot_blend(tmp_path_factory) -> Path:
    return demo_walk_blend(tmp_path_factory.mktemp("shot"), frames=6)


def _err_lines(capfd) -> list[str]:
    return [ln for ln in capfd.readouterr().err.splitlines() if ln.strip()]


# ---------------------------------------------------------------- special files at outputs

def test_atomic_writers_refuse_a_fifo_and_leave_it_a_fifo(tmp_path) -> None:
    from painted_skin.addon.blender.passes.image_io import write_png
    from painted_skin.addon.core.files.atomic import (
        UnwritableOutput,
        write_json_atomic,
        write_npy_atomic,
        write_text_atomic,
    )

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for write in (lambda p: write_json_atomic(p, {"a": 1}), lambda p: write_text_atomic(p, "x"),
                  lambda p: write_npy_atomic(p, np.zeros(3)),
                  lambda p: write_png(p, np.zeros((4, 4), np.uint8)),
                  lambda p: save_blend_atomic(p)):
        with pytest.raises(UnwritableOutput, match="FIFO"):
            write(fifo)
        assert stat.S_ISFIFO(fifo.lstat().st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]  # no temp file left


def test_a_symlink_is_written_through_and_a_link_to_a_fifo_refused(tmp_path) -> None:
    from painted_skin.addon.blender.passes.image_io import read_image, write_png
    from painted_skin.addon.core.files.atomic import UnwritableOutput, write_json_atomic

    real = tmp_path / "real.json"
    real.write_text("{}")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    write_json_atomic(link, {"b": 2})
    assert link.is_symlink() and json.loads(real.read_text()) == {"b": 2}

    img_link = tmp_path / "frame.png"
    img_link.symlink_to(tmp_path / "sub_missing.png")  # dangling: the target is made
    write_png(img_link, np.full((4, 4), 7, np.uint8))
    assert img_link.is_symlink() and read_image(tmp_path / "sub_missing.png")[0, 0] == 7

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    to_fifo = tmp_path / "to_fifo.json"
    to_fifo.symlink_to(fifo)
    with pytest.raises(UnwritableOutput, match="link to .*FIFO"):
        write_json_atomic(to_fifo, {})
    assert stat.S_ISFIFO(fifo.lstat().st_mode) and to_fifo.is_symlink()


def test_dev_null_as_an_output_is_refused_and_survives(tmp_path, clip, capfd) -> None:
    from painted_skin.addon.core.files.atomic import UnwritableOutput, check_writable, output_target

    # The guard first: without it the writers below would replace /dev/null (as root).
    with pytest.raises(UnwritableOutput, match="device"):
        output_target(os.devnull)
    with pytest.raises(UnwritableOutput, match="device"):
        check_writable(os.devnull, "--report file", folder=False)
    rc = cli.main(["retarget", "--source", str(clip), "--target", str(clip),
                   "--report", os.devnull])
    assert rc == 2 and stat.S_ISCHR(os.stat(os.devnull).st_mode)
    err = _err_lines(capfd)
    assert len(err) == 1 and "'/dev/null' is a device, not a regular file" in err[0]


def test_a_device_node_at_an_output_survives_the_cli(tmp_path, character, clip,
                                                     capfd) -> None:
    """A copy of /dev/null in a temp folder: what a real run would destroy, as root."""
    for opt, name in (("--report", "null.json"), ("--out", "null.blend")):
        node = tmp_path / name
        try:
            os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 3))
        except PermissionError:
            pytest.skip("making a device node needs root")
        assert cli.main(["retarget", "--source", str(clip), "--target", str(character),
                         opt, str(node)]) == 2
        assert stat.S_ISCHR(node.lstat().st_mode)
        assert "is a device, not a regular file" in capfd.readouterr().err


# ---------------------------------------------------------------- outputs aliasing inputs

def test_check_distinct_sees_symlinks_and_hard_links(tmp_path) -> None:
    from painted_skin.addon.core.files.paths import AliasedPaths, check_distinct

    a = tmp_path / "a.bvh"
    a.write_text("x")
    hard = tmp_path / "hard.json"
    os.link(a, hard)
    soft = tmp_path / "soft.json"
    soft.symlink_to(a)
    for alias in (a, hard, soft, tmp_path / "." / "a.bvh"):
        with pytest.raises(AliasedPaths, match="same file as the input --source"):
            check_distinct({"--report": alias}, {"--source": a})
    with pytest.raises(AliasedPaths, match="--out .* and --report"):
        check_distinct({"--out": tmp_path / "n.blend", "--report": tmp_path / "n.blend"})
    check_distinct({"--report": tmp_path / "r.json", "--out": None}, {"--source": a})


def test_report_equal_to_source_leaves_the_clip_byte_identical(character, clip, tmp_path,
                                                                 capfd) -> None:
    before = clip.read_bytes()
    hard = tmp_path / "hard_link.bvh"
    os.link(clip, hard)
    for argv in (["--report", str(clip)], ["--report", str(hard)],
                 ["--out", str(character)]):
        rc = cli.main(["retarget", "--source", str(clip), "--target", str(character), *argv])
        assert rc == 2
        err = _err_lines(capfd)
        assert len(err) == 1 and "same file as the input" in err[0]
    assert clip.read_bytes() == before
    out = tmp_path / "shot.blend"
    rc = cli.main(["retarget", "--source", str(clip), "--target", str(character),
                   "--out", str(out), "--report", str(out)])
    assert rc == 2 and "same file" in capfd.readouterr().err and not out.exists()


def test_passes_and_restyle_refuse_the_shot_as_output(shot_blend, capfd) -> None:
    before = shot_blend.read_bytes()
    for cmd in ("passes", "restyle"):
        assert cli.main([cmd, str(shot_blend), "--out", str(shot_blend)]) == 2
        assert "same file as the input shot" in capfd.readouterr().err
    assert shot_blend.read_bytes() == before


# ---------------------------------------------------------------- damaged files, edge values

@pytest.mark.parametrize("kind", ["garbage", "truncated", "header"])
def test_corrupt_blend_is_one_line_exit_2(kind, shot_blend, tmp_path, capfd) -> None:
    data = {"garbage": os.urandom(4096), "truncated": shot_blend.read_bytes()[:5000],
            "header": b"BLENDER-v500RENDH"}[kind]
    bad = tmp_path / f"{kind}.blend"
    bad.write_bytes(data)
    for cmd in ("passes", "restyle"):
        out = tmp_path / f"out_{cmd}"
        assert cli.main([cmd, str(bad), "--out", str(out)]) == 2
        err = _err_lines(capfd)
        assert len(err) == 1 and str(bad) in err[0] and "not a readable .blend" in err[0]
        assert not out.exists()  # the folder this run made is gone again


def _fbx_truncated() -> bytes:
    return b"Kaydara FBX Binary  \x00\x1a\x00" + (7400).to_bytes(4, "little") + bytes(60)


@pytest.mark.parametrize("name,data", [
    ("garbage.fbx", bytes(range(256)) * 8),
    ("truncated.fbx", _fbx_truncated()),
    ("dangling.gltf", json.dumps({"asset": {"version": "2.0"}, "scene": 0,
                                  "scenes": [{"nodes": [0]}],
                                  "nodes": [{"name": "a", "children": [5]}]}).encode()),
])
def test_damaged_clips_are_one_line_without_a_traceback(name, data, character, tmp_path,
                                                        capfd) -> None:
    path = tmp_path / name
    path.write_bytes(data)
    rc = cli.main(["retarget", "--source", str(path), "--target", str(character)])
    captured = capfd.readouterr()
    err = [ln for ln in captured.err.splitlines() if ln.strip()]
    assert rc == 2 and "Traceback" not in captured.err + captured.out
    assert len(err) == 1 and name in err[0] and "damaged or not a valid" in err[0]


def test_a_bvh_with_a_byte_order_mark_imports_like_without(character, clip, tmp_path,
                                                           capfd) -> None:
    bom = tmp_path / "walk.bvh"
    bom.write_bytes(b"\xef\xbb\xbf" + clip.read_bytes())
    reports = []
    for src, name in ((clip, "plain.json"), (bom, "bom.json")):
        assert cli.main(["retarget", "--source", str(src), "--target", str(character),
                         "--report", str(tmp_path / name)]) == 0
        reports.append(json.loads((tmp_path / name).read_text()))
    keys = ("frames", "fps", "pairs", "action")
    assert [{k: r[k] for k in keys} for r in reports][0] == {k: reports[1][k] for k in keys}


@pytest.mark.parametrize("edit,words", [
    (("OFFSET", "\tOFFSET 1e300 0 0"), "beyond 1e+06"),
    (("Frame Time", "Frame Time: 1e-300"), "outside 1-1000 fps"),
    (("Frame Time", "Frame Time: 1e300"), "outside 1-1000 fps"),
])
def test_edge_values_in_a_bvh_are_one_line(edit, words, character, clip, tmp_path,
                                           capfd) -> None:
    lines = clip.read_text().splitlines()
    at = [i for i, ln in enumerate(lines) if ln.strip().startswith(edit[0])][-1]
    lines[at] = edit[1]
    bad = tmp_path / "edge.bvh"
    bad.write_text("\n".join(lines) + "\n")
    report = tmp_path / "r.json"
    rc = cli.main(["retarget", "--source", str(bad), "--target", str(character),
                   "--report", str(report)])
    err = _err_lines(capfd)
    assert rc == 2 and not report.exists()
    assert len(err) == 1 and words in err[0] and "Fix:" in err[0]


def test_a_bvh_with_two_joints_of_one_name_is_one_line(character, clip, tmp_path,
                                                       capfd) -> None:
    text = clip.read_text()
    assert "JOINT RHipJoint" in text
    bad = tmp_path / "twice.bvh"
    bad.write_text(text.replace("JOINT RHipJoint", "JOINT LHipJoint"))
    out = tmp_path / "shot.blend"
    rc = cli.main(["retarget", "--source", str(bad), "--target", str(character),
                   "--out", str(out)])
    err = _err_lines(capfd)
    assert rc == 2 and not out.exists()
    assert len(err) == 1 and "'LHipJoint'" in err[0] and "'LHipJoint.001'" in err[0], err
    assert "Fix: give every joint its own name" in err[0]
    second = [i for i, ln in enumerate(bad.read_text().splitlines(), 1)
              if "JOINT LHipJoint" in ln][1]
    assert f"twice.bvh:{second}:" in err[0]  # the line of the second one


def test_a_full_disk_while_saving_is_one_line_exit_1(character, clip, tmp_path) -> None:
    """RLIMIT_FSIZE makes every write past 64 KiB fail (EFBIG), as a full disk would."""
    out = tmp_path / "shot.blend"

    def small_files() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (65536, 65536))

    p = subprocess.run([sys.executable, "-m", "painted_skin.cli", "retarget", "--source",
                        str(clip), "--target", str(character), "--out", str(out)],
                       capture_output=True, text=True, timeout=120, preexec_fn=small_files,
                       cwd=tmp_path)
    err = [ln for ln in p.stderr.splitlines() if ln.startswith("painted-skin")]
    assert p.returncode == 1, p.stderr[-2000:]
    assert "Traceback" not in p.stderr and len(err) == 1
    assert "cannot save" in err[0] and "disk space" in err[0]
    assert sorted(x.name for x in tmp_path.iterdir()) == []  # no shot, no temp file


# ---------------------------------------------------------------- one validation for all

def test_frames_parser_bounds_and_messages() -> None:
    from painted_skin.addon.core.files.frame_ranges import FrameRangeError, parse_frames

    assert parse_frames("3") == range(3, 4) and parse_frames(" 1 - 48 ") == range(1, 49)
    assert parse_frames("-5-5") == range(-5, 6)
    for text, words in (("1-" + "9" * 40, "Blender's limit"), ("1-1048575", "Blender's limit"),
                        ("9-1", "reversed"), ("a-b", "FIRST-LAST"), ("", "FIRST-LAST"),
                        ("1-٣", "FIRST-LAST")):
        with pytest.raises(FrameRangeError, match=words):
            parse_frames(text)


def test_restyle_and_passes_refuse_the_same_frames(shot_blend, tmp_path, capfd) -> None:
    msgs = []
    for cmd in ("passes", "restyle"):
        for frames in ("1-99", "1-" + "9" * 40):
            out = tmp_path / f"{cmd}_out"
            assert cli.main([cmd, str(shot_blend), "--out", str(out), "--frames", frames]) == 2
            err = _err_lines(capfd)
            assert len(err) == 1 and not out.exists()
            msgs.append(err[0])
    assert "outside the scene's range 1-6" in msgs[0] and msgs[0] == msgs[2]
    assert "Blender's limit" in msgs[1] and msgs[1] == msgs[3]


def test_passes_naming_no_pass_is_refused(shot_blend, tmp_path, capfd) -> None:
    out = tmp_path / "p"
    for passes in (",", " , ,", ""):
        assert cli.main(["passes", str(shot_blend), "--out", str(out), "--passes", passes]) == 2
        assert "names no pass" in capfd.readouterr().err and not out.exists()


def test_a_failing_passes_run_leaves_no_empty_folder(shot_blend, tmp_path, capfd) -> None:
    out = tmp_path / "deep" / "p"
    assert cli.main(["passes", str(shot_blend), "--out", str(out), "--camera", "nope"]) == 2
    assert "not a camera" in capfd.readouterr().err
    assert not (tmp_path / "deep").exists()
    kept = tmp_path / "kept"
    kept.mkdir()
    assert cli.main(["passes", str(shot_blend), "--out", str(kept), "--camera", "nope"]) == 2
    assert kept.is_dir()  # a folder the user made is never removed


def test_train_skin_and_score_refuse_aliased_outputs(tmp_path, capfd) -> None:
    folder = tmp_path / "same"
    argv = ["train-skin", "--character", "demo", "--out", str(folder), "--cache", str(folder)]
    assert cli.main(argv) == 2
    assert "--out" in capfd.readouterr().err and not folder.exists()
    if "score" not in cli.build_parser()._subparsers._group_actions[0].choices:
        pytest.skip("this install has no score command")
    frames = tmp_path / "frames"
    frames.mkdir()
    assert cli.main(["score", "--reference", str(frames), "--frames", str(frames),
                     "--json", str(frames)]) == 2
    assert "--json" in capfd.readouterr().err


def test_restyle_shot_refuses_frames_outside_the_scene_like_passes(shot_blend, tmp_path,
                                                                   bpy_clean) -> None:
    from painted_skin.addon.blender.restyle.loop import RestyleRequest, restyle_shot
    from painted_skin.addon.core.files.frame_ranges import FrameRangeError

    bpy_clean.ops.wm.open_mainfile(filepath=str(shot_blend))
    with pytest.raises(FrameRangeError, match="outside the scene's range 1-6"):
        restyle_shot(bpy_clean.context.scene, RestyleRequest.make(tmp_path / "r",
                                                                  url="tcp://127.0.0.1:9",
                                                                  frames=[5, 6, 7], size=(32, 32),
                                                                  timeout_s=0.5))
    assert not (tmp_path / "r" / "restyle.json").exists()
