"""Rotation math: conversions round-trip and agree with Blender's mathutils."""

from __future__ import annotations

import numpy as np
import pytest
from painted_skin.addon.core.rig import transforms as T

RNG = np.random.default_rng(7)


def random_quats(n: int) -> np.ndarray:
    q = T.normalize(RNG.normal(size=(n, 4)))
    return np.where(q[:, :1] < 0, -q, q)


def test_quat_matrix_round_trip():
    q = random_quats(500)
    m = T.quat_to_matrix(q)
    assert np.allclose(m @ m.swapaxes(1, 2), np.eye(3), atol=1e-12)
    assert np.allclose(np.linalg.det(m), 1.0)
    assert np.allclose(T.matrix_to_quat(m), q, atol=1e-10)


@pytest.mark.parametrize("order", T.EULER_ORDERS)
def test_euler_round_trip_and_mathutils(order):
    import bpy  # noqa: F401  (mathutils comes with Blender)
    import mathutils

    e = RNG.uniform(-1.4, 1.4, size=(200, 3))
    m = T.euler_to_matrix(e, order)
    for k in range(0, 200, 37):
        ref = np.array(mathutils.Euler(e[k], order).to_matrix())
        assert np.allclose(m[k], ref, atol=1e-6)
    assert np.allclose(T.euler_to_matrix(T.matrix_to_euler(m, order), order), m, atol=1e-9)


def test_rotation_between_is_smallest_and_handles_opposites():
    a = T.normalize(RNG.normal(size=(100, 3)))
    b = T.normalize(RNG.normal(size=(100, 3)))
    r = T.rotation_between(a, b)
    assert np.allclose(np.einsum("nij,nj->ni", r, a), b, atol=1e-9)
    # The smallest rotation leaves the axis a x b fixed.
    axis = T.normalize(np.cross(a, b))
    assert np.allclose(np.einsum("nij,nj->ni", r, axis), axis, atol=1e-9)
    opp = T.rotation_between(np.array([[0, 0, 1.0]]), np.array([[0, 0, -1.0]]))
    assert np.allclose(opp[0] @ [0, 0, 1.0], [0, 0, -1.0], atol=1e-9)


def test_slerp_midpoint_and_continuity():
    q0 = np.array([1.0, 0, 0, 0])
    q1 = T.matrix_to_quat(T.axis_angle_to_matrix(np.array([0, 0, 1.0]), np.array(np.pi / 2)))
    mid = T.quat_slerp(q0, q1, 0.5)
    ang = T.angle_between(T.quat_to_matrix(mid) @ [1.0, 0, 0], np.array([1.0, 0, 0]))
    assert ang == pytest.approx(np.pi / 4)
    seq = np.array([q1, -q1, q1])
    fixed = T.quat_continuity(seq)
    assert np.all(np.sum(fixed[1:] * fixed[:-1], axis=1) > 0)


# ---- the fast paths against the plain formulas they replace --------------------------


def shepperd_reference(m: np.ndarray) -> np.ndarray:
    """Shepperd's method branch by branch with boolean masks (the former code)."""
    t = np.stack([1 + m[..., 0, 0] + m[..., 1, 1] + m[..., 2, 2],
                  1 + m[..., 0, 0] - m[..., 1, 1] - m[..., 2, 2],
                  1 - m[..., 0, 0] + m[..., 1, 1] - m[..., 2, 2],
                  1 - m[..., 0, 0] - m[..., 1, 1] + m[..., 2, 2]], axis=-1)
    k = np.argmax(t, axis=-1)
    s = np.sqrt(np.maximum(np.take_along_axis(t, k[..., None], -1)[..., 0], 1e-300)) * 2
    q = np.empty(m.shape[:-2] + (4,))
    for case, row in enumerate((
            lambda a, s: [s / 4, (a[:, 2, 1] - a[:, 1, 2]) / s, (a[:, 0, 2] - a[:, 2, 0]) / s,
                          (a[:, 1, 0] - a[:, 0, 1]) / s],
            lambda a, s: [(a[:, 2, 1] - a[:, 1, 2]) / s, s / 4, (a[:, 0, 1] + a[:, 1, 0]) / s,
                          (a[:, 0, 2] + a[:, 2, 0]) / s],
            lambda a, s: [(a[:, 0, 2] - a[:, 2, 0]) / s, (a[:, 0, 1] + a[:, 1, 0]) / s, s / 4,
                          (a[:, 1, 2] + a[:, 2, 1]) / s],
            lambda a, s: [(a[:, 1, 0] - a[:, 0, 1]) / s, (a[:, 0, 2] + a[:, 2, 0]) / s,
                          (a[:, 1, 2] + a[:, 2, 1]) / s, s / 4])):
        c = k == case
        q[c] = np.stack(row(m[c], s[c]), -1)
    q = T.normalize(q)
    return np.where(q[..., :1] < 0, -q, q)


def test_matrix_to_quat_is_shepperd_bit_for_bit():
    q = random_quats(4000)
    # Every branch: near-identity (w largest), half turns about x, y, z (x, y or z largest).
    half_turns = [T.axis_angle_to_matrix(np.eye(3)[a], np.array(np.pi - 0.1)) for a in range(3)]
    m = np.concatenate([T.quat_to_matrix(q), np.array(half_turns), np.eye(3)[None],
                        np.diag([1.0, -1, -1])[None], np.zeros((1, 3, 3))])
    d = np.diagonal(m, axis1=1, axis2=2)
    k = np.argmax([1 + d.sum(1), 1 + d[:, 0] - d[:, 1] - d[:, 2],
                   1 - d[:, 0] + d[:, 1] - d[:, 2], 1 - d[:, 0] - d[:, 1] + d[:, 2]], axis=0)
    assert set(k) == {0, 1, 2, 3}
    assert np.array_equal(T.matrix_to_quat(m), shepperd_reference(m))
    # Any batch shape, strided input (a clip's tracks), a single matrix.
    stack = T.quat_to_matrix(q[:600]).reshape(30, 20, 3, 3).swapaxes(0, 1)
    assert np.array_equal(T.matrix_to_quat(stack), shepperd_reference(stack))
    assert np.array_equal(T.matrix_to_quat(m[5]), shepperd_reference(m[5:6])[0])


def test_euler_to_matrix_is_the_axis_product():
    e = RNG.uniform(-np.pi, np.pi, size=(300, 3))

    def axis(angle, a):
        c, s = np.cos(angle), np.sin(angle)
        out = np.zeros(angle.shape + (3, 3))
        i, j = [(1, 2), (2, 0), (0, 1)][a]
        out[..., a, a], out[..., i, i], out[..., j, j] = 1.0, c, c
        out[..., i, j], out[..., j, i] = -s, s
        return out

    for order in T.EULER_ORDERS:
        a, b, c = ("XYZ".index(x) for x in order)
        ref = axis(e[:, c], c) @ axis(e[:, b], b) @ axis(e[:, a], a)
        assert np.allclose(T.euler_to_matrix(e, order), ref, atol=1e-15, rtol=0)
        assert T.euler_to_matrix(e[0], order).shape == (3, 3)
        assert T.euler_to_matrix(e.reshape(10, 30, 3), order).shape == (10, 30, 3, 3)


def test_orthonormalize_is_gram_schmidt_bit_for_bit():
    def reference(m):
        x = T.normalize(m[..., :, 0])
        y = T.normalize(m[..., :, 1] - np.sum(m[..., :, 1] * x, axis=-1, keepdims=True) * x)
        return np.stack([x, y, np.cross(x, y)], axis=-1)

    rot = T.quat_to_matrix(random_quats(500))
    scaled = rot * RNG.uniform(0.5, 2.0, size=(500, 1, 3))  # per-axis scale: Gram-Schmidt path
    assert np.array_equal(T.orthonormalize(scaled), reference(scaled))
    assert np.array_equal(T.orthonormalize(scaled[:, None]), reference(scaled[:, None]))
    sheared = RNG.normal(size=(50, 3, 3))  # real shear: the SVD path, a proper rotation
    r = T.orthonormalize(sheared)
    assert np.allclose(r @ r.swapaxes(1, 2), np.eye(3), atol=1e-12)
    assert np.allclose(np.linalg.det(r), 1.0)


def test_quat_continuity_flips_whole_runs():
    q = random_quats(50)
    seq = np.repeat(q[:1], 7, axis=0) * np.array([1, -1, -1, 1, -1, 1, 1.0])[:, None]
    fixed = T.quat_continuity(seq)
    assert np.array_equal(fixed, np.repeat(q[:1], 7, axis=0))
    many = np.stack([seq, -seq], axis=1)  # (frames, bones, 4): each bone on its own
    assert np.array_equal(T.quat_continuity(many)[:, 1], -T.quat_continuity(seq))
