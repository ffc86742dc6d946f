"""Which wheels the GPU bench needs carried to the lent device, and a check of them.

``bench/gpu_device.sh prepare`` runs this here (with PyPI): ``plan`` prints one pip
requirement a line for what the device's image lacks (``.whl/``, cp312 manylinux),
``check DIR`` lists the carried wheels' unmet requirements, ``imports`` imports the
bench's whole chain with the modules the device lacks (zmq, bpy) blocked. A planning
tool of the repository, not part of the package: nothing imports it.

    python tools/device_wheels.py plan [--kinds KINDS.md]
"""

from __future__ import annotations

import argparse
import re
import sys
import zipfile
from typing import Any

KINDS_MD = "/work/.library/device/KINDS.md"
# What the device's image holds that this bench's chain touches (KINDS.md, 2026-11),
# name -> version (None: there, version not recorded): used when KINDS.md is absent.
DEVICE_FALLBACK: dict[str, str | None] = {
    "torch": "2.11.0", "transformers": "5.17.0", "onnx": "1.23.1", "onnxruntime": "1.30.0",
    "huggingface-hub": "1.33.0", "safetensors": "0.8.0", "numpy": "2.5.2",
    "tokenizers": "0.23.2", "triton": "3.6.0", "accelerate": "1.15.0", "onnxscript": "0.7.2",
    "onnx-ir": "1.0.0", "sentencepiece": "0.2.2", **dict.fromkeys(
        ("peft", "filelock", "regex", "requests", "pillow", "zipp", "packaging", "pyyaml",
         "tqdm", "typing-extensions", "jinja2", "markupsafe", "networkx", "sympy", "fsspec",
         "protobuf", "psutil", "ml-dtypes", "hf-xet", "certifi", "idna", "urllib3",
         "charset-normalizer", "httpx", "typer", "shellingham", "rich", "setuptools"))}
BENCH_TOP = ("diffusers",)  # what the bench imports that the device lacks
# Declared requirements that are never imported on the device's Python 3.12: not carried.
NOT_IMPORTED = {"importlib-metadata": "diffusers imports it only on Python < 3.8 "
                                      "(utils/import_utils.py); importlib.metadata otherwise"}
BLOCKED = ("zmq", "bpy", "mathutils", "gpu", "bgl", "blf")  # never needed by the bench


def norm(name: str) -> str:
    """A distribution name normalised (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def device_packages(text: str | None) -> dict[str, str | None]:
    """name -> version (None: there, version unknown) of the H200 image's Python
    packages, read from KINDS.md's text (its package list and pip-list row);
    :data:`DEVICE_FALLBACK` without it."""
    if not text:
        return dict(DEVICE_FALLBACK)
    m = re.search(r"^nvidia-h200:[^\n]*?Packages: ([^\n]*?)\.?\s*$", text, re.M)
    if not m:
        return dict(DEVICE_FALLBACK)
    out: dict[str, str | None] = {norm(n): None for n in m.group(1).split(", ") if n.strip()}
    row = re.search(r"pip list, as a session saw it \|[^\n]*?asked for: ([^\n|]*)", text)
    if row:
        for name, ver in re.findall(r"([A-Za-z0-9_.\-]+) (\d[\w.+\-]*)", row.group(1)):
            out[norm(name)] = ver.rstrip(".")
    return out


def _marker_env(python: str) -> dict[str, str]:
    from packaging.markers import default_environment

    return {**default_environment(), "python_version": python,
            "python_full_version": python + ".3", "sys_platform": "linux",
            "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
            "implementation_name": "cpython", "platform_python_implementation": "CPython",
            "extra": ""}


def _needed(reqs: list[str] | None, env: dict[str, str]) -> list[Any]:
    """The requirements that apply on the device (no extras, markers for its Python)."""
    from packaging.requirements import Requirement

    out = []
    for text in reqs or []:
        r = Requirement(text)
        if r.marker is None or r.marker.evaluate(env):
            out.append(r)
    return out


def plan_wheels(device: dict[str, str | None], top: tuple[str, ...] = BENCH_TOP,
                python: str = "3.12") -> tuple[list[tuple[str, str]], list[str]]:
    """([(pip requirement, why)], notes): the distributions to carry so that
    ``top`` imports on the device: each of ``top`` at this environment's version,
    then, recursively, every requirement of a carried one that the device lacks
    or holds at a version outside its specifier (at this environment's version
    when installed here, else the specifier). Offline: reads this environment's
    metadata only."""
    from importlib import metadata

    env = _marker_env(python)
    plan: dict[str, tuple[str, str]] = {}
    notes: list[str] = []
    todo: list[tuple[str, str, Any]] = [(t, "the bench imports it", None) for t in top]
    while todo:
        name, why, req = todo.pop(0)
        key = norm(name)
        if key in plan:
            continue
        try:
            ver: str | None = metadata.version(name)
        except metadata.PackageNotFoundError:
            ver = None
        if req is not None and ver is not None and not req.specifier.contains(ver, True):
            ver = None
        spec = f"{name}=={ver}" if ver else (f"{name}{req.specifier}" if req else name)
        plan[key] = (spec, why)
        if ver is None:
            notes.append(f"{name}: not installed here, its own requirements are not followed")
            continue
        for r in _needed(metadata.requires(name), env):
            k = norm(r.name)
            if k in plan:
                continue
            if k in NOT_IMPORTED:
                notes.append(f"{r.name}: not carried: {NOT_IMPORTED[k]}")
                continue
            if k in device:
                have = device[k]
                if have is None or r.specifier.contains(have, True):
                    notes.append(f"{r.name}{r.specifier or ''}: on the device"
                                 + (f" ({have})" if have else "") + f", for {name}")
                    continue
                todo.append((r.name, f"{name} needs {r.name}{r.specifier}, the device has "
                             f"{have}", r))
            else:
                todo.append((r.name, f"{name} needs it; not on the device", r))
    return list(plan.values()), notes


def check_wheels(folder: str, device: dict[str, str | None], python: str = "3.12") -> list[str]:
    """What the wheels in ``folder`` need that neither they nor the device hold
    (read from each wheel's METADATA); empty when the set is complete."""
    from pathlib import Path

    from packaging.version import Version

    env = _marker_env(python)
    wheels = {}
    for w in sorted(Path(folder).glob("*.whl")):
        name, ver = w.name.split("-")[:2]
        with zipfile.ZipFile(w) as z:
            meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
            reqs = [ln.split(":", 1)[1].strip() for ln in
                    z.read(meta).decode("utf-8", "replace").splitlines()
                    if ln.startswith("Requires-Dist:")]
        wheels[norm(name)] = (ver, reqs)
    problems = []
    for name, (_, reqs) in wheels.items():
        for r in _needed(reqs, env):
            k = norm(r.name)
            if k in NOT_IMPORTED:
                continue
            if k in wheels:
                have = wheels[k][0]
            elif k in device:
                have = device[k] or ""  # "": there, version not recorded
            else:
                problems.append(f"{name} needs {r}: neither carried nor on the device")
                continue
            if have and r.specifier and not r.specifier.contains(Version(have), True):
                problems.append(f"{name} needs {r}: {have} there")
    return problems


def import_check() -> list[str]:
    """Import the bench's whole chain with :data:`BLOCKED` modules made
    unimportable; returns the modules of this package it loaded."""
    import importlib

    class Block:
        def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
            if name.split(".")[0] in BLOCKED:
                raise ImportError(f"{name} is blocked: the GPU bench must not need it")

    sys.meta_path.insert(0, Block())
    try:
        for mod in ("backend.diffusion.temporal", "backend.diffusion.controlnet_pipeline",
                    "backend.diffusion.onnx.pipeline", "backend.diffusion.onnx.export",
                    "backend.diffusion.onnx.export_wrappers",
                    "backend.diffusion.onnx.attention", "backend.diffusion.onnx.rewrites",
                    "bench.diffusion", "bench.gpu", "bench.gpu_steps", "bench.gpu_timing"):
            importlib.import_module(f"painted_skin.{mod}")
    finally:
        sys.meta_path.pop(0)
    bad = [m for m in sys.modules if m.split(".")[0] in BLOCKED]
    if bad:
        raise ImportError(f"loaded {bad}")
    return sorted(m for m in sys.modules if m.startswith("painted_skin."))


def wheels_main(argv: list[str] | None = None) -> int:
    """``plan``: one pip requirement a line (then ``# why``) and notes; ``check
    DIR``: the wheels' unmet requirements (exit 1 if any); ``imports``: the
    import check."""
    p = argparse.ArgumentParser(prog="gpu wheels")
    p.add_argument("what", choices=("plan", "check", "imports"))
    p.add_argument("folder", nargs="?")
    p.add_argument("--kinds", default=KINDS_MD, help="the device library's KINDS.md")
    a = p.parse_args(argv)
    try:
        with open(a.kinds, encoding="utf-8") as fh:
            text: str | None = fh.read()
    except OSError:
        text = None
    device = device_packages(text)
    if a.what == "plan":
        plan, notes = plan_wheels(device)
        src = a.kinds if text else "the built-in list (no KINDS.md)"
        print(f"# device packages: {len(device)} from {src}")
        for spec, why in plan:
            print(f"{spec}  # {why}")
        for n in notes:
            print(f"#   {n}")
        return 0
    if a.what == "check":
        problems = check_wheels(a.folder or ".whl", device)
        for pr in problems:
            print(f"unmet: {pr}")
        return 1 if problems else 0
    mods = import_check()
    print(f"imports without {', '.join(BLOCKED)}: {len(mods)} modules of the package")
    return 0


if __name__ == "__main__":
    sys.exit(wheels_main())
