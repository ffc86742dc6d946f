"""``painted-skin bench viewport`` runs end to end (a local backend, the viewport loop at
both sizes, Cycles at one sample, F12 against restyle) and ends on its parsable line."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LAST_LINE = re.compile(r"^viewport fps: (\S+) p95_ms: (\S+) fps_256: (\S+) "
                       r"vs_cycles_1spp: (\S+) f12_vs_restyle: (\S+)$")


@pytest.mark.slow
def test_bench_viewport_prints_its_figures(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "painted_skin.cli", "bench", "viewport",
                           "--frames", "3"], capture_output=True, text=True, timeout=900,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    last = proc.stdout.strip().splitlines()[-1]
    m = LAST_LINE.match(last)
    assert m, last
    assert all(float(v) > 0 for v in m.groups())
