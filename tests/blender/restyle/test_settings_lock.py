"""Two restyles into one folder at once: the settings check cannot race. A run with
other settings is refused while one writes the folder; runs with the same settings
(farm chunks) share it; a finished run's folder resumes."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import demo_walk_blend

SETTINGS = {"pipeline": "echo", "prompt": "", "negative_prompt": "", "seed": 1,
            "width": 32, "height": 32, "options": {}}


def test_a_run_with_other_settings_is_refused_while_one_runs(tmp_path) -> None:
    from painted_skin.addon.blender.passes.geometry import ShotError
    from painted_skin.addon.blender.restyle.output import SETTINGS_FILE, check_settings

    first = check_settings(tmp_path, SETTINGS)  # a run holding the folder, no frame yet
    with pytest.raises(ShotError, match=r"another restyle with other settings \(seed\)"):
        check_settings(tmp_path, {**SETTINGS, "seed": 2})
    assert json.loads((tmp_path / SETTINGS_FILE).read_text())["seed"] == 1
    with check_settings(tmp_path, SETTINGS):  # a farm chunk with the same settings
        pass
    first.close()
    with check_settings(tmp_path, {**SETTINGS, "seed": 2}):  # nobody writes, no frames
        pass
    assert json.loads((tmp_path / SETTINGS_FILE).read_text())["seed"] == 2


def test_a_run_naming_frames_otherwise_is_refused_while_one_runs(tmp_path,
                                                                monkeypatch) -> None:
    from painted_skin.addon.blender.passes.geometry import ShotError
    from painted_skin.addon.blender.restyle import output as restyle_output
    from painted_skin.addon.blender.restyle.output import (
        check_settings,
        frame_names,
        frames_pattern,
    )

    # both runs past the names check before either wrote its settings (started together):
    # the folder lock itself must tell them apart
    monkeypatch.setattr(restyle_output, "_check_names", lambda out, names: None)

    (tmp_path / "o").mkdir()
    first = check_settings(tmp_path / "o", SETTINGS)  # default names, nothing written yet
    with frame_names(frames_pattern("shot_###")):
        with pytest.raises(ShotError, match=r"another restyle.*frame_pattern"):
            check_settings(tmp_path / "o", SETTINGS)
    first.close()


@pytest.fixture(scope="module")
def shot_blend(tmp_path_factory) -> Path:
    return demo_walk_blend(tmp_path_factory.mktemp("lock_shot"), frames=6)


def test_two_concurrent_restyles_one_succeeds_frames_of_one_seed(serve, shot_blend, tmp_path,
                                                                 bpy_clean, capsys) -> None:
    from painted_skin.addon.blender.passes.image_io import read_image
    from painted_skin.addon.blender.restyle.loop import RestyleRequest, restyle_shot, result_path

    _, ep = serve()
    out = tmp_path / "shared"
    exe = str(Path(sys.executable).with_name("painted-skin"))

    def argv(seed: int) -> list[str]:
        return [exe, "restyle", str(shot_blend), "--out", str(out), "--size", "32x32",
                "--pipeline", "echo", "--url", ep, "--seed", str(seed),
                "--options", '{"steps": 4, "delay_ms": 100}']  # ~0.4 s a frame: overlap

    procs = {seed: subprocess.Popen(argv(seed), stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True) for seed in (1, 2)}
    t0 = time.monotonic()
    done = {seed: (p.wait(120), *p.communicate()) for seed, p in procs.items()}
    took = time.monotonic() - t0
    ok = [seed for seed, (rc, _, _) in done.items() if rc == 0]
    assert len(ok) == 1, (done, took)
    winner, loser = ok[0], 3 - ok[0]
    rc, _, err = done[loser]
    assert rc == 2 and "another restyle with other settings (seed)" in err
    assert json.loads((out / "restyle.json").read_text())["seed"] == winner

    # Every frame is the winner's: as a run of that seed alone makes it.
    bpy_clean.ops.wm.open_mainfile(filepath=str(shot_blend))
    ref = tmp_path / "alone"
    restyle_shot(bpy_clean.context.scene, RestyleRequest.make(ref, url=ep, size=(32, 32),
                                                              seed=winner, options={"steps": 1}))
    names = sorted(p.name for p in (out / "restyled").iterdir())
    assert names == [f"{f:04d}.png" for f in range(1, 7)]
    for f in range(1, 7):
        np.testing.assert_array_equal(read_image(result_path(out, f)),
                                      read_image(result_path(ref, f)))

    # After it: the same settings resume; the other seed is refused (frames on disk).
    from painted_skin import cli

    capsys.readouterr()
    assert cli.main(argv(winner)[1:]) == 0 and "(0 written now" in capsys.readouterr().out
    assert cli.main(argv(loser)[1:]) == 2
    assert "holds frames restyled with other settings" in capsys.readouterr().err
