"""The graphs of one export folder run as one model: :class:`OnnxEngine`.

The UNet graph (UNet + ControlNets in one) takes the control images' embeddings,
computed once a frame (:meth:`OnnxEngine.control_embeddings`), the prompt's
cross-attention keys and values (once a prompt), IP-Adapter embeddings, SDXL's added
conditions and, in the cross-frame variant, the anchor frame's keys and values.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from .export import CONTROL, PROMPT_KV, UNET, ExportSpec
from .runtime import Graph, provider_chain


def _version(t: Any) -> int:
    """A tensor's in-place modification counter (-1 for inference-mode tensors,
    which have none: diffusers builds the control images once a call anyway)."""
    return -1 if t.is_inference() else t._version



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
        self.graphs = {name: Graph(self.folder / g["file"], self.chain, threads, device_id)
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
        # the prompt's cross-attention keys/values, computed once a frame (.prompt_kv)
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
        ``cross``: the cross-frame call (:class:`..cross_frame._Run`) of a
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
        from ..cross_frame import nearest_anchor
        from . import cross_frame as X

        if not self.cross_layers or cross is None or not cross.attend:
            return None
        shapes = self.inputs(UNET)
        out = {}
        for j in range(len(self.cross_layers)):
            for name, inp in ((X.key_out(j), X.key_in(j)), (X.value_out(j), X.value_in(j))):
                a = nearest_anchor(cross.attend, name, t)
                if a is None or a.shape[0] != n or tuple(a.shape[1:]) != shapes[inp][0][1:]:
                    return None
                out[inp] = a
        return out

    def _anchor_feeds(self, anchor: dict[str, Any] | None, i: int, b: int) -> dict[str, Any]:
        """The cross-frame inputs of batch rows ``i``..``i+b``: the anchor's, or zeros
        and ``anchor_use`` 0 (the frame attends to itself: plain attention)."""
        import torch

        from . import cross_frame as X

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

        from . import cross_frame as X

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

