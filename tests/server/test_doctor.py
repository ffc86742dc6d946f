"""``painted-skin doctor`` (and the panel's *Check*, the same facts): what a backend
Python will use, which onnxruntime providers really load, what is missing and the pip
line for it. Run here in the Blender venv, which has no torch: a report, not a crash."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from painted_skin.addon.core.backend.probe import probe_python

LINE = re.compile(r"^[a-z][a-z-]*( [^:]+)?: .+$")  # "<topic> [<name>]: <status>"


def _doctor(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "painted_skin.backend.doctor", *args],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL)


def _cuda_loads(facts: dict) -> bool:
    return facts["onnxruntime"]["providers"]["CUDAExecutionProvider"]["loadable"]


@pytest.fixture(scope="module")
def report() -> tuple[subprocess.CompletedProcess, dict]:
    proc = _doctor("--json")
    return proc, json.loads(proc.stdout)


def test_without_torch_it_reports_cpu_onnxruntime_and_the_gpu_install_lines(report):
    proc, facts = report
    assert proc.returncode == 0, proc.stderr  # echo and skin need no torch
    assert facts["packages"]["torch"] is None and not facts["torch"]["available"]
    assert facts["distributions"]["bpy"]  # the Blender venv: bpy reported, never imported
    providers = facts["onnxruntime"]["providers"]
    assert providers["CPUExecutionProvider"]["loadable"]
    assert "CPUExecutionProvider" in facts["loadable_providers"]
    assert {"echo", "skin"} <= set(facts["pipelines"])
    assert "sd15-controlnet" not in facts["pipelines"]  # no torch: no diffusion pipelines
    missing = {m["what"]: m for m in facts["missing"]}
    assert "-m pip install torch" in missing["torch"]["fix"]
    assert sys.executable in missing["torch"]["fix"]
    if _cuda_loads(facts):
        pytest.skip("this machine's onnxruntime runs CUDA")
    cuda = missing["CUDAExecutionProvider"]
    assert cuda["need"] == "gpu" and "onnxruntime-gpu" in cuda["fix"]
    assert not providers["CUDAExecutionProvider"]["loadable"]


def test_text_report_is_one_parseable_line_per_fact(report):
    proc = _doctor()
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.splitlines()
    assert out and all(LINE.match(ln) for ln in out), [ln for ln in out if not LINE.match(ln)]
    facts = report[1]
    assert "package torch: missing" in out
    assert "provider CPUExecutionProvider: loadable" in out
    assert f"pipelines: {', '.join(facts['pipelines'])}" in out
    assert out[-1] == "result: ok (echo and skin can run)"
    fixes = [ln for ln in out if ln.startswith("missing torch [optional]:")]
    assert len(fixes) == 1 and "-m pip install torch" in fixes[0]


def test_an_asked_gpu_that_cannot_run_fails_with_the_install_line(report):
    if _cuda_loads(report[1]):
        pytest.skip("this machine's onnxruntime runs CUDA")
    proc = _doctor("--device", "cuda")
    assert proc.returncode == 1
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("missing device cuda"))
    assert "[required]" in line and "onnxruntime-gpu" in line and "--device cpu" in line
    assert proc.stdout.splitlines()[-1].startswith("result: NOT READY")


def test_the_panel_check_reports_the_doctor_facts(report):
    res = probe_python(sys.executable)
    assert res.ok and res.facts is not None
    facts = report[1]
    for key in ("packages", "pipelines", "loadable_providers", "missing", "ok"):
        assert res.facts[key] == facts[key], key
    assert res.report() == _doctor().stdout.splitlines()
    assert "onnxruntime runs on CPU" in res.summary()


def test_missing_weights_and_a_broken_registry_are_reported_not_raised(tmp_path):
    skin = tmp_path / "skin.toml"
    skin.write_text('[models.hero]\npath = "nowhere"\n')
    bad = tmp_path / "models.toml"
    bad.write_text("[models.sd15\n")
    proc = _doctor("--json", env={"PAINTED_SKIN_SKIN_MODELS": str(skin),
                                  "PAINTED_SKIN_MODELS": str(bad)})
    assert proc.returncode == 0, proc.stderr
    facts = json.loads(proc.stdout)
    hero = facts["skin_models"]["models"]["hero"]
    assert not hero["present"] and "does not exist" in hero["problems"][0]
    assert hero["folder"] == str(tmp_path / "nowhere")
    assert facts["skin_models"]["registry"] == str(skin)
    missing = {m["what"]: m for m in facts["missing"]}
    assert "train" in missing["skin model hero"]["fix"]


@pytest.mark.parametrize("registry", ["broken", "missing"])
def test_a_skin_registry_that_does_not_load_is_not_ready(tmp_path, registry):
    """$PAINTED_SKIN_SKIN_MODELS naming a broken or missing file: the backend would serve
    no skin model, so the report ends NOT READY with the line that says why."""
    path = tmp_path / "skin.toml"
    if registry == "broken":
        path.write_text("[models.hero\n")
    proc = _doctor(env={"PAINTED_SKIN_SKIN_MODELS": str(path)})
    assert proc.returncode == 1, proc.stdout
    out = proc.stdout.splitlines()
    assert any(ln.startswith("missing skin model registry [required]") for ln in out), out
    assert out[-1].startswith("result: NOT READY")


def test_a_python_without_numpy_or_pyzmq_is_not_ready(tmp_path):
    venv = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    root = Path(__file__).resolve().parents[2]
    link = tmp_path / "src" / "painted_skin"  # the package, without its dependencies
    link.parent.mkdir()
    link.symlink_to(root)
    proc = subprocess.run([str(venv / "bin" / "python"), "-m", "painted_skin.backend.doctor"],
                          capture_output=True, text=True, timeout=120, cwd=link.parent,
                          env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert proc.returncode == 1, proc.stderr
    out = proc.stdout.splitlines()
    assert "package numpy: missing" in out and "package pyzmq: missing" in out
    assert any(ln.startswith("missing pyzmq [required]") and "-m pip install pyzmq" in ln
               for ln in out)
    assert out[-1].startswith("result: NOT READY")


def test_python_option_reports_on_the_backend_python():
    backend = Path(__file__).resolve().parents[2] / ".venv-backend" / "bin" / "python"
    if not backend.is_file():
        pytest.skip("no .venv-backend")
    proc = _doctor("--python", str(backend), "--json")
    assert proc.returncode == 0, proc.stderr
    facts = json.loads(proc.stdout)
    assert facts["executable"] == str(backend) and facts["packages"]["torch"]
    assert (facts["torch"]["device"], facts["torch"]["dtype"]) == ("cpu", "float32")
    assert "sd15-controlnet" in facts["pipelines"]
    gone = _doctor("--python", "/nonexistent/python")
    assert gone.returncode == 1 and "does not exist" in gone.stderr
