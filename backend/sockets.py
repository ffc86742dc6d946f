"""What every backend socket shares: its limits and a send that never blocks the loop."""

from __future__ import annotations

import logging
from typing import Any

import zmq

from .. import wire

log = logging.getLogger("painted_skin.backend")


def tune_socket(sock: zmq.Socket, max_message: int) -> None:
    """No linger, bounded queues, and ZeroMQ itself refusing a frame over the caps
    (before any of it is allocated here)."""
    sock.linger = 0
    sock.rcvhwm = sock.sndhwm = 256
    sock.setsockopt(zmq.MAXMSGSIZE, min(wire.MAX_ARRAY_BYTES, max_message)
                    + wire.MAX_HEADER_BYTES)


def send_nowait(sock: zmq.Socket, frames: list[Any]) -> None:
    """Send or drop: a peer gone or full must not stall the loop (clients resend or
    time out)."""
    try:
        sock.send_multipart(frames, flags=zmq.NOBLOCK, copy=False)
    except zmq.Again:  # peer gone or full: drop (clients resend or time out)
        log.debug("send dropped (peer not reachable)")
