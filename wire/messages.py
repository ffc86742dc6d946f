"""Message types, error codes and the decoded message: the protocol's vocabulary."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .limits import DTYPES, MAX_ARRAY_BYTES, MAX_NDIM, MAX_SIDE

# Client -> server
PING, STATUS, OPEN, FRAME, CANCEL, CLOSE = "ping", "status", "open", "frame", "cancel", "close"
# Server -> client
PONG, STATUS_REPLY, OPENED, PROGRESS, RESULT, ERROR, CLOSED = (
    "pong", "status_reply", "opened", "progress", "result", "error", "closed")
# Worker <-> broker (Paranoid Pirate); client envelopes travel inside.
READY, HEARTBEAT, DISCONNECT = "ready", "heartbeat", "disconnect"

CLIENT_TYPES = {PING, STATUS, OPEN, FRAME, CANCEL, CLOSE}
SERVER_TYPES = {PONG, STATUS_REPLY, OPENED, PROGRESS, RESULT, ERROR, CLOSED}
WORKER_TYPES = {READY, HEARTBEAT, DISCONNECT}
ALL_TYPES = CLIENT_TYPES | SERVER_TYPES | WORKER_TYPES

# Error codes carried by ``error`` replies.
E_BAD_MESSAGE = "bad_message"
E_VERSION = "version"
E_TOO_BIG = "too_big"
E_UNKNOWN_TYPE = "unknown_type"
E_NO_SESSION = "no_session"
E_BAD_ARRAY = "bad_array"
E_BUSY = "busy"
E_INTERNAL = "internal"
E_CANCELLED = "cancelled"


class ProtocolError(ValueError):
    """A message that breaks the protocol; ``code`` is one of the E_* constants."""

    def __init__(self, code: str, message: str, ref: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.ref = ref


@dataclass
class ShmRef:
    """An array descriptor pointing into a shared-memory segment (not yet read)."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    segment: str
    offset: int
    nbytes: int


@dataclass
class Message:
    """A decoded message: its type, the whole header and its arrays (read-only views)."""

    type: str
    header: dict[str, Any]
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    shm: list[ShmRef] = field(default_factory=list)  # arrays in shared memory, unresolved

    @property
    def session(self) -> str | None:
        return self.header.get("session")

    @property
    def frame(self) -> int | None:
        return self.header.get("frame")

    @property
    def id(self) -> str | None:
        return self.header.get("id")


def new_id() -> str:
    return uuid.uuid4().hex


def check_array(name: str, a: np.ndarray) -> None:
    """Refuse an array no peer may send (dtype, dimensions, bytes): :class:`ProtocolError`."""
    if a.dtype.name not in DTYPES:
        raise ProtocolError(E_BAD_ARRAY, f"array {name!r}: dtype {a.dtype} is not one of "
                                         f"{sorted(DTYPES)}")
    if a.ndim > MAX_NDIM or any(d > MAX_SIDE * MAX_SIDE for d in a.shape):
        raise ProtocolError(E_BAD_ARRAY, f"array {name!r}: shape {a.shape} is too large")
    if a.nbytes > MAX_ARRAY_BYTES:
        raise ProtocolError(E_TOO_BIG, f"array {name!r}: {a.nbytes} bytes > {MAX_ARRAY_BYTES}")
