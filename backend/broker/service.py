"""``painted-skin broker``: many backend workers behind one client address.

The ZeroMQ guide's Paranoid Pirate queue (ppqueue.py) adapted to sessions:

* frontend ROUTER for clients, speaking exactly the server's protocol (a
  client cannot tell a broker from a server); backend ROUTER for workers
  (``painted-skin serve --connect``, DEALER) that send READY, then HEARTBEAT
  every second. The broker beats every second too; a worker silent for 3
  beats is dead, and one it does not know is told DISCONNECT (it reconnects
  and says READY again, as a Majordomo worker would).
* Sessions are sticky: OPEN goes to the live worker with the fewest sessions
  (load balancing), and every later message of the session to that worker.
  The broker keeps each session's OPEN and its frames in flight (at most its
  credits); when a worker dies they are replayed on another one, so no frame
  is lost, and a (session, frame) already answered, cancelled or not owned by
  the replying worker is dropped, so none is duplicated.
* The broker answers PING, STATUS, CANCEL and CLOSE itself (CANCEL and CLOSE
  are forwarded too), and frees the sessions of clients silent longer than the
  session timeout by sending CLOSE to their workers.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

import zmq

from ... import wire
from ...wire import (
    E_CANCELLED,
    HEARTBEAT_INTERVAL,
    HEARTBEAT_LIVENESS,
    MAX_NAME,
    SERVER_NAME,
    ProtocolError,
    error,
    is_int,
    reply,
)
from ...wire import clean as _clean
from .. import auth, quotas
from ..log_limit import LogLimiter
from .state import BrokerConfig, BrokerSession, Key, Worker, worker_models

log = logging.getLogger("painted_skin.backend.broker.service")


def _split(body: list[Any]) -> tuple[list[bytes], list[Any]]:
    """[identity, (empty,) *message] -> (route, message)."""
    route = [body[0].bytes]
    rest = body[1:]
    if len(rest) > 1 and len(rest[0]) == 0:
        route.append(b"")
        rest = rest[1:]
    return route, rest


def _nbytes(message: list[Any]) -> int:
    """Bytes of a message's array frames (the header aside)."""
    return sum(len(f) for f in message[1:])


class Broker:
    """``bind()``, then ``run()`` until ``stop()``."""

    def __init__(self, config: BrokerConfig | None = None, ctx: zmq.Context | None = None
                 ) -> None:
        self.cfg = config or BrokerConfig()
        self.boot = wire.new_id()  # per process, in PONG (see Server.boot)
        self.ctx = ctx or zmq.Context()
        self._own_ctx = ctx is None
        self._auth = None
        self.frontend: zmq.Socket | None = None
        self.backend: zmq.Socket | None = None
        self.workers: dict[bytes, Worker] = {}
        self.sessions: dict[Key, BrokerSession] = {}
        self._last_seen: dict[bytes, float] = {}
        self._stop = threading.Event()
        self._log = LogLimiter(log)  # what peers can trigger at will: rate-limited
        self._max_message = int(self.cfg.max_message_mb * 2**20)
        self._limits = quotas.ClientLimits(self.cfg.client_sessions,
                                           int(self.cfg.client_mb * 2**20))
        self._client = b""  # who sent the message being handled

    # ---- lifecycle -----------------------------------------------------------------------

    def bind(self) -> tuple[str, str]:
        auth.require_safe(self.cfg.frontend, self.cfg.keys, "bind")
        auth.require_safe(self.cfg.backend, self.cfg.keys, "bind")
        if self.cfg.keys:
            self._auth = auth.start_authenticator(self.ctx, self.cfg.keys)
        endpoints = []
        for attr, endpoint in (("frontend", self.cfg.frontend), ("backend", self.cfg.backend)):
            sock = self.ctx.socket(zmq.ROUTER)
            sock.linger = 0
            sock.rcvhwm = sock.sndhwm = 1024
            sock.router_handover = True  # a reconnecting peer keeps its identity
            sock.setsockopt(zmq.MAXMSGSIZE, min(wire.MAX_ARRAY_BYTES, self._max_message)
                            + wire.MAX_HEADER_BYTES)
            try:
                if self.cfg.keys:
                    auth.make_server(sock, self.cfg.keys,
                                     domain=auth.WORKERS_DOMAIN if attr == "backend" else None)
                sock.bind(endpoint)
            except BaseException:
                sock.close(linger=0)  # an open socket would block ctx.term() forever
                raise
            setattr(self, attr, sock)
            endpoints.append(sock.getsockopt_string(zmq.LAST_ENDPOINT))
        return endpoints[0], endpoints[1]

    def start(self) -> threading.Thread:
        t = threading.Thread(target=self.run, name="painted-skin-broker", daemon=True)
        t.start()
        return t

    def stop(self) -> None:
        self._stop.set()

    def close(self) -> None:
        for sock in (self.frontend, self.backend):
            if sock is not None:
                sock.close(linger=0)
        if self._auth is not None:
            self._auth.stop()
            self._auth = None
        if self._own_ctx:
            self.ctx.term()

    def run(self) -> None:
        if self.frontend is None:
            self.bind()
        poller = zmq.Poller()
        poller.register(self.frontend, zmq.POLLIN)
        poller.register(self.backend, zmq.POLLIN)
        heartbeat_at = time.monotonic() + HEARTBEAT_INTERVAL
        next_sweep = time.monotonic() + 0.5
        try:
            while not self._stop.is_set():
                ready = dict(poller.poll(100))
                if self.backend in ready:
                    self._batch(self.backend, self._on_worker)
                if self.frontend in ready:
                    self._batch(self.frontend, self._on_client)
                now = time.monotonic()
                if now >= heartbeat_at:  # ppqueue: beat the workers, purge the silent
                    for addr in list(self.workers):
                        self._to_worker(addr, reply(wire.HEARTBEAT))
                    heartbeat_at = now + HEARTBEAT_INTERVAL
                for addr, w in list(self.workers.items()):
                    if now > w.expiry:
                        log.warning("worker %s: no heartbeat, taken for dead", addr.hex())
                        self._lose_worker(addr)
                if now >= next_sweep:
                    self._sweep_idle(now)
                    next_sweep = now + 0.5
        finally:
            self.close()

    def _batch(self, sock: zmq.Socket, handler) -> None:
        for _ in range(64):
            try:
                frames = wire.recv_capped(sock, zmq.NOBLOCK, self._max_message)
            except zmq.Again:
                return
            except wire.TooBig as e:  # drained and freed already
                self._log.warn(e.code, "broker: refused a message: %s", e)
                if sock is self.frontend:
                    self._to_client(e.routing, error(e.code, str(e)))
                continue
            try:
                handler(frames)
            except Exception:  # a bug must not take the broker down
                self._log.exception(wire.E_INTERNAL, "broker: message handling failed")

    def _to_client(self, route: list[bytes], frames: list[Any]) -> None:
        try:
            self.frontend.send_multipart([*route, *frames], flags=zmq.NOBLOCK, copy=False)
        except zmq.Again:
            pass

    def _to_worker(self, addr: bytes, frames: list[Any]) -> None:
        try:
            self.backend.send_multipart([addr, *frames], flags=zmq.NOBLOCK, copy=False)
        except zmq.Again:
            pass

    # ---- clients -------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        ws = list(self.workers.values())
        return {"version": wire.PROTOCOL_VERSION, "server": SERVER_NAME, "role": "broker",
                "devices": sorted({d for w in ws for d in w.devices}),
                "pipelines": sorted({p for w in ws for p in w.pipelines}),
                "loaded_models": sorted({m for w in ws for m in w.loaded_models}),
                "models": {p: sorted({m for w in ws for m in w.models.get(p, [])})
                           for p in sorted({p for w in ws for p in w.models})},
                "queue_depth": sum(len(s.inflight) for s in self.sessions.values()),
                "sessions": len(self.sessions), "workers": len(ws)}

    def _on_client(self, frames: list[Any]) -> None:
        route, body = _split(frames)
        self._last_seen[route[0]] = time.monotonic()
        self._client = quotas.client_id(frames[-1], route[0])
        header: dict[str, Any] = {}
        try:
            msg = wire.decode(body, expect=wire.CLIENT_TYPES)
            header = msg.header
            if msg.type == wire.PING:
                self._to_client(route, reply(wire.PONG, version=wire.PROTOCOL_VERSION,
                                             server=SERVER_NAME, role="broker", boot=self.boot,
                                             ref=_clean(msg.id)))
            elif msg.type == wire.STATUS:
                self._to_client(route, reply(wire.STATUS_REPLY, ref=_clean(msg.id),
                                             **self.status()))
            elif msg.type == wire.OPEN:
                self._open(route, body, header)
            else:
                self._session_message(route, body, msg.type, header)
        except ProtocolError as e:
            self._log.info(e.code, "client %s: %s: %s", route[0].hex()[:16], e.code, e)
            self._to_client(route, error(e.code, str(e), e.ref or header.get("id"),
                                         header.get("session"), header.get("frame")))

    def _open(self, route: list[bytes], body: list[Any], h: dict[str, Any]) -> None:
        name, ref = h.get("session"), h.get("id")
        if not isinstance(name, str) or not 0 < len(name) <= MAX_NAME:
            raise ProtocolError(wire.E_BAD_MESSAGE, f"open: 'session' must be a string of "
                                                        f"1..{MAX_NAME} characters", ref)
        pipeline = h.get("pipeline")
        key = (route[0], name)
        old = self.sessions.get(key)
        count, held = self._held_by(self._client, besides=old)
        quotas.check_open(self._limits, count, held, _nbytes(body), ref)
        if old is not None:  # re-open: the worker replaces it; its frames are cancelled
            self._cancel(old, None, ref)
            old.open_frames, old.pipeline, old.opened = body, pipeline, False
            if old.worker is not None:
                self._to_worker(old.worker, [*route, *body])
            return
        if len(self.sessions) >= self.cfg.max_sessions:
            raise ProtocolError(wire.E_BUSY, "the broker has too many sessions open; "
                                                 "close some or try later", ref)
        if not self.workers:
            raise ProtocolError(wire.E_BUSY, "no backend worker is connected to the broker "
                                                 "(start `painted-skin serve --connect ...`)",
                                ref)
        s = BrokerSession(key, route, body, pipeline if isinstance(pipeline, str) else None,
                          client=self._client)
        worker = self._pick(s)
        if worker is None:
            known = sorted({p for w in self.workers.values() for p in w.pipelines})
            raise ProtocolError(wire.E_BAD_MESSAGE, f"open: unknown pipeline {pipeline!r}; "
                                                        f"the workers have: {', '.join(known)}",
                                ref)
        self.sessions[key] = s
        self._assign(s, worker)

    def _session_message(self, route: list[bytes], body: list[Any], mtype: str,
                         h: dict[str, Any]) -> None:
        name, ref, frame = h.get("session"), h.get("id"), h.get("frame")
        s = self.sessions.get((route[0], name)) if isinstance(name, str) else None
        if s is None:
            raise ProtocolError(wire.E_NO_SESSION, f"no open session {_clean(name)!r} for "
                                                       f"this client (send open first)", ref)
        if mtype == wire.FRAME:
            if not is_int(frame) or frame < 0:
                raise ProtocolError(wire.E_BAD_MESSAGE, "frame: 'frame' must be an integer "
                                                            ">= 0", ref)
            if frame in s.inflight:
                return  # already on its way: its one result will come
            if s.moving is not None and len(s.moving) < s.credits:
                if frame not in s.moving:  # mid-move: handed back with the others
                    s.moving = sorted([*s.moving, frame])
                return
            if len(s.inflight) + len(s.moving or ()) >= s.credits:
                raise ProtocolError(wire.E_BUSY, f"frame {frame}: {len(s.inflight)} frames "
                                                     f"outstanding, credits are {s.credits}; "
                                                     f"wait for a result", ref)
            quotas.check_frame(self._limits, self._held_by(s.client)[1], _nbytes(body), frame,
                               ref)
            s.inflight[frame] = body
        elif mtype == wire.CANCEL:
            if frame is not None and not is_int(frame):
                raise ProtocolError(wire.E_BAD_MESSAGE, "cancel: 'frame' must be an "
                                                            "integer or absent", ref)
            self._cancel(s, frame, ref)
        elif mtype == wire.CLOSE:
            self._drop(s)
            self._to_client(route, reply(wire.CLOSED, session=name, ref=_clean(ref)))
        if s.worker is not None:
            self._to_worker(s.worker, [*route, *body])

    def _held_by(self, client: bytes, besides: BrokerSession | None = None) -> tuple[int, int]:
        """(sessions, bytes) the client holds here, leaving ``besides`` out (a re-open)."""
        mine = [s for s in self.sessions.values() if s.client == client and s is not besides]
        return len(mine), sum(_nbytes(s.open_frames) + sum(map(_nbytes, s.inflight.values()))
                              for s in mine)

    def _cancel(self, s: BrokerSession, frame: int | None, ref: Any) -> None:
        """Answer the cancel here: the worker's late replies for these frames are dropped."""
        frames = sorted(s.inflight) if frame is None else [frame] if frame in s.inflight else []
        for f in frames:
            del s.inflight[f]
            self._to_client(s.route, error(E_CANCELLED, f"frame {f} cancelled", ref, s.key[1], f))

    def _drop(self, s: BrokerSession) -> None:
        self.sessions.pop(s.key, None)
        w = self.workers.get(s.worker) if s.worker is not None else None
        if w is not None:
            w.sessions.discard(s.key)

    def _sweep_idle(self, now: float) -> None:
        timeout = self.cfg.session_timeout
        for key, s in list(self.sessions.items()):
            if now - self._last_seen.get(key[0], 0.0) > timeout:
                log.info("session %r: client silent for %.0f s, freed", key[1], timeout)
                self._drop(s)
                if s.worker is not None:
                    self._to_worker(s.worker, [*s.route, *reply(wire.CLOSE, session=key[1])])
        for ident, seen in list(self._last_seen.items()):
            if now - seen > timeout:
                del self._last_seen[ident]

    # ---- workers -------------------------------------------------------------------------

    def _pick(self, s: BrokerSession) -> Worker | None:
        """The live worker with the fewest sessions that has the session's pipeline."""
        fit = [w for w in self.workers.values() if s.pipeline is None or s.pipeline in w.pipelines]
        return min(fit, key=lambda w: (len(w.sessions), w.queue_depth), default=None)

    def _assign(self, s: BrokerSession, w: Worker) -> None:
        """Send the session (its OPEN, then its frames in flight) to worker ``w``.

        A session that moves (its client had its OPENED) starts there with empty
        state, which a temporal chain cannot continue from: its frames in flight go
        back to the client (``opened {moved: true}``, then ``cancelled`` for each),
        which sends them again, the first with the previous frame carried."""
        s.worker = w.address
        w.sessions.add(s.key)
        self._to_worker(w.address, [*s.route, *s.open_frames])
        if s.opened:  # handed back when the new worker has opened (see _moved)
            s.moving = sorted({*(s.moving or ()), *s.inflight})
            s.inflight = {}
            return
        for f in sorted(s.inflight):
            self._to_worker(w.address, [*s.route, *s.inflight[f]])

    def _moved(self, s: BrokerSession, opened: dict[str, Any]) -> None:
        """The new worker opened a moved session: tell the client (with that worker's
        credits and shared-memory grant) and hand its frames back to be sent again."""
        frames, s.moving = s.moving or [], None
        mid = opened.get("model_id")  # the client refuses a move to another model version
        self._to_client(s.route, reply(wire.OPENED, session=s.key[1], moved=True,
                                       credits=s.credits, shm=opened.get("shm") is True,
                                       **({"model_id": mid} if isinstance(mid, str) else {})))
        for f in frames:
            self._to_client(s.route, error(E_CANCELLED, f"frame {f}: the session moved to "
                                           "another worker; send it again", None, s.key[1], f))

    def _lose_worker(self, addr: bytes) -> None:
        w = self.workers.pop(addr, None)
        if w is None:
            return
        for key in sorted(w.sessions):
            s = self.sessions.get(key)
            if s is None:
                continue
            s.worker = None
            other = self._pick(s)
            if other is not None:
                log.info("session %r: moved to worker %s with %d frames in flight", key[1],
                         other.address.hex(), len(s.inflight))
                self._assign(s, other)
        # sessions without a worker wait for the next READY (their frames stay bounded)

    def _adopt_orphans(self) -> None:
        for s in self.sessions.values():
            if s.worker is None:
                w = self._pick(s)
                if w is not None:
                    self._assign(s, w)

    def _on_worker(self, frames: list[Any]) -> None:
        addr, body = frames[0].bytes, frames[1:]
        now = time.monotonic()
        w = self.workers.get(addr)
        if len(body) == 1:  # control: READY / HEARTBEAT / DISCONNECT
            try:
                msg = wire.decode(body, expect=wire.WORKER_TYPES)
            except ProtocolError as e:
                log.warning("worker %s: bad control message: %s", addr.hex(), e)
                return
            h = msg.header
            if msg.type == wire.READY:
                if w is not None:
                    self._lose_worker(addr)  # it restarted: its sessions are gone
                self.workers[addr] = Worker(addr, now + HEARTBEAT_INTERVAL * HEARTBEAT_LIVENESS,
                                            list(h.get("pipelines") or []),
                                            list(h.get("devices") or []),
                                            int(h.get("credits") or 4),
                                            models=worker_models(h.get("models")))
                log.info("worker %s ready (%d workers)", addr.hex(), len(self.workers))
                self._adopt_orphans()
            elif msg.type == wire.DISCONNECT:
                log.info("worker %s disconnected", addr.hex())
                self._lose_worker(addr)
            elif w is None:
                self._to_worker(addr, reply(wire.DISCONNECT))
            else:
                w.expiry = now + HEARTBEAT_INTERVAL * HEARTBEAT_LIVENESS
                w.queue_depth = int(h.get("queue_depth") or 0)
                w.loaded_models = list(h.get("loaded_models") or [])
                w.devices = list(h.get("devices") or w.devices)
            return
        if w is None:  # expired, then came back: make it start over
            self._to_worker(addr, reply(wire.DISCONNECT))
            return
        w.expiry = now + HEARTBEAT_INTERVAL * HEARTBEAT_LIVENESS
        if len(body) < 2:
            return
        route, msg = _split(body)
        try:
            h = json.loads(msg[0].bytes)
            mtype, name, frame = h["type"], h.get("session"), h.get("frame")
        except (ValueError, KeyError, TypeError):
            log.warning("worker %s: unreadable reply", addr.hex())
            return
        s = self.sessions.get((route[0], name)) if isinstance(name, str) else None
        if s is None or s.worker != addr:
            return  # closed, timed out, or moved to another worker: a late duplicate
        if mtype == wire.ERROR and h.get("code") == E_CANCELLED:
            return  # the broker answers cancels itself
        if mtype == wire.OPENED:
            s.credits = int(h.get("credits") or s.credits)
            if not s.opened:
                s.opened = True
                self._to_client(route, msg)
            elif s.moving is not None:
                self._moved(s, h)
        elif mtype in (wire.PROGRESS, wire.RESULT) or (
                mtype == wire.ERROR and is_int(frame)):
            if frame not in s.inflight:
                return  # answered already, or cancelled
            if mtype != wire.PROGRESS:
                del s.inflight[frame]
            self._to_client(route, msg)
        elif mtype == wire.ERROR and (not s.opened or s.moving is not None):
            self._drop(s)  # the worker refused the open (a first one, or a move's)
            self._to_client(route, msg)
        # CLOSED and session errors after the open: the broker answered already

