"""The torch modules each exported graph is traced from (:mod:`.export` lists the
graphs and their inputs).

Each class is defined inside a factory, on first use, so that importing this
module, and :mod:`.export` with it (the engine and shims take its graph names),
needs no torch.
"""

from __future__ import annotations

import copy
from typing import Any


def without_cond_embedding(net: Any) -> Any:
    """A shallow copy of a ControlNet (same parameters) whose conditioning
    embedding is the identity: it takes :data:`.export.CONTROL`'s output as its
    ``controlnet_cond``."""
    import torch

    c = copy.copy(net)
    c._modules = dict(net._modules)
    c._modules["controlnet_cond_embedding"] = torch.nn.Identity()
    return c


def control_embed_module() -> type:
    """The ``control_embed`` graph's module class (torch is imported only here)."""
    import torch

    class ControlEmbed(torch.nn.Module):
        """Every ControlNet's conditioning embedding (convolutions over the control
        image at full size): the same for every step of a frame, so run once a frame
        instead of once a step. A "bgr" net flips its image here, and the embedding
        too, which its own flip in the step graph undoes."""

        def __init__(self, controlnets: list[Any]) -> None:
            super().__init__()
            self.embeds = torch.nn.ModuleList([n.controlnet_cond_embedding for n in controlnets])
            self.bgr = [n.config.controlnet_conditioning_channel_order == "bgr"
                        for n in controlnets]

        def forward(self, *conds: Any) -> tuple[Any, ...]:
            outs = []
            for emb, bgr, cond in zip(self.embeds, self.bgr, conds, strict=True):
                if bgr:
                    outs.append(torch.flip(emb(torch.flip(cond, dims=[1])), dims=[1]))
                else:
                    outs.append(emb(cond))
            return tuple(outs)

    return ControlEmbed


def unet_module() -> type:
    """The ``unet_controlnets`` graph's module class."""
    import torch

    class UNetControlNets(torch.nn.Module):
        """UNet + several ControlNets (taking their conditioning embeddings):
        residuals scaled per net, summed, fed to the UNet; or one ControlNet-Union
        (``union``) over condition slots. Inputs by name (``names``): SDXL (``xl``)
        also takes the pooled text embeddings and time ids; IP-Adapter (``ip_scale``)
        the reference images' embeddings and the adapter scale; cross-frame
        (``xf``, :mod:`.cross_frame`) the anchor's keys and values, returning
        the frame's own after ``noise_pred``; ``prompt_kv``
        (:mod:`.prompt_kv`) the prompt's cross-attention keys and values."""

        def __init__(self, unet: Any, controlnets: list[Any], names: list[str],
                     ip_scale: Any = None, xl: bool = False, union: Any = None,
                     xf: Any = None, prompt_kv: Any = None) -> None:
            super().__init__()
            self.unet = unet
            self.controlnets = torch.nn.ModuleList(
                [without_cond_embedding(n) for n in controlnets])
            self.union = without_cond_embedding(union) if union is not None else None
            self.names = names
            self.ip_scale = ip_scale
            self.xl = xl
            self.xf = xf
            self.prompt_kv = prompt_kv

        def forward(self, *args: Any) -> Any:
            x = dict(zip(self.names, args, strict=True))
            if self.prompt_kv is not None:
                self.prompt_kv.feed(x)
            added: dict[str, Any] = {}
            if self.xl:
                added = {"text_embeds": x["text_embeds"], "time_ids": x["time_ids"]}
            down, mid = (self._union(x, added) if self.union is not None
                         else self._nets(x, added))
            if "image_embeds" in x:
                self.ip_scale.value = x["ip_scale"]
                added["image_embeds"] = [x["image_embeds"]]
            if self.xf is not None:
                self.xf.feed(x)
            kw = {"added_cond_kwargs": added} if added else {}
            out = self.unet(x["sample"], x["timestep"],
                            encoder_hidden_states=x["encoder_hidden_states"],
                            down_block_additional_residuals=down,
                            mid_block_additional_residual=mid, return_dict=False, **kw)[0]
            return out if self.xf is None else (out, *self.xf.outputs())

        def _nets(self, x: dict[str, Any], added: dict[str, Any]) -> tuple[list[Any], Any]:
            """Each ControlNet's residuals at its scale, summed (as
            ``MultiControlNetModel``)."""
            net_kw = {"added_cond_kwargs": dict(added)} if added else {}
            down = mid = None
            for i, net in enumerate(self.controlnets):
                d, m = net(x["sample"], x["timestep"],
                           encoder_hidden_states=x["encoder_hidden_states"],
                           controlnet_cond=x[f"cond_emb_{i}"], conditioning_scale=x["scales"][i],
                           return_dict=False, **net_kw)
                if down is None:
                    down, mid = list(d), m
                else:
                    down = [a + b for a, b in zip(down, d, strict=True)]
                    mid = mid + m
            return down, mid

        def _union(self, x: dict[str, Any], added: dict[str, Any]) -> tuple[list[Any], Any]:
            """ControlNet-Union over every condition slot (its several-conditions
            path: per-slot scales on the inputs), the outputs times ``out_scale``. With
            one present condition the engine feeds scales (1, 0, ...) and out_scale s:
            the union's single-condition path. An absent slot has scale 0, and the
            union's transformer attends across the batch, not across the slots, so
            it changes nothing."""
            k = len(self.names_of("cond_emb_"))
            d, m = self.union(x["sample"], x["timestep"],
                              encoder_hidden_states=x["encoder_hidden_states"],
                              controlnet_cond=[x[f"cond_emb_{i}"] for i in range(k)],
                              control_type=x["control_type"],
                              control_type_idx=[x["control_idx"][i] for i in range(k)],
                              conditioning_scale=[x["scales"][i] for i in range(k)],
                              added_cond_kwargs=dict(added), return_dict=False)
            s = x["out_scale"]
            return [r * s for r in d], m * s

        def names_of(self, prefix: str) -> list[str]:
            return [n for n in self.names if n.startswith(prefix)]

    return UNetControlNets


def encoder_modules() -> tuple[type, type, type, type]:
    """The text encoder, VAE encoder and decoder and image encoder graphs' module
    classes."""
    import torch

    class TextEncoder(torch.nn.Module):
        """``last_hidden_state`` (SD 1.5); SDXL (``xl``): the first output (hidden
        states, or the projected pooled embedding of the second encoder) and the
        penultimate hidden states the SDXL pipelines use."""

        def __init__(self, enc: Any, xl: bool = False) -> None:
            super().__init__()
            self.enc = enc
            self.xl = xl

        def forward(self, input_ids: Any) -> Any:
            if not self.xl:
                return self.enc(input_ids)[0]
            out = self.enc(input_ids, output_hidden_states=True)
            return out[0], out.hidden_states[-2]

    class VaeEncoder(torch.nn.Module):
        def __init__(self, vae: Any) -> None:
            super().__init__()
            self.vae = vae

        def forward(self, image: Any) -> Any:
            return self.vae.encode(image).latent_dist.parameters

    class VaeDecoder(torch.nn.Module):
        def __init__(self, vae: Any) -> None:
            super().__init__()
            self.vae = vae

        def forward(self, latent: Any) -> Any:
            return self.vae.decode(latent, return_dict=False)[0]

    class ImageEncoder(torch.nn.Module):
        def __init__(self, enc: Any) -> None:
            super().__init__()
            self.enc = enc

        def forward(self, pixel_values: Any) -> Any:
            return self.enc(pixel_values).image_embeds

    return TextEncoder, VaeEncoder, VaeDecoder, ImageEncoder


def wrapper_modules() -> tuple[type, ...]:
    """The wrapper module classes of every exported graph, defined on first use so
    that importing this module needs no torch."""
    return (control_embed_module(), unet_module(), *encoder_modules())
