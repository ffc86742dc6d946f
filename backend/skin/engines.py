"""What runs a skin model's network: onnxruntime (the default, no torch) or torch.

Both take the same named inputs (``features``, and ``x_t``/``t`` for the diffusion
head) as float32 arrays and return the network's output as a (1, 3, H, W) array, so
:class:`.runtime.SkinModel` paints the same frame whichever runs it (torch and the
ONNX export agree within 1e-4).

- ``onnx``: onnxruntime's best provider for the device — TensorRT, then CUDA, on a
  GPU (the TensorRT engine cache kept in the user's cache, since a model folder may
  be read-only), the CPU provider otherwise.
- ``torch``: the network rebuilt from the folder's config and ``weights.safetensors``
  (never a pickle), on the device asked for; for GPU hosts with torch and no
  onnxruntime-gpu, and to check an export against its own weights.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import numpy as np

ENGINES = ("onnx", "torch")


class EngineError(ValueError):
    """An engine that cannot run this model here; the message names the fix."""


def check_engine(name: object, config: dict[str, Any], folder: Path) -> str:
    """``name`` (None: onnx) if it can run the model folder, else :class:`EngineError`."""
    name = "onnx" if name is None else name
    if name not in ENGINES:
        raise EngineError(f"engine {name!r} must be one of {', '.join(ENGINES)}")
    if name == "torch":
        weights = config.get("weights")
        if not weights or not (folder / str(weights)).is_file():
            raise EngineError(f"skin model {str(folder)!r} has no torch weights "
                              "(weights.safetensors): re-export or retrain it with this "
                              "version, or use engine 'onnx'")
        try:
            import torch  # noqa: F401
        except ImportError:
            raise EngineError("engine 'torch' needs torch in the backend's Python: pip "
                              "install torch (docs/gpu.md), or use engine 'onnx'") from None
    return name


def _trt_cache(graph: Path) -> Path:
    """Where TensorRT keeps this graph's engines: keyed by the graph's bytes, since
    onnxruntime's own engine id hashes names, not weights (a model retrained into the
    same folder must not be painted by the old one's engine)."""
    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    h = hashlib.sha256()
    with open(graph, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return base / "painted-skin" / "skin-trt" / h.hexdigest()[:16]


class ModelGraphError(ValueError):
    """The folder's graph file is damaged (empty, truncated, not ONNX)."""


class OnnxEngine:
    """One onnxruntime session of the folder's graph."""

    def __init__(self, folder: Path, config: dict[str, Any], device: str = "cpu",
                 threads: int | None = None) -> None:
        import onnxruntime as ort

        so = ort.SessionOptions()
        if threads:
            so.intra_op_num_threads = int(threads)
        providers: list = ["CPUExecutionProvider"]
        if device.startswith("cuda"):
            from ..diffusion.onnx.runtime import provider_chain

            index = int(device.partition(":")[2] or 0)
            # frame sizes vary per shot: no CUDA graph (it needs static shapes)
            providers = provider_chain(_trt_cache(folder / config["graph"]), "auto",
                                       cuda_graph=False,
                                       device_id=index)
        graph = folder / config["graph"]
        try:
            self.session = ort.InferenceSession(str(graph), so, providers=providers)
        except Exception as e:  # onnxruntime's InvalidProtobuf, Fail, ...: a damaged file
            if device.startswith("cuda") and "provider" in str(e).lower():
                raise
            raise ModelGraphError(f"{graph} is not a graph onnxruntime can load "
                                  f"({type(e).__name__}: {str(e)[:160]}): copy the model "
                                  "folder again, or re-export it") from None
        self.providers = self.session.get_providers()

    def run(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        return self.session.run(None, feeds)[0]


class TorchEngine:
    """The network in torch, weights from ``weights.safetensors``."""

    def __init__(self, folder: Path, config: dict[str, Any], device: str = "cpu",
                 threads: int | None = None) -> None:
        import torch
        from safetensors.torch import load_file

        from .model import SkinNet, net_config

        if threads:
            torch.set_num_threads(int(threads))
        self.device = torch.device(device)
        net = SkinNet(net_config(config))
        net.load_state_dict(load_file(str(folder / config["weights"])))
        self.net = net.eval().to(self.device)
        self.providers = [f"torch:{self.device}"]

    def run(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        import torch

        args = [torch.from_numpy(np.ascontiguousarray(feeds[k], np.float32)).to(self.device)
                for k in ("features", "x_t", "t") if k in feeds]
        with torch.inference_mode():
            return self.net(*args).float().cpu().numpy()


def load_engine(name: str, folder: Path, config: dict[str, Any], device: str = "cpu",
                threads: int | None = None) -> OnnxEngine | TorchEngine:
    cls = TorchEngine if check_engine(name, config, folder) == "torch" else OnnxEngine
    return cls(folder, config, device, threads)
