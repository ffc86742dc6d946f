"""Old path of :mod:`painted_skin.demo.motion`, which it moved to; kept for one
release (every name, private ones too, is the same object)."""

from __future__ import annotations

from typing import Any

from ..demo import motion as _moved

__all__ = _moved.__all__


def __getattr__(name: str) -> Any:
    return getattr(_moved, name)
