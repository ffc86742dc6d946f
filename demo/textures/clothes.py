"""The garments' painters: the shirt, trousers, boots and cape of the demo character.

Each takes a chart's :class:`~.texture_design.Texels` and returns linear RGB and
roughness; :func:`demo.textures.paint` encodes them into the image.
"""

from __future__ import annotations

import numpy as np

from .design import (
    CUFF,
    HEM,
    ROUGHNESS,
    Palette,
    Texels,
    cloth_grain,
    paint_belt,
    trim_colour,
)
from .noise import Noise
from .shapes import box, ellipse, mix, segment, shade, smooth_mask, star_mask, stitches


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
    rgb = mix(rgb, dark, 0.45 * band_x + 0.45 * band_y)
    pin = np.minimum(np.abs(np.mod(x, period) - 0.7 * period),
                     np.abs(np.mod(y, period) - 0.7 * period))
    rgb = mix(rgb, light, 0.8 * smooth_mask(pin - 0.0015, 0.001))
    rough = np.full(x.shape, ROUGHNESS["cloth"], dtype=np.float32)
    if tx.chart == "torso":
        rgb = mix(rgb, trim_colour(tx, pal), (y > tx.length - 0.025).astype(np.float32))
        # Chest emblem: a gold disc with the shirt's dark star in it.
        cy = 0.21 * tx.length / 0.40
        disc = smooth_mask(ellipse(x, y, 0.0, cy, 0.058, 0.058), 0.002)
        ring = smooth_mask(np.abs(ellipse(x, y, 0.0, cy, 0.050, 0.050)) - 0.003, 0.001)
        star = star_mask(x, y, 0.0, cy, 0.042, 0.017, 5 + seed % 2)
        rgb = mix(rgb, pal.accent, disc)
        rgb = mix(rgb, dark, np.maximum(ring, star) * disc)
        rough = np.where(disc > 0.5, 0.4, rough)
    if tx.chart.startswith("upper_arm"):
        rgb = mix(rgb, trim_colour(tx, pal), (y > CUFF[0] * tx.length).astype(np.float32))
    rgb = cloth_grain(tx, nz, rgb)
    if tx.chart == "torso":  # tucked in under the belt
        rgb, rough = paint_belt(tx, pal, y, rgb, rough)
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
            rgb = mix(rgb, base * 0.55, smooth_mask(np.abs(s) - 0.004, 0.001))
            st = np.maximum(st, stitches(y, np.abs(np.abs(s) - 0.008), 0.002, 0.01))
        if tx.chart.startswith("shin"):
            hem = y > HEM[0] * tx.length
            rgb = mix(rgb, base * 0.6, hem)
            st = np.maximum(st, stitches(x, np.abs(y - (HEM[0] + 0.02) * tx.length), 0.002,
                                         0.01))
        if tx.chart.startswith("thigh"):  # a patch pocket on the outer thigh
            sgn = 1.0 if tx.chart.endswith(".L") else -1.0
            cx = -sgn * 0.5 * np.pi * tx.radius * 0.85
            d = box(x, y, cx, 0.20, 0.04, 0.045, 0.008)
            rgb = mix(rgb, base * 1.35, smooth_mask(d, 0.001))
            st = np.maximum(st, stitches(x + y, np.abs(d + 0.005), 0.002, 0.01))
    if tx.chart == "pelvis":
        top = tx.length
        for sx in (-1.0, 1.0):  # curved front pocket openings, square back pockets
            d = np.abs(ellipse(x, y, sx * 0.13, top, 0.06, 0.08))
            st = np.maximum(st, stitches(x + y, d, 0.002, 0.01) * (np.abs(x) < 0.13))
            back = box(x - sx * (np.pi * tx.radius - 0.09), y, 0.0, top - 0.10, 0.05,
                       0.055, 0.01)
            rgb = mix(rgb, base * 1.25, smooth_mask(back, 0.001))
            st = np.maximum(st, stitches(x + y, np.abs(back + 0.005), 0.002, 0.01))
        fly = np.minimum(segment(x, y, (0.025, top - 0.04), (0.025, top - 0.12)),
                         segment(x, y, (0.025, top - 0.12), (0.0, top - 0.145)))
        st = np.maximum(st, stitches(y, fly, 0.002, 0.01))
    rgb = cloth_grain(tx, nz, mix(rgb, thread, st))
    if tx.chart == "pelvis":
        rgb, rough = paint_belt(tx, pal, y - tx.length, rgb, rough)
    return rgb, rough


def paint_shoes(tx: Texels, pal: Palette, nz: Noise, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Mottled leather boots with a rubber sole, eyelets and criss-cross laces."""
    base = np.array(pal.base["shoes"], dtype=np.float32)
    x, y = tx.around, tx.along
    mott = 1 + 0.25 * nz.fbm(x, y, 0.03, 3, tx.chart)
    rgb = shade(np.broadcast_to(base, (*x.shape, 3)).copy(), mott)
    rough = (ROUGHNESS["leather"] + 0.12 * nz.fbm(x, y, 0.02, 2, "r" + tx.chart)
             ).astype(np.float32)
    lace = np.array((0.80, 0.74, 0.60), dtype=np.float32)
    if tx.chart.startswith("foot"):
        sole = np.abs(tx.theta) > 2.0
        rgb = mix(rgb, (0.03, 0.03, 0.03), sole)
        rough = np.where(sole, 0.75, rough)
        welt = stitches(y, np.abs(np.abs(tx.theta) - 1.85) * tx.radius, 0.0012, 0.006)
        rgb = mix(rgb, lace, welt)
        cap = stitches(x, np.abs(y - 0.13 - 0.15 * x * x / 0.03), 0.0012, 0.006)
        rgb = mix(rgb, lace, cap * (np.abs(tx.theta) < 1.8))
        lo, hi = -0.01, 0.09
    else:  # the boot shaft, under the trouser hem's lower edge
        hem = y < HEM[1] * tx.length
        rgb = np.where(hem[..., None], cloth_grain(tx, nz, _trouser_colour(tx, pal) * 0.6),
                       rgb)
        rough = np.where(hem, 0.85, rough)
        lo, hi = HEM[1] * tx.length, tx.length + 0.02
    span = (y > lo) & (y < hi)
    tongue = span & (np.abs(x) < 0.012)
    rgb = mix(rgb, base * 0.6, tongue)
    eyes = np.arange(lo + 0.006, hi, 0.014)
    d_lace = np.full(x.shape, np.inf, dtype=np.float32)
    ring = np.zeros(x.shape, dtype=np.float32)
    for k, ey in enumerate(eyes):
        for sx in (-1.0, 1.0):
            ring = np.maximum(ring, smooth_mask(np.abs(ellipse(x, y, sx * 0.014, ey, 0.003,
                                                               0.003)) - 0.0008, 0.0006))
        if k + 1 < len(eyes):
            ny = eyes[k + 1]
            d_lace = np.minimum(d_lace, segment(x, y, (-0.014, ey), (0.014, ny)))
            d_lace = np.minimum(d_lace, segment(x, y, (0.014, ey), (-0.014, ny)))
    laces = smooth_mask(d_lace - 0.0018, 0.0006)
    rgb = mix(rgb, (0.75, 0.72, 0.65), ring)
    rgb = mix(rgb, lace, laces)
    rough = np.where(laces > 0.5, 0.85, np.where(ring > 0.5, 0.2, rough))
    return rgb, rough


def paint_cape(tx: Texels, pal: Palette, nz: Noise, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A gold border on both sheets, an emblem on the outside, a diamond-quilted lining."""
    base = np.array(pal.base["cape"], dtype=np.float32)
    x, y = tx.around, tx.along
    rgb = np.broadcast_to(base, (*x.shape, 3)).copy()
    rough = np.full(x.shape, ROUGHNESS["cloth"], dtype=np.float32)
    if tx.chart == "cape_rim":
        rgb = mix(rgb, pal.accent, np.ones(x.shape, dtype=np.float32))
        return rgb, np.full(x.shape, 0.4, dtype=np.float32)
    hw = tx.half_width if tx.half_width is not None else np.full(x.shape, tx.radius)
    x = tx.theta * 2 * hw  # sheets: theta is the fraction across the row, -0.5 .. 0.5
    edge = np.minimum(hw - np.abs(x), tx.length - y)  # distance to the sides and the hem
    if tx.chart == "cape_inner":
        q = (np.mod(x + y, 0.05) < 0.003) | (np.mod(x - y, 0.05) < 0.003)
        rgb = mix(shade(rgb, np.full(x.shape, 0.55)), base * 0.9, q)
    border = smooth_mask(edge - 0.035, 0.001)
    rgb = mix(rgb, pal.accent, border)
    inner_line = smooth_mask(np.abs(edge - 0.047) - 0.003, 0.001)
    rgb = mix(rgb, pal.accent, inner_line)
    rough = np.where((border > 0.5) | (inner_line > 0.5), 0.4, rough)
    if tx.chart == "cape_outer":
        cy = 0.28 * tx.length
        ring = smooth_mask(np.abs(ellipse(x, y, 0.0, cy, 0.085, 0.085)) - 0.006, 0.001)
        star = star_mask(x, -y, 0.0, -cy, 0.07, 0.028, 5 + seed % 3)
        rgb = mix(rgb, pal.accent, np.maximum(ring, star))
        rough = np.where(np.maximum(ring, star) > 0.5, 0.35, rough)
    return cloth_grain(tx, nz, rgb), rough
