"""``--frames FIRST-LAST``: one parser and one scene check for every command, so
``passes`` and ``restyle`` accept and refuse the same ranges."""

from __future__ import annotations

import re

# Blender's own frame limit (MAXFRAME): scene.frame_set and the frame range refuse more.
MAX_FRAME = 1_048_574
_RANGE_RE = re.compile(r"\s*(-?[0-9]+)\s*(?:-\s*(-?[0-9]+)\s*)?")


class FrameRangeError(ValueError):
    """A ``--frames`` value that cannot be used; the message says how to write one."""


def _show(text: str) -> str:
    return repr(text if len(text) <= 40 else text[:37] + "...")


def parse_frames(text: str, option: str = "--frames") -> range:
    """``"12"`` or ``"1-48"`` (inclusive; negative frames allowed, as in Blender) ->
    ``range``. Refuses reversed ranges and frames beyond Blender's +-1,048,574."""
    m = _RANGE_RE.fullmatch(text)
    if m is None:
        raise FrameRangeError(f"{option} {_show(text)}: use FIRST-LAST, e.g. 1-48")
    ends = [m.group(1), m.group(2) or m.group(1)]
    if any(len(e.lstrip("-").lstrip("0")) > 7 for e in ends):  # before int(): no huge ints
        raise FrameRangeError(f"{option} {_show(text)}: frames must lie within "
                              f"-{MAX_FRAME:,}..{MAX_FRAME:,} (Blender's limit)")
    first, last = (int(e) for e in ends)
    if max(abs(first), abs(last)) > MAX_FRAME:
        raise FrameRangeError(f"{option} {_show(text)}: frames must lie within "
                              f"-{MAX_FRAME:,}..{MAX_FRAME:,} (Blender's limit)")
    if last < first:
        raise FrameRangeError(f"{option} {_show(text)} is reversed: use FIRST-LAST with "
                              "FIRST <= LAST")
    return range(first, last + 1)


def check_in_scene(frames: range, start: int, end: int) -> range:
    """``frames`` unchanged if it lies within the scene range ``start..end``."""
    if len(frames) == 0:
        raise FrameRangeError("the frame range is empty: give FIRST-LAST with FIRST <= LAST")
    first, last = frames.start, frames[-1]
    if first < start or last > end:
        raise FrameRangeError(f"frames {first}-{last} lie outside the scene's range "
                              f"{start}-{end}: render frames within it, or set the scene's "
                              "frame range first")
    return frames
