"""Optional compiled kernels: numba when it is installed, the numpy paths otherwise.

The ``fast`` pass engine's inner loops (rasteriser, per-pixel interpolation, skeleton
drawing) have a numpy implementation that needs nothing but numpy, and a numba one
that is several times faster and releases the GIL (so Blender's frame evaluation on
the main thread overlaps it). Both give the same arrays; tests check one against the
other. ``PAINTED_SKIN_JIT=0`` forces the numpy paths.

Numba must never cost a user their passes: a kernel that fails to compile or to load
from numba's cache (:data:`KERNEL_ERRORS`) switches this process to the numpy paths
with one warning (:func:`disable`), and a cache folder that cannot be written only
costs the on-disk cache.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

log = logging.getLogger("painted_skin.jit")

try:  # numba is optional: ``pip install painted-skin[fast]``
    import numba as _numba
    from numba.core.errors import NumbaError as _NumbaError
except Exception:  # ImportError, or a numba built against another numpy
    _numba = None
    _NumbaError = RuntimeError

# What a kernel call may raise when numba itself fails (typing/lowering, LLVM, or a
# cached entry that cannot be loaded, e.g. saved under another module name); errors of
# the arguments (ValueError, IndexError) are not among them.
KERNEL_ERRORS: tuple[type[BaseException], ...] = (_NumbaError, ImportError)
_disabled: str | None = None


def available() -> bool:
    """Whether numba is importable (whatever the environment variable says)."""
    return _numba is not None


def enabled() -> bool:
    """Whether the compiled kernels are used: numba importable, not switched off with
    ``PAINTED_SKIN_JIT=0``, and no kernel has failed in this process."""
    return (_numba is not None and _disabled is None
            and os.environ.get("PAINTED_SKIN_JIT", "1") != "0")


def disable(error: BaseException) -> None:
    """Use the numpy paths for the rest of this process (after a kernel failed)."""
    global _disabled
    if _disabled is None:
        log.warning("numba kernels failed (%s: %s): the fast engine uses its numpy paths "
                    "(same results, slower); clearing __pycache__ or setting "
                    "NUMBA_CACHE_DIR may help", type(error).__name__, error)
    _disabled = f"{type(error).__name__}: {error}"


def njit(fn: Callable[..., Any] | None = None, **options: Any) -> Any:
    """``numba.njit`` with ``nogil`` and an on-disk cache by default; without numba
    the function is returned unchanged (callers must check :func:`enabled` before
    relying on its speed). Where numba cannot cache (no writable folder for this
    file), the kernel is compiled without the on-disk cache."""
    options = {"nogil": True, "cache": True, **options}

    def wrap(f: Callable[..., Any]) -> Any:
        if _numba is None:
            return f
        try:
            return _numba.njit(**options)(f)
        except RuntimeError as e:  # "cannot cache function ...: no locator available"
            if not options.get("cache"):
                raise
            log.info("numba cannot cache %s (%s): compiling it each run", f.__name__, e)
            return _numba.njit(**{**options, "cache": False})(f)

    return wrap(fn) if fn is not None else wrap
