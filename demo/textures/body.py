"""The body's painters: mottled skin with a face on the head, and streaked hair.

The head and hair charts share one hairline and one hair colour field, so the
same point of the head gets the same colour from either chart.
"""

from __future__ import annotations

import numpy as np

from .design import CUFF, ROUGHNESS, Palette, Texels, cloth_grain, trim_colour
from .noise import Noise
from .shapes import ellipse, mix, segment, shade, smooth_mask

_HAIR_OFFSET = 0.022 / 0.198  # the hair blob's centre sits this much of its height higher


def _hairline(theta: np.ndarray) -> np.ndarray:
    """Height of the hairline above the head's centre (metres), a fringe at the front."""
    back = ((1 - np.cos(theta)) / 2) ** 0.7
    return 0.05 - 0.13 * back + 0.004 * np.sin(11 * theta) * (1 - back)


def _face(tx: Texels, pal: Palette, rgb: np.ndarray, rough: np.ndarray) -> None:
    """Eyes, brows, mouth and cheeks on the head chart (0 = the face's centre line)."""
    x = tx.around
    y = tx.along - tx.length / 2  # metres above the head's centre
    hair = np.array(pal.base["hair"], dtype=np.float32)
    blush = smooth_mask(np.minimum(ellipse(x, y, -0.045, -0.012, 0.02, 0.015),
                                   ellipse(x, y, 0.045, -0.012, 0.02, 0.015)), 0.02)
    rgb[:] = mix(rgb, (0.60, 0.22, 0.18), 0.35 * blush)
    for sx in (-1.0, 1.0):
        ex, ey = 0.033 * sx, 0.017
        white = smooth_mask(ellipse(x, y, ex, ey, 0.015, 0.008), 0.001)
        iris = smooth_mask(ellipse(x, y, ex, ey, 0.0068, 0.0068), 0.0008) * white
        pupil = smooth_mask(ellipse(x, y, ex, ey, 0.003, 0.003), 0.0006)
        lid = smooth_mask(np.abs(ellipse(x, y, ex, ey + 0.001, 0.016, 0.009)) - 0.0011,
                          0.0008) * (y > ey - 0.002)
        rgb[:] = mix(rgb, (0.85, 0.83, 0.80), white)
        rgb[:] = mix(rgb, pal.iris, iris)
        rgb[:] = mix(rgb, (0.01, 0.01, 0.01), np.maximum(pupil, lid))
        rough[:] = np.where(white > 0.5, 0.15, rough)
        brow = segment(x, y, (ex - 0.017 * sx, ey + 0.016), (ex + 0.006 * sx, ey + 0.022))
        brow = np.minimum(brow, segment(x, y, (ex + 0.006 * sx, ey + 0.022),
                                         (ex + 0.018 * sx, ey + 0.017)))
        rgb[:] = mix(rgb, hair, smooth_mask(brow - 0.0032, 0.001))
    my = -0.040
    lips = smooth_mask(ellipse(x, y, 0.0, my, 0.023, 0.0065), 0.001)
    line = smooth_mask(segment(x, y, (-0.022, my), (0.022, my)) - 0.0009, 0.0006)
    rgb[:] = mix(rgb, pal.lips, lips)
    rgb[:] = mix(rgb, (0.08, 0.01, 0.01), line)
    rough[:] = np.where(lips > 0.5, 0.3, rough)


def paint_skin(tx: Texels, pal: Palette, nz: Noise, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Mottled skin; the head chart carries the face."""
    base = np.array(pal.base["skin"], dtype=np.float32)
    f = 1 + 0.12 * nz.fbm(tx.around, tx.along, 0.04, 3, tx.chart)
    rgb = shade(np.broadcast_to(base, (*tx.theta.shape, 3)).copy(), f)
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
        rgb = np.where(collar[..., None], cloth_grain(tx, nz, trim_colour(tx, pal)), rgb)
        rough = np.where(collar, ROUGHNESS["cloth"], rough)
    elif tx.chart.startswith("upper_arm"):  # the cuff's lower part
        cuff = tx.along < CUFF[1] * tx.length
        rgb = np.where(cuff[..., None], cloth_grain(tx, nz, trim_colour(tx, pal)), rgb)
        rough = np.where(cuff, ROUGHNESS["cloth"], rough)
    return rgb, rough


def _hair_colour(theta: np.ndarray, y: np.ndarray, pal: Palette, nz: Noise
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Streaked hair at (``theta``, ``y`` metres above the head's centre): the head and
    hair charts give the same colour to the same point."""
    base = np.array(pal.base["hair"], dtype=np.float32)
    streak = nz.fbm(theta * 1.2, y, 0.06, 3, "hair")
    rgb = shade(np.broadcast_to(base, (*theta.shape, 3)).copy(), 1 + 1.2 * streak)
    return rgb, (ROUGHNESS["hair"] + 0.2 * streak).astype(np.float32)


def paint_hair(tx: Texels, pal: Palette, nz: Noise, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Dark hair with streaks that run down the head; skin below the hairline."""
    y = tx.along - tx.length / 2 + _HAIR_OFFSET * tx.length  # above the head's centre
    rgb, rough = _hair_colour(tx.theta, y, pal, nz)
    skin = y <= _hairline(tx.theta)
    s_rgb, s_rough = paint_skin(Texels("scalp", tx.theta, tx.along, tx.radius, tx.length),
                                pal, nz, seed)
    return (np.where(skin[..., None], s_rgb, rgb), np.where(skin, s_rough, rough))
