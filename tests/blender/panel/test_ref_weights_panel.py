"""A reference row's weight in the Restyle panel reaches the backend's OPEN as the
``ref_weights`` option, one weight per reference sent, in the same order."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest
from conftest import demo_walk_blend
from test_panel import Drawn


@pytest.fixture
def addon(bpy_clean):
    import painted_skin

    painted_skin.register()
    try:
        yield bpy_clean
    finally:
        painted_skin.unregister()


def _png(path: Path, rgb: np.ndarray) -> Path:
    from painted_skin.addon.blender.passes.image_io import write_png

    return write_png(path, rgb)


def _rows(s, files: list[Path], weights: list[float], use: list[bool]) -> None:
    for f, w, u in zip(files, weights, use, strict=True):
        r = s.references.add()
        r.filepath, r.weight, r.use = str(f), w, u


def test_weights_of_the_used_rows_become_ref_weights(addon, tmp_path) -> None:
    from painted_skin.addon.blender.passes.geometry import ShotError
    from painted_skin.addon.blender.restyle.settings import reference_images, restyle_options

    rng = np.random.default_rng(0)
    files = [_png(tmp_path / f"r{i}.png", rng.integers(0, 256, (8, 8, 3), np.uint8))
             for i in range(3)]
    s = addon.context.scene.painted_skin_restyle
    assert s.references.add().weight == 1.0  # the default counts like the others
    s.references.clear()
    _rows(s, files, [1.0, 0.5, 2.0], [True, True, False])
    assert restyle_options(s)["ref_weights"] == [1.0, 0.5]  # the unused row sends nothing
    assert len(reference_images(s)) == 2
    s.references[1].weight = 1.0
    assert "ref_weights" not in restyle_options(s)  # all 1: the backend's equal weights
    s.references[0].weight = s.references[1].weight = 0.0
    with pytest.raises(ShotError, match="every used reference has weight 0"):
        restyle_options(s)


def test_the_panel_opens_the_shot_with_the_rows_weights(addon, serve, tmp_path,
                                                       monkeypatch) -> None:
    from painted_skin.backend import sessions

    opens: list = []
    real = sessions.parse_open
    monkeypatch.setattr(sessions, "parse_open",
                        lambda msg, default: opens.append(real(msg, default)) or opens[-1])
    _, url = serve()
    shot = demo_walk_blend(tmp_path, frames=1)
    addon.ops.wm.open_mainfile(filepath=str(shot))
    scene = addon.context.scene
    scene.frame_start = scene.frame_end = 1
    rng = np.random.default_rng(1)
    front = _png(tmp_path / "front.png", rng.integers(0, 256, (12, 10, 3), np.uint8))
    side = _png(tmp_path / "side.png", rng.integers(0, 256, (10, 12, 3), np.uint8))
    s = scene.painted_skin_restyle
    s.url, s.out_dir, s.pipeline, s.width, s.height = url, str(tmp_path / "out"), "echo", 32, 32
    _rows(s, [front, side], [1.0, 0.5], [True, True])
    assert addon.ops.painted_skin.restyle() == {"FINISHED"}
    (req,) = opens
    assert req.options["ref_weights"] == [1.0, 0.5]
    assert [r.shape for r in req.refs] == [(12, 10, 3), (10, 12, 3)]  # weights' order


_DRAW_SCRIPT = textwrap.dedent("""
    import json
    import bpy, painted_skin

    bpy.ops.wm.read_factory_settings(use_empty=True)
    painted_skin.register()
    s = bpy.context.scene.painted_skin_restyle
    s.references.add().weight = 0.5
    win = bpy.context.window_manager.windows[0]
    area = next(a for a in win.screen.areas if a.type == "VIEW_3D")
    region = next(r for r in area.regions if r.type == "UI")
    with bpy.context.temp_override(window=win, area=area, region=region):
        pop = bpy.context.window_manager.popover_begin__internal()
        bpy.types.PS_PT_restyle_references.draw(pop, bpy.context)
        out = {"refs": [pop.layout.introspect()]}
    print("LAYOUT" + json.dumps(out), flush=True)
    import os
    os._exit(0)  # the undisplayed popover block is never freed: skip the leak report
""")


def test_each_reference_row_shows_its_weight() -> None:
    drawn = Drawn(_DRAW_SCRIPT)
    assert {"PS_RestyleReference.use", "PS_RestyleReference.weight"} <= drawn.props("refs")


def test_the_cli_sends_one_weight_per_ref_and_refuses_a_wrong_count(
        serve, tmp_path, monkeypatch, capsys) -> None:
    """``--ref-weight`` (one per ``--ref``) reaches the OPEN as ``ref_weights``; a count
    that differs is bad input (exit 2) before any folder is made."""
    from painted_skin import cli
    from painted_skin.backend import sessions

    opens: list = []
    real = sessions.parse_open
    monkeypatch.setattr(sessions, "parse_open",
                        lambda msg, default: opens.append(real(msg, default)) or opens[-1])
    _, url = serve()
    shot = demo_walk_blend(tmp_path, frames=1)
    rng = np.random.default_rng(2)
    refs = [_png(tmp_path / f"r{i}.png", rng.integers(0, 256, (8, 8, 3), np.uint8))
            for i in range(2)]
    base = ["restyle", str(shot), "--frames", "1", "--size", "32x32", "--pipeline", "echo",
            "--url", url, "--ref", str(refs[0]), "--ref", str(refs[1])]
    bad = tmp_path / "bad"
    assert cli.main([*base, "--out", str(bad), "--ref-weight", "1"]) == 2
    assert "1 --ref-weight for 2 --ref" in capsys.readouterr().err and not bad.exists()
    assert cli.main([*base, "--out", str(tmp_path / "ok"), "--ref-weight", "1",
                     "--ref-weight", "0.25"]) == 0, capsys.readouterr().err
    (req,) = opens
    assert req.options["ref_weights"] == [1.0, 0.25]
