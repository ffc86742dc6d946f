"""What a backend is told at start (``painted-skin serve`` flags): one record that the
socket loop, the sessions, the worker link and the shared-memory grants all read.

Read live, not copied: ``Server.connect`` turns a config into a worker's (no session
timeout, the broker watches the clients) and every part sees it at once.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import wire
from . import quotas


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
