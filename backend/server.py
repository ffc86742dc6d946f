"""The backend service: sessions of frames in, RGB results out, over ZeroMQ.

One socket loop (main thread, this module) and one compute thread, split along the
ZeroMQ guide's roles:

* The loop owns the socket: a ROUTER bound for clients (``serve --bind``), or a DEALER
  connected to a broker (``serve --connect``: :mod:`.worker_link`, the worker side of
  the guide's Paranoid Pirate pattern). Either way a client message arrives as
  ``[client identity, (empty delimiter,) header, *arrays]`` and replies go back with
  the same envelope, so the session logic (:mod:`.sessions`) is one code path.
* The compute thread (:mod:`.compute`: pipeline pool, result cache, running a job)
  takes frames round-robin from the sessions' queues (:mod:`.jobs`) and hands
  progress/results back through an ``inproc`` PAIR wake-up, so PING/STATUS/CANCEL stay
  answered while a frame computes.
* Shared memory (:mod:`.shm_grants`): a bound server grants it to a local client that
  proves its segment readable here.

Nothing is unbounded: a session may hold ``credits`` frames (queued or running), a
client ``client_sessions`` sessions and ``client_mb`` megabytes (quotas.py), the server
at most ``max_sessions`` sessions, the result cache ``cache_mb`` megabytes. Every
malformed message gets an ``error`` reply (and a rate-limited log line).

Whatever outlives a frame's reply never keeps a view of the client's shared memory: a
stateful pipeline gets private copies of the passes, the result and the cache never
alias them, and a frame whose slot was rewritten meanwhile (its generation changed) is
answered ``cancelled``, never cached.
"""

from __future__ import annotations

import importlib.util
import logging
import threading
import time
from typing import Any

import zmq

from .. import wire
from ..wire import E_CANCELLED, SERVER_NAME, Message, ProtocolError, error, reply
from ..wire import clean as _clean
from . import auth, pipelines, quotas
from .broker.worker_link import WorkerLink
from .compute import (
    MAX_PIPELINES,
    ComputeThread,
    Events,
    PipelinePool,
    ResultCache,
    passes_hash,
    settings_hash,
)
from .diffusion.seeds import frame_seed
from .jobs import Job, JobQueue, Session
from .log_limit import LogLimiter
from .serve_config import ServeConfig
from .sessions import PASSES, Sessions
from .shm_grants import ShmGrants
from .sockets import send_nowait, tune_socket

# Kept importable from here (tests and callers use these names).
__all__ = ["E_CANCELLED", "MAX_PIPELINES", "PASSES", "Job", "ResultCache", "ServeConfig",
           "Server", "Session", "frame_seed", "passes_hash", "settings_hash"]

log = logging.getLogger("painted_skin.backend")


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
        self._bound: zmq.Socket | None = None  # the client ROUTER (not in worker mode)
        self._link: WorkerLink | None = None  # the broker DEALER (worker mode)
        self.endpoint: str | None = None
        self._auth = None  # started by bind()/connect(), after the endpoint check
        self._stop = threading.Event()
        self.devices: list[str] = ["cpu"]
        self._max_message = int(self.cfg.max_message_mb * 2**20)
        self._queue = JobQueue(self._stop)
        self._events = Events(self.ctx, f"inproc://painted-skin-wake-{id(self):x}")
        self.cache = ResultCache(int(self.cfg.cache_mb * 1024 * 1024))
        self._shm = ShmGrants(self.cfg)
        self._pool = PipelinePool(self.cfg.device, lambda: self._sessions.table.values())
        self._sessions = Sessions(self.cfg, self._send, self._queue, self._pool, self._shm)
        self._compute = ComputeThread(self._queue, self._pool, self.cache, self._events,
                                      self._stop, self.cfg.pipeline)
        self._peer: Any = None  # the frame being handled (its Peer-Address)
        self._log = LogLimiter(log)  # what clients can trigger at will: rate-limited
        self._client = b""  # who sent the message being handled
        self._handlers = {
            wire.PING: self._on_ping, wire.STATUS: self._on_status,
            wire.OPEN: lambda route, msg: self._sessions.on_open(
                route, msg, self._client, self._peer_is_local),
            wire.FRAME: self._sessions.on_frame, wire.CANCEL: self._sessions.on_cancel,
            wire.CLOSE: self._sessions.on_close,
        }

    @property
    def sock(self) -> zmq.Socket | None:
        """The socket the loop polls: the bound ROUTER, or the worker link's DEALER."""
        return self._link.sock if self._link is not None else self._bound

    @property
    def loads(self) -> int:
        """Pipelines created (factory calls) by this server."""
        return self._pool.loads

    @property
    def loaded_models(self) -> list[str]:
        return self._pool.loaded_models

    # ---- sockets -------------------------------------------------------------------------

    def bind(self, endpoint: str | None = None) -> str:
        """Bind the client ROUTER; returns the endpoint (a ``:*`` port resolved)."""
        endpoint = endpoint or self.cfg.bind
        auth.require_safe(endpoint, self.cfg.keys, "bind")
        self._start_auth()
        sock = self.ctx.socket(zmq.ROUTER)
        tune_socket(sock, self._max_message)
        sock.router_handover = True
        try:
            if self.cfg.keys:
                auth.make_server(sock, self.cfg.keys)
            sock.bind(endpoint)
        except BaseException:
            sock.close(linger=0)  # an open socket would block ctx.term() forever
            raise
        self._bound = sock
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
        if self._link is None:
            self._link = WorkerLink(self.ctx, self.cfg, self._max_message, self._stop,
                                    lambda: self.devices, self.status,
                                    self._sessions.drop_all)
        self._link.connect(first=True)
        self.endpoint = endpoint

    def _start_auth(self) -> None:
        if self.cfg.keys and self._auth is None:
            self._auth = auth.start_authenticator(self.ctx, self.cfg.keys)

    def _send(self, route: list[bytes], frames: list[Any]) -> None:
        send_nowait(self.sock, [*route, *frames])

    def _shm_possible(self) -> bool:
        """Shared memory at all: enabled, Linux, and not a broker's worker."""
        return self._shm.possible()

    def _peer_is_local(self) -> bool:
        """The current message's sender is on this machine (loopback or ipc)."""
        return self._shm.peer_is_local(self.endpoint, self._peer)

    # ---- lifecycle -----------------------------------------------------------------------

    def start(self) -> threading.Thread:
        """Run in a background thread (tests, embedding); ``stop()`` ends it."""
        t = threading.Thread(target=self.run, name="painted-skin-serve", daemon=True)
        t.start()
        return t

    def stop(self) -> None:
        self._stop.set()
        self._queue.wake_all()

    def run(self) -> None:
        if self.sock is None:
            if self.cfg.connect:
                self.connect()
            else:
                self.bind()
        wake = self._events.bind()
        self._probe_devices()
        if self._shm_possible():
            wire.sweep_shm()  # segments of clients that crashed while no backend ran
        self._compute.thread.start()
        next_sweep = time.monotonic() + 0.5
        try:
            while not self._stop.is_set():
                poller = zmq.Poller()
                poller.register(self.sock, zmq.POLLIN)
                poller.register(wake, zmq.POLLIN)
                ready = dict(poller.poll(100))
                if wake in ready:
                    self._events.drain()
                self._sessions.deliver(self._events)
                if self.sock in ready:
                    self._receive_batch()
                now = time.monotonic()
                if self._link is not None:
                    self._link.beat(now)
                if now >= next_sweep:
                    self._sessions.sweep_idle(now)
                    next_sweep = now + 0.5
        finally:
            self._shutdown()

    def close(self) -> None:
        """Release the sockets of a server that will not ``run()`` (after a failed bind)."""
        self._shutdown()

    def _shutdown(self) -> None:
        self._stop.set()
        self._queue.wake_all()
        if self._link is not None:
            self._link.disconnect()
        if self._compute.thread.is_alive():
            self._compute.thread.join(timeout=5)
        for sess in list(self._sessions.table.values()):
            self._shm.release(sess)
        if self.sock is not None:
            self.sock.close(linger=0)
        self._events.close()
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
                if self._link is None:
                    self._send(e.routing, error(e.code, str(e)))
                continue
            if self._link is not None:
                self._link.heard()
                if len(frames) == 1:
                    self._link.on_control(frames[0])
                    continue
            self._on_client(frames)

    def _on_client(self, frames: list[zmq.Frame]) -> None:
        ident = frames[0].bytes
        route, body = [ident], frames[1:]
        if len(body) > 1 and len(body[0]) == 0:  # REQ-style empty delimiter
            route.append(b"")
            body = body[1:]
        self._sessions.last_seen[ident] = time.monotonic()
        header: dict[str, Any] = {}
        self._peer = frames[-1]
        # a broker's worker sees only the broker: its envelopes name the clients
        self._client = (b"id:" + ident if self.cfg.connect
                        else quotas.client_id(self._peer, ident))
        try:
            msg = wire.decode(body, expect=wire.CLIENT_TYPES, allow_shm=self._shm_possible())
            header = msg.header
            if msg.shm and msg.type != wire.FRAME:
                raise ProtocolError(wire.E_BAD_ARRAY, f"{msg.type}: only frame arrays may "
                                                      "lie in shared memory", msg.id)
            self._handlers[msg.type](route, msg)
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

    # ---- the server's own replies --------------------------------------------------------

    def _on_ping(self, route: list[bytes], msg: Message) -> None:
        self._send(route, reply(wire.PONG, version=wire.PROTOCOL_VERSION,
                                server=SERVER_NAME, role="server", boot=self.boot,
                                ref=_clean(msg.id)))

    def status(self) -> dict[str, Any]:
        depth = self._sessions.queue_depth()
        return {"version": wire.PROTOCOL_VERSION, "server": SERVER_NAME,
                "devices": list(self.devices), "pipelines": pipelines.names(),
                "loaded_models": list(self.loaded_models), "models": pipelines.model_names(),
                "queue_depth": depth,
                "sessions": len(self._sessions), "workers": 1,
                "cache": {"items": len(self.cache), "bytes": self.cache.bytes}}

    def _on_status(self, route: list[bytes], msg: Message) -> None:
        self._send(route, reply(wire.STATUS_REPLY, ref=_clean(msg.id), **self.status()))
