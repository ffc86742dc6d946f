"""The stable entry for pipeline TDs: the functions behind the panel and the CLI.

    # pip install painted-skin[blender] (the bpy module) or an editable checkout:
    from painted_skin.api import retarget_clip, make_passes, PassOptions, restyle_shot
    # inside Blender, from the installed extension (the package is bl_ext.<repo>.painted_skin):
    import importlib
    api = importlib.import_module("bl_ext.user_default.painted_skin.api")

Names resolve on first use, so importing this module costs nothing and Retarget/Passes
work without pyzmq (only ``restyle_shot``, ``render_frames`` and ``BackendClient`` need
it).
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "retarget_clip": ".addon.blender.retarget.api",
    "RetargetError": ".addon.blender.retarget.api",
    "RetargetOptions": ".addon.core.retarget.solve",
    "make_passes": ".addon.blender.passes.render",
    "PassOptions": ".addon.blender.passes.render",
    "ShotError": ".addon.blender.passes.geometry",
    "add_follow_camera": ".addon.blender.passes.auto_camera",
    "restyle_shot": ".addon.blender.restyle.loop",
    "RestyleRequest": ".addon.blender.restyle.request",
    "RequestError": ".addon.blender.restyle.request",
    "BackendClient": ".addon.blender.client.backend_client",
    "BackendError": ".addon.blender.client.backend_client",
    "probe_python": ".addon.core.backend.probe",
    "render_frames": ".addon.blender.engine.headless",
    "RenderFailed": ".addon.blender.engine.headless",
}
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name], __package__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
