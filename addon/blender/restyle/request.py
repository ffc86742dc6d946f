"""One restyle, as a record: what the CLI's arguments, the panel's settings and the farm
entry each describe, built once, checked once and passed whole to
:func:`~.loop.restyle_shot` (and to whatever else paints a shot), so the three front ends
cannot drift apart on a default or a check.

No bpy: the record is plain data (the reference images are uint8 RGB arrays), so it is
built and checked before a shot is opened."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from ....wire.endpoints import DEFAULT_URL
from ....wire.limits import MAX_SIDE

ENGINES = ("fast", "cycles")
SEED_RANGE = (-2**63, 2**64 - 1)  # what a backend's OPEN takes


class RequestError(ValueError):
    """A restyle request that cannot run; the message says which field and how to fix it."""


@dataclass(frozen=True)
class RestyleRequest:
    """A shot to restyle: where its frames go, which frames, how big, through which
    backend and pipeline, with which prompts, seed, options and reference images.

    ``frames`` None: the scene's range. ``size``: (width, height), or one int for a square.
    ``chain_start``: where a temporal shot's chain begins (default: the first frame), so
    farm chunks given the shot's first frame paint what one run would. ``keys``: CurveZMQ
    keys, or a ``painted-skin keys`` folder (a backend that is not on this machine)."""

    out: Path
    url: str = DEFAULT_URL
    frames: tuple[int, ...] | None = None
    size: tuple[int, int] = (512, 512)
    pipeline: str = "echo"
    prompt: str = ""
    negative_prompt: str = ""
    seed: int = 0
    options: Mapping[str, Any] = field(default_factory=dict)
    refs: tuple[np.ndarray, ...] = ()
    keys: Any = None
    engine: str = "fast"
    timeout_s: float = 30.0
    chain_start: int | None = None

    @classmethod
    def make(cls, out: str | Path, *, frames: Iterable[int] | None = None,
             size: int | tuple[int, int] = 512, refs: Iterable[np.ndarray] = (),
             options: Mapping[str, Any] | None = None, **fields: Any) -> RestyleRequest:
        """The request from loose values (an int size, any iterable of frames or
        references), checked."""
        return cls(out=Path(out), frames=None if frames is None else tuple(frames),
                   size=(size, size) if isinstance(size, int) else tuple(size),
                   refs=tuple(refs), options=dict(options or {}), **fields).checked()

    def checked(self) -> RestyleRequest:
        """This request, or :class:`RequestError` naming the first field that is wrong."""
        w, h = self.size if len(self.size) == 2 else (None, None)
        if not all(_is_int(v) and 0 < v <= MAX_SIDE for v in (w, h)):
            raise RequestError(f"size {self.size!r}: width and height must be whole numbers "
                               f"in 1..{MAX_SIDE}")
        if not isinstance(self.pipeline, str) or not self.pipeline.strip():
            raise RequestError("no pipeline is given: name one (echo, skin, sd15-controlnet, "
                               "...; the backend's status lists what it runs)")
        if not isinstance(self.prompt, str) or not isinstance(self.negative_prompt, str):
            raise RequestError("the prompt and the negative prompt must be text")
        if not _is_int(self.seed) or not SEED_RANGE[0] <= self.seed <= SEED_RANGE[1]:
            raise RequestError(f"seed {self.seed!r}: give a whole number in "
                               f"{SEED_RANGE[0]}..{SEED_RANGE[1]}")
        if self.engine not in ENGINES:
            raise RequestError(f"engine {self.engine!r}: use one of {', '.join(ENGINES)}")
        if not (isinstance(self.timeout_s, (int, float)) and math.isfinite(self.timeout_s)
                and self.timeout_s > 0):
            raise RequestError(f"timeout {self.timeout_s!r}: give a number of seconds above 0")
        if self.frames is not None and not all(_is_int(f) for f in self.frames):
            raise RequestError("frames must be whole numbers")
        if self.chain_start is not None and not _is_int(self.chain_start):
            raise RequestError(f"chain start {self.chain_start!r} must be a frame number")
        if not isinstance(self.options, Mapping):
            raise RequestError("options must be a table of names and values")
        for n, ref in enumerate(self.refs, 1):
            if not (isinstance(ref, np.ndarray) and ref.dtype == np.uint8 and ref.ndim == 3
                    and ref.shape[2] == 3):
                raise RequestError(f"reference image {n} must be uint8 RGB (height, width, 3)")
        return self

    def with_(self, **changes: Any) -> RestyleRequest:
        """A copy with ``changes``, checked."""
        return replace(self, **changes).checked()


def _is_int(v: object) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)
