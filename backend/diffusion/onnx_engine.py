"""The ``onnx`` engine: the exported graphs (:mod:`.export`) in onnxruntime.

:class:`OnnxEngine` opens the graphs of one export folder with the best
execution provider available (``onnxruntime.get_available_providers()``):

1. TensorRT EP: fp16, engine and timing caches in ``<folder>/trt`` (static
   shapes, so one engine per graph is built once and reused), CUDA graph;
2. CUDA EP: IO binding onto persistent GPU buffers, CUDA graph (static
   shapes; fp16 comes from an fp16 export), exhaustive cuDNN search;
3. CPU EP.

Every session: graph optimisation level ALL, intra-op threads = torch's
(physical cores), threads spinning during a run only (:func:`session_options`).

:class:`OnnxRestylePipeline` is :class:`~.controlnet_pipeline.RestylePipeline`
with the torch UNet, ControlNets, VAE and text encoder of its diffusers
pipelines replaced by thin shims over an :class:`OnnxEngine` — diffusers'
denoising loop, scheduler, generator and control-guidance schedule stay the
same, so a seed gives the same image as the torch engine (up to float
rounding). The ControlNet shim only records the control images and per-step
scales; the UNet shim runs the combined UNet + ControlNets graph, the control
images' embeddings computed once a frame (:meth:`OnnxEngine.control_embeddings`).
IP-Adapter: the reference images through the image encoder graph, their
embeddings and the scale into the UNet graph. The graphs are exported (or
taken from the cache) per frame size and number of reference images, when a
session opens (:meth:`OnnxRestylePipeline.prepare`) or on first use. SDXL:
:mod:`.onnx_xl`.
"""

from __future__ import annotations

import functools
import json
import logging
import os
from pathlib import Path
from typing import Any

import numpy as np

from .controlnet_pipeline import RestylePipeline
from .export import (
    CONTROL,
    IMAGE,
    TEXT,
    TEXT2,
    UNET,
    VAE_DEC,
    VAE_ENC,
    ExportSpec,
    export_components,
)
from .tensorrt_runtime import engine_cache_dir, tensorrt_version

log = logging.getLogger("painted_skin.backend.onnx")
CPU, CUDA, TRT = "CPUExecutionProvider", "CUDAExecutionProvider", "TensorrtExecutionProvider"
MAX_ENGINES = 3  # loaded engines (frame sizes x reference counts) per pipeline
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
        _warn_once("onnxruntime offers TensorRT but libnvinfer does not load, so the CUDA "
                   "EP runs the graphs; to use TensorRT: pip install tensorrt-cu12 (or put "
                   "TensorRT's lib folder on LD_LIBRARY_PATH)")
    order = {"auto": [TRT, CUDA, CPU], "tensorrt": [TRT, CUDA, CPU], "trt": [TRT, CUDA, CPU],
             "cuda": [CUDA, CPU], "cpu": [CPU]}
    names = [n for n in (order[providers] if isinstance(providers, str) else providers)
             if n in have]
    return names if CPU in names else [*names, CPU]


@functools.cache
def _warn_once(message: str) -> None:
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


def _version(t: Any) -> int:
    """A tensor's in-place modification counter (-1 for inference-mode tensors,
    which have none: diffusers builds the control images once a call anyway)."""
    return -1 if t.is_inference() else t._version


def _to_numpy(v: Any, dtype: Any) -> np.ndarray:
    if hasattr(v, "detach"):
        v = v.detach().cpu().numpy()
    return np.ascontiguousarray(v, dtype=dtype)


class OnnxEngine:
    """The graphs of one export folder in onnxruntime sessions.

    ``providers``: "auto" picks TensorRT -> CUDA -> CPU by what onnxruntime
    offers (see :func:`provider_chain`); ``threads``: intra-op threads (default:
    torch's). ``engine.providers`` maps each graph to the providers its
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
        self._emb_cache: dict[tuple, tuple[list[Any], list[Any]]] = {}

    def run(self, graph: str, feeds: dict[str, Any]) -> list[np.ndarray]:
        return self.graphs[graph].run(feeds)

    def run_torch(self, graph: str, feeds: dict[str, Any]) -> list[Any]:
        return self.graphs[graph].run_torch(feeds)

    def control_embeddings(self, conds: list[Any], start: int) -> list[Any]:
        """The ControlNets' conditioning embeddings (:data:`CONTROL`) of batch rows
        ``start``.. of ``conds``. Computed once a frame: diffusers passes the same
        control tensors at every step, so they are cached by (address, shape,
        version counter) while references to them keep the addresses unique; the
        pipeline calls :meth:`new_frame` before each frame."""
        import torch

        b = self.spec.batch
        key = (start, *((c.data_ptr(), tuple(c.shape), _version(c)) for c in conds))
        hit = self._emb_cache.get(key)
        if hit is not None:
            return hit[1]
        if len(self._emb_cache) >= 8:  # a few frames' worth at most
            self._emb_cache.clear()
        feeds = {f"cond_{j}": torch.as_tensor(c)[start:start + b] for j, c in enumerate(conds)}
        embs = self.run_torch(CONTROL, feeds)
        self._emb_cache[key] = (list(conds), embs)
        return embs

    def new_frame(self) -> None:
        """Forget the cached control embeddings (the next frame brings new images)."""
        self._emb_cache.clear()

    def noise_pred(self, sample: Any, timestep: Any, encoder_hidden_states: Any,
                   conds: list[Any], scales: list[float], image_embeds: Any = None,
                   ip_scale: float = 0.0, text_embeds: Any = None, time_ids: Any = None
                   ) -> Any:
        """The combined UNet + ControlNets; any batch that is a multiple of the
        exported one (run in chunks: classifier-free guidance doubles it).
        ``image_embeds`` (B, images, D) and ``ip_scale``: IP-Adapter, when the
        graph takes it (zeros and 0 when not given); ``text_embeds`` (B, D) and
        ``time_ids`` (B, 6): SDXL's added conditions."""
        import torch

        b = self.spec.batch
        n = sample.shape[0]
        if n % b:
            raise ValueError(f"batch {n} is not a multiple of the exported batch {b}")
        t = torch.as_tensor(timestep, dtype=torch.float32).reshape(-1)[:1]
        sc = torch.tensor([float(s) for s in scales], dtype=torch.float32)
        ip = "image_embeds" in self.inputs(UNET)
        if ip:
            shape, _ = self.inputs(UNET)["image_embeds"]
            if image_embeds is None:
                image_embeds = torch.zeros((n, *shape[1:]))
                ip_scale = 0.0
            elif tuple(image_embeds.shape[1:]) != tuple(shape[1:]):
                raise ValueError(f"image_embeds {tuple(image_embeds.shape)}: this engine takes "
                                 f"{shape[1]} reference image(s) of {shape[2]} values")
        outs = []
        for i in range(0, n, b):
            feeds = {"sample": sample[i:i + b], "timestep": t,
                     "encoder_hidden_states": encoder_hidden_states[i:i + b], "scales": sc}
            for j, e in enumerate(self.control_embeddings(conds, i)):
                feeds[f"cond_emb_{j}"] = e
            if text_embeds is not None:
                feeds["text_embeds"] = text_embeds[i:i + b]
                feeds["time_ids"] = time_ids[i:i + b]
            if ip:
                feeds["image_embeds"] = image_embeds[i:i + b]
                feeds["ip_scale"] = torch.tensor([float(ip_scale)])
            outs.append(self.run_torch(UNET, feeds)[0])
        return torch.cat(outs) if len(outs) > 1 else outs[0]

    def inputs(self, graph: str) -> dict[str, tuple[tuple, Any]]:
        """Input name -> (shape, numpy dtype) of one graph."""
        return self.graphs[graph].inputs


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
            added = kw.get("added_cond_kwargs") or {}
            image_embeds = added.get("image_embeds")
            if isinstance(image_embeds, list | tuple):
                image_embeds = image_embeds[0]  # one IP-Adapter
            out = h.engine.noise_pred(sample, timestep, encoder_hidden_states, conds, scales,
                                      image_embeds, h.ip_scale, added.get("text_embeds"),
                                      added.get("time_ids"))
            return (out.to(sample.device, sample.dtype),)

    class NetStub(torch.nn.Module):
        """A ControlNet's config without its weights (what the pipeline reads)."""

        def __init__(self, config: Any) -> None:
            super().__init__()
            self.config = config

    class ControlNetShim(MultiControlNetModel):
        """Records the control images and scales of a step for :class:`UNetShim`.
        Its ``nets`` are weightless stubs: diffusers walks every module of the
        pipeline's components on each call (device, dtype, offload hooks), which
        over the real ControlNets cost ~30 ms a frame."""

        def __init__(self, host: _OnnxHost, original: Any) -> None:
            super().__init__([NetStub(n.config) for n in original.nets])
            self.__dict__["host"] = host  # not a submodule

        @property
        def dtype(self) -> Any:
            return self.host.dtype

        @property
        def device(self) -> Any:
            return torch.device(self.host.device)

        def forward(self, sample: Any, timestep: Any, encoder_hidden_states: Any,
                    controlnet_cond: list[Any], conditioning_scale: list[float],
                    *args: Any, **kw: Any) -> tuple[None, None]:
            self.host.pending = (controlnet_cond, conditioning_scale)
            return None, None

    class TextOut(tuple):
        """What SDXL's ``encode_prompt`` reads: ``[0]`` and ``.hidden_states[-2]``."""

        hidden_states: list[Any]

    class TextShim(Shim):
        """A text encoder graph: SD's ``last_hidden_state``; SDXL's (first output,
        penultimate hidden states)."""

        def __init__(self, host: _OnnxHost, original: Any, graph: str = TEXT) -> None:
            super().__init__(host, original)
            self.graph = graph

        def forward(self, input_ids: Any, attention_mask: Any = None, **kw: Any) -> Any:
            h = self.host
            outs = [o.to(h.device, h.dtype) for o in
                    h.engine.run_torch(self.graph, {"input_ids": input_ids.to(torch.int64)})]
            if len(outs) == 1:
                return BaseModelOutput(last_hidden_state=outs[0])
            first, penultimate = outs
            out = TextOut((first,))
            out.hidden_states = [penultimate, first]
            return out

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


def _keep(shim: Any, original: Any, *names: str) -> Any:
    """Give a shim some of the original's submodules as plain attributes (what
    the pipelines read: SDXL's ``unet.add_embedding``, ``vae.post_quant_conv``)
    without registering them (diffusers walks registered modules on each call)."""
    for n in names:
        if hasattr(original, n):
            shim.__dict__[n] = getattr(original, n)
    return shim


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
        gpu = provider_names(providers)[0] != CPU
        self.precision = precision or ("fp16" if gpu and torch.cuda.is_available() else "fp32")
        # TensorRT has no MultiHeadAttention kernel: its exports keep plain attention
        self.attention = "onnx" if provider_names(providers)[0] == TRT else "mha"
        self.engines: dict[tuple[int, int, int], OnnxEngine] = {}
        self.engine: OnnxEngine | None = None
        self.pending: tuple[list[Any], list[float]] = ([], [])
        self.ip_scale = 0.0
        self.originals: dict[str, Any] = {}

    def prepare(self, height: int, width: int, ip_images: int = 0) -> OnnxEngine:
        """The engine for frames of this size and number of IP-Adapter reference
        images (exported or taken from the cache); a new frame for it."""
        key = (height, width, ip_images)
        if key not in self.engines:
            spec = ExportSpec(height, width, 1, self.precision, attention=self.attention,
                              ip_images=ip_images)
            folder = export_components(self.pipe.components_for_export(), spec,
                                       self.cache_dir, dynamo=self.dynamo)
            # Each engine holds every graph's weights (RAM or GPU memory): keep the most
            # recently used few; an evicted size reloads from the export cache.
            while len(self.engines) >= MAX_ENGINES:
                del self.engines[next(iter(self.engines))]
            self.engines[key] = OnnxEngine(folder, self.providers, threads=self.threads)
        self.engines[key] = self.engines.pop(key)  # most recently used last
        self.engine = self.engines[key]
        self.engine.new_frame()
        return self.engine

    def attach(self) -> None:
        """Put the shims into both diffusers pipelines."""
        unet_s, cn_s, text_s, vae_s = _shims()
        p = self.pipe.txt2img
        self.originals = {"unet": p.unet, "controlnet": p.controlnet,
                          "text_encoder": p.text_encoder, "vae": p.vae}
        shims = {"unet": _keep(unet_s(self, p.unet), p.unet, "add_embedding"),
                 "controlnet": cn_s(self, p.controlnet),
                 "text_encoder": text_s(self, p.text_encoder),
                 "vae": _keep(vae_s(self, p.vae), p.vae, "post_quant_conv")}
        if getattr(p, "text_encoder_2", None) is not None:  # SDXL
            self.originals["text_encoder_2"] = p.text_encoder_2
            shims["text_encoder_2"] = text_s(self, p.text_encoder_2, TEXT2)
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
    :func:`.export.default_cache_dir`). With an IP-Adapter the reference images
    go through the image encoder graph and the UNet graph takes their
    embeddings and the adapter scale; one engine per number of references.
    """

    engine_name = "onnx"

    def __init__(self, components: Any, device: str = "cpu", dtype: Any = None, *,
                 cache_dir: str | os.PathLike | None = None,
                 providers: str | list[str] = "auto", precision: str | None = None,
                 dynamo: bool | None = None, threads: int | None = None) -> None:
        super().__init__(components, device, dtype)
        self.onnx = _OnnxHost(self, cache_dir, providers, precision, dynamo, threads)
        self.onnx.attach()

    def components_for_export(self) -> Any:
        """The components with the modules the torch pipeline would run (LoRA loaded)."""
        import dataclasses

        o = self.onnx.originals
        extra = {"text_encoder_2": o["text_encoder_2"]} if "text_encoder_2" in o else {}
        return dataclasses.replace(self.components, unet=o["unet"], vae=o["vae"],
                                   text_encoder=o["text_encoder"],
                                   controlnets=dict(zip(self.kinds, o["controlnet"].nets,
                                                        strict=True)), **extra)

    def _reweigh(self, load: Any, *args: Any, **kw: Any) -> Any:
        """Change weights on the torch modules; the next frame exports anew (a new
        cache key)."""
        host = getattr(self, "onnx", None)
        if host is None:  # during RestylePipeline.__init__
            return load(*args, **kw)
        host.detach()
        try:
            return load(*args, **kw)
        finally:
            host.attach()

    def load_lora(self, *args: Any, **kw: Any) -> str:
        return self._reweigh(super().load_lora, *args, **kw)

    def load_ip_adapter(self, *args: Any, **kw: Any) -> None:
        self._reweigh(super().load_ip_adapter, *args, **kw)

    def _ip_images(self, refs: Any) -> int:
        """Reference images the UNet graph takes: 0 without an IP-Adapter; 1 (zero
        embeddings) without references or image encoder."""
        if not self.ip_adapter_loaded:
            return 0
        n = len(refs or ())
        return n if n and self.components.image_encoder is not None else 1

    def prepare(self, *, width: int, height: int, options: dict[str, Any] | None = None,
                refs: Any = ()) -> None:
        """Export (or take from the cache) and open the graphs for this frame size; the
        backend calls it when a session opens, so a failing export fails the OPEN."""
        self.onnx.prepare(height, width, self._ip_images(refs))

    def prepared(self, *, width: int, height: int, options: dict[str, Any] | None = None,
                 refs: Any = ()) -> bool:
        return (height, width, self._ip_images(refs)) in self.onnx.engines

    def image_embeds(self, refs: list[np.ndarray], cfg: bool) -> list[Any]:
        """:meth:`RestylePipeline.image_embeds` through the image encoder graph; the
        adapter scale goes to the UNet graph as an input."""
        import torch

        proj = self.onnx.originals["unet"].encoder_hid_proj.image_projection_layers[0]
        if refs and self.components.image_encoder is not None:
            from PIL import Image

            pil = [Image.fromarray(np.ascontiguousarray(r[..., :3]).astype(np.uint8))
                   for r in refs]
            px = self.components.feature_extractor(images=pil, return_tensors="pt").pixel_values
            eng = self.onnx.engine
            emb = torch.cat([eng.run_torch(IMAGE, {"pixel_values": px[i:i + 1]})[0]
                             for i in range(px.shape[0])])
            pos = emb[None]
            self.onnx.ip_scale = self.ip_adapter_scale
        else:
            pos = torch.zeros(1, 1, proj.image_embeds.in_features)
            self.onnx.ip_scale = 0.0
        pos = pos.to(self.device, self.dtype)
        return [torch.cat([torch.zeros_like(pos), pos]) if cfg else pos]

    def run(self, passes: dict[str, np.ndarray], *, width: int, height: int,
            **kw: Any) -> Any:
        self.onnx.prepare(height, width, self._ip_images(kw.get("refs")))
        return super().run(passes, width=width, height=height, **kw)

    @property
    def providers(self) -> dict[str, list[str]]:
        """Graph -> providers of the current engine (empty before the first frame)."""
        return self.onnx.engine.providers if self.onnx.engine is not None else {}


__all__ = ["OnnxEngine", "OnnxRestylePipeline", "provider_chain", "available_providers",
           "session_options", "IMAGE"]
