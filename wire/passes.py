"""The passes a FRAME may carry: the one table of names, dtypes and channels.

The add-on converts its passes with :func:`to_wire`, the client sizes its
shared-memory slots from :func:`bytes_per_pixel`, the server checks every pass
against :data:`WIRE_PASSES`, and docs/protocol.md's pass table is tested equal to it.
Table order is message order.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class WirePass:
    """One pass on the wire: ``channels`` 0 is one value a pixel, shape (H, W)."""

    name: str
    dtype: str
    channels: int
    # A yes/no a channel, sent as 0/255 bytes (PNG-ready, and a byte instead of a float).
    flag: bool = False
    # A canonical surface pass: sent only to pipelines that paint from them (skin).
    canonical: bool = False

    def shape(self, height: int, width: int) -> tuple[int, ...]:
        return (height, width, self.channels) if self.channels else (height, width)

    @property
    def bytes_per_pixel(self) -> int:
        return np.dtype(self.dtype).itemsize * max(1, self.channels)


WIRE_PASSES: dict[str, WirePass] = {p.name: p for p in (
    WirePass("depth", "float32", 0),  # +inf where empty
    WirePass("normal", "float16", 3),  # camera space
    WirePass("skeleton", "uint8", 3),  # the OpenPose drawing
    WirePass("mask", "uint8", 0, flag=True),
    WirePass("motion", "float16", 4),  # prev (u, v), next (u, v) in pixels
    WirePass("parts", "uint8", 0),  # body-part labels
    # UV and rest position stay float32 (a 1024² texture needs better than float16's
    # 5e-4 near 1.0); directions are float16 like the normal; one 0/255 byte per light.
    WirePass("rest_position", "float32", 3, canonical=True),
    WirePass("uv", "float32", 3, canonical=True),  # u, v, has_uv
    WirePass("normal_world", "float16", 3, canonical=True),
    WirePass("view_dir", "float16", 3, canonical=True),
    WirePass("light_visibility", "uint8", 4, flag=True, canonical=True),
    # The scene's direct light on a white surface, linear (may exceed 1: float16's range).
    WirePass("irradiance", "float16", 3, canonical=True),
    # The same lights reflected toward the camera by a glossy surface of the material's
    # roughness.
    WirePass("specular", "float16", 3, canonical=True),
    # The materials' base colour, linear 0..1.
    WirePass("albedo", "float16", 3, canonical=True),
)}

#: What the canonical passes' values mean: raised whenever the add-on computes them
#: differently (how the light, the gloss or the colour is worked out), so a skin model
#: records the values it learned (its config's ``pass_version``) and a model that learned
#: others is named when it paints these (it still paints them, with some loss). Counted
#: with the add-on's training-set version up to 16.
VALUES_VERSION = 16


def values_age(learned: object) -> str | None:
    """How the passes a model learned (its config's ``pass_version``: None when it did
    not record them) stand to these: "older", "newer", or None when they are these."""
    if learned == VALUES_VERSION and not isinstance(learned, bool):
        return None
    newer = isinstance(learned, int) and not isinstance(learned, bool) and learned > VALUES_VERSION
    return "newer" if newer else "older"


CONTROL_PASSES = tuple(n for n, p in WIRE_PASSES.items() if not p.canonical)
CANONICAL_PASSES = tuple(n for n, p in WIRE_PASSES.items() if p.canonical)


def bytes_per_pixel(names: Iterable[str] | None = None) -> int:
    """Bytes a pixel of the passes ``names`` (None: all of them) takes on the wire."""
    return sum(WIRE_PASSES[n].bytes_per_pixel for n in (WIRE_PASSES if names is None else names))


def to_wire(name: str, values: np.ndarray) -> np.ndarray:
    """Pass ``name`` in its wire dtype, C-contiguous: a flag pass is 255 where the
    value is over 0.5, else 0."""
    p = WIRE_PASSES[name]
    if p.flag:
        on = np.asarray(values, np.float32) > 0.5
        return np.ascontiguousarray(on.astype(np.uint8) * np.uint8(255))
    return np.ascontiguousarray(values, p.dtype)
