"""SDXL on the ``onnx`` engine.

:class:`OnnxRestyleXLPipeline` is :class:`~.sdxl_pipeline.RestyleXLPipeline`
with the shims of :class:`~.onnx_engine.OnnxRestylePipeline`: the UNet +
ControlNets graph also takes SDXL's added conditions (``text_embeds``, the
second text encoder's pooled projection, and ``time_ids``), both text encoders
are graphs returning what SDXL's ``encode_prompt`` reads (first output and
penultimate hidden states), the VAE and the control embeddings as for SD 1.5.
Separate ControlNets only: ControlNet-Union is not in the graphs (use torch).
"""

from __future__ import annotations

from typing import Any

from .onnx_engine import OnnxRestylePipeline
from .sdxl_pipeline import RestyleXLPipeline, XLComponents


class OnnxRestyleXLPipeline(OnnxRestylePipeline, RestyleXLPipeline):
    """SDXL restyling on onnxruntime (the options of :class:`RestyleXLPipeline`,
    the engine keywords of :class:`OnnxRestylePipeline`)."""

    name = "sdxl-controlnet"

    def __init__(self, components: XLComponents, device: str = "cpu", dtype: Any = None,
                 **engine: Any) -> None:
        if components.union is not None:
            raise NotImplementedError("ControlNet-Union is not in the ONNX graphs: use the "
                                      "torch engine, or separate ControlNets")
        super().__init__(components, device, dtype, **engine)
