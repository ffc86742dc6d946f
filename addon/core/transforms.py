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
    """(..., 3, 3) rotation matrices -> (..., 4) unit quaternions with w >= 0."""
    m = np.asarray(m, dtype=np.float64)
    t = np.stack(
        [
            1 + m[..., 0, 0] + m[..., 1, 1] + m[..., 2, 2],
            1 + m[..., 0, 0] - m[..., 1, 1] - m[..., 2, 2],
            1 - m[..., 0, 0] + m[..., 1, 1] - m[..., 2, 2],
            1 - m[..., 0, 0] - m[..., 1, 1] + m[..., 2, 2],
        ],
        axis=-1,
    )
    # Shepperd's method: build from the largest diagonal term for stability.
    k = np.argmax(t, axis=-1)
    s = np.sqrt(np.maximum(np.take_along_axis(t, k[..., None], -1)[..., 0], 1e-300)) * 2
    q = np.empty(m.shape[:-2] + (4,))
    c0 = k == 0
    c1 = k == 1
    c2 = k == 2
    c3 = k == 3
    q[c0] = np.stack(
        [s[c0] / 4, (m[c0, 2, 1] - m[c0, 1, 2]) / s[c0], (m[c0, 0, 2] - m[c0, 2, 0]) / s[c0],
         (m[c0, 1, 0] - m[c0, 0, 1]) / s[c0]], -1)
    q[c1] = np.stack(
        [(m[c1, 2, 1] - m[c1, 1, 2]) / s[c1], s[c1] / 4, (m[c1, 0, 1] + m[c1, 1, 0]) / s[c1],
         (m[c1, 0, 2] + m[c1, 2, 0]) / s[c1]], -1)
    q[c2] = np.stack(
        [(m[c2, 0, 2] - m[c2, 2, 0]) / s[c2], (m[c2, 0, 1] + m[c2, 1, 0]) / s[c2], s[c2] / 4,
         (m[c2, 1, 2] + m[c2, 2, 1]) / s[c2]], -1)
    q[c3] = np.stack(
        [(m[c3, 1, 0] - m[c3, 0, 1]) / s[c3], (m[c3, 0, 2] + m[c3, 2, 0]) / s[c3],
         (m[c3, 1, 2] + m[c3, 2, 1]) / s[c3], s[c3] / 4], -1)
    q = normalize(q)
    return np.where(q[..., :1] < 0, -q, q)


def axis_angle_to_matrix(axis: np.ndarray, angle: np.ndarray) -> np.ndarray:
    """Rotation by ``angle`` radians about ``axis`` (batched)."""
    axis = normalize(np.asarray(axis, dtype=np.float64))
    half = np.asarray(angle, dtype=np.float64)[..., None] / 2
    q = np.concatenate([np.cos(half), axis * np.sin(half)], axis=-1)
    return quat_to_matrix(q)


def _axis_matrices(angle: np.ndarray, axis: int) -> np.ndarray:
    """Batched rotation matrices about one coordinate axis."""
    c, s = np.cos(angle), np.sin(angle)
    m = np.zeros(angle.shape + (3, 3))
    i, j = [(1, 2), (2, 0), (0, 1)][axis]
    m[..., axis, axis] = 1.0
    m[..., i, i] = c
    m[..., j, j] = c
    m[..., i, j] = -s
    m[..., j, i] = s
    return m


def euler_to_matrix(angles: np.ndarray, order: str = "XYZ") -> np.ndarray:
    """Blender Euler (radians, ``order`` = rotation mode) -> matrices.

    Blender's ``XYZ`` mode applies X first, then Y, then Z: R = Rz @ Ry @ Rx.
    """
    angles = np.asarray(angles, dtype=np.float64)
    a, b, c = (_AXIS[ax] for ax in order)
    return (_axis_matrices(angles[..., c], c) @ _axis_matrices(angles[..., b], b)
            @ _axis_matrices(angles[..., a], a))


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
    dots = np.sum(q[1:] * q[:-1], axis=-1)
    flips = np.cumsum(dots < 0, axis=0) % 2
    q[1:] = np.where(flips[..., None] == 1, -q[1:], q[1:])
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
    x = normalize(m[..., :, 0])
    y = m[..., :, 1] - np.sum(m[..., :, 1] * x, axis=-1, keepdims=True) * x
    y = normalize(y)
    z = np.cross(x, y)
    r = np.stack([x, y, z], axis=-1)
    shear = np.abs(np.sum(normalize(m[..., :, 2]) * z, axis=-1) - 1.0)
    if r.size == 0 or shear.max() < 1e-4:
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
