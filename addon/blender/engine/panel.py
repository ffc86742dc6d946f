"""Render Properties ▸ Painted Skin: the engine's settings, shown while Painted Skin is
the scene's render engine, and the one colour setting its frames need: the painting is
display-ready, so the *Standard* view transform saves the very colours Restyle writes
(Blender's default, AgX, would tone-map them a second time)."""

from __future__ import annotations

import bpy

from ....wire.endpoints import is_local_endpoint
from ..classes import labelled, wrapped_label
from .engine import ENGINE_ID
from .settings import STANDARD, backend_url, default_model, view_transform_hint


class PS_OT_engine_standard_view(bpy.types.Operator):
    """Set Color Management to the Standard view transform (no look, exposure 0, gamma
    1): the painted frames are saved with the colours the skin model paints"""

    bl_idname = "painted_skin.engine_standard_view"
    bl_label = "Use Standard View"
    bl_options = {"REGISTER", "UNDO"}

    def execute(self, context):
        vs = context.scene.view_settings
        vs.view_transform, vs.look, vs.exposure, vs.gamma = STANDARD, "None", 0.0, 1.0
        return {"FINISHED"}


class PS_PT_engine(bpy.types.Panel):
    """Render Properties ▸ Painted Skin."""

    bl_label = "Painted Skin"
    bl_idname = "RENDER_PT_painted_skin"
    bl_space_type = "PROPERTIES"
    bl_region_type = "WINDOW"
    bl_context = "render"
    COMPAT_ENGINES = {ENGINE_ID}

    @classmethod
    def poll(cls, context):
        return context.engine in cls.COMPAT_ENGINES

    def draw(self, context):
        layout = self.layout
        layout.use_property_split = False
        scene = context.scene
        s = scene.painted_skin_engine
        labelled(layout, s, "model", text="Skin Model")
        if not s.model.strip():  # what the empty field means, in this scene
            model, why = default_model(scene)
            text = (f"Empty: '{model}', the Skin Model panel's choice" if model
                    else f"Empty, and {why}")
            wrapped_label(layout, context, text, icon="NONE" if model else "ERROR")
        labelled(layout, s, "url", text="Backend URL")
        if not s.url.strip():
            wrapped_label(layout, context, f"Empty: {backend_url(scene, s)}")
        if not is_local_endpoint(backend_url(scene, s)):
            labelled(layout, s, "keys", text="Keys Folder (CurveZMQ)")
        layout.prop(s, "start_local")
        col = layout.column(align=True)
        col.prop(s, "temporal")
        sub = col.row()
        sub.active = s.temporal
        sub.prop(s, "stabilize", slider=True)
        box = layout.column(align=True)
        box.label(text="Viewport")
        box.prop(s, "viewport_scale", slider=True)
        box.prop(s, "viewport_refine")
        hint = view_transform_hint(context.scene)
        if hint:
            wrapped_label(layout, context, hint, icon="INFO")
            layout.operator(PS_OT_engine_standard_view.bl_idname, icon="COLOR")


CLASSES = (PS_OT_engine_standard_view, PS_PT_engine)
