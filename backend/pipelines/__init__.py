"""Pipeline registry of the backend: a name -> factory(options, device).

A pipeline turns the control passes of one frame into an RGB image::

    pipe = create("echo", options, "cpu")
    rgb = pipe(passes, prompt="", negative_prompt="", seed=7, width=512, height=512,
               refs=[], options={}, callback=lambda step, steps: True, frame=3, state={})

``callback(step, steps)`` is called after each step (1..steps) and returns
False to stop: the pipeline then raises :class:`Cancelled` (the diffusers
``callback_on_step_end`` idea). Factories may be slow (loading weights,
downloading them) and are called on the backend's compute thread, never on the
socket loop, when a session OPENs: the OPEN is answered once the pipeline is
loaded, or with the error that kept it from loading, so a shot never starts on
a model that cannot run. A pipeline may also have ``prepare(width=, height=,
options=, refs=)`` (e.g. export ONNX graphs for the session's frame size and
number of reference images), called then too, and ``prepared(width=, height=,
options=, refs=) -> bool`` (True: OPENED at once).
Issue 5 adds the diffusion pipelines here; the backend never imports bpy.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

StepCallback = Callable[[int, int], bool]


class Cancelled(Exception):
    """Raised by a pipeline when its step callback asked it to stop."""


class Pipeline(Protocol):
    """``frame``: the frame number; ``state``: a dict private to the session that
    lives as long as it (temporal pipelines keep the previous frame there)."""

    def __call__(self, passes: dict[str, np.ndarray], *, prompt: str, negative_prompt: str,
                 seed: int, width: int, height: int, refs: list[np.ndarray],
                 options: dict[str, Any], callback: StepCallback, frame: int | None = None,
                 state: dict[str, Any] | None = None) -> np.ndarray: ...


Factory = Callable[[dict[str, Any], str], Pipeline]


@dataclass(frozen=True)
class Entry:
    """A registered pipeline. ``load_keys``: the options that change what the
    factory loads (the backend keeps one instance per distinct value);
    ``size_multiple``: width/height must be multiples of it."""

    name: str
    factory: Factory
    load_keys: tuple[str, ...] = ()
    size_multiple: int = 1
    check: Callable[[dict[str, Any]], list[str]] | None = None
    # What the factory uses for a load key the options leave out: an option given as
    # its default value shares the instance loaded without it (one copy in memory).
    load_defaults: dict[str, Any] = field(default_factory=dict)


REGISTRY: dict[str, Entry] = {}


def register(name: str, factory: Factory, load_keys: tuple[str, ...] = (),
             size_multiple: int = 1,
             check: Callable[[dict[str, Any]], list[str]] | None = None,
             load_defaults: dict[str, Any] | None = None) -> None:
    """Add a pipeline. ``check(options)``, when given, lists what keeps those
    options from loading (missing weights...); the backend calls it on OPEN
    and refuses the session with that text instead of failing on frame 0.
    ``load_defaults``: the factory's value for load keys the options omit."""
    REGISTRY[name] = Entry(name, factory, tuple(load_keys), size_multiple, check,
                           dict(load_defaults or {}))


def names() -> list[str]:
    return sorted(REGISTRY)


def get(name: str) -> Entry:
    """The entry for ``name``; KeyError names the known pipelines."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown pipeline {name!r}; this backend has: "
                       f"{', '.join(names())}") from None


def create(name: str, options: dict[str, Any] | None = None, device: str = "cpu") -> Pipeline:
    return get(name).factory(dict(options or {}), device)


def _register_builtin() -> None:
    from .echo import EchoPipeline

    register("echo", lambda options, device: EchoPipeline(device))
    # The skin model's code (numpy + onnxruntime to serve) is absent from the Blender
    # extension, which ships only the echo backend.
    if importlib.util.find_spec(__package__.rsplit(".", 1)[0] + ".skin") is not None:
        from .skin import LOAD_KEYS as SKIN_KEYS
        from .skin import check as skin_check
        from .skin import skin_factory

        register("skin", skin_factory, load_keys=SKIN_KEYS, size_multiple=4,
                 check=skin_check, load_defaults={"model": "demo"})
    from . import diffusion  # noqa: F401  (sd15-controlnet, when torch and diffusers import)


_register_builtin()
