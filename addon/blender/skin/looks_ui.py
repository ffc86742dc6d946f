"""Skin Model ▸ Looks: the character's looks, each learned from a few keyframes an artist
paints (``painted-skin learn-look``).

A look is a name and a folder of keys (``//looks/NAME/NNNN.png``). *Paint Keyframe*
paints the current frame with the skin model (the underlay: the character as the model
paints it now), saves it into the look's folder and opens it in an Image Editor in paint
mode. *Learn Look* saves painted keys, then runs ``learn-look --look NAME`` as a child
process (progress and Cancel as Train's); the look joins the Model Folder, where the
Restyle section's Look menu finds it.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path

import bpy
from bpy.props import CollectionProperty, FloatProperty, IntProperty, StringProperty

from ..classes import SidebarPanel, draw_hint, labelled, register_classes, unregister_classes
from ..out_paths import PATH_OPTIONS
from ..preferences import preferences
from . import ui as skin_ui

KEY_FILE = re.compile(r"\d{4,8}\.png")


def _look_name_changed(self, context) -> None:
    fixed = re.sub(r"[^A-Za-z0-9_-]", "_", self.name)[:64].lstrip("_-") or "look"
    if fixed != self.name:
        self.name = fixed


class PS_Look(bpy.types.PropertyGroup):
    name: StringProperty(name="Name", default="look", update=_look_name_changed,
                         description="The look's name (letters, digits, - and _): Restyle's "
                                     "Look menu shows it")
    keys_dir: StringProperty(name="Keyframes", subtype="DIR_PATH", default="",
                             options=PATH_OPTIONS,
                             description="Folder of this look's painted keyframes, NNNN.png "
                                         "(the frame number)")


class PS_LooksSettings(bpy.types.PropertyGroup):
    looks: CollectionProperty(type=PS_Look, description="The character's looks, each "
                              "learned from its painted keyframes")
    active: IntProperty(name="Look", default=0, min=0,
                        description="The look the buttons below act on")
    suggest_count: IntProperty(name="Keys", default=2, min=1, max=16,
                               description="How many keyframes to suggest")
    suggested: StringProperty(name="Suggested", default="",
                              description="The frames that show the most of the character "
                                          "together: paint these")
    minutes: FloatProperty(name="Minutes", default=5.0, min=0.1, max=600.0,
                           description="The most time learning a look may take (its "
                                       "schedule shortens to fit on a slow machine)")


def _settings(context) -> PS_LooksSettings:
    return context.scene.painted_skin_looks


def active_look(context) -> PS_Look | None:
    s = _settings(context)
    return s.looks[s.active] if 0 <= s.active < len(s.looks) else None


def keys_folder(look: PS_Look) -> Path:
    return Path(bpy.path.abspath(look.keys_dir or f"//looks/{look.name}/"))


def key_frames(look: PS_Look) -> list[int]:
    folder = keys_folder(look)
    if not folder.is_dir():
        return []
    return sorted(int(p.stem) for p in folder.iterdir() if KEY_FILE.fullmatch(p.name))


def model_folder(context) -> Path:
    """The Model Folder of the Skin Model panel: where looks are learned into."""
    return Path(bpy.path.abspath(context.scene.painted_skin_skin.model_dir))


class PS_UL_looks(bpy.types.UIList):
    def draw_item(self, context, layout, data, item, icon, active_data, active_prop):
        row = layout.row(align=True)
        row.prop(item, "name", text="", emboss=False, icon="BRUSH_DATA")
        n = len(key_frames(item))
        row.label(text=f"{n} key{'s' if n != 1 else ''}")


class PS_OT_add_look(bpy.types.Operator):
    """Add a look: a name and a folder for its painted keyframes"""

    bl_idname = "painted_skin.add_look"
    bl_label = "Add Look"

    def execute(self, context):
        s = _settings(context)
        names = {lk.name for lk in s.looks}
        n = 1
        while f"look{n}" in names:
            n += 1
        look = s.looks.add()
        look.name = f"look{n}"
        look.keys_dir = f"//looks/{look.name}/"
        s.active = len(s.looks) - 1
        return {"FINISHED"}


class PS_OT_remove_look(bpy.types.Operator):
    """Remove the look from the list (its keyframe files stay on disk)"""

    bl_idname = "painted_skin.remove_look"
    bl_label = "Remove Look"

    @classmethod
    def poll(cls, context):
        return active_look(context) is not None

    def execute(self, context):
        s = _settings(context)
        s.looks.remove(s.active)
        s.active = max(0, min(s.active, len(s.looks) - 1))
        return {"FINISHED"}


def _frame_size(scene: bpy.types.Scene) -> tuple[int, int]:
    r = scene.render
    return (max(1, r.resolution_x * r.resolution_percentage // 100),
            max(1, r.resolution_y * r.resolution_percentage // 100))


def paint_underlay(context, frame: int, out: Path) -> None:
    """The skin model's painting of ``frame`` at the render size, written to ``out``
    (through the Restyle section's backend, as Restyle Shot paints)."""
    from ..restyle.loop import RestyleRequest, restyle_shot
    from ..restyle.settings import backend_url
    from ..restyle.settings import keys_folder as backend_keys

    name = skin_ui.chosen_skin_model(context)
    with tempfile.TemporaryDirectory(prefix="painted-skin-key-") as tmp:
        req = RestyleRequest.make(tmp, url=backend_url(context), keys=backend_keys(context),
                                  frames=[frame], size=_frame_size(context.scene),
                                  pipeline="skin", options={"model": name, "temporal": False})
        restyle_shot(context.scene, req)
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(Path(tmp) / "restyled" / f"{frame:04d}.png", out)


class PS_OT_paint_keyframe(bpy.types.Operator):
    """Paint the current frame as a keyframe of the look: the skin model paints it (the
    underlay), it is saved into the look's folder and opened in an Image Editor in paint
    mode (save it with Image ▸ Save; Learn Look saves it too)"""

    bl_idname = "painted_skin.paint_keyframe"
    bl_label = "Paint Keyframe"

    @classmethod
    def poll(cls, context):
        if active_look(context) is None:
            cls.poll_message_set("add a look first (+)")
            return False
        if not bpy.data.filepath:
            cls.poll_message_set("Save the .blend first: the keys live beside it")
            return False
        if context.scene.camera is None:
            cls.poll_message_set("the scene has no camera to paint through")
            return False
        return True

    def execute(self, context):
        from ..image_view import show_image

        look = active_look(context)
        frame = context.scene.frame_current
        path = keys_folder(look) / f"{frame:04d}.png"
        if not path.is_file():
            try:
                paint_underlay(context, frame, path)
            except (ValueError, RuntimeError, OSError, ImportError) as e:  # no model, backend
                self.report({"ERROR"}, f"cannot paint frame {frame}: {e}")
                return {"CANCELLED"}
        image = bpy.data.images.load(str(path), check_existing=True)
        image.reload()
        shown = show_image(context, image)
        for area in context.screen.areas if context.screen else ():
            if area.type == "IMAGE_EDITOR" and area.spaces.active.image == image:
                area.spaces.active.ui_mode = "PAINT"
        self.report({"INFO"}, f"keyframe {frame} of look {look.name!r}: {path}"
                    + ("" if shown else " (open it in an Image Editor to paint)"))
        return {"FINISHED"}


class PS_OT_suggest_keyframes(bpy.types.Operator):
    """Find the frames of the scene's range that show the most of the character's surface
    together: the keyframes worth painting (a look knows a surface where a key shows it)"""

    bl_idname = "painted_skin.suggest_keyframes"
    bl_label = "Suggest Keys"

    @classmethod
    def poll(cls, context):
        if context.scene.camera is None:
            cls.poll_message_set("the scene has no camera")
            return False
        return True

    def execute(self, context):
        from .look import suggest_frames

        scene, s = context.scene, _settings(context)
        frames = list(range(scene.frame_start, scene.frame_end + 1))
        current = scene.frame_current
        try:
            keys = suggest_frames(scene, frames, s.suggest_count)
        except ValueError as e:
            self.report({"ERROR"}, str(e))
            return {"CANCELLED"}
        finally:
            scene.frame_set(current)
        s.suggested = ", ".join(map(str, keys))
        self.report({"INFO"}, f"paint frames {s.suggested}")
        return {"FINISHED"}


def save_painted_keys(look: PS_Look) -> int:
    """Save the look's key images edited in Blender (a painted key not yet saved)."""
    folder = keys_folder(look).resolve()
    saved = 0
    for image in bpy.data.images:
        path = Path(bpy.path.abspath(image.filepath)) if image.filepath else None
        if path is not None and image.is_dirty and path.resolve().parent == folder:
            image.save()
            saved += 1
    return saved


def base_model(context) -> Path | None:
    """The model a look starts from: the Model Folder's, else the embedded one (the demo
    character's; a checkout has it, an installed extension does not)."""
    from .train import EMBEDDED_MODEL

    for folder in (model_folder(context), EMBEDDED_MODEL):
        if (folder / "config.json").is_file():
            return folder
    return None


def learn_command(context, look: PS_Look, minutes: float) -> list[str]:
    """``painted-skin learn-look`` for the look, through the trainer child's launcher."""
    p = preferences(context)
    python = bpy.path.abspath(p.python) if p is not None and p.python else None
    base = str(base_model(context))
    args = ["learn-look", "--shot", bpy.data.filepath, "--keys", str(keys_folder(look)),
            "--base", base, "--out", str(model_folder(context)), "--look", look.name,
            "--minutes", f"{minutes:g}", *(["--python", python] if python else [])]
    return skin_ui.child_command(args)


class PS_OT_learn_look(skin_ui.TrainerOperator, bpy.types.Operator):
    """Learn the look from its painted keyframes (fine-tunes the skin model in the Backend
    Python); Esc or Cancel stops with a checkpoint"""

    bl_idname = "painted_skin.learn_look"
    bl_label = "Learn Look"
    done_text = "look learned"

    @classmethod
    def poll(cls, context):
        look = active_look(context)
        why = ("add a look first (+)" if look is None
               else "Save the .blend first: learning reads the saved shot"
               if not bpy.data.filepath
               else "a training is running" if skin_ui.training_running()
               else "no skin model to start from: Train Skin Model first (a look is learned "
                    "from the character's model)" if base_model(context) is None
               else f"paint a keyframe of {look.name!r} first (Paint Keyframe)"
               if not key_frames(look) else None)
        if why:
            cls.poll_message_set(why)
        return why is None

    def _start(self, context):
        look = active_look(context)
        save_painted_keys(look)
        if bpy.data.is_dirty:
            bpy.ops.wm.save_mainfile()
        return skin_ui.start_training(learn_command(context, look, _settings(context).minutes))


class PS_PT_looks(SidebarPanel, bpy.types.Panel):
    bl_idname = "PS_PT_looks"
    bl_label = "Looks"
    bl_parent_id = "PS_PT_skin"

    def draw(self, context):
        s = _settings(context)
        col = self.layout.column()
        row = col.row()
        row.template_list("PS_UL_looks", "", s, "looks", s, "active", rows=3)
        side = row.column(align=True)
        side.operator(PS_OT_add_look.bl_idname, text="", icon="ADD")
        side.operator(PS_OT_remove_look.bl_idname, text="", icon="REMOVE")
        look = active_look(context)
        if look is not None:
            labelled(col, look, "keys_dir")
            keys = key_frames(look)
            col.label(text="Keys: " + (", ".join(map(str, keys[:8]))
                                       + (" ..." if len(keys) > 8 else "") if keys
                                       else "none yet"))
        row = col.row(align=True)
        row.operator(PS_OT_suggest_keyframes.bl_idname, icon="VIEWZOOM")
        row.prop(s, "suggest_count")
        if s.suggested:
            col.label(text=f"Paint frames: {s.suggested}")
        col.operator(PS_OT_paint_keyframe.bl_idname, icon="TPAINT_HLT")
        draw_hint(col, context, PS_OT_paint_keyframe)
        col.prop(s, "minutes")
        if skin_ui.training_running():
            col.operator(skin_ui.PS_OT_cancel_training.bl_idname, icon="CANCEL")
        else:
            col.operator(PS_OT_learn_look.bl_idname, icon="PLAY")
            if look is not None:  # else Paint Keyframe's hint above says it
                draw_hint(col, context, PS_OT_learn_look)


CLASSES = (PS_Look, PS_LooksSettings, PS_UL_looks, PS_OT_add_look, PS_OT_remove_look,
           PS_OT_suggest_keyframes, PS_OT_paint_keyframe, PS_OT_learn_look, PS_PT_looks)


def register() -> None:
    register_classes(CLASSES, painted_skin_looks=PS_LooksSettings)


def unregister() -> None:
    unregister_classes(CLASSES, "painted_skin_looks")
