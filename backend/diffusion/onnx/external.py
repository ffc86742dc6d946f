"""The TorchScript ONNX exporter without its GIL stall.

``torch.onnx.export(dynamo=False)`` builds and serialises the whole protobuf,
weights included, inside one C++ call that holds the GIL: measured 7.1 s for a
0.84 GB UNet on the dev machine, during which the backend could answer no
heartbeat (the client gives up after 3 s). Here the exporter writes the graph
without weights (``export_params=False``: the weights become extra graph inputs
named by their ``state_dict`` keys), and the weights are then streamed from the
module's own tensors into the ``<graph>.onnx.data`` side file, one tensor per
write — file writes release the GIL — and declared as external initializers.

The exporter's ONNX shape inference copies every weight into a per-node model
(1.1 s of GIL for 0.84 GB): it is given only the small constants (shape tensors)
it can use; weights' shapes come from their typed graph inputs anyway.

Constant folding is left to onnxruntime (graph optimisation level ALL folds the
weight transposes the exporter would have folded): with ``export_params=False``
the exporter's folded constants would have no values to write.
"""

from __future__ import annotations

import contextlib
import io
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ALIGN = 4096  # offsets page-aligned, so onnxruntime can map the weights
SMALL = 64  # constants up to this many elements reach shape inference (shape tensors)
_SHAPE_PASS = "_jit_pass_onnx_graph_shape_type_inference"
_PATCH_LOCK = threading.Lock()


@contextlib.contextmanager
def _shape_inference_without_weights() -> Iterator[None]:
    """While exporting, shape inference sees only the small constants."""
    from torch import _C

    with _PATCH_LOCK:  # one export at a time patches (and restores) the pass
        original = getattr(_C, _SHAPE_PASS, None)
        if original is None:  # another torch: nothing to narrow
            yield
            return

        def narrowed(graph: Any, params: dict[str, Any], opset: int) -> Any:
            small = {k: v for k, v in params.items() if v.numel() <= SMALL}
            return original(graph, small, opset)

        setattr(_C, _SHAPE_PASS, narrowed)
        try:
            yield
        finally:
            setattr(_C, _SHAPE_PASS, original)


def _named_tensors(module: Any) -> dict[str, Any]:
    """Parameters and persistent buffers by ``state_dict`` key (the exporter's names)."""
    return dict(module.state_dict(keep_vars=False))


def torchscript_export(module: Any, args: tuple[Any, ...], path: str | os.PathLike,
                       input_names: list[str], output_names: list[str],
                       opset: int = 17) -> None:
    """Export ``module`` at ``args`` to ``path`` (+ ``path``.data) with the
    TorchScript exporter, weights as external data written in small GIL-free steps."""
    import onnx
    import torch
    from onnx import TensorProto, numpy_helper

    path = Path(path)
    buf = io.BytesIO()
    with _shape_inference_without_weights():
        # keep_initializers_as_inputs: skips the exporter's value-by-value comparison of
        # all weights (deduplication; tracing already gives each tensor one name)
        torch.onnx.export(module, args, buf, input_names=input_names,
                          output_names=output_names, dynamo=False, opset_version=opset,
                          export_params=False, do_constant_folding=False,
                          keep_initializers_as_inputs=True, custom_opsets={"com.microsoft": 1})
    model = onnx.load_model_from_string(buf.getvalue())
    tensors = _named_tensors(module)
    graph = model.graph
    declared = set(input_names)
    weights = [i for i in graph.input if i.name not in declared]
    missing = [i.name for i in weights if i.name not in tensors]
    if missing:
        raise RuntimeError(f"graph inputs with no weight to fill them: {missing[:5]}")
    data_name = path.name + ".data"
    offset = 0
    with open(path.parent / data_name, "wb") as f:
        for inp in weights:
            arr = tensors[inp.name].detach().cpu().contiguous().numpy()
            pad = -offset % ALIGN
            if pad:
                f.write(b"\0" * pad)
                offset += pad
            f.write(memoryview(arr.reshape(-1)).cast("B"))  # GIL released in the write
            init = TensorProto(name=inp.name, dims=list(arr.shape),
                               data_type=numpy_helper.helper.np_dtype_to_tensor_dtype(arr.dtype),
                               data_location=TensorProto.EXTERNAL)
            for key, value in (("location", data_name), ("offset", str(offset)),
                               ("length", str(arr.nbytes))):
                entry = init.external_data.add()
                entry.key, entry.value = key, value
            graph.initializer.append(init)
            offset += arr.nbytes
    keep = [i for i in graph.input if i.name in declared]
    del graph.input[:]
    graph.input.extend(keep)
    onnx.save_model(model, str(path))


__all__ = ["torchscript_export"]
