"""The shadow terminator of smooth-shaded low-poly meshes, as Cycles renders it: near
the terminator a shadow ray starts from the smooth surface the vertex normals describe,
so the light reaches as far round the body as its smooth shading does."""

from __future__ import annotations

import numpy as np
from painted_skin.addon.core.passes.shadow import (
    Light,
    light_visibility,
    smooth_surface_lift,
)


def _uv_sphere(segments: int = 10, rings: int = 6) -> tuple[np.ndarray, np.ndarray]:
    """A unit UV sphere's vertices (V, 3) and outward-wound triangles (T, 3)."""
    verts = [(0.0, 0.0, 1.0)]
    for i in range(1, rings):
        th = np.pi * i / rings
        for j in range(segments):
            ph = 2 * np.pi * j / segments
            verts.append((np.sin(th) * np.cos(ph), np.sin(th) * np.sin(ph), np.cos(th)))
    verts.append((0.0, 0.0, -1.0))
    v = np.array(verts)
    ring = lambda i, j: 1 + (i * segments) + (j % segments)  # noqa: E731
    tris = [(0, ring(0, j), ring(0, j + 1)) for j in range(segments)]
    for i in range(rings - 2):
        for j in range(segments):
            a, b, c, d = ring(i, j), ring(i, j + 1), ring(i + 1, j), ring(i + 1, j + 1)
            tris += [(a, c, b), (b, c, d)]
    last = len(v) - 1
    tris += [(last, ring(rings - 2, j + 1), ring(rings - 2, j)) for j in range(segments)]
    return v, np.array(tris)


def _facet_points(v: np.ndarray, tris: np.ndarray, bary: np.ndarray):
    """Points at ``bary`` on every facet: positions, geometric normals, corner data."""
    corners = v[tris]
    p = np.einsum("k,nkc->nc", bary, corners)
    ng = np.cross(corners[:, 1] - corners[:, 0], corners[:, 2] - corners[:, 0])
    ng /= np.linalg.norm(ng, axis=1)[:, None]
    return p, ng, corners


def test_the_lift_moves_a_facet_onto_the_smooth_surface_and_leaves_a_flat_one() -> None:
    v, tris = _uv_sphere()
    bary = np.array([1 / 3, 1 / 3, 1 / 3])
    p, ng, corners = _facet_points(v, tris, bary)
    radial = corners / np.linalg.norm(corners, axis=2, keepdims=True)  # smooth normals
    lift = smooth_surface_lift(corners, radial, np.tile(bary, (len(p), 1)), ng)
    before = np.abs(np.linalg.norm(p, axis=1) - 1.0)
    after = np.abs(np.linalg.norm(p + lift, axis=1) - 1.0)
    assert np.all(np.einsum("ij,ij->i", lift, ng) > 0)  # outwards
    assert np.all(after < 0.8 * before)  # towards the sphere
    flat = np.repeat(ng[:, None], 3, axis=1)  # flat shading: the facet's own normal
    assert np.allclose(smooth_surface_lift(corners, flat, np.tile(bary, (len(p), 1)), ng), 0)


def test_a_facet_turned_from_the_light_is_lit_where_its_smooth_side_faces_it() -> None:
    v, tris = _uv_sphere()
    bary = np.array([0.6, 0.2, 0.2])
    p, ng, corners = _facet_points(v, tris, bary)
    radial = corners / np.linalg.norm(corners, axis=2, keepdims=True)
    smooth = np.einsum("k,nkc->nc", bary, radial)
    smooth /= np.linalg.norm(smooth, axis=1)[:, None]
    lift = smooth_surface_lift(corners, radial, np.tile(bary, (len(p), 1)), ng)
    sun = [Light("SUN", np.zeros(3), np.array([1.0, 0.0, 0.0]))]
    plain = light_visibility(p, ng, v, tris, sun, 512)[:, 0]
    lifted = light_visibility(p, ng, v, tris, sun, 512, lift, smooth)[:, 0]
    ngl, nl = ng[:, 0], smooth[:, 0]
    grazing = (ngl < 0) & (nl > 0.05)  # the facet's back to the sun, its smooth side lit
    assert grazing.any()
    assert not plain[grazing].any() and lifted[grazing].all()
    assert lifted[ngl > 0.2].all() and plain[ngl > 0.2].all()  # well lit either way
    assert not lifted[nl < -0.2].any()  # the dark side stays dark
