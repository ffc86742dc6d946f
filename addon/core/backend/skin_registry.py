"""The skin-model registry file, read and written alike by the backend and the add-on.

A TOML file lists ``[models.NAME] path = "..."``; a relative path is read from the
file's folder, ``~`` is expanded. The backend serves the models it names (clients
send names, never paths); the add-on copies its entries into the registry it hands
the backend it starts, with the scene's own model added. One parser keeps both sides
resolving a name to the same folder.
"""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Iterable, Iterator
from pathlib import Path

# The environment variable naming the registry file the backend reads.
REGISTRY_ENV = "PAINTED_SKIN_SKIN_MODELS"


class RegistryError(ValueError):
    """The registry cannot be read or has a bad entry; the message names the fix."""


def registry_entries(path: str | os.PathLike) -> Iterator[tuple[str, Path]]:
    """(name, resolved folder) of each model of the registry file ``path``, in file order.

    Raises :class:`RegistryError` when the file is unreadable, and on reaching the first
    entry without a ``path = "..."`` string (the entries before it are yielded first).
    """
    p = Path(path)
    try:
        with open(p, "rb") as f:
            data = tomllib.load(f)
    except (OSError, ValueError) as e:  # ValueError: TOMLDecodeError, bad UTF-8
        raise RegistryError(f"skin-model registry {p} is unreadable ({e}): fix it or set "
                            f"{REGISTRY_ENV} to another file") from None
    models = data.get("models") or {}
    if not isinstance(models, dict):
        raise RegistryError(f"skin-model registry {p}: 'models' must be a table of "
                            "[models.NAME] entries")
    for name, table in models.items():
        if not isinstance(table, dict) or not isinstance(table.get("path"), str):
            raise RegistryError(f"skin-model registry {p}: model {name!r} needs a "
                                "path = \"...\" string")
        yield name, model_folder(p, table["path"])


def read_registry(path: str | os.PathLike) -> dict[str, Path]:
    """Model name -> resolved folder of the registry file ``path``; raises
    :class:`RegistryError` on an unreadable file or a bad entry."""
    return dict(registry_entries(path))


def model_folder(registry: str | os.PathLike, path: str) -> Path:
    """A registry entry's folder: relative paths are read from the registry's folder."""
    folder = Path(os.path.expanduser(path))
    return (folder if folder.is_absolute() else Path(registry).parent / folder).resolve()


def registry_text(models: Iterable[tuple[str, str | os.PathLike]]) -> str:
    """A registry file listing ``models`` (name, folder); names are quoted, so any name
    is a key, and JSON strings are valid TOML basic strings (written as UTF-8: a
    ``\\ud83d``-style surrogate escape is not TOML). A name given twice: the last wins."""
    unique = dict((str(n), str(f)) for n, f in models)
    return "".join(f"[models.{json.dumps(n, ensure_ascii=False)}]\n"
                   f"path = {json.dumps(f, ensure_ascii=False)}\n\n"
                   for n, f in unique.items())


__all__ = ["REGISTRY_ENV", "RegistryError", "model_folder", "read_registry",
           "registry_entries", "registry_text"]
