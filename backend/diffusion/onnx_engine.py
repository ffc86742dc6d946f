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
:mod:`.onnx_xl`. Cross-frame attention (option ``cross_frame``): a session asking
for it gets the cross-frame variant of the UNet graph (:mod:`.onnx_cross_frame`);
the engine keeps the anchor frame's keys and values per layer and step in the
session state (the anchor rules of :mod:`.cross_frame`) and feeds them to the
later frames.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from .controlnet_pipeline import RestylePipeline
from .export import (
    CONTROL,
    IMAGE,
    PROMPT_KV,
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
        self.union = bool(self.manifest.get("union"))
        # cross-frame variant: the UNet's self-attention layers with anchor inputs
        self.cross_layers: list[str] = self.manifest.get("cross_frame_layers") or []
        self._emb_cache: dict[tuple, tuple[list[Any], list[Any]]] = {}
        self._zeros: dict[str, Any] = {}
        # the prompt's cross-attention keys/values, computed once a frame (.onnx_prompt_kv)
        self.prompt_names: list[str] = (self.manifest["graphs"].get(PROMPT_KV) or {}).get(
            "outputs", [])
        self._kv_cache: dict[tuple, tuple[Any, list[Any]]] = {}
        self._takes_ehs = "encoder_hidden_states" in self.inputs(UNET)

    def run(self, graph: str, feeds: dict[str, Any]) -> list[np.ndarray]:
        return self.graphs[graph].run(feeds)

    def run_torch(self, graph: str, feeds: dict[str, Any],
                  outputs: list[str] | None = None) -> list[Any]:
        return self.graphs[graph].run_torch(feeds, outputs)

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
        for name in self.inputs(CONTROL):  # union slots without a condition
            if name not in feeds:
                feeds[name] = self.zeros(CONTROL, name)
        embs = self.run_torch(CONTROL, feeds)
        self._emb_cache[key] = (list(conds), embs)
        return embs

    def prompt_kv(self, encoder_hidden_states: Any, start: int) -> dict[str, Any]:
        """The prompt's cross-attention keys and values (:data:`PROMPT_KV`) of batch rows
        ``start``..: once a frame, cached like :meth:`control_embeddings` (diffusers
        passes the same text embedding at every step)."""
        import torch

        ehs = encoder_hidden_states
        key = (start, ehs.data_ptr(), tuple(ehs.shape), _version(ehs))
        hit = self._kv_cache.get(key)
        if hit is None:
            if len(self._kv_cache) >= 8:
                self._kv_cache.clear()
            b = self.spec.batch
            outs = self.run_torch(PROMPT_KV, {"encoder_hidden_states":
                                              torch.as_tensor(ehs)[start:start + b]})
            hit = self._kv_cache[key] = (ehs, outs)
        return dict(zip(self.prompt_names, hit[1], strict=True))

    def new_frame(self) -> None:
        """Forget the cached control embeddings and prompt keys/values (the next frame
        brings new images and maybe a new prompt)."""
        self._emb_cache.clear()
        self._kv_cache.clear()

    def noise_pred(self, sample: Any, timestep: Any, encoder_hidden_states: Any,
                   conds: list[Any], scales: list[float], image_embeds: Any = None,
                   ip_scale: float = 0.0, text_embeds: Any = None, time_ids: Any = None,
                   union: tuple[Any, list[int]] | None = None, cross: Any = None) -> Any:
        """The combined UNet + ControlNets; any batch that is a multiple of the
        exported one (run in chunks: classifier-free guidance doubles it).
        ``image_embeds`` (B, images, D) and ``ip_scale``: IP-Adapter, when the
        graph takes it (zeros and 0 when not given); ``text_embeds`` (B, D) and
        ``time_ids`` (B, 6): SDXL's added conditions; ``union``: (control_type (B,
        types), control mode per condition) of a ControlNet-Union graph (its
        transformer attends across the batch: chunks give the same result because
        the pipelines' guidance rows share the sample and the conditions);
        ``cross``: the cross-frame call (:class:`.cross_frame._Run`) of a
        cross-frame graph: its anchor is fed, and the frame's keys and values
        recorded when it records."""
        import torch

        b = self.spec.batch
        n = sample.shape[0]
        if n % b:
            raise ValueError(f"batch {n} is not a multiple of the exported batch {b}")
        t = torch.as_tensor(timestep, dtype=torch.float32).reshape(-1)[:1]
        fixed = self._control_feeds(scales, union)
        if "image_embeds" in self.inputs(UNET):
            image_embeds, ip_scale = self._ip_inputs(image_embeds, ip_scale, n)
            fixed["ip_scale"] = torch.tensor([float(ip_scale)])
        anchor = self._anchor(cross, float(t[0]), n)
        record = cross is not None and cross.record is not None and bool(self.cross_layers)
        want = ["noise_pred"] if self.cross_layers and not record else None
        outs: list[list[Any]] = []
        for i in range(0, n, b):
            feeds = {"sample": sample[i:i + b], "timestep": t, **fixed}
            if self._takes_ehs:
                feeds["encoder_hidden_states"] = encoder_hidden_states[i:i + b]
            if self.prompt_names:
                feeds.update(self.prompt_kv(encoder_hidden_states, i))
            for j, e in enumerate(self.control_embeddings(conds, i)):
                feeds[f"cond_emb_{j}"] = e
            if union is not None:
                feeds["control_type"] = union[0][i:i + b]
            if text_embeds is not None:
                feeds["text_embeds"] = text_embeds[i:i + b]
                feeds["time_ids"] = time_ids[i:i + b]
            if image_embeds is not None and "image_embeds" in self.inputs(UNET):
                feeds["image_embeds"] = image_embeds[i:i + b]
            if self.cross_layers:
                feeds.update(self._anchor_feeds(anchor, i, b))
            outs.append(self.run_torch(UNET, feeds, want) if want else
                        self.run_torch(UNET, feeds))
        if record:
            self._record(cross, float(t[0]), outs)
        return torch.cat([o[0] for o in outs]) if len(outs) > 1 else outs[0][0]

    def _control_feeds(self, scales: list[float], union: tuple[Any, list[int]] | None
                       ) -> dict[str, Any]:
        """``scales`` (one per net); a union graph's per-slot scales, output scale and
        task indices: several conditions scale their inputs, a single one the
        outputs (as ``ControlNetUnionModel`` does)."""
        import torch

        if not self.union:
            return {"scales": torch.tensor([float(s) for s in scales], dtype=torch.float32)}
        if union is None:
            raise ValueError("this engine's graph is a ControlNet-Union: give its control "
                             "types and modes")
        k, modes = len(self.kinds), [int(m) for m in union[1]]
        if not 1 <= len(modes) <= k or len(scales) != len(modes):
            raise ValueError(f"ControlNet-Union graph: 1 to {k} conditions with one scale "
                             f"each, not {len(modes)} modes and {len(scales)} scales")
        one = len(modes) == 1
        ins = [1.0] if one else [float(s) for s in scales]
        return {"scales": torch.tensor(ins + [0.0] * (k - len(ins)), dtype=torch.float32),
                "out_scale": torch.tensor([float(scales[0]) if one else 1.0]),
                "control_idx": torch.tensor(modes + [0] * (k - len(modes)), dtype=torch.int64)}

    def _ip_inputs(self, image_embeds: Any, ip_scale: float, n: int) -> tuple[Any, float]:
        import torch

        shape, _ = self.inputs(UNET)["image_embeds"]
        if image_embeds is None:
            return torch.zeros((n, *shape[1:])), 0.0
        if tuple(image_embeds.shape[1:]) != tuple(shape[1:]):
            raise ValueError(f"image_embeds {tuple(image_embeds.shape)}: this engine takes "
                             f"{shape[1]} reference image(s) of {shape[2]} values")
        return image_embeds, ip_scale

    # ------------------------------------------------------------ cross-frame

    def _anchor(self, cross: Any, t: float, n: int) -> dict[str, Any] | None:
        """The anchor's keys and values (graph output name -> (B, tokens, channels)) at
        the recorded timestep nearest ``t``; None without one, or when it does not
        fit this graph (another batch, as on torch, or another frame size)."""
        from . import onnx_cross_frame as X
        from .cross_frame import _nearest

        if not self.cross_layers or cross is None or not cross.attend:
            return None
        shapes = self.inputs(UNET)
        out = {}
        for j in range(len(self.cross_layers)):
            for name, inp in ((X.key_out(j), X.key_in(j)), (X.value_out(j), X.value_in(j))):
                a = _nearest(cross.attend, name, t)
                if a is None or a.shape[0] != n or tuple(a.shape[1:]) != shapes[inp][0][1:]:
                    return None
                out[inp] = a
        return out

    def _anchor_feeds(self, anchor: dict[str, Any] | None, i: int, b: int) -> dict[str, Any]:
        """The cross-frame inputs of batch rows ``i``..``i+b``: the anchor's, or zeros
        and ``anchor_use`` 0 (the frame attends to itself: plain attention)."""
        import torch

        from . import onnx_cross_frame as X

        if anchor is None:
            if self.graphs[UNET].gpu:  # bound buffers keep their last values, never read
                return {X.USE: torch.zeros(1)}
            feeds = {name: self.zeros(UNET, name) for name in self.inputs(UNET)
                     if name.startswith(("anchor_key_", "anchor_value_"))}
            return {**feeds, X.USE: torch.zeros(1)}
        return {**{k: v[i:i + b] for k, v in anchor.items()}, X.USE: torch.ones(1)}

    def _record(self, cross: Any, t: float, outs: list[list[Any]]) -> None:
        """Keep this step's keys and values (all batch rows) in the call's record."""
        import torch

        from . import onnx_cross_frame as X

        names = [n for j in range(len(self.cross_layers)) for n in (X.key_out(j), X.value_out(j))]
        for pos, name in enumerate(names, start=1):
            parts = [o[pos] for o in outs]
            cross.record.setdefault(name, {})[t] = (torch.cat(parts) if len(parts) > 1
                                                    else parts[0])

    def zeros(self, graph: str, name: str) -> Any:
        """A cached zero tensor of one input's shape and dtype."""
        import torch

        key = f"{graph}/{name}"
        if key not in self._zeros:
            shape, dt = self.inputs(graph)[name]
            self._zeros[key] = torch.from_numpy(np.zeros(shape, dt))
        return self._zeros[key]

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


def _shims() -> tuple[type, type, type, type, type]:
    import torch
    from diffusers.models.autoencoders.autoencoder_kl import AutoencoderKLOutput
    from diffusers.models.autoencoders.vae import DiagonalGaussianDistribution
    from diffusers.models.controlnets.controlnet_union import ControlNetUnionModel
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
                                      added.get("time_ids"), h.union_pending, h.cross)
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

    class UnionShim(ControlNetUnionModel):
        """Records a ControlNet-Union's conditions, scales, control types and modes of
        a step for :class:`UNetShim` (an instance of the union class, which the union
        pipelines test for; the config without the weights)."""

        def __init__(self, host: _OnnxHost, original: Any) -> None:
            torch.nn.Module.__init__(self)
            self.__dict__["_internal_dict"] = original._internal_dict
            self.__dict__["host"] = host

        @property
        def dtype(self) -> Any:
            return self.host.dtype

        @property
        def device(self) -> Any:
            return torch.device(self.host.device)

        def forward(self, sample: Any, timestep: Any, encoder_hidden_states: Any,
                    controlnet_cond: list[Any], control_type: Any, control_type_idx: list[int],
                    conditioning_scale: float | list[float] = 1.0, *args: Any,
                    **kw: Any) -> tuple[None, None]:
            if kw.get("guess_mode"):
                raise NotImplementedError("ControlNet-Union guess mode is not in the onnx "
                                          "graphs: use the torch engine")
            scales = (list(conditioning_scale) if isinstance(conditioning_scale, list | tuple)
                      else [float(conditioning_scale)] * len(controlnet_cond))
            self.host.pending = (controlnet_cond, scales)
            self.host.union_pending = (control_type, list(control_type_idx))
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

    return UNetShim, ControlNetShim, UnionShim, TextShim, VaeShim


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
        self.engines: dict[tuple[int, int, int, bool], OnnxEngine] = {}
        self.engine: OnnxEngine | None = None
        self.pending: tuple[list[Any], list[float]] = ([], [])
        self.union_pending: tuple[Any, list[int]] | None = None  # ControlNet-Union's
        self.cross: Any = None  # the cross-frame call in progress (.cross_frame._Run)
        self.ip_scale = 0.0
        self.originals: dict[str, Any] = {}

    def prepare(self, height: int, width: int, ip_images: int = 0,
                cross_frame: bool = False) -> OnnxEngine:
        """The engine for frames of this size, number of IP-Adapter reference images
        and UNet graph (plain, or the cross-frame variant), exported or taken from
        the cache; a new frame for it."""
        key = (height, width, ip_images, cross_frame)
        if key not in self.engines:
            spec = ExportSpec(height, width, 1, self.precision, attention=self.attention,
                              ip_images=ip_images, cross_frame=cross_frame)
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
        unet_s, cn_s, union_s, text_s, vae_s = _shims()
        p = self.pipe.txt2img
        self.originals = {"unet": p.unet, "controlnet": p.controlnet,
                          "text_encoder": p.text_encoder, "vae": p.vae}
        union = getattr(self.pipe, "union", False)
        shims = {"unet": _keep(unet_s(self, p.unet), p.unet, "add_embedding"),
                 "controlnet": (union_s if union else cn_s)(self, p.controlnet),
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
        if getattr(self, "union", False):
            extra.update(union=o["controlnet"], controlnets={})
        else:
            extra["controlnets"] = dict(zip(self.kinds, o["controlnet"].nets, strict=True))
        return dataclasses.replace(self.components, unet=o["unet"], vae=o["vae"],
                                   text_encoder=o["text_encoder"], **extra)

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
        """Export (or take from the cache) and open the graphs for this frame size (and
        the cross-frame variant when ``options`` ask for it); the backend calls it when
        a session opens, so a failing export fails the OPEN."""
        self.onnx.prepare(height, width, self._ip_images(refs), _cross_on(options))

    def prepared(self, *, width: int, height: int, options: dict[str, Any] | None = None,
                 refs: Any = ()) -> bool:
        return (height, width, self._ip_images(refs), _cross_on(options)) in self.onnx.engines

    @contextlib.contextmanager
    def cross_frame(self, state: dict[str, Any] | None, frame: int | None,
                    mode: str | bool | None) -> Iterator[Any]:
        """Cross-frame attention for one call (:mod:`.cross_frame`'s anchor rules): the
        cross-frame graph is fed the anchor's keys and values and gives the frame's
        (:meth:`OnnxEngine.noise_pred`); yields the session's
        :class:`~.cross_frame.CrossFrameState` (None when off)."""
        from .cross_frame import anchored_call
        from .options import parse_cross_frame

        mode = parse_cross_frame(mode)
        if mode is None or state is None:
            yield None
            return
        with anchored_call(self.onnx, "cross", state, frame, mode) as cf:
            yield cf

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
        cross = _cross_on(kw.get("options")) and kw.get("state") is not None
        self.onnx.prepare(height, width, self._ip_images(kw.get("refs")), cross)
        self.onnx.union_pending = None
        return super().run(passes, width=width, height=height, **kw)

    @property
    def providers(self) -> dict[str, list[str]]:
        """Graph -> providers of the current engine (empty before the first frame)."""
        return self.onnx.engine.providers if self.onnx.engine is not None else {}


def _cross_on(options: dict[str, Any] | None) -> bool:
    """Does a session with ``options`` use cross-frame attention (the graph variant)?"""
    from .options import parse_cross_frame

    return parse_cross_frame((options or {}).get("cross_frame")) is not None


__all__ = ["OnnxEngine", "OnnxRestylePipeline", "provider_chain", "available_providers",
           "session_options", "IMAGE"]
