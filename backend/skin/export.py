"""Export a trained skin network as a model folder (torch + onnx).

A model folder holds ``config.json`` (format version, input layout, sizes, head,
the character's fingerprint, the version of the passes it learned: ``pass_version``,
where the frames said), ``model.onnx`` (GridSample needs opset 16+; the
3-D grid's 5-D GridSample needs 20), ``weights.safetensors`` (the same network's
weights, for the torch engine) and ``report.json`` (losses, figures, time).
It is written into a temp folder beside the destination and renamed into place,
so a reader sees the old folder or the new one, never a half-written one.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any

import torch

from ...addon.core.files.atomic import TMP_MARK, plain_mode, write_json_atomic
from . import FORMAT_VERSION, features
from .model import SkinNet

OPSET = 20
CONFIG, GRAPH, REPORT = "config.json", "model.onnx", "report.json"
WEIGHTS = "weights.safetensors"  # safetensors, not a pickle: a model folder may be shared


def _dummy(cfg: dict[str, Any], size: int = 32) -> tuple[torch.Tensor, ...]:
    x = torch.rand(1, features.channels(cfg["layout"]), size, size)
    if cfg["head"] == "diffusion":
        return x, torch.randn(1, 3, size, size), torch.full((1,), 0.5)
    return (x,)


def export_onnx(net: SkinNet, path: str | os.PathLike) -> None:
    """Write ``net`` as an ONNX graph with dynamic height and width (batch 1).
    Inputs: ``features`` (+ ``x_t``, ``t`` for the diffusion head); output ``rgb``."""
    cfg = net.cfg
    args = _dummy(cfg)
    names = ["features", "x_t", "t"][:len(args)]
    axes = {n: {2: "height", 3: "width"} for n in names[:2]}
    axes["rgb"] = {2: "height", 3: "width"}
    net = net.eval().cpu()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net, args, str(path), input_names=names, output_names=["rgb"],
                          dynamic_axes=axes, opset_version=OPSET, dynamo=False)


def export_model(net: SkinNet, model_cfg: dict[str, Any], out_dir: str | os.PathLike,
                 fingerprint: dict[str, Any], report: dict[str, Any] | None = None,
                 extra: dict[str, Any] | None = None) -> Path:
    """Write the model folder ``out_dir`` (replacing an older one whole).

    ``fingerprint``: what identifies the character (e.g. mesh names and vertex
    counts), compared by the runtime with the character it is asked to render."""
    if not isinstance(fingerprint, dict) or not fingerprint:
        raise ValueError("the character fingerprint must be a non-empty dict "
                         "(e.g. {'mesh': name, 'vertices': count})")
    out = Path(out_dir)
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        # the old folder is moved aside and replaced: anything else there is refused
        raise ValueError(f"the model folder {str(out)!r} is not a folder: choose a folder "
                         "path (a link or a file there would be replaced, not written)")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.", suffix=TMP_MARK))
    try:
        os.chmod(tmp, plain_mode(folder=True))
        export_onnx(net, tmp / GRAPH)
        from safetensors.torch import save_file

        save_file({k: v.detach().cpu().contiguous() for k, v in net.state_dict().items()},
                  str(tmp / WEIGHTS))
        os.chmod(tmp / WEIGHTS, plain_mode())  # safetensors writes 0600: farms share models
        config = {
            "format_version": FORMAT_VERSION,
            "fingerprint": fingerprint,
            "layout": model_cfg["layout"],
            "rest_bounds": model_cfg["rest_bounds"],
            "head": model_cfg["head"],
            "diffusion_steps": int(model_cfg.get("diffusion_steps", 4)),
            "size_multiple": 2 ** (len(model_cfg["unet"]) - 1),
            "temporal": any(n == "prev_rgb" for n, _ in model_cfg["layout"]),
            "required_passes": features.required_passes(model_cfg["layout"]),
            "model": {k: model_cfg[k] for k in ("tex_channels", "tex_sizes", "grid_sizes",
                                                 "unet", "use_texture", "shading",
                                                 "light_curve", "facing_curve",
                                                 "colour_matrix", "footprint",
                                                 "head_gates")
                      if k in model_cfg},
            "graph": GRAPH, "opset": OPSET, "weights": WEIGHTS,
            **(extra or {}),  # e.g. a look's record: its base model and keyframes
        }
        write_json_atomic(tmp / CONFIG, config)
        write_json_atomic(tmp / REPORT, report or {})
        old = None
        if out.exists():
            old = out.with_name(f".{out.name}.old{TMP_MARK}")
            if old.exists():
                shutil.rmtree(old)
            os.replace(out, old)
        os.replace(tmp, out)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out
