"""Atomic file writes: a temp file in the same folder, then ``os.replace``.

A reader (or a resumed run) sees the old file or the new one, never half of
one; a failed write leaves nothing behind.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    """Write UTF-8 ``text`` (LF line ends) to ``path`` atomically; folders made."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_json_atomic(path: str | os.PathLike, data: object, indent: int = 2) -> Path:
    """Write ``data`` as JSON to ``path`` atomically (folders made as needed)."""
    return write_text_atomic(path, json.dumps(data, indent=indent, default=float) + "\n")


def read_json(path: str | os.PathLike, what: str) -> dict:
    """Read a JSON object the project wrote, with a clear error if it is damaged."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"{what} {path} is unreadable ({e}): delete it to start over") from None
    if not isinstance(data, dict):
        raise ValueError(f"{what} {path} is not a JSON object: delete it to start over")
    return data
