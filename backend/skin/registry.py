"""The skin-model registry: a name -> a model folder the backend may read (no torch).

A TOML file (``$PAINTED_SKIN_SKIN_MODELS``, else ``registry.toml`` beside this
module) lists ``[models.NAME] path = "..."``; relative paths are read from the
file's folder. Clients send names, so they can never point the backend at a
path of their choosing.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

DEFAULT_REGISTRY = Path(__file__).with_name("registry.toml")
ENV = "PAINTED_SKIN_SKIN_MODELS"
DEFAULT_MODEL = "demo"


class RegistryError(ValueError):
    """The registry cannot be read or lacks a name; the message names the fix."""


def registry_path() -> Path:
    return Path(os.environ.get(ENV) or DEFAULT_REGISTRY)


def load_registry(path: str | os.PathLike | None = None) -> dict[str, Path]:
    """Model name -> folder (resolved) of a registry file."""
    p = Path(path) if path else registry_path()
    try:
        with open(p, "rb") as f:
            data = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise RegistryError(f"skin-model registry {p} is unreadable ({e}): fix it or set "
                            f"{ENV} to another file") from None
    out = {}
    for name, table in (data.get("models") or {}).items():
        if not isinstance(table, dict) or not isinstance(table.get("path"), str):
            raise RegistryError(f"skin-model registry {p}: model {name!r} needs a "
                                "path = \"...\" string")
        folder = Path(os.path.expanduser(table["path"]))
        out[name] = (folder if folder.is_absolute() else p.parent / folder).resolve()
    return out


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
