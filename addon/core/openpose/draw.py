"""Painting of the OpenPose stick figure's primitives: filled discs, ellipses and thick lines.

:func:`paint` draws a list of primitives, in order, each overwriting what is under it.
Every primitive is tested only over its own box, never the whole image (an ellipse over
its rotated extent, row by row in the kernel: a limb's square box is mostly empty). The
numba kernel (``jit.enabled()``) and the numpy path evaluate the very same float64 test
in the same order, and narrow the boxes only by pixels that fail it by far, so they
produce the same image bit for bit (tests check one against the other and against the
reference drawing); the geometry (centres, axes, cos/sin of the angle) is computed by
the caller with numpy, so no libm difference between the two can creep in.

A primitive is a row of ``kind`` (:data:`DISC`, :data:`ELLIPSE`, :data:`LINE`), a row of
``params`` (7 float64, pixel-index coordinates: the centre of pixel (i, j) is (j, i)):

- disc: ``x, y, r`` -- pixels with ``(j - x)^2 + (i - y)^2 <= r^2 + 1e-9``;
- ellipse: ``x, y, a, b, cos, sin`` -- ``(u / a)^2 + (v / b)^2 <= 1 + 1e-9`` with u, v the
  offset rotated by the angle;
- line: ``x0, y0, x1, y1, r`` -- pixels within r of the segment (round caps);

and a row of ``colors`` (uint8 RGB).
"""

from __future__ import annotations

import math

import numpy as np

from ..passes.jit import KERNEL_ERRORS, disable, enabled, njit

DISC, ELLIPSE, LINE = 0, 1, 2
EPS = 1e-9  # the reference drawing's tolerance on the boundary test


def _bounds_py(kind: int, p: np.ndarray, h: int, w: int) -> tuple[int, int, int, int]:
    """Rows [i0, i1) and columns [j0, j1) of a primitive's box, clamped to the image.

    The box of the reference drawing (floor/ceil of the extent, one past the end), with a
    disc's or ellipse's circumscribed square; clamped as floats so that far-off (even
    huge) coordinates give an empty range rather than an integer overflow.
    """
    if kind == LINE:
        r = p[4]
        xa, xb = min(p[0], p[2]) - r, max(p[0], p[2]) + r
        ya, yb = min(p[1], p[3]) - r, max(p[1], p[3]) + r
    else:
        r = p[2] if kind == DISC else max(p[2], p[3])
        xa, xb, ya, yb = p[0] - r, p[0] + r, p[1] - r, p[1] + r
    j0 = int(min(max(math.floor(xa), 0.0), float(w)))
    j1 = int(max(min(math.ceil(xb) + 1.0, float(w)), 0.0))
    i0 = int(min(max(math.floor(ya), 0.0), float(h)))
    i1 = int(max(min(math.ceil(yb) + 1.0, float(h)), 0.0))
    return i0, i1, j0, j1


_bounds = njit(_bounds_py)  # the kernel's copy; the numpy path never touches numba


def _paint_numpy(canvas: np.ndarray, kind: np.ndarray, params: np.ndarray,
                 colors: np.ndarray) -> None:
    h, w = canvas.shape[:2]
    for k, p, color in zip(kind.tolist(), params, colors, strict=True):
        i0, i1, j0, j1 = _bounds_py(k, p, h, w)
        if k == ELLIPSE:  # the rotated ellipse's own extent (+1 px): a long limb's square
            # box is mostly empty; pixels outside this one fail the test by far
            hx = math.hypot(p[2] * p[4], p[3] * p[5]) + 1.0
            hy = math.hypot(p[2] * p[5], p[3] * p[4]) + 1.0
            j0, j1 = max(j0, math.floor(p[0] - hx)), min(j1, math.ceil(p[0] + hx) + 1)
            i0, i1 = max(i0, math.floor(p[1] - hy)), min(i1, math.ceil(p[1] + hy) + 1)
        if j0 >= j1 or i0 >= i1:
            continue
        jj = np.arange(j0, j1, dtype=float)[None, :]
        ii = np.arange(i0, i1, dtype=float)[:, None]
        if k == DISC:
            dx, dy = jj - p[0], ii - p[1]
            mask = dx * dx + dy * dy <= p[2] * p[2] + EPS
        elif k == ELLIPSE:
            dx, dy = jj - p[0], ii - p[1]
            u = (dx * p[4] + dy * p[5]) / p[2]
            v = (-dx * p[5] + dy * p[4]) / p[3]
            mask = u * u + v * v <= 1.0 + EPS
        else:
            x0, y0 = p[0], p[1]
            dx, dy = p[2] - x0, p[3] - y0
            ll = dx * dx + dy * dy
            t = (np.zeros((1, 1)) if ll == 0
                 else np.clip(((jj - x0) * dx + (ii - y0) * dy) / ll, 0.0, 1.0))
            ex, ey = jj - x0 - t * dx, ii - y0 - t * dy
            mask = ex * ex + ey * ey <= p[4] * p[4] + EPS
        mask = np.broadcast_to(mask, (i1 - i0, j1 - j0))
        canvas[i0:i1, j0:j1][mask] = color


# An ellipse row is scanned only over the columns where (u/a)^2 + (v/b)^2 <= 1 + SPAN_SLACK
# (solved per row), widened by a pixel each side; the exact test above still decides every
# pixel. SPAN_SLACK >> EPS + rounding, so no pixel that passes the test is left out.
SPAN_SLACK = 1e-6


@njit
def _paint_jit(canvas, kind, params, colors):  # pragma: no cover - compiled
    h, w = canvas.shape[0], canvas.shape[1]
    for n in range(kind.shape[0]):
        k = kind[n]
        p = params[n]
        i0, i1, j0, j1 = _bounds(k, p, h, w)
        c0, c1, c2 = colors[n, 0], colors[n, 1], colors[n, 2]
        x, y = p[0], p[1]
        # One loop per kind, so the per-pixel test has no branch on the kind.
        if k == DISC:
            lim = p[2] * p[2] + EPS
            for i in range(i0, i1):
                dy = float(i) - y
                for j in range(j0, j1):
                    dx = float(j) - x
                    if dx * dx + dy * dy <= lim:
                        canvas[i, j, 0], canvas[i, j, 1], canvas[i, j, 2] = c0, c1, c2
        elif k == ELLIPSE:
            a, b, co, si = p[2], p[3], p[4], p[5]
            lim = 1.0 + EPS
            # f(dx) = qa dx^2 + qb dx + qc on a row: the columns of the span.
            qa = (co / a) ** 2 + (si / b) ** 2
            for i in range(i0, i1):
                dy = float(i) - y
                qb = 2.0 * dy * co * si * (1.0 / (a * a) - 1.0 / (b * b))
                qc = dy * dy * ((si / a) ** 2 + (co / b) ** 2)
                disc = qb * qb - 4.0 * qa * (qc - (1.0 + SPAN_SLACK))
                if disc < 0.0:
                    continue
                root = math.sqrt(disc)
                lo = x + (-qb - root) / (2.0 * qa)
                hi = x + (-qb + root) / (2.0 * qa)
                ja = max(j0, int(max(math.floor(lo) - 1.0, -1.0)))
                jb = min(j1, int(min(math.ceil(hi) + 2.0, float(w))))
                for j in range(ja, jb):
                    dx = float(j) - x
                    u = (dx * co + dy * si) / a
                    v = (-dx * si + dy * co) / b
                    if u * u + v * v <= lim:
                        canvas[i, j, 0], canvas[i, j, 1], canvas[i, j, 2] = c0, c1, c2
        else:
            ldx, ldy = p[2] - x, p[3] - y
            ll = ldx * ldx + ldy * ldy
            lim = p[4] * p[4] + EPS
            for i in range(i0, i1):
                dy = float(i) - y
                for j in range(j0, j1):
                    dx = float(j) - x
                    t = 0.0
                    if ll != 0:
                        t = min(max((dx * ldx + dy * ldy) / ll, 0.0), 1.0)
                    ex, ey = dx - t * ldx, dy - t * ldy
                    if ex * ex + ey * ey <= lim:
                        canvas[i, j, 0], canvas[i, j, 1], canvas[i, j, 2] = c0, c1, c2


def paint(canvas: np.ndarray, kind: np.ndarray, params: np.ndarray, colors: np.ndarray,
          *, jit: bool | None = None) -> np.ndarray:
    """Paint the primitives on ``canvas`` ((H, W, 3) uint8, in place) in order; returns it.

    ``jit`` picks the numba kernel (default: when :func:`~.jit.enabled`) or the numpy path.
    """
    if len(kind) == 0:
        return canvas
    kind = np.ascontiguousarray(kind, np.int64)
    params = np.ascontiguousarray(params, np.float64)
    colors = np.ascontiguousarray(colors, np.uint8)
    if enabled() if jit is None else jit:
        try:
            _paint_jit(canvas, kind, params, colors)
            return canvas
        except KERNEL_ERRORS as e:
            disable(e)
    _paint_numpy(canvas, kind, params, colors)
    return canvas
