"""What the panel knows of a backend: its last STATUS reply, parsed, and the pipeline and
model dropdown items made from it.

Pure Python (no bpy): the add-on never imports the backend, so the names it offers come
from what the backend says (its STATUS reply) or, before any reply, from the fallback
list below, kept in step with ``backend/pipelines/registry.py`` by a test.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

# The built-in pipelines (``register_builtin``) and what each paints: the dropdown before a
# backend has answered, and the descriptions of those names once one has.
FALLBACK_PIPELINES: dict[str, str] = {
    "echo": "Test pattern from the passes (no model; checks the connection)",
    "skin": "The character's own skin model (numpy + onnxruntime, no torch)",
    "sd15-controlnet": "Stable Diffusion 1.5 with depth, normal and OpenPose ControlNets",
    "sdxl-controlnet": "Stable Diffusion XL with ControlNets",
}
# The registry names each pipeline loads by default (backend registry.toml files).
FALLBACK_MODELS: dict[str, tuple[str, ...]] = {
    "skin": ("demo",),
    "sd15-controlnet": ("sd15",),
    "sdxl-controlnet": ("sdxl",),
}
CUSTOM = "__custom__"  # the dropdown item that shows a free-text field instead
DEFAULT_MODEL = ""  # the model field's value for "the pipeline's default"
# ...and its dropdown item: Blender reads an empty enum identifier as a separator.
DEFAULT_ITEM = "__default__"

Item = tuple[str, str, str]  # (identifier, label, tooltip): an EnumProperty item

# One ``loaded_models`` entry: "pipeline@device" then its load options ("model=\"sd15\"").
_LOADED = re.compile(r'^(?P<pipe>[^@\s]+)@\S+(?P<load>.*)$')
_MODEL_OPT = re.compile(r'\bmodel=("(?:[^"\\]|\\.)*")')


@dataclass(frozen=True)
class BackendStatus:
    """One STATUS reply (or a failed ping: ``error`` set), as the panel shows it."""

    url: str
    error: str | None = None
    version: str = "?"
    devices: tuple[str, ...] = ()
    pipelines: tuple[str, ...] = ()
    models: dict[str, tuple[str, ...]] = field(default_factory=dict)  # loaded now
    available: dict[str, tuple[str, ...]] = field(default_factory=dict)  # its registries
    queue_depth: int = 0
    sessions: int = 0

    @property
    def ok(self) -> bool:
        return self.error is None

    def line(self) -> str:
        """The panel's one-line summary."""
        if not self.ok:
            return f"no backend at {self.url}"
        devices = ", ".join(self.devices) or "?"
        return (f"{self.url}: v{self.version}, {devices}, queue {self.queue_depth}, "
                f"{self.sessions} session(s)")


def _strings(value: Any) -> tuple[str, ...]:
    return tuple(str(v) for v in value) if isinstance(value, (list, tuple)) else ()


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def loaded_models(entries: Any) -> dict[str, tuple[str, ...]]:
    """Models per pipeline from STATUS ``loaded_models`` (``skin@cpu model="scene"``);
    an entry without a ``model`` load option is the pipeline's default (not listed)."""
    out: dict[str, list[str]] = {}
    for entry in _strings(entries):
        m = _LOADED.match(entry.strip())
        if m is None:
            continue
        opt = _MODEL_OPT.search(m["load"])
        if opt is None:
            continue
        try:
            name = json.loads(opt[1])
        except ValueError:
            continue
        if isinstance(name, str) and name and name not in out.setdefault(m["pipe"], []):
            out[m["pipe"]].append(name)
    return {k: tuple(v) for k, v in out.items()}


def parse_status(url: str, reply: dict[str, Any]) -> BackendStatus:
    """A STATUS reply header as a :class:`BackendStatus`; fields of the wrong type read as
    absent (an older or newer backend must never break the panel). ``models`` are the
    loaded ones (``loaded_models``); ``available`` the ``models`` object
    ({pipeline: [names]}) of the backend's registries, where it sends one."""
    given = reply.get("models")
    available = {str(p): _strings(n) for p, n in given.items()} \
        if isinstance(given, dict) else {}
    return BackendStatus(url=url, version=str(reply.get("version", "?")),
                         devices=_strings(reply.get("devices")),
                         pipelines=_strings(reply.get("pipelines")),
                         models=loaded_models(reply.get("loaded_models")),
                         available=available,
                         queue_depth=_int(reply.get("queue_depth")),
                         sessions=_int(reply.get("sessions")))


def pipeline_items(status: BackendStatus | None, current: str) -> list[Item]:
    """The Pipeline dropdown: the backend's pipelines (the fallback list before it has
    answered), the saved value even when the backend lacks it, then "Custom…"."""
    names = list(status.pipelines) if status is not None and status.ok and status.pipelines \
        else list(FALLBACK_PIPELINES)
    items = [(n, n, FALLBACK_PIPELINES.get(n, "A pipeline this backend serves"))
             for n in names]
    if current and current not in names:
        items.append((current, current, "Saved in this .blend; the backend does not list it"
                      if status is not None and status.ok else "Saved in this .blend"))
    items.append((CUSTOM, "Custom…", "Type a pipeline name the backend serves"))
    return items


def model_items(status: BackendStatus | None, pipeline: str, current: str) -> list[Item]:
    """The Model dropdown for ``pipeline``: its default, the registry names it loads by
    default, those the backend reports for it, the saved value, then "Custom…"."""
    items: list[Item] = [(DEFAULT_ITEM, "Default", "The pipeline's default model")]
    names = list(FALLBACK_MODELS.get(pipeline, ()))
    if status is not None and status.ok:
        for group in (status.available, status.models):
            names += [n for n in group.get(pipeline, ()) if n not in names]
    items += [(n, n, f"Registry model {n!r} of the {pipeline} pipeline") for n in names]
    if current and current not in names:
        items.append((current, current, "Saved in this .blend"))
    items.append((CUSTOM, "Custom…", "Type a registry model name"))
    return items


class PollGate:
    """When the next background status ping is due: one at a time, ``interval_s`` apart
    (the panel's timer ticks more often than it pings)."""

    def __init__(self, interval_s: float = 2.0) -> None:
        self.interval_s = interval_s
        self._last: float | None = None
        self.in_flight = False

    def due(self, now: float) -> bool:
        return not self.in_flight and (self._last is None or now - self._last >= self.interval_s)

    def started(self, now: float) -> None:
        self._last, self.in_flight = now, True

    def finished(self) -> None:
        self.in_flight = False
