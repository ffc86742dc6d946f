"""The Backend section's live state: a timer pings the backend's STATUS in a background
thread (the UI never waits on a network), at most every ~2 s, and the panel draws the
last reply: device, pipelines, models, queue.

``bpy.app.timers`` never fire in the bpy module, so tests call :func:`tick` (or
:func:`poll_backend`) themselves.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import bpy

from ...core.backend.status import BackendStatus, PollGate, parse_status
from ..client.backend_client import BackendClient, BackendError

TICK_S = 0.5  # how often the timer looks (cheap); pings go out every PollGate.interval_s
PING_TIMEOUT_S = 1.0

# The status line the panel shows: the last ping, or what an operator is doing
# (``busy``: a local backend starting; pings do not overwrite its line meanwhile;
# ``held``: a failure the animator must read; only a backend that answers replaces it).
LINE: dict = {"text": "not connected", "ok": False, "log_tail": "", "busy": False,
              "held": False}


class LiveStatus:
    """The last STATUS reply (``status``), written by the ping thread, read by the panel."""

    def __init__(self) -> None:
        self.status: BackendStatus | None = None
        self.gate = PollGate(2.0)
        self.changed = False  # a reply arrived since the panel last redrew
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def record(self, status: BackendStatus) -> None:
        with self._lock:
            self.status, self.changed = status, True
            if not LINE["busy"] and (status.ok or not LINE["held"]):
                LINE.update(text=status.line(), ok=status.ok)
                if status.ok:
                    LINE.update(held=False, log_tail="")

    def start(self, url: str, keys: str | None, timeout_s: float) -> threading.Thread | None:
        """Ping ``url`` in a thread unless one is in flight or the last was too recent."""
        now = time.monotonic()
        with self._lock:
            if not self.gate.due(now):
                return None
            self.gate.started(now)
        self._thread = threading.Thread(target=self._ping, args=(url, keys, timeout_s),
                                        name="painted-skin-status", daemon=True)
        self._thread.start()
        return self._thread

    def _ping(self, url: str, keys: str | None, timeout_s: float) -> None:
        try:
            with BackendClient(url, keys=keys, timeout_s=timeout_s) as c:
                status = parse_status(url, c.status(timeout_s=timeout_s))
        except (BackendError, OSError, ValueError) as e:
            status = BackendStatus(url=url, error=str(e))
        finally:
            self.gate.finished()
        self.record(status)


LIVE = LiveStatus()


def show_failure(text: str, details: str) -> None:
    """Put ``text`` (and ``details`` below it) on the status line until a backend answers
    (or the animator connects or stops): the next failed ping two seconds later would
    otherwise replace the reason."""
    with LIVE._lock:  # not between a ping's check of ``held`` and its update
        LINE.update(text=text, ok=False, busy=False, held=True, log_tail=details)


def poll_backend(url: str, keys: str | None = None, timeout_s: float = PING_TIMEOUT_S
                 ) -> threading.Thread | None:
    """Start a background STATUS ping of ``url`` when one is due; the thread, or None."""
    return LIVE.start(url, keys, timeout_s)


def _redraw() -> None:
    wm = bpy.context.window_manager
    for window in getattr(wm, "windows", ()):
        for area in window.screen.areas:
            if area.type == "VIEW_3D":
                area.tag_redraw()


# What the timer pings: () -> (url, keys folder), or None while there is no scene with
# the settings; set by the settings module (which knows where the URL lives).
Source = Callable[[], "tuple[str, str | None] | None"]
_SOURCE: list[Source] = []


def set_source(source: Source) -> None:
    _SOURCE[:] = [source]


def tick() -> float:
    """The timer function: ping the panel's backend when due, redraw when a reply came.
    Returns the seconds to the next call (``bpy.app.timers``' contract)."""
    target = _SOURCE[0]() if _SOURCE else None
    if target is not None:
        poll_backend(*target)
    if LIVE.changed:
        LIVE.changed = False
        _redraw()
    return TICK_S


def ensure_timer() -> None:
    """Start the ~2 s pings (idempotent; the panel calls it when it draws, in the UI).
    Not in background Blender (a farm node, the bpy module): nobody sees the panel."""
    if bpy.app.background:
        return
    if not bpy.app.timers.is_registered(tick):
        bpy.app.timers.register(tick, first_interval=TICK_S, persistent=True)


def stop_timer() -> None:
    if bpy.app.timers.is_registered(tick):
        bpy.app.timers.unregister(tick)
