"""The ``world_light`` pass: the world's direct light on the surface (pure numpy).

Defined as Cycles' *Diffuse Direct* light on a white Lambertian surface from a world of
one colour ``C`` (the scene's lamps hidden), in the render's linear units:
``C / pi * integral of V(w) cos(w) dw`` over the sphere, ``V`` 1 where the ray from the
visible side of the surface point meets no geometry. An open sky reads ``C``; a point
in an armpit, between the legs or under the chin reads less: the ambient occlusion a
world-lit body shows, sharp to the pixel.

The integral is estimated over :data:`DIRECTIONS` directions spread evenly over the
sphere (a Fibonacci lattice), each direction's visibility by one sun shadow map
(:func:`shadow.light_visibility`): measured on the demo walk and the KayKit mannequin
against Cycles' Diffuse Direct pass at 512 samples, mean error 0.011-0.015 of the
world's colour, correlation 0.98, for 0.11-0.13 s a 128² frame.

Why a pass: the shading a world-lit body shows, in one image, for compositing and as a
control image. It is not a skin-model input: measured on the KayKit mannequin, the model
with it scored no better than without (docs/features.md).
"""

from __future__ import annotations

import math

import numpy as np

from .shadow import Light, light_visibility

#: Directions the sky is sampled in: 32 reads Cycles' pass to 0.011-0.015 (mean over a
#: frame; 64 at 128² read no closer); the error is the shadow maps' and the lattice's,
#: with no sampling noise.
DIRECTIONS = 32
#: Shadow-map side of each direction: the occlusion is soft (32 directions overlap), so
#: a coarse map is enough. On the demo walk (128² frame) against Cycles: 128 reads mean
#: error 0.012 / correlation 0.974, 256 0.011 / 0.976 (0.13 s), 512 0.011 / 0.977 (0.24 s).
RESOLUTION = 256


def sky_directions(k: int = DIRECTIONS) -> np.ndarray:
    """(k, 3) unit vectors spread evenly over the sphere (the Fibonacci lattice)."""
    i = np.arange(k) + 0.5
    z = 1.0 - 2.0 * i / k
    r = np.sqrt(np.maximum(1.0 - z * z, 0.0))
    phi = i * math.pi * (3.0 - math.sqrt(5.0))
    return np.stack([r * np.cos(phi), r * np.sin(phi), z], axis=1)


def sky_exposure(points: np.ndarray, geometric_normals: np.ndarray,
                 shading_normals: np.ndarray, verts: np.ndarray, tris: np.ndarray,
                 directions: int = DIRECTIONS, resolution: int = RESOLUTION,
                 lift: np.ndarray | None = None) -> np.ndarray:
    """(N,) float32: ``1 / pi`` times the cosine-weighted solid angle of open sky each
    point sees (1 for a surface under an open sky, 0 fully enclosed).

    ``geometric_normals``: unit, on the side the camera sees (the shadow test's side);
    ``shading_normals``: unit, what the cosine is taken against (smooth shading)."""
    points = np.asarray(points, np.float64).reshape(-1, 3)
    if not len(points):
        return np.zeros(0, np.float32)
    dirs = sky_directions(directions)
    vis = light_visibility(points, geometric_normals, verts, tris,
                           [Light("SUN", np.zeros(3), d) for d in dirs], resolution,
                           lift, None if lift is None else shading_normals)
    cos = np.clip(np.asarray(shading_normals, np.float64).reshape(-1, 3) @ dirs.T, 0.0, None)
    # The mean of max(cos, 0) over the sphere is 1/4: scaled so an open sky reads 1.
    return ((vis * cos).sum(axis=1) * 4.0 / directions).astype(np.float32)


def world_light(points: np.ndarray, geometric_normals: np.ndarray,
                shading_normals: np.ndarray, verts: np.ndarray, tris: np.ndarray,
                colour: np.ndarray, directions: int = DIRECTIONS,
                resolution: int = RESOLUTION, lift: np.ndarray | None = None) -> np.ndarray:
    """(N, 3) float32: the world's direct diffuse light at ``points`` (a world of one
    linear ``colour`` (3,), its strength included), as Cycles' Diffuse Direct holds it."""
    colour = np.asarray(colour, np.float64).reshape(3)
    if not colour.any():
        return np.zeros((len(np.asarray(points).reshape(-1, 3)), 3), np.float32)
    exposure = sky_exposure(points, geometric_normals, shading_normals, verts, tris,
                            directions, resolution, lift)
    return (exposure[:, None] * colour[None]).astype(np.float32)
