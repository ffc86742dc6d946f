"""The panel's batch retarget: a file browser with multiple selection (as Blender's
importers have), then :class:`.retarget_modal.BatchRetargetJob` on the panel's timer."""

from __future__ import annotations

from pathlib import Path

import bpy

from .importers import CLIP_TYPES
from .modal import BatchRetargetJob
from .operators import (
    SteppedJobModal,
    _settings,
    _target_poll,
    panel_retarget_args,
    running_job,
)

CLIP_GLOB = ";".join(f"*{ext}" for ext in sorted(CLIP_TYPES))  # the file browser's filter


class PS_OT_retarget_batch(SteppedJobModal, bpy.types.Operator):
    """Retarget several clip files onto the character, each its own Action named after
    its file (in the panel it runs in the background: Esc or Cancel stops the running
    clip, which leaves nothing; the finished clips stay). A clip that fails is named in the
    report and the batch goes on with the others"""

    bl_idname = "painted_skin.retarget_batch"
    bl_label = "Retarget Several Clips"
    bl_options = {"REGISTER", "UNDO"}
    _stopped = "batch retarget stopped"

    files: bpy.props.CollectionProperty(type=bpy.types.OperatorFileListElement,
                                        options={"HIDDEN", "SKIP_SAVE"})
    directory: bpy.props.StringProperty(subtype="DIR_PATH", options={"HIDDEN", "SKIP_SAVE"})
    filter_glob: bpy.props.StringProperty(default=CLIP_GLOB, options={"HIDDEN"})
    # Set by invoke (the file browser): execute then runs the batch in the background.
    in_background: bpy.props.BoolProperty(default=False, options={"HIDDEN", "SKIP_SAVE"})

    @classmethod
    def poll(cls, context):
        if running_job() is not None:
            cls.poll_message_set("a retarget is running: wait for it or press Cancel")
            return False
        return _target_poll(cls, context)

    def _job(self, context) -> BatchRetargetJob:
        """The batch the chosen files and the panel's settings describe, not started."""
        s, scene = _settings(context), context.scene
        folder = bpy.path.abspath(self.directory)
        clips = [str(Path(folder) / f.name) for f in self.files if f.name]
        if not clips:
            raise ValueError("no clip files chosen: pick one or more BVH, FBX or glTF files")
        source_map, target_map, opts = panel_retarget_args(s)
        # As one clip in the panel: the scene's rate and start frame are the animator's.
        return BatchRetargetJob(clips, s.target_object, source_map, target_map, opts,
                                set_scene=False, fps=scene.render.fps / scene.render.fps_base,
                                frame_start=scene.frame_start)

    def invoke(self, context, event):
        if context.window is None:
            return self.execute(context)
        self.in_background = True
        context.window_manager.fileselect_add(self)
        return {"RUNNING_MODAL"}

    def execute(self, context):
        try:
            job = self._job(context)
        except ValueError as e:
            self.report({"ERROR"}, str(e))
            return {"CANCELLED"}
        if context.window is None or not self.in_background:  # scripts, tests: blocking
            self._running = job
            job.run()
            return self._finish(context)
        return self._run_modal(context, job)

    def _ended(self, context) -> set[str]:
        return self._finish(context)

    def _finish(self, context) -> set[str]:
        job, scene = self._running, context.scene
        if job.reports:  # the range ends where the longest clip does, as one clip's does
            scene.frame_end = max(scene.frame_start, *(r.frame_start + r.frames - 1
                                                       for r in job.reports))
        for name, message in job.failures:
            self.report({"WARNING"}, f"{name}: {message}")
        _settings(context).last_report = job.summary
        self.report({"WARNING"} if job.failures or job.cancelled else {"INFO"}, job.summary)
        return {"FINISHED"} if job.reports else {"CANCELLED"}


CLASSES = (PS_OT_retarget_batch,)
