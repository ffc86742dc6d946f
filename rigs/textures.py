"""Procedural garment, skin and cape textures for the demo character (pure numpy).

The character is UV-mapped chart by chart (``rigs.character``): each chart is a
body piece unrolled like a cylinder, so a texel knows where it sits on the body
as (``theta``, ``along``): the angle around the piece's axis (0 = the piece's
front line, + to the right seen from outside) and metres along the axis. The
painters here turn those coordinates into designs that a neural renderer has
to learn (checks and an emblem on the shirt, a face, seams, pockets and a belt
on the trousers, laced boots, a bordered cape with an emblem), plus a roughness
map in the alpha channel. Everything is deterministic from the seed.

Colours are computed in linear RGB (the material colours' space) and returned
sRGB-encoded, as an 8-bit sRGB image stores them.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

import numpy as np

Rgb = tuple[float, float, float]

# Roughness of the surfaces the issue names: skin, cloth, leather.
ROUGHNESS: dict[str, float] = {"skin": 0.5, "cloth": 0.8, "leather": 0.35, "hair": 0.45}


# --------------------------------------------------------------------------- noise


class Noise:
    """Smooth value noise from a seeded lattice; continuous in metres, tiled at 256 cells."""

    def __init__(self, seed: int) -> None:
        self.table = np.random.default_rng([seed, 0x5EED]).random((256, 256)).astype(np.float32)

    def value(self, x: np.ndarray, y: np.ndarray, cell: float, salt: str = "") -> np.ndarray:
        """Noise in [0, 1] with features ``cell`` metres wide; ``salt`` decorrelates uses."""
        off = zlib.crc32(salt.encode()) % 65536
        x = np.asarray(x, dtype=np.float32) * np.float32(1 / cell) + np.float32(off % 256)
        y = np.asarray(y, dtype=np.float32) * np.float32(1 / cell) + np.float32(off // 256)
        x0, y0 = np.floor(x), np.floor(y)
        fx, fy = x - x0, y - y0
        fx, fy = fx * fx * (3 - 2 * fx), fy * fy * (3 - 2 * fy)
        i0, j0 = x0.astype(np.int32) & 255, (y0.astype(np.int32) & 255) << 8
        i1, j1 = (i0 + 1) & 255, (j0 + 256) & 0xFF00
        t = self.table.ravel()
        a, b = t[j0 | i0], t[j0 | i1]
        c, d = t[j1 | i0], t[j1 | i1]
        a += (b - a) * fx
        c += (d - c) * fx
        return a + (c - a) * fy

    def fbm(self, x: np.ndarray, y: np.ndarray, cell: float, octaves: int = 3,
            salt: str = "") -> np.ndarray:
        """Fractal sum of ``octaves`` noise layers, centred on 0 (about -0.5 .. 0.5)."""
        total, amp, norm = np.zeros_like(x, dtype=np.float32), 1.0, 0.0
        for o in range(octaves):
            total += amp * (self.value(x, y, cell / 2**o, f"{salt}{o}") - 0.5)
            norm += amp
            amp *= 0.5
        return total / norm


# --------------------------------------------------------------------------- shapes


def _smooth_mask(d: np.ndarray, aa: float) -> np.ndarray:
    """1 inside (d < 0), 0 outside, with a soft edge ``aa`` metres wide."""
    return np.clip(0.5 - d / max(aa, 1e-9), 0.0, 1.0).astype(np.float32)


def _ellipse(x: np.ndarray, y: np.ndarray, cx: float, cy: float, rx: float, ry: float
             ) -> np.ndarray:
    """Approximate signed distance (metres) to an axis-aligned ellipse."""
    k = np.hypot((x - cx) / rx, (y - cy) / ry)
    return (k - 1.0) * min(rx, ry)


def _segment(x: np.ndarray, y: np.ndarray, a: tuple[float, float], b: tuple[float, float]
             ) -> np.ndarray:
    """Distance to the segment a-b."""
    ax, ay = a
    dx, dy = b[0] - ax, b[1] - ay
    t = np.clip(((x - ax) * dx + (y - ay) * dy) / (dx * dx + dy * dy + 1e-12), 0.0, 1.0)
    return np.hypot(x - ax - t * dx, y - ay - t * dy)


def _box(x: np.ndarray, y: np.ndarray, cx: float, cy: float, hx: float, hy: float,
         r: float = 0.0) -> np.ndarray:
    """Signed distance to a rectangle with corner radius ``r``."""
    qx = np.abs(x - cx) - hx + r
    qy = np.abs(y - cy) - hy + r
    return (np.hypot(np.maximum(qx, 0), np.maximum(qy, 0))
            + np.minimum(np.maximum(qx, qy), 0) - r)


def _star(x: np.ndarray, y: np.ndarray, cx: float, cy: float, r_out: float, r_in: float,
          points: int = 5) -> np.ndarray:
    """1 inside a star polygon (an even-odd crossing test on its 2n corners)."""
    ang = np.pi / 2 + np.arange(2 * points) * np.pi / points
    rad = np.where(np.arange(2 * points) % 2 == 0, r_out, r_in)
    vx, vy = cx + rad * np.cos(ang), cy + rad * np.sin(ang)
    inside = np.zeros(x.shape, dtype=bool)
    for i in range(len(vx)):
        x0, y0, x1, y1 = vx[i - 1], vy[i - 1], vx[i], vy[i]
        crosses = (y0 > y) != (y1 > y)
        xi = x0 + (y - y0) * (x1 - x0) / (y1 - y0 + 1e-12)
        inside ^= crosses & (x < xi)
    return inside.astype(np.float32)


def _stitches(along: np.ndarray, d: np.ndarray, width: float, period: float) -> np.ndarray:
    """A dashed thread line: ``d`` is the distance to the line, ``along`` runs beside it."""
    dash = (np.mod(along, period) < 0.6 * period).astype(np.float32)
    return _smooth_mask(d - width / 2, width / 3) * dash


def _mix(rgb: np.ndarray, colour, weight: np.ndarray) -> np.ndarray:
    """``rgb`` blended toward ``colour`` by ``weight`` (0..1)."""
    w = np.asarray(weight, dtype=np.float32)[..., None]
    return rgb + (np.asarray(colour, dtype=np.float32) - rgb) * w


def _shade(rgb: np.ndarray, factor: np.ndarray) -> np.ndarray:
    return rgb * np.asarray(factor, dtype=np.float32)[..., None]


def linear_to_srgb(c: np.ndarray) -> np.ndarray:
    c = np.clip(c, 0.0, 1.0)
    return np.where(c <= 0.0031308, 12.92 * c, 1.055 * np.power(c, 1 / 2.4) - 0.055)


# --------------------------------------------------------------------------- texels


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


# --------------------------------------------------------------------------- painters


# Bands painted alike on both sides of a material boundary: what a render shows
# is then the band's smooth edge, not the mesh's stair-stepped face boundary.
CUFF = (0.47, 0.62)  # the sleeve's cuff, as fractions of the upper arm (shirt ends ~0.55)
HEM = (0.80, 0.90)  # the trouser hem over the boot top, fractions of the shin (~0.86)
BELT = (-0.035, 0.012)  # metres about the shirt/trousers boundary on the torso
_HAIR_OFFSET = 0.022 / 0.198  # the hair blob's centre sits this much of its height higher


def _hairline(theta: np.ndarray) -> np.ndarray:
    """Height of the hairline above the head's centre (metres), a fringe at the front."""
    back = ((1 - np.cos(theta)) / 2) ** 0.7
    return 0.05 - 0.13 * back + 0.004 * np.sin(11 * theta) * (1 - back)


def _trim(tx: Texels, pal: Palette) -> np.ndarray:
    """The shirt's dark trim colour (collar, cuffs) at every texel."""
    colour = np.array(pal.base["shirt"], dtype=np.float32) * 0.28
    return np.broadcast_to(colour, (*tx.theta.shape, 3)).copy()


def _belt(tx: Texels, pal: Palette, y: np.ndarray, rgb: np.ndarray, rough: np.ndarray
          ) -> tuple[np.ndarray, np.ndarray]:
    """A leather belt with a gold buckle; ``y``: metres above the shirt/trousers boundary."""
    x = tx.around
    belt = (y > BELT[0]) & (y < BELT[1])
    leather = np.array(pal.base["shoes"], dtype=np.float32) * 0.6
    rgb = _mix(rgb, leather, belt)
    rough = np.where(belt, ROUGHNESS["leather"], rough)
    cy = (BELT[0] + BELT[1]) / 2
    buckle = _smooth_mask(np.abs(_box(x, y, 0.0, cy, 0.024, 0.021, 0.003)) - 0.0035, 0.001)
    rgb = _mix(rgb, pal.accent, buckle)
    return rgb, np.where(buckle > 0.5, 0.2, rough)


def _cloth_grain(tx: Texels, nz: Noise, rgb: np.ndarray) -> np.ndarray:
    grain = 1 + 0.10 * nz.fbm(tx.around, tx.along, 0.05, 3, tx.chart)
    weave = 1 + 0.04 * np.sin((tx.around + tx.along) * (2 * np.pi / 0.004))  # twill
    return _shade(rgb, grain * weave)


def paint_shirt(tx: Texels, pal: Palette, nz: Noise, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Checks (gingham with pinstripes), a collar and hem band, cuffs and a chest emblem."""
    base = np.array(pal.base["shirt"], dtype=np.float32)
    dark = base * 0.35
    light = np.array((0.85, 0.85, 0.80), dtype=np.float32)
    period = 0.055 + 0.01 * (seed % 3)
    x, y = tx.around, tx.along
    band_x = (np.mod(x, period) < 0.4 * period).astype(np.float32)
    band_y = (np.mod(y, period) < 0.4 * period).astype(np.float32)
    rgb = np.broadcast_to(base, (*x.shape, 3)).copy()
    rgb = _mix(rgb, dark, 0.45 * band_x + 0.45 * band_y)
    pin = np.minimum(np.abs(np.mod(x, period) - 0.7 * period),
                     np.abs(np.mod(y, period) - 0.7 * period))
    rgb = _mix(rgb, light, 0.8 * _smooth_mask(pin - 0.0015, 0.001))
    rough = np.full(x.shape, ROUGHNESS["cloth"], dtype=np.float32)
    if tx.chart == "torso":
        rgb = _mix(rgb, _trim(tx, pal), (y > tx.length - 0.025).astype(np.float32))
        # Chest emblem: a gold disc with the shirt's dark star in it.
        cy = 0.21 * tx.length / 0.40
        disc = _smooth_mask(_ellipse(x, y, 0.0, cy, 0.058, 0.058), 0.002)
        ring = _smooth_mask(np.abs(_ellipse(x, y, 0.0, cy, 0.050, 0.050)) - 0.003, 0.001)
        star = _star(x, y, 0.0, cy, 0.042, 0.017, 5 + seed % 2)
        rgb = _mix(rgb, pal.accent, disc)
        rgb = _mix(rgb, dark, np.maximum(ring, star) * disc)
        rough = np.where(disc > 0.5, 0.4, rough)
    if tx.chart.startswith("upper_arm"):
        rgb = _mix(rgb, _trim(tx, pal), (y > CUFF[0] * tx.length).astype(np.float32))
    rgb = _cloth_grain(tx, nz, rgb)
    if tx.chart == "torso":  # tucked in under the belt
        rgb, rough = _belt(tx, pal, y, rgb, rough)
    return rgb, rough


def _face(tx: Texels, pal: Palette, rgb: np.ndarray, rough: np.ndarray) -> None:
    """Eyes, brows, mouth and cheeks on the head chart (0 = the face's centre line)."""
    x = tx.around
    y = tx.along - tx.length / 2  # metres above the head's centre
    hair = np.array(pal.base["hair"], dtype=np.float32)
    blush = _smooth_mask(np.minimum(_ellipse(x, y, -0.045, -0.012, 0.02, 0.015),
                                    _ellipse(x, y, 0.045, -0.012, 0.02, 0.015)), 0.02)
    rgb[:] = _mix(rgb, (0.60, 0.22, 0.18), 0.35 * blush)
    for sx in (-1.0, 1.0):
        ex, ey = 0.033 * sx, 0.017
        white = _smooth_mask(_ellipse(x, y, ex, ey, 0.015, 0.008), 0.001)
        iris = _smooth_mask(_ellipse(x, y, ex, ey, 0.0068, 0.0068), 0.0008) * white
        pupil = _smooth_mask(_ellipse(x, y, ex, ey, 0.003, 0.003), 0.0006)
        lid = _smooth_mask(np.abs(_ellipse(x, y, ex, ey + 0.001, 0.016, 0.009)) - 0.0011,
                           0.0008) * (y > ey - 0.002)
        rgb[:] = _mix(rgb, (0.85, 0.83, 0.80), white)
        rgb[:] = _mix(rgb, pal.iris, iris)
        rgb[:] = _mix(rgb, (0.01, 0.01, 0.01), np.maximum(pupil, lid))
        rough[:] = np.where(white > 0.5, 0.15, rough)
        brow = _segment(x, y, (ex - 0.017 * sx, ey + 0.016), (ex + 0.006 * sx, ey + 0.022))
        brow = np.minimum(brow, _segment(x, y, (ex + 0.006 * sx, ey + 0.022),
                                         (ex + 0.018 * sx, ey + 0.017)))
        rgb[:] = _mix(rgb, hair, _smooth_mask(brow - 0.0032, 0.001))
    my = -0.040
    lips = _smooth_mask(_ellipse(x, y, 0.0, my, 0.023, 0.0065), 0.001)
    line = _smooth_mask(_segment(x, y, (-0.022, my), (0.022, my)) - 0.0009, 0.0006)
    rgb[:] = _mix(rgb, pal.lips, lips)
    rgb[:] = _mix(rgb, (0.08, 0.01, 0.01), line)
    rough[:] = np.where(lips > 0.5, 0.3, rough)


def paint_skin(tx: Texels, pal: Palette, nz: Noise, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Mottled skin; the head chart carries the face."""
    base = np.array(pal.base["skin"], dtype=np.float32)
    f = 1 + 0.12 * nz.fbm(tx.around, tx.along, 0.04, 3, tx.chart)
    rgb = _shade(np.broadcast_to(base, (*tx.theta.shape, 3)).copy(), f)
    rough = (ROUGHNESS["skin"] + 0.08 * nz.fbm(tx.around, tx.along, 0.03, 2, "r" + tx.chart)
             ).astype(np.float32)
    if tx.chart == "head":
        _face(tx, pal, rgb, rough)
        y = tx.along - tx.length / 2
        hair = y > _hairline(tx.theta)
        h_rgb, h_rough = _hair_colour(tx.theta, y, pal, nz)
        rgb, rough = np.where(hair[..., None], h_rgb, rgb), np.where(hair, h_rough, rough)
        # The shirt's roll collar covers the neck; its top edge runs round under the jaw.
        edge = (-0.105 + 0.035 * (1 - np.cos(tx.theta)) / 2) * tx.length / 0.224
        collar = tx.along - tx.length / 2 < edge
        rgb = np.where(collar[..., None], _cloth_grain(tx, nz, _trim(tx, pal)), rgb)
        rough = np.where(collar, ROUGHNESS["cloth"], rough)
    elif tx.chart.startswith("upper_arm"):  # the cuff's lower part
        cuff = tx.along < CUFF[1] * tx.length
        rgb = np.where(cuff[..., None], _cloth_grain(tx, nz, _trim(tx, pal)), rgb)
        rough = np.where(cuff, ROUGHNESS["cloth"], rough)
    return rgb, rough


def _trouser_colour(tx: Texels, pal: Palette) -> np.ndarray:
    base = np.array(pal.base["trousers"], dtype=np.float32) * (0.9, 1.0, 1.4)
    return np.broadcast_to(base, (*tx.theta.shape, 3)).copy()


def paint_trousers(tx: Texels, pal: Palette, nz: Noise, seed: int
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Twill with stitched side seams and hems; a belt, buckle and pockets on the hips."""
    rgb = _trouser_colour(tx, pal)
    base = rgb.copy()
    thread = np.array((0.70, 0.45, 0.10), dtype=np.float32)
    x, y = tx.around, tx.along
    rough = np.full(x.shape, 0.85, dtype=np.float32)
    st = np.zeros(x.shape, dtype=np.float32)
    if tx.chart.startswith(("thigh", "shin")):
        for side in (-np.pi / 2, np.pi / 2):
            s = (tx.theta - side) * tx.radius
            rgb = _mix(rgb, base * 0.55, _smooth_mask(np.abs(s) - 0.004, 0.001))
            st = np.maximum(st, _stitches(y, np.abs(np.abs(s) - 0.008), 0.002, 0.01))
        if tx.chart.startswith("shin"):
            hem = y > HEM[0] * tx.length
            rgb = _mix(rgb, base * 0.6, hem)
            st = np.maximum(st, _stitches(x, np.abs(y - (HEM[0] + 0.02) * tx.length), 0.002,
                                          0.01))
        if tx.chart.startswith("thigh"):  # a patch pocket on the outer thigh
            sgn = 1.0 if tx.chart.endswith(".L") else -1.0
            cx = -sgn * 0.5 * np.pi * tx.radius * 0.85
            d = _box(x, y, cx, 0.20, 0.04, 0.045, 0.008)
            rgb = _mix(rgb, base * 1.35, _smooth_mask(d, 0.001))
            st = np.maximum(st, _stitches(x + y, np.abs(d + 0.005), 0.002, 0.01))
    if tx.chart == "pelvis":
        top = tx.length
        for sx in (-1.0, 1.0):  # curved front pocket openings, square back pockets
            d = np.abs(_ellipse(x, y, sx * 0.13, top, 0.06, 0.08))
            st = np.maximum(st, _stitches(x + y, d, 0.002, 0.01) * (np.abs(x) < 0.13))
            back = _box(x - sx * (np.pi * tx.radius - 0.09), y, 0.0, top - 0.10, 0.05,
                        0.055, 0.01)
            rgb = _mix(rgb, base * 1.25, _smooth_mask(back, 0.001))
            st = np.maximum(st, _stitches(x + y, np.abs(back + 0.005), 0.002, 0.01))
        fly = np.minimum(_segment(x, y, (0.025, top - 0.04), (0.025, top - 0.12)),
                         _segment(x, y, (0.025, top - 0.12), (0.0, top - 0.145)))
        st = np.maximum(st, _stitches(y, fly, 0.002, 0.01))
    rgb = _cloth_grain(tx, nz, _mix(rgb, thread, st))
    if tx.chart == "pelvis":
        rgb, rough = _belt(tx, pal, y - tx.length, rgb, rough)
    return rgb, rough


def paint_shoes(tx: Texels, pal: Palette, nz: Noise, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Mottled leather boots with a rubber sole, eyelets and criss-cross laces."""
    base = np.array(pal.base["shoes"], dtype=np.float32)
    x, y = tx.around, tx.along
    mott = 1 + 0.25 * nz.fbm(x, y, 0.03, 3, tx.chart)
    rgb = _shade(np.broadcast_to(base, (*x.shape, 3)).copy(), mott)
    rough = (ROUGHNESS["leather"] + 0.12 * nz.fbm(x, y, 0.02, 2, "r" + tx.chart)
             ).astype(np.float32)
    lace = np.array((0.80, 0.74, 0.60), dtype=np.float32)
    if tx.chart.startswith("foot"):
        sole = np.abs(tx.theta) > 2.0
        rgb = _mix(rgb, (0.03, 0.03, 0.03), sole)
        rough = np.where(sole, 0.75, rough)
        welt = _stitches(y, np.abs(np.abs(tx.theta) - 1.85) * tx.radius, 0.0012, 0.006)
        rgb = _mix(rgb, lace, welt)
        cap = _stitches(x, np.abs(y - 0.13 - 0.15 * x * x / 0.03), 0.0012, 0.006)
        rgb = _mix(rgb, lace, cap * (np.abs(tx.theta) < 1.8))
        lo, hi = -0.01, 0.09
    else:  # the boot shaft, under the trouser hem's lower edge
        hem = y < HEM[1] * tx.length
        rgb = np.where(hem[..., None], _cloth_grain(tx, nz, _trouser_colour(tx, pal) * 0.6),
                       rgb)
        rough = np.where(hem, 0.85, rough)
        lo, hi = HEM[1] * tx.length, tx.length + 0.02
    span = (y > lo) & (y < hi)
    tongue = span & (np.abs(x) < 0.012)
    rgb = _mix(rgb, base * 0.6, tongue)
    eyes = np.arange(lo + 0.006, hi, 0.014)
    d_lace = np.full(x.shape, np.inf, dtype=np.float32)
    ring = np.zeros(x.shape, dtype=np.float32)
    for k, ey in enumerate(eyes):
        for sx in (-1.0, 1.0):
            ring = np.maximum(ring, _smooth_mask(np.abs(_ellipse(x, y, sx * 0.014, ey, 0.003,
                                                                 0.003)) - 0.0008, 0.0006))
        if k + 1 < len(eyes):
            ny = eyes[k + 1]
            d_lace = np.minimum(d_lace, _segment(x, y, (-0.014, ey), (0.014, ny)))
            d_lace = np.minimum(d_lace, _segment(x, y, (0.014, ey), (-0.014, ny)))
    laces = _smooth_mask(d_lace - 0.0018, 0.0006)
    rgb = _mix(rgb, (0.75, 0.72, 0.65), ring)
    rgb = _mix(rgb, lace, laces)
    rough = np.where(laces > 0.5, 0.85, np.where(ring > 0.5, 0.2, rough))
    return rgb, rough


def _hair_colour(theta: np.ndarray, y: np.ndarray, pal: Palette, nz: Noise
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Streaked hair at (``theta``, ``y`` metres above the head's centre): the head and
    hair charts give the same colour to the same point."""
    base = np.array(pal.base["hair"], dtype=np.float32)
    streak = nz.fbm(theta * 1.2, y, 0.06, 3, "hair")
    rgb = _shade(np.broadcast_to(base, (*theta.shape, 3)).copy(), 1 + 1.2 * streak)
    return rgb, (ROUGHNESS["hair"] + 0.2 * streak).astype(np.float32)


def paint_hair(tx: Texels, pal: Palette, nz: Noise, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Dark hair with streaks that run down the head; skin below the hairline."""
    y = tx.along - tx.length / 2 + _HAIR_OFFSET * tx.length  # above the head's centre
    rgb, rough = _hair_colour(tx.theta, y, pal, nz)
    skin = y <= _hairline(tx.theta)
    s_rgb, s_rough = paint_skin(Texels("scalp", tx.theta, tx.along, tx.radius, tx.length),
                                pal, nz, seed)
    return (np.where(skin[..., None], s_rgb, rgb), np.where(skin, s_rough, rough))


def paint_cape(tx: Texels, pal: Palette, nz: Noise, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A gold border on both sheets, an emblem on the outside, a diamond-quilted lining."""
    base = np.array(pal.base["cape"], dtype=np.float32)
    x, y = tx.around, tx.along
    rgb = np.broadcast_to(base, (*x.shape, 3)).copy()
    rough = np.full(x.shape, ROUGHNESS["cloth"], dtype=np.float32)
    if tx.chart == "cape_rim":
        rgb = _mix(rgb, pal.accent, np.ones(x.shape, dtype=np.float32))
        return rgb, np.full(x.shape, 0.4, dtype=np.float32)
    hw = tx.half_width if tx.half_width is not None else np.full(x.shape, tx.radius)
    x = tx.theta * 2 * hw  # sheets: theta is the fraction across the row, -0.5 .. 0.5
    edge = np.minimum(hw - np.abs(x), tx.length - y)  # distance to the sides and the hem
    if tx.chart == "cape_inner":
        q = (np.mod(x + y, 0.05) < 0.003) | (np.mod(x - y, 0.05) < 0.003)
        rgb = _mix(_shade(rgb, np.full(x.shape, 0.55)), base * 0.9, q)
    border = _smooth_mask(edge - 0.035, 0.001)
    rgb = _mix(rgb, pal.accent, border)
    inner_line = _smooth_mask(np.abs(edge - 0.047) - 0.003, 0.001)
    rgb = _mix(rgb, pal.accent, inner_line)
    rough = np.where((border > 0.5) | (inner_line > 0.5), 0.4, rough)
    if tx.chart == "cape_outer":
        cy = 0.28 * tx.length
        ring = _smooth_mask(np.abs(_ellipse(x, y, 0.0, cy, 0.085, 0.085)) - 0.006, 0.001)
        star = _star(x, -y, 0.0, -cy, 0.07, 0.028, 5 + seed % 3)
        rgb = _mix(rgb, pal.accent, np.maximum(ring, star))
        rough = np.where(np.maximum(ring, star) > 0.5, 0.35, rough)
    return _cloth_grain(tx, nz, rgb), rough


PAINTERS = {"shirt": paint_shirt, "skin": paint_skin, "trousers": paint_trousers,
            "shoes": paint_shoes, "hair": paint_hair, "cape": paint_cape}


def paint(region: str, tx: Texels, pal: Palette, nz: Noise, seed: int) -> np.ndarray:
    """RGBA float32: sRGB-encoded colour and roughness (alpha) of ``region``'s design."""
    rgb, rough = PAINTERS[region](tx, pal, nz, seed)
    out = np.empty((*tx.theta.shape, 4), dtype=np.float32)
    out[..., :3] = linear_to_srgb(rgb)
    out[..., 3] = np.clip(rough, 0.05, 1.0)
    return out


# --------------------------------------------------------------------------- atlas packing


@dataclass(frozen=True)
class Packing:
    """Where each chart's box lies in its image: pixels per metre and box origins (px)."""

    scale: float
    origin: np.ndarray  # (N, 2) lower-left corner of each box's content, pixels
    size: np.ndarray  # (N, 2) content size in pixels


def pack_charts(sizes_m: np.ndarray, image_px: int, gutter_px: int = 4) -> Packing:
    """Shelf-pack boxes of ``sizes_m`` (N, 2) metres at one texel density, as large as fits.

    One density per image keeps texels the same size on every chart of a material;
    every box keeps ``gutter_px`` of its own padding on each side so that filtering
    never reads a neighbouring chart.
    """
    sizes_m = np.asarray(sizes_m, dtype=np.float64)
    if sizes_m.ndim != 2 or len(sizes_m) == 0 or (sizes_m <= 0).any():
        raise ValueError("pack_charts needs one or more boxes of positive size")
    order = np.argsort(-sizes_m[:, 1], kind="stable")

    def place(scale: float) -> tuple[np.ndarray, np.ndarray] | None:
        px = np.ceil(sizes_m * scale).astype(np.int64)
        outer = px + 2 * gutter_px
        origin = np.zeros_like(px)
        x = y = shelf = 0
        for i in order:
            w, h = outer[i]
            if w > image_px:
                return None
            if x + w > image_px:
                x, y, shelf = 0, y + shelf, 0
            if y + h > image_px:
                return None
            origin[i] = (x + gutter_px, y + gutter_px)
            x, shelf = x + w, max(shelf, h)
        return origin, px

    lo, hi = 1.0, 1e5
    for _ in range(40):
        mid = (lo * hi) ** 0.5
        lo, hi = (mid, hi) if place(mid) is not None else (lo, mid)
    result = place(lo)
    if result is None:
        raise ValueError(f"cannot pack {len(sizes_m)} charts into {image_px} px: "
                         "use a larger image")
    return Packing(lo, *result)


__all__ = ["PAINTERS", "ROUGHNESS", "Noise", "Packing", "Palette", "Texels",
           "linear_to_srgb", "pack_charts", "paint"]
