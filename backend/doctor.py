"""``painted-skin doctor``: what this Python will use as a backend, and what it lacks.

Runs in the backend's own Python (directly, or as the subprocess behind the
Preferences' *Check*, :mod:`..addon.core.backend.probe`), so both report the same
facts: package versions, the torch device and dtype, the onnxruntime execution
providers that really *load* (each is given a tiny session: onnxruntime lists the
CUDA provider whenever it was built with it, and falls back to the CPU quietly when
CUDA or cuDNN is missing), free GPU memory, shared memory, and the model registries
with each model's weights present or not. Never downloads, never imports bpy; every
optional package is imported inside a ``try``, so a Python without torch (Blender's
venv) is reported on, not crashed.
"""

from __future__ import annotations

import argparse
import base64
import importlib
import importlib.metadata
import json
import os
import platform
import shutil
import sys
from typing import Any

from ..addon.core.backend.probe import GPU_HINTS, PACKAGES, REQUIRED
from ..addon.core.backend.probe import report_lines as lines

CPU, CUDA, TRT = "CPUExecutionProvider", "CUDAExecutionProvider", "TensorrtExecutionProvider"
PROVIDERS = (TRT, CUDA, CPU)
NEEDS = ("required", "gpu", "optional")  # how much a missing item matters
# A one-node ONNX model (y = Relu(x), opset 13): what each provider is asked to load.
_TINY_ONNX = base64.b64decode(
    "CAcSDHBhaW50ZWQtc2tpbjo3CgwKAXgSAXkiBFJlbHUSBXByb2JlWg8KAXgSCgoICAESBAoCCAFiDwoBeRIKCggI"
    "ARIECgIIAUIECgAQDQ==")
# Distribution names behind the ``onnxruntime`` module (two at once break each other).
_ORT_DISTS = ("onnxruntime", "onnxruntime-gpu", "onnxruntime-directml", "onnxruntime-openvino")


def _dist_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _error(e: BaseException) -> str:
    return " ".join(f"{type(e).__name__}: {e}".split())[:300]


def packages() -> tuple[dict[str, str | None], dict[str, str]]:
    """(import name -> version or None, import name -> why it failed) for :data:`PACKAGES`."""
    found: dict[str, str | None] = {}
    errors: dict[str, str] = {}
    for name in PACKAGES:
        try:
            mod = importlib.import_module(name)
            found[name] = str(getattr(mod, "__version__", None) or "?")
        except Exception as e:  # a broken install (a missing CUDA library...) says why
            found[name] = None
            errors[name] = _error(e)
    return found, errors


def torch_facts(device: str | None) -> dict[str, Any]:
    """torch's build, its CUDA devices with free memory, and the device and dtype the
    diffusion pipelines use for ``device`` (None: what ``serve`` defaults to, the CPU)."""
    asked = device or "cpu"
    try:
        import torch
    except Exception as e:
        return {"available": False, "error": _error(e), "device": asked, "usable": False,
                "dtype": None, "cuda": False, "cuda_build": None, "devices": []}
    cuda = bool(torch.cuda.is_available())
    devices = []
    for i in range(torch.cuda.device_count() if cuda else 0):
        d: dict[str, Any] = {"index": i, "name": torch.cuda.get_device_name(i),
                             "capability": ".".join(map(str, torch.cuda.get_device_capability(i)))}
        try:
            free, total = torch.cuda.mem_get_info(i)
            d.update(free_gib=round(free / 2**30, 2), total_gib=round(total / 2**30, 2))
        except Exception as e:  # a device in exclusive use by another process
            d["error"] = _error(e)
        devices.append(d)
    usable, why = True, ""
    if asked.startswith("cuda"):
        index = int(asked.partition(":")[2] or 0) if asked.partition(":")[2].isdigit() else 0
        if not cuda:
            usable = False
            why = ("this torch is a CPU-only build" if torch.version.cuda is None
                   else "torch sees no CUDA device (driver missing or too old?)")
        elif index >= len(devices):
            usable, why = False, f"there are {len(devices)} CUDA device(s)"
    elif asked != "cpu":
        usable, why = False, "give cpu, cuda or cuda:N"
    cudnn = None
    try:
        cudnn = torch.backends.cudnn.version() if cuda else None
    except Exception:
        pass
    return {"available": True, "version": torch.__version__, "cuda_build": torch.version.cuda,
            "cuda": cuda, "cudnn": cudnn, "devices": devices, "device": asked,
            "usable": usable, "why": why,
            # RestylePipeline's default: half precision on CUDA, float32 on the CPU
            "dtype": "float16" if asked.startswith("cuda") else "float32",
            "threads": torch.get_num_threads()}


def provider_loads(provider: str) -> tuple[bool, str]:
    """Whether onnxruntime really runs a session on ``provider`` (a tiny model, one
    run); onnxruntime falls back to the CPU instead of failing, so the session's own
    provider list is what tells."""
    try:
        import numpy as np
        import onnxruntime as ort
    except Exception as e:
        return False, _error(e)
    if provider not in ort.get_available_providers():
        return False, "not in this onnxruntime build"
    so = ort.SessionOptions()
    so.log_severity_level = 4  # a provider that fails to load is our answer, not a log
    try:
        chain = [provider] if provider == CPU else [provider, CPU]
        sess = ort.InferenceSession(_TINY_ONNX, so, providers=chain)
        used = sess.get_providers()
        if used[:1] != [provider]:
            return False, "onnxruntime fell back to the CPU (its CUDA/cuDNN/TensorRT " \
                          "libraries did not load)"
        out = sess.run(None, {"x": np.array([-1.0], np.float32)})[0]
        if float(out[0]) != 0.0:
            return False, f"a test run gave {out!r}"
    except Exception as e:
        return False, _error(e)
    return True, ""


def onnxruntime_facts() -> dict[str, Any]:
    """onnxruntime's version, the distributions installed, and per provider of
    :data:`PROVIDERS`: listed (compiled in) and loadable (a session runs on it)."""
    dists = {d: v for d in _ORT_DISTS if (v := _dist_version(d))}
    try:
        import onnxruntime as ort
    except Exception as e:
        return {"available": False, "error": _error(e), "distributions": dists,
                "providers": {}}
    listed = list(ort.get_available_providers())
    if hasattr(ort, "preload_dlls") and CUDA in listed:
        try:  # CUDA/cuDNN from the nvidia-* wheels (torch's), as onnxruntime-gpu documents
            ort.preload_dlls()
        except Exception:
            pass
    providers = {}
    for p in PROVIDERS:
        if p in listed:
            ok, why = provider_loads(p)
        else:
            ok, why = False, "not in this onnxruntime build"
        providers[p] = {"listed": p in listed, "loadable": ok, "why": why}
    return {"available": True, "version": ort.__version__, "distributions": dists,
            "listed": listed, "providers": providers}


def shm_facts() -> dict[str, Any]:
    """Whether Blender can hand the backend its passes through shared memory."""
    out: dict[str, Any] = {}
    try:
        from ..wire import segments as seg

        out["supported"] = seg.shm_supported()
        out["memfd_sealing"] = seg.memfd_sealing()
        folder = seg.SHM_DIR
    except Exception as e:  # numpy missing: the protocol module cannot load
        out.update(supported=False, memfd_sealing=False, error=_error(e))
        folder = "/dev/shm"
    out["dir"] = folder
    if os.path.isdir(folder):
        usage = shutil.disk_usage(folder)
        out.update(free_gib=round(usage.free / 2**30, 2),
                   writable=os.access(folder, os.W_OK))
    else:
        out.update(free_gib=None, writable=False)
    return out


def diffusion_models() -> dict[str, Any]:
    """The diffusion model registry ($PAINTED_SKIN_MODELS or the example) and, per
    model, what is missing from the local files (hub ids count as present only
    when in the Hugging Face cache: nothing is downloaded)."""
    try:
        from .diffusion import components as C
    except Exception as e:
        return {"available": False, "error": "the diffusion code is not in this install "
                f"({_error(e)})", "models": {}}
    path = str(os.environ.get("PAINTED_SKIN_MODELS") or C.DEFAULT_REGISTRY)
    out: dict[str, Any] = {"available": True, "registry": path,
                           "from_env": bool(os.environ.get("PAINTED_SKIN_MODELS")),
                           "models": {}}
    try:
        registry = C.load_registry(None)
    except Exception as e:
        out["error"] = f"cannot read {path}: {_error(e)}"
        return out
    if not _importable("huggingface_hub"):
        out["error"] = "huggingface_hub is missing: the Hugging Face cache cannot be read"
        out["fix"] = f"{sys.executable} -m pip install diffusers transformers"
        return out
    saved = os.environ.get("HF_HUB_OFFLINE")
    os.environ["HF_HUB_OFFLINE"] = "1"  # report what is here, not what would download
    try:
        for name, entry in registry.items():
            try:
                problems = C.check_weights(entry)
            except Exception as e:  # huggingface_hub missing, an unreadable folder
                problems = [_error(e)]
            out["models"][name] = {"present": not problems, "problems": problems}
    finally:
        if saved is None:
            os.environ.pop("HF_HUB_OFFLINE", None)
        else:
            os.environ["HF_HUB_OFFLINE"] = saved
    return out


def skin_models() -> dict[str, Any]:
    """The skin-model registry ($PAINTED_SKIN_SKIN_MODELS or the example) and whether
    each model folder can be served."""
    try:
        from .skin import registry, runtime
    except Exception as e:
        return {"available": False, "error": "the skin-model code is not in this install "
                f"({_error(e)})", "models": {}}
    out: dict[str, Any] = {"available": True, "registry": str(registry.registry_path()),
                           "from_env": bool(os.environ.get(registry.ENV)), "models": {}}
    try:
        reg = registry.load_registry()
    except Exception as e:
        out["error"] = str(e)
        return out
    for name, folder in reg.items():
        try:
            cfg = runtime.read_config(folder)
            out["models"][name] = {"present": True, "folder": str(folder),
                                   "temporal": bool(cfg.get("temporal")), "problems": []}
        except Exception as e:
            out["models"][name] = {"present": False, "folder": str(folder),
                                   "problems": [str(e)]}
    return out


def nvidia_gpu_present() -> bool:
    """An NVIDIA driver is loaded here (so a CPU-only torch/onnxruntime wastes a GPU)."""
    return os.path.exists("/proc/driver/nvidia/version") or shutil.which("nvidia-smi") is not None


def collect(device: str | None = None) -> dict[str, Any]:
    """Every fact, as one JSON-able dict; ``device``: the one ``serve --device`` would
    get (default: its default, cpu). Never raises for a missing package."""
    found, errors = packages()
    facts: dict[str, Any] = {
        "python": sys.version.split()[0], "executable": sys.executable,
        "platform": platform.platform(), "packages": found, "errors": errors,
        "distributions": {"bpy": _dist_version("bpy")},
        "painted_skin": getattr(sys.modules.get(__package__.rsplit(".", 1)[0]), "__file__",
                                None),
        "nvidia_driver": nvidia_gpu_present(),
    }
    facts["torch"] = torch_facts(device)
    facts["onnxruntime"] = onnxruntime_facts()
    facts["shm"] = shm_facts()
    facts["models"] = diffusion_models()
    facts["skin_models"] = skin_models()
    # kept for the panel's probe (its first format)
    facts["cuda"] = facts["torch"].get("cuda")
    facts["devices"] = [d["name"] for d in facts["torch"].get("devices", [])]
    facts["providers"] = facts["onnxruntime"].get("listed", [])
    facts["loadable_providers"] = [p for p, v in facts["onnxruntime"]["providers"].items()
                                   if v["loadable"]]
    facts["pipelines"] = pipelines_runnable(facts)
    facts["missing"] = missing(facts)
    facts["ok"] = {"echo", "skin"} <= set(facts["pipelines"]) and not any(
        m["need"] == "required" for m in facts["missing"])
    return facts


def pipelines_runnable(facts: dict[str, Any]) -> list[str]:
    """The pipelines this Python can serve (what ``register_builtin`` would offer and
    their packages can run)."""
    pk = facts["packages"]
    names = []
    if pk.get("zmq") and pk.get("numpy"):
        names.append("echo")
        skin = facts["skin_models"]  # a registry that does not load serves no model
        if skin["available"] and not skin.get("error") and CPU in facts["loadable_providers"]:
            names.append("skin")
        if facts["models"]["available"] and all(pk.get(n) for n in ("torch", "diffusers")) \
                and _importable("transformers"):
            names += ["sd15-controlnet", "sdxl-controlnet"]
    return names


def _importable(name: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def missing(facts: dict[str, Any]) -> list[dict[str, str]]:
    """What is missing, one item each: ``what``, ``need`` ("required", "gpu" or
    "optional"), ``why`` and ``fix`` (the pip line or the step)."""
    py = facts["executable"]
    pip = f"{py} -m pip install"
    out: list[dict[str, str]] = []

    def add(what: str, need: str, why: str, fix: str) -> None:
        out.append({"what": what, "need": need, "why": why, "fix": fix})

    pk = facts["packages"]
    for name, (req, role) in PACKAGES.items():
        if pk.get(name):
            continue
        need = "required" if name in REQUIRED or name == "onnxruntime" else "optional"
        err = facts["errors"].get(name, "")
        broken = err and "No module named" not in err
        fix = (f"{pip} --force-reinstall {req} (it is installed but does not import: {err})"
               if broken else GPU_HINTS.get(name, f"{pip} {req}").replace("PYTHON", py))
        add(req, need, role, fix)
    ort = facts["onnxruntime"]
    dists = ort.get("distributions", {})
    if len(dists) > 1:
        add("onnxruntime", "required", f"{' and '.join(dists)} are both installed and "
            "overwrite each other's files", f"{py} -m pip uninstall -y {' '.join(dists)} && "
            f"{pip} onnxruntime-gpu")
    if ort.get("available"):
        for p, hint in ((CUDA, "cuda"), (TRT, "tensorrt")):
            v = ort["providers"][p]
            if v["loadable"]:
                continue
            fix = GPU_HINTS[f"{hint}-listed" if v["listed"] else hint].replace("PYTHON", py)
            add(p, "gpu", v["why"], fix)
    t = facts["torch"]
    if t.get("available") and not t.get("cuda") and (facts["nvidia_driver"]
                                                     or t["device"].startswith("cuda")):
        add("torch CUDA build", "gpu", f"torch {t['version']} cannot use the GPU "
            f"({t.get('why') or 'a CPU-only build'})", GPU_HINTS["torch-cuda"].replace(
                "PYTHON", py))
    cuda_ep = ort.get("providers", {}).get(CUDA, {})
    if t["device"].startswith("cuda") and not cuda_ep.get("loadable"):
        # asked for: the skin model runs on onnxruntime's CUDA provider (torch's CUDA,
        # the diffusion pipelines', is the 'torch CUDA build' line)
        hint = GPU_HINTS["cuda-listed" if cuda_ep.get("listed") else "cuda"]
        add(f"device {t['device']}", "required", "onnxruntime's CUDA provider: "
            + cuda_ep.get("why", "onnxruntime is missing"), hint.replace("PYTHON", py)
            + "; docs/gpu.md; or serve on the CPU (--device cpu)")
    for key, label in (("skin_models", "skin model"), ("models", "diffusion model")):
        reg = facts[key]
        if reg.get("error") and reg.get("available"):
            env = "PAINTED_SKIN_SKIN_MODELS" if key == "skin_models" else "PAINTED_SKIN_MODELS"
            # the skin registry named in the environment is what the backend serves from
            need = "required" if key == "skin_models" and reg.get("from_env") else "optional"
            add(f"{label} registry", need, reg["error"],
                reg.get("fix", f"fix the file or point {env} at another"))
        for name, m in reg.get("models", {}).items():
            if not m["present"]:
                add(f"{label} {name}", "optional", "its files are not here",
                    " | ".join(m["problems"])[:600])
    shm = facts["shm"]
    if not shm.get("supported"):
        add("shared memory", "optional", "passes go over the socket (copies)",
            "run on Linux with /dev/shm mounted")
    out.sort(key=lambda m: NEEDS.index(m["need"]))  # what blocks the backend first
    return out


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the facts as one JSON object")
    p.add_argument("--device", help="the device to check, as given to serve --device "
                                    "(default: cpu, serve's default)")
    p.add_argument("--python", help="check this Python (the backend's) instead of this one")


def run(args: argparse.Namespace) -> int:
    """Print the report; 0 when echo and skin can run (and ``--device`` is usable)."""
    if getattr(args, "python", None):
        from ..addon.core.backend.probe import probe_python

        res = probe_python(args.python, device=args.device)
        if res.facts is None:
            print(f"painted-skin doctor: {res.problem or res.summary()}", file=sys.stderr)
            return 1
        facts = res.facts
    else:
        facts = collect(args.device)
    if args.json:
        print(json.dumps(facts, indent=1, sort_keys=True))
    else:
        print("\n".join(lines(facts)))
    return 0 if facts["ok"] else 1


def add_doctor_command(subparsers: Any) -> None:
    """``painted-skin doctor`` on the CLI's subparsers."""
    d = subparsers.add_parser("doctor", help="what the backend will use (device, dtype, "
                                             "onnxruntime providers, versions, VRAM, models) "
                                             "and how to install what is missing")
    add_arguments(d)
    d.set_defaults(func=run)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="painted-skin doctor", description=__doc__.splitlines()[0])
    add_arguments(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
