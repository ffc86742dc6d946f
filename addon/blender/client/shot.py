"""One shot streaming through a backend session: which frames are held, in flight,
to be sent again, answered or dropped, and what a temporal shot carries.

The client's socket side (:mod:`.backend_client`, :mod:`.connection`) decides *when*
to send; this module keeps *what* has happened to each frame, so the rules that
make a frame answered at most once and never sent again once answered live in one
place. No bpy import, no socket.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from .... import wire as P
from .errors import E_CANCELLED, BackendError

Arrays = dict[str, np.ndarray]
OnResult = Callable[["Result"], None]
OnProgress = Callable[[int, int, int], None]  # (frame, step, steps)
CarryFor = Callable[[int], Arrays | None]
PrimersFor = Callable[[int], list[tuple[int, Arrays]]]

# A frame the backend bounced (busy) goes again after this long.
BUSY_RETRY_S = 0.05


@dataclass
class Result:
    """One restyled frame: RGB uint8 (H, W, 3), top row first, plus the reply header."""

    frame: int
    rgb: np.ndarray
    seed: int | None
    timings: dict
    cached: bool
    header: dict
    extra: dict = field(default_factory=dict)  # other arrays (carry_latents: temporal mode)


@dataclass
class Tally:
    """What a shot has done so far, for its summary."""

    answered: set[int] = field(default_factory=set)
    dropped: set[int] = field(default_factory=set)  # cancelled by the backend
    sent: int = 0
    resent: int = 0
    started: float = field(default_factory=time.monotonic)


@dataclass
class Continuity:
    """How a temporal shot restores the backend's state after every (re)open, whose
    state starts empty: the previous frame's carry arrays for frame f (``carry_for``,
    None: none) go with the first frame sent, after the frames to run before it there
    (``primers_for``: cross-frame anchors, results dropped)."""

    carry_for: CarryFor | None = None
    primers_for: PrimersFor | None = None
    priming: set[int] = field(default_factory=set)
    fresh_state: bool = True
    carry_target: int | None = None  # the frame that carries, until it is answered


@dataclass
class Shot:
    """The frames of one shot streaming through the open session."""

    source: Iterator[tuple[int, Arrays]]
    on_result: OnResult
    on_progress: OnProgress | None = None
    held: dict[int, Arrays] = field(default_factory=dict)  # pulled, not yet answered
    inflight: set[int] = field(default_factory=set)  # sent on the current connection
    resend: deque = field(default_factory=deque)  # (frame, not_before) to send again
    exhausted: bool = False
    cancelled: bool = False
    cancelled_at: float = 0.0
    error: BackendError | None = None
    last_progress: tuple[int, int, int] | None = None
    tally: Tally = field(default_factory=Tally)
    temporal: Continuity = field(default_factory=Continuity)

    @property
    def done(self) -> bool:
        return self.error is not None or ((self.exhausted or self.cancelled) and not self.held)

    def summary(self) -> dict:
        t = self.tally
        return {"answered": len(t.answered), "dropped": len(t.dropped), "sent": t.sent,
                "resent": t.resent, "cancelled": self.cancelled,
                "seconds": time.monotonic() - t.started}

    # -- sending ------------------------------------------------------------------------

    def next_frame(self, now: float, may_pull: bool) -> tuple[int, bool] | None:
        """The next frame to send, ``(frame, pulled_now)``: first one due to be sent
        again, else (when ``may_pull``) a new one from the source. None: nothing now."""
        while True:
            if self.resend and self.resend[0][1] <= now:
                f, _ = self.resend.popleft()
                if f not in self.held:
                    continue
                self.tally.resent += 1
                return f, False
            if self.resend or self.exhausted or not may_pull:
                return None
            try:
                f, arrays = next(self.source)
            except StopIteration:
                self.exhausted = True
                return None
            f = int(f)
            if f in self.held or f in self.tally.answered:
                continue  # a frame is computed once per shot
            self.held[f] = arrays
            return f, True

    def primers_before(self, f: int) -> Iterator[tuple[int, Arrays]]:
        """On the first frame sent into a fresh backend state: the frames to run
        before it (results dropped), each held and in flight as it is yielded. From
        ``f`` on the backend's state follows; ``f`` carries until it is answered."""
        c = self.temporal
        if not c.fresh_state:
            return
        c.fresh_state = False
        c.carry_target = f  # carried again if it bounces (busy) and is re-sent
        for pf, parrays in c.primers_for(f) if c.primers_for is not None else ():
            if pf == f or pf in self.held:
                continue
            self.held[pf] = parrays
            c.priming.add(pf)
            self.inflight.add(pf)
            yield pf, parrays

    def with_carry(self, f: int, arrays: Arrays) -> Arrays:
        """``arrays`` plus the previous frame's carry when ``f`` restores the state."""
        c = self.temporal
        if c.carry_target == f and c.carry_for is not None and f > 0:
            carry = c.carry_for(f)
            if carry:
                return {**arrays, **carry}
        return arrays

    def requeue(self, at: float) -> None:
        """After a (re)open every unanswered frame must be sent again (from ``at``)."""
        self.drop_primers()  # planned again for the new session
        for f in sorted(self.inflight):
            self.resend.append((f, at))
        self.inflight.clear()

    def drop_primers(self, only: int | None = None) -> bool:
        """Forget primer frames (all, or ``only``); True if ``only`` was one."""
        priming = self.temporal.priming
        for pf in [only] if only is not None else list(priming):
            if pf not in priming:
                return False
            priming.discard(pf)
            self.held.pop(pf, None)
            self.inflight.discard(pf)
        return True

    # -- stopping -----------------------------------------------------------------------

    def cancel(self, now: float) -> bool:
        """Stop pulling frames; frames never sent on this connection are dropped.
        True if frames are still held (the backend is to be asked to drop them)."""
        self.cancelled, self.cancelled_at = True, now
        for f, _ in self.resend:  # never sent on this connection: nothing to cancel
            self.held.pop(f, None)
            self.tally.dropped.add(f)
        self.resend.clear()
        return bool(self.held)

    def give_up_cancelled(self, now: float, grace_s: float) -> None:
        """Frames a cancel was never confirmed for, after ``grace_s``: dropped."""
        if self.cancelled and self.held and now - self.cancelled_at > grace_s:
            self.tally.dropped |= set(self.held) - self.temporal.priming
            self.held.clear()

    def fail(self, err: BackendError, clear_inflight: bool = True) -> None:
        """End the shot with ``err``: nothing more is awaited."""
        self.error = err
        self.held.clear()
        if clear_inflight:
            self.inflight.clear()

    # -- replies ------------------------------------------------------------------------

    def progress(self, header: dict) -> None:
        """A PROGRESS of a frame still awaited (never a primer's): noted and told."""
        if header.get("frame") in set(self.held) - self.temporal.priming:
            self.last_progress = (header["frame"], int(header.get("step", 0)),
                                  int(header.get("steps", 0)))
            if self.on_progress is not None:
                self.on_progress(*self.last_progress)

    def receive_result(self, header: dict, arrays: Arrays) -> None:
        """A RESULT: delivered to ``on_result`` once per frame (a re-sent frame may be
        answered twice); a primer's result is dropped (its image is on disk already)."""
        f = header.get("frame")
        if f not in self.held:
            return  # answered already (a re-sent frame answered twice) or unknown
        if self.drop_primers(f):
            return  # run for its side effect (an anchor)
        if f == self.temporal.carry_target:
            self.temporal.carry_target = None
        del self.held[f]
        self.inflight.discard(f)
        self.tally.answered.add(f)
        rgb = arrays.get("rgb")
        if rgb is None:
            self.error = BackendError(P.E_BAD_ARRAY, f"result of frame {f} has no 'rgb' array",
                                      frame=f)
            return
        extra = {k: a for k, a in arrays.items() if k != "rgb"}
        self.on_result(Result(f, rgb, header.get("seed"), header.get("timings") or {},
                              bool(header.get("cached", False)), header, extra))

    def receive_error(self, err: BackendError, f: int | None) -> None:
        """An error about frame ``f``: busy and re-open cancels send it again, a
        cancel asked for drops it, anything else ends the shot."""
        if f is None or f not in self.held:
            return
        if err.code == E_CANCELLED and self.drop_primers(f):
            return  # planned again with the next (re)open
        if err.code == P.E_BUSY:
            self.inflight.discard(f)
            self.resend.append((f, time.monotonic() + BUSY_RETRY_S))
        elif err.code == E_CANCELLED:
            self.inflight.discard(f)
            if self.cancelled:
                del self.held[f]
                self.tally.dropped.add(f)
            elif all(g != f for g, _ in self.resend):
                self.resend.append((f, time.monotonic()))  # dropped by a re-open: send again
        else:
            self.fail(err)
