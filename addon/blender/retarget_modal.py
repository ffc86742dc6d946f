"""A retarget the panel runs a stage per timer tick, so Blender stays responsive and the
animator can cancel it.

:class:`RetargetJob` drives :func:`retarget_api.retarget_steps`; the operator only feeds
it timer events. Cancelling closes the generator before the bake stage, so the target
keeps the Action it had; the bake stage itself always runs whole.
"""

from __future__ import annotations

from collections.abc import Generator

from .retarget_api import RetargetReport, retarget_steps

#: The stages :func:`retarget_steps` yields before: read, map, solve, bake.
STAGES = 4


class RetargetJob:
    """One retarget in slices: :meth:`step` runs the next stage, :meth:`cancel` stops it
    between stages. ``report`` is set once it has finished."""

    def __init__(self, *args, **kwargs) -> None:
        self._steps: Generator[tuple[float, str], None, RetargetReport] = retarget_steps(
            *args, **kwargs)
        self.done = 0  # stages finished
        self.message = "starting"
        self.report: RetargetReport | None = None
        self.cancelled = False
        self.cancel_requested = False  # set by the panel's Cancel button
        self._started = 0

    @property
    def finished(self) -> bool:
        return self.report is not None or self.cancelled

    @property
    def progress_text(self) -> str:
        """What the panel shows while it runs, e.g. ``2/4 solving``."""
        return f"{self.done}/{STAGES} {self.message}"

    def step(self) -> bool:
        """Run the next stage; True once the job has ended (finished or cancelled).
        A :class:`RetargetError` from a stage propagates, with the scene untouched."""
        if self.finished:
            return True
        if self.cancel_requested:
            self.cancel()
            return True
        try:
            fraction, self.message = next(self._steps)
            if fraction >= 1.0:  # the bake has run: collect the report in this same tick
                next(self._steps)
        except StopIteration as end:
            self.report = end.value
            self.done, self.message = STAGES, "done"
            return True
        except BaseException:
            self.cancelled = True
            raise
        self._started += 1
        self.done = self._started - 1  # each yield comes before a stage: those before it ran
        return False

    def run(self) -> RetargetReport | None:
        """Every remaining stage at once (None if cancelled)."""
        while not self.step():
            pass
        return self.report

    def cancel(self) -> None:
        """Stop before the next stage; anything already imported is cleaned up."""
        if not self.finished:
            self._steps.close()
            self.cancelled = True
            self.message = "cancelled"
