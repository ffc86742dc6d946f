"""Reading a material's image at a UV as Blender's Image Texture node does: texel
centres, bottom row first, the node's extension and interpolation; each point its own
material's source; and, where a pixel covers many texels, the texture averaged over the
pixel as a many-sample render holds it (a far camera's fine pattern must not shimmer)."""

from __future__ import annotations

import numpy as np
from painted_skin.addon.core.passes.albedo import (
    AlbedoSource,
    albedo,
    mip_pyramid,
    sample_bilinear,
    sample_footprint,
    sample_nearest,
    srgb_to_linear,
    texture_islands,
    uv_gradients,
)

IMG = np.arange(4 * 2 * 3, dtype=np.float32).reshape(2, 4, 3)  # 2 rows, 4 columns


def test_texel_centres_read_exactly_and_row_zero_is_the_bottom() -> None:
    uv = np.array([[0.125, 0.25], [0.875, 0.75]])  # first texel of row 0, last of row 1
    np.testing.assert_allclose(sample_bilinear(IMG, uv), [IMG[0, 0], IMG[1, 3]])
    np.testing.assert_allclose(sample_nearest(IMG, uv), [IMG[0, 0], IMG[1, 3]])


def test_bilinear_blends_between_centres_and_repeat_wraps() -> None:
    mid = sample_bilinear(IMG, np.array([[0.25, 0.25]]))  # halfway between texels 0 and 1
    np.testing.assert_allclose(mid[0], (IMG[0, 0] + IMG[0, 1]) / 2)
    wrapped = sample_bilinear(IMG, np.array([[1.125, 0.25], [-0.875, 0.25]]))
    np.testing.assert_allclose(wrapped, [IMG[0, 0], IMG[0, 0]])


def test_extend_clamps_and_clip_is_black_outside() -> None:
    uv = np.array([[1.6, 0.25]])
    np.testing.assert_allclose(sample_bilinear(IMG, uv, "EXTEND")[0], IMG[0, 3])
    np.testing.assert_allclose(sample_nearest(IMG, uv, "CLIP")[0], 0.0)


def test_each_point_takes_its_materials_colour() -> None:
    red = AlbedoSource(color=np.array([0.8, 0.1, 0.1], np.float32))
    textured = AlbedoSource(color=np.full(3, 0.5, np.float32), image=IMG / 23.0,
                            uv_map="Second", interpolation="Closest")
    render_uv = np.zeros((3, 2))
    second = np.array([[0.0, 0.0], [0.875, 0.75], [0.0, 0.0]])
    out = albedo([red, textured], np.array([0, 1, 0]), {None: render_uv, "Second": second})
    np.testing.assert_allclose(out, [[0.8, 0.1, 0.1], IMG[1, 3] / 23.0 * 0.5,
                                     [0.8, 0.1, 0.1]], rtol=1e-6)


def test_srgb_decoding_matches_the_standard() -> None:
    np.testing.assert_allclose(srgb_to_linear(np.array([0.0, 0.04045, 0.5, 1.0])),
                               [0.0, 0.04045 / 12.92, 0.21404, 1.0], atol=1e-5)


def _checker(n: int) -> np.ndarray:
    """(n, n, 3) black/white checker of single texels."""
    y, x = np.mgrid[0:n, 0:n]
    return np.repeat(((x + y) % 2).astype(np.float32)[..., None], 3, axis=2)


def test_a_pixel_over_many_texels_reads_their_average_not_one_of_them() -> None:
    src = AlbedoSource(image=_checker(64))
    rng = np.random.default_rng(0)
    uv = rng.uniform(0.1, 0.9, (500, 2))
    grad = np.broadcast_to(np.eye(2) * 16 / 64, (500, 2, 2))  # 16 texels per pixel step
    far = sample_footprint(src, uv, grad)
    np.testing.assert_allclose(far, 0.5, atol=0.03)
    point = sample_footprint(src, uv, None)
    assert point.std() > 0.1  # the point read is near one texel: aliased


def test_a_magnified_texture_reads_as_its_own_interpolation() -> None:
    src = AlbedoSource(image=_checker(64))
    uv = np.random.default_rng(1).uniform(0, 1, (200, 2))
    near = sample_footprint(src, uv, np.broadcast_to(np.eye(2) * 0.5 / 64, (200, 2, 2)))
    np.testing.assert_array_equal(near, sample_bilinear(src.image, uv))


def test_a_slanted_footprint_blurs_only_along_its_slant() -> None:
    stripes = np.zeros((64, 64, 3), np.float32)
    stripes[:, (np.arange(64) % 16) < 8] = 1.0
    src = AlbedoSource(image=stripes)  # 8-texel stripes across u, constant along v
    uv = np.stack([np.full(50, 4.0 / 64), np.linspace(0.2, 0.8, 50)], axis=1)
    grad = np.zeros((50, 2, 2))
    grad[:, 0, 0] = 0.5 / 64  # half a texel across u per pixel
    grad[:, 1, 1] = 32 / 64   # 32 texels along v per pixel: a surface seen at a slant
    np.testing.assert_allclose(sample_footprint(src, uv, grad), 1.0, atol=0.02)


def test_an_edge_on_triangle_reads_the_image_mean() -> None:
    src = AlbedoSource(image=_checker(8))
    out = sample_footprint(src, np.array([[0.3, 0.6]]), np.full((1, 2, 2), np.inf))
    np.testing.assert_allclose(out, 0.5, atol=1e-6)


def test_the_mip_pyramid_averages_and_ends_at_one_texel() -> None:
    levels = mip_pyramid(np.arange(5 * 3, dtype=np.float32).reshape(5, 3, 1))
    assert levels[-1].shape[:2] == (1, 1)
    assert [lv.shape[:2] for lv in levels] == [(5, 3), (3, 2), (2, 1), (1, 1)]
    np.testing.assert_allclose(levels[1][0, 0, 0], np.mean([0, 1, 3, 4]))


def test_uv_gradients_follow_perspective() -> None:
    """A plane facing the camera at depth d, uv = world xy: one pixel is d / f in uv."""
    f = 100.0

    def project(p):
        return f * p[..., :2] / -p[..., 2:3], -p[..., 2]

    for d in (2.0, 8.0):
        corners = np.array([[[0, 0, -d], [1, 0, -d], [0, 1, -d]]], np.float64)
        grad = uv_gradients(project, corners, np.array([[0.2, 0.3, 0.5]]),
                            corners[:, :, :2])
        np.testing.assert_allclose(grad[0], np.eye(2) * d / f, rtol=1e-3)
    edge_on = np.array([[[0, 0, -2], [1, 0, -2], [1, 0, -3]]], np.float64)
    uv = np.array([[[0, 0], [1, 0], [0, 1]]], np.float64)
    assert np.isinf(uv_gradients(project, edge_on, np.array([[0.3, 0.3, 0.4]]), uv)).all()


def test_texture_islands_part_at_uv_seams_and_materials_and_join_across_shared_uvs() -> None:
    """A strip of four triangles: the first two share their edge's UVs (one island), the
    third meets the second at the same vertices with other UVs (a seam), the fourth
    shares the third's UVs but has another material; a second UV map continuous
    everywhere does not hide the seam of the first."""
    tris = np.array([[0, 1, 2], [1, 3, 2], [2, 3, 4], [3, 5, 4]])
    uv = np.array([[[0, 0], [1, 0], [0, 1]], [[1, 0], [1, 1], [0, 1]],
                   [[5, 1], [6, 1], [5, 2]], [[6, 1], [6, 2], [5, 2]]], np.float32)
    smooth = np.arange(24, dtype=np.float32).reshape(4, 3, 2)
    smooth[1, 0], smooth[1, 2] = smooth[0, 1], smooth[0, 2]
    smooth[2, 0], smooth[2, 1] = smooth[1, 2], smooth[1, 1]
    smooth[3, 0], smooth[3, 2] = smooth[2, 1], smooth[2, 2]
    ids = texture_islands(tris, np.zeros(4, int), {None: uv})
    assert ids[0] == ids[1] and ids[1] != ids[2] and ids[2] == ids[3]
    ids = texture_islands(tris, np.array([0, 0, 0, 1]), {None: uv, "second": smooth})
    assert len(set(ids[:2])) == 1 and len({ids[1], ids[2], ids[3]}) == 3
    assert len(set(texture_islands(tris, np.zeros(4, int), {"second": smooth}))) == 1
    assert texture_islands(np.zeros((0, 3), int), np.zeros(0, int), {}).shape == (0,)
    colours = np.ones((4, 3, 3), np.float32)
    colours[1, 0] = 0.5  # the first edge's low vertex changes colour across it
    ids = texture_islands(tris, np.zeros(4, int), {"second": smooth}, {"Col": colours})
    assert ids[0] != ids[1] and ids[1] == ids[2] == ids[3]
