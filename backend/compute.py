"""The compute side of a backend: the pipelines kept loaded, the result cache, and
the thread that runs one job at a time.

The thread takes jobs from :class:`~.jobs.JobQueue` and tells the socket loop what
happened through :class:`Events` (a deque plus an ``inproc`` PAIR wake-up), so PING,
STATUS and CANCEL stay answered while a frame computes. It never touches the socket.
"""

from __future__ import annotations

import collections
import hashlib
import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import zmq

from .. import wire
from ..wire import E_CANCELLED
from . import pipelines
from .jobs import Job, JobQueue, Session
from .pipelines.base import model_id as pipeline_model_id
from .pipelines.base import opened_fields

log = logging.getLogger("painted_skin.backend")
# What a pipeline's exception may answer instead of ``internal`` (its ``reply_code``): a
# frame the client sent that cannot be painted as it is, the client's to fix.
CLIENT_CODES = (wire.E_BAD_ARRAY, wire.E_BAD_MESSAGE)

MAX_PIPELINES = 4  # pipeline instances kept loaded (one per distinct load options)


def settings_hash(pipeline: str, prompt: str, negative: str, seed: int, width: int,
                  height: int, options: dict[str, Any], refs: list[np.ndarray]) -> bytes:
    """What, besides the passes, decides a session's pictures (the cache key)."""
    h = hashlib.sha256(json.dumps([pipeline, prompt, negative, seed, width, height, options],
                                  sort_keys=True, separators=(",", ":")).encode())
    for r in refs:
        h.update(f"|{r.dtype.name}{list(r.shape)}|".encode())
        h.update(np.ascontiguousarray(r))
    return h.digest()


def passes_hash(passes: dict[str, np.ndarray]) -> bytes:
    h = hashlib.sha256()  # hashlib drops the GIL on large buffers
    for name in sorted(passes):
        a = passes[name]
        h.update(f"|{name}:{a.dtype.name}{list(a.shape)}|".encode())
        h.update(np.ascontiguousarray(a))
    return h.digest()


class ResultCache:
    """Least-recently-used results bounded by bytes (compute thread only)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self._items: OrderedDict[tuple, np.ndarray] = OrderedDict()

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: tuple) -> np.ndarray | None:
        a = self._items.get(key)
        if a is not None:
            self._items.move_to_end(key)
        return a

    def put(self, key: tuple, a: np.ndarray) -> None:
        if a.nbytes > self.max_bytes or key in self._items:
            return
        self._items[key] = a
        self.bytes += a.nbytes
        while self.bytes > self.max_bytes:
            _, old = self._items.popitem(last=False)
            self.bytes -= old.nbytes


class PipelinePool:
    """Pipeline instances by (pipeline, device, load options), at most ``MAX_PIPELINES``,
    those of no open session evicted first. Loaded on the compute thread; the loop only
    looks one up (:meth:`ready_for`), a single dict read."""

    def __init__(self, device: str, sessions: Callable[[], Iterable[Session]]) -> None:
        self.device = device
        self._sessions = sessions  # the open sessions (the loop thread's: snapshot them)
        self._pipes: OrderedDict[tuple, Any] = OrderedDict()
        self.loads = 0  # pipelines created (factory calls)
        self.loaded_models: list[str] = []

    def key(self, name: str, options: dict[str, Any]) -> tuple[str, str, str]:
        """(pipeline, device, its load options): one instance per distinct key."""
        entry = pipelines.get(name)
        missing = object()
        # An option given as the factory's default loads what leaving it out loads.
        load = " ".join(f"{k}={json.dumps(options[k], sort_keys=True)}"
                        for k in entry.load_keys
                        if k in options and options[k] != entry.load_defaults.get(k, missing))
        return name, self.device, load

    def get(self, name: str, options: dict[str, Any]) -> Any:
        """The instance for ``options`` (compute thread), loaded when missing."""
        key = self.key(name, options)
        pipe = self._pipes.get(key)
        if pipe is None:
            log.info("loading pipeline %s on %s %s", *key)
            pipe = pipelines.get(name).factory(dict(options), self.device)
            self.loads += 1
            self._pipes[key] = pipe
            self._evict(keep=key)
            self.loaded_models = [f"{n}@{d}" + (f" {lo}" if lo else "")
                                  for n, d, lo in self._pipes]
        self._pipes.move_to_end(key)
        return pipe

    def ready_for(self, s: Session) -> bool:
        """The session's pipeline is loaded and prepared for its frame size (OPENED
        may go out at once). Reads the compute thread's dict: single lookups only."""
        pipe = self._pipes.get(self.key(s.request.pipeline, s.request.options))
        if pipe is None:
            return False
        prepared = getattr(pipe, "prepared", None)
        return prepared is None or bool(prepared(width=s.request.width, height=s.request.height,
                                                 options=s.request.options, refs=s.request.refs))

    def opened_for(self, s: Session) -> dict[str, str]:
        """What the session's OPENED tells of its loaded pipeline (``model_id``,
        ``notice``: :func:`.pipelines.base.opened_fields`). A single lookup, like
        :meth:`ready_for`."""
        key = self.key(s.request.pipeline, s.request.options)
        return opened_fields(self._pipes.get(key))

    def _evict(self, keep: tuple[str, str, str]) -> None:
        if len(self._pipes) <= MAX_PIPELINES:
            return
        try:  # the loop thread owns the sessions: a snapshot of their pipelines
            used = {self.key(s.request.pipeline, s.request.options) for s in list(self._sessions())}
        except (RuntimeError, KeyError):  # changed while copied: evict by age alone
            used = set()
        for k in [k for k in self._pipes if k not in used and k != keep]:
            if len(self._pipes) <= MAX_PIPELINES:
                return
            del self._pipes[k]
        while len(self._pipes) > MAX_PIPELINES:  # all in use: the least recently used goes
            self._pipes.popitem(last=False)


class Events:
    """What the compute thread tells the loop: ``(kind, job, *details)`` tuples and a
    wake-up over an ``inproc`` PAIR so the loop's poll returns at once."""

    def __init__(self, ctx: zmq.Context, addr: str) -> None:
        self.ctx = ctx
        self.addr = addr
        self._items: collections.deque[tuple] = collections.deque()
        self.wake: zmq.Socket | None = None  # the loop's end, bound by bind()

    def bind(self) -> zmq.Socket:
        """The loop's end (poll it, then :meth:`drain`)."""
        self.wake = self.ctx.socket(zmq.PAIR)
        self.wake.bind(self.addr)
        return self.wake

    def post(self, wake: zmq.Socket, *event: Any) -> None:
        """Compute thread: queue ``event`` and wake the loop through its end ``wake``."""
        self._items.append(event)
        try:
            wake.send(b"", flags=zmq.NOBLOCK)
        except zmq.Again:
            pass  # the loop is already woken

    def drain(self) -> None:
        """Loop: consume the wake-ups (the events stay until :meth:`pop`)."""
        while True:
            try:
                self.wake.recv(flags=zmq.NOBLOCK)
            except zmq.Again:
                return

    def pop(self) -> tuple | None:
        return self._items.popleft() if self._items else None

    def close(self) -> None:
        if self.wake is not None:
            self.wake.close(linger=0)


class ComputeThread:
    """Runs jobs one at a time: a session's load (answers its OPEN), or a frame."""

    def __init__(self, queue: JobQueue, pool: PipelinePool, cache: ResultCache,
                 events: Events, stop: threading.Event, default_pipeline: str) -> None:
        self.queue, self.pool, self.cache, self.events = queue, pool, cache, events
        self._stop = stop
        self._default = default_pipeline
        self.thread = threading.Thread(target=self._loop, name="painted-skin-compute",
                                       daemon=True)

    def _loop(self) -> None:
        wake = self.events.ctx.socket(zmq.PAIR)
        wake.linger = 0
        wake.connect(self.events.addr)
        try:
            self.pool.get(self._default, {})
        except Exception:
            log.exception("could not load pipeline %s", self._default)
        try:
            while not self._stop.is_set():
                job = self.queue.take()
                if job is None:
                    break
                try:
                    self._run_job(job, wake)
                except pipelines.Cancelled:
                    pass  # already answered by the cancel
                except (Exception, SystemExit) as e:  # a library's sys.exit must not end
                    # the compute thread (PING would still answer, no frame ever would)
                    code = getattr(e, "reply_code", None)
                    if code in CLIENT_CODES:  # a frame the client must fix: no traceback
                        log.warning("frame %s of %r refused: %s", job.frame,
                                    job.session.request.name, e)
                        self.events.post(wake, "error", job, code, f"frame {job.frame}: {e}")
                        continue
                    log.exception("frame %s of %r failed", job.frame, job.session.request.name)
                    self.events.post(wake, "error", job, wire.E_INTERNAL,
                                     f"pipeline {job.session.request.pipeline!r} failed on frame "
                                     f"{job.frame}: {type(e).__name__}: {e}")
                finally:
                    self.queue.done()
        finally:
            wake.close(linger=0)

    def _run_load(self, job: Job, wake: zmq.Socket) -> None:
        """Load (and prepare for the session's size) the pipeline an OPEN asked for."""
        s, req = job.session, job.session.request
        t0 = time.monotonic()
        try:
            pipe = self.pool.get(req.pipeline, req.options)
            prepare = getattr(pipe, "prepare", None)
            if prepare is not None:  # e.g. the onnx engine exports for this frame size
                prepare(width=req.width, height=req.height, options=req.options, refs=req.refs)
        except (Exception, SystemExit) as e:
            # Missing or broken files, bad options: the user's to fix, said in the reply.
            # Anything else is a bug: logged with its traceback.
            ours = not (hasattr(e, "problems")
                        or isinstance(e, OSError | ValueError | KeyError | NotImplementedError))
            if ours:
                log.exception("session %r: pipeline %s could not load", req.name, req.pipeline)
            else:
                log.warning("session %r: pipeline %s could not load: %s", req.name, req.pipeline, e)
            code = wire.E_INTERNAL if ours else wire.E_BAD_MESSAGE
            s.failed = (f"open: pipeline {req.pipeline!r} could not load with these options: "
                        f"{type(e).__name__}: {e}")
            self.events.post(wake, "open_failed", job, code, s.failed)
            return
        self.events.post(wake, "opened", job, round((time.monotonic() - t0) * 1000.0, 3),
                         opened_fields(pipe))

    def _run_job(self, job: Job, wake: zmq.Socket) -> None:
        s = job.session
        if job.cancelled:
            return
        if job.load:
            self._run_load(job, wake)
            return
        if s.failed is not None:  # its load failed: answered with the OPEN's error
            return
        t0 = time.monotonic()
        queue_ms = (t0 - job.arrived) * 1000.0
        pipe = self.pool.get(s.request.pipeline, s.request.options)
        # A temporal or cross-frame frame depends on the session's state, not only on its
        # passes: the contract's rule keeps it out of the cache.
        temporal = getattr(pipe, "stateful", False) and s.request.options.get("temporal", True)
        use_cache = self.cache.max_bytes > 0 and pipelines.may_cache(pipe, s.request.options)
        # The model's identity too: a pipeline reloaded after its weights changed in place
        # must not serve the old weights' frames.
        key = (s.settings, pipeline_model_id(pipe), job.seed,
               passes_hash(job.passes)) if use_cache else None
        rgb = self.cache.get(key) if key else None
        cached = rgb is not None
        if job.shm and not job.fresh():
            self.events.post(wake, "error", job, E_CANCELLED, f"frame {job.frame}: its "
                             "shared-memory slot was rewritten before it ran")
            return
        if rgb is None:
            rgb = self._compute(job, pipe, wake)
            if rgb is None:
                return  # answered (cancelled: its slot was rewritten)
            if key and not job.cancelled:
                self.cache.put(key, rgb)
        timings = {"queue_ms": round(queue_ms, 3),
                   "compute_ms": round((time.monotonic() - t0) * 1000.0, 3)}
        extra: dict[str, np.ndarray] = {}
        if temporal and not cached:  # what the client keeps to resume the chain exactly
            from .diffusion import carry as carry_mod

            extra = carry_mod.arrays_of(s.state)
        self.events.post(wake, "result", job, rgb, timings, cached, extra)

    def _compute(self, job: Job, pipe: Any, wake: zmq.Socket) -> np.ndarray | None:
        """Run the pipeline on the frame: its read-only RGB, or None when its
        shared-memory slot was rewritten meanwhile (answered ``cancelled`` here)."""
        s, req = job.session, job.session.request
        progress = req.options.get("progress", True) is not False
        passes = job.passes
        if job.shm and getattr(pipe, "stateful", False):
            # a stateful pipeline may keep its inputs (e.g. the previous depth) in the
            # session state beyond this call: give it copies, not views of the slot
            passes = {k: np.array(v) for k, v in passes.items()}

        if job.carry and getattr(pipe, "stateful", False):
            from .diffusion import carry as carry_mod

            carry_mod.restore(pipe, s.state, job.carry_frame, job.carry)

        def callback(step: int, steps: int) -> bool:
            if progress and not job.cancelled:
                self.events.post(wake, "progress", job, step, steps)
            return not job.cancelled and not self._stop.is_set()

        out = pipe(passes, prompt=req.prompt, negative_prompt=req.negative, seed=job.seed,
                   width=req.width, height=req.height, refs=req.refs, options=req.options,
                   callback=callback, frame=job.frame, state=s.state)
        out = np.ascontiguousarray(out)
        if out.dtype != np.uint8 or out.shape != (req.height, req.width, 3):
            raise RuntimeError(f"pipeline returned {out.dtype}{list(out.shape)}, not "
                               f"uint8[{req.height}, {req.width}, 3]")
        if job.shm:
            if not job.fresh():  # the client reused the slot meanwhile: garbage in
                self.events.post(wake, "error", job, E_CANCELLED, f"frame {job.frame}: its "
                                 "shared-memory slot was rewritten while it ran")
                return None
            if any(np.may_share_memory(out, a) for a in passes.values()):
                out = out.copy()  # the reply and the cache outlive the slot
        out.flags.writeable = False
        return out
