"""The Rendered viewport's loop, without a window: the main thread takes a snapshot of
what the view shows (the meshes as evaluated now, the view's camera) and hands it over;
one worker thread rasterises its passes and has the backend paint them; the last
finished frame waits for the viewport to draw it.

Nothing here waits on the backend on the calling thread: :meth:`ViewportJob.submit`
replaces the snapshot not yet taken (a view that moves on drops the frames it no longer
needs) and returns at once. :meth:`ViewportJob.step` does one snapshot's work on the
calling thread: the tests and ``painted-skin bench viewport`` drive the loop with it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ....wire import WIRE_PASSES
from ..passes.fast import fast_frame
from ..passes.geometry import FrameGeometry, ShotGeometry
from ..restyle.loop import wire_arrays, wire_passes
from .frame_painter import FramePainter
from .settings import PaintSettings

#: Sub-pixel samples a side of the still view's refinement (renders take
#: ``fast.FILM_SAMPLES``): a screen's pixels are small, and the worker must stay free.
VIEW_FILM_SAMPLES = 2

#: The passes a viewport frame is painted from: the pipeline's, without the motion
#: vectors and skeleton (every viewport frame is painted fresh).
VIEW_SKIP = frozenset({"motion", "skeleton"})


@dataclass
class Snapshot:
    """What the view showed when it changed, taken on the main thread."""

    serial: int
    frame: int
    geometry: FrameGeometry  # positions, normals, the view's camera at its size
    taken: float  # time.monotonic() when the view changed
    full: bool = False  # at the region's full size (the refinement of a still view)

    @property
    def size(self) -> tuple[int, int]:
        return self.geometry.camera.width, self.geometry.camera.height


@dataclass
class Painted:
    """A finished viewport frame."""

    serial: int
    rgb: np.ndarray  # uint8 (H, W, 3), top row first
    mask: np.ndarray  # bool (H, W)
    latency_s: float  # from the view's change to this frame being ready
    full: bool


#: The painted sides are multiples of this (a skin network halves the frame a few times:
#: the demo model needs 4, deeper ones up to 16); the frame is drawn stretched over the
#: region, whose view the camera of that size shows whole.
SIDE_MULTIPLE = 16


def view_size(region_width: int, region_height: int, scale: float) -> tuple[int, int]:
    """The painted size for a region at ``scale``: sides multiples of
    :data:`SIDE_MULTIPLE`, at least that."""
    m = SIDE_MULTIPLE
    return (max(m, int(region_width * scale) // m * m),
            max(m, int(region_height * scale) // m * m))


class ViewportJob:
    """One viewport's loop (see the module docstring). ``on_ready`` is called on the
    worker thread when a frame is ready: it must only set a flag (the viewport's timer
    then redraws on the main thread)."""

    def __init__(self, geometry: ShotGeometry, settings: PaintSettings, options: dict,
                 python: str | None = None, models: dict[str, str] | None = None,
                 on_ready: Callable[[], None] | None = None) -> None:
        self.geometry = geometry
        geometry.surface_attributes()  # read here: the worker may not call Blender
        self.settings, self.options = settings, options
        # The worker may not read Blender: a local backend it starts gets its Python and
        # the scene's models from here (the main thread).
        self.painter = FramePainter(timeout_s=10.0, python=python, restart_dead=False,
                                    models=models if models is not None else {})
        self.on_ready = on_ready
        self.want = set(wire_passes(settings.pipeline)) - VIEW_SKIP
        self._pending: Snapshot | None = None
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stop = False
        self.latest: Painted | None = None
        self.error: str | None = None
        self.status: str | None = None  # what the worker waits on (a backend starting)
        self.busy = False
        self._serial = 0

    # -- the main thread's side --------------------------------------------------------

    def snapshot(self, camera, frame: int, full: bool = False,
                 taken: float | None = None) -> Snapshot:
        """Read the meshes as they are now, seen by ``camera`` (main thread only)."""
        self._serial += 1
        return Snapshot(self._serial, frame, self.geometry.current(camera),
                        time.monotonic() if taken is None else taken, full)

    def submit(self, snap: Snapshot) -> None:
        """Paint ``snap`` next, instead of any snapshot not yet taken; returns at once."""
        with self._cond:
            self._pending = snap
            self._cond.notify()

    def start(self) -> None:
        """Run the loop on a worker thread until :meth:`stop`."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="painted-skin-viewport",
                                            daemon=True)
            self._thread.start()

    def stop(self, wait: bool = True) -> None:
        """End the loop. The worker closes its own backend session (a ZeroMQ socket
        belongs to its thread); ``wait=False`` returns at once (leaving Rendered mode
        never waits for a frame in flight)."""
        with self._cond:
            self._stop = True
            self._cond.notify()
        thread, self._thread = self._thread, None
        if thread is None:
            self.painter.close()
        elif wait and thread is not threading.current_thread():
            thread.join(timeout=15)

    # -- the worker's side ---------------------------------------------------------------

    def _take(self, wait: bool) -> Snapshot | None:
        with self._cond:
            while wait and self._pending is None and not self._stop:
                self._cond.wait()
            snap, self._pending = self._pending, None
            self.busy = snap is not None
            return None if self._stop else snap

    def step(self, wait: bool = False) -> Painted | None:
        """Paint the pending snapshot on this thread (None: nothing pending). A failure
        is kept in :attr:`error` (shown in the viewport) and the loop goes on."""
        snap = self._take(wait)
        if snap is None:
            return None
        try:
            w, h = snap.size
            # While the view moves, the passes' centre samples (half their cost); the
            # still view's refinement filters them over the pixel, as renders are, from
            # 2x2 samples: its pixels are the screen's, and at 3x3 a 1296x864 view's
            # refinement held the worker ~4.6 s, so an orbit begun meanwhile waited.
            arrays = fast_frame(self.geometry, snap.geometry, None, None, self.want,
                                film=snap.full, film_samples=VIEW_FILM_SAMPLES)
            passes = wire_arrays(arrays, None, w, h)
            passes = {k: v for k, v in passes.items() if k in self.want or k not in WIRE_PASSES}
            if self.painter.client is None:  # a session to open, maybe a backend to start
                self.status = f"Painted Skin: reaching the backend at {self.settings.url}…"
            rgb = self.painter.paint(snap.frame, passes, self.settings, w, h, self.options)
        except Exception as e:  # shown in the viewport, never raised into a redraw
            self.error = f"{type(e).__name__}: {e}" if not str(e) else str(e)
            self.busy, self.status = False, None
            if self.on_ready is not None:
                self.on_ready()
            return None
        done = Painted(snap.serial, rgb, np.asarray(passes["mask"]) > 0,
                       time.monotonic() - snap.taken, snap.full)
        self.latest, self.error, self.busy, self.status = done, None, False, None
        if self.on_ready is not None:
            self.on_ready()
        return done

    def _run(self) -> None:
        try:
            while not self._stop:
                self.step(wait=True)
        finally:
            self.painter.close()
