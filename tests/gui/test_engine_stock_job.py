"""A farm's stock Blender job with the Painted Skin engine: ``blender -b shot.blend -E
PAINTED_SKIN -a`` in a real Blender binary with the extension zip installed writes the
painted frames by the shot's output path and exits 0; with no backend it exits 1 and
writes nothing. Opt-in like the window checks: needs ``PAINTED_SKIN_BLENDER`` (see
``test_panel_in_window``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_panel_in_window import _blender_or_skip, extension_zip

pytestmark = [pytest.mark.slow]

PKG = "bl_ext.user_default.painted_skin"


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(blender, its environment with the extension installed, a shot set for the engine)."""
    blender = _blender_or_skip()
    tmp = tmp_path_factory.mktemp("stock_job")
    zip_path = extension_zip(blender, tmp / "zip")
    env = {**os.environ, "BLENDER_USER_RESOURCES": str(tmp / "res")}
    proc = subprocess.run([blender, "--command", "extension", "install-file", "-r",
                           "user_default", "-e", str(zip_path)], capture_output=True,
                          text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    shot = tmp / "shot.blend"
    script = (
        "import sys, bpy\n"
        f"sys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})\n"
        "from pathlib import Path\n"
        "from conftest import demo_walk_blend\n"
        "import painted_skin\n"
        f"demo_walk_blend(Path({str(tmp)!r}), 8)\n"
        "painted_skin.register()\n"
        "s = bpy.context.scene\n"
        "s.painted_skin_engine.start_local = False\n"
        "s.render.resolution_x = s.render.resolution_y = 96\n"
        "s.render.resolution_percentage = 100\n"
        "s.render.filepath = '//frames/sh010_####'\n"
        "s.view_settings.view_transform, s.view_settings.look = 'Standard', 'None'\n"
        f"bpy.ops.wm.save_as_mainfile(filepath={str(shot)!r})\n")
    made = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300)
    assert made.returncode == 0, made.stderr[-2000:]
    return blender, env, shot


def _job(blender: str, env: dict, shot: Path, url: str, out: str) -> subprocess.CompletedProcess:
    # The URL goes in through --python-expr: a farm sets it in the shot instead.
    set_url = f"import bpy; bpy.context.scene.painted_skin_engine.url = {url!r}"
    return subprocess.run([blender, "-b", str(shot), "--addons", PKG, "--python-expr",
                           set_url, "-E", "PAINTED_SKIN", "-o", out, "-s", "2", "-e", "4",
                           "-a"], capture_output=True, text=True, env=env, timeout=600)


def test_a_stock_blender_job_renders_painted_frames(installed, skin_backend, tmp_path):
    blender, env, shot = installed
    run = _job(blender, env, shot, skin_backend, str(tmp_path / "sh010_####"))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert sorted(p.name for p in tmp_path.glob("sh010_*.png")) == [
        "sh010_0002.png", "sh010_0003.png", "sh010_0004.png"]
    assert "Engine: Painted Skin" in run.stdout + run.stderr
    assert f"Saved: '{tmp_path / 'sh010_0004.png'}'" in run.stdout + run.stderr


def test_a_stock_job_without_a_backend_exits_1_and_writes_nothing(installed, tmp_path):
    from test_client import free_url

    blender, env, shot = installed
    run = _job(blender, env, shot, free_url(), str(tmp_path / "none_####"))
    assert run.returncode == 1
    assert "Painted Skin: no backend answers" in run.stdout + run.stderr
    assert not list(tmp_path.glob("none_*"))
