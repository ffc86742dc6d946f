"""The GPU check of the skin model's trainers runs where Blender is not: a lent GPU
machine has torch but no bpy, so the check and its scoring must never import it."""

from __future__ import annotations

import subprocess
import sys


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)


def test_the_gpu_check_and_the_bench_scoring_import_without_blender() -> None:
    code = ("import sys\n"
            "for m in ('bpy', 'mathutils', 'gpu', 'zmq'):\n"
            "    sys.modules[m] = None  # importing them raises\n"
            "import painted_skin.bench.gpu_skin, painted_skin.bench.scoring\n")
    proc = _run(code)
    assert proc.returncode == 0, proc.stderr[-800:]


def test_the_gpu_check_without_its_packed_frames_says_how_to_make_them(tmp_path) -> None:
    code = ("from painted_skin.bench.gpu_skin import main\n"
            f"raise SystemExit(main(['run', '--data', {str(tmp_path / 'none')!r}, "
            "'--device', 'cpu']))\n")
    proc = _run(code)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "run pack here first" in lines[0], proc.stderr
