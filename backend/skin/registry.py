"""The skin-model registry: a name -> a model folder the backend may read (no torch).

A TOML file (``$PAINTED_SKIN_SKIN_MODELS``, else ``registry.toml`` beside this
module) lists ``[models.NAME] path = "..."``; relative paths are read from the
file's folder (:mod:`addon.core.backend.skin_registry` reads it, for the add-on too).
Clients send names, so they can never point the backend at a path of their choosing.
"""

from __future__ import annotations

import os
from pathlib import Path

from ...addon.core.backend.skin_registry import REGISTRY_ENV, RegistryError, read_registry

DEFAULT_REGISTRY = Path(__file__).with_name("registry.toml")
ENV = REGISTRY_ENV
DEFAULT_MODEL = "demo"


def registry_path() -> Path:
    return Path(os.environ.get(ENV) or DEFAULT_REGISTRY)


def load_registry(path: str | os.PathLike | None = None) -> dict[str, Path]:
    """Model name -> folder (resolved) of a registry file (the file :func:`registry_path`
    names by default); the parser is core's, which the add-on reads it with too."""
    return read_registry(Path(path) if path else registry_path())


def resolve(name: str | None) -> Path:
    """The folder of model ``name`` (default :data:`DEFAULT_MODEL`)."""
    name = DEFAULT_MODEL if name is None else name
    if not isinstance(name, str):
        raise RegistryError(f"skin model must be a registry name (a string), not {name!r}")
    reg = load_registry()
    if name not in reg:
        raise RegistryError(f"skin model {name!r} is not in the registry {registry_path()} "
                            f"(it has: {', '.join(sorted(reg)) or 'nothing'}): add it there")
    return reg[name]


__all__ = ["DEFAULT_MODEL", "DEFAULT_REGISTRY", "ENV", "RegistryError", "load_registry",
           "registry_path", "resolve"]
