"""A retarget the panel runs a stage per timer tick, so Blender stays responsive and the
animator can cancel it.

:class:`RetargetJob` drives :func:`retarget_api.retarget_steps` with its pure stages (a
BVH file's read, the solve) on a worker thread and its bake in ~20 ms slices, so a long
take never holds the window for long (``painted-skin bench retarget`` reports the longest
tick); the operator only feeds it timer events.
Cancelling closes the generator at its next yield, the bake's included: the target
keeps the Action it had, an unfinished one is removed.
:class:`BatchRetargetJob` runs several clips so, one after another
(``retarget_batch_ui.PS_OT_retarget_batch`` is the panel's operator for it).
"""

from __future__ import annotations

from collections.abc import Generator

from .api import RetargetReport, retarget_steps

#: The stages :func:`retarget_steps` yields before, in order.
STAGE_NAMES = ("reading clip", "mapping bones", "solving", "baking action")
STAGES = len(STAGE_NAMES)


class RetargetJob:
    """One retarget in slices: :meth:`step` runs the next stage, :meth:`cancel` stops it
    between stages. ``report`` is set once it has finished."""

    def __init__(self, *args, **kwargs) -> None:
        self._steps: Generator[tuple[float, str], None, RetargetReport] = retarget_steps(
            *args, background=True, **kwargs)
        self.done = 0  # stages finished
        self.message = "starting"
        self.fraction = 0.0  # of the whole retarget, for the panel's bar
        self.report: RetargetReport | None = None
        self.cancelled = False
        self.cancel_requested = False  # set by the panel's Cancel button

    @property
    def finished(self) -> bool:
        return self.report is not None or self.cancelled

    @property
    def progress_text(self) -> str:
        """What the panel shows while it runs, e.g. ``2/4 solving``."""
        return f"{self.done}/{STAGES} {self.message}"

    def step(self) -> bool:
        """Run the next stage (or, while a stage runs on the worker thread, wait for it
        10 ms at most); True once the job has ended (finished or cancelled).
        A :class:`RetargetError` from a stage propagates, with the scene untouched."""
        if self.finished:
            return True
        if self.cancel_requested:
            self.cancel()
            return True
        try:
            fraction, self.message = next(self._steps)
            self.fraction = fraction
            if fraction >= 1.0:  # the bake has run: collect the report in this same tick
                next(self._steps)
        except StopIteration as end:
            self.report = end.value
            self.done, self.message, self.fraction = STAGES, "done", 1.0
            return True
        except BaseException:
            self.cancelled = True
            raise
        # Each yield comes before (or, repeated, during) a stage: those before it ran.
        self.done = STAGE_NAMES.index(self.message)
        return False

    def run(self) -> RetargetReport | None:
        """Every remaining stage at once (None if cancelled)."""
        while not self.step():
            pass
        return self.report

    def cancel(self) -> None:
        """Stop at the next slice; an unfinished Action or an imported clip is removed."""
        if not self.finished:
            self._steps.close()
            self.cancelled = True
            self.message = "cancelled"


class BatchRetargetJob:
    """Several clips onto one armature, one after another, each its own Action named
    after its file (``walk.bvh`` -> "walk"), stepped like :class:`RetargetJob`.

    A clip that fails (a broken file, bones that do not map) is recorded in
    ``failures`` by name and the batch goes on with the next: one bad take in a folder
    of mocap should not cost the others. Cancel stops the running clip where it is:
    the clips finished so far stay, the cancelled one leaves nothing behind. Each
    finished clip's Action that the next one replaces is stashed on a muted NLA track
    (unless something else uses it), so all of them stay in the file.
    """

    def __init__(self, clips, target, *args, **kwargs) -> None:
        if not clips:
            raise ValueError("no clips chosen: pick one or more clip files")
        kwargs.pop("action_name", None)  # each clip is named after its file
        self.clips = [str(c) for c in clips]
        self.target = target
        self._args, self._kwargs = args, kwargs
        self.index = 0  # the clip running now (or next)
        self.current: RetargetJob | None = None
        self.reports: list[RetargetReport] = []
        self.failures: list[tuple[str, str]] = []  # (file name, message)
        self.cancelled = False
        self.cancel_requested = False  # set by the panel's Cancel button
        self._before = None  # the target's Action before the running clip

    @property
    def finished(self) -> bool:
        return self.cancelled or self.index >= len(self.clips)

    @property
    def progress_text(self) -> str:
        """What the panel shows while it runs, e.g. ``clip 2/5: 1/4 mapping bones``."""
        n = len(self.clips)
        if self.cancelled:
            return f"clip {min(self.index + 1, n)}/{n}: cancelled"
        if self.finished:
            return f"{n}/{n} clips done"
        stage = self.current.progress_text if self.current is not None else f"0/{STAGES} starting"
        return f"clip {self.index + 1}/{n} ({self.name(self.index)}): {stage}"

    @property
    def fraction(self) -> float:
        """Of the whole batch, for the panel's bar."""
        n = len(self.clips)
        now = self.current.fraction if self.current is not None else 0.0
        return min(1.0, (self.index + now) / n) if n else 1.0

    def name(self, k: int) -> str:
        """The file name of clip ``k`` (what reports and failures call it)."""
        return self.clips[k].replace("\\", "/").rpartition("/")[2]

    def step(self) -> bool:
        """Run the next stage of the running clip; True once the batch has ended."""
        if self.finished:
            return True
        if self.cancel_requested:
            self.cancel()
            return True
        if self.current is None:
            ad = self.target.animation_data
            self._before = ad.action if ad is not None else None
            stem = self.name(self.index).rpartition(".")[0] or self.name(self.index)
            self.current = RetargetJob(self.clips[self.index], self.target, *self._args,
                                       action_name=stem, **self._kwargs)
        try:
            ended = self.current.step()
        except ValueError as e:  # RetargetError, ImportFailed, BvhError: this clip only
            self.failures.append((self.name(self.index), str(e)))
            ended = True
        if ended:
            if self.current.report is not None:
                self._keep(self._before)
                self.reports.append(self.current.report)
            self.current = None
            self.index += 1
        return self.finished

    def _keep(self, before) -> None:
        from ..session import stash_action

        ad = self.target.animation_data
        if before is not None and ad is not None and before is not ad.action \
                and before.users == 0:
            stash_action(self.target, before)

    def run(self) -> list[RetargetReport]:
        """Every remaining clip at once; the reports of those that finished."""
        while not self.step():
            pass
        return self.reports

    def cancel(self) -> None:
        """Stop the running clip (it leaves nothing); the finished clips stay."""
        if not self.finished:
            if self.current is not None:
                self.current.cancel()
                self.current = None
            self.cancelled = True

    @property
    def summary(self) -> str:
        """One line for the panel once it has ended."""
        n, ok = len(self.clips), len(self.reports)
        text = f"{ok}/{n} clips retargeted" + (
            f" ({', '.join(r.action for r in self.reports)})" if ok else "")
        if self.cancelled:
            text += f"; cancelled at clip {self.index + 1} ({self.name(self.index)}), " \
                    "its action not made"
        if self.failures:
            text += "; failed: " + ", ".join(name for name, _ in self.failures)
        return text
