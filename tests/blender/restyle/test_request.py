"""The restyle request record: one check for every front end, one line per mistake, and a
seed as large as the backend takes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import demo_walk_blend
from painted_skin import cli
from painted_skin.addon.blender.restyle.request import (
    SEED_RANGE,
    RequestError,
    RestyleRequest,
)


def test_make_normalises_loose_values() -> None:
    r = RestyleRequest.make("out", frames=range(2, 5), size=64, refs=[np.zeros((4, 4, 3),
                                                                               np.uint8)])
    assert (r.out, r.frames, r.size, len(r.refs)) == (Path("out"), (2, 3, 4), (64, 64), 1)
    assert r.with_(seed=7).seed == 7 and r.seed == 0  # a checked copy, the record unchanged


@pytest.mark.parametrize(("fields", "word"), [
    ({"size": 0}, "size"),
    ({"size": (64, 9000)}, "size"),
    ({"size": (64.5, 64)}, "size"),
    ({"pipeline": " "}, "pipeline"),
    ({"seed": SEED_RANGE[1] + 1}, "seed"),
    ({"seed": SEED_RANGE[0] - 1}, "seed"),
    ({"seed": True}, "seed"),
    ({"engine": "eevee"}, "engine"),
    ({"timeout_s": float("nan")}, "timeout"),
    ({"timeout_s": 0}, "timeout"),
    ({"frames": [1.5]}, "frames"),
    ({"refs": [np.zeros((4, 4), np.uint8)]}, "reference image 1"),
    ({"refs": [np.zeros((4, 4, 3), np.float32)]}, "reference image 1"),
])
def test_a_bad_field_is_one_line_naming_it(fields, word) -> None:
    with pytest.raises(RequestError, match=word) as e:
        RestyleRequest.make("out", **fields)
    assert "\n" not in str(e.value)


def test_the_seed_range_is_the_backends() -> None:
    """The largest seed an OPEN takes is a valid request (it is an integer, not too big)."""
    assert RestyleRequest.make("out", seed=SEED_RANGE[1]).seed == 2**64 - 1
    assert RestyleRequest.make("out", seed=SEED_RANGE[0]).seed == -2**63


def test_the_cli_refuses_an_out_of_range_seed_before_writing(tmp_path, capfd) -> None:
    shot = demo_walk_blend(tmp_path / "shot", frames=3)
    out = tmp_path / "restyled"
    code = cli.main(["restyle", str(shot), "--out", str(out), "--pipeline", "echo",
                     "--seed", str(2**64), "--url", "tcp://127.0.0.1:9"])
    err = [ln for ln in capfd.readouterr().err.splitlines() if ln.strip()]
    assert code == 2
    assert len(err) == 1 and "seed" in err[0] and str(2**64 - 1) in err[0]
    assert not out.exists()  # nothing written, not even the folder


@pytest.mark.parametrize("damage", ['{"model_id": 5}', '[1, 2]', '{"pipeline": "echo",'])
def test_a_damaged_settings_file_is_one_line_and_kept(tmp_path, capfd, damage) -> None:
    """A resume into a folder whose restyle.json is damaged: one line, exit 2, the file
    left as it was (a corrupt model_id once ended in a traceback)."""
    shot = demo_walk_blend(tmp_path / "shot", frames=3)
    out = tmp_path / "restyled"
    out.mkdir()
    (out / "restyle.json").write_text(damage)
    code = cli.main(["restyle", str(shot), "--out", str(out), "--pipeline", "echo",
                     "--url", "tcp://127.0.0.1:9"])
    err = [ln for ln in capfd.readouterr().err.splitlines() if ln.strip()]
    assert code == 2 and len(err) == 1 and "restyle" in err[0], err
    assert (out / "restyle.json").read_text() == damage


def test_open_output_folder_says_when_nothing_can_open_it(tmp_path, monkeypatch) -> None:
    """Blender's own path_open reports success on Linux without xdg-open (it prints the
    FileNotFoundError to the console): this one says what is missing."""
    import subprocess
    import sys

    from painted_skin.addon.blender.restyle import results_ui

    if sys.platform != "linux":
        pytest.skip("the Linux openers")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    problem = results_ui.open_in_file_browser(tmp_path)
    assert problem and "xdg-open" in problem and "install xdg-utils" in problem
    assert "does not exist yet" in results_ui.open_in_file_browser(tmp_path / "nope")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    opener = bin_dir / "xdg-open"
    opener.write_text(f"#!/bin/sh\necho \"$1\" > {tmp_path / 'opened'}\n")
    opener.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    seen = []
    real = subprocess.Popen
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: seen.append(real(*a, **k)))
    assert results_ui.open_in_file_browser(tmp_path) is None
    seen[0].wait(30)
    assert (tmp_path / "opened").read_text().strip() == str(tmp_path)
