"""The ``onnx`` engine: the exported graphs (:mod:`.export`) in onnxruntime.

The graphs run in an :class:`~.engine.OnnxEngine` on the best execution provider
available (TensorRT, CUDA, CPU; :mod:`.runtime`).

:class:`OnnxRestylePipeline` is :class:`~..controlnet_pipeline.RestylePipeline`
with the torch UNet, ControlNets, VAE and text encoder of its diffusers
pipelines replaced by thin shims over an :class:`OnnxEngine` — diffusers'
denoising loop, scheduler, generator and control-guidance schedule stay the
same, so a seed gives the same image as the torch engine (up to float
rounding). The ControlNet shim only records the control images and per-step
scales; the UNet shim runs the combined UNet + ControlNets graph, the control
images' embeddings computed once a frame (:meth:`~.engine.OnnxEngine.control_embeddings`).
IP-Adapter: the reference images through the image encoder graph, their
embeddings averaged (option ``ref_weights``) into one image's tokens and the
scale into the UNet graph, so one graph takes any number of references. The
graphs are exported (or taken from the cache) per frame size, when a session
opens (:meth:`OnnxRestylePipeline.prepare`) or on first use. SDXL:
:mod:`.xl`. Cross-frame attention (option ``cross_frame``): a session asking
for it gets the cross-frame variant of the UNet graph (:mod:`.cross_frame`);
the engine keeps the anchor frame's keys and values per layer and step in the
session state (the anchor rules of :mod:`..cross_frame`) and feeds them to the
later frames.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

import numpy as np

from ..controlnet_pipeline import RestylePipeline, pil_refs, weighted_ref_embedding
from ..options import normalized_ref_weights, parse_cross_frame
from .engine import OnnxEngine
from .export import IMAGE, TEXT2, ExportSpec, export_components
from .runtime import CPU, TRT, provider_names

MAX_ENGINES = 3  # loaded engines (frame sizes x graph variants) per pipeline


class OnnxHost:
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
        from . import shims as S

        p = self.pipe.txt2img
        self.originals = {"unet": p.unet, "controlnet": p.controlnet,
                          "text_encoder": p.text_encoder, "vae": p.vae}
        union = getattr(self.pipe, "union", False)
        shims = {"unet": S.keep(S.UNetShim(self, p.unet), p.unet, "add_embedding"),
                 "controlnet": (S.UnionShim if union else S.ControlNetShim)(self, p.controlnet),
                 "text_encoder": S.TextShim(self, p.text_encoder),
                 "vae": S.keep(S.VaeShim(self, p.vae), p.vae, "post_quant_conv")}
        if getattr(p, "text_encoder_2", None) is not None:  # SDXL
            self.originals["text_encoder_2"] = p.text_encoder_2
            shims["text_encoder_2"] = S.TextShim(self, p.text_encoder_2, TEXT2)
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
    go through the image encoder graph and the UNet graph takes their weighted
    mean embedding (one image's tokens, however many references) and the scale.
    """

    engine_name = "onnx"

    def __init__(self, components: Any, device: str = "cpu", dtype: Any = None, *,
                 cache_dir: str | os.PathLike | None = None,
                 providers: str | list[str] = "auto", precision: str | None = None,
                 dynamo: bool | None = None, threads: int | None = None) -> None:
        super().__init__(components, device, dtype)
        self.onnx = OnnxHost(self, cache_dir, providers, precision, dynamo, threads)
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
        """Image-embedding tokens the UNet graph takes: 0 without an IP-Adapter, else 1
        (the references' weighted mean, or zero embeddings without references)."""
        return 1 if self.ip_adapter_loaded else 0

    def prepare(self, *, width: int, height: int, options: dict[str, Any] | None = None,
                refs: Any = ()) -> None:
        """Export (or take from the cache) and open the graphs for this frame size (and
        the cross-frame variant when ``options`` ask for it); the backend calls it when
        a session opens, so a failing export (or ``ref_weights`` that do not fit the
        references) fails the OPEN."""
        normalized_ref_weights((options or {}).get("ref_weights"), len(refs or ()))
        self.onnx.prepare(height, width, self._ip_images(refs), cross_on(options))

    def prepared(self, *, width: int, height: int, options: dict[str, Any] | None = None,
                 refs: Any = ()) -> bool:
        return (height, width, self._ip_images(refs), cross_on(options)) in self.onnx.engines

    @contextlib.contextmanager
    def cross_frame(self, state: dict[str, Any] | None, frame: int | None,
                    mode: str | bool | None) -> Iterator[Any]:
        """Cross-frame attention for one call (:mod:`.cross_frame`'s anchor rules): the
        cross-frame graph is fed the anchor's keys and values and gives the frame's
        (:meth:`OnnxEngine.noise_pred`); yields the session's
        :class:`~.cross_frame.CrossFrameState` (None when off)."""
        from ..cross_frame import anchored_call

        mode = parse_cross_frame(mode)
        if mode is None or state is None:
            yield None
            return
        with anchored_call(self.onnx, "cross", state, frame, mode) as cf:
            yield cf

    def image_embeds(self, refs: list[np.ndarray], cfg: bool,
                     weights: Any = None) -> list[Any]:
        """:meth:`RestylePipeline.image_embeds` through the image encoder graph; the
        adapter scale goes to the UNet graph as an input."""
        import torch

        proj = self.onnx.originals["unet"].encoder_hid_proj.image_projection_layers[0]
        if refs and self.components.image_encoder is not None:
            def encode(images: list[np.ndarray]) -> Any:
                px = self.components.feature_extractor(images=pil_refs(images),
                                                       return_tensors="pt").pixel_values
                eng = self.onnx.engine
                return torch.cat([eng.run_torch(IMAGE, {"pixel_values": px[i:i + 1]})[0]
                                  for i in range(px.shape[0])])

            pos = weighted_ref_embedding(refs, weights, encode)
            self.onnx.ip_scale = self.ip_adapter_scale
        else:
            pos = torch.zeros(1, 1, proj.image_embeds.in_features)
            self.onnx.ip_scale = 0.0
        pos = pos.to(self.device, self.dtype)
        return [torch.cat([torch.zeros_like(pos), pos]) if cfg else pos]

    def run(self, passes: dict[str, np.ndarray], *, width: int, height: int,
            **kw: Any) -> Any:
        cross = cross_on(kw.get("options")) and kw.get("state") is not None
        self.onnx.prepare(height, width, self._ip_images(kw.get("refs")), cross)
        self.onnx.union_pending = None
        return super().run(passes, width=width, height=height, **kw)

    @property
    def providers(self) -> dict[str, list[str]]:
        """Graph -> providers of the current engine (empty before the first frame)."""
        return self.onnx.engine.providers if self.onnx.engine is not None else {}


def cross_on(options: dict[str, Any] | None) -> bool:
    """Does a session with ``options`` use cross-frame attention (the graph variant)?"""
    return parse_cross_frame((options or {}).get("cross_frame")) is not None
