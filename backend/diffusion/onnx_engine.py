"""The ``onnx`` engine: the exported graphs (:mod:`.export`) in onnxruntime.

:class:`OnnxEngine` opens the graphs of one export folder with the best
execution provider available (``onnxruntime.get_available_providers()``):

1. TensorRT EP: fp16, engine and timing caches in ``<folder>/trt`` (static
   shapes, so one engine per graph is built once and reused), CUDA graph;
2. CUDA EP: IO binding onto persistent GPU buffers, CUDA graph (static
   shapes; fp16 comes from an fp16 export), exhaustive cuDNN search;
3. CPU EP.

Every session: graph optimisation level ALL, intra-op threads = CPU cores.

:class:`OnnxRestylePipeline` is :class:`~.controlnet_pipeline.RestylePipeline`
with the torch UNet, ControlNets, VAE and text encoder of its diffusers
pipelines replaced by thin shims over an :class:`OnnxEngine` — diffusers'
denoising loop, scheduler, generator and control-guidance schedule stay the
same, so a seed gives the same image as the torch engine (up to float
rounding). The ControlNet shim only records the control images and per-step
scales; the UNet shim runs the combined UNet + ControlNets graph. The graphs
are exported (or taken from the cache) for each frame size on first use.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from .controlnet_pipeline import RestylePipeline
from .export import IMAGE, TEXT, UNET, VAE_DEC, VAE_ENC, ExportSpec, export_components

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
    have = set(available_providers())
    order = {"auto": [TRT, CUDA, CPU], "tensorrt": [TRT, CUDA, CPU], "trt": [TRT, CUDA, CPU],
             "cuda": [CUDA, CPU], "cpu": [CPU]}
    names = order[providers] if isinstance(providers, str) else list(providers)
    trt_dir = str(Path(folder) / "trt")
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
    chain = [(n, opts.get(n, {})) for n in names if n in have]
    if not any(n == CPU for n, _ in chain):
        chain.append((CPU, {}))
    if any(n == TRT for n, _ in chain):
        os.makedirs(trt_dir, exist_ok=True)
    return chain


def session_options(threads: int | None = None) -> Any:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.intra_op_num_threads = threads or os.cpu_count() or 1
    so.log_severity_level = 3
    # no spin-waiting after a run: torch code between runs (and other processes) get the cores
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return so


class _Graph:
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

    def run(self, feeds: dict[str, Any]) -> list[np.ndarray]:
        """Run on numpy (or torch) inputs; numpy outputs."""
        feeds = {k: _to_numpy(v, self.inputs[k][1]) for k, v in feeds.items()}
        if not self.gpu:
            return self.sess.run(None, feeds)
        return [t.cpu().numpy() for t in self.run_torch(feeds)]

    def run_torch(self, feeds: dict[str, Any]) -> list[Any]:
        """Run on torch (or numpy) inputs; torch outputs (on the GPU with a GPU provider)."""
        import torch

        if not self.gpu:
            outs = self.sess.run(None, {k: _to_numpy(v, self.inputs[k][1])
                                        for k, v in feeds.items()})
            return [torch.from_numpy(o) for o in outs]
        first = self._binding is None
        if first:
            self._bind()
        for name, v in feeds.items():
            buf = self._in[name]
            buf.copy_(torch.as_tensor(v).to(buf.device, buf.dtype).reshape(buf.shape))
        torch.cuda.current_stream(buf.device).synchronize()
        try:
            self.sess.run_with_iobinding(self._binding)
        except Exception:
            if not (first and _uses_cuda_graph(self.chain)):
                raise
            self.chain = _without_cuda_graph(self.chain)  # capture failed: plain runs
            self.sess = self._session(self.chain)
            self._bind()
            return self.run_torch(feeds)
        return [b.clone() for b in self._out.values()]

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
        for store, spec, bind in ((self._in, self.inputs, self._binding.bind_input),
                                  (self._out, self.outputs, self._binding.bind_output)):
            for name, (shape, dt) in spec.items():
                t = torch.zeros(shape, dtype=tdt[dt], device=dev)
                store[name] = t
                bind(name, "cuda", self.device_id, dt, list(shape), t.data_ptr())


_GRAPH_KEYS = ("enable_cuda_graph", "trt_cuda_graph_enable")


def _uses_cuda_graph(chain: list[tuple[str, dict]]) -> bool:
    return any(o.get(k) for _, o in chain for k in _GRAPH_KEYS)


def _without_cuda_graph(chain: list[tuple[str, dict]]) -> list[tuple[str, dict]]:
    return [(n, {k: v for k, v in o.items() if k not in _GRAPH_KEYS}) for n, o in chain]


def _to_numpy(v: Any, dtype: Any) -> np.ndarray:
    if hasattr(v, "detach"):
        v = v.detach().cpu().numpy()
    return np.ascontiguousarray(v, dtype=dtype)


class OnnxEngine:
    """The graphs of one export folder in onnxruntime sessions.

    ``providers``: "auto" picks TensorRT -> CUDA -> CPU by what onnxruntime
    offers (see :func:`provider_chain`); ``threads``: intra-op threads (default:
    all cores). ``engine.providers`` maps each graph to the providers its
    session actually uses.
    """

    def __init__(self, folder: str | os.PathLike, providers: str | list[str] = "auto", *,
                 threads: int | None = None, cuda_graph: bool = True,
                 device_id: int = 0) -> None:
        self.folder = Path(folder)
        self.manifest = json.loads((self.folder / "manifest.json").read_text())
        self.chain = provider_chain(self.folder, providers, cuda_graph, device_id)
        self.graphs = {name: _Graph(self.folder / g["file"], self.chain, threads, device_id)
                       for name, g in self.manifest["graphs"].items()}
        self.providers = {n: g.providers for n, g in self.graphs.items()}
        self.provider = self.graphs[UNET].providers[0]
        self.kinds: list[str] = self.manifest["kinds"]
        self.spec = ExportSpec(**self.manifest["spec"])

    def run(self, graph: str, feeds: dict[str, Any]) -> list[np.ndarray]:
        return self.graphs[graph].run(feeds)

    def run_torch(self, graph: str, feeds: dict[str, Any]) -> list[Any]:
        return self.graphs[graph].run_torch(feeds)

    def noise_pred(self, sample: Any, timestep: Any, encoder_hidden_states: Any,
                   conds: list[Any], scales: list[float]) -> Any:
        """The combined UNet + ControlNets; any batch that is a multiple of the
        exported one (run in chunks: classifier-free guidance doubles it)."""
        import torch

        b = self.spec.batch
        n = sample.shape[0]
        if n % b:
            raise ValueError(f"batch {n} is not a multiple of the exported batch {b}")
        t = torch.as_tensor(timestep, dtype=torch.float32).reshape(-1)[:1]
        sc = torch.tensor([float(s) for s in scales], dtype=torch.float32)
        outs = []
        for i in range(0, n, b):
            feeds = {"sample": sample[i:i + b], "timestep": t,
                     "encoder_hidden_states": encoder_hidden_states[i:i + b], "scales": sc}
            for j, c in enumerate(conds):
                feeds[f"cond_{j}"] = c[i:i + b]
            outs.append(self.run_torch(UNET, feeds)[0])
        return torch.cat(outs) if len(outs) > 1 else outs[0]


# ------------------------------------------------------------------ shims for diffusers


def _shim_base():
    import torch

    class Shim(torch.nn.Module):
        """Stands for a torch module in a diffusers pipeline (config, dtype, device)."""

        def __init__(self, host: _OnnxHost, original: Any) -> None:
            super().__init__()
            self.host = host
            self.config = original.config

        @property
        def dtype(self) -> Any:
            return self.host.dtype

        @property
        def device(self) -> Any:
            return torch.device(self.host.device)

    return Shim


def _shims() -> tuple[type, type, type, type]:
    import torch
    from diffusers.models.autoencoders.autoencoder_kl import AutoencoderKLOutput
    from diffusers.models.autoencoders.vae import DiagonalGaussianDistribution
    from diffusers.models.controlnets.multicontrolnet import MultiControlNetModel
    from transformers.modeling_outputs import BaseModelOutput

    Shim = _shim_base()

    class UNetShim(Shim):
        def forward(self, sample: Any, timestep: Any, encoder_hidden_states: Any = None,
                    *args: Any, return_dict: bool = False, **kw: Any) -> tuple[Any]:
            h = self.host
            conds, scales = h.pending
            out = h.engine.noise_pred(sample, timestep, encoder_hidden_states, conds, scales)
            return (out.to(sample.device, sample.dtype),)

    class ControlNetShim(MultiControlNetModel):
        """Records the control images and scales of a step for :class:`UNetShim`."""

        def __init__(self, host: _OnnxHost, original: Any) -> None:
            super().__init__(list(original.nets))
            self.__dict__["host"] = host  # not a submodule

        def forward(self, sample: Any, timestep: Any, encoder_hidden_states: Any,
                    controlnet_cond: list[Any], conditioning_scale: list[float],
                    *args: Any, **kw: Any) -> tuple[None, None]:
            self.host.pending = (controlnet_cond, conditioning_scale)
            return None, None

    class TextShim(Shim):
        def forward(self, input_ids: Any, attention_mask: Any = None, **kw: Any) -> Any:
            out = self.host.engine.run_torch(TEXT, {"input_ids": input_ids.to(torch.int64)})[0]
            return BaseModelOutput(last_hidden_state=out.to(self.host.device, self.host.dtype))

    class VaeShim(Shim):
        def encode(self, x: Any, return_dict: bool = True) -> Any:
            moments = torch.cat([self.host.engine.run_torch(VAE_ENC, {"image": x[i:i + 1]})[0]
                                 for i in range(x.shape[0])])
            dist = DiagonalGaussianDistribution(moments.to(x.device, torch.float32))
            return AutoencoderKLOutput(latent_dist=dist) if return_dict else (dist,)

        def decode(self, z: Any, return_dict: bool = True, generator: Any = None) -> Any:
            img = torch.cat([self.host.engine.run_torch(VAE_DEC, {"latent": z[i:i + 1]})[0]
                             for i in range(z.shape[0])]).to(z.device, z.dtype)
            return (img,) if not return_dict else type("Out", (), {"sample": img})()

        def forward(self, *a: Any, **k: Any) -> Any:  # pragma: no cover - unused
            raise NotImplementedError

    return UNetShim, ControlNetShim, TextShim, VaeShim


class _OnnxHost:
    """The engines of one pipeline, one per frame size, and the shims' shared state."""

    def __init__(self, pipe: RestylePipeline, cache_dir: str | os.PathLike | None,
                 providers: str | list[str], precision: str | None, dynamo: bool | None,
                 threads: int | None) -> None:
        import torch

        self.pipe = pipe
        self.cache_dir = cache_dir
        self.providers = providers
        self.dynamo = dynamo
        self.threads = threads
        self.device = pipe.device
        self.dtype = pipe.dtype
        gpu = "TensorrtExecutionProvider" in available_providers() or \
            CUDA in available_providers()
        self.precision = precision or ("fp16" if gpu and torch.cuda.is_available() else "fp32")
        self.engines: dict[tuple[int, int], OnnxEngine] = {}
        self.engine: OnnxEngine | None = None
        self.pending: tuple[list[Any], list[float]] = ([], [])
        self.originals: dict[str, Any] = {}

    def prepare(self, height: int, width: int) -> OnnxEngine:
        """The engine for frames of this size (exported or taken from the cache)."""
        key = (height, width)
        if key not in self.engines:
            spec = ExportSpec(height, width, 1, self.precision)
            folder = export_components(self.pipe.components_for_export(), spec,
                                       self.cache_dir, dynamo=self.dynamo)
            self.engines[key] = OnnxEngine(folder, self.providers, threads=self.threads)
        self.engine = self.engines[key]
        return self.engine

    def attach(self) -> None:
        """Put the shims into both diffusers pipelines."""
        unet_s, cn_s, text_s, vae_s = _shims()
        p = self.pipe.txt2img
        self.originals = {"unet": p.unet, "controlnet": p.controlnet,
                          "text_encoder": p.text_encoder, "vae": p.vae}
        shims = {"unet": unet_s(self, p.unet), "controlnet": cn_s(self, p.controlnet),
                 "text_encoder": text_s(self, p.text_encoder), "vae": vae_s(self, p.vae)}
        for pipe in (self.pipe.txt2img, self.pipe.img2img):
            pipe.__dict__.update(shims)  # plain attributes: the pipeline config stays as is

    def detach(self) -> None:
        """Put the torch modules back (to change weights: LoRA, IP-Adapter)."""
        for pipe in (self.pipe.txt2img, self.pipe.img2img):
            pipe.__dict__.update(self.originals)
        self.engines.clear()
        self.engine = None


class OnnxRestylePipeline(RestylePipeline):
    """:class:`RestylePipeline` on the ``onnx`` engine (same options, same seeds).

    ``providers``: "auto" | "tensorrt" | "cuda" | "cpu" | a list; ``precision``:
    "fp32" or "fp16" (default fp16 with a GPU provider and torch CUDA, else
    fp32); ``cache_dir``: the export cache (default
    :func:`.export.default_cache_dir`). IP-Adapter is not in the graphs yet:
    a pipeline with one loaded raises ``NotImplementedError`` (use ``torch``).
    """

    engine_name = "onnx"

    def __init__(self, components: Any, device: str = "cpu", dtype: Any = None, *,
                 cache_dir: str | os.PathLike | None = None,
                 providers: str | list[str] = "auto", precision: str | None = None,
                 dynamo: bool | None = None, threads: int | None = None) -> None:
        super().__init__(components, device, dtype)
        if self.ip_adapter_loaded:
            raise NotImplementedError("IP-Adapter is not in the ONNX graphs yet: "
                                      "use the torch engine")
        self.onnx = _OnnxHost(self, cache_dir, providers, precision, dynamo, threads)
        self.onnx.attach()

    def components_for_export(self) -> Any:
        """The components with the modules the torch pipeline would run (LoRA loaded)."""
        import dataclasses

        o = self.onnx.originals
        return dataclasses.replace(self.components, unet=o["unet"], vae=o["vae"],
                                   text_encoder=o["text_encoder"],
                                   controlnets=dict(zip(self.kinds, o["controlnet"].nets,
                                                        strict=True)))

    def load_lora(self, *args: Any, **kw: Any) -> str:
        host = getattr(self, "onnx", None)
        if host is None:  # during RestylePipeline.__init__
            return super().load_lora(*args, **kw)
        host.detach()
        try:
            return super().load_lora(*args, **kw)
        finally:
            host.attach()  # new weights: a new cache key, re-exported on the next frame

    def load_ip_adapter(self, *args: Any, **kw: Any) -> None:
        if getattr(self, "onnx", None) is not None:
            raise NotImplementedError("IP-Adapter is not in the ONNX graphs yet: "
                                      "use the torch engine")
        super().load_ip_adapter(*args, **kw)

    def run(self, passes: dict[str, np.ndarray], *, width: int, height: int,
            **kw: Any) -> Any:
        self.onnx.prepare(height, width)
        return super().run(passes, width=width, height=height, **kw)

    @property
    def providers(self) -> dict[str, list[str]]:
        """Graph -> providers of the current engine (empty before the first frame)."""
        return self.onnx.engine.providers if self.onnx.engine is not None else {}


__all__ = ["OnnxEngine", "OnnxRestylePipeline", "provider_chain", "available_providers",
           "session_options", "IMAGE"]
