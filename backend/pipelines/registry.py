"""The backend's pipelines by name: filled by an explicit :func:`register_builtin`.

The server and the command line call :func:`register_builtin` once; importing this
module registers nothing, so importing a pipeline's code never pulls the registry (or
torch) in behind it. Tests register their own pipelines with :func:`register`.
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Callable
from typing import Any

from ...wire.options import SIZE_MULTIPLES
from .base import Entry, Factory, Pipeline

log = logging.getLogger("painted_skin.backend.pipelines")
REGISTRY: dict[str, Entry] = {}


def register(name: str, factory: Factory, load_keys: tuple[str, ...] = (),
             size_multiple: int = 1,
             check: Callable[[dict[str, Any]], list[str]] | None = None,
             load_defaults: dict[str, Any] | None = None,
             models: Callable[[], list[str]] | None = None) -> None:
    """Add (or replace) a pipeline; see :class:`~.base.Entry` for the fields."""
    REGISTRY[name] = Entry(name, factory, tuple(load_keys), size_multiple, check,
                           dict(load_defaults or {}), models)


def names() -> list[str]:
    return sorted(REGISTRY)


def get(name: str) -> Entry:
    """The entry for ``name``; KeyError names the known pipelines."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown pipeline {name!r}; this backend has: "
                       f"{', '.join(names()) or 'none registered'}") from None


def model_names() -> dict[str, list[str]]:
    """``{pipeline: [model names]}`` of the pipelines that name models (the backend's
    ``status``): a registry that cannot be read lists none, it never fails the reply."""
    out: dict[str, list[str]] = {}
    for name, entry in sorted(REGISTRY.items()):
        if entry.models is None:
            continue
        try:
            out[name] = sorted(str(m) for m in entry.models())
        except Exception as e:  # a registry with a typo must not take STATUS down with it
            log.warning("pipeline %s: its model registry cannot be read: %s", name, e)
            out[name] = []
    return out


def create(name: str, options: dict[str, Any] | None = None, device: str = "cpu") -> Pipeline:
    return get(name).factory(dict(options or {}), device)


def _have(module: str) -> bool:
    """Whether the backend package holds ``module`` (the Blender extension ships the
    backend without the skin-model and diffusion code)."""
    try:
        return importlib.util.find_spec(f"{__package__.rsplit('.', 1)[0]}.{module}") is not None
    except ModuleNotFoundError:
        return False


def register_builtin() -> list[str]:
    """Register the pipelines this installation can run (idempotent): ``echo`` always,
    ``skin`` where its code is (numpy + onnxruntime to serve), ``sd15-controlnet`` and
    ``sdxl-controlnet`` where torch and diffusers import. Returns the names."""
    from .echo import EchoPipeline

    register("echo", lambda options, device: EchoPipeline(device))
    if _have("skin"):
        from .skin import LOAD_DEFAULTS as SKIN_DEFAULTS
        from .skin import LOAD_KEYS as SKIN_KEYS
        from .skin import check as skin_check
        from .skin import model_names as skin_models
        from .skin import skin_factory

        register("skin", skin_factory, load_keys=SKIN_KEYS,
                 size_multiple=SIZE_MULTIPLES["skin"],
                 check=skin_check, load_defaults=SKIN_DEFAULTS, models=skin_models)
    if _have("diffusion.components"):
        from .diffusion import entries

        for entry in entries():
            register(**entry)
    return names()
