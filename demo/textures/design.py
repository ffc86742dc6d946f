"""What every texture painter shares: where a texel lies on the body (:class:`Texels`),
the seeded colours (:class:`Palette`), the surfaces' roughness, and the pieces drawn
across a material boundary (cuff, hem, belt) or on several garments (trim, grain).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .noise import Noise
from .shapes import box, mix, shade, smooth_mask

Rgb = tuple[float, float, float]

# Roughness of the surfaces the design uses: skin, cloth, leather, hair.
ROUGHNESS: dict[str, float] = {"skin": 0.5, "cloth": 0.8, "leather": 0.35, "hair": 0.45}


@dataclass
class Texels:
    """Where each texel of one chart lies on the body (arrays of one shape).

    ``theta``: radians around the piece's axis, 0 on its front line; ``along``:
    metres along the axis from the chart's start; ``radius``: the chart's mean
    radius (``around = theta * radius``); ``length``: the nominal length of the
    piece; ``half_width``: for flat sheets (the cape) the half width at each texel.
    """

    chart: str
    theta: np.ndarray
    along: np.ndarray
    radius: float
    length: float
    half_width: np.ndarray | None = None
    around: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.around = self.theta * self.radius


@dataclass(frozen=True)
class Palette:
    """Linear-RGB colours of the design, varied slightly by the seed."""

    base: dict[str, Rgb]
    accent: Rgb  # emblem and trim gold
    iris: Rgb
    lips: Rgb

    @classmethod
    def from_seed(cls, base: dict[str, Rgb], seed: int) -> Palette:
        rng = np.random.default_rng([seed, 0xC0105])
        irises = [(0.05, 0.12, 0.30), (0.12, 0.05, 0.02), (0.06, 0.16, 0.06)]
        jitter = rng.uniform(-1, 1, 3) if seed else np.zeros(3)
        accent = tuple(float(c) for c in np.clip(np.array((0.80, 0.55, 0.10))
                                                 * (1 + 0.1 * jitter), 0, 1))
        return cls(dict(base), accent, irises[seed % len(irises)], (0.45, 0.10, 0.10))


# Bands painted alike on both sides of a material boundary: what a render shows
# is then the band's smooth edge, not the mesh's stair-stepped face boundary.
CUFF = (0.47, 0.62)  # the sleeve's cuff, as fractions of the upper arm (shirt ends ~0.55)
HEM = (0.80, 0.90)  # the trouser hem over the boot top, fractions of the shin (~0.86)
BELT = (-0.035, 0.012)  # metres about the shirt/trousers boundary on the torso


def trim_colour(tx: Texels, pal: Palette) -> np.ndarray:
    """The shirt's dark trim colour (collar, cuffs) at every texel."""
    colour = np.array(pal.base["shirt"], dtype=np.float32) * 0.28
    return np.broadcast_to(colour, (*tx.theta.shape, 3)).copy()


def paint_belt(tx: Texels, pal: Palette, y: np.ndarray, rgb: np.ndarray, rough: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray]:
    """A leather belt with a gold buckle; ``y``: metres above the shirt/trousers boundary."""
    x = tx.around
    belt = (y > BELT[0]) & (y < BELT[1])
    leather = np.array(pal.base["shoes"], dtype=np.float32) * 0.6
    rgb = mix(rgb, leather, belt)
    rough = np.where(belt, ROUGHNESS["leather"], rough)
    cy = (BELT[0] + BELT[1]) / 2
    buckle = smooth_mask(np.abs(box(x, y, 0.0, cy, 0.024, 0.021, 0.003)) - 0.0035, 0.001)
    rgb = mix(rgb, pal.accent, buckle)
    return rgb, np.where(buckle > 0.5, 0.2, rough)


def cloth_grain(tx: Texels, nz: Noise, rgb: np.ndarray) -> np.ndarray:
    grain = 1 + 0.10 * nz.fbm(tx.around, tx.along, 0.05, 3, tx.chart)
    weave = 1 + 0.04 * np.sin((tx.around + tx.along) * (2 * np.pi / 0.004))  # twill
    return shade(rgb, grain * weave)
