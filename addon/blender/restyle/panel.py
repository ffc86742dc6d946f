"""The Restyle panel: the live Backend section, the shot's settings (presets, pipeline
and model dropdowns, diffusion controls, reference images), the running restyle's
progress with its Cancel button. The operators that run things are in
:mod:`.ui`, the Results section in :mod:`.results_ui`."""

from __future__ import annotations

from typing import Any

import bpy
from bpy.props import EnumProperty

from ..classes import SidebarPanel, draw_hint, draw_running, labelled, wrapped_label
from ..client.local_backend import LOCAL
from ..preferences import preferences
from .backend_status import LINE, LIVE, ensure_timer
from .settings import PRESETS, apply_preset, backend_url, settings


class ActiveRun:
    """The modal restyle now running (the panel's "n/N frames" and Cancel), or none.
    ``op`` is the operator instance: its ``_done``, ``_frames`` and ``_client``."""

    op: Any = None

    @classmethod
    def progress(cls) -> tuple[int, int] | None:
        return None if cls.op is None else (cls.op._done, len(cls.op._frames))

    @classmethod
    def cancel(cls) -> bool:
        """Ask the running restyle to stop (frames done so far stay); False: none runs."""
        client = getattr(cls.op, "_client", None)
        if client is None:
            return False
        client.cancel()
        return True


class PS_OT_restyle_cancel(bpy.types.Operator):
    """Stop the running restyle; the frames done so far stay, and Restyle Shot resumes"""

    bl_idname = "painted_skin.restyle_cancel"
    bl_label = "Cancel Restyle"

    @classmethod
    def poll(cls, context):
        if ActiveRun.op is None:
            cls.poll_message_set("no restyle is running")
            return False
        return True

    def execute(self, context):
        if not ActiveRun.cancel():
            self.report({"WARNING"}, "no restyle is running")
            return {"CANCELLED"}
        self.report({"INFO"}, "restyle: cancelling (the frames done so far stay)")
        return {"FINISHED"}


class PS_OT_restyle_preset(bpy.types.Operator):
    """Set steps, frame size and temporal settings for a fast preview or the final frames"""

    bl_idname = "painted_skin.restyle_preset"
    bl_label = "Restyle Preset"
    bl_options = {"REGISTER", "UNDO"}

    preset: EnumProperty(name="Preset", items=[
        ("FAST", "Fast Preview", "4 steps, 384 px long side, no cross-frame attention"),
        ("FINAL", "Final Quality", "12 steps, 768 px long side, cross-frame attention on "
                                   "the first frame")],
        description="Which set of settings to apply")

    def execute(self, context):
        apply_preset(context.scene, self.preset)
        s = settings(context)
        self.report({"INFO"}, f"{PRESETS[self.preset]['label']}: {s.steps} steps, "
                              f"{s.width}x{s.height}")
        return {"FINISHED"}


class PS_OT_reference_add(bpy.types.Operator):
    """Add a reference image row (pick an image of this .blend or a file)"""

    bl_idname = "painted_skin.reference_add"
    bl_label = "Add Reference"
    bl_options = {"REGISTER", "UNDO"}

    def execute(self, context):
        s = settings(context)
        s.references.add()
        s.references_index = len(s.references) - 1
        return {"FINISHED"}


class PS_OT_reference_remove(bpy.types.Operator):
    """Remove the selected reference image row"""

    bl_idname = "painted_skin.reference_remove"
    bl_label = "Remove Reference"
    bl_options = {"REGISTER", "UNDO"}

    @classmethod
    def poll(cls, context):
        s = settings(context)
        if not 0 <= s.references_index < len(s.references):
            cls.poll_message_set("select a reference row first")
            return False
        return True

    def execute(self, context):
        s = settings(context)
        s.references.remove(s.references_index)
        s.references_index = max(0, min(s.references_index, len(s.references) - 1))
        return {"FINISHED"}


class PS_UL_references(bpy.types.UIList):
    """One reference per row: use toggle, image picker, else the file path, weight."""

    bl_idname = "PS_UL_references"

    def draw_item(self, context, layout, data, item, icon, active_data, active_prop, index=0):
        row = layout.row(align=True)
        row.prop(item, "use", text="")
        row.template_ID(item, "image", open="image.open")
        if item.image is None:
            row.prop(item, "filepath", text="")
        sub = row.row(align=True)
        sub.active = item.use
        sub.ui_units_x = 3
        sub.prop(item, "weight", text="")


STARTED, GIVEN, FOUND = "started here", "at the URL set here", "found, not started here"


def backend_origin(context, status) -> str | None:
    """Whose backend answers: one this Blender started, one at a URL the animator set
    (the panel's field, Connect), or one merely found at the default address — never
    claimed as ours. None: nothing answers."""
    if status is None or not status.ok:
        return None
    if LOCAL.running() and LOCAL.url == status.url:
        return STARTED
    return GIVEN if settings(context).url.strip() == status.url else FOUND


def draw_backend(layout, context) -> None:
    """The Backend section: the live status (device, pipelines, models, queue), the URL,
    Connect, Start/Stop Local Backend."""
    ensure_timer()  # registration does not run in the UI's event loop: start pinging here
    col = layout.column()
    st = LIVE.status
    whose = backend_origin(context, st)
    if LINE["ok"] and whose == FOUND:
        col.label(text="A backend not started here answers", icon="QUESTION")
        col.label(text=f"at {st.url}: Connect to use it")
    else:  # wrapped: the URL's port is the part a cut line loses
        wrapped_label(col, context, LINE["text"], icon="LINKED" if LINE["ok"] else "UNLINKED")
        if LINE["ok"] and whose:
            col.label(text=whose)
    if st is not None and st.ok and st.url == backend_url(context):
        sub = col.column(align=True)
        sub.scale_y = 0.8
        sub.label(text=f"Device: {', '.join(st.devices) or '?'}")
        wrapped_label(sub, context, f"Pipelines: {', '.join(st.pipelines) or 'none'}")
        models = [f"{p}: {', '.join(m)}" for p, m in st.models.items()]
        if models:
            wrapped_label(sub, context, f"Models loaded: {'; '.join(models)}")
        sub.label(text=f"Queue: {st.queue_depth}, {st.sessions} session(s)")
    for line in LINE.get("log_tail", "").splitlines():
        col.label(text=line[:120])
    p = preferences(context)
    if bpy.app.binary_path and p is not None and not p.python:
        wrapped_label(col, context, "Set Preferences > Add-ons > Painted Skin > Backend "
                      "Python to start a local backend (or Connect to a running one)",
                      icon="INFO")
    s = settings(context)
    row = col.row(align=True)
    row.prop(s, "url", text="", placeholder=backend_url(context))
    row.operator("painted_skin.backend_connect", text="", icon="FILE_REFRESH")
    row = col.row(align=True)
    if LOCAL.running():
        row.operator("painted_skin.backend_stop", icon="CANCEL")
    else:
        row.operator("painted_skin.backend_start", icon="PLAY")


def draw_shot(layout, context) -> None:
    """The shot's settings, then Restyle Shot, or the running restyle's progress."""
    s = settings(context)
    col = layout.column()
    row = col.row(align=True)
    row.operator("painted_skin.restyle_preset", text="Fast Preview").preset = "FAST"
    row.operator("painted_skin.restyle_preset", text="Final Quality").preset = "FINAL"
    labelled(col, s, "pipeline_menu")
    if s.pipeline_custom:
        col.prop(s, "pipeline", text="Name")
    labelled(col, s, "model_menu")
    if s.model_custom:
        col.prop(s, "model", text="Name")
    if s.pipeline.strip() == "skin":
        labelled(col, s, "look")
        row = col.row(align=True)
        row.prop(s, "look_mix_with", text="")
        row.prop(s, "look_mix", slider=True)
    labelled(col, s, "prompt")
    labelled(col, s, "negative_prompt")
    row = col.row(align=True)
    row.prop(s, "seed")
    row.prop(s, "steps")
    row = col.row(align=True)
    row.prop(s, "temporal")
    row.prop(s, "cross_frame", text="")
    row = col.row(align=True)
    row.prop(s, "width")
    row.prop(s, "height")
    labelled(col, s, "out_dir")
    col.prop(s, "use_vse")
    progress = ActiveRun.progress()
    if progress is None:
        col.operator("painted_skin.restyle", icon="BRUSH_DATA")
        # the operator by its registered name: its module imports this one
        draw_hint(col, context, bpy.types.PAINTED_SKIN_OT_restyle)
        if s.last_report:
            wrapped_label(col, context, s.last_report, icon="INFO")
    else:
        draw_running(col, progress[0] / max(1, progress[1]),
                     f"{progress[0]}/{progress[1]} frames", "painted_skin.restyle_cancel")


class PS_PT_backend(SidebarPanel, bpy.types.Panel):
    """Third in the workflow (after Retarget and Passes): where frames get painted."""

    bl_idname = "PS_PT_backend"
    bl_label = "Backend"
    bl_order = 2

    def draw(self, context):
        draw_backend(self.layout, context)


class PS_PT_restyle(SidebarPanel, bpy.types.Panel):
    bl_idname = "PS_PT_restyle"
    bl_label = "Restyle"
    bl_order = 4

    def draw(self, context):
        draw_shot(self.layout, context)


class PS_PT_restyle_controls(SidebarPanel, bpy.types.Panel):
    bl_idname = "PS_PT_restyle_controls"
    bl_label = "Diffusion Controls"
    bl_parent_id = "PS_PT_restyle"
    bl_options = {"DEFAULT_CLOSED"}

    def draw(self, context):
        s = settings(context)
        col = self.layout.column()
        for use, value in (("use_guidance", "guidance_scale"), ("use_strength", "strength"),
                           ("use_ref_strength", "ref_strength")):
            row = col.row(align=True)
            row.prop(s, use, text="")
            sub = row.row(align=True)
            sub.active = getattr(s, use)
            sub.prop(s, value)
        col.prop(s, "use_controlnet_scales")
        sub = col.column(align=True)
        sub.active = s.use_controlnet_scales
        for kind in ("depth", "normal", "openpose"):
            sub.prop(s, f"{kind}_scale")
        col.prop(s, "extra_options")


class PS_PT_restyle_references(SidebarPanel, bpy.types.Panel):
    bl_idname = "PS_PT_restyle_references"
    bl_label = "Reference Images"
    bl_parent_id = "PS_PT_restyle"
    bl_options = {"DEFAULT_CLOSED"}

    def draw(self, context):
        s = settings(context)
        row = self.layout.row()
        row.template_list("PS_UL_references", "", s, "references", s, "references_index",
                          rows=3)
        col = row.column(align=True)
        col.operator("painted_skin.reference_add", text="", icon="ADD")
        col.operator("painted_skin.reference_remove", text="", icon="REMOVE")


CLASSES = (PS_OT_restyle_cancel, PS_OT_restyle_preset, PS_OT_reference_add,
           PS_OT_reference_remove, PS_UL_references, PS_PT_backend, PS_PT_restyle,
           PS_PT_restyle_controls,
           PS_PT_restyle_references)
