"""Register the add-on's classes in dependency order (props, operators, panels).

Retarget and Passes need nothing beyond Blender and numpy; Restyle needs pyzmq (a wheel
the extension bundles). Its import is the only one allowed to fail: the rest of the
add-on registers and the Restyle panel explains what is missing.
"""

from __future__ import annotations

import bpy

from . import operators, panel, passes_ui, preferences, props, skin_ui

_RESTYLE: dict = {"module": None}


def register() -> None:
    props.register()
    for cls in operators.CLASSES + panel.CLASSES:
        bpy.utils.register_class(cls)
    passes_ui.register()
    skin_ui.register()
    preferences.register()
    try:
        from . import restyle
    except ImportError as e:  # e.g. "No module named 'zmq'": the bundled wheel is absent
        from . import restyle_unavailable

        restyle_unavailable.register(f"{type(e).__name__}: {e}")
        _RESTYLE["module"] = restyle_unavailable
    else:
        restyle.register()
        _RESTYLE["module"] = restyle


def unregister() -> None:
    module = _RESTYLE.pop("module", None)
    if module is not None:
        module.unregister()
    preferences.unregister()
    skin_ui.unregister()
    passes_ui.unregister()
    for cls in reversed(operators.CLASSES + panel.CLASSES):
        bpy.utils.unregister_class(cls)
    props.unregister()
