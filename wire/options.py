"""The shot options both ends of the wire read alike: ``cross_frame`` and ``ref_weights``,
and the frame sizes each built-in pipeline takes (``SIZE_MULTIPLES``).

The add-on decides from it whether a shot is chained (painted in order, resumed at
its first frame); the backend's OPEN check, its pipelines and its result-cache rule
decide from it whether frames attend to an anchor. Defining the values once keeps a
shot the add-on treats as independent from being one the backend anchors.

Accepted values (OPEN accepts all of them, and the pipelines run what OPEN accepts):

- off: absent (``None``), ``False``, ``""``, ``"off"``, ``"none"``;
- ``True``: the caller's default anchor (``"first"`` unless told otherwise);
- ``"first"`` (every frame attends to the chain's first frame) or ``"previous"``.

Anything else is refused with :class:`CrossFrameError`.

``ref_weights``: one non-negative number per reference image (the OPEN's ``ref0..refN``,
same order), not all zero; absent means equal weights. The pipelines average the
references' image embeddings with these weights (normalised to sum 1), so the add-on,
the CLI and the backend's OPEN check refuse the same lists (:class:`RefWeightsError`).
"""

from __future__ import annotations

import math
from typing import Any

from .limits import MAX_ARRAYS

#: The frame sides each built-in pipeline takes are multiples of this: the backend's OPEN
#: refuses other sizes; the render engine pads a frame of any size up to them and crops
#: the painting back.
SIZE_MULTIPLES: dict[str, int] = {"skin": 4, "sd15-controlnet": 8, "sdxl-controlnet": 8}

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


# An OPEN carries only its reference images as arrays: they are bounded by the array cap.
MAX_REFS = MAX_ARRAYS


class RefWeightsError(ValueError):
    """A ``ref_weights`` value the pipelines cannot use; the message says what to send."""


def ref_weights(value: Any, n_refs: int | None = None) -> list[float] | None:
    """``value`` checked as the ``ref_weights`` option: a list of floats, or None when
    absent. With ``n_refs`` (the references sent) its length must match. Raises
    :class:`RefWeightsError` in one line naming the problem and the fix."""
    if value is None:
        return None
    fix = "send one non-negative number per reference image, e.g. [1.0, 0.5]"
    if not isinstance(value, list | tuple):
        raise RefWeightsError(f"ref_weights {value!r} is not a list: {fix}")
    if len(value) > MAX_REFS:
        raise RefWeightsError(f"ref_weights has {len(value)} weights: at most {MAX_REFS} "
                              "reference images fit in one OPEN")
    out = []
    for i, w in enumerate(value):
        if isinstance(w, bool) or not isinstance(w, int | float) or not math.isfinite(w):
            raise RefWeightsError(f"ref_weights[{i}] {w!r} is not a number: {fix}")
        if w < 0:
            raise RefWeightsError(f"ref_weights[{i}] is {w!r}, below 0: {fix}")
        out.append(float(w))
    if n_refs is not None and len(out) != n_refs:
        raise RefWeightsError(f"ref_weights has {len(out)} weights for {n_refs} reference "
                              f"images: give exactly one per reference, in the same order")
    if out and not any(out):
        raise RefWeightsError("ref_weights are all 0: give at least one reference a weight "
                              "above 0, or send no references")
    return out


def normalized_ref_weights(value: Any, n_refs: int) -> list[float]:
    """The weights the pipelines average ``n_refs`` references' embeddings with: the
    checked ``ref_weights`` (equal when absent) divided by their sum; empty for no refs."""
    weights = ref_weights(value, n_refs)
    if n_refs == 0 and not weights:
        return []
    weights = weights or [1.0] * n_refs
    total = math.fsum(weights)
    return [w / total for w in weights]


def ref_weights_problem(options: dict[str, Any], n_refs: int) -> str | None:
    """Why ``options``' ``ref_weights`` cannot go with ``n_refs`` references (None: they
    can): the OPEN check once the reference arrays are counted."""
    try:
        ref_weights(options.get("ref_weights"), n_refs)
    except RefWeightsError as e:
        return str(e)
    return None


__all__ = ["CROSS_FRAME_MODES", "CROSS_FRAME_OFF", "MAX_REFS", "CrossFrameError",
           "RefWeightsError", "cross_frame_mode", "normalized_ref_weights", "ref_weights",
           "ref_weights_problem"]
