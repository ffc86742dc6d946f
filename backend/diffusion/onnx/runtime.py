"""onnxruntime sessions for the exported graphs: which execution provider, with what
options, and one session per graph.

The best execution provider available (``onnxruntime.get_available_providers()``):

1. TensorRT EP: fp16, engine and timing caches in ``<folder>/trt`` (static
   shapes, so one engine per graph is built once and reused), CUDA graph;
2. CUDA EP: IO binding onto persistent GPU buffers, CUDA graph (static
   shapes; fp16 comes from an fp16 export), exhaustive cuDNN search;
3. CPU EP.

Every session: graph optimisation level ALL, intra-op threads = torch's
(physical cores), threads spinning during a run only (:func:`session_options`).
"""

from __future__ import annotations

import functools
import logging
import os
from pathlib import Path
from typing import Any

import numpy as np

from .tensorrt import engine_cache_dir, tensorrt_version

log = logging.getLogger("painted_skin.backend.onnx")
CPU, CUDA, TRT = "CPUExecutionProvider", "CUDAExecutionProvider", "TensorrtExecutionProvider"
_NP = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(int64)": np.int64,
       "tensor(int32)": np.int32}


def available_providers() -> list[str]:
    import onnxruntime as ort

    return list(ort.get_available_providers())


def provider_chain(folder: str | os.PathLike, providers: str | list[str] = "auto",
                   cuda_graph: bool = True, device_id: int = 0) -> list[tuple[str, dict]]:
    """(name, options) of the providers to use, best first, among those offered.

    ``providers``: "auto" (TensorRT -> CUDA -> CPU), "tensorrt", "cuda", "cpu" or
    a list of provider names. Unavailable ones are dropped; CPU always ends it.
    """
    names = provider_names(providers)
    trt_dir = str(engine_cache_dir(folder, device_id)) if TRT in names else ""
    opts = {
        TRT: {"device_id": device_id, "trt_fp16_enable": True,
              "trt_engine_cache_enable": True, "trt_engine_cache_path": trt_dir,
              "trt_timing_cache_enable": True, "trt_timing_cache_path": trt_dir,
              "trt_max_workspace_size": 8 << 30, "trt_builder_optimization_level": 3,
              "trt_cuda_graph_enable": cuda_graph},
        CUDA: {"device_id": device_id, "enable_cuda_graph": cuda_graph,
               "cudnn_conv_algo_search": "EXHAUSTIVE", "do_copy_in_default_stream": True,
               "arena_extend_strategy": "kSameAsRequested"},
        CPU: {},
    }
    chain = [(n, opts.get(n, {})) for n in names]
    if any(n == TRT for n, _ in chain):
        os.makedirs(trt_dir, exist_ok=True)
    return chain


def provider_names(providers: str | list[str] = "auto") -> list[str]:
    """The providers :func:`provider_chain` picks, best first, CPU last. TensorRT
    only when its library loads (onnxruntime lists it whenever it was built with it)."""
    have = set(available_providers())
    if TRT in have and tensorrt_version() is None:
        have.discard(TRT)
        warn_once("onnxruntime offers TensorRT but libnvinfer does not load, so the CUDA "
                   "EP runs the graphs; to use TensorRT: pip install tensorrt-cu12 (or put "
                   "TensorRT's lib folder on LD_LIBRARY_PATH)")
    order = {"auto": [TRT, CUDA, CPU], "tensorrt": [TRT, CUDA, CPU], "trt": [TRT, CUDA, CPU],
             "cuda": [CUDA, CPU], "cpu": [CPU]}
    names = [n for n in (order[providers] if isinstance(providers, str) else providers)
             if n in have]
    return names if CPU in names else [*names, CPU]


@functools.cache
def warn_once(message: str) -> None:
    log.warning(message)


def default_threads() -> int:
    """Intra-op threads: torch's (physical cores unless set otherwise), so that both
    engines compute with the same number of threads."""
    try:
        import torch

        return max(1, torch.get_num_threads())
    except ImportError:  # pragma: no cover - torch is a dependency of the engine
        return os.cpu_count() or 1


def session_options(threads: int | None = None, spinning: bool | None = None) -> Any:
    """Graph optimisation level ALL; ``threads`` intra-op threads (default
    :func:`default_threads`); ``spinning``: worker threads spin-wait between the
    parallel sections of a run (onnxruntime's default; default here on unless
    ``$PAINTED_SKIN_ORT_SPIN`` is "0") and stop spinning when the run ends, so the
    torch code between runs (scheduler, glue) keeps the cores. Measured on 2
    cores: without spinning every one of a UNet graph's ~2000 small ops pays a
    thread wake-up (frames ~6% slower); spinning on after the runs too makes
    whole frames slower than not spinning at all."""
    import onnxruntime as ort

    if spinning is None:
        spinning = os.environ.get("PAINTED_SKIN_ORT_SPIN", "1") != "0"
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.intra_op_num_threads = threads or default_threads()
    so.log_severity_level = 3
    so.add_session_config_entry("session.intra_op.allow_spinning", "1" if spinning else "0")
    so.add_session_config_entry("session.force_spinning_stop", "1")
    return so


class Graph:
    """One session. On a GPU provider the inputs and outputs are persistent
    device buffers bound once (IO binding; CUDA graphs replay on fixed
    addresses); on the CPU, plain ``run``."""

    def __init__(self, path: Path, chain: list[tuple[str, dict]], threads: int | None,
                 device_id: int) -> None:
        self.path = path
        self.threads = threads
        self.chain = chain
        try:
            self.sess = self._session(chain)
        except Exception:  # e.g. a graph the CUDA graph capture cannot take: without it
            if not _uses_cuda_graph(chain):
                raise
            self.chain = _without_cuda_graph(chain)
            self.sess = self._session(self.chain)
        self.providers = self.sess.get_providers()
        self.inputs = {i.name: (tuple(i.shape), _NP[i.type]) for i in self.sess.get_inputs()}
        self.outputs = {o.name: (tuple(o.shape), _NP[o.type]) for o in self.sess.get_outputs()}
        self.gpu = self.providers[0] in (TRT, CUDA)
        self.device_id = device_id
        self._binding: Any = None
        self._last: dict[str, Any] = {}  # steady inputs: the tensor now in the buffer

    def run(self, feeds: dict[str, Any]) -> list[np.ndarray]:
        """Run on numpy (or torch) inputs; numpy outputs."""
        feeds = {k: _to_numpy(v, self.inputs[k][1]) for k, v in feeds.items()}
        if not self.gpu:
            return self.sess.run(None, feeds)
        return [t.cpu().numpy() for t in self.run_torch(feeds)]

    def run_torch(self, feeds: dict[str, Any], outputs: list[str] | None = None) -> list[Any]:
        """Run on torch (or numpy) inputs; torch outputs (on the GPU with a GPU provider):
        all of them, or those named in ``outputs``."""
        import torch

        if not self.gpu:
            outs = self.sess.run(outputs, {k: _to_numpy(v, self.inputs[k][1])
                                           for k, v in feeds.items()})
            return [torch.from_numpy(o) for o in outs]
        first = self._binding is None
        if first:
            self._bind()
        self._copy_in(feeds)
        torch.cuda.current_stream(torch.device("cuda", self.device_id)).synchronize()
        try:
            self.sess.run_with_iobinding(self._binding)
        except Exception:
            if not (first and _uses_cuda_graph(self.chain)):
                raise
            self.chain = _without_cuda_graph(self.chain)  # capture failed: plain runs
            self.sess = self._session(self.chain)
            self._bind()
            return self.run_torch(feeds, outputs)
        return [self._out[n].clone() for n in (outputs or self._out)]

    def _copy_in(self, feeds: dict[str, Any]) -> None:
        """Copy the feeds into the bound input buffers, except a steady input (see
        :data:`STEADY`) given the same tensor as last time: per-frame values (control
        embeddings, prompt keys/values; hundreds of small copies a step for SDXL)
        are copied once a frame, not once a step."""
        import torch

        for name, v in feeds.items():
            steady = name.startswith(STEADY)
            if steady and self._last.get(name) is v:
                continue
            buf = self._in[name]
            buf.copy_(torch.as_tensor(v).to(buf.device, buf.dtype).reshape(buf.shape))
            if steady:
                self._last[name] = v  # the reference also keeps its id from being reused
            else:
                self._last.pop(name, None)

    def _session(self, chain: list[tuple[str, dict]]) -> Any:
        import onnxruntime as ort

        return ort.InferenceSession(str(self.path), session_options(self.threads),
                                    providers=[n for n, _ in chain],
                                    provider_options=[o for _, o in chain])

    def _bind(self) -> None:
        import torch

        dev = torch.device("cuda", self.device_id)
        tdt = {np.float32: torch.float32, np.float16: torch.float16, np.int64: torch.int64,
               np.int32: torch.int32}
        self._binding = self.sess.io_binding()
        self._in, self._out = {}, {}
        self._last = {}
        for store, spec, bind in ((self._in, self.inputs, self._binding.bind_input),
                                  (self._out, self.outputs, self._binding.bind_output)):
            for name, (shape, dt) in spec.items():
                t = torch.zeros(shape, dtype=tdt[dt], device=dev)
                store[name] = t
                bind(name, "cuda", self.device_id, dt, list(shape), t.data_ptr())


_GRAPH_KEYS = ("enable_cuda_graph", "trt_cuda_graph_enable")
# Inputs the engine feeds from per-frame caches and never changes in place: the same
# tensor object means the same values.
STEADY = ("cond_emb_", "prompt_key_", "prompt_value_")


def _uses_cuda_graph(chain: list[tuple[str, dict]]) -> bool:
    return any(o.get(k) for _, o in chain for k in _GRAPH_KEYS)


def _without_cuda_graph(chain: list[tuple[str, dict]]) -> list[tuple[str, dict]]:
    return [(n, {k: v for k, v in o.items() if k not in _GRAPH_KEYS}) for n, o in chain]


def _to_numpy(v: Any, dtype: Any) -> np.ndarray:
    if hasattr(v, "detach"):
        v = v.detach().cpu().numpy()
    return np.ascontiguousarray(v, dtype=dtype)
