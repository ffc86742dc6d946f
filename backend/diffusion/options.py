"""The diffusion pipelines' option vocabulary, in one place: which options change what
a factory loads, the checks told on OPEN, and the one ``cross_frame`` parser.

Pure Python (no torch): the factories, the SDXL code, the ONNX engine and the OPEN
check all read their vocabulary here, so none of them imports another to learn it.
"""

from __future__ import annotations

from typing import Any

from ..pipelines.base import CROSS_FRAME_OFF

# The options that change what a factory loads (the backend keeps one pipeline per
# distinct value of them); everything else is per-frame.
LOAD_KEYS = ("model", "tiny", "tiny_seed", "tiny_controlnets", "dtype", "engine")
XL_LOAD_KEYS = ("model", "tiny", "tiny_seed", "tiny_controlnets", "union", "dtype", "engine")
ENGINES = ("torch", "onnx")
CROSS_FRAME_MODES = ("first", "previous")


def parse_cross_frame(mode: Any, default: str = "first") -> str | None:
    """The anchor of a ``cross_frame`` option: "first" or "previous"; None for off
    (:data:`~..pipelines.base.CROSS_FRAME_OFF`); True: ``default``. Raises ValueError
    naming the accepted values otherwise."""
    if mode in CROSS_FRAME_OFF:
        return None
    mode = default if mode is True else str(mode)
    if mode not in CROSS_FRAME_MODES:
        raise ValueError(f"cross_frame {mode!r}: use one of {', '.join(CROSS_FRAME_MODES)}, "
                         "true, \"off\" or absent")
    return mode


def engine_problem(options: dict[str, Any]) -> str | None:
    """What is wrong with ``options``' engine choice (None when nothing): told on OPEN
    rather than found on the first frame."""
    engine = options.get("engine", "torch")
    if engine not in ENGINES:
        return f"engine {engine!r} must be \"torch\" or \"onnx\""
    return None


def option_problems(options: dict[str, Any]) -> list[str]:
    """The checks of the options SD 1.5 and SDXL share (registry, steps, cross-frame,
    engine): told on OPEN, before the shot starts."""
    if "registry" in options:
        return ["option 'registry' is not accepted from clients: set PAINTED_SKIN_MODELS "
                "where the backend runs"]
    steps = options.get("steps", 4)
    if not isinstance(steps, int) or isinstance(steps, bool) or not 1 <= steps <= 100:
        return [f"steps {steps!r} must be a whole number from 1 to 100"]
    try:
        parse_cross_frame(options.get("cross_frame"))
    except ValueError as e:
        return [str(e)]
    problem = engine_problem(options)
    return [problem] if problem else []
