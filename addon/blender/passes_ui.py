"""Passes section of the panel: settings, a modal render operator (progress in
the status bar, Esc cancels) and a preview of the current frame in an image."""

from __future__ import annotations

import bpy
import numpy as np
from bpy.props import BoolProperty, EnumProperty, IntProperty, StringProperty

from .classes import register_classes, unregister_classes
from .out_paths import PATH_OPTIONS, UnwritableOutput, output_folder
from .passes import PASSES, PassOptions, make_passes
from .shot_geometry import ShotError, ShotGeometry

PREVIEW_IMAGE = "Painted Skin Preview"


class PS_PassesSettings(bpy.types.PropertyGroup):
    engine: EnumProperty(name="Engine", items=[
        ("fast", "Fast", "Our rasteriser over the evaluated meshes (matches Cycles)"),
        ("cycles", "Cycles", "Blender's renderer, the reference")], default="fast")
    width: IntProperty(name="Width", default=512, min=16, max=8192)
    height: IntProperty(name="Height", default=512, min=16, max=8192)
    out_dir: StringProperty(name="Output", subtype="DIR_PATH", default="//passes/",
                            options=PATH_OPTIONS)
    preview: EnumProperty(name="Preview", items=[(p, p.title(), "") for p in
                                                 ("depth", "normal", "parts", "mask",
                                                  "skeleton")], default="normal")
    use_depth: BoolProperty(name="Depth", default=True)
    use_normal: BoolProperty(name="Normal", default=True)
    use_skeleton: BoolProperty(name="Skeleton", default=True)
    use_mask: BoolProperty(name="Mask", default=True)
    use_parts: BoolProperty(name="Parts", default=True)
    use_motion: BoolProperty(name="Motion", default=True)
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

    def options(self, scene: bpy.types.Scene) -> PassOptions:
        chosen = tuple(p for p in PASSES if getattr(self, f"use_{p}", False))
        return PassOptions(frames=range(scene.frame_start, scene.frame_end + 1),
                           width=self.width, height=self.height, engine=self.engine,
                           passes=chosen)


def _settings(context) -> PS_PassesSettings:
    return context.scene.painted_skin_passes


class PS_OT_render_passes(bpy.types.Operator):
    """Write the chosen passes for the scene's frame range (Esc cancels; re-running resumes)"""

    bl_idname = "painted_skin.render_passes"
    bl_label = "Render Passes"

    _timer = None

    def execute(self, context):
        # Headless (blender -b, the bpy module): no event loop, run blocking.
        s = _settings(context)
        try:
            summary = make_passes(context.scene, s.options(context.scene),
                                  output_folder(s.out_dir, "passes"))
        except (ValueError, OSError) as e:  # ShotError, UnwritableOutput, a damaged manifest
            self.report({"ERROR"}, str(e))
            return {"CANCELLED"}
        for w in summary["warnings"]:
            self.report({"WARNING"}, w)
        self.report({"INFO"}, f"passes: {summary['done']}/{summary['frames']} frames "
                              f"({summary['written']} written now)")
        return {"FINISHED"}

    def invoke(self, context, event):
        if context.window is None:
            return self.execute(context)
        s = _settings(context)
        opts = s.options(context.scene)
        try:
            opts.validate()
            self._out = output_folder(s.out_dir, "passes")
        except (ShotError, UnwritableOutput) as e:
            self.report({"ERROR"}, str(e))
            return {"CANCELLED"}
        # One frame per timer tick keeps the UI alive; Esc stops between frames.
        self._frames = list(opts.frames)
        self._opts, self._k, self._cancel = opts, 0, False
        wm = context.window_manager
        wm.progress_begin(0, len(self._frames))
        self._timer = wm.event_timer_add(0.01, window=context.window)
        wm.modal_handler_add(self)
        return {"RUNNING_MODAL"}

    def modal(self, context, event):
        if event.type == "ESC":
            return self._finish(context, cancelled=True)
        if event.type != "TIMER":
            return {"PASS_THROUGH"}
        f = self._frames[self._k]
        opts = PassOptions(frames=range(f, f + 1), width=self._opts.width,
                           height=self._opts.height, engine=self._opts.engine,
                           passes=self._opts.passes)
        try:
            make_passes(context.scene, opts, self._out, clean_temps=self._k == 0)
        except (ValueError, OSError) as e:  # ShotError, a damaged manifest, a full disk...
            self.report({"ERROR"}, str(e))
            return self._finish(context, cancelled=True)
        self._k += 1
        context.window_manager.progress_update(self._k)
        context.workspace.status_text_set(f"Painted Skin passes: frame {f} "
                                          f"({self._k}/{len(self._frames)}) — Esc to stop")
        if self._k >= len(self._frames):
            return self._finish(context, cancelled=False)
        return {"RUNNING_MODAL"}

    def _finish(self, context, cancelled: bool):
        wm = context.window_manager
        wm.event_timer_remove(self._timer)
        wm.progress_end()
        context.workspace.status_text_set(None)
        self.report({"WARNING"} if cancelled else {"INFO"},
                    f"passes: {self._k}/{len(self._frames)} frames"
                    + (" (stopped; run again to resume)" if cancelled else ""))
        return {"CANCELLED"} if cancelled else {"FINISHED"}


def preview_array(scene: bpy.types.Scene, s: PS_PassesSettings) -> np.ndarray:
    """The chosen pass of the current frame as an RGBA float image (top row first)."""
    from ..core import encodings
    from .passes import iter_frames

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
    """Compute the chosen pass of the current frame and show it in an Image Editor"""

    bl_idname = "painted_skin.preview_pass"
    bl_label = "Preview Pass"

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
        for area in context.screen.areas if context.screen else ():
            if area.type == "IMAGE_EDITOR":
                area.spaces.active.image = img
        return {"FINISHED"}


class PS_OT_add_camera(bpy.types.Operator):
    """Add a three-quarter camera that frames the character and follows its hips,
    and make it the scene camera"""

    bl_idname = "painted_skin.add_camera"
    bl_label = "Add Camera"
    bl_options = {"REGISTER", "UNDO"}

    def execute(self, context):
        from .auto_camera import add_follow_camera

        try:
            cam = add_follow_camera(context.scene)
        except ShotError as e:
            self.report({"ERROR"}, str(e))
            return {"CANCELLED"}
        self.report({"INFO"}, f"scene camera: {cam.name}")
        return {"FINISHED"}


class PS_PT_passes(bpy.types.Panel):
    bl_idname = "PS_PT_passes"
    bl_label = "Passes"
    bl_space_type = "VIEW_3D"
    bl_region_type = "UI"
    bl_category = "Painted Skin"

    def draw(self, context):
        s = _settings(context)
        col = self.layout.column()
        col.prop(s, "engine", expand=True)
        row = col.row(align=True)
        row.prop(s, "width")
        row.prop(s, "height")
        grid = col.grid_flow(columns=2, align=True)
        for p in PASSES:
            if hasattr(s, f"use_{p}"):
                grid.prop(s, f"use_{p}")
        col.prop(s, "out_dir")
        if context.scene.camera is None:
            col.operator("painted_skin.add_camera", icon="CAMERA_DATA")
        col.operator("painted_skin.render_passes", icon="RENDER_ANIMATION")
        row = col.row(align=True)
        row.prop(s, "preview", text="")
        row.operator("painted_skin.preview_pass", icon="IMAGE_DATA")


CLASSES = (PS_PassesSettings, PS_OT_render_passes, PS_OT_preview_pass, PS_OT_add_camera,
           PS_PT_passes)


def register() -> None:
    register_classes(CLASSES, painted_skin_passes=PS_PassesSettings)


def unregister() -> None:
    unregister_classes(CLASSES, "painted_skin_passes")
