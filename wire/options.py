"""The ``cross_frame`` option's one vocabulary, read alike by both ends of the wire.

The add-on decides from it whether a shot is chained (painted in order, resumed at
its first frame); the backend's OPEN check, its pipelines and its result-cache rule
decide from it whether frames attend to an anchor. Defining the values once keeps a
shot the add-on treats as independent from being one the backend anchors.

Accepted values (OPEN accepts all of them, and the pipelines run what OPEN accepts):

- off: absent (``None``), ``False``, ``""``, ``"off"``, ``"none"``;
- ``True``: the caller's default anchor (``"first"`` unless told otherwise);
- ``"first"`` (every frame attends to the chain's first frame) or ``"previous"``.

Anything else is refused with :class:`CrossFrameError`.
"""

from __future__ import annotations

from typing import Any

# The values that mean "off"; compared with ``in`` (so ``0`` is off, as ``0 == False``).
CROSS_FRAME_OFF: tuple[Any, ...] = (None, False, "", "off", "none")
CROSS_FRAME_MODES = ("first", "previous")


class CrossFrameError(ValueError):
    """A ``cross_frame`` value outside the vocabulary; the message names the accepted ones."""


def cross_frame_mode(value: Any, default: str = "first") -> str | None:
    """The anchor ``value`` asks for: "first" or "previous"; None for off; ``True``:
    ``default``. Raises :class:`CrossFrameError` naming the accepted values otherwise."""
    if value in CROSS_FRAME_OFF:
        return None
    mode = default if value is True else str(value)
    if mode not in CROSS_FRAME_MODES:
        raise CrossFrameError(f"cross_frame {mode!r}: use one of {', '.join(CROSS_FRAME_MODES)}, "
                              "true, \"off\" or absent")
    return mode


__all__ = ["CROSS_FRAME_MODES", "CROSS_FRAME_OFF", "CrossFrameError", "cross_frame_mode"]
