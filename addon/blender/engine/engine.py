"""The ``PAINTED_SKIN`` render engine: F12, Render Animation and ``blender -b -E
PAINTED_SKIN -a`` paint the frame the render's depsgraph shows (:mod:`.renders`) into the
Render Result, which Blender then writes by its own output settings (format, ``#`` paths,
range, step, ``-s/-e/-j``); the 3D Viewport's Rendered mode runs a :class:`ViewportJob`
and draws its last finished frame (:mod:`.view`).

A frame that cannot be painted (no model for this character, no backend) is an error
Blender shows in the Render window and the farm's log, never a black frame written
over a good one: the result is cancelled, so Blender writes nothing for that frame."""

from __future__ import annotations

import bpy

from ..client.backend_client import BackendError
from ..passes.geometry import ShotError
from . import render_result
from .renders import RENDERS, render_size
from .settings import view_transform_hint
from .view import ViewportDraw

ENGINE_ID = "PAINTED_SKIN"


class PS_RenderEngine(bpy.types.RenderEngine):
    """Paints the character with its skin model (Render Properties ▸ Painted Skin)."""

    bl_idname = ENGINE_ID
    bl_label = "Painted Skin"
    bl_use_preview = False  # material previews would need a character
    bl_use_postprocess = True  # the compositor and sequencer run after it
    bl_use_shading_nodes_custom = False  # materials keep Blender's own node editors

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.view: ViewportDraw | None = None

    def __del__(self) -> None:
        try:
            view = self.view
        except (ReferenceError, AttributeError):  # Blender freed the struct first
            return
        if view is not None:
            view.free()

    # -- final renders ---------------------------------------------------------------

    def update_render_passes(self, scene=None, renderlayer=None):
        self.register_pass(scene, renderlayer, "Combined", 4, "RGBA", "COLOR")
        for name, channels, chan_id in render_result.PASSES:
            kind = {1: "VALUE", 3: "VECTOR", 4: "VECTOR"}[channels]
            self.register_pass(scene, renderlayer, name, channels, chan_id, kind)

    def render(self, depsgraph):
        if self.is_preview:
            return
        scene = depsgraph.scene
        width, height = render_size(scene)
        for name, channels, chan_id in render_result.PASSES:
            self.add_pass(name, channels, chan_id)
        self.update_stats("", f"Painted Skin: painting frame {scene.frame_current}")
        hint = view_transform_hint(scene)
        if hint and RENDERS.warn_once(hint):  # once a render job, not once a frame
            self.report({"WARNING"}, f"Painted Skin: {hint}")
        try:
            painted = RENDERS.frame(depsgraph, self._frame_set,
                                    continues=self.is_animation or RENDERS.chained,
                                    cancelled=self._cancelled)
        except Exception as e:  # noqa: BLE001 -- any failure: an error, never a blank frame
            if self._cancelled():
                return  # Esc / Ctrl-C: Blender writes nothing, and says it was cancelled
            RENDERS.last_error = e
            known = isinstance(e, (ShotError, BackendError, OSError))
            self._failed(width, height, str(e) if known else f"{type(e).__name__}: {e}")
            return
        if self._cancelled():
            return
        client = RENDERS.painter.client
        notice = client.notice if client is not None else None
        if notice and RENDERS.warn_once(notice):  # e.g. a model of an older add-on's passes
            self.report({"WARNING"}, f"Painted Skin: {notice}")  # blender -b prints it too
        # Blender renders each view layer with its own depsgraph: this one's result.
        result = self.begin_result(0, 0, width, height, layer=depsgraph.view_layer.name)
        layer = result.layers[0]
        transparent = bool(scene.render.film_transparent)
        mask = painted.arrays.get("mask")
        layer.passes["Combined"].rect.foreach_set(
            render_result.combined(painted.rgb, mask, transparent).ravel())
        for name, rect in render_result.pass_rects(painted.arrays, painted.camera_world).items():
            p = layer.passes.find_by_name(name, "") if hasattr(layer.passes, "find_by_name") \
                else layer.passes.get(name)
            if p is not None:
                p.rect.foreach_set(rect.ravel())
        self.end_result(result)

    def _cancelled(self) -> bool:
        return bool(self.test_break()) or RENDERS.stopped()

    def _frame_set(self, frame: int) -> None:
        self.frame_set(int(frame), 0.0)

    def _failed(self, width: int, height: int, message: str) -> None:
        """Tell Blender the frame failed: shown in the Render window and printed by
        ``blender -b``; the cancelled result keeps Blender from writing a frame."""
        text = f"Painted Skin: {message}"
        self.report({"ERROR"}, text)
        self.error_set(text)
        print(text, flush=True)
        result = self.begin_result(0, 0, width, height)
        self.end_result(result, cancel=True)

    # -- the viewport's Rendered mode --------------------------------------------------

    def view_update(self, context, depsgraph):
        if self.view is None:
            self.view = ViewportDraw(self)
        self.view.update(context, depsgraph)

    def view_draw(self, context, depsgraph):
        if self.view is None:
            self.view = ViewportDraw(self)
        self.view.draw(context, depsgraph)


def compatible_panels() -> list[type]:
    """Blender's own panels that show for its internal engines: the output, dimensions,
    colour management and frame range panels must show for this engine too."""
    exclude = {"VIEWLAYER_PT_filter", "VIEWLAYER_PT_layer_passes"}
    return [p for p in bpy.types.Panel.__subclasses__()
            if "BLENDER_RENDER" in getattr(p, "COMPAT_ENGINES", ())
            and p.__name__ not in exclude]


def register() -> None:
    bpy.utils.register_class(PS_RenderEngine)
    for panel in compatible_panels():
        panel.COMPAT_ENGINES.add(ENGINE_ID)
    handlers = bpy.app.handlers
    for handler_list, fn in _HANDLERS:
        if fn not in getattr(handlers, handler_list):
            getattr(handlers, handler_list).append(fn)


def unregister() -> None:
    handlers = bpy.app.handlers
    for handler_list, fn in _HANDLERS:
        if fn in getattr(handlers, handler_list):
            getattr(handlers, handler_list).remove(fn)
    for panel in compatible_panels():
        panel.COMPAT_ENGINES.discard(ENGINE_ID)
    _free_views()
    RENDERS.close()
    bpy.utils.unregister_class(PS_RenderEngine)


@bpy.app.handlers.persistent
def _render_init(*_args) -> None:
    RENDERS.new_job()


def _free_views() -> None:
    """Stop every Rendered view's painter (a file opened, the add-on disabled: Blender
    drops their timers, and nothing else would)."""
    from .view import VIEWS

    for view in list(VIEWS):
        view.free()


@bpy.app.handlers.persistent
def _file_loaded(*_args) -> None:
    RENDERS.forget_geometry()
    _free_views()


@bpy.app.handlers.persistent
def _depsgraph_post(scene, depsgraph) -> None:
    from .renders import meshes_edited

    meshes_edited(scene, depsgraph)


_HANDLERS = (("render_init", _render_init), ("load_post", _file_loaded),
             ("depsgraph_update_post", _depsgraph_post))
