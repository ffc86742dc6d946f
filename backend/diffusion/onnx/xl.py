"""SDXL on the ``onnx`` engine.

:class:`OnnxRestyleXLPipeline` is :class:`~..sdxl_pipeline.RestyleXLPipeline`
with the shims of :class:`~.pipeline.OnnxRestylePipeline`: the UNet +
ControlNets graph also takes SDXL's added conditions (``text_embeds``, the
second text encoder's pooled projection, and ``time_ids``), both text encoders
are graphs returning what SDXL's ``encode_prompt`` reads (first output and
penultimate hidden states), the VAE and the control embeddings as for SD 1.5.
A ControlNet-Union is exported inside the same graph (one condition slot per
control kind; :mod:`.export`), its conditions' embeddings once a frame.
"""

from __future__ import annotations

from typing import Any

from ..sdxl_pipeline import RestyleXLPipeline, XLComponents
from .pipeline import OnnxRestylePipeline


class OnnxRestyleXLPipeline(OnnxRestylePipeline, RestyleXLPipeline):
    """SDXL restyling on onnxruntime (the options of :class:`RestyleXLPipeline`,
    the engine keywords of :class:`OnnxRestylePipeline`)."""

    name = "sdxl-controlnet"

    def __init__(self, components: XLComponents, device: str = "cpu", dtype: Any = None,
                 **engine: Any) -> None:
        super().__init__(components, device, dtype, **engine)
        check_vae_precision(components.vae, self.onnx.precision)


def check_vae_precision(vae: Any, precision: str) -> None:
    """Refuse an fp16 export of a VAE that overflows in fp16 (SDXL 1.0's own VAE says so
    with ``force_upcast``): the torch engine upcasts it on the fly, an exported fp16
    graph cannot, and every frame would come out black (NaN)."""
    if precision == "fp16" and getattr(vae.config, "force_upcast", False):
        raise ValueError(
            "this SDXL VAE overflows in fp16 (its config sets force_upcast) and the onnx "
            "engine runs fp16 here: set the registry entry's vae to an fp16-safe VAE "
            "(e.g. \"madebyollin/sdxl-vae-fp16-fix\"), or use the torch engine")
