"""F12 and Render Animation: one frame's passes read through the render's own depsgraph,
painted through the engine's :class:`~.frame_painter.FramePainter`.

The shot's reader (:class:`ShotGeometry`: topology, part labels, rest positions and
UVs, read once) is kept between frames while the character's meshes stay the same, so
an animation render costs per frame what a restyled shot does; editing a mesh or
opening a file forgets it (:meth:`Renders.forget_geometry`, from the engine's handlers)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import bpy
import numpy as np

from ..passes.geometry import ShotGeometry, render_meshes
from ..restyle.loop import pipeline_options
from .frame_painter import FramePainter
from .settings import paint_settings


@dataclass
class PaintedFrame:
    rgb: np.ndarray  # uint8 (H, W, 3), top row first
    arrays: dict[str, np.ndarray]  # the wire passes it was painted from
    camera_world: np.ndarray  # camera -> world, for the world-space Normal pass


def render_size(scene: bpy.types.Scene) -> tuple[int, int]:
    """The frame size Blender renders: resolution times its percentage."""
    r = scene.render
    return (max(1, int(r.resolution_x * r.resolution_percentage / 100)),
            max(1, int(r.resolution_y * r.resolution_percentage / 100)))


def mesh_signature(scene: bpy.types.Scene) -> tuple:
    """What a shot reader was built for: the scene and its meshes' sizes (a change reads
    the meshes afresh)."""
    return (scene.name,
            tuple((o.name, o.data.name, len(o.data.vertices), len(o.data.polygons))
                  for o in render_meshes(scene)))


class Renders:
    """What the engine's final renders keep between frames (one render at a time)."""

    def __init__(self) -> None:
        self.painter = FramePainter()
        self._geometry: tuple[tuple, ShotGeometry] | None = None
        self.lock = threading.Lock()
        self.chained = False  # stills rendered in order continue each other
        self.stop: Callable[[], bool] | None = None  # a headless run's Ctrl-C
        self.last_error: BaseException | None = None  # why the last frame failed
        self.warned: set[str] = set()  # warnings given in this render job

    @contextmanager
    def chain(self, stop: Callable[[], bool] | None = None) -> Iterator[None]:
        """Frames rendered one by one inside continue each other as an animation
        render's do (``painted-skin render``); ``stop``: asked between and within
        frames."""
        self.new_job()
        self.chained, self.stop = True, stop
        try:
            yield
        finally:
            self.chained, self.stop = False, None

    def warn_once(self, text: str) -> bool:
        """True the first time ``text`` is warned about in this render job."""
        if text in self.warned:
            return False
        self.warned.add(text)
        return True

    def stopped(self) -> bool:
        return self.stop is not None and self.stop()

    def geometry(self, scene: bpy.types.Scene, width: int, height: int,
                 depsgraph: bpy.types.Depsgraph, set_frame: Callable[[int], None]
                 ) -> ShotGeometry:
        sig = (mesh_signature(scene), width, height)
        if self._geometry is not None and self._geometry[0] == sig:
            geo = self._geometry[1]
            geo.depsgraph, geo.set_frame = depsgraph, set_frame
            return geo
        geo = ShotGeometry(scene, width, height, depsgraph=depsgraph, set_frame=set_frame)
        self._geometry = (sig, geo)
        return geo

    def forget_geometry(self) -> None:
        self._geometry = None

    def new_job(self) -> None:
        """A render job begins (``render_init``): its first frame starts a fresh temporal
        chain, as a restyled shot's first frame does (the backend session and its
        previous frame are dropped)."""
        if self.chained:
            return  # one chain across the headless run's renders
        self.warned.clear()
        with self.lock:
            self.painter.close()

    def frame(self, depsgraph: bpy.types.Depsgraph, set_frame: Callable[[int], None],
              continues: bool = True, cancelled: Callable[[], bool] | None = None
              ) -> PaintedFrame:
        """Paint the frame ``depsgraph`` shows, at the scene's render size.
        ``continues``: an animation render, whose frames continue each other (a still
        is painted fresh, as the first frame of a restyled shot)."""
        scene = depsgraph.scene
        width, height = render_size(scene)
        frame = scene.frame_current
        with self.lock:
            settings = paint_settings(scene, animation=continues)
            geo = self.geometry(scene, width, height, depsgraph, set_frame)
            # The scene character's fingerprint, as Restyle sends it.
            options = pipeline_options(scene, settings.pipeline, dict(settings.options))
            arrays = self.painter.passes(scene, frame, width, height, geo, settings.pipeline)
            cam = geo.camera()
            rgb = self.painter.paint(frame, arrays, settings, width, height, options,
                                     cancelled=cancelled)
        return PaintedFrame(rgb, arrays, np.asarray(cam.world))

    def close(self) -> None:
        with self.lock:
            self.painter.close()
            self._geometry = None


RENDERS = Renders()


def meshes_edited(_scene, depsgraph) -> None:
    """``depsgraph_update_post``: a mesh datablock edited (not merely posed) is read
    afresh by the next render."""
    if any(isinstance(u.id, bpy.types.Mesh) and u.is_updated_geometry
           for u in depsgraph.updates):
        RENDERS.forget_geometry()
