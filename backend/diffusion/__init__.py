"""Diffusion restyling of the passes, for users with real weights.

- :mod:`.seeds` — the per-frame seed (pure Python); :mod:`.carry` — what a temporal
  client keeps to resume a chain exactly (numpy).
- :mod:`.temporal` — warping by the renderer's motion vectors, occlusion from
  depth, temporal init, warping error (pure numpy).
- :mod:`.options` — the option vocabulary (load keys, OPEN checks, ``cross_frame``).
- :mod:`.components` — the model registry (TOML), weight checks before a shot,
  loading (torch, diffusers); :mod:`.tiny` — tiny random components (tests, no weights).
- :mod:`.controlnet_pipeline` — :class:`RestylePipeline`, SD 1.5 + several
  ControlNets, LoRA, IP-Adapter, few-step schedulers, temporal mode (torch);
  :mod:`.sdxl_pipeline` — SDXL; :mod:`.cross_frame` — cross-frame attention.
- :mod:`.onnx` — the ``onnx`` engine (export, onnxruntime, TensorRT).

Only ``seeds``, ``carry``, ``temporal`` and ``options`` import without torch; import the
others explicitly.
"""

from __future__ import annotations

from .seeds import frame_seed

__all__ = ["frame_seed"]
