"""The diffusion pipelines' option vocabulary, in one place: which options change what
a factory loads and the checks told on OPEN; the ``cross_frame`` values are the
wire's (:mod:`wire.options`), which the add-on reads too.

Pure Python (no torch): the factories, the SDXL code, the ONNX engine and the OPEN
check all read their vocabulary here, so none of them imports another to learn it.
"""

from __future__ import annotations

import functools
from typing import Any

# Re-exported: the pipelines and cross-frame attention read their vocabulary here.
from ...wire.options import CROSS_FRAME_MODES as CROSS_FRAME_MODES
from ...wire.options import CrossFrameError
from ...wire.options import RefWeightsError as RefWeightsError
from ...wire.options import cross_frame_mode as parse_cross_frame
from ...wire.options import normalized_ref_weights as normalized_ref_weights
from ...wire.options import ref_weights as parse_ref_weights

# The options that change what a factory loads (the backend keeps one pipeline per
# distinct value of them); everything else is per-frame.
LOAD_KEYS = ("model", "tiny", "tiny_seed", "tiny_controlnets", "dtype", "engine")
XL_LOAD_KEYS = ("model", "tiny", "tiny_seed", "tiny_controlnets", "union", "dtype", "engine")
ENGINES = ("torch", "onnx")
# What each runtime needs of a CUDA device: torch's CUDA, onnxruntime's CUDA provider, both.
RUNTIMES = {"torch": ("torch",), "onnx": ("torch", "onnxruntime"),
            "onnxruntime": ("onnxruntime",)}
TORCH_CUDA = ("pip install --force-reinstall torch --index-url "
              "https://download.pytorch.org/whl/cu130")
ORT_GPU = "pip uninstall -y onnxruntime && pip install 'onnxruntime-gpu[cuda,cudnn]'"


def engine_problem(options: dict[str, Any]) -> str | None:
    """What is wrong with ``options``' engine choice (None when nothing): told on OPEN
    rather than found on the first frame."""
    engine = options.get("engine", "torch")
    if engine not in ENGINES:
        return f"engine {engine!r} must be \"torch\" or \"onnx\""
    return None


def option_problems(options: dict[str, Any]) -> list[str]:
    """The checks of the options SD 1.5 and SDXL share (registry, steps, cross-frame,
    reference weights, engine): told on OPEN, before the shot starts. The weights'
    count against the references is the OPEN's :func:`wire.options.ref_weights_problem`
    (the references are not among the options)."""
    if "registry" in options:
        return ["option 'registry' is not accepted from clients: set PAINTED_SKIN_MODELS "
                "where the backend runs"]
    steps = options.get("steps", 4)
    if not isinstance(steps, int) or isinstance(steps, bool) or not 1 <= steps <= 100:
        return [f"steps {steps!r} must be a whole number from 1 to 100"]
    try:
        parse_cross_frame(options.get("cross_frame"))
    except CrossFrameError as e:
        return [str(e)]
    try:
        parse_ref_weights(options.get("ref_weights"))
    except RefWeightsError as e:
        return [str(e)]
    problem = engine_problem(options)
    return [problem] if problem else []


@functools.lru_cache(maxsize=16)
def device_problem(device: str, runtime: str = "torch") -> str | None:
    """Why ``device`` (``serve --device``) cannot run ``runtime`` ("torch", "onnx": torch
    and onnxruntime's CUDA provider, "onnxruntime": the skin model) here; None when it
    can. Told when a session opens: on its own, torch raises on the first tensor moved
    to a missing GPU, and onnxruntime quietly runs on the CPU, many times slower."""
    if device == "cpu":
        return None
    kind, _, index = device.partition(":")
    if kind != "cuda" or not (index == "" or index.isdigit()):
        return f"device {device!r}: use cpu, cuda or cuda:N"
    fix = "(docs/gpu.md), or serve with --device cpu"
    if "torch" in RUNTIMES[runtime]:
        try:
            import torch
        except ImportError:
            return f"device {device!r} needs torch: {TORCH_CUDA} {fix}"
        if not torch.cuda.is_available():
            if torch.version.cuda is None:
                return (f"device {device!r}: torch {torch.__version__} is a CPU-only build: "
                        f"{TORCH_CUDA} {fix}")
            return (f"device {device!r}: torch (CUDA {torch.version.cuda}) sees no CUDA "
                    f"device: is the NVIDIA driver installed and recent enough? {fix}")
        if int(index or 0) >= torch.cuda.device_count():
            return (f"device {device!r}: this machine has {torch.cuda.device_count()} CUDA "
                    "device(s), numbered from 0")
    if "onnxruntime" in RUNTIMES[runtime]:
        from ..doctor import CUDA, provider_loads

        try:
            import onnxruntime as ort
        except ImportError:
            return f"device {device!r} needs onnxruntime-gpu: pip install onnxruntime-gpu {fix}"
        if CUDA not in ort.get_available_providers():
            return (f"device {device!r}: onnxruntime {ort.__version__} has no CUDA provider "
                    f"(it is the CPU package): {ORT_GPU} {fix}")
        ok, why = provider_loads(CUDA)
        if not ok:
            return (f"device {device!r}: onnxruntime's CUDA provider does not load ({why}): "
                    "it needs the CUDA and cuDNN 9 libraries of its build (CUDA 13 from "
                    f"onnxruntime-gpu 1.27, 12 before): pip install "
                    f"'onnxruntime-gpu[cuda,cudnn]' {fix}")
    return None
