"""Old path of :mod:`painted_skin.demo.character_uv`, which it moved to; kept for one
release (every name, private ones too, is the same object)."""

from __future__ import annotations

from typing import Any

from ..demo import character_uv as _moved


def __getattr__(name: str) -> Any:
    return getattr(_moved, name)
