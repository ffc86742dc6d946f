"""``restyle --skin-model DIR`` and ``render --skin-model DIR``: a model folder just
trained paints a shot with no registry file to write: the backend the command starts
serves the folder; a backend it does not start is never asked to read a path."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import demo_walk_blend


@pytest.fixture(scope="module")
def shot(tmp_path_factory) -> Path:
    return demo_walk_blend(tmp_path_factory.mktemp("skin_folder_shot"), frames=6)


@pytest.fixture(scope="module")
def model_dir() -> Path:
    from painted_skin.backend.skin import registry

    return registry.resolve("demo")


@pytest.fixture(autouse=True)
def unregistered_after():
    yield
    import bpy

    if hasattr(bpy.types.Scene, "painted_skin_engine"):
        import painted_skin

        painted_skin.unregister()


def test_restyle_paints_with_a_model_folder(bpy_clean, shot, model_dir, skin_backend,
                                            tmp_path):
    from painted_skin import cli
    from painted_skin.addon.blender.passes.image_io import read_image
    from test_client import free_url

    out = tmp_path / "folder"
    assert cli.main(["restyle", str(shot), "--frames", "1-2", "--size", "128x128", "--out",
                     str(out), "--skin-model", str(model_dir), "--start-backend",
                     sys.executable, "--url", free_url()]) == 0
    settings = json.loads((out / "restyle.json").read_text())
    assert settings["pipeline"] == "skin" and settings["options"]["model"] == "folder"
    # The same model by its registry name, through a backend running elsewhere.
    ref = tmp_path / "named"
    assert cli.main(["restyle", str(shot), "--frames", "1-2", "--size", "128x128", "--out",
                     str(ref), "--pipeline", "skin", "--options", '{"model": "demo"}',
                     "--url", skin_backend]) == 0
    for f in (1, 2):
        a = read_image(out / "restyled" / f"{f:04d}.png")
        b = read_image(ref / "restyled" / f"{f:04d}.png")
        assert np.array_equal(a, b) and a.std() > 5


def test_render_paints_with_a_model_folder(bpy_clean, shot, model_dir, tmp_path):
    from painted_skin import cli
    from test_client import free_url

    out = tmp_path / "frames"
    assert cli.main(["render", str(shot), "--frames", "2", "--size", "64x64", "--out",
                     str(out), "--skin-model", str(model_dir), "--start-backend",
                     sys.executable, "--url", free_url()]) == 0
    assert [p.name for p in out.iterdir()] == ["0002.png"]


@pytest.mark.parametrize("argv, says", [
    (["--start-backend", sys.executable], "config.json"),  # not a model folder
    ([], "--start-backend"),  # a backend elsewhere is never asked to read a path
    (["--start-backend", sys.executable, "--pipeline", "echo"], "skin pipeline"),
])
def test_restyle_skin_model_refusals_are_one_line(bpy_clean, shot, model_dir, tmp_path,
                                                  capsys, argv, says):
    from painted_skin import cli

    folder = tmp_path if says == "config.json" else model_dir
    out = tmp_path / "out"
    rc = cli.main(["restyle", str(shot), "--frames", "2", "--out", str(out),
                   "--skin-model", str(folder), *argv])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and says in err[0], err
    assert not out.exists()
