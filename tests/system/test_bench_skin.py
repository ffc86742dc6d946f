"""``painted-skin bench skin`` and its non-learned baselines (bpy venv); the GPU check of
the skin model's trainers, which runs where Blender is not (a lent GPU machine has torch
but no bpy), so it and the benches' scoring must never import it."""

from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from painted_skin.backend.skin.baselines import BaselineInputError, PartMean, UVLookup

REPO = Path(__file__).resolve().parents[2]
BACKEND_PYTHON = REPO / ".venv-backend" / "bin" / "python"
LAST_LINE = re.compile(r"^skin psnr: (\S+) min_psnr: (\S+) ssim: (\S+) min_ssim: (\S+) "
                       r"flip: (\S+) warp_ratio: (\S+) speedup_vs_cycles: (\S+)$")


def _frame(parts: np.ndarray, uv: np.ndarray | None = None, rgb: np.ndarray | None = None):
    """A (passes, beauty) frame: mask where parts > 0, uv (H, W, 3), beauty (H, W, 4)."""
    h, w = parts.shape
    passes = {"mask": (parts > 0).astype(np.uint8) * 255, "parts": parts.astype(np.uint8),
              "uv": np.zeros((h, w, 3), np.float32) if uv is None else uv}
    beauty = np.zeros((h, w, 4), np.uint8)
    if rgb is not None:
        beauty[..., :3] = rgb
    beauty[..., 3] = passes["mask"]
    return passes, beauty


def _uv(h: int, w: int, u: float, v: float, has: float = 1.0) -> np.ndarray:
    a = np.zeros((h, w, 3), np.float32)
    a[...] = (u, v, has)
    return a


def test_part_mean_paints_each_part_its_training_mean():
    parts = np.array([[0, 2], [2, 5]])
    rgb_a = np.array([[[9, 9, 9], [10, 20, 30]], [[30, 40, 50], [200, 100, 0]]], np.uint8)
    rgb_b = np.full((2, 2, 3), 100, np.uint8)
    pm = PartMean([_frame(parts, rgb=rgb_a), _frame(parts, rgb=rgb_b)])
    out = pm.paint(_frame(np.array([[2, 5], [0, 0]]))[0])
    assert out[0, 0].tolist() == [60, 65, 70]  # mean of (10,20,30), (30,40,50), 2x (100,)
    assert out[0, 1].tolist() == [150, 100, 50]
    assert out[1].tolist() == [[0, 0, 0], [0, 0, 0]]  # off the character: black


def test_uv_lookup_reads_each_texel_its_mean_colour():
    size = 8
    # Two training frames see texel (u, v) = (0.3, 0.7) of part 2 in red, then in blue.
    parts = np.array([[2]])
    red = np.array([[[200, 0, 0]]], np.uint8)
    blue = np.array([[[0, 0, 100]]], np.uint8)
    frames = [_frame(parts, _uv(1, 1, 0.3, 0.7), red), _frame(parts, _uv(1, 1, 0.3, 0.7), blue)]
    lut = UVLookup(frames, size)
    test = _frame(parts, _uv(1, 1, 0.31, 0.69))[0]  # the same texel of the 8x8 grid
    assert lut.paint(test)[0, 0].tolist() == [100, 0, 50]


def test_uv_lookup_falls_back_to_coarser_texels_then_to_the_part_mean():
    size = 8
    parts = np.array([[3, 3, 4]])
    uv = np.zeros((1, 3, 3), np.float32)
    uv[0, 0] = (0.05, 0.95, 1)  # texel (row 0, col 0)
    uv[0, 1] = (0.55, 0.45, 1)  # texel (row 4, col 4)
    uv[0, 2] = (0.05, 0.95, 0)  # part 4's mesh has no UV map
    rgb = np.array([[[10, 10, 10], [90, 90, 90], [50, 60, 70]]], np.uint8)
    lut = UVLookup([_frame(parts, uv, rgb)], size)
    test = np.zeros((1, 3, 3), np.float32)
    test[0, 0] = (0.17, 0.83, 1)  # texel (1, 1): unseen, its 2x2 parent holds (0, 0)
    test[0, 1] = (0.95, 0.95, 1)  # texel (0, 7): only the whole grid's level saw part 3
    test[0, 2] = (0.55, 0.45, 1)  # part 4 never seen with UV: its part mean
    out = lut.paint(_frame(parts, test)[0])
    assert out[0, 0].tolist() == [10, 10, 10]
    assert out[0, 1].tolist() == [50, 50, 50]
    assert out[0, 2].tolist() == [50, 60, 70]


def test_uv_lookup_keeps_parts_apart_where_their_uv_maps_overlap():
    parts = np.array([[1, 15]])
    uv = _uv(1, 2, 0.5, 0.5)  # both meshes use the same spot of their own UV maps
    rgb = np.array([[[255, 0, 0], [0, 255, 0]]], np.uint8)
    out = UVLookup([_frame(parts, uv, rgb)], 16).paint(_frame(parts, uv)[0])
    assert out.tolist() == [[[255, 0, 0], [0, 255, 0]]]


def test_baselines_refuse_frames_without_the_passes_they_read():
    passes, beauty = _frame(np.array([[1]]))
    del passes["parts"]
    with pytest.raises(BaselineInputError, match="'parts' pass"):
        PartMean([(passes, beauty)])
    passes, beauty = _frame(np.array([[1]]))
    del passes["uv"]
    with pytest.raises(BaselineInputError, match="'uv' pass"):
        UVLookup([(passes, beauty)], 8)
    with pytest.raises(BaselineInputError, match="no training frame shows the character"):
        PartMean([_frame(np.array([[0]]))])


def test_bench_refuses_a_folder_that_is_not_a_model(tmp_path):
    from painted_skin.bench.skin import SkinBenchError, main

    with pytest.raises(SkinBenchError, match=r"has no config\.json.*--model DIR"):
        main(model=str(tmp_path))


def test_bench_refuses_a_serving_blend_outside_its_range(tmp_path):
    from painted_skin.bench.skin import SkinBenchError, main

    with pytest.raises(SkinBenchError, match=r"--stabilize 1\.5 must be a number in \[0, 1\)"):
        main(model=str(tmp_path), blend=1.5)


def test_bench_refuses_a_converged_render_no_better_than_the_reference(tmp_path):
    from painted_skin.bench.skin import SkinBenchError, main

    with pytest.raises(SkinBenchError, match=r"--converged 16: give more samples than the "
                                             r"training target's 16 \(e\.g\. 128\)"):
        main(model=str(REPO / "rigs" / "skin_models" / "demo"), converged=16)


def test_the_targets_line_names_warp_misses_the_converged_render_shares():
    """A cell below the band where Cycles at many samples is below it too is the
    reference's noise, not lost detail: the line says so; a miss on the other side, or
    without a converged render, stays a plain miss."""
    from painted_skin.bench.skin import ShotResult, summary, target_line

    def cell(name: str, model: float, cv: float | None) -> ShotResult:
        rows = {"model": {"psnr": 30.0, "ssim": 0.98, "flip": 0.05, "warp_ratio": model,
                          "ms": 10.0}}
        if cv is not None:
            rows["converged"] = {"warp_ratio": cv, "ssim": 0.99}
        return ShotResult(name, [1, 2], rows, 100.0)

    cells = [cell("a/low/scene", 0.70, 0.74), cell("b/low/scene", 0.70, 0.95),
             cell("c/low/scene", 1.30, 0.70), cell("d/low/scene", 0.90, 0.70),
             cell("e/low/scene", 0.75, None), cell("f/low/scene", 1.20, 1.15),
             cell("g/low/scene", math.nan, math.nan)]
    line = target_line(summary(cells), cells)
    assert "cells outside the warp band (6): a/low/scene, b/low/scene, c/low/scene, " \
           "e/low/scene, f/low/scene, g/low/scene" in line
    assert line.endswith("the converged Cycles render is outside on the same side (2): "
                         "a/low/scene, f/low/scene")


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    """A skin model trained here for seconds (64², 4 frames a clip, 4 samples): enough to
    run the benchmark end to end; its figures mean nothing."""
    if not BACKEND_PYTHON.is_file():
        pytest.skip(".venv-backend (torch) is absent: no model can be trained here")
    root = tmp_path_factory.mktemp("bench-skin")
    out = root / "model"
    cmd = [str(REPO / ".venv" / "bin" / "painted-skin"), "train-skin", "--character", "demo",
           "--out", str(out), "--size", "64", "--frames-per-clip", "4", "--steps", "2",
           "--minutes", "0.1", "--samples", "4", "--cache", str(root / "cache")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        pytest.fail(f"train-skin failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return out


@pytest.mark.slow
def test_bench_skin_prints_the_matrix_and_its_worst_cells(tiny_model, capsys):
    from painted_skin.bench.skin import main

    assert main(model=str(tiny_model), frames=3, cameras=["demo", "behind"],
                converged=8) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    last = LAST_LINE.match(lines[-1])
    assert last, lines[-1]
    psnr, min_psnr, ssim, min_ssim, flip, warp_ratio, speedup = (float(v)
                                                                 for v in last.groups())
    assert all(math.isfinite(v) for v in (psnr, ssim, flip, warp_ratio, speedup))
    assert min_psnr <= psnr and min_ssim <= ssim <= 1 and 0 <= flip <= 1 and speedup > 0
    rows = [ln for ln in lines if re.match(r"^\S+/(demo|behind)/(scene|turned)\s", ln)]
    motions = {r.split("/")[0] for r in rows}
    assert len(rows) == 2 * 2 * len(motions) and "wave" in motions
    cells = {}
    for row in rows:
        name, *values = row.split()
        p, s_, f, w, uv_p, pm_p, ms, cyc, cv_w, cv_s = (float(v) for v in values)
        assert 0 < p < 100 and 0 < s_ <= 1 and 0 <= f <= 1 and ms > 0 and cyc > 0, row
        # Cycles at 8 samples against itself at 4: close, not identical
        assert cv_w > 0 and 0.5 < cv_s < 1, row
        assert 0 < uv_p < 100 and 0 < pm_p < 100, row
        cells[name] = p
    assert min(cells.values()) == pytest.approx(min_psnr, abs=0.01)
    assert float(np.mean(list(cells.values()))) == pytest.approx(psnr, abs=0.01)
    # The turned rig is another light: the reference changes, so do the figures.
    assert cells["wave/demo/scene"] != cells["wave/demo/turned"]


def _run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)


def test_the_gpu_check_and_the_bench_scoring_import_without_blender() -> None:
    code = ("import sys\n"
            "for m in ('bpy', 'mathutils', 'gpu', 'zmq'):\n"
            "    sys.modules[m] = None  # importing them raises\n"
            "import painted_skin.bench.gpu_skin, painted_skin.bench.scoring\n")
    proc = _run_python(code)
    assert proc.returncode == 0, proc.stderr[-800:]


def test_the_gpu_check_without_its_packed_frames_says_how_to_make_them(tmp_path) -> None:
    code = ("from painted_skin.bench.gpu_skin import main\n"
            f"raise SystemExit(main(['run', '--data', {str(tmp_path / 'none')!r}, "
            "'--device', 'cpu']))\n")
    proc = _run_python(code)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "run pack here first" in lines[0], proc.stderr
