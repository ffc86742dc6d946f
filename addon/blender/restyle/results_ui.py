"""The Restyle panel's Results section: open the restyled sequence in an Image Editor,
build a side-by-side comparison (passes | beauty | restyled | reference), put the frames in the
Sequencer, open the output folder. Each button is greyed out, with the reason, until
the output folder holds restyled frames."""

from __future__ import annotations

from pathlib import Path

import bpy
import numpy as np

from ..classes import SidebarPanel, wrapped_label
from ..image_view import image_editors, show_image
from ..passes.geometry import ShotError
from .output import RESTYLED, frame_done, result_path
from .settings import out_folder, reference_images, settings
from .viewer import show_results

COMPARE = "compare"  # OUT/compare/####.png
COMPARE_IMAGE = "Painted Skin Compare"


def _restyled_dir(context) -> Path | None:
    """OUT/restyled as the settings name it, without creating anything (poll runs on
    every redraw); None for a "//" path in a file never saved."""
    value = settings(context).out_dir
    if not value.strip() or (value.startswith("//") and not bpy.data.filepath):
        return None
    return Path(bpy.path.abspath(value)) / RESTYLED


def _no_results(context) -> str | None:
    """Why the Results buttons cannot work yet (None: they can)."""
    folder = _restyled_dir(context)
    if folder is None:
        return "choose an Output folder (a saved .blend for a // path)"
    if not any(folder.glob("[0-9]*.png")):
        return f"nothing restyled yet in {folder}: run Restyle Shot first"
    return None


def shot_range(context) -> list[int]:
    scene = context.scene
    return list(range(scene.frame_start, scene.frame_end + 1))


class _NeedsResults:
    @classmethod
    def poll(cls, context):
        why = _no_results(context)
        if why:
            cls.poll_message_set(why)
        return why is None


class PS_OT_open_result(_NeedsResults, bpy.types.Operator):
    """Load the restyled frames as an image sequence into an Image Editor (one is opened
    beside this area when the screen has none)"""

    bl_idname = "painted_skin.open_result"
    bl_label = "Open Result"

    def execute(self, context):
        out = out_folder(context)
        shown = bool(image_editors(context))
        img = show_results(context, out, shot_range(context))
        if img is None:
            self.report({"ERROR"}, f"nothing restyled in {out / RESTYLED}")
            return {"CANCELLED"}
        frames = [f for f in shot_range(context) if frame_done(out, f)]
        where = "in the Image Editor" if shown else "(no window here to show it in)"
        self.report({"INFO"}, f"image {img.name!r}: {len(frames)} restyled frames {where}")
        return {"FINISHED"}


class PS_OT_add_to_sequencer(_NeedsResults, bpy.types.Operator):
    """Put the restyled frames in the Sequencer (one strip per run of consecutive frames)"""

    bl_idname = "painted_skin.add_to_sequencer"
    bl_label = "Add to Sequencer"
    bl_options = {"REGISTER", "UNDO"}

    def execute(self, context):
        show_results(context, out_folder(context), shot_range(context), use_vse=True)
        self.report({"INFO"}, "restyled frames added to the Sequencer")
        return {"FINISHED"}


class PS_OT_open_output_folder(_NeedsResults, bpy.types.Operator):
    """Open the folder of the restyled frames in the file browser of the system"""

    bl_idname = "painted_skin.open_output_folder"
    bl_label = "Open Output Folder"

    def execute(self, context):
        folder = out_folder(context) / RESTYLED
        problem = open_in_file_browser(folder) if context.window is not None else None
        if problem:
            self.report({"WARNING"}, f"{problem}: the restyled frames are in {folder}")
            return {"CANCELLED"}
        self.report({"INFO"}, f"restyled frames: {folder}")
        return {"FINISHED"}


# What opens a folder in the system's file browser, in order of preference. Not
# ``wm.path_open``: on Linux it prints xdg-open's FileNotFoundError to the console and
# still reports success, so a user without xdg-open is told nothing.
OPENERS = {"win32": (), "darwin": (("open",),),
           "linux": (("xdg-open",), ("gio", "open"), ("kde-open5",), ("kde-open",))}


def open_in_file_browser(folder: Path) -> str | None:
    """Open ``folder`` in the system's file browser without waiting for it; None, or
    what went wrong in a few words."""
    import os
    import shutil
    import subprocess
    import sys

    if not folder.is_dir():
        return f"the folder {folder} does not exist yet"
    if sys.platform == "win32":
        try:
            os.startfile(folder)  # type: ignore[attr-defined]  # Windows only
        except OSError as e:
            return f"Windows could not open the folder ({e.strerror or e})"
        return None
    platform = "darwin" if sys.platform == "darwin" else "linux"
    for cmd in OPENERS[platform]:
        exe = shutil.which(cmd[0])
        if exe is None:
            continue
        try:
            subprocess.Popen([exe, *cmd[1:], str(folder)], stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
        except OSError as e:
            return f"{cmd[0]} could not start ({e.strerror or e})"
        return None
    names = ", ".join(c[0] for c in OPENERS[platform])
    return f"no program here opens folders (looked for {names}; install xdg-utils)"


def _fit(img: np.ndarray, height: int) -> np.ndarray:
    """``img`` (uint8 RGB) scaled to ``height`` rows, aspect kept (nearest pixel)."""
    h, w = img.shape[:2]
    width = max(1, round(w * height / h))
    rows = np.minimum(np.arange(height) * h // height, h - 1)
    cols = np.minimum(np.arange(width) * w // width, w - 1)
    return img[rows][:, cols]


def passes_tile(wire: dict[str, np.ndarray]) -> np.ndarray:
    """The control passes as one picture: camera-space normals on the character, the
    OpenPose skeleton drawn over them."""
    n = np.nan_to_num(wire["normal"].astype(np.float32))
    tile = np.clip((n * 0.5 + 0.5) * 255, 0, 255).astype(np.uint8)
    tile[wire["mask"] == 0] = 0
    bones = wire["skeleton"].any(axis=-1)
    tile[bones] = wire["skeleton"][bones]
    return tile


def side_by_side(tiles: list[np.ndarray], gap: int = 4) -> np.ndarray:
    """``tiles`` (uint8 RGB) left to right at the first one's height, ``gap`` black
    columns between them."""
    height = tiles[0].shape[0]
    fitted = [_fit(t[..., :3], height) for t in tiles]
    parts: list[np.ndarray] = []
    for t in fitted:
        if parts:
            parts.append(np.zeros((height, gap, 3), np.uint8))
        parts.append(t)
    return np.concatenate(parts, axis=1)


def compare_path(out: Path, f: int) -> Path:
    return Path(out) / COMPARE / f"{f:04d}.png"


def beauty_tile(context, f: int) -> np.ndarray | None:
    """Frame ``f``'s beauty render from the Passes step's folder (``beauty/####.png``),
    over black; None when the Passes step wrote none."""
    from ..passes.image_io import read_image

    passes = getattr(context.scene, "painted_skin_passes", None)
    value = passes.out_dir if passes is not None else ""
    if not value.strip() or (value.startswith("//") and not bpy.data.filepath):
        return None
    from ..passes.output import pass_file, split_passes_out

    try:  # a folder or a farm's pattern (shot_####: beauty/shot_0007.png)
        folder, names = split_passes_out(value)
    except ValueError:
        return None
    path = pass_file(Path(bpy.path.abspath(folder)), "beauty", "png", f, names)
    if not path.is_file():
        return None
    img = read_image(path)
    img = img[..., None].repeat(3, -1) if img.ndim == 2 else img
    if img.dtype != np.uint8:
        img = (img.astype(np.float32) / np.iinfo(img.dtype).max * 255).astype(np.uint8)
    if img.shape[-1] == 4:
        alpha = img[..., 3:].astype(np.float32) / 255
        img = np.rint(img[..., :3] * alpha).astype(np.uint8)
    return img[..., :3]


def write_compare(context, f: int) -> Path:
    """OUT/compare/####.png for frame ``f``: passes | beauty (when the Passes step
    rendered one) | restyled | first reference (when the settings have one), written
    atomically."""
    from ..passes.image_io import read_image, write_png
    from .loop import shot_frames

    s, scene, out = settings(context), context.scene, out_folder(context)
    if not frame_done(out, f):
        raise ShotError(f"frame {f} is not restyled in {out / RESTYLED}: run Restyle Shot, "
                        "or go to a restyled frame")
    restyled = read_image(result_path(out, f))
    frame_now = scene.frame_current
    try:
        _, wire = next(shot_frames(scene, [f], s.width, s.height))
    finally:
        scene.frame_set(frame_now)
    beauty = beauty_tile(context, f)
    tiles = [passes_tile(wire), *([] if beauty is None else [beauty]), restyled]
    refs = reference_images(s)
    if refs:
        tiles.append(np.ascontiguousarray(refs[0], np.uint8))
    path = compare_path(out, f)
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_png(path, side_by_side(tiles))


class PS_OT_compare(_NeedsResults, bpy.types.Operator):
    """Build a side-by-side image of the current frame (passes | beauty | restyled |
    reference, those that exist) in the output folder's compare/ and show it"""

    bl_idname = "painted_skin.compare"
    bl_label = "Compare"

    def execute(self, context):
        f = context.scene.frame_current
        try:
            path = write_compare(context, f)
        except (ShotError, OSError) as e:
            self.report({"ERROR"}, str(e))
            return {"CANCELLED"}
        old = bpy.data.images.get(COMPARE_IMAGE)
        if old is not None:
            bpy.data.images.remove(old)
        img = bpy.data.images.load(str(path), check_existing=False)
        img.name = COMPARE_IMAGE
        show_image(context, img)  # the whole sheet, fitted (it opened zoomed in)
        self.report({"INFO"}, f"compare: {path}")
        return {"FINISHED"}


class PS_PT_restyle_results(SidebarPanel, bpy.types.Panel):
    bl_idname = "PS_PT_restyle_results"
    bl_label = "Results"
    bl_order = 5

    def draw(self, context):
        col = self.layout.column(align=True)
        why = _no_results(context)
        if why:
            wrapped_label(col, context, why, icon="INFO")
        # one a row: two to a row cut their names ("Add to Sequen…", "Open Output F…")
        for op, icon in (("open_result", "IMAGE_DATA"), ("compare", "SPLIT_VERTICAL"),
                         ("add_to_sequencer", "SEQUENCE"),
                         ("open_output_folder", "FILEBROWSER")):
            col.operator(f"painted_skin.{op}", icon=icon)


CLASSES = (PS_OT_open_result, PS_OT_add_to_sequencer, PS_OT_open_output_folder, PS_OT_compare,
           PS_PT_restyle_results)
