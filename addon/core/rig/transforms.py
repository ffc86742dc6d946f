"""Vectorised rotation math (numpy, no bpy).

Quaternions are (w, x, y, z), Blender's order. Every function takes arrays with
any leading batch shape. Matrices are 3x3 rotations unless a name says 4x4.
"""

from __future__ import annotations

import numpy as np

EULER_ORDERS = ("XYZ", "XZY", "YXZ", "YZX", "ZXY", "ZYX")
_AXIS = {"X": 0, "Y": 1, "Z": 2}


def normalize(v: np.ndarray, eps: float = 1e-12) -> np.ndarray:
    """Unit vectors along the last axis (zero vectors stay zero)."""
    n = np.linalg.norm(v, axis=-1, keepdims=True)
    return v / np.maximum(n, eps)


def quat_to_matrix(q: np.ndarray) -> np.ndarray:
    """(..., 4) unit quaternions -> (..., 3, 3) rotation matrices."""
    q = normalize(np.asarray(q, dtype=np.float64))
    w, x, y, z = q[..., 0], q[..., 1], q[..., 2], q[..., 3]
    m = np.empty(q.shape[:-1] + (3, 3))
    m[..., 0, 0] = 1 - 2 * (y * y + z * z)
    m[..., 0, 1] = 2 * (x * y - w * z)
    m[..., 0, 2] = 2 * (x * z + w * y)
    m[..., 1, 0] = 2 * (x * y + w * z)
    m[..., 1, 1] = 1 - 2 * (x * x + z * z)
    m[..., 1, 2] = 2 * (y * z - w * x)
    m[..., 2, 0] = 2 * (x * z - w * y)
    m[..., 2, 1] = 2 * (y * z + w * x)
    m[..., 2, 2] = 1 - 2 * (x * x + y * y)
    return m


def matrix_to_quat(m: np.ndarray) -> np.ndarray:
    """(..., 3, 3) rotation matrices -> (..., 4) unit quaternions with w >= 0.

    Shepperd's method: each quaternion is built from the largest of its four
    diagonal terms, for stability. Works on the nine entries as contiguous rows
    (a clip's matrices are strided views): every frame takes the w-first formula,
    and only the few whose largest term is x, y or z are redone with theirs.
    """
    m = np.asarray(m, dtype=np.float64)
    shape = m.shape[:-2]
    c = np.ascontiguousarray(m.reshape(-1, 9).T)
    m00, m01, m02, m10, m11, m12, m20, m21, m22 = c
    t = np.stack([1 + m00 + m11 + m22, 1 + m00 - m11 - m22, 1 - m00 + m11 - m22,
                  1 - m00 - m11 + m22])
    k = _argmax4(t)
    s = np.sqrt(np.maximum(np.take_along_axis(t, k[None], 0)[0], 1e-300)) * 2
    q = np.stack([s / 4, (m21 - m12) / s, (m02 - m20) / s, (m10 - m01) / s])
    for case in (1, 2, 3):
        sel = np.flatnonzero(k == case)
        if not len(sel):
            continue
        a00, a01, a02, a10, a11, a12, a20, a21, a22 = c[:, sel]
        sc = s[sel]
        if case == 1:
            q[:, sel] = [(a21 - a12) / sc, sc / 4, (a01 + a10) / sc, (a02 + a20) / sc]
        elif case == 2:
            q[:, sel] = [(a02 - a20) / sc, (a01 + a10) / sc, sc / 4, (a12 + a21) / sc]
        else:
            q[:, sel] = [(a10 - a01) / sc, (a02 + a20) / sc, (a12 + a21) / sc, sc / 4]
    n = q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3]  # as normalize() sums
    q /= np.maximum(np.sqrt(n), 1e-12)
    q *= np.where(q[0] < 0, -1.0, 1.0)
    return q.T.reshape(shape + (4,))


def _argmax4(t: np.ndarray) -> np.ndarray:
    """``np.argmax(t, axis=0)`` for four rows (first maximum wins), several times
    faster than the generic reduction."""
    k = np.zeros(t.shape[1], dtype=np.intp)
    best = t[0]
    for j in (1, 2, 3):
        better = t[j] > best
        k[better] = j
        best = np.where(better, t[j], best)
    return k


def axis_angle_to_matrix(axis: np.ndarray, angle: np.ndarray) -> np.ndarray:
    """Rotation by ``angle`` radians about ``axis`` (batched)."""
    axis = normalize(np.asarray(axis, dtype=np.float64))
    half = np.asarray(angle, dtype=np.float64)[..., None] / 2
    q = np.concatenate([np.cos(half), axis * np.sin(half)], axis=-1)
    return quat_to_matrix(q)


def euler_to_matrix(angles: np.ndarray, order: str = "XYZ") -> np.ndarray:
    """Blender Euler (radians, ``order`` = rotation mode) -> matrices.

    Blender's ``XYZ`` mode applies X first, then Y, then Z: R = Rz @ Ry @ Rx.
    """
    angles = np.asarray(angles, dtype=np.float64)
    a, b, c = (_AXIS[ax] for ax in order)
    # Written out entry by entry (zeros and ones skipped): a batched 3x3 matmul
    # costs more per frame than the whole closed form.
    m = _mul3(_axis_entries(angles[..., c], c),
              _mul3(_axis_entries(angles[..., b], b), _axis_entries(angles[..., a], a)))
    out = np.empty(angles.shape[:-1] + (3, 3))
    for r in range(3):
        for q in range(3):
            out[..., r, q] = m[r][q]
    return out


def _axis_entries(angle: np.ndarray, axis: int) -> list[list]:
    """The rotation by ``angle`` about one coordinate axis as a 3x3 list of entries
    (arrays, and the exact 0.0 and 1.0 as floats)."""
    c, s = np.cos(angle), np.sin(angle)
    m: list[list] = [[0.0] * 3 for _ in range(3)]
    i, j = [(1, 2), (2, 0), (0, 1)][axis]
    m[axis][axis] = 1.0
    m[i][i] = m[j][j] = c
    m[i][j] = -s
    m[j][i] = s
    return m


def _mul3(x: list[list], y: list[list]) -> list[list]:
    """Product of two 3x3 lists of arrays or exact 0.0/1.0 floats, skipping those."""
    out: list[list] = [[0.0] * 3 for _ in range(3)]
    for r in range(3):
        for q in range(3):
            acc = 0.0
            for k in range(3):
                u, v = x[r][k], y[k][q]
                if (isinstance(u, float) and u == 0.0) or (isinstance(v, float) and v == 0.0):
                    continue
                term = v if isinstance(u, float) and u == 1.0 else (
                    u if isinstance(v, float) and v == 1.0 else u * v)
                acc = term if isinstance(acc, float) and acc == 0.0 else acc + term
            out[r][q] = acc
    return out


def matrix_to_euler(m: np.ndarray, order: str = "XYZ") -> np.ndarray:
    """Matrices -> Blender Euler angles for ``order`` (inverse of euler_to_matrix)."""
    m = np.asarray(m, dtype=np.float64)
    i, j, k = (_AXIS[a] for a in order)
    # R = R_k(c) R_j(b) R_i(a). Parity decides the signs of the generic formula.
    parity = 1.0 if (j - i) % 3 == 1 else -1.0
    sb = np.clip(-parity * m[..., k, i], -1.0, 1.0)
    b = np.arcsin(sb)
    cb = np.sqrt(np.maximum(1 - sb * sb, 0.0))
    regular = cb > 1e-9
    a = np.where(regular, np.arctan2(parity * m[..., k, j], m[..., k, k]),
                 np.arctan2(-parity * m[..., j, k], m[..., j, j]))
    c = np.where(regular, np.arctan2(parity * m[..., j, i], m[..., i, i]), 0.0)
    out = np.empty(m.shape[:-2] + (3,))
    out[..., i] = a
    out[..., j] = b
    out[..., k] = c
    return out


def unwrap_euler(e: np.ndarray) -> np.ndarray:
    """Make a (frames, ..., 3) Euler sequence continuous (no 360° jumps)."""
    return np.unwrap(e, axis=0)


def quat_continuity(q: np.ndarray) -> np.ndarray:
    """Flip signs so consecutive quaternions along axis 0 stay in one hemisphere."""
    q = q.copy()
    if len(q) < 2:
        return q
    dots = np.einsum("...i,...i->...", q[1:], q[:-1])
    flips = np.cumsum(dots < 0, axis=0) % 2
    q[1:] *= (1 - 2 * flips)[..., None]  # exact: a sign change
    return q


def quat_slerp(q0: np.ndarray, q1: np.ndarray, t: float | np.ndarray) -> np.ndarray:
    """Spherical interpolation, shortest path."""
    q0 = normalize(q0)
    q1 = normalize(q1)
    d = np.sum(q0 * q1, axis=-1, keepdims=True)
    q1 = np.where(d < 0, -q1, q1)
    d = np.abs(d)
    t = np.asarray(t, dtype=np.float64)
    if t.ndim:
        t = t[..., None]
    theta = np.arccos(np.clip(d, -1.0, 1.0))
    small = theta < 1e-6
    st = np.where(small, 1.0, np.sin(theta))
    w0 = np.where(small, 1 - t, np.sin((1 - t) * theta) / st)
    w1 = np.where(small, t, np.sin(t * theta) / st)
    return normalize(w0 * q0 + w1 * q1)


def rotation_between(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The smallest rotation (matrix) taking direction ``a`` onto ``b`` (batched)."""
    a = normalize(np.asarray(a, dtype=np.float64))
    b = normalize(np.asarray(b, dtype=np.float64))
    v = np.cross(a, b)
    c = np.sum(a * b, axis=-1)
    # Antiparallel: rotate 180° about any axis perpendicular to a.
    anti = c < -1 + 1e-9
    if np.any(anti):
        helper = np.where(np.abs(a[..., :1]) < 0.9, [1.0, 0.0, 0.0], [0.0, 1.0, 0.0])
        perp = normalize(np.cross(a, helper))
        v = np.where(anti[..., None], perp, v)
    q = np.concatenate([(1 + c)[..., None], v], axis=-1)
    q = np.where(anti[..., None], np.concatenate([np.zeros_like(c)[..., None], v], -1), q)
    return quat_to_matrix(normalize(q))


def orthonormalize(m: np.ndarray) -> np.ndarray:
    """Nearest rotation to each 3x3 matrix (strips scale and shear).

    Rig matrices are rotations times a per-axis scale, read as float32: for
    those, Gram-Schmidt on the columns is exact to second order and ~20x
    cheaper than the SVD, which is kept for matrices with real shear.
    """
    # Written out per component (the same sums, in the same order, as normalize,
    # np.sum and np.cross): several times faster on a clip's (F, 3, 3) stacks.
    def unit(a, b, c):
        n = np.maximum(np.sqrt(a * a + b * b + c * c), 1e-12)
        return a / n, b / n, c / n

    x0, x1, x2 = unit(m[..., 0, 0], m[..., 1, 0], m[..., 2, 0])
    b0, b1, b2 = m[..., 0, 1], m[..., 1, 1], m[..., 2, 1]
    d = b0 * x0 + b1 * x1 + b2 * x2
    y0, y1, y2 = unit(b0 - d * x0, b1 - d * x1, b2 - d * x2)
    z0, z1, z2 = x1 * y2 - x2 * y1, x2 * y0 - x0 * y2, x0 * y1 - x1 * y0
    r = np.empty(np.shape(m), dtype=np.result_type(x0))
    r[..., 0, 0], r[..., 1, 0], r[..., 2, 0] = x0, x1, x2
    r[..., 0, 1], r[..., 1, 1], r[..., 2, 1] = y0, y1, y2
    r[..., 0, 2], r[..., 1, 2], r[..., 2, 2] = z0, z1, z2
    if r.size == 0:
        return r
    c0, c1, c2 = unit(m[..., 0, 2], m[..., 1, 2], m[..., 2, 2])
    if np.abs(c0 * z0 + c1 * z1 + c2 * z2 - 1.0).max() < 1e-4:
        return r
    u, _, vt = np.linalg.svd(m)
    r = u @ vt
    det = np.linalg.det(r)
    u[..., :, -1] *= np.where(det < 0, -1.0, 1.0)[..., None]
    return u @ vt


def inverse3(m: np.ndarray) -> np.ndarray:
    """Inverse of (..., 3, 3) matrices by the adjugate: much faster than a
    batched ``np.linalg.inv`` for the millions of tiny matrices of a clip."""
    c0, c1, c2 = m[..., :, 0], m[..., :, 1], m[..., :, 2]
    rows = np.stack([np.cross(c1, c2), np.cross(c2, c0), np.cross(c0, c1)], axis=-2)
    det = np.sum(c0 * rows[..., 0, :], axis=-1)
    return rows / det[..., None, None]


def angle_between(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Angle in radians between vectors along the last axis."""
    a = normalize(a)
    b = normalize(b)
    return np.arccos(np.clip(np.sum(a * b, axis=-1), -1.0, 1.0))
