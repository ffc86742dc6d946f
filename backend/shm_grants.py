"""Shared memory between a bound backend and a client on the same machine (Linux).

A grant goes in OPENED to a local client that asked and proved its segment readable
here with its token (same machine and user; an ssh tunnel or a container fails the
proof). A granted session's FRAME arrays are then read-only views of the client's
sealed memfd segment (it cannot shrink under the mapping), valid only until the frame's
reply, or copies with ``pread`` out of a /dev/shm segment (never mapped: a client
shrinking it would kill the server with SIGBUS). A broker's worker never grants: the
broker may hand the session to a worker on another machine.
"""

from __future__ import annotations

import logging
import re
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np
import zmq

from .. import wire
from ..wire import E_CANCELLED, Message, ProtocolError, is_int
from .jobs import Session
from .serve_config import ServeConfig

log = logging.getLogger("painted_skin.backend")

Slot = tuple[wire.ShmSegment, int, int]  # (segment, offset, generation)


class ShmGrants:
    """Grants, the segments each session mapped (least recently used closed beyond
    ``max_shm_segments``), and a FRAME's arrays read out of them."""

    def __init__(self, cfg: ServeConfig) -> None:
        self.cfg = cfg

    def possible(self) -> bool:
        """Shared memory at all: enabled, Linux, and not a broker's worker (the broker
        may hand the session to a worker on another machine)."""
        return self.cfg.shm and not self.cfg.connect and wire.shm_supported()

    @staticmethod
    def peer_is_local(endpoint: str | None, peer: Any) -> bool:
        """The sender of the message whose last frame is ``peer`` is on this machine
        (the server's endpoint is loopback or ipc, or the peer's address is)."""
        if endpoint and wire.is_local_endpoint(endpoint):
            return True
        try:
            addr = peer.get("Peer-Address")
        except (AttributeError, zmq.ZMQError):
            return False
        return isinstance(addr, str) and wire.is_loopback_host(addr)

    def grant(self, s: Session, probe: Any, local: Callable[[], bool]) -> None:
        """Grant when ``local()`` and the probe segment is readable here with the
        client's token (proves the same machine and user)."""
        if not (self.possible() and local() and isinstance(probe, dict)):
            return
        name, token = probe.get("segment"), probe.get("token")
        if not (isinstance(token, str) and re.fullmatch(r"[0-9a-f]{32}", token)
                and isinstance(name, str)):
            return
        try:
            seg = self.map(s, name)
        except ProtocolError as e:
            log.info("session %r: no shared memory (%s)", s.request.name, e)
            return
        if seg.read_bytes(0, 24) == wire.SHM_MAGIC + bytes.fromhex(token):
            s.shm = True

    def map(self, s: Session, name: str) -> wire.ShmSegment:
        seg = s.shm_maps.get(name)
        if seg is None or seg.closed:
            seg = wire.ShmSegment.attach(name)
            s.shm_maps[name] = seg
            while len(s.shm_maps) > self.cfg.max_shm_segments:
                s.shm_maps.popitem(last=False)[1].close()  # its queued frames: cancelled
        s.shm_maps.move_to_end(name)
        return seg

    def arrays(self, s: Session, msg: Message) -> tuple[dict[str, np.ndarray], Slot | None]:
        """The FRAME's arrays with its shared-memory ones mapped (bounds checked first),
        and its slot ``(segment, offset, generation)`` when it names one."""
        if not s.shm:
            raise ProtocolError(wire.E_BAD_ARRAY, "frame: shared memory was not granted "
                                                  "for this session; send arrays inline",
                                msg.id)
        arrays = dict(msg.arrays)
        for r in msg.shm:
            arrays[r.name] = self.map(s, r.segment).read(r.dtype, r.shape, r.offset)
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
        seg = self.map(s, name)
        now = seg.read_u64(offset)
        if now is None:
            raise ProtocolError(wire.E_BAD_ARRAY, f"frame: slot offset {offset} outside "
                                                  f"segment {name!r}", msg.id)
        if now != gen:
            raise ProtocolError(E_CANCELLED, f"frame {msg.frame}: its shared-memory slot holds "
                                             "newer data (a stale message)", msg.id)
        return arrays, (seg, offset, gen)

    @staticmethod
    def release(s: Session) -> None:
        """Unmap a freed session's segments; unlink those whose creator is dead."""
        maps, s.shm_maps = s.shm_maps, OrderedDict()
        for name, seg in maps.items():
            seg.close()
            if wire.reap_shm(name):
                log.info("session %r: removed shared memory %s of a dead client",
                         s.request.name, name)
