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

_PROBE = r"""
import importlib, json, sys
out = {"python": sys.version.split()[0], "executable": sys.executable, "packages": {}}
for name in %r:
    try:
        mod = importlib.import_module(name)
        out["packages"][name] = str(getattr(mod, "__version__", "?"))
    except Exception as e:
        out["packages"][name] = None
        out.setdefault("errors", {})[name] = f"{type(e).__name__}: {e}"[:200]
try:
    import painted_skin
    out["painted_skin"] = getattr(painted_skin, "__file__", "?")
except Exception:
    out["painted_skin"] = None
if out["packages"].get("torch"):
    import torch
    out["cuda"] = torch.cuda.is_available()
    out["devices"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
if out["packages"].get("onnxruntime"):
    import onnxruntime
    out["providers"] = onnxruntime.get_available_providers()
print("PAINTED_SKIN_PROBE " + json.dumps(out))
"""


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

    def missing(self) -> list[str]:
        return [n for n in PACKAGES if not self.packages.get(n)]

    def summary(self) -> str:
        """One line for the panel: versions, device, or the problem and its fix."""
        if self.problem:
            return self.problem
        have = ", ".join(f"{n} {v}" for n, v in self.packages.items() if v)
        device = ("CUDA: " + ", ".join(self.devices)) if self.cuda else "CPU only"
        text = f"{have}; {device}"
        missing = [n for n in self.missing() if n not in REQUIRED]
        if missing:
            pips = " ".join(PACKAGES[n][0] for n in missing)
            text += f"; missing {', '.join(missing)} (for " + "; ".join(
                PACKAGES[n][1] for n in missing) + f"): {self.python} -m pip install {pips}"
        return text


def probe_python(python: str, env: dict[str, str] | None = None,
                 timeout_s: float = 60.0) -> ProbeResult:
    """Run ``python`` on the probe script. Never raises: a missing file, a crash or a
    timeout comes back as ``ok=False`` with the reason and the fix."""
    if not python:
        return ProbeResult(python, False, problem=no_python_message())
    if not os.path.isfile(python):
        return ProbeResult(python, False, problem=f"Backend Python {python!r} does not exist: "
                           "set it to the python of an environment with " + INSTALL_HINT)
    try:
        proc = subprocess.run([python, "-c", _PROBE % (tuple(PACKAGES),)], capture_output=True,
                              text=True, timeout=timeout_s, env=env, stdin=subprocess.DEVNULL)
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
                      painted_skin=data.get("painted_skin"))
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
