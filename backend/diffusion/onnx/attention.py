"""Attention exported as one ``com.microsoft::MultiHeadAttention`` node.

Exported as is, diffusers' attention becomes reshape/transpose/MatMul/Softmax/
MatMul chains that onnxruntime's fusions do not recognise in the dynamo
exporter's output. :func:`fused_attention` swaps the processors of every
diffusers ``Attention`` in some modules for ones whose attention core is a
single MultiHeadAttention contrib node (onnxruntime's CPU and CUDA kernels;
TensorRT has none, so TensorRT exports keep the plain graph). In eager torch
the same processors compute ``scaled_dot_product_attention`` exactly like
diffusers' ``AttnProcessor2_0``; the swap lasts for the export only.

IP-Adapter layers (``IPAdapterAttnProcessor2_0``) get ``IPAttention``:
text attention plus ``scale`` x attention to the image tokens, with the scale a
graph input (``IPScale.value``) instead of a constant baked into the graph.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

DOMAIN = "com.microsoft"


def _sdpa(q: Any, k: Any, v: Any, heads: int) -> Any:
    """(B, S, N*H) x (B, L, N*H) -> (B, S, N*H), as diffusers' AttnProcessor2_0."""
    import torch.nn.functional as F

    b, s, d = q.shape
    hd = d // heads
    qh, kh, vh = (t.reshape(b, -1, heads, hd).transpose(1, 2) for t in (q, k, v))
    o = F.scaled_dot_product_attention(qh, kh, vh, dropout_p=0.0, is_causal=False)
    return o.transpose(1, 2).reshape(b, s, d)


def _mha_function() -> type:
    import torch

    class MHA(torch.autograd.Function):
        """SDPA in torch; one MultiHeadAttention node for the TorchScript exporter."""

        @staticmethod
        def forward(ctx: Any, q: Any, k: Any, v: Any, heads: int) -> Any:
            return _sdpa(q, k, v, heads)

        @staticmethod
        def symbolic(g: Any, q: Any, k: Any, v: Any, heads: int) -> Any:
            out = g.op(f"{DOMAIN}::MultiHeadAttention", q, k, v, num_heads_i=heads)
            out.setType(q.type())
            return out

    return MHA


_MHA: Any = None


def mha(q: Any, k: Any, v: Any, heads: int) -> Any:
    """Multi-head attention of projected q, k, v ((B, S, N*H), (B, L, N*H)); the
    default scale 1/sqrt(H), as SDPA."""
    global _MHA
    import torch

    if torch.jit.is_tracing():  # TorchScript exporter
        if _MHA is None:
            _MHA = _mha_function()
        return _MHA.apply(q, k, v, heads)
    if torch.onnx.is_in_onnx_export():  # dynamo exporter
        return torch.onnx.ops.symbolic(f"{DOMAIN}::MultiHeadAttention", (q, k, v),
                                       {"num_heads": int(heads)}, dtype=q.dtype,
                                       shape=q.shape, version=1)
    return _sdpa(q, k, v, heads)


class AttentionBase:
    """The parts of ``AttnProcessor2_0`` around the attention core; ``fused``
    False: the core exports as plain ops (TensorRT)."""

    fused = True

    def _core(self, q: Any, k: Any, v: Any, heads: int) -> Any:
        return mha(q, k, v, heads) if self.fused else _sdpa(q, k, v, heads)

    def _pre(self, attn: Any, hidden_states: Any, temb: Any) -> tuple[Any, tuple | None]:
        if attn.spatial_norm is not None:
            hidden_states = attn.spatial_norm(hidden_states, temb)
        shape = None
        if hidden_states.ndim == 4:
            shape = tuple(hidden_states.shape)
            b, c, h, w = shape
            hidden_states = hidden_states.reshape(b, c, h * w).transpose(1, 2)
        if attn.group_norm is not None:
            hidden_states = attn.group_norm(hidden_states.transpose(1, 2)).transpose(1, 2)
        return hidden_states, shape

    def _post(self, attn: Any, out: Any, residual: Any, shape: tuple | None) -> Any:
        out = attn.to_out[1](attn.to_out[0](out))
        if shape is not None:
            out = out.transpose(-1, -2).reshape(shape)
        if attn.residual_connection:
            out = out + residual
        return out / attn.rescale_output_factor


class Attention(AttentionBase):
    """``AttnProcessor2_0`` (no mask) with a MultiHeadAttention core."""

    def __call__(self, attn: Any, hidden_states: Any, encoder_hidden_states: Any = None,
                 attention_mask: Any = None, temb: Any = None, *args: Any, **kw: Any) -> Any:
        if attention_mask is not None:
            raise NotImplementedError("fused attention takes no attention mask")
        residual = hidden_states
        hidden_states, shape = self._pre(attn, hidden_states, temb)
        ctx = hidden_states if encoder_hidden_states is None else encoder_hidden_states
        if encoder_hidden_states is not None and attn.norm_cross:
            ctx = attn.norm_encoder_hidden_states(ctx)
        out = self._core(attn.to_q(hidden_states), attn.to_k(ctx), attn.to_v(ctx),
                         attn.heads)
        return self._post(attn, out, residual, shape)


class IPScale:
    """The IP-Adapter scale the :class:`IPAttention` layers read: a graph input."""

    value: Any = None


def _ip_attention_class() -> type:
    import torch

    class IPAttention(AttentionBase, torch.nn.Module):
        """``IPAdapterAttnProcessor2_0`` (one adapter, no masks) with MultiHeadAttention
        cores; the image attention is always computed and multiplied by the scale
        tensor (diffusers skips it at scale 0: the same result). A module, so that
        the exporters see its projections as weights of the model."""

        def __init__(self, original: Any, scale: IPScale) -> None:
            torch.nn.Module.__init__(self)
            self.to_k_ip = original.to_k_ip[0]
            self.to_v_ip = original.to_v_ip[0]
            self.scale = scale

        def forward(self, *args: Any, **kw: Any) -> Any:
            return _ip_call(self, *args, **kw)

    return IPAttention


def _ip_call(self: Any, attn: Any, hidden_states: Any, encoder_hidden_states: Any = None,
             attention_mask: Any = None, temb: Any = None, *args: Any, **kw: Any) -> Any:
    """IPAttention's forward."""
    if attention_mask is not None or not isinstance(encoder_hidden_states, tuple):
        raise NotImplementedError("fused IP-Adapter attention needs (text, [image]) "
                                  "states and no mask")
    text, (image,) = encoder_hidden_states
    image = image.reshape(image.shape[0], -1, image.shape[-1])  # (B, images x tokens, D)
    residual = hidden_states
    hidden_states, shape = self._pre(attn, hidden_states, temb)
    if attn.norm_cross:
        text = attn.norm_encoder_hidden_states(text)
    q = attn.to_q(hidden_states)
    out = self._core(q, attn.to_k(text), attn.to_v(text), attn.heads)
    ip = self._core(q, self.to_k_ip(image), self.to_v_ip(image), attn.heads)
    out = out + self.scale.value.to(out.dtype) * ip
    return self._post(attn, out, residual, shape)


@contextlib.contextmanager
def fused_attention(*modules: Any, ip_scale: IPScale | None = None,
                    fused: bool = True) -> Iterator[int]:
    """Within: the attention of ``modules`` exports as MultiHeadAttention nodes
    (``fused`` False: as plain ops, only the IP-Adapter scale becoming an input);
    yields how many layers were swapped; the processors are restored after.
    Layers with processors this does not know (masks, q/k norms, several
    IP-Adapters, cross-frame attention...) keep theirs."""
    from diffusers.models.attention_processor import (
        Attention as DiffusersAttention,
    )
    from diffusers.models.attention_processor import (
        AttnProcessor,
        AttnProcessor2_0,
        IPAdapterAttnProcessor,
        IPAdapterAttnProcessor2_0,
    )

    swapped: list[tuple[Any, Any]] = []
    try:
        for module in modules:
            for m in module.modules():
                if not isinstance(m, DiffusersAttention) or m.norm_q is not None \
                        or m.norm_k is not None:
                    continue
                proc = m.processor
                if type(proc) in (AttnProcessor, AttnProcessor2_0):
                    new: Any = Attention()
                elif (isinstance(proc, IPAdapterAttnProcessor | IPAdapterAttnProcessor2_0)
                      and ip_scale is not None and len(proc.to_k_ip) == 1):
                    new = _ip_attention_class()(proc, ip_scale)
                else:
                    continue
                new.fused = fused
                swapped.append((m, proc))
                m.set_processor(new)  # unregisters a module processor (IP-Adapter)
        yield len(swapped)
    finally:
        for m, proc in swapped:
            m.set_processor(proc)
