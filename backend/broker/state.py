"""The broker's records: its settings, each worker it knows, each session it routes.

Kept apart from the routing loop (:mod:`.service`) as :mod:`..jobs` is from the server's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ... import wire
from .. import quotas

Key = tuple[bytes, str]  # (client identity, session name)


@dataclass
class BrokerConfig:
    frontend: str = "tcp://127.0.0.1:5555"
    backend: str = "tcp://127.0.0.1:5556"
    keys: str | None = None
    session_timeout: float = 10.0
    max_sessions: int = 1024
    max_message_mb: float = wire.MAX_MESSAGE_BYTES / 2**20  # arrays in one message
    client_sessions: int = quotas.DEFAULT_CLIENT_SESSIONS  # sessions one client may hold
    client_mb: float = quotas.DEFAULT_CLIENT_MB  # its frames in flight + OPENs (images)


MAX_MODEL_NAMES = 256  # per pipeline, in a worker's READY: a status reply stays small


def worker_models(value: object) -> dict[str, list[str]]:
    """A worker's ``{pipeline: [model names]}``, only strings kept, sizes capped."""
    if not isinstance(value, dict):
        return {}
    return {str(p)[:128]: [str(m)[:128] for m in names[:MAX_MODEL_NAMES] if isinstance(m, str)]
            for p, names in list(value.items())[:64]
            if isinstance(p, str) and isinstance(names, list)}


@dataclass(eq=False)
class Worker:
    address: bytes
    expiry: float
    pipelines: list[str]
    devices: list[str]
    credits: int
    queue_depth: int = 0
    loaded_models: list[str] = field(default_factory=list)
    sessions: set[Key] = field(default_factory=set)
    models: dict[str, list[str]] = field(default_factory=dict)


@dataclass(eq=False)
class BrokerSession:
    key: Key
    route: list[bytes]  # client identity (+ empty delimiter for REQ clients)
    open_frames: list[Any]  # the client's OPEN, replayed on a new worker
    pipeline: str | None
    worker: bytes | None = None
    opened: bool = False  # the client has had its OPENED
    credits: int = 4
    inflight: dict[int, list[Any]] = field(default_factory=dict)  # frame -> FRAME message
    moving: list[int] | None = None  # moved: frames to hand back once the new worker opens
    client: bytes = b""  # who holds it, for the per-client limits (quotas.client_id)
