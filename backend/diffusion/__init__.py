"""Diffusion restyling of the passes (issue 5).

- :mod:`.seeds` — the per-frame seed (pure Python).
- :mod:`.temporal` — warping by the renderer's motion vectors, occlusion from
  depth, temporal init, warping error (pure numpy).
- :mod:`.components` — the model registry (TOML), weight checks before a shot,
  loading, and tiny random components for tests (torch, diffusers).
- :mod:`.controlnet_pipeline` — :class:`RestylePipeline`, SD 1.5 + several
  ControlNets, LoRA, IP-Adapter, few-step schedulers, temporal mode (torch).

Only ``seeds`` and ``temporal`` import without torch; import the others explicitly.
"""

from __future__ import annotations

from .seeds import frame_seed

__all__ = ["frame_seed"]
