"""Procedural garment, skin and cape textures for the demo character (pure numpy).

The character is UV-mapped chart by chart (``demo.character``): each chart is a
body piece unrolled like a cylinder, so a texel knows where it sits on the body
as (``theta``, ``along``): the angle around the piece's axis (0 = the piece's
front line, + to the right seen from outside) and metres along the axis. The
painters here turn those coordinates into designs that a neural renderer has
to learn (checks and an emblem on the shirt, a face, seams, pockets and a belt
on the trousers, laced boots, a bordered cape with an emblem), plus a roughness
map in the alpha channel. Everything is deterministic from the seed.

Colours are computed in linear RGB (the material colours' space) and returned
sRGB-encoded, as an 8-bit sRGB image stores them.

This module is the entry point (:func:`paint`, :data:`PAINTERS`) and keeps every
public name; the parts live in :mod:`.noise`, :mod:`.shapes`,
:mod:`.design` (texels, palette, shared pieces), :mod:`.clothes`,
:mod:`.body` and :mod:`.atlas` (chart packing).
"""

from __future__ import annotations

import numpy as np

from .atlas import Packing, pack_charts
from .body import paint_hair, paint_skin
from .clothes import paint_cape, paint_shirt, paint_shoes, paint_trousers
from .design import ROUGHNESS, Palette, Texels
from .noise import Noise
from .shapes import linear_to_srgb

PAINTERS = {"shirt": paint_shirt, "skin": paint_skin, "trousers": paint_trousers,
            "shoes": paint_shoes, "hair": paint_hair, "cape": paint_cape}


def paint(region: str, tx: Texels, pal: Palette, nz: Noise, seed: int) -> np.ndarray:
    """RGBA float32: sRGB-encoded colour and roughness (alpha) of ``region``'s design."""
    rgb, rough = PAINTERS[region](tx, pal, nz, seed)
    out = np.empty((*tx.theta.shape, 4), dtype=np.float32)
    out[..., :3] = linear_to_srgb(rgb)
    out[..., 3] = np.clip(rough, 0.05, 1.0)
    return out


__all__ = ["PAINTERS", "ROUGHNESS", "Noise", "Packing", "Palette", "Texels",
           "linear_to_srgb", "pack_charts", "paint"]
