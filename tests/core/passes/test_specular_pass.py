"""The specular pass's light (pure numpy): what a glossy dielectric reflects toward the
camera. The skin model scales it per pixel, so its shape must be right: a highlight where
the mirror direction meets the camera, nothing where the light cannot reach, the light's
colour, and a Fresnel rim that grows as light and view graze the surface."""

from __future__ import annotations

import math

import numpy as np
from painted_skin.addon.core.passes.irradiance import (
    SPECULAR_F0,
    SPECULAR_ROUGHNESS,
    LightEmission,
    specular,
)


def _sun(direction, energy=3.0, color=(1.0, 0.5, 0.25)) -> LightEmission:
    d = np.asarray(direction, np.float64)
    return LightEmission(type="SUN", position=np.zeros(3), direction=d / np.linalg.norm(d),
                         color=np.asarray(color), energy=energy)


def _one(normal, view, light, vis=1.0) -> np.ndarray:
    v = np.asarray(view, np.float64)
    return specular(np.zeros((1, 3)), np.asarray([normal], np.float64),
                    (v / np.linalg.norm(v))[None], np.full((1, 1), vis), [light])[0]


def test_head_on_the_highlight_is_the_closed_form() -> None:
    # n = v = l: D = 1 / (pi alpha^2), G1 / cos = 1, F = F0: S F0 / (4 pi alpha^2).
    alpha2 = SPECULAR_ROUGHNESS ** 4
    expect = 3.0 * SPECULAR_F0 / (4.0 * math.pi * alpha2) * np.array([1.0, 0.5, 0.25])
    np.testing.assert_allclose(_one((0, 0, 1), (0, 0, 1), _sun((0, 0, 1))), expect, rtol=1e-5)


def test_nothing_from_a_light_below_the_surface_or_in_shadow() -> None:
    assert not _one((0, 0, 1), (0, 0, 1), _sun((0, 0, -1))).any()
    assert not _one((0, 0, 1), (0, 0, 1), _sun((0, 0, 1)), vis=0.0).any()


def test_the_highlight_sits_at_the_mirror_direction_and_the_rim_grows_at_grazing() -> None:
    light = _sun((math.sin(0.5), 0.0, math.cos(0.5)))
    angles = np.linspace(-1.2, 1.2, 25)  # 0.1 rad apart; the mirror direction is -0.5
    values = [_one((0, 0, 1), (math.sin(a), 0.0, math.cos(a)), light)[0] for a in angles]
    # At the mirror direction, or one step toward grazing (a rough lobe's off-specular
    # peak: Fresnel and masking lean it outward).
    assert abs(float(angles[int(np.argmax(values))]) + 0.55) < 0.06
    # Light and view both near grazing on opposite sides (a light behind the character,
    # seen at its silhouette): Fresnel makes it brighter than the head-on highlight.
    graze = 1.45
    rim = _one((0, 0, 1), (-math.sin(graze), 0, math.cos(graze)),
               _sun((math.sin(graze), 0, math.cos(graze))))
    assert rim[0] > _one((0, 0, 1), (0, 0, 1), _sun((0, 0, 1)))[0]


def test_a_roughness_per_point_is_each_points_own_lobe() -> None:
    """The surface's roughness, one per point, gives each point the lobe a single value
    would: a rough point's highlight is wider and lower than a smooth one's."""
    n = 5
    pts = np.zeros((n, 3))
    normals = np.tile([0.0, 0.0, 1.0], (n, 1))
    ang = np.radians(np.linspace(0, 40, n))
    view = np.stack([np.sin(ang), np.zeros(n), np.cos(ang)], 1)
    sun = [_sun([0.0, 0.0, 1.0])]
    vis = np.ones((n, 1))
    rough = np.array([0.2, 0.5, 1.0, 0.5, 0.2])
    together = specular(pts, normals, view, vis, sun, roughness=rough)
    for k in range(n):
        alone = specular(pts[k:k + 1], normals[k:k + 1], view[k:k + 1], vis[k:k + 1], sun,
                         roughness=float(rough[k]))
        np.testing.assert_allclose(together[k], alone[0], rtol=1e-5)
    assert together[0, 0] > together[1, 0] > together[2, 0]


def test_a_coloured_reflectance_colours_the_highlight_and_its_rim() -> None:
    """A metal's F0 is its colour (gold reflects gold): each channel's highlight is the
    one a grey surface of that channel's F0 shows, head on and at a grazing rim alike."""
    gold = np.array([0.9, 0.6, 0.2])
    white = _sun((0, 0, 1), color=(1.0, 1.0, 1.0))
    for normal, view, light in (((0, 0, 1), (0, 0, 1), white),
                                ((0, 0, 1), (1, 0, 0.2), _sun((-1, 0, 0.3), color=(1, 1, 1)))):
        v = np.asarray(view, np.float64)[None] / np.linalg.norm(view)
        args = (np.zeros((1, 3)), np.asarray([normal], np.float64), v, np.ones((1, 1)), [light])
        coloured = specular(*args, f0=gold[None])[0]
        for c in range(3):
            grey = specular(*args, f0=np.array([gold[c]]))[0, c]
            np.testing.assert_allclose(coloured[c], grey, rtol=1e-5)
        assert coloured[0] > coloured[1] > coloured[2]
