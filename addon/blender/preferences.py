"""The add-on's preferences: the backend's Python (with a *Check* button), its default
URL and the keys folder. No network import here, so the preferences register even where
pyzmq failed to load (the place to fix that is then still reachable)."""

from __future__ import annotations

import threading

import bpy
from bpy.props import StringProperty

from ...wire.endpoints import DEFAULT_URL
from ..core.backend.probe import probe_python

# The last Check's result, per Python path (drawn by the preferences and the panel).
CHECKS: dict[str, str] = {}


def addon_package() -> str:
    """The add-on's module name: ``painted_skin`` from the editable install,
    ``bl_ext.<repo>.painted_skin`` as an extension (AddonPreferences.bl_idname)."""
    return (__package__ or "painted_skin").removesuffix(".addon.blender")


class PS_OT_backend_check(bpy.types.Operator):
    """Run the Backend Python and report what it has: torch, diffusers, onnxruntime, CUDA,
    or the missing packages with the pip line that installs them"""

    bl_idname = "painted_skin.backend_check"
    bl_label = "Check"

    python: StringProperty(name="Python", default="",
                           description="Empty: the preferences' Backend Python")

    _timer = None

    def _python(self, context) -> str:
        p = preferences(context)
        return self.python or (bpy.path.abspath(p.python) if p is not None and p.python
                               else "")

    def _report(self, python: str, res) -> set[str]:
        CHECKS[python] = res.summary()
        self.report({"INFO"} if res.ok else {"ERROR"}, f"Backend Python: {res.summary()}")
        return {"FINISHED"} if res.ok else {"CANCELLED"}

    def execute(self, context):
        # Headless (no window, no timers): blocking.
        python = self._python(context)
        return self._report(python, probe_python(python))

    def invoke(self, context, event):
        # In a window the probe (a child Python importing torch: seconds) runs on a
        # thread and a timer collects it: the UI never waits on it.
        if context.window is None:
            return self.execute(context)
        self._checking = python = self._python(context)
        self._result: list = []
        CHECKS[python] = "checking…"
        self._thread = threading.Thread(target=lambda: self._result.append(
            probe_python(python)), daemon=True, name="painted-skin-check")
        self._thread.start()
        wm = context.window_manager
        self._timer = wm.event_timer_add(0.25, window=context.window)
        wm.modal_handler_add(self)
        return {"RUNNING_MODAL"}

    def modal(self, context, event):
        if event.type != "TIMER" or self._thread.is_alive():
            return {"PASS_THROUGH"}
        context.window_manager.event_timer_remove(self._timer)
        self._timer = None
        for area in getattr(context.screen, "areas", ()):  # the result line, drawn now
            area.tag_redraw()
        if not self._result:  # the probe itself failed (it reports, never raises)
            CHECKS[self._checking] = "the check could not run"
            self.report({"ERROR"}, "Backend Python: the check could not run")
            return {"CANCELLED"}
        return self._report(self._checking, self._result[0])


class PS_AddonPreferences(bpy.types.AddonPreferences):
    bl_idname = addon_package()

    python: StringProperty(name="Backend Python", subtype="FILE_PATH", default="",
                           description="The python of an environment with "
                                       "painted-skin[backend] installed, used by Start Local "
                                       "Backend (Blender's own Python cannot run it)")
    url: StringProperty(name="Backend URL", default=DEFAULT_URL,
                        description="Default backend address (tcp://HOST:PORT)")
    keys_dir: StringProperty(name="Keys", subtype="DIR_PATH", default="",
                             description="painted-skin keys folder, for a backend that is "
                                         "not on this machine (CurveZMQ)")

    def draw(self, context):
        col = self.layout.column()
        row = col.row(align=True)
        row.prop(self, "python")
        row.operator(PS_OT_backend_check.bl_idname, icon="CHECKMARK")
        checked = CHECKS.get(bpy.path.abspath(self.python) if self.python else "")
        if checked:
            col.label(text=checked)
        col.prop(self, "url")
        col.prop(self, "keys_dir")


def preferences(context=None) -> PS_AddonPreferences | None:
    """The add-on's preferences, or None when it is not enabled as an add-on."""
    context = context or bpy.context
    addon = context.preferences.addons.get(addon_package())
    return addon.preferences if addon is not None else None


CLASSES = (PS_OT_backend_check, PS_AddonPreferences)


def register() -> None:
    for cls in CLASSES:
        bpy.utils.register_class(cls)


def unregister() -> None:
    for cls in reversed(CLASSES):
        bpy.utils.unregister_class(cls)
