"""The world_light pass (pure numpy): the world's light on the surface, darker where the
body hides the sky. The skin model adds it to the lamps' light, so with the key behind the
character its front is lit as Cycles lights it from the world: open where the sky is open,
dim in the armpit, under the chin, at the foot of a wall."""

from __future__ import annotations

import numpy as np
from painted_skin.addon.core.passes.world_light import sky_directions, sky_exposure, world_light

FLOOR = np.array([[-10, -10, 0], [10, -10, 0], [10, 10, 0], [-10, 10, 0]], float)
WALL = np.array([[0, -10, 0], [0, 10, 0], [0, 10, 10], [0, -10, 10]], float)
QUAD = np.array([[0, 1, 2], [0, 2, 3]])
UP = np.array([0.0, 0.0, 1.0])


def _scene() -> tuple[np.ndarray, np.ndarray]:
    return np.concatenate([FLOOR, WALL]), np.concatenate([QUAD, QUAD + 4])


def _ray_traced(points: np.ndarray, normal: np.ndarray) -> np.ndarray:
    """The same estimate with each direction's visibility ray-cast against the wall
    (the plane x = 0, 0 <= z <= 10, |y| <= 10) and the floor the points lie on (nothing
    below it): the reference the shadow maps must meet."""
    dirs = sky_directions()
    out = []
    for p in points:
        cos = np.clip(dirs @ normal, 0.0, None)
        with np.errstate(divide="ignore", invalid="ignore"):
            t = -p[0] / dirs[:, 0]
        hit = p[None] + t[:, None] * dirs
        blocked = (t > 0) & (np.abs(hit[:, 1]) <= 10) & (hit[:, 2] >= 0) & (hit[:, 2] <= 10)
        blocked |= dirs @ UP <= 0
        out.append((cos * ~blocked).sum() * 4.0 / len(dirs))
    return np.array(out)


def test_an_open_sky_reads_the_worlds_colour() -> None:
    points = np.array([[0.0, 0.0, 0.0], [3.0, 2.0, 0.0], [-7.0, 1.0, 0.0]])
    normals = np.tile(UP, (3, 1))
    colour = np.array([0.05, 0.055, 0.065])
    light = world_light(points, normals, normals, FLOOR, QUAD, colour)
    np.testing.assert_allclose(light, np.tile(colour, (3, 1)), rtol=1e-5)
    assert not world_light(points, normals, normals, FLOOR, QUAD, np.zeros(3)).any()


def test_a_wall_hides_its_share_of_the_sky_as_rays_would() -> None:
    verts, tris = _scene()
    points = np.array([[0.05, 0.0, 0.0], [1.0, 3.0, 0.0], [3.0, 0.0, 0.0], [8.0, -4.0, 0.0]])
    normals = np.tile(UP, (len(points), 1))
    got = sky_exposure(points, normals, normals, verts, tris)
    want = _ray_traced(points, UP)
    np.testing.assert_allclose(got, want, atol=0.02)
    # at the wall's foot half the sky is gone; farther off, less of it
    assert abs(got[0] - 0.5) < 0.05 and np.all(np.diff(got[[0, 2, 3]]) > 0.05)


def test_the_sky_is_weighed_by_the_smooth_normal_on_the_seen_side() -> None:
    verts, tris = _scene()
    point = np.array([[2.0, 0.0, 0.0]])
    flat = sky_exposure(point, UP[None], UP[None], verts, tris)
    # the same point shaded as if it faced the wall: the wall fills its view
    toward = np.array([[-0.8, 0.0, 0.6]])
    facing_wall = sky_exposure(point, UP[None], toward, verts, tris)
    away = sky_exposure(point, UP[None], toward * [-1, 1, 1], verts, tris)
    assert facing_wall[0] < flat[0] < away[0]
    # (a shadow map's bias decides the directions that graze the floor: one of 32)
    np.testing.assert_allclose(facing_wall, _ray_traced(point, toward[0]), atol=0.04)
