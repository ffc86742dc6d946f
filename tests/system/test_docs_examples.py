"""The examples of docs/api.md run, as written, against the bpy module: once from the pip
package (``painted_skin``) and once from the extension's module path
(``bl_ext.user_default.painted_skin``, the package Blender installs the extension as).

Blocks whose first line is ``# doctest: run`` run in order in one namespace (the demo
character, a 3-frame clip, 64x64 passes, the echo and skin backends); ``# doctest: run
extension`` replaces the first block in the extension's run; ``# doctest: slow`` blocks
(training) run only in the slow test."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
API_MD = REPO / "docs" / "api.md"
BLOCK = re.compile(r"^```python\n# doctest: (run extension|run|slow)\n(.*?)^```$",
                   re.MULTILINE | re.DOTALL)
EXT = "bl_ext.user_default.painted_skin"
COPY_SKIP = (".*", "__pycache__", "out", "build", "tests", "docs", "bench", "tools", "shared",
             "*.egg-info")


def blocks() -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in BLOCK.finditer(API_MD.read_text())]


def script(variant: str, slow: bool = False) -> str:
    """The blocks of ``variant`` ("pip" or "extension") joined into one script."""
    found = blocks()
    run = [code for kind, code in found if kind == "run"]
    if variant == "extension":
        run[0] = next(code for kind, code in found if kind == "run extension")
        run[1:] = [re.sub(r"^(\s*)(from|import) painted_skin\.", rf"\1\2 {EXT}.", c,
                          flags=re.MULTILINE) for c in run[1:]]
        run.append("import sys\nassert 'painted_skin' not in sys.modules, "
                   "'the extension run imported the pip package'\n")
    if slow:
        run += [code for kind, code in found if kind == "slow"]
    return "\n".join(f"print('--- block {i}')\n{code}" for i, code in enumerate(run))


def _run(tmp_path: Path, variant: str, slow: bool = False) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PAINTED_SKIN_MODELS",
                                                             "PAINTED_SKIN_SKIN_MODELS")}
    if variant == "extension":  # installed: <user extensions>/user_default/painted_skin
        # a copy, as an install makes (a link would share the pip package's numba cache,
        # whose entries import the pip package's modules)
        shutil.copytree(REPO, tmp_path / "extensions" / "user_default" / "painted_skin",
                        ignore=shutil.ignore_patterns(*COPY_SKIP))
        env["BLENDER_USER_EXTENSIONS"] = str(tmp_path / "extensions")
    work = tmp_path / "work"
    work.mkdir()
    (work / "examples.py").write_text(script(variant, slow))
    return subprocess.run([sys.executable, "examples.py"], cwd=work, env=env,
                          capture_output=True, text=True, timeout=600)


def test_the_api_doc_has_an_example_for_each_public_function():
    code = "\n".join(c for _, c in blocks())
    for name in ("retarget_clip", "make_passes", "restyle_shot", "train_skin", "score(",
                 "probe_python", "render_frames"):
        assert name in code, name
    kinds = [k for k, _ in blocks()]
    assert kinds[0] == "run" and "run extension" in kinds and "slow" in kinds


@pytest.mark.parametrize("variant", ["pip", "extension"])
def test_api_examples_run(tmp_path, variant):
    if not (REPO / "rigs" / "skin_models" / "demo" / "model.onnx").is_file():
        pytest.skip("the demo skin model is not in this checkout")
    proc = _run(tmp_path, variant)
    assert proc.returncode == 0, (proc.stdout[-3000:] + proc.stderr[-3000:])
    n = sum(1 for k, _ in blocks() if k == "run")
    assert f"--- block {n - 1}" in proc.stdout  # every block ran
    assert "echo: 3 written; skin: 3 written" in proc.stdout
    assert "render: 2 frames in" in proc.stdout
    assert "score psnr:" in proc.stdout


@pytest.mark.slow
def test_api_training_example_runs(tmp_path):
    if not (REPO / ".venv-backend" / "bin" / "python").is_file():
        pytest.skip("no .venv-backend (torch) to train in")
    proc = _run(tmp_path, "pip", slow=True)
    assert proc.returncode == 0, (proc.stdout[-3000:] + proc.stderr[-3000:])
