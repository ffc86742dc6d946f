"""``painted-skin render``: Blender's own render pipeline with the Painted Skin engine in
the bpy module: the frames of a restyled shot, named by Blender's output settings,
written atomically, resumed on a re-run; bad input and a missing backend are one line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_render_engine import _restyled


@pytest.fixture(autouse=True)
def unregistered_after():
    """The CLI registers the add-on in its process: undone for the tests that follow."""
    yield
    import bpy

    if hasattr(bpy.types.Scene, "painted_skin_engine"):
        import painted_skin

        painted_skin.unregister()


@pytest.fixture(scope="module")
def shot(tmp_path_factory) -> Path:
    from conftest import demo_walk_blend

    return demo_walk_blend(tmp_path_factory.mktemp("render_cli_shot"), frames=8)


def test_render_writes_the_restyled_chain_and_resumes(bpy_clean, shot, skin_backend, tmp_path,
                                                      capsys):
    from painted_skin import cli
    from painted_skin.addon.blender.passes.image_io import read_image

    size = 128
    out = tmp_path / "painted"
    argv = ["render", str(shot), "--frames", "2-5", "--size", f"{size}x{size}", "--out",
            str(out), "--url", skin_backend]
    assert cli.main(argv) == 0
    printed = capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir()) == [f"{f:04d}.png" for f in range(2, 6)]
    assert f"Saved: '{out / '0005.png'}'" in printed
    assert f"4/4 frames done (4 written now) in {out}" in printed
    scene = bpy_clean.context.scene
    scene.render.resolution_x = scene.render.resolution_y = size
    expect = _restyled(bpy_clean, scene, skin_backend, size, [2, 3, 4, 5], tmp_path / "rs")
    for f in range(2, 6):
        got = read_image(out / f"{f:04d}.png")[..., :3]
        diff = np.abs(got.astype(int) - expect[f].astype(int)).max()
        assert diff <= 1, f"frame {f}: {diff}/255 from restyle"

    stamp = (out / "0003.png").stat().st_mtime_ns
    (out / "0004.png").unlink()
    assert cli.main(argv) == 0  # resumes: only the missing frame is painted again
    assert "4/4 frames done (1 written now)" in capsys.readouterr().out
    assert (out / "0003.png").stat().st_mtime_ns == stamp
    assert not list(out.glob(".*"))  # no partial file left


def test_render_names_frames_by_a_blender_output_path(bpy_clean, shot, skin_backend, tmp_path):
    from painted_skin import cli

    out = tmp_path / "farm" / "sh010_###"
    assert cli.main(["render", str(shot), "--frames", "3", "--size", "96x64", "--out",
                     str(out), "--url", skin_backend]) == 0
    assert [p.name for p in (tmp_path / "farm").iterdir()] == ["sh010_003.png"]


def test_render_without_a_backend_is_one_line_and_no_file(bpy_clean, shot, tmp_path, capsys):
    from painted_skin import cli
    from test_client import free_url

    out = tmp_path / "none"
    rc = cli.main(["render", str(shot), "--frames", "2", "--size", "64x64", "--out",
                   str(out), "--url", free_url()])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1
    assert len(err) == 1 and "no backend answers" in err[0] and "--start-backend" in err[0]
    assert not out.exists() or not any(out.iterdir())


@pytest.mark.parametrize("argv, says", [
    (["--frames", "90-95"], "range"),
    (["--size", "12x12"], "--size"),
    (["--frames", "2", "--model", "nobody"], "nobody"),
])
def test_render_bad_input_is_one_line_exit_2(bpy_clean, shot, skin_backend, tmp_path, capsys,
                                             argv, says):
    from painted_skin import cli

    out = tmp_path / "bad"
    rc = cli.main(["render", str(shot), "--out", str(out), "--url", skin_backend, *argv])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2, err
    assert len(err) == 1 and says in err[0]
    assert not out.exists() or not any(out.iterdir())


def test_a_backend_that_cannot_start_is_an_error_not_a_traceback(bpy_clean, shot, tmp_path,
                                                                 capsys):
    from painted_skin import cli
    from test_client import free_url

    out = tmp_path / "nostart"
    rc = cli.main(["render", str(shot), "--frames", "2", "--size", "64x64", "--out",
                   str(out), "--url", free_url(), "--start-backend",
                   str(tmp_path / "no-such-python")])
    err = capsys.readouterr().err
    assert rc == 1 and err.startswith("painted-skin: error:") and "no-such-python" in err
    assert "Traceback" not in err
    assert not out.exists() or not any(out.iterdir())


def test_render_tells_once_that_a_model_learned_older_passes(bpy_clean, shot, serve,
                                                             tmp_path, monkeypatch, capsys):
    """A skin model trained on an older add-on's passes still renders; the job says so
    once (Blender's report, and the log a farm keeps), not once a frame."""
    import json
    import shutil

    from painted_skin import cli
    from painted_skin.backend.skin import registry
    from painted_skin.wire import VALUES_VERSION

    mine = tmp_path / "mine"
    shutil.copytree(registry.resolve("demo"), mine)
    cfg = json.loads((mine / "config.json").read_text())
    (mine / "config.json").write_text(json.dumps({**cfg, "pass_version": VALUES_VERSION - 1}))
    (tmp_path / "models.toml").write_text(f'[models.mine]\npath = "{mine}"\n')
    monkeypatch.setenv(registry.ENV, str(tmp_path / "models.toml"))
    _, url = serve()
    out = tmp_path / "painted"
    assert cli.main(["render", str(shot), "--frames", "2-3", "--size", "64x64", "--out",
                     str(out), "--url", url, "--model", "mine"]) == 0
    printed = capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir()) == ["0002.png", "0003.png"]
    assert printed.count(f"'mine' learned version {VALUES_VERSION - 1} of the passes") == 1
