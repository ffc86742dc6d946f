"""Reading a material's image at a UV as Blender's Image Texture node does: texel
centres, bottom row first, the node's extension and interpolation; each point its own
material's source."""

from __future__ import annotations

import numpy as np
from painted_skin.addon.core.passes.albedo import (
    AlbedoSource,
    albedo,
    sample_bilinear,
    sample_nearest,
    srgb_to_linear,
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
