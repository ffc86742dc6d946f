"""The diffusion pipelines' factories and their registry :func:`entries` (when torch
and diffusers are installed; the registry registers them, importing registers nothing).

``sd15-controlnet``: :class:`painted_skin.backend.diffusion.controlnet_pipeline.RestylePipeline`.
Load options (``LOAD_KEYS`` of :mod:`..diffusion.options`; the backend keeps one
instance per distinct value)::

    model: "sd15"              a model of the registry
    (the registry file is the backend's, $PAINTED_SKIN_MODELS or the example: a client
    cannot make the backend read a path of its choosing)
    tiny: true                 random tiny components instead (tests, benchmarks, no weights)
    tiny_seed: 0, tiny_controlnets: 3, dtype: "float16" | "float32"

Torch is imported only when a pipeline is created, so registering costs nothing.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import itertools
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ...wire.options import SIZE_MULTIPLES
from ..diffusion.options import LOAD_KEYS, XL_LOAD_KEYS, option_problems
from .base import files_identity

# A local model folder with more files than this is identified by its first ones only.
MAX_FILES = 10_000


def available() -> bool:
    """True when torch, diffusers and transformers are importable and the diffusion code
    is here (the Blender extension ships the backend without it)."""
    here = __package__.rsplit(".", 1)[0] + ".diffusion.components"
    return all(importlib.util.find_spec(m) is not None
               for m in ("torch", "diffusers", "transformers", here))


def check(options: dict[str, Any]) -> list[str]:
    """What keeps ``options``' model from loading (empty when it can): call it
    when a session opens, before the shot starts."""
    problems = option_problems(options)
    if problems:
        return problems
    if options.get("tiny"):
        return []
    from ..diffusion.components import load_registry

    try:
        registry = load_registry(None)
    except (OSError, ValueError) as e:
        return [f"model registry: {e}"]
    name = str(options.get("model", "sd15"))
    if name not in registry:
        return [f"model {name!r} is not in the registry (it has: {', '.join(sorted(registry))})"]
    from ..diffusion.components import check_weights

    return check_weights(registry[name], arch="sd1")


def _refuse_unusable_device(options: dict[str, Any], device: str) -> None:
    """A GPU the engine cannot use is told when the session opens, in one line with the
    fix: torch alone would raise on the first tensor, onnxruntime run on the CPU."""
    from ..diffusion.options import device_problem

    problem = device_problem(device, str(options.get("engine", "torch")))
    if problem:
        raise ValueError(problem)


def _sources(value: Any) -> Iterator[Any]:
    """Every component :class:`~..diffusion.components.Source` inside a registry entry."""
    from ..diffusion.components import Source

    if isinstance(value, Source):
        yield value
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            yield from _sources(getattr(value, f.name))
    elif isinstance(value, dict):
        for v in value.values():
            yield from _sources(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _sources(v)


def _hub_revision(ref: str) -> str:
    """The cached snapshot a hub id resolves to offline (its ``refs/main``), or ""."""
    try:
        from huggingface_hub.constants import HF_HUB_CACHE
    except ImportError:
        return ""
    main = Path(HF_HUB_CACHE) / f"models--{ref.replace('/', '--')}" / "refs" / "main"
    try:
        return main.read_text().strip()
    except OSError:
        return ""


def registry_identity(entry: Any) -> str:
    """``model_id`` of a registry model: the entry as resolved (every source, scale,
    option; local sources by their content, not their path) plus, for hub ids, the
    cached revision (call it after the load: a first load downloads it). The same on
    every machine that holds the same weights."""
    text = repr(entry)
    parts = []
    for src in _sources(entry):
        if not src.is_local:
            parts.append(f"hub {src.ref} {_hub_revision(src.ref)}")
            continue
        text = text.replace(repr(src.ref), "'<local>'")
        root = Path(os.path.expanduser(src.ref))
        files = [root] if root.is_file() else sorted(
            p for p in itertools.islice(root.rglob("*"), MAX_FILES) if p.is_file()
        ) if root.is_dir() else []
        parts.append(files_identity(files, root=root.parent if root.is_file() else root)
                     if files else "missing")
    h = hashlib.blake2b(text.encode(), digest_size=16)
    for part in parts:
        h.update(f"\0{part}".encode())
    return "blake2b:" + h.hexdigest()


def xl_identity(name: str, union: bool | None) -> str:
    """``model_id`` of SDXL registry model ``name`` as :func:`load_xl_components` loads
    it: the entry plus the union ControlNet and its modes, which live beside the entry
    in the registry's table — only the parts it loads (the separate nets, or the union
    net and its modes), so an unused part's change is not another model."""
    from ..diffusion.sdxl_pipeline import xl_entry

    entry, union_source, modes = xl_entry(name)
    if union is False or union_source is None:
        union_source, modes = None, {}
    else:  # the union net replaces the separate ones: those are not loaded
        entry = dataclasses.replace(entry, controlnets={})
    return registry_identity((entry, union_source, sorted(modes.items())))


def _tiny_identity(options: dict[str, Any], kind: str) -> str:
    """Random tiny components are fixed by their seed and counts: a constant of those."""
    return (f"tiny-{kind}:seed={int(options.get('tiny_seed', 0))},"
            f"controlnets={int(options.get('tiny_controlnets', 3))},"
            f"union={bool(options.get('union'))},dtype={options.get('dtype') or 'float32'}")


def sd15_controlnet(options: dict[str, Any], device: str) -> Any:
    """Factory of ``sd15-controlnet`` (raises MissingWeights naming every
    missing component before anything loads)."""
    _refuse_unusable_device(options, device)
    import torch

    from ..diffusion.components import load_components, load_registry
    from ..diffusion.controlnet_pipeline import RestylePipeline
    from ..diffusion.tiny import tiny_components

    dtype = options.get("dtype")
    tdtype = getattr(torch, dtype) if isinstance(dtype, str) else None
    if options.get("tiny"):
        comps = tiny_components(int(options.get("tiny_seed", 0)),
                                int(options.get("tiny_controlnets", 3)))
        model_id = _tiny_identity(options, "sd15")
    else:
        registry = load_registry(None)
        name = str(options.get("model", "sd15"))
        if name not in registry:
            raise KeyError(f"model {name!r} is not in the registry "
                           f"(it has: {', '.join(sorted(registry))})")
        comps = load_components(registry[name], tdtype)
        model_id = registry_identity(registry[name])  # after: a hub id's revision is cached
    if options.get("engine", "torch") == "onnx":
        from ..diffusion.onnx.pipeline import OnnxRestylePipeline

        pipe = OnnxRestylePipeline(comps, device, tdtype)
    else:
        pipe = RestylePipeline(comps, device, tdtype)
    pipe.model_id = model_id
    return pipe


def model_names() -> list[str]:
    """The diffusion models of the backend's registry (``$PAINTED_SKIN_MODELS``)."""
    from ..diffusion.components import load_registry

    return list(load_registry())


def entries() -> list[dict[str, Any]]:
    """The diffusion pipelines' registry entries (:func:`~.registry.register`'s
    keywords); none without torch and diffusers."""
    if not available():
        return []
    common = {"engine": "torch", "tiny_seed": 0, "tiny_controlnets": 3}
    return [dict(name="sd15-controlnet", factory=sd15_controlnet, load_keys=LOAD_KEYS,
                 size_multiple=SIZE_MULTIPLES["sd15-controlnet"], check=check,
                 load_defaults={**common, "model": "sd15"},
                 models=model_names),
            dict(name="sdxl-controlnet", factory=sdxl_controlnet, load_keys=XL_LOAD_KEYS,
                 size_multiple=SIZE_MULTIPLES["sdxl-controlnet"], check=_check_xl,
                 load_defaults={**common, "model": "sdxl"},
                 models=model_names)]


# SDXL's code (torch, diffusers) is imported when a pipeline is created or checked.


def sdxl_controlnet(options: dict[str, Any], device: str) -> Any:
    """Factory of ``sdxl-controlnet`` (load keys ``XL_LOAD_KEYS``): tiny random
    components (``tiny``, ``tiny_seed``, ``tiny_controlnets``, ``union``) or registry
    model ``model`` (default "sdxl"); ``engine``: "torch" or "onnx"."""
    _refuse_unusable_device(options, device)
    import torch

    from ..diffusion.sdxl_pipeline import (
        RestyleXLPipeline,
        load_xl_components,
        tiny_xl_components,
    )

    dtype = options.get("dtype")
    tdtype = getattr(torch, dtype) if isinstance(dtype, str) else None
    union = options.get("union")
    if options.get("tiny"):
        comps = tiny_xl_components(int(options.get("tiny_seed", 0)), bool(union),
                                   int(options.get("tiny_controlnets", 3)))
        model_id = _tiny_identity(options, "sdxl")
    else:
        name = str(options.get("model", "sdxl"))
        union = None if union is None else bool(union)
        comps = load_xl_components(name, tdtype, union)
        model_id = xl_identity(name, union)
    if options.get("engine", "torch") == "onnx":
        from ..diffusion.onnx.xl import OnnxRestyleXLPipeline

        pipe = OnnxRestyleXLPipeline(comps, device, tdtype)
    else:
        pipe = RestyleXLPipeline(comps, device, tdtype)
    pipe.model_id = model_id
    return pipe


def _check_xl(options: dict[str, Any]) -> list[str]:
    from ..diffusion.sdxl_pipeline import check_xl

    return check_xl(options)

