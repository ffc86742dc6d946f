"""Optional compiled kernels: numba when it is installed, the numpy paths otherwise.

The ``fast`` pass engine's inner loops (rasteriser, per-pixel interpolation, skeleton
drawing) have a numpy implementation that needs nothing but numpy, and a numba one
that is several times faster and releases the GIL (so Blender's frame evaluation on
the main thread overlaps it). Both give the same arrays; tests check one against the
other. ``PAINTED_SKIN_JIT=0`` forces the numpy paths.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

try:  # numba is optional: ``pip install painted-skin[fast]``
    import numba as _numba
except Exception:  # ImportError, or a numba built against another numpy
    _numba = None


def available() -> bool:
    """Whether numba is importable (whatever the environment variable says)."""
    return _numba is not None


def enabled() -> bool:
    """Whether the compiled kernels are used: numba importable and not switched off
    with ``PAINTED_SKIN_JIT=0``."""
    return _numba is not None and os.environ.get("PAINTED_SKIN_JIT", "1") != "0"


def njit(fn: Callable[..., Any] | None = None, **options: Any) -> Any:
    """``numba.njit`` with ``nogil`` and an on-disk cache by default; without numba
    the function is returned unchanged (callers must check :func:`enabled` before
    relying on its speed)."""
    options = {"nogil": True, "cache": True, **options}

    def wrap(f: Callable[..., Any]) -> Any:
        return _numba.njit(**options)(f) if _numba is not None else f

    return wrap(fn) if fn is not None else wrap
