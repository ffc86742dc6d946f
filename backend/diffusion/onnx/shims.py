"""Thin stand-ins for the torch modules of diffusers' pipelines, running the graphs.

Diffusers' denoising loop, scheduler, generator and control-guidance schedule stay as
they are; only the modules they call are replaced. Each shim reads the state it shares
with the others (the engine of the current frame size, the control images a step
recorded, the IP-Adapter scale, the cross-frame call) from its *host*, an
:class:`~.pipeline.OnnxHost`. Importing this module imports torch and diffusers: the
pipeline imports it when it attaches the shims.
"""

from __future__ import annotations

from typing import Any

import torch
from diffusers.models.autoencoders.autoencoder_kl import AutoencoderKLOutput
from diffusers.models.autoencoders.vae import DiagonalGaussianDistribution
from diffusers.models.controlnets.controlnet_union import ControlNetUnionModel
from diffusers.models.controlnets.multicontrolnet import MultiControlNetModel
from transformers.modeling_outputs import BaseModelOutput

from .export import TEXT, VAE_DEC, VAE_ENC


class HostPlacement:
    """``dtype`` and ``device`` as the host's (what diffusers reads of each module)."""

    host: Any

    @property
    def dtype(self) -> Any:
        return self.host.dtype

    @property
    def device(self) -> Any:
        return torch.device(self.host.device)


class Shim(HostPlacement, torch.nn.Module):
    """Stands for a torch module in a diffusers pipeline (its config, dtype, device)."""

    def __init__(self, host: Any, original: Any) -> None:
        torch.nn.Module.__init__(self)
        self.host = host
        self.config = original.config


class UNetShim(Shim):
    """The UNet + ControlNets graph, fed what the ControlNet shim recorded this step."""

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


class ControlNetShim(HostPlacement, MultiControlNetModel):
    """Records the control images and scales of a step for :class:`UNetShim`. Its
    ``nets`` are weightless stubs: diffusers walks every module of the pipeline's
    components on each call (device, dtype, offload hooks), which over the real
    ControlNets cost ~30 ms a frame."""

    def __init__(self, host: Any, original: Any) -> None:
        MultiControlNetModel.__init__(self, [NetStub(n.config) for n in original.nets])
        self.__dict__["host"] = host  # not a submodule

    def forward(self, sample: Any, timestep: Any, encoder_hidden_states: Any,
                controlnet_cond: list[Any], conditioning_scale: list[float],
                *args: Any, **kw: Any) -> tuple[None, None]:
        self.host.pending = (controlnet_cond, conditioning_scale)
        return None, None


class UnionShim(HostPlacement, ControlNetUnionModel):
    """Records a ControlNet-Union's conditions, scales, control types and modes of a
    step for :class:`UNetShim` (an instance of the union class, which the union
    pipelines test for; the config without the weights)."""

    def __init__(self, host: Any, original: Any) -> None:
        torch.nn.Module.__init__(self)
        self.__dict__["_internal_dict"] = original._internal_dict
        self.__dict__["host"] = host

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

    def __init__(self, host: Any, original: Any, graph: str = TEXT) -> None:
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
    """The VAE encoder and decoder graphs, one image at a time (their static shape)."""

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


def keep(shim: Any, original: Any, *names: str) -> Any:
    """Give a shim some of the original's submodules as plain attributes (what the
    pipelines read: SDXL's ``unet.add_embedding``, ``vae.post_quant_conv``) without
    registering them (diffusers walks registered modules on each call)."""
    for n in names:
        if hasattr(original, n):
            shim.__dict__[n] = getattr(original, n)
    return shim
