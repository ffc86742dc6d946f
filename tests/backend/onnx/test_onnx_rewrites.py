"""The exact rewrites used for export: sub-pixel upsampling convolutions and
MultiHeadAttention processors (same results in torch, modules restored after)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("diffusers")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from painted_skin.backend.diffusion.onnx.attention import IPScale, fused_attention  # noqa: E402
from painted_skin.backend.diffusion.onnx.rewrites import (  # noqa: E402
    subpixel_upsampling,
    upsample_conv,
)
from painted_skin.backend.diffusion.tiny import random_ip_adapter, tiny_components  # noqa: E402


@pytest.mark.parametrize("shape", [(1, 8, 5, 5), (2, 3, 4, 9), (1, 16, 16, 12)])
def test_upsample_conv_is_nearest_upsampling_then_conv(shape) -> None:
    g = torch.Generator().manual_seed(sum(shape))
    conv = torch.nn.Conv2d(shape[1], 7, 3, padding=1)
    x = torch.randn(*shape, generator=g)
    with torch.no_grad():
        ref = conv(F.interpolate(x, scale_factor=2.0, mode="nearest"))
        out = upsample_conv(x, conv)
    assert out.shape == ref.shape
    assert float((out - ref).abs().max()) <= 1e-5


def test_rewrites_are_exact_in_torch_and_undone_after() -> None:
    c = tiny_components(0)
    vae, unet = c.vae, c.unet
    g = torch.Generator().manual_seed(1)
    z = torch.randn(1, 4, 16, 16, generator=g)
    with torch.no_grad():
        ref = vae.decode(z).sample
        procs = dict(unet.attn_processors)
        with subpixel_upsampling(vae, unet) as n_up, fused_attention(vae, unet) as n_att:
            out = vae.decode(z).sample
        assert n_up == 2 and n_att == 14  # VAE + UNet upsamplers; UNet 12 + VAE 2 attentions
    assert float((out - ref).abs().max()) <= 1e-5
    assert all("forward" not in m.__dict__ for m in vae.modules())
    assert all(unet.attn_processors[k] is p for k, p in procs.items())


def test_ip_adapter_attention_scale_is_a_tensor_input() -> None:
    c = tiny_components(0)
    from diffusers import StableDiffusionPipeline

    pipe = StableDiffusionPipeline(c.vae, c.text_encoder, c.tokenizer, c.unet, c.scheduler,
                                   None, None, requires_safety_checker=False)
    pipe.load_ip_adapter(random_ip_adapter(c.unet, 32, seed=2, std=1.0), subfolder="",
                         weight_name="", image_encoder_folder=None)
    g = torch.Generator().manual_seed(2)
    lat, ehs = torch.randn(1, 4, 16, 16, generator=g), torch.randn(1, 77, 32, generator=g)
    img = torch.randn(1, 2, 32, generator=g)
    scale = IPScale()
    for s in (0.0, 0.7):
        pipe.set_ip_adapter_scale(s)
        with torch.no_grad():
            ref = c.unet(lat, 10, ehs, added_cond_kwargs={"image_embeds": [img]}).sample
            scale.value = torch.tensor([s])
            with fused_attention(c.unet, ip_scale=scale):
                out = c.unet(lat, 10, ehs, added_cond_kwargs={"image_embeds": [img]}).sample
        assert float((out - ref).abs().max()) <= 1e-5
