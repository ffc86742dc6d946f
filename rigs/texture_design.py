"""Old path of :mod:`painted_skin.demo.texture_design`, which it moved to; kept for one
release (every name, private ones too, is the same object)."""

from __future__ import annotations

from typing import Any

from ..demo import texture_design as _moved


def __getattr__(name: str) -> Any:
    return getattr(_moved, name)
