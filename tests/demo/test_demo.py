"""`make demo`'s job: a held-out motion painted by the embedded skin model over ZeroMQ and
scored against Cycles; every promised output is there and metrics.json is strict JSON."""

from __future__ import annotations

import json
import math

import pytest
from painted_skin import cli


@pytest.mark.slow
def test_demo_writes_painted_frames_sheet_gif_and_metrics(bpy_clean, tmp_path, capsys):
    out = tmp_path / "demo"
    assert cli.main(["demo", "--out", str(out), "--frames", "6"]) == 0
    printed = capsys.readouterr().out
    assert "masked PSNR" in printed and str(out / "metrics.json") in printed
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["motion"] == "wave" and metrics["held_out_motion"] is True
    assert metrics["restyle"]["frames"] == 6
    for key in ("psnr", "ssim", "flip"):
        assert math.isfinite(metrics["score"][key])
    assert 0 < metrics["score"]["ssim"] <= 1
    assert len(list((out / "restyle" / "restyled").glob("*.png"))) == 6
    assert len(list((out / "cycles").glob("*.png"))) == 6
    assert (out / "contact_sheet.png").stat().st_size > 10_000
    assert (out / "side_by_side.gif").read_bytes()[:6] == b"GIF89a"
    from painted_skin.demo.behind import FRAMES, shared_clip
    from PIL import Image

    rows = 3
    if shared_clip() is not None:
        # The real dance from behind: its own score and two more rows on the sheet.
        behind = metrics["behind"]
        assert behind["frames"] == FRAMES and math.isfinite(behind["score"]["psnr"])
        assert "from behind" in printed
        assert len(list((out / "behind" / "restyle" / "restyled").glob("*.png"))) == FRAMES
        rows = 5
    else:
        assert metrics["behind"] is None
    with Image.open(out / "contact_sheet.png") as sheet:
        assert sheet.height == rows * 256


def test_a_rerun_keeps_what_it_made_from_the_same_inputs_only(tmp_path):
    """Frames painted from another shot or model would be scored against references they
    do not match: they go; a folder the demo did not write is never emptied."""
    from painted_skin.demo.run import DemoError, keep_if_made_from

    folder = tmp_path / "demo" / "restyle"
    keep_if_made_from(folder, "shot A, model 1")
    (folder / "0001.png").write_bytes(b"painted")
    keep_if_made_from(folder, "shot A, model 1")
    assert (folder / "0001.png").is_file()  # same inputs: resumed
    keep_if_made_from(folder, "shot A, model 2")
    assert not (folder / "0001.png").exists()  # a new model: painted again

    mine = tmp_path / "project" / "restyle"
    mine.mkdir(parents=True)
    (mine / "keep.png").write_bytes(b"an artist's frame")
    with pytest.raises(DemoError, match="did not write"):
        keep_if_made_from(mine, "shot A, model 1")
    assert (mine / "keep.png").read_bytes() == b"an artist's frame"
