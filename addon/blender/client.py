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
carries only their descriptors. A slot stays bound to its frame until the frame
is answered (RESULT or its error), then it is reused; each write gets a new
generation the backend checks, so a stale read is never used. The segment is
unlinked on :meth:`BackendClient.close`, at garbage collection or interpreter
exit, and — after a crash — by the backend freeing the session or the next
client's sweep (dead creators hold no lock). Anything else: the plain TCP path.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import zmq

from ... import wire as P

log = logging.getLogger("painted_skin.client")

DEFAULT_URL = "tcp://127.0.0.1:5555"
# All the passes of a frame (23 bytes, 63 with the canonical ones skin takes), rounded
# up to 8 bytes: a slot holds any frame of its size.
SHM_BYTES_PER_PIXEL = -(-P.bytes_per_pixel() // 8) * 8
SHM_MIN_SLOTS = 8
E_CANCELLED = P.E_CANCELLED
E_UNAVAILABLE = "unavailable"

Arrays = dict[str, np.ndarray]
OnResult = Callable[["Result"], None]
OnProgress = Callable[[int, int, int], None]  # (frame, step, steps)


class BackendError(RuntimeError):
    """An ``error`` reply (``code`` is the backend's) or a client-side failure."""

    def __init__(self, code: str, message: str, ref: str | None = None,
                 session: str | None = None, frame: int | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code, self.message, self.ref, self.session, self.frame = (
            code, message, ref, session, frame)


class BadBackendURL(ValueError):
    """A backend URL that cannot work: not a ZeroMQ endpoint, or off this machine
    without CurveZMQ keys (the backend refuses unencrypted remote clients)."""


_ENDPOINT = re.compile(r"tcp://(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+):([0-9]{1,5})"
                       r"|ipc://[^\s]+|inproc://[^\s]+")


def check_url(url: object, keys: object = None) -> None:
    """Refuse, with one line saying how to fix it, a URL the client could only wait
    on in silence: not ``tcp://HOST:PORT`` / ``ipc://PATH`` / ``inproc://NAME``, or
    not on this machine while ``keys`` is None. Raises :class:`BadBackendURL`."""
    m = _ENDPOINT.fullmatch(url) if isinstance(url, str) else None
    if m is None or (m.group(1) is not None and not 0 < int(m.group(1)) < 65536):
        raise BadBackendURL(f"backend URL {str(url)[:200]!r} is not a ZeroMQ endpoint; give "
                            "tcp://HOST:PORT (e.g. tcp://127.0.0.1:5555) or ipc://PATH")
    if keys is None and not P.is_local_endpoint(url):
        raise BadBackendURL(f"backend URL {url} is not on this machine and no keys were "
                            "given: a remote backend takes only encrypted clients; pass the "
                            "folder made by `painted-skin keys DIR` (--keys DIR), or reach "
                            "it through tcp://127.0.0.1:PORT (e.g. an ssh tunnel)")


class BackendUnavailable(BackendError):
    """No answer at all within the time allowed."""

    def __init__(self, url: str, seconds: float) -> None:
        super().__init__(E_UNAVAILABLE, f"no answer from the backend at {url} for "
                                        f"{seconds:.1f} s: is it running (painted-skin serve)?")


@dataclass
class CurveKeys:
    """CurveZMQ keys (Z85 bytes): the client's pair and the server's public key."""

    public: bytes
    secret: bytes
    server_public: bytes

    @classmethod
    def from_files(cls, client_secret_file: str | Path, server_public_file: str | Path
                   ) -> CurveKeys:
        """Load zmq.auth certificates (``*.key_secret`` holds both client keys)."""
        import zmq.auth

        public, secret = zmq.auth.load_certificate(str(client_secret_file))
        server_public, _ = zmq.auth.load_certificate(str(server_public_file))
        if secret is None:
            raise ValueError(f"{client_secret_file} holds no secret key")
        return cls(public, secret, server_public)

    @classmethod
    def from_dir(cls, directory: str | Path) -> CurveKeys:
        """A ``painted-skin keys DIR`` folder: DIR/client.key_secret + DIR/server.key."""
        d = Path(directory)
        return cls.from_files(d / "client.key_secret", d / "server.key")


@dataclass
class Result:
    """One restyled frame: RGB uint8 (H, W, 3), top row first, plus the reply header."""

    frame: int
    rgb: np.ndarray
    seed: int | None
    timings: dict
    cached: bool
    header: dict
    extra: dict = field(default_factory=dict)  # other arrays (carry_latents: temporal mode)


@dataclass
class Shot:
    """The frames of one shot streaming through the open session."""

    source: Iterator[tuple[int, Arrays]]
    on_result: OnResult
    on_progress: OnProgress | None = None
    held: dict[int, Arrays] = field(default_factory=dict)  # pulled, not yet answered
    inflight: set[int] = field(default_factory=set)  # sent on the current connection
    resend: deque = field(default_factory=deque)  # (frame, not_before) to send again
    exhausted: bool = False
    cancelled: bool = False
    cancelled_at: float = 0.0
    error: BackendError | None = None
    answered: set[int] = field(default_factory=set)
    dropped: set[int] = field(default_factory=set)  # cancelled by the backend
    sent: int = 0
    resent: int = 0
    last_progress: tuple[int, int, int] | None = None
    started: float = field(default_factory=time.monotonic)
    # Temporal sessions: the previous frame's carry arrays for frame f (None: none), sent
    # with the first frame after every (re)open, whose backend state starts empty.
    carry_for: Callable[[int], Arrays | None] | None = None
    # ... and the frames to run before it there, results dropped (cross-frame anchors)
    primers_for: Callable[[int], list[tuple[int, Arrays]]] | None = None
    priming: set[int] = field(default_factory=set)
    fresh_state: bool = True
    carry_target: int | None = None  # the frame that carries, until it is answered

    @property
    def done(self) -> bool:
        return self.error is not None or ((self.exhausted or self.cancelled) and not self.held)

    def summary(self) -> dict:
        return {"answered": len(self.answered), "dropped": len(self.dropped), "sent": self.sent,
                "resent": self.resent, "cancelled": self.cancelled,
                "seconds": time.monotonic() - self.started}


class ShmRing:
    """Frame slots in one shared-memory segment the client owns.

    Layout: the segment header (magic + probe token), then ``slots`` slots of
    ``slot_bytes``: a 64-byte slot header (uint64 generation) and the arrays,
    each 64-byte aligned. A slot belongs to ``(shot, frame)`` until that frame
    leaves ``shot.held`` (answered or dropped) or another shot starts.
    """

    def __init__(self, slots: int, slot_bytes: int) -> None:
        self.slots = slots
        self.slot_bytes = -(-slot_bytes // 4096) * 4096
        self.seg = P.ShmSegment.create(P.SHM_HEADER + slots * self.slot_bytes)
        self.token = uuid.uuid4().hex
        self.seg.buf[:24] = P.SHM_MAGIC + bytes.fromhex(self.token)
        self._owner: list[tuple[Shot, int] | None] = [None] * slots
        self._placed: list[tuple[dict, dict] | None] = [None] * slots
        self._gen = 0

    @property
    def name(self) -> str:
        return self.seg.name

    def probe(self) -> dict[str, str]:
        """OPEN's ``shm_probe``: the backend grants shm only if it reads this token."""
        return {"segment": self.seg.name, "token": self.token}

    def _free(self, i: int, shot: Shot) -> bool:
        o = self._owner[i]
        return o is None or o[0] is not shot or o[1] not in shot.held

    def in_use(self, shot: Shot | None) -> bool:
        return shot is not None and not all(self._free(i, shot) for i in range(self.slots))

    def place(self, shot: Shot, frame: int, arrays: Arrays) -> tuple[dict, dict] | None:
        """``(placements, slot)`` of ``frame``: its slot again when it has one (a
        re-send: nothing rewritten), else a free slot written now. None: no free
        slot or too big (send inline)."""
        for i, o in enumerate(self._owner):
            if o is not None and o[0] is shot and o[1] == frame:
                return self._placed[i]
        i = next((i for i in range(self.slots) if self._free(i, shot)), None)
        if i is None:
            return None
        base = P.SHM_HEADER + i * self.slot_bytes
        self._owner[i] = self._placed[i] = None
        self.seg.write_u64(base, 0)  # invalid while the data changes
        placements = self.seg.write(arrays, base + P.SHM_ALIGN, base + self.slot_bytes)
        if placements is None:
            return None
        self._gen += 1
        self.seg.write_u64(base, self._gen)
        slot = {"segment": self.seg.name, "offset": base, "gen": self._gen}
        self._owner[i], self._placed[i] = (shot, frame), (placements, slot)
        return placements, slot

    def close(self) -> None:
        """Unlink the segment (the backend's mappings stay valid until it drops them)."""
        self._owner = [None] * self.slots
        self._placed = [None] * self.slots
        self.seg.close()


@dataclass
class _Request:
    frames: list
    want: set[str]
    id: str
    reply: P.Message | None = None


class BackendClient:
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
        check_url(url, keys)
        self.url = url
        self.keys = CurveKeys.from_dir(keys) if isinstance(keys, str | Path) else keys
        self.timeout_s, self.heartbeat_s, self.heartbeat_timeout = (
            timeout_s, heartbeat_s, heartbeat_timeout)
        self.cancel_grace_s = cancel_grace_s
        self.on_dead = on_dead
        self.max_inflight = max_inflight  # a client-side cap below the session's credits
        self._ctx = context or zmq.Context.instance()
        self._sock: zmq.Socket | None = None
        self._identity = b"ps-" + uuid.uuid4().bytes
        self._session: dict | None = None  # OPEN fields (without id), kept to re-open
        self._refs: list[np.ndarray] = []
        self._opened = False
        self._frames_sent_in_session = 0
        self._open_id: str | None = None
        self._open_error: BackendError | None = None
        self.credits = 1
        self.shot: Shot | None = None
        self._requests: dict[str, _Request] = {}
        self._ids: dict[str, int] = {}  # FRAME message id -> frame
        now = time.monotonic()
        self._silent_since = self._last_reconnect = self._last_ping = now
        self.reconnects = 0
        self.dead_at: list[float] = []  # monotonic times the backend was found silent
        self.server_info: dict = {}
        self._boot: str | None = None  # the backend process's id, from PONG
        self.restarts = 0  # backend restarts noticed by a changed boot id
        # OPEN waits through model loads (first downloads, ONNX exports) while the
        # backend answers heartbeats, up to this long.
        self.open_timeout_s = 900.0
        self.last_error: BackendError | None = None
        self.bytes_sent = self.bytes_received = 0
        self.bytes_shm = 0  # array bytes passed through shared memory instead
        self.shm_requested = shm and P.shm_supported() and P.is_local_endpoint(url)
        self.shm_active = False  # granted by the last OPENED
        self._ring: ShmRing | None = None
        self._connect()

    # -- socket -----------------------------------------------------------------------

    def _connect(self) -> None:
        s = self._ctx.socket(zmq.DEALER)
        # One identity for the client's whole life: after a Lazy Pirate reconnect
        # the backend (router_handover) hands the route to the new socket and the
        # re-OPEN replaces the old session instead of leaving it computing.
        s.setsockopt(zmq.ROUTING_ID, self._identity)
        s.setsockopt(zmq.LINGER, 0)
        s.setsockopt(zmq.RECONNECT_IVL, 100)
        s.setsockopt(zmq.RECONNECT_IVL_MAX, 1000)
        if self.keys is not None:
            s.curve_secretkey = self.keys.secret
            s.curve_publickey = self.keys.public
            s.curve_serverkey = self.keys.server_public
        try:
            s.connect(self.url)
        except zmq.ZMQError as e:  # what check_url let through but ZeroMQ refuses
            s.close(linger=0)
            raise BadBackendURL(f"backend URL {self.url}: {e}") from None
        self._sock = s

    def _reconnect(self) -> None:
        """Lazy Pirate: drop the socket (LINGER 0), connect a fresh one, re-send."""
        now = time.monotonic()
        self.dead_at.append(now)
        if self.on_dead is not None:
            self.on_dead()
        if self._sock is not None:
            self._sock.close(linger=0)
        self._connect()
        self._boot = None  # the OPEN goes out again below: the next PONG sets the boot id
        self.reconnects += 1
        self._last_reconnect = now
        self._ids.clear()
        for req in self._requests.values():
            self._send(req.frames)
        if self._session is not None:
            self._opened = False
            self._send_open()

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

    def _send(self, frames: list) -> None:
        """Send without ever blocking: with no usable peer (down, or a refused CURVE
        handshake) a DEALER would block; the message is dropped instead, and the
        silence that follows brings the reconnect-and-resend."""
        assert self._sock is not None
        try:
            self._sock.send_multipart(frames, flags=zmq.NOBLOCK, copy=False)
        except zmq.Again:
            return
        self.bytes_sent += sum(len(f) for f in frames)

    def _busy(self) -> bool:
        """Something is expected from the backend (silence then means trouble)."""
        return bool(self._requests or (self._session is not None and not self._opened
                                       and self._open_error is None)
                    or (self.shot is not None and self.shot.held))

    def _mark_busy(self) -> None:
        if not self._busy():
            self._silent_since = self._last_ping = time.monotonic()

    # -- blocking calls -----------------------------------------------------------------

    def _call(self, mtype: str, want: set[str], timeout_s: float | None,
              **fields: Any) -> P.Message:
        self._mark_busy()
        rid = P.new_id()
        req = _Request(P.encode(mtype, id=rid, **fields), want, rid)
        self._requests[rid] = req
        try:
            self._send(req.frames)
            self._wait(lambda: req.reply is not None, timeout_s)
        finally:
            self._requests.pop(rid, None)
        assert req.reply is not None
        if req.reply.type == P.ERROR:
            raise _error(req.reply)
        return req.reply

    def _wait(self, ready: Callable[[], bool], timeout_s: float | None) -> None:
        deadline = time.monotonic() + (self.timeout_s if timeout_s is None else timeout_s)
        while not ready():
            if time.monotonic() > deadline:
                raise BackendUnavailable(self.url, time.monotonic() - self._silent_since)
            self.poll_once(50)

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
        need = SHM_BYTES_PER_PIXEL * pixels + P.SHM_ALIGN * (P.MAX_ARRAYS + 1)
        ring = self._ring
        if ring is not None and (ring.slot_bytes >= need and ring.slots >= slots
                                 or ring.in_use(self.shot)):
            return
        slots = max(slots, ring.slots if ring is not None else 0)
        try:
            P.sweep_shm()  # segments of crashed clients
            new = ShmRing(slots, max(need, ring.slot_bytes if ring is not None else 0))
        except (OSError, ValueError) as e:
            log.warning("no shared memory (%s): passes go through the socket", e)
            return
        if ring is not None:
            ring.close()
        self._ring = new

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
        self._sock.close(linger=0)
        self._sock = None
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
                   carry_for: Callable[[int], Arrays | None] | None = None,
                   primers_for: Callable[[int], list[tuple[int, Arrays]]] | None = None
                   ) -> Shot:
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
        self.shot = Shot(iter(frames), on_result, on_progress, carry_for=carry_for,
                         primers_for=primers_for)
        self.shot.fresh_state = not self._opened or self._frames_sent_in_session == 0
        return self.shot

    def run_shot(self, frames: Iterable[tuple[int, Arrays]], on_result: OnResult,
                 on_progress: OnProgress | None = None,
                 cancelled: Callable[[], bool] | None = None,
                 carry_for: Callable[[int], Arrays | None] | None = None,
                 primers_for: Callable[[int], list[tuple[int, Arrays]]] | None = None
                 ) -> dict:
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
        shot.cancelled, shot.cancelled_at = True, time.monotonic()
        for f, _ in shot.resend:  # never sent on this connection: nothing to cancel
            shot.held.pop(f, None)
            shot.dropped.add(f)
        shot.resend.clear()
        if shot.held:
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

    def _poll_timeout(self, timeout_ms: int) -> int:
        if not self._busy():
            return timeout_ms
        to_ping = self._last_ping + self.heartbeat_s - time.monotonic()
        return max(0, min(timeout_ms, int(to_ping * 1000) + 1))

    def _drain(self, timeout_ms: int) -> int:
        assert self._sock is not None
        sock, n = self._sock, 0
        if not sock.poll(timeout_ms, zmq.POLLIN):
            return 0
        while True:
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return n
            self._silent_since = time.monotonic()
            self.bytes_received += sum(len(f.buffer) for f in frames)
            n += 1
            try:
                msg = P.decode(frames, expect=P.SERVER_TYPES)
            except P.ProtocolError as e:
                self.last_error = BackendError(e.code, f"bad message from the backend: {e}")
                continue
            self._dispatch(msg)
            if sock is not self._sock:  # a handler reconnected
                return n

    def _housekeeping(self) -> None:
        now = time.monotonic()
        shot = self.shot
        if (shot is not None and shot.cancelled and shot.held
                and now - shot.cancelled_at > self.cancel_grace_s):
            shot.dropped |= set(shot.held) - shot.priming  # never confirmed: give up
            shot.held.clear()
        if not self._busy():
            self._silent_since = now
            return
        if now - self._silent_since > self.timeout_s:
            err = BackendUnavailable(self.url, now - self._silent_since)
            if shot is not None and shot.held:
                shot.error = err
                shot.held.clear()
            self._requests.clear()
            raise err
        if now - max(self._silent_since, self._last_reconnect) > self.heartbeat_timeout:
            self._reconnect()
            now = time.monotonic()
        if now - self._last_ping >= self.heartbeat_s:
            self._last_ping = now
            self._send(P.encode(P.PING, id=P.new_id(), session=self._session_id()))

    def _pump(self, max_send: int | None) -> None:
        """Send frames while credits allow: first those to re-send, then new ones."""
        shot = self.shot
        if shot is None or shot.done or not self._opened or shot.cancelled:
            return
        new = 0
        now = time.monotonic()
        limit = min(self.credits, self.max_inflight or self.credits)
        while len(shot.inflight) < limit:
            if shot.resend and shot.resend[0][1] <= now:
                f, _ = shot.resend.popleft()
                if f not in shot.held:
                    continue
                shot.resent += 1
            elif shot.resend or shot.exhausted or (max_send is not None and new >= max_send):
                return
            else:
                try:
                    f, arrays = next(shot.source)
                except StopIteration:
                    shot.exhausted = True
                    return
                f = int(f)
                if f in shot.held or f in shot.answered:
                    continue  # a frame is computed once per shot
                shot.held[f] = arrays
                new += 1
            self._send_frame(f, shot.held[f])
            shot.inflight.add(f)
            shot.sent += 1

    def _send_frame(self, f: int, arrays: Arrays) -> None:
        shot = self.shot
        if shot is not None and shot.fresh_state:
            shot.fresh_state = False  # from this frame on the backend's state follows
            shot.carry_target = f  # carried again if it bounces (busy) and is re-sent
            # frames re-run first, their results dropped (cross-frame anchors)
            for pf, parrays in shot.primers_for(f) if shot.primers_for is not None else ():
                if pf == f or pf in shot.held:
                    continue
                shot.held[pf] = parrays
                shot.priming.add(pf)
                shot.inflight.add(pf)
                self._send_one(pf, parrays)
        if shot is not None and shot.carry_target == f and shot.carry_for is not None and f > 0:
            carry = shot.carry_for(f)
            if carry:
                arrays = {**arrays, **carry}
        self._send_one(f, arrays)

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
            req = self._requests.get(h.get("ref") or h.get("id") or "")
            if req is None:
                req = next((r for r in self._requests.values()
                            if msg.type in r.want and r.reply is None), None)
            if req is not None:
                req.reply = msg
            return
        if h.get("session") not in (None, self._session_id()):
            return  # a stale reply for an older session
        if msg.type == P.OPENED:
            if not self._opened and self._session is not None:
                self._opened = True
                self._frames_sent_in_session = 0  # a new backend session: empty state
                if self.shot is not None:
                    self.shot.fresh_state = True
                self.credits = max(1, int(h.get("credits", 1)))
                self.shm_active = h.get("shm") is True and self._ring is not None
                if self.shm_active and self._ring is not None and self._ring.slots < self.credits:
                    self._ensure_ring(self.credits, self._session["width"]
                                      * self._session["height"])
                self._requeue_inflight()
            elif h.get("moved"):
                # a broker moved the session to another worker (empty state there): the
                # frames it hands back go again, the first with the previous frame carried
                self._frames_sent_in_session = 0
                self.credits = max(1, int(h.get("credits", self.credits)))
                self.shm_active = h.get("shm") is True and self._ring is not None
                if self.shot is not None:
                    self.shot.fresh_state = True
        elif msg.type == P.PROGRESS:
            shot = self.shot
            if shot is not None and h.get("frame") in set(shot.held) - shot.priming:
                shot.last_progress = (h["frame"], int(h.get("step", 0)), int(h.get("steps", 0)))
                if shot.on_progress is not None:
                    shot.on_progress(*shot.last_progress)
        elif msg.type == P.RESULT:
            self._on_result(msg)
        elif msg.type == P.ERROR:
            self._on_error(msg)

    def _requeue_inflight(self, delay: float = 0.0) -> None:
        """After a (re)open every unanswered frame must be sent again."""
        shot = self.shot
        if shot is None:
            return
        at = time.monotonic() + delay
        self._drop_primers()  # planned again for the new session
        for f in sorted(shot.inflight):
            shot.resend.append((f, at))
        shot.inflight.clear()

    def _drop_primers(self, only: int | None = None) -> bool:
        """Forget primer frames (all, or ``only``); True if ``only`` was one."""
        shot = self.shot
        if shot is None:
            return False
        for pf in [only] if only is not None else list(shot.priming):
            if pf not in shot.priming:
                return False
            shot.priming.discard(pf)
            shot.held.pop(pf, None)
            shot.inflight.discard(pf)
        return True

    def _on_result(self, msg: P.Message) -> None:
        shot, f = self.shot, msg.header.get("frame")
        if shot is None or f not in shot.held:
            return  # answered already (a re-sent frame answered twice) or unknown
        if self._drop_primers(f):
            return  # run for its side effect (an anchor); its image is on disk already
        if f == shot.carry_target:
            shot.carry_target = None
        del shot.held[f]
        shot.inflight.discard(f)
        shot.answered.add(f)
        rgb = msg.arrays.get("rgb")
        if rgb is None:
            shot.error = BackendError(P.E_BAD_ARRAY, f"result of frame {f} has no 'rgb' array",
                                      frame=f)
            return
        h = msg.header
        extra = {k: a for k, a in msg.arrays.items() if k != "rgb"}
        shot.on_result(Result(f, rgb, h.get("seed"), h.get("timings") or {},
                              bool(h.get("cached", False)), h, extra))

    def _on_error(self, msg: P.Message) -> None:
        err = _error(msg)
        h = msg.header
        self.last_error = err
        shot = self.shot
        if err.ref is not None and err.ref == self._open_id and err.code != E_CANCELLED:
            self._open_error = err
            if shot is not None and not shot.done:
                shot.error = err
                shot.held.clear()
                shot.inflight.clear()
            return
        f = h.get("frame")
        if f is None and err.ref is not None:
            f = self._ids.get(err.ref)
        err.frame = f
        if err.code == P.E_NO_SESSION and self._session is not None:
            # The backend forgot us (restarted quickly, or freed an idle session).
            if self._opened:
                self._opened = False
                self._requeue_inflight()
                self._send_open()
            return
        if shot is None or f is None or f not in shot.held:
            return
        if err.code == E_CANCELLED and self._drop_primers(f):
            return  # planned again with the next (re)open
        if err.code == P.E_BUSY:
            shot.inflight.discard(f)
            shot.resend.append((f, time.monotonic() + 0.05))
        elif err.code == E_CANCELLED:
            shot.inflight.discard(f)
            if shot.cancelled:
                del shot.held[f]
                shot.dropped.add(f)
            elif all(g != f for g, _ in shot.resend):
                shot.resend.append((f, time.monotonic()))  # dropped by a re-open: send again
        else:
            shot.error = err
            shot.held.clear()
            shot.inflight.clear()


def _error(msg: P.Message) -> BackendError:
    h = msg.header
    return BackendError(str(h.get("code", "error")), str(h.get("message", "")),
                        h.get("ref"), h.get("session"), h.get("frame"))
