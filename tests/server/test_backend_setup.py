"""Setting up the backend's Python from the panel: the *Check* probe says what a Python
has and what it lacks, with the pip line; a missing or broken Python is one clear line."""

from __future__ import annotations

import subprocess
import sys

from painted_skin.addon.core.backend.probe import no_python_message, probe_python


def test_check_reports_versions_and_what_is_missing():
    res = probe_python(sys.executable)
    assert res.ok, res.problem
    import numpy
    import zmq

    assert res.packages["numpy"] == numpy.__version__
    assert res.packages["zmq"] == zmq.__version__
    summary = res.summary()
    assert f"numpy {numpy.__version__}" in summary
    missing = [n for n in ("torch", "diffusers", "onnxruntime") if not res.packages.get(n)]
    for name in missing:  # this venv is the Blender one: no torch
        assert name in summary and "-m pip install" in summary
    assert res.painted_skin is not None


def test_a_python_without_the_required_packages_is_refused_with_the_fix(tmp_path):
    venv = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    res = probe_python(str(venv / "bin" / "python"))
    assert not res.ok
    assert "lacks pyzmq, numpy" in res.problem and "pip install" in res.problem
    assert res.problem == res.summary()


def test_no_python_and_a_missing_python_say_what_to_set(tmp_path):
    empty = probe_python("")
    assert not empty.ok and empty.problem == no_python_message()
    assert "Backend Python" in empty.problem and "painted-skin[backend]" in empty.problem
    gone = probe_python(str(tmp_path / "nope" / "python"))
    assert not gone.ok and "does not exist" in gone.problem
    broken = tmp_path / "broken"
    broken.write_text("#!/bin/sh\necho 'cannot start' >&2\nexit 7\n")
    broken.chmod(0o755)
    res = probe_python(str(broken))
    assert not res.ok and "exit 7" in res.problem and "cannot start" in res.problem


def test_check_of_a_python_without_painted_skin_reports_on_the_extensions_files(tmp_path):
    """An installed extension's folder is named painted_skin: the Check runs the doctor
    from those files in a backend Python that has no painted_skin of its own."""
    import shutil
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    ext = tmp_path / "user_default" / "painted_skin"
    shutil.copytree(repo, ext, ignore=shutil.ignore_patterns(
        ".*", "__pycache__", "out", "build", "tests", "docs", "bench", "tools", "shared",
        "rigs", "*.egg-info"))
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True,
                   timeout=120)
    code = ("import sys, json; sys.path.insert(0, sys.argv[1]); "
            "from painted_skin.addon.core.backend.probe import probe_python; "
            "r = probe_python(sys.argv[2]); "
            "print(json.dumps([r.painted_skin, r.facts and r.facts['packages'], r.problem]))")
    out = subprocess.run([sys.executable, "-c", code, str(ext.parent), str(bare / "bin" /
                                                                          "python")],
                         capture_output=True, text=True, timeout=120)
    import json

    where, packages, problem = json.loads(out.stdout.splitlines()[-1])
    assert where == str(ext / "__init__.py")
    assert packages is not None and packages["numpy"] is None  # the doctor's facts
    assert "lacks pyzmq, numpy" in problem
