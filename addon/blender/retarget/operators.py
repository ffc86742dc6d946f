"""Operators of the Retarget panel: thin wrappers over ``retarget_api``."""

from __future__ import annotations

import json
from pathlib import Path

import bpy
from bpy_extras.io_utils import ExportHelper, ImportHelper

from ...core.bonemap import BoneMap, auto_map, resolve_map
from ...core.retarget.solve import RetargetOptions
from ..session import stash_action
from .api import RetargetError
from .armature_io import read_skeleton
from .modal import STAGES, RetargetJob


def _settings(context):
    return context.scene.painted_skin_retarget


def _target_poll(cls, context) -> bool:
    obj = _settings(context).target_object
    if obj is None or obj.type != "ARMATURE":
        cls.poll_message_set("choose the character's armature in the Character field")
        return False
    return True


def selected_armature(context) -> bpy.types.Object | None:
    """The armature the animator has selected: the active object, or the armature that
    deforms the active mesh (a click on the character's body)."""
    obj = getattr(context, "active_object", None)
    if obj is None:
        return None
    if obj.type == "ARMATURE":
        return obj
    mod = next((m for m in getattr(obj, "modifiers", ()) if m.type == "ARMATURE"
                and m.object is not None), None)
    return mod.object if mod is not None else None


class PS_OT_use_selected_character(bpy.types.Operator):
    """Retarget onto the selected character: the active armature, or the one deforming
    the selected mesh"""

    bl_idname = "painted_skin.use_selected_character"
    bl_label = "Use Selected Character"
    bl_options = {"REGISTER", "UNDO"}

    @classmethod
    def poll(cls, context):
        if selected_armature(context) is None:
            cls.poll_message_set("select the character (its armature or its body) first")
            return False
        return True

    def execute(self, context):
        arm = selected_armature(context)
        _settings(context).target_object = arm
        self.report({"INFO"}, f"Character: {arm.name}")
        return {"FINISHED"}


def panel_retarget_args(s) -> tuple[str, str | BoneMap, RetargetOptions]:
    """(source map, target map, options) the Retarget panel's settings give: what one
    clip and a batch of clips both retarget with."""
    target_map = _map_from_rows(s) if s.use_edited_map and len(s.target_map) else (
        "auto" if s.target_preset == "AUTO" else s.target_preset)
    source_map = "auto" if s.source_preset == "AUTO" else s.source_preset
    return source_map, target_map, RetargetOptions(in_place=s.in_place, foot_lock=s.foot_lock,
                                                   ground=s.ground, keep_posture=s.keep_posture)


def _map_from_rows(s) -> BoneMap:
    bones = {r.canonical: r.bone for r in s.target_map if r.bone}
    return BoneMap.from_dict({"bones": bones})


def _fill_rows(s, bmap: BoneMap) -> None:
    s.target_map.clear()
    for canonical, bone in bmap.bones.items():
        row = s.target_map.add()
        row.canonical, row.bone = canonical, bone
        row.confidence = bmap.confidence.get(canonical, 1.0)
        row.origin = bmap.source.get(canonical, "")


class PS_OT_detect_map(bpy.types.Operator):
    """Detect the character's bone map (or load the chosen preset) for editing"""

    bl_idname = "painted_skin.detect_map"
    bl_label = "Detect Bone Map"
    bl_options = {"REGISTER", "UNDO"}

    @classmethod
    def poll(cls, context):
        return _target_poll(cls, context)

    def execute(self, context):
        s = _settings(context)
        skel = read_skeleton(s.target_object)
        try:
            bmap = auto_map(skel) if s.target_preset == "AUTO" else resolve_map(
                s.target_preset, skel)
        except ValueError as e:
            self.report({"ERROR"}, str(e))
            return {"CANCELLED"}
        _fill_rows(s, bmap)
        s.use_edited_map = True
        if bmap.missing_core:
            self.report({"WARNING"}, f"not mapped: {', '.join(bmap.missing_core)}")
        else:
            self.report({"INFO"}, f"{len(bmap.bones)} joints mapped")
        return {"FINISHED"}


def _source_poll(cls, context) -> bool:
    s = _settings(context)
    if s.source_kind == "FILE" and not s.source_path:
        cls.poll_message_set("no clip chosen: pick a BVH, FBX or glTF file in the Clip field")
        return False
    if s.source_kind == "OBJECT" and s.source_object is None:
        cls.poll_message_set("no source armature chosen: pick the animated armature in the "
                             "Source armature field")
        return False
    return True


#: The retarget the panel is running (at most one): its progress and Cancel button.
RUNNING: dict[str, RetargetJob | None] = {"job": None}


def running_job() -> RetargetJob | None:
    job = RUNNING["job"]
    return job if job is not None and not job.finished else None


def stopped_line(stopped: str, e: Exception) -> str:
    """The report of a job an unexpected error ended: data removed under it (a file
    opened, undo, the character deleted) is said so, with what to do; anything else
    keeps its type and message for a bug report."""
    if isinstance(e, ReferenceError):
        return (f"{stopped}: the character or its scene was removed while it ran (a file "
                "opened, undo, or a deletion); run it again")
    return f"{stopped}: {type(e).__name__}: {e}"


class SteppedJobModal:
    """The timer loop of the panel's retarget operators (one clip, a batch): each tick
    runs one slice of the job (``step()``), Esc or the Cancel button asks it to stop,
    and when it has ended the operator's ``_ended`` reports. A mixin for an Operator
    whose job is in ``RUNNING`` while it runs (the panel's progress and Cancel)."""

    _stopped = "retarget stopped"  # how an unexpected error is reported

    def _run_modal(self, context, job) -> set[str]:
        self._running = RUNNING["job"] = job
        wm = context.window_manager
        self._timer = wm.event_timer_add(0.02, window=context.window)
        wm.modal_handler_add(self)
        return {"RUNNING_MODAL"}

    def modal(self, context, event):
        job = self._running
        if event.type == "ESC" and event.value == "PRESS":
            job.cancel_requested = True
        elif event.type != "TIMER":
            return {"PASS_THROUGH"}
        try:
            ended = job.step()
        except Exception as e:  # also the scene changed under it (an object deleted, undo)
            job.cancel()
            self.report({"ERROR"}, str(e) if isinstance(e, RetargetError)
                        else stopped_line(self._stopped, e))
            ended = True
        _redraw_sidebars(context)
        if not ended:
            return {"RUNNING_MODAL"}
        self._remove_timer(context)
        return self._ended(context)

    def _remove_timer(self, context) -> None:
        if getattr(self, "_timer", None) is not None:
            context.window_manager.event_timer_remove(self._timer)
            self._timer = None

    def cancel(self, context):
        # Blender ends the modal (a file is opened, Blender quits) — or, for the batch,
        # its file browser was cancelled before any job began: stop where it is.
        job = getattr(self, "_running", None)
        if job is not None:
            job.cancel()
        self._remove_timer(context)


class PS_OT_retarget(SteppedJobModal, bpy.types.Operator):
    """Retarget the clip onto the character and bake an Action (one undo step; in the
    panel it runs in the background: Esc or Cancel stops it and keeps the previous Action)"""

    bl_idname = "painted_skin.retarget"
    bl_label = "Retarget"
    bl_options = {"REGISTER", "UNDO"}

    match_scene: bpy.props.BoolProperty(
        name="Match Scene to Clip", default=False,
        description="Set the scene's frame rate and frame range from the clip and bake one "
                    "key per clip frame. Off: keep the scene's frame rate and start frame, "
                    "resample the clip to the scene's rate, and end the scene's range where "
                    "the clip ends")

    @classmethod
    def poll(cls, context):
        if running_job() is not None:
            cls.poll_message_set("a retarget is running: wait for it or press Cancel")
            return False
        return _target_poll(cls, context) and _source_poll(cls, context)

    def _job(self, context) -> RetargetJob:
        """The retarget the panel's settings describe, not started yet."""
        s = _settings(context)
        source = bpy.path.abspath(s.source_path) if s.source_kind == "FILE" else s.source_object
        source_map, target_map, opts = panel_retarget_args(s)
        scene = context.scene
        if self.match_scene:
            timing = {"set_scene": True}
        else:
            # The scene's rate and start frame are the animator's: the clip is resampled
            # to the rate; a file clip starts at the scene's start, an armature already in
            # this scene keeps its own frames (it plays at this rate here already).
            timing = {"set_scene": False, "fps": scene.render.fps / scene.render.fps_base,
                      "frame_start": scene.frame_start if s.source_kind == "FILE" else None}
        ad = s.target_object.animation_data
        self._previous = ad.action if ad is not None else None
        self._target = s.target_object  # the armature baked, whatever the panel shows later
        return RetargetJob(source, s.target_object, source_map, target_map, opts, **timing)

    def execute(self, context):
        # Headless (the CLI, scripts, tests): blocking, progress in the status bar.
        job = self._job(context)
        wm = context.window_manager
        wm.progress_begin(0, STAGES)
        try:
            while not job.step():
                wm.progress_update(job.done)
                if context.workspace is not None:
                    context.workspace.status_text_set(f"Painted Skin: {job.message}")
        except RetargetError as e:
            self.report({"ERROR"}, str(e))
            return {"CANCELLED"}
        finally:
            wm.progress_end()
            if context.workspace is not None:
                context.workspace.status_text_set(None)
        return self._finish(context, job.report)

    def invoke(self, context, event):
        if context.window is None:
            return self.execute(context)
        return self._run_modal(context, self._job(context))

    def _ended(self, context) -> set[str]:
        job = self._running
        if job.report is None:
            if job.cancel_requested:
                _settings(context).last_report = "retarget cancelled: the previous action is kept"
                self.report({"WARNING"}, _settings(context).last_report)
            return {"CANCELLED"}
        return self._finish(context, job.report)

    def _finish(self, context, report):
        s, scene, previous = _settings(context), context.scene, self._previous
        if previous is not None and previous.users == 0:
            # Keep the replaced take in the file, as Blender's own action stash does.
            stash_action(self._target, previous)
        if not self.match_scene:  # the range is the action's: Render Passes renders it
            scene.frame_end = max(scene.frame_start, report.frame_start + report.frames - 1)
        skate = report.foot_skate_cm_before, report.foot_skate_cm_after
        rate = (f" @ {report.fps:g} fps" + (f" (clip {report.source_fps:g} fps)"
                                            if report.source_fps != report.fps else ""))
        s.last_report = (f"{report.action}: {report.frames} frames{rate} "
                         f"({scene.frame_start}-{scene.frame_end}), "
                         f"{len(report.pairs)} joints"
                         + (f", skate {skate[0]:.1f}->{skate[1]:.1f} cm" if skate[1] is not None
                            else "")
                         + (f", {len(report.warnings)} warning(s)" if report.warnings else ""))
        for w in report.warnings:
            self.report({"WARNING"}, w)
        self.report({"INFO"}, s.last_report)
        return {"FINISHED"}


class PS_OT_cancel_retarget(bpy.types.Operator):
    """Stop the running retarget: the character keeps its previous Action"""

    bl_idname = "painted_skin.cancel_retarget"
    bl_label = "Cancel"

    @classmethod
    def poll(cls, context):
        if running_job() is None:
            cls.poll_message_set("no retarget is running")
            return False
        return True

    def execute(self, context):
        running_job().cancel_requested = True
        return {"FINISHED"}


def _redraw_sidebars(context) -> None:
    for area in context.screen.areas if context.screen else ():
        if area.type == "VIEW_3D":
            area.tag_redraw()


class PS_OT_save_map(bpy.types.Operator, ExportHelper):
    """Save the character bone map shown in the list (TOML or JSON)"""

    bl_idname = "painted_skin.save_map"
    bl_label = "Save Bone Map"
    filename_ext = ".toml"
    filter_glob: bpy.props.StringProperty(default="*.toml;*.json", options={"HIDDEN"})

    def execute(self, context):
        try:
            _map_from_rows(_settings(context)).save(self.filepath)
        except (OSError, ValueError) as e:
            self.report({"ERROR"}, str(e))
            return {"CANCELLED"}
        return {"FINISHED"}


class PS_OT_load_map(bpy.types.Operator, ImportHelper):
    """Load a bone map file into the list"""

    bl_idname = "painted_skin.load_map"
    bl_label = "Load Bone Map"
    bl_options = {"REGISTER", "UNDO"}
    filter_glob: bpy.props.StringProperty(default="*.toml;*.json", options={"HIDDEN"})

    def execute(self, context):
        s = _settings(context)
        try:
            bmap = BoneMap.load(Path(self.filepath))
        except (OSError, ValueError, json.JSONDecodeError) as e:
            self.report({"ERROR"}, str(e))
            return {"CANCELLED"}
        _fill_rows(s, bmap)
        s.use_edited_map = True
        return {"FINISHED"}


CLASSES = (PS_OT_detect_map, PS_OT_retarget, PS_OT_cancel_retarget, PS_OT_save_map,
           PS_OT_load_map, PS_OT_use_selected_character)
