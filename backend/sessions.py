"""Sessions: what a client opened, the requests it sends (checked before anything is
queued), and the replies the compute thread's events turn into.

Loop thread only. A session is keyed by (client identity, the name it chose); its
frames go to the compute thread through :class:`~.jobs.JobQueue`, at most ``credits``
outstanding, within the client's quotas (``quotas.py``). OPEN loads the pipeline as a
job at the head of the session's queue and is answered OPENED only once it loaded (or
with the error that kept it from loading), never with a failure on the shot's first
frame; a pipeline already loaded and prepared answers at once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import wire
from ..wire import E_CANCELLED, MAX_NAME, WIRE_PASSES, Message, ProtocolError, error, is_int, reply
from ..wire import clean as _clean
from ..wire.options import ref_weights_problem
from . import pipelines, quotas
from .compute import Events, PipelinePool, settings_hash
from .diffusion.seeds import frame_seed
from .jobs import Job, JobQueue, OpenRequest, Session
from .serve_config import ServeConfig
from .shm_grants import ShmGrants

log = logging.getLogger("painted_skin.backend")

# The control passes a FRAME may carry: dtype and channels (0: (H, W)), from the wire table.
PASSES: dict[str, tuple[str, int]] = {n: (p.dtype, p.channels) for n, p in WIRE_PASSES.items()}

Send = Callable[[list[bytes], list[Any]], None]


def parse_open(msg: Message, default_pipeline: str) -> OpenRequest:
    """Check an OPEN (``bad_message``/``bad_array`` naming the field and what it takes)."""
    h, ref = msg.header, msg.id

    def bad(text: str, code: str = wire.E_BAD_MESSAGE) -> ProtocolError:
        return ProtocolError(code, f"open: {text}", ref)

    name = h.get("session")
    if not isinstance(name, str) or not 0 < len(name) <= MAX_NAME:
        raise bad(f"'session' must be a string of 1..{MAX_NAME} characters")
    pipeline = h.get("pipeline", default_pipeline)
    try:
        entry = pipelines.get(pipeline) if isinstance(pipeline, str) else None
    except KeyError as e:
        raise bad(str(e.args[0])) from None
    if entry is None:
        raise bad("'pipeline' must be a string")
    prompt, negative = h.get("prompt", ""), h.get("negative_prompt", "")
    if not isinstance(prompt, str) or not isinstance(negative, str):
        raise bad("'prompt' and 'negative_prompt' must be strings")
    seed = h.get("seed", 0)
    if not is_int(seed):
        raise bad("'seed' must be an integer")
    if not -2**63 <= seed < 2**64:
        raise bad(f"'seed' {seed} is out of range: give an integer in {-2**63}..{2**64 - 1}")
    width, height = h.get("width"), h.get("height")
    m = entry.size_multiple
    if not (is_int(width) and is_int(height) and 0 < width <= wire.MAX_SIDE
            and 0 < height <= wire.MAX_SIDE and width % m == 0 and height % m == 0):
        raise bad(f"bad size {width!r}x{height!r}: width and height must be integers in "
                  f"1..{wire.MAX_SIDE}" + (f", multiples of {m} for {pipeline!r}"
                                           if m > 1 else ""))
    options = h.get("options", {})
    if not isinstance(options, dict):
        raise bad("'options' must be an object")
    problems = entry.check(options) if entry.check else []
    if problems:
        raise bad(f"pipeline {pipeline!r} cannot run with these options: "
                  + "; ".join(map(str, problems)))
    refs = []
    for i, (aname, a) in enumerate(msg.arrays.items()):
        if aname != f"ref{i}":
            raise bad(f"array {aname!r}: open takes only ref0..refN in order", wire.E_BAD_ARRAY)
        if a.dtype != np.uint8 or a.ndim != 3 or a.shape[2] != 3:
            raise bad(f"array {aname!r}: identity images are uint8 (H, W, 3), got "
                      f"{a.dtype}{list(a.shape)}", wire.E_BAD_ARRAY)
        refs.append(a)
    problem = ref_weights_problem(options, len(refs))
    if problem:
        raise bad(problem)
    return OpenRequest(name, pipeline, prompt, negative, seed, width, height, options, refs)


def split_carry(s: Session, msg: Message, arrays: dict[str, np.ndarray]
                ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], Any]:
    """A FRAME's passes, the previous frame's carry (``carry_*``) and ``carry_frame``,
    the carry checked against the session."""
    carry = {k: a for k, a in arrays.items() if k.startswith("carry_")}
    arrays = {k: a for k, a in arrays.items() if k not in carry}
    carry_frame = msg.header.get("carry_frame")
    if carry or carry_frame is not None:
        from .diffusion import carry as carry_mod  # numpy only (torch on restore)

        problem = carry_mod.check(carry, s.request.width, s.request.height)
        if problem is None and not (is_int(carry_frame) and 0 <= carry_frame < msg.frame):
            problem = "'carry_frame' must be an integer below 'frame'"
        if problem:
            raise ProtocolError(wire.E_BAD_ARRAY, f"frame: {problem}", msg.id)
    return arrays, carry, carry_frame


def check_passes(s: Session, arrays: dict[str, np.ndarray], ref: Any) -> None:
    """Every array a known pass of the wire table, in its dtype and the session's size."""
    for name, a in arrays.items():
        spec = PASSES.get(name)
        if spec is None:
            raise ProtocolError(wire.E_BAD_ARRAY, f"frame: unknown pass {name!r} "
                                                  f"(known: {', '.join(PASSES)})", ref)
        dtype, ch = spec
        size = (s.request.height, s.request.width)
        shape = (*size, ch) if ch else size
        if a.dtype.name != dtype or a.shape != shape:
            raise ProtocolError(wire.E_BAD_ARRAY,
                                f"frame: pass {name!r} must be {dtype}{list(shape)} for "
                                f"this {s.request.width}x{s.request.height} session, got "
                                f"{a.dtype.name}{list(a.shape)}", ref)


class Sessions:
    """The open sessions and their requests (OPEN, FRAME, CANCEL, CLOSE), the idle
    sweep, and the delivery of the compute thread's events as replies."""

    def __init__(self, cfg: ServeConfig, send: Send, queue: JobQueue, pool: PipelinePool,
                 shm: ShmGrants) -> None:
        self.cfg = cfg
        self._send = send
        self.queue, self.pool, self.shm = queue, pool, shm
        self.limits = quotas.ClientLimits(cfg.client_sessions, int(cfg.client_mb * 2**20))
        self.table: dict[tuple[bytes, str], Session] = {}
        self.last_seen: dict[bytes, float] = {}

    def __len__(self) -> int:
        return len(self.table)

    def queue_depth(self) -> int:
        """Frames queued or computing, over all sessions."""
        with self.queue.cond:
            return sum(len(s.outstanding) for s in self.table.values())

    def lookup(self, route: list[bytes], msg: Message) -> Session:
        s = self.table.get((route[0], msg.session)) if isinstance(msg.session, str) else None
        if s is None:
            raise ProtocolError(wire.E_NO_SESSION,
                                f"no open session {_clean(msg.session)!r} for this client "
                                f"(send open first; sessions end on close or after "
                                f"{self.cfg.session_timeout:g} s of client silence)", msg.id)
        return s

    # ---- requests ------------------------------------------------------------------------

    def on_open(self, route: list[bytes], msg: Message, client: bytes,
                local: Callable[[], bool]) -> None:
        """``client``: who sent it (quotas); ``local()``: it came from this machine."""
        req, ref = parse_open(msg, self.cfg.pipeline), msg.id
        key = (route[0], req.name)
        old = self.table.get(key)
        count, held = self.held_by(client, besides=old)
        quotas.check_open(self.limits, count, held, sum(r.nbytes for r in req.refs), ref)
        if old is not None:  # re-open replaces the session; its frames are cancelled
            self.drop(old, notify_ref=ref)
        elif len(self.table) >= self.cfg.max_sessions:
            raise ProtocolError(wire.E_BUSY, f"open: the backend has {len(self.table)} "
                                f"sessions open (the most it takes); close some or try later",
                                ref)
        s = self.table[key] = Session(
            key, list(route), req,
            settings_hash(req.pipeline, req.prompt, req.negative, req.seed, req.width,
                          req.height, req.options, req.refs),
            client=client)
        if msg.header.get("shm") is True:
            self.shm.grant(s, msg.header.get("shm_probe"), local)
        if self.pool.ready_for(s):
            self.send_opened(s, _clean(ref), **self.pool.opened_for(s))
            return
        # Load (download, export...) on the compute thread and answer OPEN only then:
        # a model that cannot load fails the OPEN, before the shot, never a frame of
        # it. The loop stays free meanwhile (PING, STATUS, other sessions). Frames sent
        # before OPENED (a broker replaying a session) queue behind the load.
        job = Job(s, -1, _clean(ref), {}, 0, time.monotonic(), load=True)
        s.loading = job
        self.queue.put(job, first=True)

    def send_opened(self, s: Session, ref: str | None, model_id: str | None = None,
                    **extra: Any) -> None:
        """OPENED, with the loaded model's identity (``model_id``) when it has one: a
        client resuming a shot refuses to mix frames another version painted; ``extra``
        e.g. the pipeline's ``notice``."""
        req = s.request
        self._send(s.route, reply(wire.OPENED, session=req.name, credits=self.cfg.credits,
                                  pipeline=req.pipeline, width=req.width, height=req.height,
                                  ref=ref, **({"shm": True} if s.shm else {}),
                                  **({"model_id": model_id} if model_id else {}), **extra))

    def on_frame(self, route: list[bytes], msg: Message) -> None:
        s = self.lookup(route, msg)
        frame = msg.frame
        if not is_int(frame) or not 0 <= frame < 2**53:
            raise ProtocolError(wire.E_BAD_MESSAGE, "frame: 'frame' must be an integer "
                                                    ">= 0", msg.id)
        arrays, slot = self.shm.arrays(s, msg) if msg.shm else (msg.arrays, None)
        arrays, carry, carry_frame = split_carry(s, msg, arrays)
        check_passes(s, arrays, msg.id)
        if frame in s.outstanding:
            return  # already queued or computing: its one result will come
        if len(s.outstanding) >= self.cfg.credits:
            raise ProtocolError(wire.E_BUSY, f"frame {frame}: {len(s.outstanding)} frames "
                                             f"outstanding, credits are {self.cfg.credits}; "
                                             f"wait for a result", msg.id)
        quotas.check_frame(self.limits, self.held_by(s.client)[1],
                           sum(a.nbytes for a in arrays.values()), frame, msg.id)
        job = Job(s, frame, _clean(msg.id), dict(arrays), frame_seed(s.request.seed, frame),
                  time.monotonic(), shm=bool(msg.shm), slot=slot, carry=carry or None,
                  carry_frame=carry_frame if carry else None)
        s.outstanding[frame] = job
        self.queue.put(job)

    def on_cancel(self, route: list[bytes], msg: Message) -> None:
        s = self.lookup(route, msg)
        frame = msg.frame
        if frame is not None and not is_int(frame):
            raise ProtocolError(wire.E_BAD_MESSAGE, "cancel: 'frame' must be an integer "
                                                    "or absent", msg.id)
        if frame is None:
            jobs = sorted(s.outstanding.values(), key=lambda j: j.frame)
        else:
            jobs = [s.outstanding[frame]] if frame in s.outstanding else []
        for job in jobs:
            self.cancel_job(job)
            self._send(s.route, error(E_CANCELLED, f"frame {job.frame} cancelled", msg.id,
                                      s.request.name, job.frame))

    def on_close(self, route: list[bytes], msg: Message) -> None:
        s = self.lookup(route, msg)
        self.drop(s)
        self._send(route, reply(wire.CLOSED, session=s.request.name, ref=_clean(msg.id)))

    # ---- bookkeeping ---------------------------------------------------------------------

    def held_by(self, client: bytes, besides: Session | None = None) -> tuple[int, int]:
        """(sessions, bytes) the client holds, leaving ``besides`` out (a re-open)."""
        mine = [s for s in self.table.values() if s.client == client and s is not besides]
        return len(mine), sum(quotas.session_bytes(
            s.request.refs, (j.passes for j in s.outstanding.values())) for s in mine)

    def cancel_job(self, job: Job) -> None:
        """Forget a frame: unqueue it, or flag it so the pipeline stops at its next step."""
        job.cancelled = True
        job.session.outstanding.pop(job.frame, None)
        self.queue.remove(job)

    def drop(self, s: Session, notify_ref: str | None = None) -> None:
        """Free a session: its load and frames cancelled (each told when ``notify_ref``),
        its shared memory released."""
        load, s.loading = s.loading, None
        if load is not None:  # its OPEN is never answered (re-opened, closed, client gone)
            load.cancelled = True
            self.queue.remove(load)  # loading now: the pipeline stays cached for the next
        for job in sorted(s.outstanding.values(), key=lambda j: j.frame):
            self.cancel_job(job)
            if notify_ref is not None:
                self._send(s.route, error(E_CANCELLED, f"frame {job.frame} cancelled (session "
                                                       f"re-opened)", notify_ref, s.request.name,
                                          job.frame))
        if self.table.get(s.key) is s:
            del self.table[s.key]
        if s.shm_maps:
            self.shm.release(s)

    def drop_all(self) -> None:
        for s in list(self.table.values()):
            self.drop(s)
        self.last_seen.clear()

    def sweep_idle(self, now: float) -> None:
        """Free the sessions of clients silent for longer than the session timeout."""
        timeout = self.cfg.session_timeout
        if not timeout:
            return
        # A session whose OPEN is still loading its model is kept: its client may wait
        # for OPENED without a word (the load can take minutes), and dropping it would
        # leave that OPEN unanswered. Its silence counts from OPENED on.
        loading = {key[0] for key, s in self.table.items() if s.loading is not None}
        for key, s in list(self.table.items()):
            if s.loading is None and now - self.last_seen.get(key[0], 0.0) > timeout:
                log.info("session %r: client silent for %.0f s, freed", s.request.name, timeout)
                self.drop(s)
        for ident, seen in list(self.last_seen.items()):
            if now - seen > timeout and ident not in loading:
                del self.last_seen[ident]

    # ---- the compute thread's events, as replies -----------------------------------------

    def _live(self, job: Job) -> bool:
        s = job.session
        return (not job.cancelled and s.outstanding.get(job.frame) is job
                and self.table.get(s.key) is s)

    def deliver(self, events: Events) -> None:
        while (event := events.pop()) is not None:
            kind, job, *rest = event
            if job.load:
                self._deliver_open(kind, job, rest)
                continue
            if not self._live(job):
                continue  # cancelled, closed or its client gone
            s = job.session
            if kind == "progress":
                step, steps = rest
                self._send(s.route, reply(wire.PROGRESS, session=s.request.name, frame=job.frame,
                                          step=step, steps=steps, ref=job.ref))
                continue
            del s.outstanding[job.frame]
            if kind == "result":
                rgb, timings, cached, extra = rest
                self._send(s.route, reply(wire.RESULT, {"rgb": rgb, **extra},
                                          session=s.request.name, frame=job.frame,
                                          seed=job.seed, timings=timings, cached=cached,
                                          ref=job.ref))
            else:
                code, text = rest
                self._send(s.route, error(code, text, job.ref, s.request.name, job.frame))

    def _deliver_open(self, kind: str, job: Job, rest: list[Any]) -> None:
        """Answer a session's OPEN once its pipeline loaded (or could not)."""
        s = job.session
        if job.cancelled or s.loading is not job or self.table.get(s.key) is not s:
            return  # re-opened, closed or its client gone meanwhile
        s.loading = None
        if kind == "opened":
            self.last_seen[s.key[0]] = time.monotonic()  # silence counts from OPENED
            self.send_opened(s, job.ref, **(rest[1] if len(rest) > 1 else {}),
                             load_ms=rest[0])
            return
        code, text = rest
        frames = sorted(s.outstanding.values(), key=lambda j: j.frame)
        self.drop(s)
        # Frames sent before OPENED still get their one reply each, before the OPEN's
        # error: a broker forwards frame replies only while the session exists.
        for fj in frames:
            self._send(s.route, error(code, f"frame {fj.frame}: {text}", fj.ref, s.request.name,
                                      fj.frame))
        self._send(s.route, error(code, text, job.ref, s.request.name))
