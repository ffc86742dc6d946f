"""The demo: a procedural character (``character*``), generated motions (``motion*``),
spring bones (``spring*``) and painted textures (``texture*``), and ``painted-skin demo``'s
runner (``run``). Scripts and tests build on the character and motions; the add-on's
skin-model training renders the motions; bone-map presets and skin models stay in
``rigs/``.

Importing this package loads nothing: the runner's names (``run_demo``, …) load with
``run`` on first use, so ``import painted_skin.demo.motion`` needs neither bpy nor the
runner. The modules may import ``addon/core`` and the add-on's bpy layer (ARCHITECTURE.md).
"""

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
