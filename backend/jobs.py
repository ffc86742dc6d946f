"""The records the socket loop and the compute thread share: a session (with the OPEN
request it holds), a job (one frame, or the load that answers an OPEN), and the queue
that hands jobs over.

The loop creates and forgets sessions and jobs; the compute thread only takes jobs
from :class:`JobQueue` and reads them. Everything both threads touch goes through the
queue's condition (a session's ``queue``, the fair order between clients), so the
loop never blocks on a frame being computed.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import wire
from . import quotas


@dataclass(frozen=True)
class OpenRequest:
    """An OPEN's header and reference images, checked (by :func:`.sessions.parse_open`)."""

    name: str
    pipeline: str
    prompt: str
    negative: str
    seed: int
    width: int
    height: int
    options: dict[str, Any]
    refs: list[np.ndarray]


@dataclass(eq=False)
class Session:
    """An open session: the OPEN it was opened with (``request``, never changed: a
    re-OPEN makes a new session) and what the loop and the compute thread keep of it."""

    key: tuple[bytes, str]  # (client identity, client-chosen name)
    route: list[bytes]
    request: OpenRequest
    settings: bytes  # the hash of the request's picture-making settings (result cache)
    outstanding: dict[int, Job] = field(default_factory=dict)
    queue: deque[Job] = field(default_factory=deque)  # guarded by JobQueue.cond
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


class JobQueue:
    """Jobs handed from the loop to the compute thread, round-robin between clients
    and then their sessions (a client with ten sessions gets no more than one with one).

    ``cond`` also guards what the loop reads of the compute side (the queue depth)."""

    def __init__(self, stop: threading.Event) -> None:
        self.cond = threading.Condition()
        self._stop = stop
        self._ready: quotas.FairQueue[Session] = quotas.FairQueue()
        self.running: Job | None = None

    def put(self, job: Job, first: bool = False) -> None:
        """Queue ``job`` on its session (``first``: ahead of its frames, for a load)."""
        s = job.session
        with self.cond:
            if first:
                s.queue.appendleft(job)
            else:
                s.queue.append(job)
            self._ready.add(s.client, s.key, s)
            self.cond.notify()

    def remove(self, job: Job) -> None:
        """Unqueue ``job`` if it is still queued (a computing one is left to its flag)."""
        s = job.session
        with self.cond:
            try:
                s.queue.remove(job)
            except ValueError:
                pass  # computing now
            if not s.queue:
                self._ready.discard(s.client, s.key)

    def take(self) -> Job | None:
        """The next job (blocks); None once the server stops."""
        with self.cond:
            while not self._ready:
                if self._stop.is_set():
                    return None
                self.cond.wait(0.5)
            s = self._ready.pop()
            job = s.queue.popleft()
            if s.queue:
                self._ready.add(s.client, s.key, s)  # back of its client's line
            self.running = job
            return job

    def done(self) -> None:
        """The job :meth:`take` gave is finished (answered, failed or cancelled)."""
        with self.cond:
            self.running = None

    def wake_all(self) -> None:
        """Wake a compute thread waiting in :meth:`take` (to see the stop)."""
        with self.cond:
            self.cond.notify_all()
