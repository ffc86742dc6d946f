"""The transport client: one object that talks to a Painted Skin backend over ZeroMQ.

No bpy import: Blender (a modal operator polls it), headless scripts and tests
(a blocking loop) share the same state machine.

    with BackendClient("tcp://127.0.0.1:5555") as c:
        c.ping()
        c.open(pipeline="echo", width=512, height=512)
        c.run_shot(((f, passes(f)) for f in frames), on_result=save)

Patterns (the ZeroMQ guide): a DEALER socket speaks to the backend's ROUTER.
Lazy Pirate: every wait is a poll with a timeout; after ``heartbeat_timeout``
seconds of silence while something is expected, the socket is closed with
LINGER 0, a new one connects, the session is re-OPENed under the same id and
every unanswered frame is sent again. While busy a PING goes out about every
``heartbeat_s`` (its PONG proves the backend alive even while a frame takes long,
and keeps the session from being freed). Flow control: never more than the
session's ``credits`` frames in flight. Each frame is answered to the caller at
most once, in any order; answered frames are never sent again.

Shared memory (Linux, ipc:// or loopback URLs, ``shm=True`` by default): the
client asks in OPEN; when OPENED grants it, each frame's passes are copied into a
free slot of a ring in one shared-memory segment (:class:`ShmRing`) and the FRAME
carries only their descriptors. The segment is unlinked on
:meth:`BackendClient.close`, at garbage collection or interpreter exit, and —
after a crash — by the backend freeing the session or the next client's sweep
(dead creators hold no lock). Anything else: the plain TCP path.

The parts: :mod:`.connection` (the socket, Lazy Pirate), :mod:`.shot`
(what happened to each frame of a shot), :mod:`.shm` (the ring),
:mod:`.keys` (CurveZMQ keys), :mod:`.errors` (errors, URL checks).
This module keeps the session and the streaming, and every public name of the parts.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
import zmq

from .... import wire as P
from .connection import Connection
from .errors import (
    E_CANCELLED,
    E_UNAVAILABLE,
    BackendError,
    BackendUnavailable,
    BadBackendURL,
    check_url,
    error_from_reply,
)
from .keys import CurveKeys, load_keys
from .shm import SHM_BYTES_PER_PIXEL, SHM_MIN_SLOTS, ShmRing, ensure_ring
from .shot import (
    Arrays,
    CarryFor,
    Continuity,
    OnProgress,
    OnResult,
    PrimersFor,
    Result,
    Shot,
    Tally,
)

__all__ = [
    "DEFAULT_URL", "SHM_BYTES_PER_PIXEL", "SHM_MIN_SLOTS", "E_CANCELLED", "E_UNAVAILABLE",
    "Arrays", "OnResult", "OnProgress", "CarryFor", "PrimersFor",
    "BackendError", "BackendUnavailable", "BadBackendURL", "check_url", "error_from_reply",
    "CurveKeys", "load_keys", "ShmRing", "Result", "Shot", "Tally", "Continuity",
    "BackendClient",
]

log = logging.getLogger("painted_skin.client")

DEFAULT_URL = P.DEFAULT_URL


class BackendClient(Connection):
    """DEALER client of one backend (see the module docstring for the patterns).

    ``keys``: CurveZMQ keys, or a ``painted-skin keys`` folder (needed for any
    backend not on loopback). ``timeout_s``: how long a call waits through
    silence (reconnecting meanwhile) before it raises :class:`BackendUnavailable`.
    ``on_dead`` is called each time the backend is found silent (e.g. to restart
    a local backend). ``max_inflight`` caps frames in flight below the credits.
    ``shm``: use shared memory for the passes when the backend is on this machine
    and grants it (:attr:`shm_active`); ``False`` always sends them on the socket.
    A URL that cannot work (:func:`check_url`) raises :class:`BadBackendURL` at once.
    """

    def __init__(self, url: str = DEFAULT_URL, keys: CurveKeys | str | Path | None = None,
                 timeout_s: float = 30.0, heartbeat_s: float = 1.0,
                 heartbeat_timeout: float = 3.0, cancel_grace_s: float = 3.0,
                 on_dead: Callable[[], None] | None = None, max_inflight: int | None = None,
                 context: zmq.Context | None = None, shm: bool = True) -> None:
        super().__init__(url, keys, timeout_s, heartbeat_s, heartbeat_timeout, on_dead,
                         context)
        self.cancel_grace_s = cancel_grace_s
        self.max_inflight = max_inflight  # a client-side cap below the session's credits
        self._session: dict | None = None  # OPEN fields (without id), kept to re-open
        self._refs: list[np.ndarray] = []
        self._opened = False
        self._frames_sent_in_session = 0
        self._open_id: str | None = None
        self._open_error: BackendError | None = None
        self.credits = 1
        self.shot: Shot | None = None
        self._ids: dict[str, int] = {}  # FRAME message id -> frame
        self.server_info: dict = {}
        self._boot: str | None = None  # the backend process's id, from PONG
        self.restarts = 0  # backend restarts noticed by a changed boot id
        # OPEN waits through model loads (first downloads, ONNX exports) while the
        # backend answers heartbeats, up to this long.
        self.open_timeout_s = 900.0
        self.bytes_shm = 0  # array bytes passed through shared memory instead
        self.shm_requested = shm and P.shm_supported() and P.is_local_endpoint(url)
        self.shm_active = False  # granted by the last OPENED
        # What the session's model is (OPENED's ``model_id``): a shot refuses to go on
        # with another version (a backend restarted or moved onto retrained weights).
        self.model_id: str | None = None
        # One line OPENED may tell about the loaded model, for the user to read before
        # the shot (a skin model that learned an older add-on's passes).
        self.notice: str | None = None
        self._ring: ShmRing | None = None
        self._connect()

    # -- the connection's hooks -------------------------------------------------------

    def _busy(self) -> bool:
        """Something is expected from the backend (silence then means trouble)."""
        return bool(super()._busy() or (self._session is not None and not self._opened
                                        and self._open_error is None)
                    or (self.shot is not None and self.shot.held))

    def _reconnected(self) -> None:
        self._boot = None  # the OPEN goes out again below: the next PONG sets the boot id
        self._ids.clear()
        if self._session is not None:
            self._opened = False
            self._send_open()

    def _unavailable(self, err: BackendUnavailable) -> None:
        if self.shot is not None and self.shot.held:
            self.shot.fail(err, clear_inflight=False)

    def _check_boot(self, boot: object) -> None:
        """A PONG from another process than before (the backend restarted faster than
        the heartbeat timeout, e.g. under a supervisor): its sessions are gone, and an
        OPEN it was loading with them. Open again; frames in flight are re-sent once
        OPENED arrives, as after a reconnect."""
        if not isinstance(boot, str):
            return
        if self._boot is not None and boot != self._boot and self._session is not None:
            log.warning("the backend at %s restarted: opening the session again", self.url)
            self.restarts += 1
            self._opened = False
            self._send_open()
        self._boot = boot

    # -- session ------------------------------------------------------------------------

    def ping(self, timeout_s: float | None = None) -> dict:
        """PONG header ({version, server, ...}); raises BackendUnavailable."""
        self.server_info = self._call(P.PING, {P.PONG}, timeout_s,
                                      session=self._session_id()).header
        return self.server_info

    def status(self, timeout_s: float | None = None) -> dict:
        """STATUS_REPLY header: version, devices, pipelines, models, queue, sessions."""
        return self._call(P.STATUS, {P.STATUS_REPLY}, timeout_s).header

    def open(self, pipeline: str = "echo", width: int = 512, height: int = 512,
             prompt: str = "", negative_prompt: str = "", seed: int = 0,
             options: dict | None = None, refs: Iterable[np.ndarray] = (),
             session: str | None = None, timeout_s: float | None = None,
             wait: bool = True) -> int:
        """Open (or re-open) a session; returns its credits (frames in flight).

        ``refs`` are uint8 identity images, sent as arrays ``ref0``, ``ref1``…
        The fields are kept: after a reconnect the same session is opened again.
        The backend answers only once the session's model is loaded (a first
        download or ONNX export can take minutes), so this waits while the backend
        answers heartbeats, up to ``timeout_s`` (default ``self.open_timeout_s``,
        15 min); it raises :class:`BackendUnavailable` sooner, after ``self.timeout_s``
        of silence. A backend that restarts meanwhile (another boot id in PONG) is
        sent the OPEN again. ``wait=False`` returns at once (the UI): a shot
        started meanwhile begins sending when OPENED arrives, and fails with the
        error if the open fails.
        """
        self._session = {"session": session or P.new_id(), "pipeline": pipeline,
                         "prompt": prompt, "negative_prompt": negative_prompt, "seed": seed,
                         "width": width, "height": height, "options": options or {}}
        self._refs = [np.ascontiguousarray(r, dtype=np.uint8) for r in refs]
        if self.shm_requested:
            self._ensure_ring(SHM_MIN_SLOTS, width * height)
        self._opened = False
        self._open_error = None
        self.model_id = self.notice = None
        self._silent_since = self._last_ping = time.monotonic()
        self._send_open()
        if not wait:
            return self.credits
        try:
            self._wait(lambda: self._opened or self._open_error is not None,
                       self.open_timeout_s if timeout_s is None else timeout_s)
        except BackendUnavailable:
            self._session = None
            raise
        if self._open_error is not None:
            self._session = None
            raise self._open_error
        return self.credits

    def _send_open(self) -> None:
        assert self._session is not None
        self._open_id = P.new_id()
        self.shm_active = False
        arrays = {f"ref{k}": r for k, r in enumerate(self._refs)}
        shm = {"shm": True, "shm_probe": self._ring.probe()} if self._ring is not None else {}
        self._send(P.encode(P.OPEN, arrays, id=self._open_id, **self._session, **shm))

    def _ensure_ring(self, slots: int, pixels: int) -> None:
        """A ring of at least ``slots`` slots of ``pixels`` each (a new one only when
        the current one is smaller and no slot is in use)."""
        self._ring = ensure_ring(self._ring, slots, pixels, self.shot)

    def _session_id(self) -> str | None:
        return self._session["session"] if self._session else None

    @property
    def session(self) -> str | None:
        return self._session_id()

    def close(self, timeout_s: float = 1.0) -> None:
        """CLOSE the session (best effort, short wait) and the socket."""
        if self._sock is None:
            return
        if self._session is not None:
            try:
                self.shot = None
                self._call(P.CLOSE, {P.CLOSED}, timeout_s, session=self._session_id())
            except BackendError:
                pass
            self._session = None
        self._close_socket()
        self.shm_active = False
        if self._ring is not None:
            self._ring.close()
            self._ring = None

    def __enter__(self) -> BackendClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- streaming ------------------------------------------------------------------------

    def start_shot(self, frames: Iterable[tuple[int, Arrays]], on_result: OnResult,
                   on_progress: OnProgress | None = None,
                   carry_for: CarryFor | None = None,
                   primers_for: PrimersFor | None = None) -> Shot:
        """Begin streaming ``frames`` ((frame, arrays) pairs, pulled lazily as credits
        allow) through the open session; drive it with :meth:`poll_once`.
        ``carry_for(f)``: the arrays restoring a temporal session's state as after
        frame f - 1 (see ``backend/diffusion/carry.py``), sent with the first frame
        after each (re)open, so a backend restart does not break the chain;
        ``primers_for(f)``: frames to run before it there whose results are dropped
        (to record a cross-frame anchor again)."""
        if self._session is None:
            raise BackendError("no_session", "open() a session before a shot")
        if self.shot is not None and not self.shot.done:
            raise BackendError("busy", "a shot is already running on this client")
        self._mark_busy()
        fresh = not self._opened or self._frames_sent_in_session == 0
        self.shot = Shot(iter(frames), on_result, on_progress,
                         temporal=Continuity(carry_for, primers_for, fresh_state=fresh))
        return self.shot

    def run_shot(self, frames: Iterable[tuple[int, Arrays]], on_result: OnResult,
                 on_progress: OnProgress | None = None,
                 cancelled: Callable[[], bool] | None = None,
                 carry_for: CarryFor | None = None,
                 primers_for: PrimersFor | None = None) -> dict:
        """Blocking: stream a whole shot (headless; bpy module mode has no timers)."""
        shot = self.start_shot(frames, on_result, on_progress, carry_for, primers_for)
        while not shot.done:
            if cancelled is not None and not shot.cancelled and cancelled():
                self.cancel()
            self.poll_once(100)
        if shot.error is not None:
            raise shot.error
        return {**shot.summary(), "reconnects": self.reconnects}

    def cancel(self) -> None:
        """Stop pulling frames and ask the backend to drop the queued ones; frames it
        still answers are delivered, the rest come back as ``cancelled``."""
        shot = self.shot
        if shot is None or shot.cancelled:
            return
        if shot.cancel(time.monotonic()):
            self._send(P.encode(P.CANCEL, id=P.new_id(), session=self._session_id()))

    def poll_once(self, timeout_ms: int = 0, max_send: int | None = None) -> int:
        """One turn of the state machine: send what credits allow (at most
        ``max_send`` new frames), wait up to ``timeout_ms`` for messages and handle
        them all, heartbeat, detect silence. Returns the number of messages handled.
        Raises :class:`BackendUnavailable` after ``timeout_s`` of silence while busy."""
        if self._sock is None:
            raise BackendError("closed", "the client is closed")
        self._pump(max_send)
        n = self._drain(self._poll_timeout(timeout_ms))
        self._housekeeping()
        self._pump(max_send)
        return n

    def _housekeeping(self) -> None:
        now = time.monotonic()
        if self.shot is not None:
            self.shot.give_up_cancelled(now, self.cancel_grace_s)  # never confirmed
        self._heartbeat(now)

    def _pump(self, max_send: int | None) -> None:
        """Send frames while credits allow: first those to re-send, then new ones."""
        shot = self.shot
        if shot is None or shot.done or not self._opened or shot.cancelled:
            return
        new = 0
        now = time.monotonic()
        limit = min(self.credits, self.max_inflight or self.credits)
        while len(shot.inflight) < limit:
            picked = shot.next_frame(now, max_send is None or new < max_send)
            if picked is None:
                return
            f, pulled = picked
            new += pulled
            self._send_frame(f, shot.held[f])
            shot.inflight.add(f)
            shot.tally.sent += 1

    def _send_frame(self, f: int, arrays: Arrays) -> None:
        """Send ``f``, after its primers and with its carry when it is the first
        frame into a fresh backend state."""
        shot = self.shot
        assert shot is not None
        for pf, parrays in shot.primers_before(f):
            self._send_one(pf, parrays)
        self._send_one(f, shot.with_carry(f, arrays))

    def _send_one(self, f: int, arrays: Arrays) -> None:
        mid = P.new_id()
        self._ids[mid] = f
        fields = {"id": mid, "session": self._session_id(), "frame": f}
        if "carry_rgb" in arrays:
            fields["carry_frame"] = f - 1
        self._frames_sent_in_session += 1
        if self.shm_active and self._ring is not None and self.shot is not None:
            placed = self._ring.place(self.shot, f, arrays)
            if placed is not None:
                placements, slot = placed
                self._send(P.encode(P.FRAME, arrays, placements=placements, slot=slot,
                                    **fields))
                self.bytes_shm += sum(np.asarray(a).nbytes for a in arrays.values())
                return
        self._send(P.encode(P.FRAME, arrays, **fields))

    # -- replies --------------------------------------------------------------------------

    def _dispatch(self, msg: P.Message) -> None:
        h = msg.header
        if msg.type in (P.PONG, P.STATUS_REPLY, P.CLOSED) or (
                msg.type == P.ERROR and h.get("ref") in self._requests):
            if msg.type == P.PONG:
                self.server_info = h
                self._check_boot(h.get("boot"))
            self._answer_request(msg)
            return
        if h.get("session") not in (None, self._session_id()):
            return  # a stale reply for an older session
        if msg.type == P.OPENED:
            self._on_opened(h)
        elif msg.type == P.PROGRESS:
            if self.shot is not None:
                self.shot.progress(h)
        elif msg.type == P.RESULT:
            if self.shot is not None:
                self.shot.receive_result(h, msg.arrays)
        elif msg.type == P.ERROR:
            self._on_error(msg)

    def _same_model(self, h: dict) -> bool:
        """Note OPENED's ``model_id``; False (the shot fails) when a re-open (reconnect,
        restart, move) reports another one than the session first had."""
        notice = h.get("notice")
        if isinstance(notice, str) and notice:
            self.notice = notice[:P.MAX_TEXT]
        mid = h.get("model_id")
        if not isinstance(mid, str):
            return True
        if self.model_id is None:
            self.model_id = mid
            return True
        if mid == self.model_id or self.shot is None or self.shot.done:
            return True
        model = (self._session or {}).get("options", {}).get("model") or \
            (self._session or {}).get("pipeline")
        self.shot.fail(BackendError(P.E_BAD_MESSAGE, f"the backend now paints with another "
                                    f"version of model {model!r} than this shot's frames: "
                                    "restyle the shot again into a new folder"))
        return False

    def _on_opened(self, h: dict) -> None:
        if not self._same_model(h):
            return
        if not self._opened and self._session is not None:
            self._opened = True
            self._frames_sent_in_session = 0  # a new backend session: empty state
            if self.shot is not None:
                self.shot.temporal.fresh_state = True
            self.credits = max(1, int(h.get("credits", 1)))
            self.shm_active = h.get("shm") is True and self._ring is not None
            if self.shm_active and self._ring is not None and self._ring.slots < self.credits:
                self._ensure_ring(self.credits, self._session["width"]
                                  * self._session["height"])
            if self.shot is not None:
                self.shot.requeue(time.monotonic())  # every unanswered frame goes again
        elif h.get("moved"):
            # a broker moved the session to another worker (empty state there): the
            # frames it hands back go again, the first with the previous frame carried
            self._frames_sent_in_session = 0
            self.credits = max(1, int(h.get("credits", self.credits)))
            self.shm_active = h.get("shm") is True and self._ring is not None
            if self.shot is not None:
                self.shot.temporal.fresh_state = True

    def _on_error(self, msg: P.Message) -> None:
        err = error_from_reply(msg)
        self.last_error = err
        shot = self.shot
        if err.ref is not None and err.ref == self._open_id and err.code != E_CANCELLED:
            self._open_error = err
            if shot is not None and not shot.done:
                shot.fail(err)
            return
        f = msg.header.get("frame")
        if f is None and err.ref is not None:
            f = self._ids.get(err.ref)
        err.frame = f
        if err.code == P.E_NO_SESSION and self._session is not None:
            # The backend forgot us (restarted quickly, or freed an idle session).
            if self._opened:
                self._opened = False
                if shot is not None:
                    shot.requeue(time.monotonic())
                self._send_open()
            return
        if shot is not None:
            shot.receive_error(err, f)
