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
