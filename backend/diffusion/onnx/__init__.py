"""The ``onnx`` engine of the diffusion pipelines: export to ONNX, run in onnxruntime.

- :mod:`.export` — the graphs of a pipeline's components for one frame size (UNet +
  ControlNets in one graph, VAE, text encoders, image encoder, prompt K/V), cached.
- :mod:`.attention`, :mod:`.rewrites`, :mod:`.prompt_kv`, :mod:`.cross_frame`,
  :mod:`.external` — what the export rewrites (fused attention, upsampling on the
  small grid, the prompt's keys/values once, cross-frame anchors, weights > 2 GB).
- :mod:`.runtime` — execution providers and their options, one session per graph;
  :mod:`.tensorrt` — TensorRT's library and engine cache.
- :mod:`.engine` — :class:`~.engine.OnnxEngine`, the graphs of one export as a model.
- :mod:`.shims` — stand-ins for diffusers' torch modules; :mod:`.pipeline` —
  :class:`~.pipeline.OnnxRestylePipeline` (SD 1.5); :mod:`.xl` — SDXL.

Importing this package imports nothing heavy; each module imports torch or
onnxruntime where it needs them.
"""
