"""Cross-frame attention (:mod:`..cross_frame`) in the exported UNet graph.

The torch engine remembers the anchor frame's ``attn1`` input hidden states and
projects ``concat(current, anchor)`` to keys and values at every step of every
later frame. The cross-frame variant of the UNet graph (``ExportSpec.cross_frame``)
caches the anchor's *projected* keys and values instead, so a later frame only
projects its own tokens:

- inputs ``anchor_use`` (1,) float (1: attend to the anchor, 0: no anchor yet)
  and, per UNet self-attention layer ``j`` (the layers the torch processors
  take, in ``unet.attn_processors`` order), ``anchor_key_j`` and
  ``anchor_value_j`` (B, tokens, channels);
- outputs, after ``noise_pred``, ``key_j`` and ``value_j``: the current frame's
  keys and values of layer ``j`` (what a later frame feeds back as its anchor).

Each layer attends with its queries to ``concat(k, k_anchor)`` /
``concat(v, v_anchor)``; with ``anchor_use`` 0 the anchor half is the frame's own
keys and values, and attending to every key twice is plain self-attention (the
softmax weights halve, the sum is the same), so an anchor frame's picture is
the plain one (up to rounding) and one graph serves every frame of a shot.
The ControlNets' attention stays plain (as on torch). The plain graph is not
touched: a session without ``cross_frame`` never loads this one.

Memory: per layer and recorded step the anchor holds keys and values, two
(batch, tokens, channels) tensors where torch holds one of hidden states —
twice torch's bytes, with the same bound (one anchor frame; two during a
``"previous"`` call) — and saves re-projecting the anchor in every step.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from .attention import AttentionBase

USE = "anchor_use"


def key_in(j: int) -> str:
    return f"anchor_key_{j}"


def value_in(j: int) -> str:
    return f"anchor_value_{j}"


def key_out(j: int) -> str:
    return f"key_{j}"


def value_out(j: int) -> str:
    return f"value_{j}"


class CrossFrameIO:
    """What the export's cross-frame layers read (anchor inputs) and write (their
    own keys and values), by layer index."""

    def __init__(self) -> None:
        self.layers = 0  # cross-frame layers (set by :func:`cross_frame_export`)
        self.names: list[str] = []  # their module names, by index
        self.use: Any = None
        self.keys: dict[int, Any] = {}  # anchor inputs
        self.values: dict[int, Any] = {}
        self.out: dict[int, tuple[Any, Any]] = {}  # this frame's (key, value)

    def feed(self, named: dict[str, Any]) -> None:
        """Take the anchor inputs from the graph's named inputs."""
        self.use = named.get(USE)
        self.keys = {j: named[key_in(j)] for j in range(self.layers) if key_in(j) in named}
        self.values = {j: named[value_in(j)] for j in self.keys}

    def outputs(self) -> list[Any]:
        """``key_0``, ``value_0``, ``key_1``... of the last forward."""
        return [t for j in sorted(self.out) for t in self.out[j]]


class CrossFrameExport(AttentionBase):
    """An ``attn1`` processor for export: own keys/values to :class:`CrossFrameIO`,
    attention over own + anchor keys/values (own twice without an anchor)."""

    def __init__(self, index: int, io: CrossFrameIO, name: str) -> None:
        self.index = index
        self.io = io
        self.name = name

    def __call__(self, attn: Any, hidden_states: Any, encoder_hidden_states: Any = None,
                 attention_mask: Any = None, temb: Any = None, *args: Any, **kw: Any) -> Any:
        import torch

        if (encoder_hidden_states is not None or attention_mask is not None
                or hidden_states.ndim != 3):
            raise NotImplementedError(
                f"cross-frame export: {self.name} is not a plain 3-D self-attention (a "
                "mask, cross-attention states or 4-D input): use the torch engine")
        residual = hidden_states
        q, k, v = attn.to_q(hidden_states), attn.to_k(hidden_states), attn.to_v(hidden_states)
        self.io.out[self.index] = (k, v)
        ka, va = self.io.keys.get(self.index), self.io.values.get(self.index)
        if ka is None:  # the dry run that finds the layers and their shapes
            ka, va = k, v
        else:
            use = self.io.use.reshape(1, 1, 1) > 0.5
            ka, va = torch.where(use, ka, k), torch.where(use, va, v)
        out = self._core(q, torch.cat([k, ka], dim=1), torch.cat([v, va], dim=1), attn.heads)
        return self._post(attn, out, residual, None)


def eligible(attn: Any) -> bool:
    """Can this ``attn1`` export as cross-frame (the torch processor's plain cases
    aside: no spatial/group norm, no q/k norms)?"""
    return (attn.spatial_norm is None and attn.group_norm is None and attn.norm_q is None
            and attn.norm_k is None)


@contextlib.contextmanager
def cross_frame_export(unet: Any, io: CrossFrameIO, fused: bool = True) -> Iterator[list[str]]:
    """Within: the UNet's ``attn1`` layers (those :class:`..cross_frame.CrossFrameController`
    takes) have :class:`CrossFrameExport` processors; yields their names in index
    order. Restored after."""
    from diffusers.models.attention_processor import Attention

    layers = {n.removesuffix(".processor"): n for n in unet.attn_processors
              if n.endswith("attn1.processor")}
    mods = {name: m for name, m in unet.named_modules()
            if isinstance(m, Attention) and name in layers}
    bad = [n for n, m in mods.items() if not eligible(m)]
    if bad:
        raise NotImplementedError(f"cross-frame export: layers {bad[:3]} have norms the "
                                  "onnx graph does not take: use the torch engine")
    names = [n for n in layers if n in mods]
    old = {n: mods[n].processor for n in names}
    io.layers = len(names)
    try:
        for j, n in enumerate(names):
            proc = CrossFrameExport(j, io, n)
            proc.fused = fused
            mods[n].set_processor(proc)
        yield names
    finally:
        for n, p in old.items():
            mods[n].set_processor(p)
