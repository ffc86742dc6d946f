"""Register the add-on's classes: one ordered list, each workflow step's settings,
operators and panel in the order the sidebar shows them (retarget, passes, the skin
model, restyle), then the Scene settings that point at them.

Retarget and Passes need nothing beyond Blender and numpy; Restyle and the Painted Skin
render engine need pyzmq (a wheel the extension bundles). Its import is the only one
allowed to fail: the rest of the add-on registers and the Restyle panel explains what is
missing.
"""

from __future__ import annotations

from . import preferences
from .classes import register_classes, unregister_classes
from .passes import ui as passes_ui
from .retarget import operators, panel, props
from .skin import looks_ui
from .skin import ui as skin_ui

# The steps that need no network, in registration order (a PropertyGroup before what
# points at it).
BASE_CLASSES = (props.CLASSES + operators.CLASSES + panel.CLASSES + passes_ui.CLASSES
                + skin_ui.CLASSES + looks_ui.CLASSES + preferences.CLASSES)
BASE_SETTINGS = {"painted_skin_retarget": props.PS_RetargetSettings,
                 "painted_skin_passes": passes_ui.PS_PassesSettings,
                 "painted_skin_skin": skin_ui.PS_SkinSettings,
                 "painted_skin_looks": looks_ui.PS_LooksSettings}

_REGISTERED: dict = {}


def _restyle_ui():
    """The Restyle step's module, or None when its network layer cannot load (then
    :mod:`.restyle.unavailable` says why, in its place)."""
    try:
        from .restyle import ui as restyle_ui
    except ImportError as e:  # e.g. "No module named 'zmq'": the bundled wheel is absent
        from .restyle import unavailable as restyle_unavailable

        restyle_unavailable.register(f"{type(e).__name__}: {e}")
        _REGISTERED["unavailable"] = restyle_unavailable
        return None
    return restyle_ui


def register() -> None:
    register_classes(BASE_CLASSES, **BASE_SETTINGS)
    ui = _restyle_ui()
    if ui is not None:
        ui.register()  # its classes, its Scene settings and the backend status timer
        _REGISTERED["restyle_ui"] = ui
        from . import engine  # paints through the same client: needs pyzmq too

        engine.register()
        _REGISTERED["engine"] = engine


def unregister() -> None:
    engine = _REGISTERED.pop("engine", None)
    if engine is not None:
        engine.unregister()
    ui = _REGISTERED.pop("restyle_ui", None)
    if ui is not None:
        ui.unregister()  # stops the local backend started from the panel
    unavailable = _REGISTERED.pop("unavailable", None)
    if unavailable is not None:
        unavailable.unregister()
    skin_ui.cancel_training()
    unregister_classes(BASE_CLASSES, *BASE_SETTINGS)
