"""SD 1.5 + several ControlNets restyling the passes of one frame.

:class:`RestylePipeline` composes diffusers' ``StableDiffusionControlNetPipeline``
(fresh frames) and ``StableDiffusionControlNetImg2ImgPipeline`` (temporal frames:
the previous restyled frame warped by the renderer's motion vectors is the
init) over the same modules, with a ``MultiControlNetModel`` of depth, normal
and openpose, each with its own scale and guidance start/end. Components come
in built (:mod:`.components`); nothing is downloaded here.

Options (``options`` of a session; all optional)::

    steps: 4                 scheduler: "lcm" | "tcd" | "ddim" | "euler" | "euler_a" | ...
    guidance_scale: 1.0 for lcm/tcd, else 7.0
    controlnet: {"depth": {"scale": 0.8, "start": 0.0, "end": 1.0}, "normal": {...}, ...}
    depth_near, depth_far    shot-fixed depth range in metres (else the first frame's,
                             kept in the session state)
    ip_adapter_scale         IP-Adapter strength (refs are the reference images)
    ref_weights: [1.0, 0.5]  one non-negative weight per reference (absent: equal); the
                             references' image embeddings are averaged with them, so
                             any number of refs is one image's tokens
    temporal: true           warp the previous frame as the init (needs state + motion)
    temporal_strength: 0.5   strength when every pixel was seen; rises to temporal_max_strength
    temporal_max_strength: 0.9, temporal_min_valid: 0.3 (below: a fresh frame), depth_tol: 0.05
    temporal_space: "latent" warp the previous final latents at 1/vae_scale resolution (no
                             encode; the default), or "image": warp the previous RGB and
                             VAE-encode it (sharper with a real VAE, one encode more)
    temporal_keep_steps: false  true: as many denoising steps as a fresh frame
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...addon.core.passes import encodings
from ..pipelines.base import Cancelled, StepCallback
from . import temporal
from .components import (
    CONTROL_KINDS,
    PASS_OF_CONTROL,
    Components,
    IPAdapter,
    Lora,
    load_named,
)
from .cross_frame import cross_frame_session
from .options import normalized_ref_weights, parse_cross_frame

DEFAULT_CONTROL = {"depth": (0.8, 0.0, 1.0), "normal": (0.5, 0.0, 1.0),
                   "openpose": (1.0, 0.0, 1.0)}
FEW_STEP = ("lcm", "tcd")


def scheduler_classes() -> dict[str, Any]:
    import diffusers as d

    return {"ddim": d.DDIMScheduler, "lcm": d.LCMScheduler, "tcd": d.TCDScheduler,
            "euler": d.EulerDiscreteScheduler, "euler_a": d.EulerAncestralDiscreteScheduler,
            "dpmpp": d.DPMSolverMultistepScheduler, "unipc": d.UniPCMultistepScheduler,
            "pndm": d.PNDMScheduler}


def make_scheduler(name: str, config: Any) -> Any:
    """A scheduler by name from another scheduler's config."""
    classes = scheduler_classes()
    if name not in classes:
        raise ValueError(f"unknown scheduler {name!r}; known: {', '.join(sorted(classes))}")
    return classes[name].from_config(config)


@dataclass
class RestyleResult:
    """One restyled frame and how it was made."""

    image: np.ndarray  # (H, W, 3) uint8
    seed: int
    frame: int | None
    mode: str  # "fresh" | "temporal"
    strength: float  # 1.0 for fresh frames
    valid_fraction: float  # of the warped init (0 for fresh frames)
    steps: int  # denoising steps actually run


def depth_control(depth: np.ndarray, near: float, far: float) -> np.ndarray:
    """Depth -> (H, W, 3) uint8 grey, near bright, 0 where empty: the 16-bit
    shot-stable encoding of :func:`encodings.depth_to_u16` cut to 8 bits."""
    d16 = encodings.depth_to_u16(depth.astype(np.float32), near, far)
    d8 = np.rint(d16.astype(np.float32) / 257.0).astype(np.uint8)
    return np.repeat(d8[..., None], 3, axis=2)


def depth_range(depth: np.ndarray, margin: float = 0.1) -> tuple[float, float]:
    """A near/far around the finite depths of one frame (fallback when the
    session gives none; kept for the whole shot)."""
    fin = depth[np.isfinite(depth)]
    if fin.size == 0:
        return 0.1, 10.0
    lo, hi = float(fin.min()), float(fin.max())
    pad = max(hi - lo, 1e-3) * margin
    return max(lo - pad, 1e-4), hi + pad


def weighted_ref_embedding(refs: Sequence[np.ndarray], weights: Sequence[float] | None,
                           encode: Callable[[list[np.ndarray]], Any]) -> Any:
    """The references' image embeddings averaged with ``weights`` (the ``ref_weights``
    option, normalised to sum 1; equal when None) as a (1, 1, D) tensor: one image's
    tokens whatever the number of references, as IPAdapter's "average" combines them,
    so the exported UNet graph keeps one input shape. ``encode`` maps images to (n, D)
    embeddings; zero-weight references are not encoded (weights [1, 0] are the first
    reference alone, exactly)."""
    import torch

    norm = normalized_ref_weights(None if weights is None else list(weights), len(refs))
    kept = [(r, w) for r, w in zip(refs, norm, strict=True) if w > 0]
    emb = encode([r for r, _ in kept])
    w = torch.tensor([w for _, w in kept], dtype=torch.float32, device=emb.device)
    return (w[:, None] * emb.float()).sum(0)[None, None].to(emb.dtype)  # fp32 sum for fp16


def pil_refs(refs: Sequence[np.ndarray]) -> list[Any]:
    """Reference images as PIL RGB images, for the image encoder's feature extractor."""
    from PIL import Image

    return [Image.fromarray(np.ascontiguousarray(r[..., :3]).astype(np.uint8)) for r in refs]


class RestylePipeline:
    """SD 1.5 ControlNet restyling (``__call__`` as in :mod:`backend.pipelines`,
    plus ``frame`` and a per-session ``state`` dict for temporal mode)."""

    name = "sd15-controlnet"
    stateful = True  # takes frame= and state= (one dict per session)

    def __init__(self, components: Components, device: str = "cpu", dtype: Any = None) -> None:
        import torch
        from diffusers import (
            StableDiffusionControlNetImg2ImgPipeline,
            StableDiffusionControlNetPipeline,
        )
        from diffusers.models.controlnets.multicontrolnet import MultiControlNetModel

        self.components = components
        self.device = device
        self.dtype = dtype or (torch.float16 if str(device).startswith("cuda") else torch.float32)
        self.kinds = [k for k in CONTROL_KINDS if k in components.controlnets]
        if not self.kinds:
            raise ValueError("RestylePipeline needs at least one ControlNet")
        cn = MultiControlNetModel([components.controlnets[k] for k in self.kinds])
        self.txt2img = StableDiffusionControlNetPipeline(
            vae=components.vae, text_encoder=components.text_encoder,
            tokenizer=components.tokenizer, unet=components.unet, controlnet=cn,
            scheduler=components.scheduler, safety_checker=None,
            feature_extractor=components.feature_extractor,
            image_encoder=components.image_encoder, requires_safety_checker=False)
        self.img2img = StableDiffusionControlNetImg2ImgPipeline(**self.txt2img.components,
                                                                requires_safety_checker=False)
        self._finish_init(components, device)

    def _finish_init(self, components: Components, device: str) -> None:
        """Set-up shared with the SDXL pipeline once ``txt2img``/``img2img`` exist:
        scheduler, LoRAs, IP-Adapter, device and dtype."""
        import torch

        for p in (self.txt2img, self.img2img):
            p.set_progress_bar_config(disable=True)
        self.scheduler_name = ""
        self._base_scheduler_config = components.scheduler.config
        # The pipeline object is shared by every session of the backend: per-call
        # options must not stick, so each call starts from these defaults.
        self.default_scheduler = components.scheduler_name or "lcm"
        self.set_scheduler(self.default_scheduler)
        self.ip_adapter_loaded = False
        self.ip_adapter_scale = self.default_ip_scale = 0.0
        self.loras: list[Lora] = []
        # Hub ids download here, when the session opens: a failure names the component.
        model = components.name or "model"
        for lora in components.loras:
            load_named(model, f"lora {lora.name}", lora.source, self.load_lora,
                       lora.source.ref if hasattr(lora.source, "ref") else lora.source,
                       scale=lora.scale, name=lora.name,
                       weight_name=getattr(lora.source, "weight_name", None))
        if components.ip_adapter is not None:
            ipa = components.ip_adapter
            load_named(model, "ip_adapter", getattr(ipa, "source", None), self.load_ip_adapter,
                       ipa)
        self.txt2img.to(device)
        if self.dtype != torch.float32:
            self.txt2img.to(dtype=self.dtype)
        self.last: RestyleResult | None = None

    # ------------------------------------------------------------ configuration

    def set_scheduler(self, name: str) -> None:
        """Switch the scheduler of both pipelines (``make_scheduler``'s names)."""
        if name == self.scheduler_name:
            return
        sched = make_scheduler(name, self._base_scheduler_config)
        self.txt2img.scheduler = sched
        self.img2img.scheduler = sched
        self.scheduler_name = name

    def load_lora(self, source: Any, scale: float = 1.0, name: str | None = None,
                  weight_name: str | None = None) -> str:
        """Load LoRA weights (a folder, a .safetensors file, a hub id or a state
        dict) into the UNet/text encoder shared by both pipelines; all loaded
        LoRAs stay active with their scales. Returns the adapter name."""
        import os

        name = name or f"lora{len(self.loras)}"
        kw: dict[str, Any] = {"adapter_name": name}
        if isinstance(source, str | os.PathLike) and os.path.isfile(source):
            source, weight_name = os.path.dirname(os.fspath(source)), os.path.basename(source)
        if weight_name:
            kw["weight_name"] = weight_name
        self.txt2img.load_lora_weights(source, **kw)
        self.loras.append(Lora(source, float(scale), name))
        self.txt2img.set_adapters([lo.name for lo in self.loras],
                                  adapter_weights=[lo.scale for lo in self.loras])
        return name

    def load_ip_adapter(self, spec: IPAdapter | tuple[dict, float] | dict,
                        scale: float | None = None) -> None:
        """Load an IP-Adapter: an :class:`IPAdapter` registry entry, or a state
        dict (``{"image_proj", "ip_adapter"}``) with a scale. The image encoder
        is a component (``image_encoder_folder=None``)."""
        if isinstance(spec, IPAdapter):
            src = spec.source
            ref = src.ref
            kw = {"subfolder": src.subfolder or "", "weight_name": src.weight_name or ""}
            scale = spec.scale if scale is None else scale
        else:
            if isinstance(spec, tuple):
                spec, s = spec
                scale = s if scale is None else scale
            ref, kw = spec, {"subfolder": "", "weight_name": ""}
        self.txt2img.load_ip_adapter(ref, image_encoder_folder=None, **kw)
        self.ip_adapter_loaded = True
        self.ip_adapter_scale = 0.6 if scale is None else float(scale)
        self.default_ip_scale = self.ip_adapter_scale

    # ------------------------------------------------------------ inputs

    def control_images(self, passes: dict[str, np.ndarray], options: dict[str, Any],
                       state: dict[str, Any] | None) -> tuple[list[Any], list[float]]:
        """(control images as (1, 3, H, W) tensors in [0, 1], per-net scale
        multipliers: 0 where the pass is missing)."""
        import torch

        imgs, present = [], []
        ref = next(iter(passes.values())) if passes else None
        h, w = (ref.shape[:2] if ref is not None else (64, 64))
        mask = None
        if "mask" in passes:
            mask = passes["mask"] > 0
        elif "depth" in passes:
            mask = np.isfinite(passes["depth"])
        for kind in self.kinds:
            name = PASS_OF_CONTROL[kind]
            a = passes.get(name)
            if a is None:
                img, ok = np.zeros((h, w, 3), np.uint8), 0.0
            elif kind == "depth":
                near, far = options.get("depth_near"), options.get("depth_far")
                if near is None or far is None:
                    rng = state.get("depth_range") if state is not None else None
                    near, far = rng or depth_range(a)
                    if state is not None:
                        state["depth_range"] = (near, far)
                img, ok = depth_control(a, float(near), float(far)), 1.0
            elif kind == "normal":
                m = mask if mask is not None else np.ones(a.shape[:2], bool)
                img, ok = encodings.normal_to_color(a.astype(np.float32), m), 1.0
            else:
                img, ok = np.ascontiguousarray(a[..., :3]).astype(np.uint8), 1.0
            t = torch.from_numpy(img.astype(np.float32) / 255.0).permute(2, 0, 1)[None]
            imgs.append(t)
            present.append(ok)
        return imgs, present

    def _control_settings(self, options: dict[str, Any], present: list[float]
                          ) -> tuple[list[float], list[float], list[float]]:
        user = options.get("controlnet") or {}
        scales, starts, ends = [], [], []
        for kind, ok in zip(self.kinds, present, strict=True):
            s0, a0, b0 = DEFAULT_CONTROL[kind]
            u = user.get(kind) or {}
            scales.append(float(u.get("scale", s0)) * ok)
            starts.append(float(u.get("start", a0)))
            ends.append(float(u.get("end", b0)))
        return scales, starts, ends

    def image_embeds(self, refs: list[np.ndarray], cfg: bool,
                     weights: Sequence[float] | None = None) -> list[Any]:
        """IP-Adapter embeddings of the reference images, averaged with ``weights``
        (:func:`weighted_ref_embedding`); zeros (and scale 0) without refs or encoder."""
        import torch

        enc = self.components.image_encoder
        proj = self.txt2img.unet.encoder_hid_proj.image_projection_layers[0]
        dim = proj.image_embeds.in_features
        if refs and enc is not None:
            def encode(images: list[np.ndarray]) -> Any:
                px = self.components.feature_extractor(images=pil_refs(images),
                                                       return_tensors="pt").pixel_values
                with torch.no_grad():
                    return enc(px.to(self.device, enc.dtype)).image_embeds  # (n, D)

            pos = weighted_ref_embedding(refs, weights, encode)
            self.txt2img.set_ip_adapter_scale(self.ip_adapter_scale)
        else:
            pos = torch.zeros(1, 1, dim, device=self.device, dtype=self.dtype)
            self.txt2img.set_ip_adapter_scale(0.0)
        pos = pos.to(self.device, self.dtype)
        return [torch.cat([torch.zeros_like(pos), pos]) if cfg else pos]

    # ------------------------------------------------------------ running

    def cross_frame(self, state: dict[str, Any] | None, frame: int | None,
                    mode: str | bool | None) -> AbstractContextManager:
        """Cross-frame attention for one call (:func:`.cross_frame.cross_frame_session`
        on the torch UNet; the onnx engine has its own). A session's ``true`` is
        "first" here as on onnx and in the add-on (not the mode another session left
        installed on the shared UNet)."""
        return cross_frame_session(self.txt2img.unet, state, frame, parse_cross_frame(mode))

    def run(self, passes: dict[str, np.ndarray], *, prompt: str = "", negative_prompt: str = "",
            seed: int = 0, width: int, height: int, refs: list[np.ndarray] | None = None,
            options: dict[str, Any] | None = None, callback: StepCallback | None = None,
            frame: int | None = None, state: dict[str, Any] | None = None,
            ip_adapter_image_embeds: list[Any] | None = None) -> RestyleResult:
        """Restyle one frame; see the module doc for ``options``."""
        import torch

        options = options or {}
        refs = refs or []
        weights = options.get("ref_weights")
        self.set_scheduler(str(options.get("scheduler", self.default_scheduler)))
        steps = min(100, max(1, int(options.get("steps", 4))))
        cfg_default = 1.0 if self.scheduler_name in FEW_STEP else 7.0
        guidance = float(options.get("guidance_scale", cfg_default))
        self.ip_adapter_scale = float(options.get("ip_adapter_scale", self.default_ip_scale))
        controls, present = self.control_images(passes, options, state)
        scales, starts, ends = self._control_settings(options, present)
        gen = torch.Generator("cpu").manual_seed(int(seed) & 0xFFFFFFFFFFFFFFFF)

        final: dict[str, Any] = {}

        def on_step(pipe: Any, i: int, t: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
            if i + 1 == pipe.num_timesteps:
                final["latents"] = kwargs["latents"].detach().clone()
            if callback is not None and not callback(i + 1, pipe.num_timesteps):
                pipe._interrupt = True  # stop the loop, and leave it at once:
                raise Cancelled(f"cancelled at step {i + 1}/{pipe.num_timesteps}")
            return kwargs

        common: dict[str, Any] = dict(
            prompt=prompt, negative_prompt=negative_prompt or None, height=height, width=width,
            num_inference_steps=steps, guidance_scale=guidance, generator=gen,
            control_guidance_start=starts, control_guidance_end=ends,
            controlnet_conditioning_scale=scales, output_type="np",
            callback_on_step_end=on_step)
        if self.ip_adapter_loaded:
            common["ip_adapter_image_embeds"] = (ip_adapter_image_embeds
                                                 or self.image_embeds(refs, guidance > 1.0,
                                                                      weights))
        mode, strength, vf = "fresh", 1.0, 0.0
        init = self._temporal_init(passes, options, frame, state, width, height)
        with (self.cross_frame(state, frame, options.get("cross_frame")),
              torch.inference_mode()):
            if init is None:
                out = self.txt2img(image=controls, **common).images[0]
                run_steps = steps
            else:
                img, valid = init
                vf = float(valid.mean())
                strength = temporal.strength_schedule(
                    vf, float(options.get("temporal_strength", 0.5)),
                    float(options.get("temporal_max_strength", 0.9)))
                n = steps
                if options.get("temporal_keep_steps"):
                    n = common["num_inference_steps"] = steps_for_strength(steps, strength)
                out = self.img2img(image=img, control_image=controls, strength=strength,
                                   **common).images[0]
                mode, run_steps = "temporal", max(1, min(int(n * strength), n))
        rgb = np.clip(np.rint(out * 255.0), 0, 255).astype(np.uint8)
        if state is not None:
            state.update(frame=frame, rgb=rgb, depth=passes.get("depth"),
                         latents=final.get("latents"))
        result = RestyleResult(rgb, int(seed), frame, mode, strength, vf, run_steps)
        self.last = result
        return result

    def _temporal_init(self, passes: dict[str, np.ndarray], options: dict[str, Any],
                       frame: int | None, state: dict[str, Any] | None, width: int,
                       height: int) -> tuple[Any, np.ndarray] | None:
        """(init image or latents as a tensor, valid) when the previous frame of
        this session can be warped; None for a fresh frame."""
        import torch

        if state is None or frame is None or options.get("temporal", True) is False:
            return None
        prev = state.get("rgb")
        if (state.get("frame") != frame - 1 or prev is None or prev.shape != (height, width, 3)
                or "motion" not in passes or "depth" not in passes
                or state.get("depth") is None):
            return None
        motion = passes["motion"]
        if motion.shape[:2] != (height, width):
            return None
        tol = float(options.get("depth_tol", 0.05))
        min_valid = float(options.get("temporal_min_valid", 0.3))
        if options.get("temporal_space", "latent") == "latent" and state.get("latents") is not None:
            return self._latent_init(state, motion, passes["depth"], tol, min_valid)
        init, valid = temporal.temporal_init(prev, motion[..., :2], passes["depth"],
                                             state["depth"], rel_tol=tol)
        if valid.mean() < min_valid:
            return None
        img = torch.from_numpy(init.astype(np.float32) / 255.0).permute(2, 0, 1)[None]
        return img, valid

    def _latent_init(self, state: dict[str, Any], motion: np.ndarray, depth: np.ndarray,
                     tol: float, min_valid: float) -> tuple[Any, np.ndarray] | None:
        """The previous frame's final latents warped at latent resolution (no VAE
        encode); holes (a latent cell with any occluded pixel) pushed full."""
        import torch

        f = self.txt2img.vae_scale_factor
        lat = state["latents"]
        valid = temporal.occlusion_mask(depth, state["depth"], motion[..., :2], rel_tol=tol)
        if valid.mean() < min_valid:
            return None
        flow = temporal.downsample_flow(motion[..., :2], f)
        h, w = flow.shape[:2]
        if lat.shape[-2:] != (h, w):
            return None
        warped = temporal.warp_torch(lat.float(), flow)[0].permute(1, 2, 0).cpu().numpy()
        vl = valid[: h * f, : w * f].reshape(h, f, w, f).all(axis=(1, 3))
        x, y = np.meshgrid(np.arange(w), np.arange(h))
        _, inside = temporal.sample_bilinear(vl.astype(np.float32), x + flow[..., 0],
                                             y + flow[..., 1])
        filled = temporal.fill_holes(warped, vl & inside)
        out = torch.from_numpy(filled).permute(2, 0, 1)[None].to(self.device, self.dtype)
        return out, valid

    def __call__(self, passes: dict[str, np.ndarray], *, prompt: str = "",
                 negative_prompt: str = "", seed: int = 0, width: int, height: int,
                 refs: list[np.ndarray] | None = None, options: dict[str, Any] | None = None,
                 callback: StepCallback | None = None, frame: int | None = None,
                 state: dict[str, Any] | None = None) -> np.ndarray:
        return self.run(passes, prompt=prompt, negative_prompt=negative_prompt, seed=seed,
                        width=width, height=height, refs=refs, options=options,
                        callback=callback, frame=frame, state=state).image


def steps_for_strength(steps: int, strength: float) -> int:
    """``num_inference_steps`` that makes img2img at ``strength`` run ``steps`` steps."""
    return max(steps, math.ceil(steps / max(strength, 1e-3)))
