"""``painted-skin render``: Blender's own render pipeline with the Painted Skin engine,
in the bpy module (CI, and users without a Blender binary).

Each frame is rendered by ``bpy.ops.render.render`` (the engine's ``render``, the
compositor after it) and saved by ``Image.save_render``: the scene's file format, colour
management and Blender's ``#`` naming (``RenderSettings.frame_path``), through a hidden
file in the same folder moved into place, so an interrupted run never leaves half a
frame and a re-run resumes at the first frame without a file. The frames are rendered in
order as one chain: each continues the one before, as in Render Animation."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import bpy

from .renders import RENDERS

Progress = Callable[[int, int, int, Path | None], None]  # done, total, frame, file written


class RenderFailed(RuntimeError):
    """The engine could not paint a frame; ``cause`` is what it raised."""

    def __init__(self, message: str, cause: BaseException | None) -> None:
        super().__init__(message)
        self.cause = cause


def ensure_registered() -> None:
    """The add-on (its engine and settings) registered in this Blender."""
    if not hasattr(bpy.types.Scene, "painted_skin_engine"):
        from ... import register

        register()
    if not hasattr(bpy.types.Scene, "painted_skin_engine"):
        raise RenderFailed("the Painted Skin render engine needs pyzmq in Blender's Python: "
                           "pip install pyzmq (or install the extension zip, which has it)",
                           None)


def output_pattern(out: str) -> str:
    """``--out``: a folder (frames named ``####`` in it) or a Blender output path with
    ``#`` (kept as it is); an absolute path, as Blender reads it."""
    if "#" in Path(out).name:
        return str(Path(out).absolute())
    return str(Path(out).absolute() / "####")


def frame_file(scene: bpy.types.Scene, pattern: str, frame: int) -> Path:
    """Where Blender's output settings put ``frame`` for ``pattern``."""
    saved = scene.render.filepath
    try:
        scene.render.filepath = pattern
        return Path(scene.render.frame_path(frame=frame))
    finally:
        scene.render.filepath = saved


def use_standard_view(scene: bpy.types.Scene) -> str | None:
    """Colour management that saves the painting's own colours (it is display-ready:
    another view transform would tone-map it again); the view transform it replaced,
    or None when it was Standard already."""
    vs = scene.view_settings
    before = None if (vs.view_transform, vs.look) == ("Standard", "None") else vs.view_transform
    vs.view_transform, vs.look, vs.exposure, vs.gamma = "Standard", "None", 0.0, 1.0
    return before


def render_frames(scene: bpy.types.Scene, frames: list[int], out: str, *,
                  url: str | None = None, model: str | None = None,
                  progress: Progress | None = None,
                  cancelled: Callable[[], bool] | None = None) -> dict:
    """Render ``frames`` of ``scene`` with the Painted Skin engine into ``out`` (a folder,
    or a Blender output path with ``#``); frames whose file exists are kept. ``url``,
    ``model``: the backend and skin model, over the scene's Render Properties ▸ Painted
    Skin. Returns a summary (frames, written, skipped, folder). Raises
    :class:`RenderFailed` when a frame cannot be painted (its file not written)."""
    ensure_registered()
    settings = scene.painted_skin_engine
    if url is not None:
        settings.url = url
    if model is not None:
        settings.model = model
    scene.render.engine = "PAINTED_SKIN"
    pattern = output_pattern(out)
    files = {f: frame_file(scene, pattern, f) for f in frames}
    todo = [f for f in frames if not files[f].exists()]
    summary = {"frames": len(frames), "skipped": len(frames) - len(todo), "written": 0,
               "folder": str(files[frames[0]].parent) if frames else out}
    done = summary["skipped"]
    if progress:
        progress(done, len(frames), frames[0] if frames else 0, None)
    frame_now = scene.frame_current
    try:
        with RENDERS.chain(cancelled):
            for f in todo:
                if cancelled is not None and cancelled():
                    break
                path = files[f]
                path.parent.mkdir(parents=True, exist_ok=True)
                scene.frame_set(f)
                RENDERS.last_error = None
                try:
                    bpy.ops.render.render()
                except RuntimeError as e:
                    cause = RENDERS.last_error
                    raise RenderFailed(str(cause or e).removeprefix("Error: "), cause) from None
                if RENDERS.last_error is not None:  # failed without Blender raising
                    raise RenderFailed(str(RENDERS.last_error), RENDERS.last_error)
                if cancelled is not None and cancelled():
                    break  # the frame was cut short: nothing written for it
                _save(path)
                done += 1
                summary["written"] += 1
                if progress:
                    progress(done, len(frames), f, path)
    finally:
        scene.frame_set(frame_now)
    return summary


def _save(path: Path) -> None:
    """The Render Result saved to ``path`` by the scene's output settings, atomically."""
    image = bpy.data.images.get("Render Result")
    if image is None:
        raise RenderFailed("Blender kept no Render Result for the frame", None)
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.partial{path.suffix}")
    try:
        try:
            image.save_render(filepath=str(tmp))
        except RuntimeError as e:  # a format Blender cannot save a still in (a movie)
            raise RenderFailed(f"cannot save {path.name}: {str(e).removeprefix('Error: ')} "
                               "(set Output Properties > File Format to an image format)",
                               None) from None
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
