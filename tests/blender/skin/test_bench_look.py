"""``painted-skin bench look``: its baselines on frames with known answers, and the whole
benchmark end to end (slow)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[3]
BACKEND_PYTHON = REPO / ".venv-backend" / "bin" / "python"
LAST_LINE = re.compile(r"^look psnr: (\S+) min_psnr: (\S+) ssim: (\S+) warp_ratio: (\S+) "
                       r"vs_best_baseline_db: (\S+) train_s: (\S+)$")


def _shot(n: int = 4, size: int = 16):
    """A square that slides one pixel right a frame: motion vectors and depth exact."""
    from painted_skin.bench.look import Shot

    passes, truth = {}, {}
    for f in range(1, n + 1):
        mask = np.zeros((size, size), np.uint8)
        mask[4:10, 2 + f:8 + f] = 255
        motion = np.zeros((size, size, 4), np.float32)
        motion[..., 0] = -1.0  # to the previous frame: one pixel left
        motion[..., 2] = 1.0  # to the next: one right
        depth = np.where(mask > 0, 2.0, 0.0).astype(np.float32)
        img = np.zeros((size, size, 4), np.uint8)
        ys, xs = np.nonzero(mask)
        img[ys, xs, 0] = 40 * (xs - 2 - f)  # a ramp painted on the square, moving with it
        img[..., 3] = mask
        passes[f] = {"mask": mask, "motion": motion, "depth": depth}
        truth[f] = img
    return Shot("slide", list(range(1, n + 1)), passes, {"ill": truth})


def test_key_warp_carries_the_key_along_the_motion_both_ways():
    from painted_skin.bench.look import key_warp

    shot = _shot()
    key = 2
    outs = key_warp(shot, {key: shot.truth["ill"][key]})
    for f in shot.frames:
        m = shot.passes[f]["mask"] > 0
        assert np.array_equal(outs[f][m], shot.truth["ill"][f][..., :3][m]), f


@pytest.mark.slow
def test_bench_look_prints_its_table_and_last_line(capsys, tmp_path):
    if not BACKEND_PYTHON.is_file():
        pytest.skip(".venv-backend (torch) is absent: no look can be learned here")
    from painted_skin.bench.look import main

    assert main(frames=4, looks=["ill"], keys=[1, 2], steps=2, keep=str(tmp_path)) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    last = LAST_LINE.match(lines[-1])
    assert last, lines[-1]
    psnr, min_psnr, ssim, warp, margin, train_s = (float(v) for v in last.groups())
    assert all(math.isfinite(v) for v in (psnr, ssim, train_s)) and min_psnr <= psnr
    rows = [ln for ln in lines if re.match(r"^\S+/\S+\s+ill\s+[12]\s", ln)]
    assert len(rows) >= 2 and any(r.startswith("wave/demo") for r in rows)
    assert list(tmp_path.glob("*/sheet_ill_k2.png"))
