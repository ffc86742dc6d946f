"""The socket side of the backend client: one DEALER connection kept alive the Lazy
Pirate way (the ZeroMQ guide).

Every wait is a poll with a timeout; after ``heartbeat_timeout`` seconds of silence
while something is expected, the socket is closed with LINGER 0, a new one connects
under the same identity and every unanswered request is sent again (the subclass
re-opens its session then). While busy a PING goes out about every ``heartbeat_s``;
after ``timeout_s`` of silence :class:`BackendUnavailable` is raised. Sends never
block. No bpy import.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import zmq

from .... import wire as P
from .errors import (
    BackendError,
    BackendUnavailable,
    BadBackendURL,
    check_url,
    error_from_reply,
)
from .keys import CurveKeys, load_keys


@dataclass
class _Request:
    frames: list
    want: set[str]
    id: str
    reply: P.Message | None = None


class Connection:
    """A DEALER socket to a backend's ROUTER, reconnected when the backend goes silent.

    A subclass handles the messages (:meth:`_dispatch`), says when it expects an
    answer (:meth:`_busy`), drives the turns (:meth:`poll_once`) and restores its
    state on a new socket (:meth:`_reconnected`).
    """

    def __init__(self, url: str, keys: CurveKeys | str | Path | None, timeout_s: float,
                 heartbeat_s: float, heartbeat_timeout: float,
                 on_dead: Callable[[], None] | None, context: zmq.Context | None) -> None:
        check_url(url, keys)
        self.url = url
        self.keys = load_keys(keys)
        self.timeout_s, self.heartbeat_s, self.heartbeat_timeout = (
            timeout_s, heartbeat_s, heartbeat_timeout)
        self.on_dead = on_dead
        self._ctx = context or zmq.Context.instance()
        self._sock: zmq.Socket | None = None
        self._identity = b"ps-" + uuid.uuid4().bytes
        self._requests: dict[str, _Request] = {}
        now = time.monotonic()
        self._silent_since = self._last_reconnect = self._last_ping = now
        self.reconnects = 0
        self.dead_at: list[float] = []  # monotonic times the backend was found silent
        self.last_error: BackendError | None = None
        self.bytes_sent = self.bytes_received = 0

    # -- what the subclass provides ---------------------------------------------------

    def _dispatch(self, msg: P.Message) -> None:
        raise NotImplementedError

    def _busy(self) -> bool:
        """Something is expected from the backend (silence then means trouble)."""
        return bool(self._requests)

    def _session_id(self) -> str | None:
        return None

    def _reconnected(self) -> None:
        """Called on each new socket after a reconnect, requests already re-sent."""

    def _unavailable(self, err: BackendUnavailable) -> None:
        """Called before ``err`` is raised after ``timeout_s`` of silence."""

    def poll_once(self, timeout_ms: int = 0, max_send: int | None = None) -> int:
        raise NotImplementedError

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
        self.reconnects += 1
        self._last_reconnect = now
        for req in self._requests.values():
            self._send(req.frames)
        self._reconnected()

    def _close_socket(self) -> None:
        if self._sock is not None:
            self._sock.close(linger=0)
        self._sock = None

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

    def _mark_busy(self) -> None:
        if not self._busy():
            self._silent_since = self._last_ping = time.monotonic()

    # -- receiving --------------------------------------------------------------------

    def _poll_timeout(self, timeout_ms: int) -> int:
        if not self._busy():
            return timeout_ms
        to_ping = self._last_ping + self.heartbeat_s - time.monotonic()
        return max(0, min(timeout_ms, int(to_ping * 1000) + 1))

    def _drain(self, timeout_ms: int) -> int:
        """Wait up to ``timeout_ms`` for a message, then handle all that are there."""
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

    def _heartbeat(self, now: float) -> None:
        """While busy: raise after ``timeout_s`` of silence, reconnect after
        ``heartbeat_timeout``, PING every ``heartbeat_s``."""
        if not self._busy():
            self._silent_since = now
            return
        if now - self._silent_since > self.timeout_s:
            err = BackendUnavailable(self.url, now - self._silent_since)
            self._unavailable(err)
            self._requests.clear()
            raise err
        if now - max(self._silent_since, self._last_reconnect) > self.heartbeat_timeout:
            self._reconnect()
            now = time.monotonic()
        if now - self._last_ping >= self.heartbeat_s:
            self._last_ping = now
            self._send(P.encode(P.PING, id=P.new_id(), session=self._session_id()))

    # -- blocking calls ---------------------------------------------------------------

    def _answer_request(self, msg: P.Message) -> None:
        """Hand a reply to the blocking call waiting for it (by ``ref``/``id``, else
        the oldest call waiting for that type)."""
        h = msg.header
        req = self._requests.get(h.get("ref") or h.get("id") or "")
        if req is None:
            req = next((r for r in self._requests.values()
                        if msg.type in r.want and r.reply is None), None)
        if req is not None:
            req.reply = msg

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
            raise error_from_reply(req.reply)
        return req.reply

    def _wait(self, ready: Callable[[], bool], timeout_s: float | None) -> None:
        deadline = time.monotonic() + (self.timeout_s if timeout_s is None else timeout_s)
        while not ready():
            if time.monotonic() > deadline:
                raise BackendUnavailable(self.url, time.monotonic() - self._silent_since)
            self.poll_once(50)
