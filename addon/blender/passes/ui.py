"""Passes section of the panel: settings, a modal render operator (progress in the
panel and the status bar, Esc or Cancel stops it, re-running resumes) and a preview of
the current frame in an Image Editor."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import bpy
import numpy as np
from bpy.props import BoolProperty, EnumProperty, IntProperty, StringProperty

from ..classes import (
    SidebarPanel,
    draw_hint,
    draw_running,
    labelled,
    register_classes,
    unregister_classes,
    wrapped_label,
)
from ..image_view import show_image
from ..out_paths import PATH_OPTIONS, UnwritableOutput, passes_output
from .geometry import ShotError, ShotGeometry, render_meshes
from .render import DEFAULT_NAMES, PASSES, PassOptions, make_passes

PREVIEW_IMAGE = "Painted Skin Preview"

#: The render the panel is running: its progress line and Cancel request.
RENDER: dict = {"running": False, "text": "", "cancel": False, "factor": 0.0}


_PREVIEWS = {
    "depth": "Distance to the camera, near bright",
    "normal": "Camera-space surface normals as colours",
    "parts": "Body-part labels as colours",
    "mask": "The character's silhouette",
    "skeleton": "The OpenPose skeleton drawing",
}


class PS_PassesSettings(bpy.types.PropertyGroup):
    engine: EnumProperty(name="Engine", items=[
        ("fast", "Fast", "Our rasteriser over the evaluated meshes (matches Cycles)"),
        ("cycles", "Cycles", "Blender's renderer, the reference")], default="fast",
        description="What renders the passes")
    width: IntProperty(name="Width", default=512, min=16, max=8192,
                       description="Pass image width in pixels")
    last_report: StringProperty(name="Last result", description="What the last Render "
                                "Passes wrote, or why it stopped")
    height: IntProperty(name="Height", default=512, min=16, max=8192,
                        description="Pass image height in pixels")
    out_dir: StringProperty(name="Output", subtype="DIR_PATH", default="//passes/",
                            options=PATH_OPTIONS,
                            description="Folder the passes are written to, one sub-folder "
                                        "per pass (// is the .blend's folder)")
    preview: EnumProperty(name="Preview", items=[(p, p.title(), d) for p, d in
                                                 _PREVIEWS.items()], default="normal",
                          description="Which pass Preview Pass shows for the current frame")
    use_depth: BoolProperty(name="Depth", default=True,
                            description="Camera depth: EXR in scene units, 16- and 8-bit PNGs "
                                        "for ControlNet")
    use_normal: BoolProperty(name="Normal", default=True,
                             description="Camera-space normals: EXR and a colour PNG")
    use_skeleton: BoolProperty(name="Skeleton", default=True,
                               description="OpenPose skeleton: drawing PNG and keypoint JSON "
                                           "(needs a humanoid armature)")
    openpose_normalized: BoolProperty(
        name="OpenPose 0-1 JSON", default=False,
        description="Also write skeleton_normalized/####.json: COCO-18 keypoints in 0-1 "
                    "coordinates, as controlnet_aux and ComfyUI expect")
    use_mask: BoolProperty(name="Mask", default=True,
                           description="The character's silhouette (white on black)")
    use_parts: BoolProperty(name="Parts", default=True,
                            description="Body-part label per pixel, and a colour view of it")
    use_motion: BoolProperty(name="Motion", default=True,
                             description="Screen-space motion to the previous and next frames "
                                         "(EXR), for temporal consistency")
    use_beauty: BoolProperty(name="Beauty", default=False,
                             description="Cycles' own render (needs the Cycles engine)")
    use_rest_position: BoolProperty(
        name="Rest Position", default=False,
        description="Rest-pose position of the surface seen at each pixel (canonical "
                    "coordinates a skin model paints from)")
    use_uv: BoolProperty(name="UV", default=False,
                         description="The surface's UV and whether its mesh has UVs")
    use_normal_world: BoolProperty(name="World Normal", default=False,
                                   description="World-space normals (lights are fixed in "
                                               "the world while the camera moves)")
    use_view_dir: BoolProperty(name="View Direction", default=False,
                               description="World-space direction from the surface to the "
                                           "camera")
    use_light_visibility: BoolProperty(name="Light Visibility", default=False,
                                       description="Per scene light (up to 4): whether the "
                                                   "surface sees it (cast shadows)")
    use_irradiance: BoolProperty(name="Irradiance", default=False,
                                 description="The scene lights' direct light on a white "
                                             "surface (Cycles' Diffuse Direct), shadowed")
    use_specular: BoolProperty(name="Specular", default=False,
                               description="The scene lights reflected toward the camera by a "
                                           "glossy surface of the material's roughness "
                                           "(highlights, rim light), "
                                           "shadowed")
    use_world_light: BoolProperty(name="World Light", default=False,
                                  description="The world's light on a white surface "
                                              "(Cycles' Diffuse Direct from the world): "
                                              "darker where the body hides the sky")
    use_albedo: BoolProperty(name="Albedo", default=False,
                             description="The materials' base colour, linear (Cycles' "
                                         "Diffuse Color): image textures read at their UV map")

    def options(self, scene: bpy.types.Scene) -> PassOptions:
        chosen = tuple(p for p in PASSES if getattr(self, f"use_{p}", False))
        return PassOptions(frames=range(scene.frame_start, scene.frame_end + 1),
                           width=self.width, height=self.height, engine=self.engine,
                           passes=chosen, openpose_normalized=self.openpose_normalized)

    def chosen(self) -> list[str]:
        return [p for p in PASSES if getattr(self, f"use_{p}", False)]


def _settings(context) -> PS_PassesSettings:
    return context.scene.painted_skin_passes


def _shot_poll(cls, context) -> bool:
    """A camera and a visible mesh: what every pass needs (messages say what to add)."""
    scene = context.scene
    if not render_meshes(scene):
        cls.poll_message_set("the scene has no visible mesh: show or import the character")
        return False
    if scene.camera is None and not any(m.camera for m in scene.timeline_markers):
        cls.poll_message_set("the scene has no camera: press Add Camera or set a scene camera")
        return False
    return True


class PassesRun:
    """The panel's render, one frame per :meth:`step`. Every frame is written whole
    before the next starts, so a run stopped between steps leaves complete frames that
    the next run (or ``make_passes``) skips: stopping is resuming later."""

    def __init__(self, scene: bpy.types.Scene, opts: PassOptions, out: Path,
                 names=DEFAULT_NAMES) -> None:
        opts.validate()
        self.scene, self.opts, self.out, self.names = scene, opts, out, names
        self.frames = list(opts.frames)
        self.done = 0

    @property
    def finished(self) -> bool:
        return self.done >= len(self.frames)

    @property
    def progress_text(self) -> str:
        last = f" (frame {self.frames[self.done - 1]})" if self.done else ""
        return f"{self.done}/{len(self.frames)}{last}"

    def step(self) -> bool:
        """Write the next frame's passes (skipped when already complete); True once all
        are done. A ShotError or OSError propagates with the frames so far intact."""
        if not self.finished:
            f = self.frames[self.done]
            make_passes(self.scene, replace(self.opts, frames=range(f, f + 1)), self.out,
                        clean_temps=self.done == 0, names=self.names)
            self.done += 1
        return self.finished


class PS_OT_render_passes(bpy.types.Operator):
    """Write the chosen passes for the scene's frame range (Esc cancels; re-running resumes)"""

    bl_idname = "painted_skin.render_passes"
    bl_label = "Render Passes"

    _timer = None

    @classmethod
    def poll(cls, context):
        if RENDER["running"]:
            cls.poll_message_set("passes are being rendered: wait or press Cancel")
            return False
        s = _settings(context)
        if s.out_dir.startswith("//") and not bpy.data.filepath:
            try:  # refused without touching the disk: the unsaved-file message
                passes_output(s.out_dir)
            except (UnwritableOutput, ValueError) as e:
                cls.poll_message_set(str(e))
                return False
        if not _shot_poll(cls, context):
            return False
        if not s.chosen():
            cls.poll_message_set("no pass is ticked: tick at least one (Depth, Normal...)")
            return False
        return True

    def execute(self, context):
        # Headless (blender -b, the bpy module): no event loop, run blocking.
        s = _settings(context)
        try:
            out, names = passes_output(s.out_dir)
            summary = make_passes(context.scene, s.options(context.scene), out, names=names)
        except (ValueError, OSError) as e:  # ShotError, UnwritableOutput, a damaged manifest
            _tell(self, s, "ERROR", str(e))
            return {"CANCELLED"}
        for w in summary["warnings"]:
            self.report({"WARNING"}, w)
        _tell(self, s, "INFO", f"passes: {summary['done']}/{summary['frames']} frames "
                               f"({summary['written']} written now) in {out}")
        return {"FINISHED"}

    def invoke(self, context, event):
        if context.window is None:
            return self.execute(context)
        s = _settings(context)
        try:
            out, names = passes_output(s.out_dir)
            self._run = PassesRun(context.scene, s.options(context.scene), out, names)
        except (ShotError, UnwritableOutput, ValueError) as e:  # a bad pattern too
            _tell(self, s, "ERROR", str(e))
            return {"CANCELLED"}
        self._error = ""
        # One frame per timer tick keeps the UI alive; Esc or Cancel stops between frames.
        RENDER.update(running=True, cancel=False, text=self._run.progress_text, factor=0.0)
        wm = context.window_manager
        wm.progress_begin(0, len(self._run.frames))
        self._timer = wm.event_timer_add(0.01, window=context.window)
        wm.modal_handler_add(self)
        return {"RUNNING_MODAL"}

    def modal(self, context, event):
        if event.type == "ESC" or RENDER["cancel"]:
            return self._finish(context, cancelled=True)
        if event.type != "TIMER":
            return {"PASS_THROUGH"}
        run = self._run
        try:
            ended = run.step()
        except Exception as e:  # ShotError, a full disk, the scene changed under it...
            self._error = (str(e) if isinstance(e, ValueError | OSError)
                           else f"{type(e).__name__}: {e}")
            self.report({"ERROR"}, self._error)
            return self._finish(context, cancelled=True)
        context.window_manager.progress_update(run.done)
        RENDER.update(text=run.progress_text, factor=run.done / max(1, len(run.frames)))
        for area in context.screen.areas if context.screen else ():
            if area.type == "VIEW_3D":
                area.tag_redraw()
        context.workspace.status_text_set(f"Painted Skin passes: {run.progress_text} "
                                          "— Esc to stop")
        if ended:
            return self._finish(context, cancelled=False)
        return {"RUNNING_MODAL"}

    def _release(self, context) -> None:
        wm = context.window_manager
        if getattr(self, "_timer", None) is not None:
            wm.event_timer_remove(self._timer)
            self._timer = None
        wm.progress_end()
        if context.workspace is not None:
            context.workspace.status_text_set(None)
        RENDER.update(running=False, cancel=False, text="")

    def cancel(self, context):
        # Blender ends the modal (a file is opened, Blender quits): the button comes back.
        self._release(context)

    def _finish(self, context, cancelled: bool):
        self._release(context)
        why = getattr(self, "_error", "")
        _tell(self, _settings(context), "WARNING" if cancelled else "INFO",
              f"passes: {self._run.done}/{len(self._run.frames)} frames in {self._run.out}"
              + (f" (stopped: {why}; run again to resume)" if why
                 else " (stopped; run again to resume)" if cancelled else ""))
        return {"CANCELLED"} if cancelled else {"FINISHED"}


def _tell(op: bpy.types.Operator, s: PS_PassesSettings, kind: str, text: str) -> None:
    """Report ``text`` and keep it under the button: the status bar's message is gone in
    seconds, the animator reads this one when they come back."""
    s.last_report = text
    op.report({kind}, text)


def preview_array(scene: bpy.types.Scene, s: PS_PassesSettings) -> np.ndarray:
    """The chosen pass of the current frame as an RGBA float image (top row first)."""
    from ...core.passes import encodings
    from .render import iter_frames

    want = {"depth": ("depth",), "normal": ("normal",), "parts": ("parts",), "mask": ("mask",),
            "skeleton": ("skeleton",)}[s.preview]
    opts = PassOptions(frames=range(scene.frame_current, scene.frame_current + 1),
                       width=s.width, height=s.height, engine="fast", passes=want)
    geo = ShotGeometry(scene, s.width, s.height)
    f = scene.frame_current
    _, _, arrays, skel = next(iter_frames(scene, geo, opts, [f]))
    if s.preview == "depth":
        d = arrays["depth"]
        finite = np.isfinite(d)
        lo, hi = (d[finite].min(), d[finite].max()) if finite.any() else (0.0, 1.0)
        rgb = encodings.depth_to_u16(d, lo - 1e-3, hi + 1e-3)[..., None].repeat(3, -1) / 65535
    elif s.preview == "normal":
        rgb = encodings.normal_to_color(arrays["normal"], arrays["mask"]) / 255.0
    elif s.preview == "parts":
        rgb = encodings.parts_to_color(arrays["parts"]) / 255.0
    elif s.preview == "mask":
        rgb = arrays["mask"][..., None].repeat(3, -1).astype(float)
    else:
        rgb = (skel[0] if skel else np.zeros((s.height, s.width, 3))) / 255.0
    return np.concatenate([rgb, np.ones(rgb.shape[:2] + (1,))], axis=-1).astype(np.float32)


class PS_OT_preview_pass(bpy.types.Operator):
    """Compute the chosen pass of the current frame and show it in an Image Editor (one is
    opened beside this area when the screen has none)"""

    bl_idname = "painted_skin.preview_pass"
    bl_label = "Preview Pass"

    @classmethod
    def poll(cls, context):
        return _shot_poll(cls, context)

    def execute(self, context):
        s = _settings(context)
        try:
            rgba = preview_array(context.scene, s)
        except ShotError as e:
            self.report({"ERROR"}, str(e))
            return {"CANCELLED"}
        img = bpy.data.images.get(PREVIEW_IMAGE)
        if img is None or tuple(img.size) != (s.width, s.height):
            if img is not None:
                bpy.data.images.remove(img)
            img = bpy.data.images.new(PREVIEW_IMAGE, s.width, s.height, alpha=True,
                                      float_buffer=True)
        img.pixels.foreach_set(rgba[::-1].ravel())  # Blender stores rows bottom-up
        img.update()
        shown = show_image(context, img)
        self.report({"INFO"}, f"{s.preview} of frame {context.scene.frame_current}: preview "
                              f"in image {img.name!r}"
                              + ("" if shown else " (no window here to show it in)"))
        return {"FINISHED"}


class PS_OT_add_camera(bpy.types.Operator):
    """Add a three-quarter camera that frames the character and follows its hips,
    and make it the scene camera"""

    bl_idname = "painted_skin.add_camera"
    bl_label = "Add Camera"
    bl_options = {"REGISTER", "UNDO"}

    @classmethod
    def poll(cls, context):
        if not render_meshes(context.scene):
            cls.poll_message_set("no character to frame: show or import the character's mesh")
            return False
        return True

    def execute(self, context):
        from .auto_camera import add_follow_camera

        try:
            cam = add_follow_camera(context.scene)
        except ShotError as e:
            self.report({"ERROR"}, str(e))
            return {"CANCELLED"}
        self.report({"INFO"}, f"scene camera: {cam.name}")
        return {"FINISHED"}


class PS_OT_cancel_passes(bpy.types.Operator):
    """Stop rendering passes after the current frame (Render Passes again resumes)"""

    bl_idname = "painted_skin.cancel_passes"
    bl_label = "Cancel"

    @classmethod
    def poll(cls, context):
        if not RENDER["running"]:
            cls.poll_message_set("no passes are being rendered")
            return False
        return True

    def execute(self, context):
        RENDER["cancel"] = True
        return {"FINISHED"}


class PS_PT_passes(SidebarPanel, bpy.types.Panel):
    bl_idname = "PS_PT_passes"
    bl_label = "Passes"
    bl_order = 1

    def draw(self, context):
        s = _settings(context)
        col = self.layout.column()
        col.prop(s, "engine", expand=True)
        row = col.row(align=True)
        row.prop(s, "width")
        row.prop(s, "height")
        labelled(col, s, "out_dir")
        if context.scene.camera is None:
            col.operator("painted_skin.add_camera", icon="CAMERA_DATA")
        if RENDER["running"]:
            draw_running(col, RENDER["factor"], f"Rendering {RENDER['text']}",
                         "painted_skin.cancel_passes")
        else:
            col.operator("painted_skin.render_passes", icon="RENDER_ANIMATION")
            draw_hint(col, context, PS_OT_render_passes)
            if s.last_report:
                wrapped_label(col, context, s.last_report, icon="INFO")
        row = col.row(align=True)
        row.prop(s, "preview", text="")
        row.operator("painted_skin.preview_pass", icon="IMAGE_DATA")


class PS_PT_passes_select(SidebarPanel, bpy.types.Panel):
    """Which passes to render, folded: the default set is what the backends read, and
    Render Passes stays on the first screen."""

    bl_idname = "PS_PT_passes_select"
    bl_label = "Passes to Render"
    bl_parent_id = "PS_PT_passes"
    bl_options = {"DEFAULT_CLOSED"}

    def draw(self, context):
        s = _settings(context)
        col = self.layout.column()
        grid = col.grid_flow(columns=2, align=True)
        for p in PASSES:
            if hasattr(s, f"use_{p}"):
                grid.prop(s, f"use_{p}")
        sub = col.row()
        sub.active = s.use_skeleton
        sub.prop(s, "openpose_normalized")


CLASSES = (PS_PassesSettings, PS_OT_render_passes, PS_OT_preview_pass, PS_OT_add_camera,
           PS_OT_cancel_passes, PS_PT_passes, PS_PT_passes_select)


def register() -> None:
    register_classes(CLASSES, painted_skin_passes=PS_PassesSettings)


def unregister() -> None:
    unregister_classes(CLASSES, "painted_skin_passes")
