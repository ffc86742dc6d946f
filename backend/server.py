"""The backend service: sessions of frames in, RGB results out, over ZeroMQ.

One socket loop (main thread) and one compute thread:

* The loop owns the socket: a ROUTER bound for clients (``serve --bind``), or
  a DEALER connected to a broker (``serve --connect``, the worker side of the
  guide's Paranoid Pirate pattern: READY, HEARTBEAT every second, reconnect
  with back-off after 3 silent beats). Either way a client message arrives as
  ``[client identity, (empty delimiter,) header, *arrays]`` and replies go
  back with the same envelope, so the session logic is one code path.
* The compute thread takes frames round-robin from the sessions' queues, runs
  the pipeline and hands progress/results back through an ``inproc`` PAIR
  wake-up, so PING/STATUS/CANCEL stay answered while a frame computes.
* OPEN loads the session's pipeline (weights, downloads, ONNX exports) as a
  job at the head of its queue on the compute thread and is answered OPENED
  only then, or with the error that kept it from loading (which component,
  where it looked, how to provide it): never a failure on the shot's first
  frame. A pipeline already loaded and prepared answers at once.

Nothing is unbounded: a session may hold ``credits`` frames (queued or
running), a client ``client_sessions`` sessions and ``client_mb`` megabytes
(quotas.py), the server at most ``max_sessions`` sessions, the result cache
``cache_mb`` megabytes. Every malformed message gets an ``error`` reply (and a
rate-limited log line).

Shared memory (same machine, Linux): a bound server (never a broker's worker)
grants ``"shm"`` in OPENED to a local client that asked and proved its segment
readable here; its FRAME arrays are then read-only views of the client's sealed
memfd segment (it cannot shrink under the mapping), valid only until the frame's
reply, or copies with ``pread`` out of a /dev/shm segment (never mapped: a client
shrinking it under a mapping would kill the server with SIGBUS). So nothing that
outlives the reply may keep such a view: a stateful pipeline gets private copies of
the passes, the result and the cache never alias them, and a frame whose slot was
rewritten meanwhile (its generation changed) is answered ``cancelled``, never cached.
"""

from __future__ import annotations

import collections
import hashlib
import importlib.util
import json
import logging
import re
import threading
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import zmq

from .. import wire
from ..wire import (
    E_CANCELLED,
    HEARTBEAT_INTERVAL,
    HEARTBEAT_LIVENESS,
    MAX_NAME,
    RECONNECT_INIT,
    RECONNECT_MAX,
    SERVER_NAME,
    WIRE_PASSES,
    Message,
    ProtocolError,
    error,
    is_int,
    reply,
)
from ..wire import clean as _clean
from . import auth, pipelines, quotas
from .diffusion.seeds import frame_seed  # noqa: F401  (re-exported: the one formula)
from .log_limit import LogLimiter

log = logging.getLogger("painted_skin.backend")

# The control passes a FRAME may carry: dtype and channels (0: (H, W)), from the wire table.
PASSES: dict[str, tuple[str, int]] = {n: (p.dtype, p.channels) for n, p in WIRE_PASSES.items()}
MAX_PIPELINES = 4  # pipeline instances kept loaded (one per distinct load options)


def settings_hash(pipeline: str, prompt: str, negative: str, seed: int, width: int,
                  height: int, options: dict[str, Any], refs: list[np.ndarray]) -> bytes:
    """What, besides the passes, decides a session's pictures (the cache key)."""
    h = hashlib.sha256(json.dumps([pipeline, prompt, negative, seed, width, height, options],
                                  sort_keys=True, separators=(",", ":")).encode())
    for r in refs:
        h.update(f"|{r.dtype.name}{list(r.shape)}|".encode())
        h.update(np.ascontiguousarray(r))
    return h.digest()


def passes_hash(passes: dict[str, np.ndarray]) -> bytes:
    h = hashlib.sha256()  # hashlib drops the GIL on large buffers
    for name in sorted(passes):
        a = passes[name]
        h.update(f"|{name}:{a.dtype.name}{list(a.shape)}|".encode())
        h.update(np.ascontiguousarray(a))
    return h.digest()


class ResultCache:
    """Least-recently-used results bounded by bytes (compute thread only)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self._items: OrderedDict[tuple, np.ndarray] = OrderedDict()

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: tuple) -> np.ndarray | None:
        a = self._items.get(key)
        if a is not None:
            self._items.move_to_end(key)
        return a

    def put(self, key: tuple, a: np.ndarray) -> None:
        if a.nbytes > self.max_bytes or key in self._items:
            return
        self._items[key] = a
        self.bytes += a.nbytes
        while self.bytes > self.max_bytes:
            _, old = self._items.popitem(last=False)
            self.bytes -= old.nbytes


@dataclass
class ServeConfig:
    bind: str = "tcp://127.0.0.1:5555"
    connect: str | None = None  # broker backend: worker mode
    pipeline: str = "echo"  # default for OPEN without "pipeline"; loaded at start
    device: str = "cpu"
    credits: int = 4
    session_timeout: float = 10.0
    keys: str | None = None
    cache_mb: float = 512.0
    max_sessions: int = 256
    shm: bool = True  # grant the shared-memory data path to local clients that ask
    max_shm_segments: int = 4  # segments mapped per session (least recently used dropped)
    max_message_mb: float = wire.MAX_MESSAGE_BYTES / 2**20  # arrays in one message
    client_sessions: int = quotas.DEFAULT_CLIENT_SESSIONS  # sessions one client may hold
    client_mb: float = quotas.DEFAULT_CLIENT_MB  # its queued frames + reference images


@dataclass(eq=False)
class Session:
    key: tuple[bytes, str]  # (client identity, client-chosen name)
    route: list[bytes]
    name: str
    pipeline: str
    prompt: str
    negative: str
    seed: int
    width: int
    height: int
    options: dict[str, Any]
    refs: list[np.ndarray]
    settings: bytes
    outstanding: dict[int, Job] = field(default_factory=dict)
    queue: deque[Job] = field(default_factory=deque)  # guarded by Server._cond
    state: dict[str, Any] = field(default_factory=dict)  # the pipeline's, compute thread only
    shm: bool = False  # granted: FRAME arrays may lie in the client's segments
    shm_maps: OrderedDict[str, wire.ShmSegment] = field(default_factory=OrderedDict)
    loading: Job | None = None  # the load that will answer OPEN (None once OPENED went out)
    failed: str | None = None  # set by the compute thread when that load failed
    client: bytes = b""  # who holds it, for the per-client limits (quotas.client_id)


@dataclass(eq=False)
class Job:
    session: Session
    frame: int
    ref: str | None
    passes: dict[str, np.ndarray]
    seed: int
    arrived: float
    cancelled: bool = False
    shm: bool = False  # some passes were copied from the client's shared memory
    slot: tuple[wire.ShmSegment, int, int] | None = None  # (segment, offset, generation)
    load: bool = False  # not a frame: load the session's pipeline, then answer its OPEN
    carry: dict[str, np.ndarray] | None = None  # the previous frame, for a temporal session
    carry_frame: int | None = None

    def fresh(self) -> bool:
        """Its shared-memory slot still holds this frame (the client has not reused it)."""
        return self.slot is None or self.slot[0].read_u64(self.slot[1]) == self.slot[2]


class Server:
    """A backend: ``bind()`` (or ``connect()``), then ``run()`` until ``stop()``."""

    def __init__(self, config: ServeConfig | None = None, ctx: zmq.Context | None = None
                 ) -> None:
        self.cfg = config or ServeConfig()
        pipelines.register_builtin()
        pipelines.get(self.cfg.pipeline)  # KeyError names the known ones
        # Changes with every process: a client that sees another boot id in PONG knows
        # the backend restarted (its sessions, and an OPEN still loading, are gone).
        self.boot = wire.new_id()
        self.ctx = ctx or zmq.Context()
        self._own_ctx = ctx is None
        self.sock: zmq.Socket | None = None
        self.endpoint: str | None = None
        self._auth = None  # started by bind()/connect(), after the endpoint check
        self._stop = threading.Event()
        self._sessions: dict[tuple[bytes, str], Session] = {}
        self._last_seen: dict[bytes, float] = {}
        self._cond = threading.Condition()
        self._ready: quotas.FairQueue[Session] = quotas.FairQueue()  # round-robin by client
        self._running: Job | None = None
        self._events: collections.deque[tuple] = collections.deque()
        self._wake_addr = f"inproc://painted-skin-wake-{id(self):x}"
        self._wake: zmq.Socket | None = None
        self.cache = ResultCache(int(self.cfg.cache_mb * 1024 * 1024))
        self._pipes: OrderedDict[tuple, Any] = OrderedDict()
        self.loads = 0  # pipelines created (factory calls) by this server
        self.loaded_models: list[str] = []
        self.devices: list[str] = ["cpu"]
        self._compute = threading.Thread(target=self._compute_loop, name="painted-skin-compute",
                                         daemon=True)
        # worker mode (Paranoid Pirate worker)
        self._broker_seen = 0.0
        self._heartbeat_at = 0.0
        self._backoff = RECONNECT_INIT
        self._peer: Any = None  # the frame being handled (its Peer-Address)
        self._log = LogLimiter(log)  # what clients can trigger at will: rate-limited
        self._max_message = int(self.cfg.max_message_mb * 2**20)
        self._limits = quotas.ClientLimits(self.cfg.client_sessions,
                                           int(self.cfg.client_mb * 2**20))
        self._client = b""  # who sent the message being handled

    # ---- sockets -------------------------------------------------------------------------

    def bind(self, endpoint: str | None = None) -> str:
        """Bind the client ROUTER; returns the endpoint (a ``:*`` port resolved)."""
        endpoint = endpoint or self.cfg.bind
        auth.require_safe(endpoint, self.cfg.keys, "bind")
        self._start_auth()
        sock = self.ctx.socket(zmq.ROUTER)
        self._tune(sock)
        sock.router_handover = True
        try:
            if self.cfg.keys:
                auth.make_server(sock, self.cfg.keys)
            sock.bind(endpoint)
        except BaseException:
            sock.close(linger=0)  # an open socket would block ctx.term() forever
            raise
        self.sock = sock
        self.endpoint = sock.getsockopt_string(zmq.LAST_ENDPOINT)
        return self.endpoint

    def connect(self, endpoint: str | None = None) -> None:
        """Worker mode: a DEALER to the broker's backend (sends READY)."""
        endpoint = endpoint or self.cfg.connect
        assert endpoint
        auth.require_safe(endpoint, self.cfg.keys, "connect to")
        self._start_auth()
        self.cfg.connect = endpoint
        self.cfg.session_timeout = 0  # the broker watches the clients
        self._reconnect(first=True)

    def _start_auth(self) -> None:
        if self.cfg.keys and self._auth is None:
            self._auth = auth.start_authenticator(self.ctx, self.cfg.keys)

    def _tune(self, sock: zmq.Socket) -> None:
        sock.linger = 0
        sock.rcvhwm = sock.sndhwm = 256
        sock.setsockopt(zmq.MAXMSGSIZE, min(wire.MAX_ARRAY_BYTES, self._max_message)
                        + wire.MAX_HEADER_BYTES)

    def _reconnect(self, first: bool = False) -> None:
        if self.sock is not None:
            self.sock.close(linger=0)
        sock = self.ctx.socket(zmq.DEALER)
        self._tune(sock)
        try:
            if self.cfg.keys:
                auth.make_client(sock, self.cfg.keys, name="worker")
            sock.connect(self.cfg.connect)
        except BaseException:
            sock.close(linger=0)
            raise
        self.sock = sock
        self.endpoint = self.cfg.connect
        now = time.monotonic()
        self._broker_seen = now
        self._heartbeat_at = now + HEARTBEAT_INTERVAL
        self._send_raw(reply(wire.READY, pipelines=pipelines.names(), devices=self.devices,
                             credits=self.cfg.credits, server=SERVER_NAME))
        if not first:
            log.info("worker: reconnected to %s", self.cfg.connect)

    def _send_raw(self, frames: list[Any]) -> None:
        try:
            self.sock.send_multipart(frames, flags=zmq.NOBLOCK, copy=False)
        except zmq.Again:  # peer gone or full: drop (clients resend or time out)
            log.debug("send dropped (peer not reachable)")

    def _send(self, route: list[bytes], frames: list[Any]) -> None:
        self._send_raw([*route, *frames])

    # ---- lifecycle -----------------------------------------------------------------------

    def start(self) -> threading.Thread:
        """Run in a background thread (tests, embedding); ``stop()`` ends it."""
        t = threading.Thread(target=self.run, name="painted-skin-serve", daemon=True)
        t.start()
        return t

    def stop(self) -> None:
        self._stop.set()
        with self._cond:
            self._cond.notify_all()

    def run(self) -> None:
        if self.sock is None:
            if self.cfg.connect:
                self.connect()
            else:
                self.bind()
        self._wake = self.ctx.socket(zmq.PAIR)
        self._wake.bind(self._wake_addr)
        self._probe_devices()
        if self._shm_possible():
            wire.sweep_shm()  # segments of clients that crashed while no backend ran
        self._compute.start()
        next_sweep = time.monotonic() + 0.5
        try:
            while not self._stop.is_set():
                poller = zmq.Poller()
                poller.register(self.sock, zmq.POLLIN)
                poller.register(self._wake, zmq.POLLIN)
                ready = dict(poller.poll(100))
                if self._wake in ready:
                    self._drain_wake()
                self._deliver_events()
                if self.sock in ready:
                    self._receive_batch()
                now = time.monotonic()
                if self.cfg.connect:
                    self._worker_heartbeat(now)
                if now >= next_sweep:
                    self._sweep_idle(now)
                    next_sweep = now + 0.5
        finally:
            self._shutdown()

    def close(self) -> None:
        """Release the sockets of a server that will not ``run()`` (after a failed bind)."""
        self._shutdown()

    def _shutdown(self) -> None:
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        if self.cfg.connect and self.sock is not None:
            try:
                self.sock.send_multipart(reply(wire.DISCONNECT), flags=zmq.NOBLOCK)
                self.sock.close(linger=200)
            except zmq.ZMQError:
                pass
        if self._compute.is_alive():
            self._compute.join(timeout=5)
        for sess in list(self._sessions.values()):
            self._shm_release(sess)
        if self.sock is not None:
            self.sock.close(linger=0)
        if self._wake is not None:
            self._wake.close(linger=0)
        if self._auth is not None:
            self._auth.stop()
            self._auth = None
        if self._own_ctx:
            self.ctx.term()

    def _probe_devices(self) -> None:
        """CUDA devices when torch is installed, probed off the loop (torch imports slowly)."""
        if importlib.util.find_spec("torch") is None:
            return

        def probe() -> None:
            try:
                import torch

                if torch.cuda.is_available():
                    self.devices = ["cpu"] + [f"cuda:{i} ({torch.cuda.get_device_name(i)})"
                                              for i in range(torch.cuda.device_count())]
            except Exception as e:  # a broken torch must not stop the backend
                log.warning("torch device probe failed: %s", e)

        threading.Thread(target=probe, daemon=True).start()

    # ---- receiving -----------------------------------------------------------------------

    def _receive_batch(self) -> None:
        for _ in range(64):  # bounded, so results and heartbeats go out in between
            try:
                frames = wire.recv_capped(self.sock, zmq.NOBLOCK, self._max_message)
            except zmq.Again:
                return
            except wire.TooBig as e:  # drained and freed already: answer the sender
                self._log.warn(e.code, "refused a message: %s", e)
                if not self.cfg.connect:
                    self._send(e.routing, error(e.code, str(e)))
                continue
            if self.cfg.connect:
                self._broker_seen = time.monotonic()
                self._backoff = RECONNECT_INIT
                if len(frames) == 1:
                    self._on_broker_control(frames[0])
                    continue
            self._on_client(frames)

    def _on_broker_control(self, frame: zmq.Frame) -> None:
        try:
            msg = wire.decode([frame], expect=wire.WORKER_TYPES)
        except ProtocolError as e:
            log.warning("worker: bad control message from broker: %s", e)
            return
        if msg.type == wire.DISCONNECT:
            log.info("worker: broker asked to reconnect")
            self._drop_all()
            self._reconnect()

    def _on_client(self, frames: list[zmq.Frame]) -> None:
        ident = frames[0].bytes
        route, body = [ident], frames[1:]
        if len(body) > 1 and len(body[0]) == 0:  # REQ-style empty delimiter
            route.append(b"")
            body = body[1:]
        self._last_seen[ident] = time.monotonic()
        header: dict[str, Any] = {}
        self._peer = frames[-1]
        # a broker's worker sees only the broker: its envelopes name the clients
        self._client = (b"id:" + ident if self.cfg.connect
                        else quotas.client_id(self._peer, ident))
        try:
            msg = wire.decode(body, expect=wire.CLIENT_TYPES,
                                  allow_shm=self._shm_possible())
            header = msg.header
            if msg.shm and msg.type != wire.FRAME:
                raise ProtocolError(wire.E_BAD_ARRAY, f"{msg.type}: only frame arrays may "
                                                          "lie in shared memory", msg.id)
            getattr(self, f"_on_{msg.type}")(route, msg)
        except ProtocolError as e:
            self._log.info(e.code, "client %s: %s: %s", ident.hex()[:16], e.code, e)
            self._send(route, error(e.code, str(e), e.ref or header.get("id"),
                                    header.get("session"), header.get("frame")))
        except Exception as e:  # a bug must not take the server down
            self._log.exception(wire.E_INTERNAL, "internal error on %s",
                                _clean(header.get("type")))
            self._send(route, error(wire.E_INTERNAL, f"{type(e).__name__}: {e}",
                                    header.get("id"), header.get("session"),
                                    header.get("frame")))

    def _session(self, route: list[bytes], msg: Message) -> Session:
        s = self._sessions.get((route[0], msg.session)) if isinstance(msg.session, str) else None
        if s is None:
            raise ProtocolError(wire.E_NO_SESSION,
                                f"no open session {_clean(msg.session)!r} for this client "
                                f"(send open first; sessions end on close or after "
                                f"{self.cfg.session_timeout:g} s of client silence)", msg.id)
        return s

    # ---- message handlers ----------------------------------------------------------------

    def _on_ping(self, route: list[bytes], msg: Message) -> None:
        self._send(route, reply(wire.PONG, version=wire.PROTOCOL_VERSION,
                                server=SERVER_NAME, role="server", boot=self.boot,
                                ref=_clean(msg.id)))

    def status(self) -> dict[str, Any]:
        with self._cond:
            depth = sum(len(s.outstanding) for s in self._sessions.values())
        return {"version": wire.PROTOCOL_VERSION, "server": SERVER_NAME,
                "devices": list(self.devices), "pipelines": pipelines.names(),
                "loaded_models": list(self.loaded_models), "queue_depth": depth,
                "sessions": len(self._sessions), "workers": 1,
                "cache": {"items": len(self.cache), "bytes": self.cache.bytes}}

    def _on_status(self, route: list[bytes], msg: Message) -> None:
        self._send(route, reply(wire.STATUS_REPLY, ref=_clean(msg.id), **self.status()))

    def _on_open(self, route: list[bytes], msg: Message) -> None:
        h, ref = msg.header, msg.id

        def bad(text: str, code: str = wire.E_BAD_MESSAGE) -> ProtocolError:
            return ProtocolError(code, f"open: {text}", ref)

        name = h.get("session")
        if not isinstance(name, str) or not 0 < len(name) <= MAX_NAME:
            raise bad(f"'session' must be a string of 1..{MAX_NAME} characters")
        pipeline = h.get("pipeline", self.cfg.pipeline)
        try:
            entry = pipelines.get(pipeline) if isinstance(pipeline, str) else None
        except KeyError as e:
            raise bad(str(e.args[0])) from None
        if entry is None:
            raise bad("'pipeline' must be a string")
        prompt, negative = h.get("prompt", ""), h.get("negative_prompt", "")
        if not isinstance(prompt, str) or not isinstance(negative, str):
            raise bad("'prompt' and 'negative_prompt' must be strings")
        seed = h.get("seed", 0)
        if not is_int(seed) or not -2**63 <= seed < 2**64:
            raise bad("'seed' must be an integer")
        width, height = h.get("width"), h.get("height")
        m = entry.size_multiple
        if not (is_int(width) and is_int(height) and 0 < width <= wire.MAX_SIDE
                and 0 < height <= wire.MAX_SIDE and width % m == 0 and height % m == 0):
            raise bad(f"bad size {width!r}x{height!r}: width and height must be integers in "
                      f"1..{wire.MAX_SIDE}" + (f", multiples of {m} for {pipeline!r}"
                                                   if m > 1 else ""))
        options = h.get("options", {})
        if not isinstance(options, dict):
            raise bad("'options' must be an object")
        problems = entry.check(options) if entry.check else []
        if problems:
            raise bad(f"pipeline {pipeline!r} cannot run with these options: "
                      + "; ".join(map(str, problems)))
        refs = []
        for i, (aname, a) in enumerate(msg.arrays.items()):
            if aname != f"ref{i}":
                raise bad(f"array {aname!r}: open takes only ref0..refN in order",
                          wire.E_BAD_ARRAY)
            if a.dtype != np.uint8 or a.ndim != 3 or a.shape[2] != 3:
                raise bad(f"array {aname!r}: identity images are uint8 (H, W, 3), got "
                          f"{a.dtype}{list(a.shape)}", wire.E_BAD_ARRAY)
            refs.append(a)
        key = (route[0], name)
        old = self._sessions.get(key)
        count, held = self._held_by(self._client, besides=old)
        quotas.check_open(self._limits, count, held, sum(r.nbytes for r in refs), ref)
        if old is not None:  # re-open replaces the session; its frames are cancelled
            self._drop_session(old, notify_ref=ref)
        elif len(self._sessions) >= self.cfg.max_sessions:
            raise bad(f"the backend has {len(self._sessions)} sessions open (the most it "
                      f"takes); close some or try later", wire.E_BUSY)
        s = self._sessions[key] = Session(
            key, list(route), name, pipeline, prompt, negative, seed, width, height, options,
            refs, settings_hash(pipeline, prompt, negative, seed, width, height, options, refs),
            client=self._client)
        if h.get("shm") is True:
            self._grant_shm(s, h.get("shm_probe"))
        if self._ready_for(s):
            self._send_opened(s, _clean(ref))
            return
        # Load (download, export...) on the compute thread and answer OPEN only then:
        # a model that cannot load fails the OPEN, before the shot, never a frame of
        # it. The loop stays free meanwhile (PING, STATUS, other sessions). Frames sent
        # before OPENED (a broker replaying a session) queue behind the load.
        job = Job(s, -1, _clean(ref), {}, 0, time.monotonic(), load=True)
        s.loading = job
        with self._cond:
            s.queue.appendleft(job)
            self._ready.add(s.client, s.key, s)
            self._cond.notify()

    def _ready_for(self, s: Session) -> bool:
        """The session's pipeline is loaded and prepared for its frame size (OPENED
        may go out at once). Reads the compute thread's dict: single lookups only."""
        pipe = self._pipes.get(self._pipeline_key(s.pipeline, s.options))
        if pipe is None:
            return False
        prepared = getattr(pipe, "prepared", None)
        return prepared is None or bool(prepared(width=s.width, height=s.height,
                                                 options=s.options, refs=s.refs))

    def _send_opened(self, s: Session, ref: str | None, **extra: Any) -> None:
        self._send(s.route, reply(wire.OPENED, session=s.name, credits=self.cfg.credits,
                                  pipeline=s.pipeline, width=s.width, height=s.height, ref=ref,
                                  **({"shm": True} if s.shm else {}), **extra))

    # ---- shared memory -------------------------------------------------------------------

    def _shm_possible(self) -> bool:
        """Shared memory at all: enabled, Linux, and not a broker's worker (the broker
        may hand the session to a worker on another machine)."""
        return self.cfg.shm and not self.cfg.connect and wire.shm_supported()

    def _peer_is_local(self) -> bool:
        """The current message's sender is on this machine (loopback or ipc)."""
        if self.endpoint and wire.is_local_endpoint(self.endpoint):
            return True
        try:
            addr = self._peer.get("Peer-Address")
        except (AttributeError, zmq.ZMQError):
            return False
        return isinstance(addr, str) and wire.is_loopback_host(addr)

    def _grant_shm(self, s: Session, probe: Any) -> None:
        """Grant when local and the probe segment is readable here with the client's
        token (proves the same machine and user; an ssh tunnel or container fails)."""
        if not (self._shm_possible() and self._peer_is_local() and isinstance(probe, dict)):
            return
        name, token = probe.get("segment"), probe.get("token")
        if not (isinstance(token, str) and re.fullmatch(r"[0-9a-f]{32}", token)
                and isinstance(name, str)):
            return
        try:
            seg = self._shm_map(s, name)
        except ProtocolError as e:
            log.info("session %r: no shared memory (%s)", s.name, e)
            return
        if seg.read_bytes(0, 24) == wire.SHM_MAGIC + bytes.fromhex(token):
            s.shm = True

    def _shm_map(self, s: Session, name: str) -> wire.ShmSegment:
        seg = s.shm_maps.get(name)
        if seg is None or seg.closed:
            seg = wire.ShmSegment.attach(name)
            s.shm_maps[name] = seg
            while len(s.shm_maps) > self.cfg.max_shm_segments:
                s.shm_maps.popitem(last=False)[1].close()  # its queued frames: cancelled
        s.shm_maps.move_to_end(name)
        return seg

    def _shm_arrays(self, s: Session, msg: Message) -> tuple[dict[str, np.ndarray], Any]:
        """The FRAME's arrays with its shared-memory ones mapped (bounds checked first),
        and its slot ``(segment, offset, generation)`` when it names one."""
        if not s.shm:
            raise ProtocolError(wire.E_BAD_ARRAY, "frame: shared memory was not granted "
                                                      "for this session; send arrays inline",
                                msg.id)
        arrays = dict(msg.arrays)
        for r in msg.shm:
            arrays[r.name] = self._shm_map(s, r.segment).read(r.dtype, r.shape, r.offset)
        slot = msg.header.get("slot")
        if slot is None:
            return arrays, None
        if not isinstance(slot, dict):
            raise ProtocolError(wire.E_BAD_MESSAGE, "frame: 'slot' must be an object",
                                msg.id)
        name, offset, gen = slot.get("segment"), slot.get("offset"), slot.get("gen")
        if not (isinstance(name, str) and is_int(offset) and is_int(gen) and gen > 0):
            raise ProtocolError(wire.E_BAD_MESSAGE, "frame: 'slot' needs segment, offset "
                                                        "and gen > 0", msg.id)
        seg = self._shm_map(s, name)
        now = seg.read_u64(offset)
        if now is None:
            raise ProtocolError(wire.E_BAD_ARRAY, f"frame: slot offset {offset} outside "
                                                      f"segment {name!r}", msg.id)
        if now != gen:
            raise ProtocolError(E_CANCELLED, f"frame {msg.frame}: its shared-memory slot holds "
                                             "newer data (a stale message)", msg.id)
        return arrays, (seg, offset, gen)

    def _shm_release(self, s: Session) -> None:
        """Unmap a freed session's segments; unlink those whose creator is dead."""
        maps, s.shm_maps = s.shm_maps, OrderedDict()
        for name, seg in maps.items():
            seg.close()
            if wire.reap_shm(name):
                log.info("session %r: removed shared memory %s of a dead client", s.name, name)

    def _on_frame(self, route: list[bytes], msg: Message) -> None:
        s = self._session(route, msg)
        frame = msg.frame
        if not is_int(frame) or not 0 <= frame < 2**53:
            raise ProtocolError(wire.E_BAD_MESSAGE, "frame: 'frame' must be an integer "
                                                        ">= 0", msg.id)
        arrays, slot = self._shm_arrays(s, msg) if msg.shm else (msg.arrays, None)
        carry = {k: a for k, a in arrays.items() if k.startswith("carry_")}
        arrays = {k: a for k, a in arrays.items() if k not in carry}
        carry_frame = msg.header.get("carry_frame")
        if carry or carry_frame is not None:
            from .diffusion import carry as carry_mod  # numpy only (torch on restore)

            problem = carry_mod.check(carry, s.width, s.height)
            if problem is None and not (is_int(carry_frame) and 0 <= carry_frame < frame):
                problem = "'carry_frame' must be an integer below 'frame'"
            if problem:
                raise ProtocolError(wire.E_BAD_ARRAY, f"frame: {problem}", msg.id)
        for name, a in arrays.items():
            spec = PASSES.get(name)
            if spec is None:
                raise ProtocolError(wire.E_BAD_ARRAY, f"frame: unknown pass {name!r} "
                                                          f"(known: {', '.join(PASSES)})", msg.id)
            dtype, ch = spec
            shape = (s.height, s.width, ch) if ch else (s.height, s.width)
            if a.dtype.name != dtype or a.shape != shape:
                raise ProtocolError(wire.E_BAD_ARRAY,
                                    f"frame: pass {name!r} must be {dtype}{list(shape)} for "
                                    f"this {s.width}x{s.height} session, got "
                                    f"{a.dtype.name}{list(a.shape)}", msg.id)
        if frame in s.outstanding:
            return  # already queued or computing: its one result will come
        if len(s.outstanding) >= self.cfg.credits:
            raise ProtocolError(wire.E_BUSY, f"frame {frame}: {len(s.outstanding)} frames "
                                                 f"outstanding, credits are {self.cfg.credits}; "
                                                 f"wait for a result", msg.id)
        quotas.check_frame(self._limits, self._held_by(s.client)[1],
                           sum(a.nbytes for a in arrays.values()), frame, msg.id)
        job = Job(s, frame, _clean(msg.id), dict(arrays), frame_seed(s.seed, frame),
                  time.monotonic(), shm=bool(msg.shm), slot=slot, carry=carry or None,
                  carry_frame=carry_frame if carry else None)
        s.outstanding[frame] = job
        with self._cond:
            s.queue.append(job)
            self._ready.add(s.client, s.key, s)
            self._cond.notify()

    def _on_cancel(self, route: list[bytes], msg: Message) -> None:
        s = self._session(route, msg)
        frame = msg.frame
        if frame is not None and not is_int(frame):
            raise ProtocolError(wire.E_BAD_MESSAGE, "cancel: 'frame' must be an integer "
                                                        "or absent", msg.id)
        if frame is None:
            jobs = sorted(s.outstanding.values(), key=lambda j: j.frame)
        else:
            jobs = [s.outstanding[frame]] if frame in s.outstanding else []
        for job in jobs:
            self._cancel_job(job)
            self._send(s.route, error(E_CANCELLED, f"frame {job.frame} cancelled", msg.id,
                                      s.name, job.frame))

    def _on_close(self, route: list[bytes], msg: Message) -> None:
        s = self._session(route, msg)
        self._drop_session(s)
        self._send(route, reply(wire.CLOSED, session=s.name, ref=_clean(msg.id)))

    # ---- session bookkeeping -------------------------------------------------------------

    def _held_by(self, client: bytes, besides: Session | None = None) -> tuple[int, int]:
        """(sessions, bytes) the client holds, leaving ``besides`` out (a re-open)."""
        mine = [s for s in self._sessions.values() if s.client == client and s is not besides]
        return len(mine), sum(quotas.session_bytes(
            s.refs, (j.passes for j in s.outstanding.values())) for s in mine)

    def _cancel_job(self, job: Job) -> None:
        """Forget a frame: unqueue it, or flag it so the pipeline stops at its next step."""
        s = job.session
        job.cancelled = True
        s.outstanding.pop(job.frame, None)
        with self._cond:
            try:
                s.queue.remove(job)
            except ValueError:
                pass  # computing now
            if not s.queue:
                self._ready.discard(s.client, s.key)

    def _drop_session(self, s: Session, notify_ref: str | None = None) -> None:
        load, s.loading = s.loading, None
        if load is not None:  # its OPEN is never answered (re-opened, closed, client gone)
            load.cancelled = True
            with self._cond:
                try:
                    s.queue.remove(load)
                except ValueError:
                    pass  # loading now: the pipeline stays cached for the next session
                if not s.queue:
                    self._ready.discard(s.client, s.key)
        for job in sorted(s.outstanding.values(), key=lambda j: j.frame):
            self._cancel_job(job)
            if notify_ref is not None:
                self._send(s.route, error(E_CANCELLED, f"frame {job.frame} cancelled (session "
                                                       f"re-opened)", notify_ref, s.name,
                                          job.frame))
        if self._sessions.get(s.key) is s:
            del self._sessions[s.key]
        if s.shm_maps:
            self._shm_release(s)

    def _drop_all(self) -> None:
        for s in list(self._sessions.values()):
            self._drop_session(s)
        self._last_seen.clear()

    def _sweep_idle(self, now: float) -> None:
        """Free the sessions of clients silent for longer than the session timeout."""
        timeout = self.cfg.session_timeout
        if not timeout:
            return
        # A session whose OPEN is still loading its model is kept: its client may wait
        # for OPENED without a word (the load can take minutes), and dropping it would
        # leave that OPEN unanswered. Its silence counts from OPENED on.
        loading = {key[0] for key, s in self._sessions.items() if s.loading is not None}
        for key, s in list(self._sessions.items()):
            if s.loading is None and now - self._last_seen.get(key[0], 0.0) > timeout:
                log.info("session %r: client silent for %.0f s, freed", s.name, timeout)
                self._drop_session(s)
        for ident, seen in list(self._last_seen.items()):
            if now - seen > timeout and ident not in loading:
                del self._last_seen[ident]

    def _worker_heartbeat(self, now: float) -> None:
        """Paranoid Pirate worker: beat every interval; reconnect when the broker is silent."""
        if now - self._broker_seen > HEARTBEAT_INTERVAL * HEARTBEAT_LIVENESS:
            log.warning("worker: broker silent, reconnecting in %.0f s", self._backoff)
            self._drop_all()
            if self._stop.wait(self._backoff):
                return
            self._backoff = min(self._backoff * 2, RECONNECT_MAX)
            self._reconnect()
            return
        if now >= self._heartbeat_at:
            st = self.status()
            self._send_raw(reply(wire.HEARTBEAT, queue_depth=st["queue_depth"],
                                 sessions=st["sessions"], loaded_models=st["loaded_models"],
                                 devices=st["devices"]))
            self._heartbeat_at = now + HEARTBEAT_INTERVAL

    # ---- compute thread and its events ---------------------------------------------------

    def _post(self, wake: zmq.Socket, *event: Any) -> None:
        self._events.append(event)
        try:
            wake.send(b"", flags=zmq.NOBLOCK)
        except zmq.Again:
            pass  # the loop is already woken

    def _drain_wake(self) -> None:
        while True:
            try:
                self._wake.recv(flags=zmq.NOBLOCK)
            except zmq.Again:
                return

    def _live(self, job: Job) -> bool:
        s = job.session
        return (not job.cancelled and s.outstanding.get(job.frame) is job
                and self._sessions.get(s.key) is s)

    def _deliver_events(self) -> None:
        while self._events:
            kind, job, *rest = self._events.popleft()
            if job.load:
                self._deliver_open(kind, job, rest)
                continue
            if not self._live(job):
                continue  # cancelled, closed or its client gone
            s = job.session
            if kind == "progress":
                step, steps = rest
                self._send(s.route, reply(wire.PROGRESS, session=s.name, frame=job.frame,
                                          step=step, steps=steps, ref=job.ref))
                continue
            del s.outstanding[job.frame]
            if kind == "result":
                rgb, timings, cached, extra = rest
                self._send(s.route, reply(wire.RESULT, {"rgb": rgb, **extra}, session=s.name,
                                          frame=job.frame, seed=job.seed, timings=timings,
                                          cached=cached, ref=job.ref))
            else:
                code, text = rest
                self._send(s.route, error(code, text, job.ref, s.name, job.frame))

    def _deliver_open(self, kind: str, job: Job, rest: list[Any]) -> None:
        """Answer a session's OPEN once its pipeline loaded (or could not)."""
        s = job.session
        if job.cancelled or s.loading is not job or self._sessions.get(s.key) is not s:
            return  # re-opened, closed or its client gone meanwhile
        s.loading = None
        if kind == "opened":
            self._last_seen[s.key[0]] = time.monotonic()  # silence counts from OPENED
            self._send_opened(s, job.ref, load_ms=rest[0])
            return
        code, text = rest
        frames = sorted(s.outstanding.values(), key=lambda j: j.frame)
        self._drop_session(s)
        # Frames sent before OPENED still get their one reply each, before the OPEN's
        # error: a broker forwards frame replies only while the session exists.
        for fj in frames:
            self._send(s.route, error(code, f"frame {fj.frame}: {text}", fj.ref, s.name,
                                      fj.frame))
        self._send(s.route, error(code, text, job.ref, s.name))

    def _next_job(self) -> Job | None:
        """Round-robin between the clients with queued frames, then their sessions."""
        with self._cond:
            while not self._ready:
                if self._stop.is_set():
                    return None
                self._cond.wait(0.5)
            s = self._ready.pop()
            job = s.queue.popleft()
            if s.queue:
                self._ready.add(s.client, s.key, s)  # back of its client's line
            self._running = job
            return job

    def _pipeline_key(self, name: str, options: dict[str, Any]) -> tuple[str, str, str]:
        """(pipeline, device, its load options): one instance per distinct key."""
        entry = pipelines.get(name)
        missing = object()
        # An option given as the factory's default loads what leaving it out loads.
        load = " ".join(f"{k}={json.dumps(options[k], sort_keys=True)}"
                        for k in entry.load_keys
                        if k in options and options[k] != entry.load_defaults.get(k, missing))
        return name, self.cfg.device, load

    def _pipeline(self, name: str, options: dict[str, Any]) -> Any:
        """The instance for ``options`` (compute thread), loaded when missing; at most
        ``MAX_PIPELINES`` kept, those of no open session evicted first."""
        key = self._pipeline_key(name, options)
        pipe = self._pipes.get(key)
        if pipe is None:
            log.info("loading pipeline %s on %s %s", *key)
            pipe = pipelines.get(name).factory(dict(options), self.cfg.device)
            self.loads += 1
            self._pipes[key] = pipe
            self._evict(keep=key)
            self.loaded_models = [f"{n}@{d}" + (f" {lo}" if lo else "")
                                  for n, d, lo in self._pipes]
        self._pipes.move_to_end(key)
        return pipe

    def _evict(self, keep: tuple[str, str, str]) -> None:
        if len(self._pipes) <= MAX_PIPELINES:
            return
        try:  # the loop thread owns the sessions: a snapshot of their pipelines
            used = {self._pipeline_key(s.pipeline, s.options)
                    for s in list(self._sessions.values())}
        except (RuntimeError, KeyError):  # changed while copied: evict by age alone
            used = set()
        for k in [k for k in self._pipes if k not in used and k != keep]:
            if len(self._pipes) <= MAX_PIPELINES:
                return
            del self._pipes[k]
        while len(self._pipes) > MAX_PIPELINES:  # all in use: the least recently used goes
            self._pipes.popitem(last=False)

    def _compute_loop(self) -> None:
        wake = self.ctx.socket(zmq.PAIR)
        wake.linger = 0
        wake.connect(self._wake_addr)
        try:
            self._pipeline(self.cfg.pipeline, {})
        except Exception:
            log.exception("could not load pipeline %s", self.cfg.pipeline)
        try:
            while not self._stop.is_set():
                job = self._next_job()
                if job is None:
                    break
                try:
                    self._run_job(job, wake)
                except pipelines.Cancelled:
                    pass  # already answered by the cancel
                except (Exception, SystemExit) as e:  # a library's sys.exit must not end
                    # the compute thread (PING would still answer, no frame ever would)
                    log.exception("frame %s of %r failed", job.frame, job.session.name)
                    self._post(wake, "error", job, wire.E_INTERNAL,
                               f"pipeline {job.session.pipeline!r} failed on frame "
                               f"{job.frame}: {type(e).__name__}: {e}")
                finally:
                    with self._cond:
                        self._running = None
        finally:
            wake.close(linger=0)

    def _run_load(self, job: Job, wake: zmq.Socket) -> None:
        """Load (and prepare for the session's size) the pipeline an OPEN asked for."""
        s = job.session
        t0 = time.monotonic()
        try:
            pipe = self._pipeline(s.pipeline, s.options)
            prepare = getattr(pipe, "prepare", None)
            if prepare is not None:  # e.g. the onnx engine exports for this frame size
                prepare(width=s.width, height=s.height, options=s.options, refs=s.refs)
        except (Exception, SystemExit) as e:
            # Missing or broken files, bad options: the user's to fix, said in the reply.
            # Anything else is a bug: logged with its traceback.
            ours = not (hasattr(e, "problems")
                        or isinstance(e, OSError | ValueError | KeyError | NotImplementedError))
            if ours:
                log.exception("session %r: pipeline %s could not load", s.name, s.pipeline)
            else:
                log.warning("session %r: pipeline %s could not load: %s", s.name, s.pipeline, e)
            code = wire.E_INTERNAL if ours else wire.E_BAD_MESSAGE
            s.failed = (f"open: pipeline {s.pipeline!r} could not load with these options: "
                        f"{type(e).__name__}: {e}")
            self._post(wake, "open_failed", job, code, s.failed)
            return
        self._post(wake, "opened", job, round((time.monotonic() - t0) * 1000.0, 3))

    def _run_job(self, job: Job, wake: zmq.Socket) -> None:
        s = job.session
        if job.cancelled:
            return
        if job.load:
            self._run_load(job, wake)
            return
        if s.failed is not None:  # its load failed: answered with the OPEN's error
            return
        t0 = time.monotonic()
        queue_ms = (t0 - job.arrived) * 1000.0
        pipe = self._pipeline(s.pipeline, s.options)
        # A temporal or cross-frame frame depends on the session's state, not only on its
        # passes: the contract's rule keeps it out of the cache.
        temporal = getattr(pipe, "stateful", False) and s.options.get("temporal", True)
        use_cache = self.cache.max_bytes > 0 and pipelines.may_cache(pipe, s.options)
        key = (s.settings, job.seed, passes_hash(job.passes)) if use_cache else None
        rgb = self.cache.get(key) if key else None
        cached = rgb is not None
        if job.shm and not job.fresh():
            self._post(wake, "error", job, E_CANCELLED, f"frame {job.frame}: its shared-memory "
                                                        "slot was rewritten before it ran")
            return
        if rgb is None:
            progress = s.options.get("progress", True) is not False
            passes = job.passes
            if job.shm and getattr(pipe, "stateful", False):
                # a stateful pipeline may keep its inputs (e.g. the previous depth) in the
                # session state beyond this call: give it copies, not views of the slot
                passes = {k: np.array(v) for k, v in passes.items()}

            if job.carry and getattr(pipe, "stateful", False):
                from .diffusion import carry as carry_mod

                carry_mod.restore(pipe, s.state, job.carry_frame, job.carry)

            def callback(step: int, steps: int) -> bool:
                if progress and not job.cancelled:
                    self._post(wake, "progress", job, step, steps)
                return not job.cancelled and not self._stop.is_set()

            out = pipe(passes, prompt=s.prompt, negative_prompt=s.negative, seed=job.seed,
                       width=s.width, height=s.height, refs=s.refs, options=s.options,
                       callback=callback, frame=job.frame, state=s.state)
            out = np.ascontiguousarray(out)
            if out.dtype != np.uint8 or out.shape != (s.height, s.width, 3):
                raise RuntimeError(f"pipeline returned {out.dtype}{list(out.shape)}, not "
                                   f"uint8[{s.height}, {s.width}, 3]")
            if job.shm:
                if not job.fresh():  # the client reused the slot meanwhile: garbage in
                    self._post(wake, "error", job, E_CANCELLED, f"frame {job.frame}: its "
                               "shared-memory slot was rewritten while it ran")
                    return
                if any(np.may_share_memory(out, a) for a in passes.values()):
                    out = out.copy()  # the reply and the cache outlive the slot
            out.flags.writeable = False
            if key and not job.cancelled:
                self.cache.put(key, out)
            rgb = out
        timings = {"queue_ms": round(queue_ms, 3),
                   "compute_ms": round((time.monotonic() - t0) * 1000.0, 3)}
        extra: dict[str, np.ndarray] = {}
        if temporal and not cached:  # what the client keeps to resume the chain exactly
            from .diffusion import carry as carry_mod

            extra = carry_mod.arrays_of(s.state)
        self._post(wake, "result", job, rgb, timings, cached, extra)

