"""SDXL + several ControlNets (or one ControlNet-Union) restyling one frame.

:class:`RestyleXLPipeline` is :class:`~.controlnet_pipeline.RestylePipeline` on
diffusers' SDXL pipelines: the same ``__call__``/``run``, options, control images
from the passes, per-frame seeds, step callback and cancel, temporal mode (the
warped previous frame or latents as the img2img init), LoRA and IP-Adapter. Two
ControlNet layouts:

- several ControlNets (``MultiControlNetModel``): ``StableDiffusionXLControlNet
  Pipeline`` / ``...Img2ImgPipeline``, one net per kind, each with its scale and
  start/end (``options["controlnet"]``, as SD 1.5);
- one ``ControlNetUnionModel`` (``union``): ``StableDiffusionXLControlNetUnion
  Pipeline`` / ``...Img2ImgPipeline``; every present pass is a condition of the
  single net with its control mode (:data:`UNION_MODES`, xinsir's
  controlnet-union-sdxl-1.0 numbering; override per model), and still its own
  scale and start/end. Missing passes are left out (not zero images).

Extra option: ``cross_frame: "first" | "previous" | None`` — cross-frame
attention to an anchor frame (:mod:`.cross_frame`), cached in the session state.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from . import components as C
from . import tiny
from .components import CONTROL_KINDS, Components
from .controlnet_pipeline import DEFAULT_CONTROL, RestylePipeline
from .options import option_problems

# xinsir/controlnet-union-sdxl-1.0: 0 openpose, 1 depth, 2 hed/pidi/scribble/ted,
# 3 canny/lineart/mlsd, 4 normal, 5 segment (promax adds 6 tile, 7 repaint)
UNION_MODES = {"openpose": 0, "depth": 1, "normal": 4}


@dataclass
class XLComponents(Components):
    """:class:`Components` plus SDXL's second text encoder/tokenizer and,
    instead of ``controlnets``, optionally one ControlNet-Union model."""

    text_encoder_2: Any = None
    tokenizer_2: Any = None
    union: Any = None  # ControlNetUnionModel
    union_modes: dict[str, int] = field(default_factory=dict)


def _union_pipeline_classes() -> tuple[type, type]:
    """The union pipelines, taking the control images as ``image`` (txt2img)
    like the multi-ControlNet ones, and ``control_mode`` from the instance."""
    from diffusers import (
        StableDiffusionXLControlNetUnionImg2ImgPipeline,
        StableDiffusionXLControlNetUnionPipeline,
    )

    class UnionTxt2Img(StableDiffusionXLControlNetUnionPipeline):
        control_modes: list[int] = []

        def __call__(self, *args: Any, image: Any = None, **kw: Any) -> Any:
            kw.setdefault("control_mode", list(self.control_modes))
            return super().__call__(*args, control_image=image, **kw)

    class UnionImg2Img(StableDiffusionXLControlNetUnionImg2ImgPipeline):
        control_modes: list[int] = []

        def __call__(self, *args: Any, **kw: Any) -> Any:
            kw.setdefault("control_mode", list(self.control_modes))
            return super().__call__(*args, **kw)

    return UnionTxt2Img, UnionImg2Img


class RestyleXLPipeline(RestylePipeline):
    """SDXL ControlNet restyling (interface and behaviour of :class:`RestylePipeline`)."""

    name = "sdxl-controlnet"
    stateful = True

    def __init__(self, components: XLComponents, device: str = "cpu", dtype: Any = None) -> None:
        import torch
        from diffusers import (
            StableDiffusionXLControlNetImg2ImgPipeline,
            StableDiffusionXLControlNetPipeline,
        )
        from diffusers.models.controlnets.multicontrolnet import MultiControlNetModel

        self.components = components
        self.device = device
        self.dtype = dtype or (torch.float16 if str(device).startswith("cuda") else torch.float32)
        self.union = components.union is not None
        if self.union:
            self.kinds = list(CONTROL_KINDS)
            self.union_modes = {**UNION_MODES, **components.union_modes}
            cn = components.union
            t2i_cls, i2i_cls = _union_pipeline_classes()
        else:
            self.kinds = [k for k in CONTROL_KINDS if k in components.controlnets]
            if not self.kinds:
                raise ValueError("RestyleXLPipeline needs ControlNets or a ControlNet-Union")
            cn = MultiControlNetModel([components.controlnets[k] for k in self.kinds])
            t2i_cls = StableDiffusionXLControlNetPipeline
            i2i_cls = StableDiffusionXLControlNetImg2ImgPipeline
        self._call_kinds = list(self.kinds)
        parts = dict(vae=components.vae, text_encoder=components.text_encoder,
                     text_encoder_2=components.text_encoder_2, tokenizer=components.tokenizer,
                     tokenizer_2=components.tokenizer_2, unet=components.unet, controlnet=cn,
                     scheduler=components.scheduler, feature_extractor=components.feature_extractor,
                     image_encoder=components.image_encoder)
        self.txt2img = t2i_cls(**parts, add_watermarker=False)
        self.img2img = i2i_cls(**parts, add_watermarker=False)
        self._finish_init(components, device)

    # ------------------------------------------------------------ inputs

    def control_images(self, passes: dict[str, np.ndarray], options: dict[str, Any],
                       state: dict[str, Any] | None) -> tuple[list[Any], list[float]]:
        """As RestylePipeline's; with a union net, only the present passes (at
        least one: a zero depth image at scale 0 when there is none) and their
        control modes."""
        imgs, present = super().control_images(passes, options, state)
        if not self.union:
            return imgs, present
        keep = [i for i, ok in enumerate(present) if ok] or [0]
        self._call_kinds = [self.kinds[i] for i in keep]
        modes = [int(self.union_modes[k]) for k in self._call_kinds]
        self.txt2img.control_modes = self.img2img.control_modes = modes
        return [imgs[i] for i in keep], [present[i] for i in keep]

    def _control_settings(self, options: dict[str, Any], present: list[float]
                          ) -> tuple[list[float], list[float], list[float]]:
        if not self.union:
            return super()._control_settings(options, present)
        user = options.get("controlnet") or {}
        scales, starts, ends = [], [], []
        for kind, ok in zip(self._call_kinds, present, strict=True):
            s0, a0, b0 = DEFAULT_CONTROL[kind]
            u = user.get(kind) or {}
            scales.append(float(u.get("scale", s0)) * ok)
            starts.append(float(u.get("start", a0)))
            ends.append(float(u.get("end", b0)))
        return scales, starts, ends


# ---------------------------------------------------------------- components


def tiny_xl_components(seed: int = 0, union: bool = False, n_controlnets: int = 3,
                       scheduler: str = "lcm", text_encoder_2_width: int = 32) -> XLComponents:
    """Random, deterministic SDXL-shaped components with the configs of
    diffusers' SDXL ControlNet tests (``text_time`` added embeddings, two CLIP
    text encoders of width 32, cross-attention 64): ``n_controlnets`` ControlNets
    of depth, normal, openpose, or one ControlNet-Union (6 control types).
    A 64² frame takes well under a second a step on a CPU.

    ``text_encoder_2_width`` (a multiple of 4): the second encoder's width; the
    cross-attention width is the sum of both. A single-file checkpoint tells its
    two encoders apart by width (768 and 1280 in SDXL), so one saved as a single
    file needs a width other than 32."""
    import torch
    from diffusers import (
        AutoencoderKL,
        ControlNetModel,
        ControlNetUnionModel,
        EulerDiscreteScheduler,
        UNet2DConditionModel,
    )
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection

    xl = dict(block_out_channels=(32, 64), layers_per_block=2, in_channels=4,
              down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
              attention_head_dim=(2, 4), use_linear_projection=True,
              addition_embed_type="text_time", addition_time_embed_dim=8,
              transformer_layers_per_block=(1, 2),
              projection_class_embeddings_input_dim=80,  # 6 * 8 + pooled width 32
              cross_attention_dim=32 + text_encoder_2_width)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        unet = UNet2DConditionModel(**xl, sample_size=32, out_channels=4,
                                    up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"))
        cns: dict[str, Any] = {}
        un = None
        if union:
            torch.manual_seed(seed * 1000 + 21)
            un = ControlNetUnionModel(**xl, conditioning_embedding_out_channels=(16, 32),
                                      num_control_type=6, num_trans_channel=32, num_trans_head=2,
                                      num_proj_channel=32)
            _randomize_union(un)
        else:
            for i, kind in enumerate(CONTROL_KINDS[:n_controlnets]):
                torch.manual_seed(seed * 1000 + 17 + i)
                cns[kind] = ControlNetModel(**xl, conditioning_embedding_out_channels=(16, 32))
                tiny.randomize_zero_convs(cns[kind])
        torch.manual_seed(seed * 1000 + 7)
        vae = AutoencoderKL(block_out_channels=[32, 64], in_channels=3, out_channels=3,
                            down_block_types=["DownEncoderBlock2D"] * 2,
                            up_block_types=["UpDecoderBlock2D"] * 2, latent_channels=4)
        cfg = CLIPTextConfig(bos_token_id=0, eos_token_id=2, hidden_size=32,
                             intermediate_size=37, layer_norm_eps=1e-5, num_attention_heads=4,
                             num_hidden_layers=5, pad_token_id=1, vocab_size=1000,
                             hidden_act="gelu", projection_dim=32)
        torch.manual_seed(seed * 1000 + 8)
        te = CLIPTextModel(cfg)
        torch.manual_seed(seed * 1000 + 9)
        te2 = CLIPTextModelWithProjection(cfg if text_encoder_2_width == 32 else
                                          CLIPTextConfig(**{**cfg.to_dict(),
                                                            "hidden_size": text_encoder_2_width}))
    sched = EulerDiscreteScheduler(beta_start=0.00085, beta_end=0.012, steps_offset=1,
                                   beta_schedule="scaled_linear", timestep_spacing="leading")
    for m in (unet, vae, te, te2, *cns.values(), *([un] if un is not None else [])):
        m.eval()
    return XLComponents(unet, vae, te, tiny.tiny_tokenizer(), sched, cns, scheduler_name=scheduler,
                        name="tiny-xl", text_encoder_2=te2, tokenizer_2=tiny.tiny_tokenizer(),
                        union=un)


def _randomize_union(un: Any, std: float = 0.1) -> None:
    """Small random weights in the union net's zero-initialised layers."""
    import torch

    tiny.randomize_zero_convs(un)
    with torch.no_grad():
        for prm in un.spatial_ch_projs.parameters():
            prm.normal_(0.0, std)


# ---------------------------------------------------------------- registry


def _raw_table(name: str) -> dict[str, Any]:
    p = Path(os.environ.get("PAINTED_SKIN_MODELS") or C.DEFAULT_REGISTRY)
    with open(p, "rb") as f:
        models = tomllib.load(f).get("models") or {}
    if name not in models:
        raise KeyError(f"model {name!r} is not in the registry (it has: "
                       f"{', '.join(sorted(models))})")
    return models[name]


def xl_entry(name: str) -> tuple[C.ModelEntry, C.Source | None, dict[str, int]]:
    """(entry, union source, union modes) of registry model ``name``. An SDXL
    entry is an SD one (``base``, ``controlnets``, ``vae``, ``loras``...) whose
    base also has ``text_encoder_2/`` and ``tokenizer_2/`` (or is one SDXL
    ``.safetensors`` file with an SDXL diffusers ``config`` folder), optionally with
    ``controlnet_union = "xinsir/controlnet-union-sdxl-1.0"`` and
    ``union_modes = { depth = 1, normal = 4, openpose = 0 }``."""
    table = _raw_table(name)
    entry = C.parse_entry(name, table)
    u = table.get("controlnet_union")
    modes = {str(k): int(v) for k, v in (table.get("union_modes") or {}).items()}
    return entry, (C.Source.parse(u) if u else None), modes


def check_xl_weights(entry: C.ModelEntry, union: C.Source | None,
                     probe_hub: bool = False) -> list[str]:
    """:func:`components.check_weights` plus SDXL's second text encoder and
    tokenizer (in the base folder, or a single file's ``config`` folder) and the
    union ControlNet; empty when everything is there."""
    problems = C.check_weights(entry, probe_hub, arch="sdxl")
    root = C.resolve(entry.base)
    if root is not None and not problems and not entry.base.is_single_file:
        folder = root / entry.base.subfolder if entry.base.subfolder else root
        lacking = [f"{p}/" for p in ("text_encoder_2", "tokenizer_2") if not (folder / p).is_dir()]
        if lacking:
            problems.append(f"base: {folder} lacks {', '.join(lacking)} (not an SDXL model?)")
    if union is not None:
        problems += C.check_source("controlnet union", union, "model", entry, probe_hub)
    if not entry.controlnets and union is None:
        problems.append(f"model {entry.name!r}: needs 'controlnets' or 'controlnet_union'")
    return problems


def load_xl_components(name: str, dtype: Any = None, union: bool | None = None) -> XLComponents:
    """Load registry model ``name`` as SDXL (raises :class:`components.MissingWeights`
    listing every problem first). ``union``: force the union net (True) or the
    separate ControlNets (False); default: the union when the entry has one."""
    import torch
    from diffusers import (
        AutoencoderKL,
        ControlNetModel,
        ControlNetUnionModel,
        EulerDiscreteScheduler,
        UNet2DConditionModel,
    )
    from transformers import CLIPTextModel, CLIPTextModelWithProjection, CLIPTokenizer

    entry, usrc, modes = xl_entry(name)
    if union is False:
        usrc = None
    elif union and usrc is None:
        raise C.MissingWeights(name, ["controlnet union: the registry entry has no "
                                      "'controlnet_union'"])
    problems = check_xl_weights(entry, usrc, probe_hub=True)  # the loading thread
    if problems:
        raise C.MissingWeights(name, problems)
    dtype = dtype or torch.float32
    lfo = {"local_files_only": C.offline(entry)}
    base, kw = C.source_ref(entry.base)

    def sub(part: str) -> dict[str, Any]:
        return {"subfolder": f"{kw['subfolder']}/{part}" if kw else part, **lfo}

    def model(kind: str, cls: Any, src: C.Source) -> Any:
        ref, rkw = C.source_ref(src)
        return C.load_named(entry.name, kind, src, cls.from_pretrained, ref, torch_dtype=dtype,
                            **rkw, **lfo)

    def part(name: str, cls: Any, **extra: Any) -> Any:
        # A corrupt or missing part names itself, where it looked and how to fix it
        # (as SD 1.5's loader does), instead of a bare OSError from diffusers.
        return C.load_named(entry.name, f"base {name}", entry.base, cls.from_pretrained, base,
                            **extra, **sub(name))

    vae = model("vae", AutoencoderKL, entry.vae) if entry.vae is not None else None
    if entry.base.is_single_file:
        unet, vae, te, te2, tok, tok2, sched = load_xl_single_file(entry, dtype, vae)
    else:
        unet = part("unet", UNet2DConditionModel, torch_dtype=dtype)
        vae = vae or part("vae", AutoencoderKL, torch_dtype=dtype)
        te = part("text_encoder", CLIPTextModel, torch_dtype=dtype)
        te2 = part("text_encoder_2", CLIPTextModelWithProjection, torch_dtype=dtype)
        tok = part("tokenizer", CLIPTokenizer)
        tok2 = part("tokenizer_2", CLIPTokenizer)
        sched = part("scheduler", EulerDiscreteScheduler)
    cns = {} if usrc is not None else {k: model(f"controlnet {k}", ControlNetModel, s)
                                       for k, s in entry.controlnets.items()}
    un = model("controlnet union", ControlNetUnionModel, usrc) if usrc is not None else None
    enc = proc = None
    if entry.ip_adapter is not None and entry.ip_adapter.image_encoder is not None:
        from transformers import CLIPVisionModelWithProjection

        enc = model("ip_adapter image_encoder", CLIPVisionModelWithProjection,
                    entry.ip_adapter.image_encoder)
        proc = C.image_processor(224)
    return XLComponents(unet, vae, te, tok, sched, cns, enc, proc, list(entry.loras),
                        entry.ip_adapter, entry.scheduler, entry.name, text_encoder_2=te2,
                        tokenizer_2=tok2, union=un, union_modes=modes)


def load_xl_single_file(entry: C.ModelEntry, dtype: Any, vae: Any = None) -> tuple[Any, ...]:
    """(unet, vae, text_encoder, text_encoder_2, tokenizer, tokenizer_2, scheduler) of a
    single-file SDXL base (A1111 / ComfyUI layout: ``model.diffusion_model.*``,
    ``first_stage_model.*``, CLIP-L under ``conditioner.embedders.0.transformer.*``,
    OpenCLIP bigG under ``conditioner.embedders.1.model.*``), read with diffusers'
    converters and the entry's local ``config`` folder only, so nothing asks the hub.
    ``vae``: an override already loaded (the file's VAE is then not read)."""
    from diffusers import EulerDiscreteScheduler, StableDiffusionXLPipeline

    config = C.single_file_config(entry, "sdxl")
    given = {"vae": vae} if vae is not None else {}
    pipe = C.load_named(entry.name, "base (single file)", entry.base,
                        StableDiffusionXLPipeline.from_single_file,
                        os.path.expanduser(entry.base.ref), config=config,
                        local_files_only=True, torch_dtype=dtype, add_watermarker=False,
                        **given)
    sched = EulerDiscreteScheduler.from_config(pipe.scheduler.config)
    return (pipe.unet, pipe.vae, pipe.text_encoder, pipe.text_encoder_2, pipe.tokenizer,
            pipe.tokenizer_2, sched)


def check_xl(options: dict[str, Any]) -> list[str]:
    """What keeps ``options``' SDXL model from loading (empty when it can);
    called when a session opens, before the shot starts."""
    problems = option_problems(options)
    if problems:
        return problems
    if options.get("tiny"):
        return []
    try:
        entry, usrc, _ = xl_entry(str(options.get("model", "sdxl")))
    except (OSError, ValueError, KeyError) as e:
        return [f"model registry: {e}"]
    if options.get("union") and usrc is None:
        return [f"model {entry.name!r} has no 'controlnet_union' in the registry"]
    return check_xl_weights(entry, None if options.get("union") is False else usrc)
