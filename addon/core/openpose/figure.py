"""The ControlNet openpose image: controlnet_aux's stick figure laid out as primitives
and painted by :mod:`.draw`."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from . import draw as odraw
from .formats import (
    COCO18_COLORS,
    COCO18_LIMBS,
    FACE_POINT_COLOR,
    HAND_EDGE_COLORS,
    HAND_EDGES,
    HAND_NAMES,
    HAND_POINT_COLOR,
    LIMB_ALPHA,
)
from .project import Keypoints

# --------------------------------------------------------------------------- drawing
# The figure is built as a list of primitives (openpose_draw.paint), each rasterised over
# its own bounding box only. The reference scales the whole limb layer by LIMB_ALPHA
# after drawing it on black; drawing the limbs in pre-scaled colours gives the same
# pixels (the scaling is per pixel) without a pass over the full image.

LIMB_COLORS: np.ndarray = (COCO18_COLORS[:len(COCO18_LIMBS)] * LIMB_ALPHA).astype(np.uint8)

Primitives = tuple[np.ndarray, np.ndarray, np.ndarray]  # kind (N,), params (N, 7), colors (N, 3)


@dataclass(frozen=True)
class _Layout:
    """The primitives of a figure made of point sets, in drawing order: each joins points
    ``a`` and ``b`` (a = b for a dot) of the concatenated sets and is drawn when both are."""

    kind: np.ndarray  # (P,) openpose_draw.DISC / ELLIPSE / LINE
    a: np.ndarray  # (P,) point index
    b: np.ndarray  # (P,)
    radius: np.ndarray  # (P,) disc radius, line half-width, ellipse minor semi-axis
    colors: np.ndarray  # (P, 3) uint8
    positive: np.ndarray  # (N,) point dropped unless x > 0 and y > 0 (hands, face)


@lru_cache(maxsize=64)
def _layout(sets: tuple[tuple[str, int], ...], scale: float, stick: float | None) -> _Layout:
    """Layout of ``sets`` = (("body" | "hand" | "face", point count), ...): controlnet_aux's
    draw_bodypose (limb ellipses in LIMB_COLORS, then dots), draw_handpose (edges, then
    dots), draw_facepose (dots), with their sizes at ``scale``."""
    kind, a, b, radius, colors, positive = [], [], [], [], [], []

    def add(k: int, ia, ib, r: float, col) -> None:
        ia = np.asarray(ia)
        kind.append(np.full(len(ia), k))
        a.append(ia)
        b.append(np.asarray(ib))
        radius.append(np.full(len(ia), float(r)))
        colors.append(np.broadcast_to(np.asarray(col, np.uint8), (len(ia), 3)))

    off = 0
    for name, n in sets:
        dots = off + np.arange(n)
        if name == "body":
            sw = 4.0 * scale if stick is None else stick
            limbs = off + np.array(COCO18_LIMBS)
            add(odraw.ELLIPSE, limbs[:, 0], limbs[:, 1], max(sw, 0.5), LIMB_COLORS)
            add(odraw.DISC, dots, dots, 4.0 * scale, COCO18_COLORS[:n])
        elif name == "hand":
            if n != len(HAND_NAMES):  # edges would reach into the next set
                raise ValueError(f"a hand has {len(HAND_NAMES)} keypoints, got {n}")
            edges = off + np.array(HAND_EDGES)
            add(odraw.LINE, edges[:, 0], edges[:, 1], max(2.0 * scale / 2.0, 0.5),
                HAND_EDGE_COLORS)
            add(odraw.DISC, dots, dots, 4.0 * scale, HAND_POINT_COLOR)
        else:
            add(odraw.DISC, dots, dots, 3.0 * scale, FACE_POINT_COLOR)
        positive.append(np.full(n, name != "body"))
        off += n
    return _Layout(np.concatenate(kind), np.concatenate(a), np.concatenate(b),
                   np.concatenate(radius), np.concatenate(colors), np.concatenate(positive))


def _primitives(parts: list[tuple[str, Keypoints]], draw_occluded: bool, scale: float,
                stick: float | None) -> Primitives:
    """The primitives (see openpose_draw) of a figure, computed for all its sets at once."""
    lay = _layout(tuple((name, len(kp)) for name, kp in parts), scale, stick)
    xy = np.concatenate([kp.xy for _, kp in parts])
    flags = np.concatenate([kp.in_view if draw_occluded else kp.visible for _, kp in parts])
    # Integer pixel-index coordinates as controlnet_aux computes them (int(x * W)).
    pix = np.trunc(xy - 0.5)
    with np.errstate(invalid="ignore"):  # NaN rows are never drawn
        ok = (flags & np.isfinite(pix).all(axis=1)
              & ~(lay.positive & (pix <= 0).any(axis=1)))  # controlnet_aux: x or y <= eps
    sel = ok[lay.a] & ok[lay.b]
    kind, r = lay.kind[sel], lay.radius[sel]
    pa, pb = pix[lay.a[sel]], pix[lay.b[sel]]
    params = np.zeros((len(kind), 7))
    params[:, :2] = pa
    params[:, 2] = r
    line = kind == odraw.LINE
    params[line, 2:4] = pb[line]
    params[line, 4] = r[line]
    ell = kind == odraw.ELLIPSE
    if ell.any():
        (xa, ya), (xb, yb) = pa[ell].T, pb[ell].T
        # The reference's int() truncations, in its order: centre, half length, angle.
        angle = np.radians(np.trunc(np.degrees(np.arctan2(ya - yb, xa - xb))))
        half = np.maximum(np.trunc(np.hypot(xa - xb, ya - yb) / 2), 0.5)
        params[ell, :6] = np.stack([np.trunc((xa + xb) / 2), np.trunc((ya + yb) / 2), half,
                                    r[ell], np.cos(angle), np.sin(angle)], axis=1)
    return kind, params, lay.colors[sel]


def _one(kind: int, cols: list[float], color) -> Primitives:
    params = np.zeros((1, 7))
    params[0, :len(cols)] = cols
    return np.array([kind]), params, np.asarray(color, np.uint8).reshape(1, 3)


def fill_circle(canvas: np.ndarray, x: float, y: float, r: float, color) -> None:
    """Filled disc centred on pixel-index coordinates (x, y) (OpenCV convention)."""
    odraw.paint(canvas, *_one(odraw.DISC, [x, y, r], color))


def fill_ellipse(canvas: np.ndarray, x: float, y: float, a: float, b: float, angle_deg: float,
                 color) -> None:
    """Filled ellipse, semi-axes a (along ``angle_deg``, image x towards y) and b."""
    t = np.radians(angle_deg)
    odraw.paint(canvas, *_one(odraw.ELLIPSE, [x, y, max(a, 0.5), max(b, 0.5), np.cos(t),
                                              np.sin(t)], color))


def draw_line(canvas: np.ndarray, p0, p1, thickness: float, color) -> None:
    """Thick segment with round caps: pixels within thickness/2 of the segment."""
    (x0, y0), (x1, y1) = p0, p1
    odraw.paint(canvas, *_one(odraw.LINE, [x0, y0, x1, y1, max(thickness / 2.0, 0.5)], color))


def draw_bodypose(canvas: np.ndarray, body: Keypoints, *, draw_occluded: bool = False,
                  scale: float = 1.0, stickwidth: float | None = None) -> np.ndarray:
    """controlnet_aux ``draw_bodypose`` on a COCO-18 (or BODY_25) body; returns the canvas."""
    if canvas.any():  # what was there is part of the layer scaled by LIMB_ALPHA
        canvas[:] = (canvas * LIMB_ALPHA).astype(np.uint8)
    prims = _primitives([("body", body.to_coco18())], draw_occluded, scale, stickwidth)
    return odraw.paint(canvas, *prims)


def draw_handpose(canvas: np.ndarray, hand: Keypoints, *, draw_occluded: bool = False,
                  scale: float = 1.0) -> np.ndarray:
    """controlnet_aux ``draw_handpose``: hue-coloured edges then blue dots."""
    return odraw.paint(canvas, *_primitives([("hand", hand)], draw_occluded, scale, None))


def draw_facepose(canvas: np.ndarray, face: Keypoints, *, draw_occluded: bool = False,
                  scale: float = 1.0) -> np.ndarray:
    """controlnet_aux ``draw_facepose``: white dots of radius 3."""
    return odraw.paint(canvas, *_primitives([("face", face)], draw_occluded, scale, None))


def draw_openpose(body: Keypoints | None,
                  hands: tuple[Keypoints | None, Keypoints | None] | None,
                  width: int, height: int, face: Keypoints | None = None, *,
                  draw_occluded: bool = False, scale: float | None = None,
                  xinsr_stick_scaling: bool = False) -> np.ndarray:
    """The ControlNet openpose image: (height, width, 3) uint8 RGB on black.

    ``body`` is COCO-18 or BODY_25 (converted). Sizes are controlnet_aux's at 512 px
    (its detect resolution, short side) scaled by ``scale`` (default min(W, H) / 512,
    what drawing at 512 and resizing gives). ``xinsr_stick_scaling`` uses
    comfyui_controlnet_aux's option instead (sizes at 1x, stick width x1 below 500 px on
    the long side, else x min(2 + long // 1000, 7)).
    """
    canvas = np.zeros((int(height), int(width), 3), np.uint8)
    stick = None
    if xinsr_stick_scaling:
        s = 1.0
        side = max(width, height)
        stick = 4.0 * (1 if side < 500 else min(2 + side // 1000, 7))
    else:
        s = min(width, height) / 512.0 if scale is None else float(scale)
    # Body, hands, face in controlnet_aux's order, painted in one call; the limbs go
    # first on the black canvas, so their pre-scaled colours stand for the scaled layer.
    parts: list[tuple[str, Keypoints]] = []
    if body is not None:
        parts.append(("body", body.to_coco18()))
    parts += [("hand", hand) for hand in hands or () if hand is not None]
    if face is not None:
        parts.append(("face", face))
    if not parts:
        return canvas
    return odraw.paint(canvas, *_primitives(parts, draw_occluded, s, stick))
