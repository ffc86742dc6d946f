"""Sidebar tab "Painted Skin" in the 3D viewport."""

from __future__ import annotations

import bpy

from ..classes import SidebarPanel, draw_running, wrapped_label
from .batch_ui import CLASSES as RETARGET_BATCH_CLASSES
from .operators import running_job


class PS_UL_bone_map(bpy.types.UIList):
    """Canonical joint -> bone, editable with a bone picker."""

    bl_idname = "PS_UL_bone_map"

    def draw_item(self, context, layout, data, item, icon, active_data, active_prop, index=0):
        s = context.scene.painted_skin_retarget
        row = layout.row(align=True)
        row.label(text=item.canonical)
        arm = s.target_object.data if s.target_object else None
        if arm is not None:
            row.prop_search(item, "bone", arm, "bones", text="")
        else:
            row.prop(item, "bone", text="")
        low = item.confidence < 0.75
        row.label(text=f"{item.confidence:.2f}", icon="ERROR" if low else "NONE")


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
            col.prop(s, "source_path")
        else:
            col.prop(s, "source_object")
        col.prop(s, "source_preset")
        col.separator()
        col.prop(s, "target_object")
        col.prop(s, "target_preset")
        row = col.row(align=True)
        row.operator("painted_skin.detect_map", icon="BONE_DATA")
        row.operator("painted_skin.load_map", text="", icon="FILEBROWSER")
        row.operator("painted_skin.save_map", text="", icon="FILE_TICK")
        if len(s.target_map):
            col.prop(s, "use_edited_map")
            col.template_list("PS_UL_bone_map", "", s, "target_map", s, "target_map_index",
                              rows=6)
        col.separator()
        col.prop(s, "ground")
        row = col.row()
        row.prop(s, "in_place")
        row.prop(s, "foot_lock")
        col.prop(s, "keep_posture")
        job = running_job()
        if job is not None:
            draw_running(col, job.fraction, f"Retargeting {job.progress_text}",
                         "painted_skin.cancel_retarget")
        else:
            row = col.row(align=True)
            row.operator("painted_skin.retarget", icon="ARMATURE_DATA")
            # several clip files, each its own Action (a multi-select file browser)
            row.operator("painted_skin.retarget_batch", text="", icon="DOCUMENTS")
        if s.last_report:
            wrapped_label(col, context, s.last_report, icon="INFO")


CLASSES = (PS_UL_bone_map, PS_PT_retarget, *RETARGET_BATCH_CLASSES)
