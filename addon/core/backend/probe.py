"""What a backend Python can run: the check behind the Preferences' *Check* button.

The backend is a separate process with its own Python (Blender's has neither torch nor
the add-on's bundled wheels on its path), so before starting it we ask that Python what
it has: we run it on a small script that imports each package and prints one JSON line.
Pure Python (no bpy): the panel, the CLI and tests share it.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Import name -> pip requirement, and what each package gives the backend.
PACKAGES: dict[str, tuple[str, str]] = {
    "zmq": ("pyzmq", "the connection to Blender"),
    "numpy": ("numpy", "arrays"),
    "onnxruntime": ("onnxruntime", "the skin model and ONNX engines"),
    "torch": ("torch", "diffusion pipelines and training"),
    "diffusers": ("diffusers", "diffusion pipelines"),
}
REQUIRED = ("zmq", "numpy")
INSTALL_HINT = "pip install 'painted-skin[backend]'"
# The GPU steps, one line each (PYTHON: the backend's python); docs/gpu.md has the versions.
TORCH_CUDA_INDEX = "https://download.pytorch.org/whl/cu130"
GPU_HINTS: dict[str, str] = {
    "torch": f"PYTHON -m pip install torch --index-url {TORCH_CUDA_INDEX} (NVIDIA GPU; "
             "CPU only: --index-url https://download.pytorch.org/whl/cpu)",
    "torch-cuda": f"PYTHON -m pip install --force-reinstall torch --index-url "
                  f"{TORCH_CUDA_INDEX}",
    "diffusers": "PYTHON -m pip install diffusers transformers",
    "onnxruntime": "PYTHON -m pip install onnxruntime (NVIDIA GPU: onnxruntime-gpu)",
    "cuda": "PYTHON -m pip uninstall -y onnxruntime && PYTHON -m pip install "
            "'onnxruntime-gpu[cuda,cudnn]' (or pip install 'painted-skin[backend-gpu]')",
    "cuda-listed": "its CUDA / cuDNN 9 libraries do not load: PYTHON -m pip install "
                   "'onnxruntime-gpu[cuda,cudnn]' (or install torch's CUDA build first)",
    "tensorrt": "optional: PYTHON -m pip install 'tensorrt-cu13>=10,<11' with "
                "onnxruntime-gpu",
    "tensorrt-listed": "optional: PYTHON -m pip install 'tensorrt-cu13>=10,<11' "
                       "(libnvinfer.so.10 does not load)",
}

_PROBE = r"""
import importlib, json, sys
device, parent = %r, %r
doctor = None
try:
    from painted_skin.backend import doctor
except ImportError:
    if parent:  # the extension's own files (its folder is named painted_skin)
        sys.path.insert(0, parent)
        try:
            from painted_skin.backend import doctor
        except ImportError:
            doctor = None
if doctor is not None:
    out = doctor.collect(device)
    out["doctor"] = True
else:  # a painted_skin without the doctor: the versions alone
    out = {"python": sys.version.split()[0], "executable": sys.executable, "packages": {}}
    for name in %r:
        try:
            mod = importlib.import_module(name)
            out["packages"][name] = str(getattr(mod, "__version__", "?"))
        except Exception as e:
            out["packages"][name] = None
            out.setdefault("errors", {})[name] = f"{type(e).__name__}: {e}"[:200]
    if out["packages"].get("torch"):
        import torch
        out["cuda"] = torch.cuda.is_available()
        out["devices"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    if out["packages"].get("onnxruntime"):
        import onnxruntime
        out["providers"] = onnxruntime.get_available_providers()
try:
    import painted_skin
    out["painted_skin"] = getattr(painted_skin, "__file__", "?")
except Exception:
    out["painted_skin"] = None
print("PAINTED_SKIN_PROBE " + json.dumps(out))
"""


def _extension_parent() -> str:
    """The folder above this package when it is named ``painted_skin`` (an installed
    extension, bl_ext.<repo>.painted_skin): on the probe's path, a Python without a
    painted_skin of its own reports on these very files."""
    root = Path(__file__).resolve().parents[3]
    return str(root.parent) if root.name == "painted_skin" else ""


@dataclass
class ProbeResult:
    """What ``python`` has; ``problem`` is one line saying what is wrong and the fix."""

    python: str
    ok: bool
    packages: dict[str, str | None] = field(default_factory=dict)
    cuda: bool | None = None
    devices: list[str] = field(default_factory=list)
    providers: list[str] = field(default_factory=list)
    painted_skin: str | None = None
    problem: str = ""
    facts: dict[str, Any] | None = None  # the doctor's report (backend.doctor.collect)

    @property
    def loadable_providers(self) -> list[str]:
        """onnxruntime providers a session really ran on (empty without the doctor)."""
        return list((self.facts or {}).get("loadable_providers", []))

    def report(self) -> list[str]:
        """The doctor's lines (``painted-skin doctor``), or the summary alone."""
        if self.facts is None:
            return [self.summary()]
        return report_lines(self.facts)

    def missing(self) -> list[str]:
        return [n for n in PACKAGES if not self.packages.get(n)]

    def summary(self) -> str:
        """One line for the panel: versions, device, or the problem and its fix."""
        if self.problem:
            return self.problem
        have = ", ".join(f"{n} {v}" for n, v in self.packages.items() if v)
        device = ("CUDA: " + ", ".join(self.devices)) if self.cuda else "CPU only"
        text = f"{have}; {device}"
        if self.facts is not None:
            gpu = [p.removesuffix("ExecutionProvider") for p in self.loadable_providers]
            text += f"; onnxruntime runs on {', '.join(gpu) or 'nothing'}"
            needed = [m for m in self.facts.get("missing", []) if m["need"] == "required"
                      and m["what"] not in {PACKAGES[n][0] for n in PACKAGES}]
            if needed:
                text += "; " + "; ".join(f"{m['what']}: {m['why']} ({m['fix']})"
                                          for m in needed)
        missing = [n for n in self.missing() if n not in REQUIRED]
        if missing:
            pips = " ".join(PACKAGES[n][0] for n in missing)
            text += f"; missing {', '.join(missing)} (for " + "; ".join(
                PACKAGES[n][1] for n in missing) + f"): {self.python} -m pip install {pips}"
        return text


def probe_python(python: str, env: dict[str, str] | None = None,
                 timeout_s: float = 60.0, device: str | None = None) -> ProbeResult:
    """Run ``python`` on the probe script (the doctor's facts, :mod:`..backend.doctor`,
    for ``device``, the one ``serve --device`` gets). Never raises: a missing file, a
    crash or a timeout comes back as ``ok=False`` with the reason and the fix."""
    if not python:
        return ProbeResult(python, False, problem=no_python_message())
    if not os.path.isfile(python):
        return ProbeResult(python, False, problem=f"Backend Python {python!r} does not exist: "
                           "set it to the python of an environment with " + INSTALL_HINT)
    try:
        script = _PROBE % (device, _extension_parent(), tuple(PACKAGES))
        proc = subprocess.run([python, "-c", script], capture_output=True, text=True,
                              timeout=timeout_s, env=env, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return ProbeResult(python, False, problem=f"{python} did not answer within "
                           f"{timeout_s:.0f} s (importing torch can be slow the first time: "
                           "press Check again)")
    except OSError as e:
        return ProbeResult(python, False, problem=f"cannot run {python}: {e.strerror or e}; "
                           "point Backend Python at a python executable")
    line = next((ln for ln in reversed(proc.stdout.splitlines())
                 if ln.startswith("PAINTED_SKIN_PROBE ")), None)
    if line is None:
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
        return ProbeResult(python, False, problem=f"{python} is not a working Python "
                           f"(exit {proc.returncode}): {tail[:300]}")
    data = json.loads(line.split(" ", 1)[1])
    res = ProbeResult(python, True, packages=data["packages"], cuda=data.get("cuda"),
                      devices=data.get("devices") or [], providers=data.get("providers") or [],
                      painted_skin=data.get("painted_skin"),
                      facts=data if data.get("doctor") else None)
    lacking = [n for n in REQUIRED if not res.packages.get(n)]
    if lacking:
        res.ok = False
        res.problem = (f"{python} lacks {', '.join(PACKAGES[n][0] for n in lacking)}, which the "
                       f"backend needs: {python} -m pip install {INSTALL_HINT.split()[-1]}")
    return res


def no_python_message() -> str:
    return ("no Backend Python is set: Blender's own Python cannot run the backend. Set "
            "Preferences > Add-ons > Painted Skin > Backend Python to the python of an "
            f"environment with {INSTALL_HINT} (e.g. <repo>/.venv-backend/bin/python from "
            "'make backend'), press Check, then Start Local Backend; or run "
            "'painted-skin serve' yourself and Connect")


def report_lines(facts: dict[str, Any]) -> list[str]:
    """The doctor's report (its facts: ``backend/doctor.collect``) as ``<topic> <name>:
    <status>`` lines (stable: parse them, or use ``--json``). Here, not in the doctor,
    so the panel's *Check* formats what the backend Python reported without importing
    the backend."""
    out = [f"python {facts['python']}: {facts['executable']}"]
    for name, (req, _) in PACKAGES.items():
        out.append(f"package {req}: {facts['packages'].get(name) or 'missing'}")
    out.append(f"package bpy: {facts['distributions'].get('bpy') or 'absent (not needed)'}")
    t = facts["torch"]
    if t.get("available"):
        state = "usable" if t["usable"] else f"not usable: {t['why']}"
        out.append(f"torch device {t['device']}: {state}; dtype {t['dtype']}; "
                   f"CUDA build {t['cuda_build'] or 'none (CPU-only)'}; cuDNN "
                   f"{t.get('cudnn') or 'n/a'}; {t['threads']} CPU threads")
        for d in t["devices"]:
            mem = (f"{d['free_gib']:.1f} of {d['total_gib']:.1f} GiB free" if "free_gib" in d
                   else d.get("error", "?"))
            out.append(f"gpu cuda:{d['index']}: {d['name']} (sm {d['capability']}), {mem}")
        if not t["devices"]:
            out.append("gpu none: no CUDA device visible to torch")
    else:
        out.append(f"torch device {t['device']}: torch missing (diffusion pipelines need it)")
    ort = facts["onnxruntime"]
    if ort.get("available"):
        out.append(f"onnxruntime {ort['version']}: {', '.join(ort['distributions'])}")
        for p, v in ort["providers"].items():
            state = "loadable" if v["loadable"] else f"missing ({v['why']})"
            out.append(f"provider {p}: {state}")
    else:
        out.append(f"onnxruntime missing: {ort.get('error', '')}")
    s = facts["shm"]
    free = f"{s['free_gib']:.1f} GiB free" if s.get("free_gib") is not None else "absent"
    out.append(f"shm {s['dir']}: {'yes' if s.get('supported') else 'no'}; memfd sealing "
               f"{'yes' if s.get('memfd_sealing') else 'no'}; {free}")
    for key, label in (("models", "model"), ("skin_models", "skin-model")):
        reg = facts[key]
        if not reg.get("available"):
            out.append(f"{label}-registry none: {reg['error']}")
            continue
        src = " ($" + ("PAINTED_SKIN_MODELS" if key == "models" else
                       "PAINTED_SKIN_SKIN_MODELS") + ")" if reg["from_env"] else " (default)"
        out.append(f"{label}-registry {reg['registry']}:{src} {reg.get('error', '')}".rstrip())
        for name, m in reg["models"].items():
            out.append(f"{label} {name}: " + ("present" if m["present"] else "missing"))
    out.append(f"pipelines: {', '.join(facts['pipelines']) or 'none'}")
    for m in facts["missing"]:
        out.append(f"missing {m['what']} [{m['need']}]: {m['why']}; fix: {m['fix']}")
    out.append("result: " + ("ok (echo and skin can run)" if facts["ok"] else
                             "NOT READY (see the 'missing ... [required]' lines)"))
    return out
