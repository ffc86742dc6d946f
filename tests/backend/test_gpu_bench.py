"""``bench/gpu.py`` and ``bench/gpu_device.sh`` without a GPU.

``--smoke`` runs the GPU bench's whole code path on this CPU (tiny widths, fp32,
64², 2 steps, 1 frame: ~20 s here): every torch engine through the same step
runner and shims as on the GPU (the CUDA graph capture itself needs CUDA), the
ONNX export on the CPU EP, the skip lines of the providers onnxruntime does not
offer, the table, the summary and the JSON; in a fresh interpreter where zmq and
bpy cannot be imported (the device has no pyzmq). The wheel plan for the lent
H200 is checked offline.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("onnxruntime")
pytest.importorskip("diffusers")
pytest.importorskip("packaging")

from painted_skin.bench import gpu as G  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
# The device wheel planner is a repository tool (tools/), not part of the package.
_spec = importlib.util.spec_from_file_location("device_wheels", REPO / "tools" / "device_wheels.py")
W = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(W)

KINDS_SAMPLE = """\
| pip list, as a session saw it | 2026-11, in sessions' own output there: python3 is \
Python 3.12.3. One session's pip list, filtered by the names it asked for: \
huggingface_hub 1.33.0, numpy 2.5.2, safetensors 0.8.0, torch 2.11.0, transformers 5.17.0 |

## Python packages already there

nvidia-h200: their image, 'cuda', holds these. Packages: filelock, huggingface-hub, \
numpy, pillow, regex, requests, safetensors, torch, transformers, zipp.
"""

RUN_SMOKE = """
import sys
BLOCKED = {blocked!r}
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError("blocked " + name)
sys.meta_path.insert(0, Block())
from painted_skin.bench.gpu import main
rc = main(["--smoke", "--cache", {cache!r}, "--json", {json!r}])
print("LOADED-BLOCKED", sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED))
sys.exit(rc)
"""


def test_smoke_runs_the_gpu_code_path_on_the_cpu(tmp_path: Path) -> None:
    import onnxruntime as ort

    out = tmp_path / "gpu.json"
    code = RUN_SMOKE.format(blocked=W.BLOCKED, cache=str(tmp_path / "onnx"), json=str(out))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    lines = r.stdout.splitlines()
    assert "LOADED-BLOCKED []" in lines
    assert lines[-2].startswith("gpu bench: CPU smoke; torch eager ") and "errors: none" in \
        lines[-2]
    head = lines.index(next(ln for ln in lines if ln.startswith("engine ")))
    assert re.match(r"engine +ms/frame +speedup +providers / notes", lines[head])
    table = {ln.split()[0]: ln for ln in lines[head + 1:head + 1 + len(G.SMOKE_ENGINES)]}
    assert list(table) == list(G.SMOKE_ENGINES)
    for name in ("torch", "torch-cudagraph", "torch-cudagraph-cl", "ort-cpu"):
        assert re.match(rf"{re.escape(name)} +\d+\.\d +\d+\.\d\dx  \S", table[name]), table[name]
    assert "1.00x" in table["torch"] and "step " in table["torch"]
    assert "ORT CPU" in table["ort-cpu"]
    offered = ort.get_available_providers()
    for name in ("ort-cuda", "ort-trt"):
        if G.PROVIDER[name] not in offered:
            assert f"skipped: onnxruntime {ort.__version__} offers no {G.PROVIDER[name]}" in \
                table[name]
            assert f"skip {name}: " in r.stdout
    assert "one frame's parts: text encoder" in r.stdout
    res = json.loads(out.read_text())
    rows = {row["name"]: row for row in res["rows"]}
    assert res["smoke"] and res["size"] == 64 and res["summary"] == lines[-2]
    for name in ("torch-cudagraph", "torch-cudagraph-cl", "ort-cpu"):
        assert rows[name]["status"] == "ok" and rows[name]["ms"] > 0
        # same seed, same function: the step runner is the MultiControlNet sum exactly
        m = re.search(r"\|Δ\| vs torch max (\d+) mean ([\d.]+)", rows[name]["notes"])
        assert m and int(m.group(1)) <= 2 and float(m.group(2)) <= 0.5, rows[name]["notes"]
        assert "NaN" not in rows[name]["notes"]
    assert set(rows["torch"]["extra"]["parts_ms"]) == {"step", "text", "vae"}


def test_main_guards(capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    assert G.main(["--engines", "torch,warp-drive"]) == 2
    assert "unknown engine(s) warp-drive" in capsys.readouterr().out
    if not torch.cuda.is_available():
        assert G.main([]) == 0
        assert "no CUDA device: nothing to time" in capsys.readouterr().out


def test_budget_skips_the_engines_and_still_reports(capsys: pytest.CaptureFixture[str],
                                                    tmp_path: Path) -> None:
    assert G.main(["--smoke", "--budget", "0", "--engines", "torch,torch-compile",
                   "--cache", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "skip torch: the 0 s budget is spent" in out
    assert "skip torch-compile: the 0 s budget is spent" in out
    assert out.splitlines()[-1] == ("gpu bench: CPU smoke; torch eager -; ort-trt not measured "
                                    "(not asked); errors: none")


def test_device_packages_from_kinds_text() -> None:
    dev = W.device_packages(KINDS_SAMPLE)
    assert dev["torch"] == "2.11.0" and dev["huggingface-hub"] == "1.33.0"
    assert dev["regex"] is None and dev["zipp"] is None
    assert "diffusers" not in dev and "pyzmq" not in dev
    assert W.device_packages(None) == W.DEVICE_FALLBACK
    real = Path(W.KINDS_MD)
    if real.is_file():  # the workplace's own description of the H200 image
        d = W.device_packages(real.read_text())
        assert d.get("torch") and "diffusers" not in d and "pyzmq" not in d


def test_wheel_plan_carries_diffusers_and_what_the_device_lacks() -> None:
    from importlib.metadata import version

    plan, notes = W.plan_wheels(W.device_packages(KINDS_SAMPLE))
    specs = [s for s, _ in plan]
    assert specs == [f"diffusers=={version('diffusers')}"]
    assert not any("zmq" in s or "importlib" in s.lower() for s in specs)
    assert any(n.startswith("huggingface-hub") and "on the device (1.33.0)" in n for n in notes)
    # a requirement missing there, or there at a version outside the specifier, travels
    lacking = {k: v for k, v in W.device_packages(KINDS_SAMPLE).items() if k != "regex"}
    lacking["huggingface-hub"] = "0.20.0"
    specs = [s for s, _ in W.plan_wheels(lacking)[0]]
    assert f"regex=={version('regex')}" in specs
    assert any(s.startswith("huggingface") and s.endswith(version("huggingface_hub"))
               for s in specs)


def _wheel(folder: Path, name: str, ver: str, requires: list[str]) -> None:
    with zipfile.ZipFile(folder / f"{name}-{ver}-py3-none-any.whl", "w") as z:
        meta = [f"Name: {name}", f"Version: {ver}"] + [f"Requires-Dist: {r}" for r in requires]
        z.writestr(f"{name}-{ver}.dist-info/METADATA", "\n".join(meta) + "\n")


def test_check_wheels_reports_unmet_requirements(tmp_path: Path) -> None:
    dev = W.device_packages(KINDS_SAMPLE)
    _wheel(tmp_path, "diffusers", "0.42.1",
           ["numpy", "huggingface-hub>=1.32.0", "importlib_metadata",
            "pytest; extra == 'test'", "tomli; python_version < '3.11'"])
    assert W.check_wheels(str(tmp_path), dev) == []
    _wheel(tmp_path, "extra_pkg", "1.0", ["torch>=2.12", "no-such-thing"])
    problems = W.check_wheels(str(tmp_path), dev)
    assert any("torch>=2.12: 2.11.0 there" in p for p in problems)
    assert any("no-such-thing" in p and "neither carried" in p for p in problems)


def test_prepare_dry_run_is_offline_and_plans_no_pyzmq() -> None:
    r = subprocess.run(["bash", str(REPO / "bench" / "gpu_device.sh"), "prepare", "--dry-run"],
                       capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PY": sys.executable})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "imports without zmq, bpy" in r.stdout
    assert re.search(r"would run: .*pip download --no-deps .*--python-version 3\.12 .*"
                     r"-d \.whl diffusers==\d", r.stdout)
    assert "pyzmq==" not in r.stdout and "would skip: pyzmq" in r.stdout


def test_device_command_fits_the_tool() -> None:
    """The device call written at the top of the script: one command under 2000
    characters, carrying .whl, a timeout the bench's own limits fit in."""
    text = (REPO / "bench" / "gpu_device.sh").read_text()
    cmd = re.search(r"^#   command:   (.+)$", text, re.M).group(1)
    assert cmd == "bash bench/gpu_device.sh run" and len(cmd) < 2000
    assert re.search(r'^#   carry:     \["\.whl"\]$', text, re.M)
    timeout = int(re.search(r"^#   timeout_s: (\d+)$", text, re.M).group(1))
    bench = int(re.search(r"GPU_BENCH_TIMEOUT:-(\d+)", text).group(1))
    assert bench + 30 + 30 <= timeout <= 600  # the bench, its kill grace, the install
