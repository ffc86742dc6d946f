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

#: Files up to this size are identified by all their bytes; larger ones (base weights of
#: several GB) by their size and three 1 MiB samples (start, middle, end): a retrain
#: changes every tensor, and the identity stays the same on every machine that holds
#: the same bytes (unlike a modification time), at a few ms per file.
FULL_HASH_LIMIT = 8 * 1024 * 1024
SAMPLE = 1024 * 1024


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


def _digest_file(h: Any, path: Path, size: int) -> None:
    with open(path, "rb") as f:
        if size <= FULL_HASH_LIMIT:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
            return
        for offset in (0, size // 2 - SAMPLE // 2, size - SAMPLE):
            f.seek(offset)
            h.update(f.read(SAMPLE))


def files_identity(paths: Iterable[str | os.PathLike], prefix: str = "",
                   root: str | os.PathLike | None = None) -> str:
    """A short digest that changes when any of ``paths`` (files; a missing one counts
    as missing) changes: their names (relative to ``root``, else the file name), sizes
    and bytes (sampled above :data:`FULL_HASH_LIMIT`). Computed once when a pipeline
    loads, it is the ``model_id`` that OPENED carries: a client resuming a shot
    compares it with the one that painted the frames already on disk, so it must be
    the same for the same bytes on any backend (farm nodes hold copies)."""
    files = sorted(Path(p) for p in paths)
    h = hashlib.blake2b(prefix.encode(), digest_size=16)
    for p in files:
        name = p.relative_to(root).as_posix() if root is not None else p.name
        h.update(f"\0{name}\0".encode())
        try:
            size = p.stat().st_size if p.is_file() else -1
            if size < 0:
                h.update(b"missing")
                continue
            h.update(f"{size}:".encode())
            _digest_file(h, p, size)
        except OSError:  # unreadable now: an identity that matches nothing stored
            h.update(b"unreadable")
    return "blake2b:" + h.hexdigest()


def model_id(pipe: object) -> str | None:
    """The identity of what ``pipe`` paints with (its ``model_id``; None: it has none)."""
    mid = getattr(pipe, "model_id", None)
    return mid if isinstance(mid, str) and mid else None


def opened_fields(pipe: object) -> dict[str, str]:
    """What OPENED tells about a loaded ``pipe``: its ``model_id`` and its ``notice`` (one
    line the user should read before the shot, e.g. a model that learned other passes),
    each where it has one."""
    fields = {"model_id": model_id(pipe), "notice": getattr(pipe, "notice", None)}
    return {k: v for k, v in fields.items() if isinstance(v, str) and v}
