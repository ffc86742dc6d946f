"""Cross-frame attention to an anchor frame, one frame at a time (temporal consistency).

Text2Video-Zero's ``CrossFrameAttnProcessor2_0`` (diffusers) denoises all frames
in one batch and gives every frame's self-attention the keys/values of frame 0.
We restyle one frame per call, so the anchor's side is remembered instead:

- while the **anchor** frame denoises, each UNet self-attention layer (``attn1``)
  stores its input hidden states, keyed by layer name and timestep;
- while a **later** frame denoises, each ``attn1`` attends with its own queries
  to keys/values of ``concat(current, anchor)`` along the token axis, taking the
  anchor's hidden states of the same layer at the nearest recorded timestep
  (img2img frames start at a later timestep than fresh ones: nearest, not index).

Anchors: ``"first"`` — the first frame restyled in the session with this option
(re-running that frame number records it again); ``"previous"`` — the previous
frame number (each frame records, the next one attends; a gap in the frame
numbers makes a frame a fresh anchor). The anchor frame's own output is exactly
what it is without cross-frame attention.

The cache lives in the per-session ``state`` dict (``state["cross_frame"]``, a
:class:`CrossFrameState`), so sessions sharing one pipeline never mix; the
processors installed on the shared UNet only read the call that is active.

Memory (per anchor): for every ``attn1`` layer and every recorded step, one
(batch, tokens, channels) tensor in the UNet's dtype on its device — batch 2 with
classifier-free guidance. SD 1.5 at 512²: about 11.6 M values per batch entry per
step (≈ 23 MB fp16), so 4 steps with CFG ≈ 185 MB; SDXL at 1024² (10 layers at
64² x 640, 60 at 32² x 1280) ≈ 105 M values (≈ 210 MB fp16) per entry and step, so
4 steps with CFG ≈ 1.7 GB. ``"previous"`` holds up to two frames during a call.
:meth:`CrossFrameState.nbytes` measures it.

Use :func:`cross_frame_session` around one pipeline call (the hook), or wrap a
:class:`~.controlnet_pipeline.RestylePipeline` in :class:`CrossFrameRestyle`
to get the session option ``cross_frame: "first" | "previous" | None``.
Loading an IP-Adapter resets every processor of the UNet: enable afterwards
(:func:`cross_frame_session` installs lazily, so this only matters for manual use).
The onnx engine keeps the same anchor rules (:func:`begin_run`, :func:`end_run`)
with the anchor's keys and values instead of its hidden states
(:mod:`.onnx.cross_frame`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .options import CROSS_FRAME_MODES as MODES
from .options import parse_cross_frame

_ATTR = "_painted_skin_cross_frame"

# layer name -> timestep -> hidden states (batch, tokens, channels)
Cache = dict[str, dict[float, Any]]


@dataclass
class CrossFrameState:
    """The anchor of one session (kept in its ``state`` dict)."""

    mode: str
    anchor: Cache = field(default_factory=dict)
    anchor_frame: int | None = None

    def nbytes(self) -> int:
        """Bytes held by the anchor's hidden states."""
        return sum(t.numel() * t.element_size() for d in self.anchor.values() for t in d.values())


@dataclass
class _Run:
    """The call in progress: where to record, what to attend to, the timestep."""

    record: Cache | None
    attend: Cache | None
    owner: int = 0  # id() of the session's state dict
    timestep: float | None = None


class CrossFrameController:
    """What :func:`enable_cross_frame_attention` installs on a UNet: ``attn1``
    processors (inert unless a call is active) and a forward pre-hook that
    notes the timestep of each UNet call."""

    def __init__(self, unet: Any, anchor: str = "first") -> None:
        if anchor not in MODES:
            raise ValueError(f"cross-frame anchor {anchor!r}: use one of {', '.join(MODES)}")
        self.anchor = anchor
        self.active: _Run | None = None
        procs = dict(unet.attn_processors)
        self.names = [n for n in procs if n.endswith("attn1.processor")]
        unet.set_attn_processor({n: (CrossFrameAttnProcessor(n, p, self) if n in self.names else p)
                                 for n, p in procs.items()})
        self._hook = unet.register_forward_pre_hook(self._pre_forward, with_kwargs=True)

    def _pre_forward(self, module: Any, args: tuple, kwargs: dict) -> None:
        run = self.active
        if run is None:
            return
        t = args[1] if len(args) > 1 else kwargs.get("timestep")
        run.timestep = float(t.flatten()[0]) if hasattr(t, "flatten") else float(t)

    def remove(self, unet: Any) -> None:
        procs = {n: (p.original if isinstance(p, CrossFrameAttnProcessor) else p)
                 for n, p in unet.attn_processors.items()}
        unet.set_attn_processor(procs)
        self._hook.remove()


class CrossFrameAttnProcessor:
    """Self-attention that records its input (anchor frame) or attends to
    ``concat(current, anchor)`` (later frames); otherwise the original processor."""

    def __init__(self, name: str, original: Any, controller: CrossFrameController) -> None:
        self.name = name
        self.original = original
        self.controller = controller

    def __call__(self, attn: Any, hidden_states: Any, encoder_hidden_states: Any = None,
                 attention_mask: Any = None, temb: Any = None, *args: Any, **kwargs: Any) -> Any:
        run = self.controller.active
        plain = (run is None or encoder_hidden_states is not None or attention_mask is not None
                 or hidden_states.ndim != 3 or attn.spatial_norm is not None
                 or attn.group_norm is not None or run.timestep is None)
        anchor = None
        if not plain:
            if run.record is not None:
                run.record.setdefault(self.name, {})[run.timestep] = hidden_states.detach().clone()
            anchor = nearest_anchor(run.attend, self.name, run.timestep)
            if anchor is not None and (anchor.shape[0] != hidden_states.shape[0]
                                       or anchor.shape[2] != hidden_states.shape[2]):
                anchor = None
        if anchor is None:
            return self.original(attn, hidden_states, encoder_hidden_states, attention_mask, temb,
                                 *args, **kwargs)
        return _attend(attn, hidden_states, anchor.to(hidden_states.device, hidden_states.dtype))


def nearest_anchor(cache: Cache | None, name: str, t: float) -> Any:
    """The anchor's recorded states of layer ``name`` at the step nearest ``t`` (the
    torch processors and the onnx engine both look them up so)."""
    steps = cache.get(name) if cache else None
    if not steps:
        return None
    return steps[min(steps, key=lambda k: abs(k - t))]


def _attend(attn: Any, hidden_states: Any, anchor: Any) -> Any:
    """``AttnProcessor2_0`` for 3-D self-attention with the anchor's tokens
    appended to the keys and values."""
    import torch
    import torch.nn.functional as F

    residual = hidden_states
    b = hidden_states.shape[0]
    query = attn.to_q(hidden_states)
    kv = torch.cat([hidden_states, anchor], dim=1)
    key, value = attn.to_k(kv), attn.to_v(kv)
    head_dim = key.shape[-1] // attn.heads
    query = query.view(b, -1, attn.heads, head_dim).transpose(1, 2)
    key = key.view(b, -1, attn.heads, head_dim).transpose(1, 2)
    value = value.view(b, -1, attn.heads, head_dim).transpose(1, 2)
    if attn.norm_q is not None:
        query = attn.norm_q(query)
    if attn.norm_k is not None:
        key = attn.norm_k(key)
    out = F.scaled_dot_product_attention(query, key, value, dropout_p=0.0, is_causal=False,
                                         scale=attn.scale)
    out = out.transpose(1, 2).reshape(b, -1, attn.heads * head_dim).to(query.dtype)
    out = attn.to_out[1](attn.to_out[0](out))
    if attn.residual_connection:
        out = out + residual
    return out / attn.rescale_output_factor


def enable_cross_frame_attention(unet: Any, anchor: str = "first") -> CrossFrameController:
    """Install the cross-frame processors on ``unet``'s self-attention layers
    (idempotent: returns the installed controller, with ``anchor`` as its
    default mode). They do nothing outside :func:`cross_frame_session`."""
    ctl = getattr(unet, _ATTR, None)
    if ctl is None:
        ctl = CrossFrameController(unet, anchor)
        object.__setattr__(unet, _ATTR, ctl)
    elif anchor not in MODES:
        raise ValueError(f"cross-frame anchor {anchor!r}: use one of {', '.join(MODES)}")
    else:
        ctl.anchor = anchor
    return ctl


def disable_cross_frame_attention(unet: Any) -> None:
    """Put the original processors back and remove the hook (no-op when off)."""
    ctl = getattr(unet, _ATTR, None)
    if ctl is None:
        return
    if ctl.active is not None:
        raise RuntimeError("cross-frame attention: cannot disable during a call")
    ctl.remove(unet)
    object.__delattr__(unet, _ATTR)


def is_enabled(unet: Any) -> bool:
    return getattr(unet, _ATTR, None) is not None


def begin_run(state: dict[str, Any], frame: int | None, mode: str) -> tuple[CrossFrameState, _Run]:
    """The session's anchor state and what one call of it records and attends to
    (shared by the torch processors and the onnx engine)."""
    cf = state.get("cross_frame")
    if not isinstance(cf, CrossFrameState) or cf.mode != mode:
        cf = state["cross_frame"] = CrossFrameState(mode)
    if mode == "first":
        fresh = not cf.anchor or (frame is not None and frame == cf.anchor_frame)
        return cf, _Run({} if fresh else None, None if fresh else cf.anchor, id(state))
    follows = (cf.anchor_frame is None or frame is None or frame == cf.anchor_frame + 1)
    return cf, _Run({}, cf.anchor if cf.anchor and follows else None, id(state))


def end_run(cf: CrossFrameState, run: _Run, frame: int | None) -> None:
    """After a call that succeeded: what it recorded becomes the anchor (the old
    one is dropped, so at most one anchor outlives a call)."""
    if run.record is not None:
        cf.anchor, cf.anchor_frame = run.record, frame


@contextmanager
def cross_frame_session(unet: Any, state: dict[str, Any] | None, frame: int | None,
                        mode: str | bool | None) -> Iterator[CrossFrameState | None]:
    """Make one pipeline call (one frame of the session owning ``state``) use
    cross-frame attention with anchor ``mode`` ("first", "previous"; True: the
    installed default; None/False/"off": plain, yields None). Installs the
    processors on first use. A call that raises (e.g. cancelled) records nothing."""
    mode = parse_cross_frame(mode, ctl_mode(unet))
    if mode is None or state is None:
        yield None
        return
    if not hasattr(unet, "set_attn_processor"):
        raise ValueError("cross_frame needs a diffusers UNet here (the onnx engine runs it "
                         "through OnnxRestylePipeline.cross_frame)")
    ctl = getattr(unet, _ATTR, None) or enable_cross_frame_attention(unet, mode)
    with anchored_call(ctl, "active", state, frame, mode) as cf:
        yield cf


@contextmanager
def anchored_call(holder: Any, slot: str, state: dict[str, Any], frame: int | None,
                  mode: str) -> Iterator[CrossFrameState]:
    """One call's anchor bookkeeping, for the torch processors (``holder`` the
    controller) and the onnx engine (the host): the call's :class:`_Run` sits in
    ``holder.<slot>`` while it runs (one call at a time; a nested call of the same
    session shares it), and what it recorded becomes the anchor only if it succeeds."""
    active = getattr(holder, slot)
    if active is not None and active.owner == id(state):
        yield state.get("cross_frame")  # nested (a wrapper around this run): one session
        return
    if active is not None:
        raise RuntimeError("cross-frame attention: one call at a time per pipeline")
    cf, run = begin_run(state, frame, mode)
    setattr(holder, slot, run)
    try:
        yield cf
    finally:
        setattr(holder, slot, None)
    end_run(cf, run, frame)  # reached only when the call succeeded


def ctl_mode(unet: Any) -> str:
    """The default anchor of ``unet``'s installed processors ("first" when none)."""
    ctl = getattr(unet, _ATTR, None)
    return ctl.anchor if ctl is not None else "first"


class CrossFrameRestyle:
    """A :class:`RestylePipeline` (anything with ``run`` and ``txt2img.unet``)
    with the session option ``cross_frame: "first" | "previous" | None``; every
    other attribute is the wrapped pipeline's."""

    def __init__(self, pipe: Any) -> None:
        self.pipe = pipe

    def __getattr__(self, name: str) -> Any:
        if name == "pipe":
            raise AttributeError(name)
        return getattr(self.pipe, name)

    def run(self, passes: dict[str, np.ndarray], *, options: dict[str, Any] | None = None,
            frame: int | None = None, state: dict[str, Any] | None = None, **kw: Any) -> Any:
        mode = (options or {}).get("cross_frame")
        session = getattr(self.pipe, "cross_frame", None)  # the pipeline's own (onnx engine)
        with (session(state, frame, mode) if session is not None
              else cross_frame_session(self.pipe.txt2img.unet, state, frame, mode)):
            return self.pipe.run(passes, options=options, frame=frame, state=state, **kw)

    def __call__(self, passes: dict[str, np.ndarray], **kw: Any) -> np.ndarray:
        return self.run(passes, **kw).image
