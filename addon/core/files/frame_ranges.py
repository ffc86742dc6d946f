"""``--frames``: one parser and one scene check for every command, so ``passes`` and
``restyle`` accept and refuse the same frames. It reads the lists render farms hand
out: ``12``, ``1-48``, ``3,5-10`` and ``1-100x2`` (every second frame)."""

from __future__ import annotations

import re
from collections.abc import Sequence

# Blender's own frame limit (MAXFRAME): scene.frame_set and the frame range refuse more.
MAX_FRAME = 1_048_574
MAX_PARTS = 1000  # comma-separated parts: a farm's chunk list is a few
_PART_RE = re.compile(r"\s*(-?[0-9]+)\s*(?:-\s*(-?[0-9]+)\s*(?:[xX]\s*([0-9]+)\s*)?)?")
HOW = "use FIRST-LAST, a comma list or a step, e.g. 1-48, 3,5-10 or 1-100x2"

Frames = Sequence[int]  # increasing, no repeats: a range or a tuple


class FrameRangeError(ValueError):
    """A ``--frames`` value that cannot be used; the message says how to write one."""


def _show(text: str) -> str:
    return repr(text if len(text) <= 40 else text[:37] + "...")


def _part(text: str, part: str, option: str) -> range:
    m = _PART_RE.fullmatch(part)
    if m is None:
        raise FrameRangeError(f"{option} {_show(text)}: {HOW}")
    first_s, last_s, step_s = m.group(1), m.group(2) or m.group(1), m.group(3) or "1"
    if any(len(e.lstrip("-").lstrip("0")) > 7 for e in (first_s, last_s, step_s)):
        raise FrameRangeError(f"{option} {_show(text)}: frames must lie within "
                              f"-{MAX_FRAME:,}..{MAX_FRAME:,} (Blender's limit)")
    first, last, step = int(first_s), int(last_s), int(step_s)
    if max(abs(first), abs(last)) > MAX_FRAME:
        raise FrameRangeError(f"{option} {_show(text)}: frames must lie within "
                              f"-{MAX_FRAME:,}..{MAX_FRAME:,} (Blender's limit)")
    if last < first:
        raise FrameRangeError(f"{option} {_show(text)} is reversed: use FIRST-LAST with "
                              "FIRST <= LAST")
    if step < 1:
        raise FrameRangeError(f"{option} {_show(text)}: the step after 'x' must be 1 or more, "
                              "e.g. 1-100x2")
    return range(first, last + 1, step)


def parse_frames(text: str, option: str = "--frames") -> Frames:
    """``"12"``, ``"1-48"`` (inclusive; negative frames allowed, as in Blender),
    ``"3,5-10"`` or ``"1-100x2"`` -> the frames in increasing order, each once: a
    ``range`` when they are evenly spaced, else a tuple. Refuses reversed ranges and
    frames beyond Blender's +-1,048,574."""
    parts = text.split(",")
    if len(parts) > MAX_PARTS:
        raise FrameRangeError(f"{option} {_show(text)} has more than {MAX_PARTS} parts: "
                              "give ranges, e.g. 1-48")
    ranges = [_part(text, p, option) for p in parts]
    if len(ranges) == 1:
        return ranges[0]
    if sum(map(len, ranges)) > 2 * MAX_FRAME + 1:  # overlapping parts: bound the work
        raise FrameRangeError(f"{option} {_show(text)}: its parts overlap over more frames "
                              "than Blender has: give each frame once, e.g. 1-48")
    frames = sorted(set().union(*ranges))
    return as_range(frames) or tuple(frames)


def as_range(frames: Sequence[int]) -> range | None:
    """``frames`` (increasing) as the equal ``range`` when evenly spaced, else None."""
    if not frames:
        return None
    step = frames[1] - frames[0] if len(frames) > 1 else 1
    if step <= 0:
        return None
    r = range(frames[0], frames[-1] + 1, step)
    return r if len(r) == len(frames) and all(a == b for a, b in zip(r, frames, strict=False)) \
        else None


def describe(frames: Frames) -> str:
    """``frames`` written as ``--frames`` takes them (for messages and farm commands)."""
    if not frames:
        return ""
    r = frames if isinstance(frames, range) else as_range(frames)
    if r is not None:
        if len(r) == 1:
            return str(r.start)
        return f"{r.start}-{r[-1]}" + (f"x{r.step}" if r.step != 1 else "")
    runs: list[list[int]] = []
    for f in frames:
        if runs and f == runs[-1][-1] + 1:
            runs[-1].append(f)
        else:
            runs.append([f])
    return ",".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)


def check_in_scene(frames: Frames, start: int, end: int) -> Frames:
    """``frames`` unchanged if it lies within the scene range ``start..end``."""
    if len(frames) == 0:
        raise FrameRangeError("the frame range is empty: give FIRST-LAST with FIRST <= LAST")
    first, last = min(frames[0], frames[-1]), max(frames[0], frames[-1])
    if first < start or last > end:
        raise FrameRangeError(f"frames {describe(frames)} lie outside the scene's range "
                              f"{start}-{end}: render frames within it, or set the scene's "
                              "frame range first")
    return frames
