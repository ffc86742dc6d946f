"""``#``-padded frame names as farms and Blender's render output hand them: the pure
parsing, and restyle runs that write, resume and continue a temporal chain by them."""

from __future__ import annotations

from pathlib import Path

import pytest
from painted_skin.addon.core.files.frame_patterns import (
    FramePattern,
    FramePatternError,
    blend_relative,
    parse_frame_pattern,
    split_output_path,
)
from test_farm import ENTRY, blender, error_lines, saved


@pytest.mark.parametrize("text, frame, name", [
    ("shot_####.png", 7, "shot_0007.png"),
    ("shot_##", 7, "shot_07.png"),          # the extension is the file type's
    ("shot_##", 123, "shot_123.png"),       # padding is a minimum, never a cut
    ("frame_", 7, "frame_0007.png"),        # no '#': 4 digits appended, as Blender
    ("frame_.png", 7, "frame_0007.png"),
    ("f#_v2", 3, "f3_v2.png"),
    ("######", -12, "-00012.png"),
], ids=lambda v: str(v))
def test_names_follow_the_hash_run(text, frame, name):
    assert parse_frame_pattern(text, ".png").name(frame) == name


@pytest.mark.parametrize("text, words", [
    ("a_##_b_##.png", "has 2 runs of '#'"),
    ("shot_##/beauty.png", "path separator after its '#' run"),
    ("shot_##\\beauty.png", "path separator after its '#' run"),
    ("shot_####.exr", "these frames are .png files"),
    ("shot.exr", "these frames are .png files"),
    ("renders/", "names no file"),
    ("x_" + "#" * 300 + ".png", "at most 10 '#'"),
    ("n" * 250 + "_####.png", "at most 255"),
], ids=["two-runs", "separator", "backslash", "other-type", "other-type-no-run", "no-file",
        "too-many-digits", "name-too-long"])
def test_bad_patterns_are_refused_in_one_line(text, words):
    with pytest.raises(FramePatternError, match="^[^\n]+$") as e:
        parse_frame_pattern(text, ".png")
    assert words in str(e.value)
    assert isinstance(e.value, ValueError)  # the CLI's exit 2


def test_a_render_output_path_splits_into_folder_and_names():
    assert split_output_path("/farm/sh010/restyled", ".png") == ("/farm/sh010/restyled", None)
    folder, names = split_output_path("/farm/sh010/shot_###.png", ".png")
    assert folder == "/farm/sh010" and names.name(5) == "shot_005.png"
    folder, names = split_output_path("C:\\farm\\sh010\\shot_##", ".png")
    assert folder == "C:\\farm\\sh010" and names.name(5) == "shot_05.png"
    assert blend_relative("//render/x_##", "/shots/a/sh.blend") == "/shots/a/render/x_##"
    assert blend_relative("/abs/x_##", "/shots/a/sh.blend") == "/abs/x_##"


def test_the_glob_finds_the_frames_and_nothing_else(tmp_path):
    names = FramePattern("", "sh[1]_", 3, ".png")  # glob characters in the name
    for f in (1, 2, 1000):
        (tmp_path / names.name(f)).touch()
    for other in ("sh[1]_001.png.tmp", "other_001.png", "sh[1]_.png"):
        (tmp_path / other).touch()
    assert sorted(p.name for p in tmp_path.glob(names.glob())) == [
        "sh[1]_001.png", "sh[1]_002.png", "sh[1]_1000.png"]


# ---- restyle runs through the farm entry, as a worker runs them -------------------------

@pytest.fixture(scope="module")
def shot(tmp_path_factory) -> Path:
    from conftest import demo_walk_blend

    return demo_walk_blend(tmp_path_factory.mktemp("pattern_shot"), frames=6)


SKIN = ["--size", "32x32", "--pipeline", "skin", "--seed", "3", "--timeout", "120"]


def restyle(shot: Path, url: str, *args: str):
    return blender(["-b", str(shot), "--python-exit-code", "1", "-P", str(ENTRY), "--",
                    "restyle", "--url", url, *SKIN, *args])


def test_frame_pattern_names_resumes_and_continues_the_chain(shot, skin_backend, tmp_path):
    out = tmp_path / "r"
    first = restyle(shot, skin_backend, "--out", str(out), "--frame-pattern", "sh010_##",
                    "--frames", "1-2")
    assert first.returncode == 0, first.stderr
    assert saved(first) == ["sh010_01.png", "sh010_02.png"]
    assert sorted(p.name for p in (out / "restyled").iterdir()) == ["sh010_01.png",
                                                                    "sh010_02.png"]
    again = restyle(shot, skin_backend, "--out", str(out), "--frame-pattern", "sh010_##",
                    "--frames", "1-2")  # a re-queued task: the frames are found by name
    assert again.returncode == 0 and saved(again) == [], again.stderr
    nxt = restyle(shot, skin_backend, "--out", str(out), "--frame-pattern", "sh010_##",
                  "--frames", "3")  # the next chunk finds frame 2 under its pattern name
    assert nxt.returncode == 0, nxt.stderr
    assert saved(nxt) == ["sh010_03.png"]
    early = restyle(shot, skin_backend, "--out", str(out), "--frame-pattern", "sh010_##",
                    "--frames", "5")
    assert early.returncode == 2 and "continues the temporal chain from frame 4" in \
        error_lines(early)[0]


def test_another_pattern_in_the_same_folder_is_refused(shot, skin_backend, tmp_path):
    out = tmp_path / "r"
    assert restyle(shot, skin_backend, "--out", str(out), "--frames", "1",
                   "--options", '{"temporal": false}').returncode == 0
    other = restyle(shot, skin_backend, "--out", str(out), "--frame-pattern", "x_####",
                    "--frames", "1", "--options", '{"temporal": false}')
    assert other.returncode == 2, other.stderr
    (line,) = error_lines(other)
    assert "holds frames named restyled/####.png (this run: restyled/x_####.png)" in line
    assert sorted(p.name for p in (out / "restyled").iterdir()) == ["0001.png"]


def test_a_render_output_out_writes_the_frames_there(shot, skin_backend):
    proc = restyle(shot, skin_backend, "--out", "//render_out/shot_###.png", "--frames", "1",
                   "--options", '{"temporal": false}')
    assert proc.returncode == 0, proc.stderr
    assert saved(proc) == ["shot_001.png"]
    assert (shot.parent / "render_out" / "shot_001.png").is_file()


@pytest.mark.parametrize("args, words", [
    (["--out", "{tmp}/a_##_##.png"], "has 2 runs of '#'"),
    (["--out", "{tmp}/a_##/b.png"], "path separator after its '#' run"),
    (["--out", "{tmp}/o", "--frame-pattern", "sub/x_##"], "holds a folder"),
    (["--out", "{tmp}/x_##", "--frame-pattern", "y_##"], "give one of them"),
], ids=["two-runs", "separator", "folder-in-pattern", "both"])
def test_bad_patterns_exit_2_before_anything_is_written(shot, tmp_path, args, words):
    proc = restyle(shot, "tcp://127.0.0.1:9", *(a.replace("{tmp}", str(tmp_path))
                                                 for a in args))
    assert proc.returncode == 2, proc.stderr
    (line,) = error_lines(proc)
    assert words in line
    assert list(tmp_path.iterdir()) == []


def test_passes_with_a_300_digit_pattern_is_one_line_and_writes_nothing(shot, tmp_path, capfd):
    from painted_skin import cli

    code = cli.main(["passes", str(shot), "--out", str(tmp_path / "p") + "/" + "#" * 300])
    err = [ln for ln in capfd.readouterr().err.splitlines() if ln.strip()]
    assert code == 2 and len(err) == 1 and "at most 10 '#'" in err[0], err
    assert list(tmp_path.iterdir()) == []
