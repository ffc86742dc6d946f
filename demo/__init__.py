"""The demo: what makes the demo shot. The procedural character (``character``: skeleton,
body, UV charts, the spring-baked cape), its painted atlas (``textures``), the shot
itself (``shot``) and ``painted-skin demo``'s runner (``run``). Importing this package
loads nothing: the runner's names (``run_demo``, …) load with ``run`` on first use. The
modules may import ``addon/core``, ``addon/motion`` and the bpy layer; of the package,
only the entry points, benchmarks and tools import them (ARCHITECTURE.md)."""

from __future__ import annotations

from typing import Any

# The runner's public names, served from ``run`` when first asked for.
_FROM_RUN = ("SHEET_FRAMES", "keep_if_made_from", "model_folder", "run_demo",
             "write_contact_sheet")


def __getattr__(name: str) -> Any:
    if name in _FROM_RUN:
        from . import run

        return getattr(run, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_FROM_RUN})
