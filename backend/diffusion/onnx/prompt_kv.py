"""The prompt's cross-attention keys and values, once a frame instead of once a step.

Every cross-attention layer (``attn2``) of the UNet and the ControlNets projects
the text embedding to keys and values (``to_k``/``to_v``); the embedding is
fixed for a frame, so these are the same at every step. The export moves them
out of the UNet graph:

- ``prompt_kv.onnx``: ``encoder_hidden_states`` (B, 77, D) -> ``prompt_key_j``,
  ``prompt_value_j`` (B, 77, C_j) for every such layer ``j``;
- the UNet graph takes ``prompt_key_j``/``prompt_value_j`` as inputs where it
  projected ``encoder_hidden_states``.

The engine runs ``prompt_kv`` once a frame (per batch chunk) and feeds its
outputs at every step. Only layers whose keys/values come straight from the
graph's ``encoder_hidden_states`` move (SD 1.5, SDXL, IP-Adapter's text part);
any other keeps its projection in the UNet graph (found by a dry run).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

EHS = "encoder_hidden_states"


def key_name(j: int) -> str:
    return f"prompt_key_{j}"


def value_name(j: int) -> str:
    return f"prompt_value_{j}"


class PromptKVIO:
    """The lookups' shared state: the graph's text embedding (dry run), which
    layers take it, and the key/value inputs of the traced graph."""

    def __init__(self) -> None:
        self.ehs: Any = None
        self.probing = True
        self.direct: dict[tuple[int, str], bool] = {}  # (layer, "k"|"v") -> takes ehs
        self.inputs: dict[str, Any] = {}

    def feed(self, named: dict[str, Any]) -> None:
        self.ehs = named.get(EHS)
        self.inputs = named


def _lookup_class() -> type:
    import torch

    class Lookup(torch.nn.Module):
        """Stands for ``to_k``/``to_v`` of one cross-attention layer: while probing,
        runs the projection and notes whether its input is the graph's text
        embedding; after, returns the graph input of that layer's keys/values."""

        def __init__(self, io: PromptKVIO, j: int, which: str, original: Any) -> None:
            super().__init__()
            self.io, self.j, self.which = io, j, which
            self.__dict__["original"] = original  # not a submodule: its weights stay out

        def forward(self, x: Any) -> Any:
            if self.io.probing:
                self.io.direct[(self.j, self.which)] = x is self.io.ehs
                return self.original(x)
            name = key_name(self.j) if self.which == "k" else value_name(self.j)
            return self.io.inputs[name]

    return Lookup


def cross_attentions(*modules: Any) -> list[Any]:
    """The cross-attention layers of ``modules``, in module order."""
    from diffusers.models.attention_processor import Attention

    return [m for module in modules for m in module.modules()
            if isinstance(m, Attention) and getattr(m, "is_cross_attention", False)]


@contextlib.contextmanager
def prompt_kv_export(io: PromptKVIO, *modules: Any) -> Iterator[list[tuple[Any, Any]]]:
    """Within: the cross-attention ``to_k``/``to_v`` of ``modules`` are lookups
    (probing until :func:`settle`); yields the (to_k, to_v) originals by layer
    index. Restored after."""
    lookup = _lookup_class()
    layers = cross_attentions(*modules)
    originals = [(m.to_k, m.to_v) for m in layers]
    try:
        for j, m in enumerate(layers):
            m.to_k = lookup(io, j, "k", m.to_k)
            m.to_v = lookup(io, j, "v", m.to_v)
        yield originals
    finally:
        for m, (k, v) in zip(layers, originals, strict=True):
            m.to_k, m.to_v = k, v


def settle(io: PromptKVIO, *modules: Any) -> list[int]:
    """After the dry run: layers whose keys and values both come from the text
    embedding keep their lookups (returned, by index), the others get their
    projections back; the lookups stop probing."""
    kept = []
    for j, m in enumerate(cross_attentions(*modules)):
        if io.direct.get((j, "k")) and io.direct.get((j, "v")):
            kept.append(j)
        else:
            m.to_k, m.to_v = m.to_k.original, m.to_v.original
    io.probing = False
    return kept


def prompt_kv_module(originals: list[tuple[Any, Any]], layers: list[int]) -> Any:
    """The ``prompt_kv`` graph's module: the kept layers' projections of the text
    embedding."""
    import torch

    class PromptKV(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = torch.nn.ModuleList([p for j in layers for p in originals[j]])

        def forward(self, ehs: Any) -> tuple[Any, ...]:
            return tuple(p(ehs) for p in self.proj)

    return PromptKV()
