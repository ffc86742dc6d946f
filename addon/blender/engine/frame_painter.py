"""Paint one frame at a time through a backend: the render engine's F12, its animation
renders and its viewport share this with Restyle (the same passes, the same pipeline
options, the same session rules), so a frame gives Restyle's pixels.

A :class:`FramePainter` keeps one backend session open while the settings and size stay
the same: frames rendered in order then continue each other (the skin model's temporal
chain, as in a restyled shot); a backend restarted meanwhile gets the previous frame
back as its carry. One painter belongs to one thread at a time (ZeroMQ sockets are not
shared between threads): the engine's renders have one, the viewport's worker another.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable

import bpy
import numpy as np

from ....wire.options import SIZE_MULTIPLES
from ..client.backend_client import BackendClient, BackendError, BackendUnavailable
from ..client.errors import E_UNAVAILABLE
from ..client.local_backend import (
    LOCAL,
    backend_python,
    restart_local_if_dead,
    start_local_backend,
)
from ..passes.geometry import ShotError, ShotGeometry
from ..preferences import preferences
from ..restyle.loop import shot_frames, wire_passes
from .settings import PaintSettings

LOCAL_START_TIMEOUT_S = 120.0
_START_LOCK = threading.Lock()  # one local backend, whichever painter asks first


class NoBackend(BackendError):
    """Nothing answers at the URL and no backend may be started here."""

    def __init__(self, message: str) -> None:
        super().__init__(E_UNAVAILABLE, message)
        self.message = message

    def __str__(self) -> str:
        return self.message


def ensure_backend(settings: PaintSettings, python: str | None = None,
                   models: dict[str, str] | None = None) -> None:
    """A backend answers at ``settings.url``, or one is started here when the URL is this
    machine's and the settings allow it (its Python and the scene's models: ``python``
    and ``models``, else read from Blender now). Raises :class:`NoBackend` or
    :class:`ShotError` naming the fix."""
    with _START_LOCK:
        if LOCAL.running() and LOCAL.url == settings.url:
            return
        try:
            with BackendClient(settings.url, keys=settings.keys, timeout_s=1.5) as c:
                c.ping(timeout_s=1.5)
            return
        except BackendUnavailable:
            pass
        if not (settings.start_local and settings.local):
            raise NoBackend(f"no backend answers at {settings.url}: start one there "
                            "(painted-skin serve), or use a loopback URL with Start Local "
                            "Backend on (Render Properties ▸ Painted Skin)")
        if python is None:
            prefs = preferences(bpy.context)
            python = backend_python(prefs.python if prefs is not None else "")
        try:
            start_local_backend(python, settings.url, timeout_s=LOCAL_START_TIMEOUT_S,
                                models=models)
        except BackendError as e:
            raise ShotError(f"the local backend did not start: {e}") from None


class FramePainter:
    """Passes and painting of single frames through one reusable backend session."""

    def __init__(self, timeout_s: float = 60.0, python: str | None = None,
                 restart_dead: bool = True, models: dict[str, str] | None = None) -> None:
        self.timeout_s = timeout_s
        # The Python a local backend starts with and the scene's models it serves (None:
        # read from Blender then, on its main thread); ``restart_dead``: relaunch the
        # local backend when it dies (main thread only).
        self.python, self.restart_dead, self.models = python, restart_dead, models
        self.client: BackendClient | None = None
        self._key: str | None = None
        self._last: tuple[int, np.ndarray, np.ndarray] | None = None  # frame, rgb, depth
        self.model_id: str | None = None

    # -- the session ---------------------------------------------------------------------

    def _session(self, settings: PaintSettings, width: int, height: int,
                 options: dict) -> BackendClient:
        key = json.dumps([settings.key(width, height), options], sort_keys=True, default=str)
        if self.client is not None and key == self._key:
            return self.client
        self.close()
        ensure_backend(settings, self.python, self.models)
        restart = restart_local_if_dead if settings.local and self.restart_dead else None
        client = BackendClient(settings.url, keys=settings.keys, timeout_s=self.timeout_s,
                               on_dead=restart)
        try:
            client.open(settings.pipeline, width, height, options=options)
        except BaseException:
            client.close()
            raise
        self.client, self._key, self.model_id = client, key, client.model_id
        return client

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
        self.client, self._key, self._last = None, None, None

    # -- frames --------------------------------------------------------------------------

    def passes(self, scene: bpy.types.Scene, frame: int, width: int, height: int,
               geometry: ShotGeometry, pipeline: str = "skin") -> dict[str, np.ndarray]:
        """Frame ``frame``'s wire passes, read through ``geometry`` (left at ``frame``)."""
        try:
            _, arrays = next(shot_frames(scene, [frame], width, height, "fast",
                                         wire_passes(pipeline), geometry=geometry))
        finally:
            geometry.set_frame(frame)
        return arrays

    def paint(self, frame: int, arrays: dict[str, np.ndarray], settings: PaintSettings,
              width: int, height: int, options: dict,
              cancelled: Callable[[], bool] | None = None) -> np.ndarray:
        """The painted RGB (uint8, top row first) of one frame's passes. A size the
        pipeline does not take (1366x768 for the skin model's multiples of 4) is painted
        padded with empty film at the right and bottom, and cropped back."""
        m = SIZE_MULTIPLES.get(settings.pipeline, 1)
        pw, ph = -(-width // m) * m, -(-height // m) * m
        if (pw, ph) != (width, height):
            arrays = padded_passes(arrays, height, width, ph, pw)
        client = self._session(settings, pw, ph, options)
        got: dict[str, np.ndarray] = {}

        def carry_for(f: int) -> dict[str, np.ndarray] | None:
            last = self._last
            if last is None or last[0] != f - 1:
                return None
            return {"carry_rgb": last[1], "carry_depth": last[2]}

        try:
            client.run_shot([(frame, arrays)], lambda r: got.update(rgb=r.rgb),
                            cancelled=cancelled, carry_for=carry_for)
        except BaseException:
            self.close()  # a session in an unknown state is not reused
            raise
        if "rgb" not in got:
            raise ShotError(f"frame {frame} was not painted (cancelled)")
        rgb = np.ascontiguousarray(got["rgb"], np.uint8)
        self._last = (frame, rgb, np.asarray(arrays["depth"], np.float32))  # as sent
        return np.ascontiguousarray(rgb[:height, :width])


def padded_passes(arrays: dict[str, np.ndarray], height: int, width: int, to_height: int,
                  to_width: int) -> dict[str, np.ndarray]:
    """A frame's wire passes grown to ``to_height`` x ``to_width`` with empty film at the
    right and bottom: depth +inf (nothing hit), every other pass 0 (no mask, no part)."""
    out = {}
    for name, a in arrays.items():
        a = np.asarray(a)
        if a.ndim < 2 or a.shape[:2] != (height, width):
            out[name] = a
            continue
        grown = np.full((to_height, to_width) + a.shape[2:], np.inf if name == "depth" else 0,
                        a.dtype)
        grown[:height, :width] = a
        out[name] = grown
    return out
