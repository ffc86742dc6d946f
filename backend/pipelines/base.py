"""The pipeline contract: what the server calls, what a pipeline may tell it.

A pipeline turns the control passes of one frame into an RGB image::

    rgb = pipe(passes, prompt="", negative_prompt="", seed=7, width=512, height=512,
               refs=[], options={}, callback=lambda step, steps: True, frame=3, state={})

``callback(step, steps)`` is called after each step (1..steps) and returns False to
stop: the pipeline then raises :class:`Cancelled` (the diffusers
``callback_on_step_end`` idea). A pipeline may also have ``prepare(width=, height=,
options=, refs=)`` (e.g. export ONNX graphs for the session's frame size), called on
OPEN, and ``prepared(...) -> bool`` (True: OPENED at once).

This module imports nothing heavy (no torch, no onnxruntime), so the server, the echo
pipeline and the diffusion code all share it without importing one another.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

# The values of ``cross_frame`` that mean "off": the wire's (the add-on's chain rule, the
# OPEN check and the pipelines read the same), re-exported for the cache rule here.
from ...wire.options import CROSS_FRAME_OFF as CROSS_FRAME_OFF

StepCallback = Callable[[int, int], bool]

#: Above this many bytes a model's files are identified by their size and mtime_ns
#: instead of their bytes (hashing runs at ~1 GB/s: this keeps a load under a second).
HASH_LIMIT = 512 * 1024 * 1024


class Cancelled(Exception):
    """Raised by a pipeline when its step callback asked it to stop."""


class Pipeline(Protocol):
    """``frame``: the frame number; ``state``: a dict private to the session that lives
    as long as it (temporal pipelines keep the previous frame there). A pipeline whose
    picture depends on more than the frame's passes (that previous frame, a cross-frame
    anchor) sets ``stateful = True``: the server then never answers its frames from the
    result cache (see :func:`may_cache`)."""

    def __call__(self, passes: dict[str, np.ndarray], *, prompt: str, negative_prompt: str,
                 seed: int, width: int, height: int, refs: list[np.ndarray],
                 options: dict[str, Any], callback: StepCallback, frame: int | None = None,
                 state: dict[str, Any] | None = None) -> np.ndarray: ...


Factory = Callable[[dict[str, Any], str], Pipeline]


@dataclass(frozen=True)
class Entry:
    """A registered pipeline. ``load_keys``: the options that change what the factory
    loads (the backend keeps one instance per distinct value); ``size_multiple``:
    width/height must be multiples of it; ``check(options)`` lists what keeps those
    options from loading (told on OPEN instead of failing on frame 0);
    ``load_defaults``: the factory's value for a load key the options leave out (an
    option given as its default shares the instance loaded without it); ``models()``:
    the names its ``model`` option takes here (its registry's), for the add-on's menus."""

    name: str
    factory: Factory
    load_keys: tuple[str, ...] = ()
    size_multiple: int = 1
    check: Callable[[dict[str, Any]], list[str]] | None = None
    load_defaults: dict[str, Any] = field(default_factory=dict)
    models: Callable[[], list[str]] | None = None


def may_cache(pipe: object, options: dict[str, Any]) -> bool:
    """Whether a frame of ``pipe`` under ``options`` may be answered from (and stored
    in) the result cache: only when its picture depends on its passes and settings
    alone. A temporal frame depends on the previous output and a cross-frame one on its
    anchor (both kept in the session's state), so a cached answer would be wrong — and
    would skip recording the anchor the next frames attend to."""
    if options.get("cache", True) is False:
        return False
    if not getattr(pipe, "stateful", False):
        return True
    return not options.get("temporal", True) and \
        options.get("cross_frame") in CROSS_FRAME_OFF


def files_identity(paths: Iterable[str | os.PathLike], prefix: str = "",
                   hash_limit: int = HASH_LIMIT) -> str:
    """A short digest that changes when any of ``paths`` (files; a missing one counts
    as missing) changes: their names and bytes (blake2b), or, when together they
    exceed ``hash_limit`` bytes, their sizes and mtime_ns. Computed once when a
    pipeline loads, it is the ``model_id`` that OPENED carries: a client resuming a
    shot compares it with the one that painted the frames already on disk."""
    files = sorted(Path(p) for p in paths)
    stats = {p: p.stat() if p.is_file() else None for p in files}
    by_bytes = sum(st.st_size for st in stats.values() if st is not None) <= hash_limit
    h = hashlib.blake2b(prefix.encode(), digest_size=16)
    for p, st in stats.items():
        h.update(f"\0{p.name}\0".encode())
        if st is None:
            h.update(b"missing")
        elif by_bytes:
            with open(p, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
        else:
            h.update(f"{st.st_size}:{st.st_mtime_ns}".encode())
    return ("blake2b:" if by_bytes else "stat:") + h.hexdigest()


def model_id(pipe: object) -> str | None:
    """The identity of what ``pipe`` paints with (its ``model_id``; None: it has none)."""
    mid = getattr(pipe, "model_id", None)
    return mid if isinstance(mid, str) and mid else None
