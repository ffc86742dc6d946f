"""A backend as a broker's worker: the worker side of the ZeroMQ guide's Paranoid
Pirate pattern.

A DEALER connected to the broker's backend socket says READY (pipelines, devices,
credits), beats every ``HEARTBEAT_INTERVAL`` with its load, and reconnects with
exponential back-off (``RECONNECT_INIT`` to ``RECONNECT_MAX``) after
``HEARTBEAT_LIVENESS`` silent intervals or when the broker says DISCONNECT. Every
reconnect forgets the sessions: the broker replays or fails them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import zmq

from ... import wire
from ...wire import (
    HEARTBEAT_INTERVAL,
    HEARTBEAT_LIVENESS,
    RECONNECT_INIT,
    RECONNECT_MAX,
    SERVER_NAME,
    ProtocolError,
    reply,
)
from .. import auth, pipelines
from ..serve_config import ServeConfig
from ..sockets import send_nowait, tune_socket

log = logging.getLogger("painted_skin.backend")


class WorkerLink:
    """The connection to the broker: ``connect()``, then :meth:`heard` on every
    message, :meth:`on_control` for the broker's own, :meth:`beat` on every loop turn."""

    def __init__(self, ctx: zmq.Context, cfg: ServeConfig, max_message: int,
                 stop: threading.Event, devices: Callable[[], list[str]],
                 status: Callable[[], dict[str, Any]], forget: Callable[[], None]) -> None:
        self.ctx, self.cfg = ctx, cfg
        self._max_message = max_message
        self._stop = stop
        self._devices = devices  # probed in the background: read at each READY
        self._status = status
        self._forget = forget  # drop every session (the broker lost them with us)
        self.sock: zmq.Socket | None = None
        self._broker_seen = 0.0
        self._heartbeat_at = 0.0
        self._backoff = RECONNECT_INIT

    def connect(self, first: bool = False) -> None:
        """A fresh DEALER to ``cfg.connect`` (the old one closed), then READY."""
        if self.sock is not None:
            self.sock.close(linger=0)
        sock = self.ctx.socket(zmq.DEALER)
        tune_socket(sock, self._max_message)
        try:
            if self.cfg.keys:
                auth.make_client(sock, self.cfg.keys, name="worker")
            sock.connect(self.cfg.connect)
        except BaseException:
            sock.close(linger=0)
            raise
        self.sock = sock
        now = time.monotonic()
        self._broker_seen = now
        self._heartbeat_at = now + HEARTBEAT_INTERVAL
        send_nowait(sock, reply(wire.READY, pipelines=pipelines.names(),
                                models=pipelines.model_names(),
                                devices=self._devices(), credits=self.cfg.credits,
                                server=SERVER_NAME))
        if not first:
            log.info("worker: reconnected to %s", self.cfg.connect)

    def heard(self) -> None:
        """Any message from the broker: it is alive, the back-off starts over."""
        self._broker_seen = time.monotonic()
        self._backoff = RECONNECT_INIT

    def on_control(self, frame: zmq.Frame) -> None:
        """A one-frame message: the broker's own (DISCONNECT: reconnect)."""
        try:
            msg = wire.decode([frame], expect=wire.WORKER_TYPES)
        except ProtocolError as e:
            log.warning("worker: bad control message from broker: %s", e)
            return
        if msg.type == wire.DISCONNECT:
            log.info("worker: broker asked to reconnect")
            self._forget()
            self.connect()

    def beat(self, now: float) -> None:
        """Beat every interval; reconnect when the broker is silent."""
        if now - self._broker_seen > HEARTBEAT_INTERVAL * HEARTBEAT_LIVENESS:
            log.warning("worker: broker silent, reconnecting in %.0f s", self._backoff)
            self._forget()
            if self._stop.wait(self._backoff):
                return
            self._backoff = min(self._backoff * 2, RECONNECT_MAX)
            self.connect()
            return
        if now >= self._heartbeat_at:
            st = self._status()
            send_nowait(self.sock, reply(wire.HEARTBEAT, queue_depth=st["queue_depth"],
                                         sessions=st["sessions"],
                                         loaded_models=st["loaded_models"],
                                         devices=st["devices"]))
            self._heartbeat_at = now + HEARTBEAT_INTERVAL

    def disconnect(self) -> None:
        """Tell the broker we go (it fails our sessions over at once), then close."""
        if self.sock is None:
            return
        try:
            self.sock.send_multipart(reply(wire.DISCONNECT), flags=zmq.NOBLOCK)
            self.sock.close(linger=200)
        except zmq.ZMQError:
            pass
