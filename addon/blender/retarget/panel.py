"""Sidebar tab "Painted Skin" in the 3D viewport."""

from __future__ import annotations

import bpy

from ..classes import SidebarPanel, draw_hint, draw_running, labelled, wrapped_label
from .batch_ui import CLASSES as RETARGET_BATCH_CLASSES
from .operators import PS_OT_retarget, running_job, selected_armature


class PS_UL_bone_map(bpy.types.UIList):
    """Canonical joint -> bone, editable with a bone picker."""

    bl_idname = "PS_UL_bone_map"

    def draw_item(self, context, layout, data, item, icon, active_data, active_prop, index=0):
        s = context.scene.painted_skin_retarget
        # The joint and the bone share the row; the confidence shows only when it is low
        # (an icon), so neither name is cut at the sidebar's default width.
        split = layout.split(factor=0.42, align=True)
        split.label(text=item.canonical)
        row = split.row(align=True)
        arm = s.target_object.data if s.target_object else None
        if arm is not None:
            row.prop_search(item, "bone", arm, "bones", text="")
        else:
            row.prop(item, "bone", text="")
        if item.confidence < 0.75:
            row.label(text="", icon="ERROR")


class PS_PT_retarget(SidebarPanel, bpy.types.Panel):
    bl_idname = "PS_PT_retarget"
    bl_label = "Retarget"
    bl_order = 0  # the workflow: Retarget, Passes, Backend, Skin Model, Restyle, Results

    def draw(self, context):
        s = context.scene.painted_skin_retarget
        layout = self.layout
        col = layout.column()
        col.prop(s, "source_kind", expand=True)
        if s.source_kind == "FILE":
            labelled(col, s, "source_path")
        else:
            labelled(col, s, "source_object")
        labelled(col, s, "source_preset")
        col.separator()
        labelled(col, s, "target_object")
        picked = selected_armature(context)
        if s.target_object is None and picked is not None:
            col.operator("painted_skin.use_selected_character",
                         text=f"Use Selected: {picked.name}", icon="EYEDROPPER")
        labelled(col, s, "target_preset")
        row = col.row(align=True)
        row.operator("painted_skin.detect_map", icon="BONE_DATA")
        row.operator("painted_skin.load_map", text="", icon="FILEBROWSER")
        row.operator("painted_skin.save_map", text="", icon="FILE_TICK")
        if len(s.target_map):
            col.prop(s, "use_edited_map")
            col.template_list("PS_UL_bone_map", "", s, "target_map", s, "target_map_index",
                              rows=6)
        col.separator()
        job = running_job()
        if job is not None:
            draw_running(col, job.fraction, f"Retargeting {job.progress_text}",
                         "painted_skin.cancel_retarget")
        else:
            row = col.row(align=True)
            row.operator("painted_skin.retarget", icon="ARMATURE_DATA")
            # several clip files, each its own Action (a multi-select file browser)
            row.operator("painted_skin.retarget_batch", text="", icon="DOCUMENTS")
            draw_hint(col, context, PS_OT_retarget)
        if s.last_report:
            wrapped_label(col, context, s.last_report, icon="INFO")


class PS_PT_retarget_options(SidebarPanel, bpy.types.Panel):
    """How the motion lands on the character, folded: the defaults suit most clips, and
    the Retarget button stays on the first screen."""

    bl_idname = "PS_PT_retarget_options"
    bl_label = "Options"
    bl_parent_id = "PS_PT_retarget"
    bl_options = {"DEFAULT_CLOSED"}

    def draw(self, context):
        s = context.scene.painted_skin_retarget
        col = self.layout.column()
        col.prop(s, "ground")
        row = col.row()
        row.prop(s, "in_place")
        row.prop(s, "foot_lock")
        col.prop(s, "keep_posture")


CLASSES = (PS_UL_bone_map, PS_PT_retarget, PS_PT_retarget_options, *RETARGET_BATCH_CLASSES)
