"""Rotation math: conversions round-trip and agree with Blender's mathutils."""

from __future__ import annotations

import numpy as np
import pytest
from painted_skin.addon.core import transforms as T

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
