"""The node arithmetic the albedo and specular passes follow: what a glTF or hand-made
material's tree does to its images, texel by texel, as Cycles evaluates it."""

from __future__ import annotations

import numpy as np
import pytest
from painted_skin.addon.core.passes import shader_values as SV


def _img(values, uv_map=None, extension="REPEAT") -> SV.ShaderValue:
    return SV.image(np.asarray(values, np.float32), SV.Sampler(uv_map, extension))


def test_a_factor_multiplies_the_image_and_a_constant_stays_a_constant():
    img = _img(np.full((2, 2, 3), 0.5))
    out = SV.mix("MULTIPLY", SV.constant(1.0), img, SV.constant([0.2, 1.0, 0.5, 1.0]))
    assert out.is_image and out.sampler == img.sampler
    np.testing.assert_allclose(out.value[0, 0], [0.1, 0.5, 0.25])
    half = SV.mix("MIX", SV.constant(0.5), SV.constant([1, 0, 0]), SV.constant([0, 0, 1]))
    assert not half.is_image
    np.testing.assert_allclose(half.value, [0.5, 0.0, 0.5])


def test_a_coarser_image_is_read_at_the_finer_ones_texels():
    """glTF's metallic-roughness image is often smaller than its base colour: the
    product is at the base colour's texels, the smaller read bilinearly there."""
    fine = _img(np.ones((4, 4, 3)), extension="EXTEND")
    coarse = _img(np.array([[[0.0] * 3, [1.0] * 3]] * 2), extension="EXTEND")  # 0 | 1
    out = SV.apply(lambda a, b: a * b, fine, coarse)
    assert out.value.shape == (4, 4, 3)
    row = out.value[0, :, 0]
    assert row[0] == 0.0 and row[-1] == 1.0 and 0.0 < row[1] < row[2] < 1.0


def test_images_at_different_uv_maps_are_not_combined():
    with pytest.raises(SV.Unsupported):
        SV.apply(lambda a, b: a * b, _img(np.ones((2, 2, 3))), _img(np.ones((2, 2, 3)), "B"))


def test_a_channel_and_a_colour_into_a_float_socket():
    c = SV.constant([0.2, 0.7, 0.4])
    np.testing.assert_allclose(SV.channel(c, 1).value, [0.7] * 3)
    lum = float(np.dot([0.2, 0.7, 0.4], SV.LUMINANCE))
    np.testing.assert_allclose(SV.to_float(c).value, [lum] * 3, rtol=1e-6)
    back = SV.combine(SV.channel(c, 2), SV.channel(c, 1), SV.channel(c, 0))
    np.testing.assert_allclose(back.value, [0.4, 0.7, 0.2])


def test_math_is_safe_where_cycles_is_safe():
    a, zero = SV.constant(0.6), SV.constant(0.0)
    assert SV.math("DIVIDE", a, zero, zero).value[0] == 0.0
    assert SV.math("POWER", SV.constant(-2.0), SV.constant(0.5), zero).value[0] == 0.0
    assert SV.math("POWER", SV.constant(-2.0), SV.constant(3.0), zero).value[0] == -8.0
    assert SV.math("ADD", a, a, zero, clamp=True).value[0] == 1.0
    with pytest.raises(SV.Unsupported):
        SV.math("SINE", a, a, a)


def test_a_roughness_map_inverted_and_remapped():
    """A gloss map inverted into a roughness, then remapped into [0.2, 0.9] (reversed
    output ranges clamp too), as hand-made materials build."""
    gloss = _img(np.array([[[0.0] * 3, [0.5] * 3, [1.0] * 3]]))
    rough = SV.invert(SV.constant(1.0), gloss)
    np.testing.assert_allclose(rough.value[0, :, 0], [1.0, 0.5, 0.0])
    mapped = SV.map_range(rough, SV.constant(0.0), SV.constant(1.0), SV.constant(0.2),
                          SV.constant(0.9))
    np.testing.assert_allclose(mapped.value[0, :, 0], [0.9, 0.55, 0.2], rtol=1e-6)
    reversed_ = SV.map_range(SV.constant(2.0), SV.constant(0.0), SV.constant(1.0),
                             SV.constant(0.9), SV.constant(0.2))
    np.testing.assert_allclose(reversed_.value, [0.2] * 3, rtol=1e-6)


def test_a_color_ramp_reads_its_table_as_cycles_does():
    n = SV.RAMP_TABLE_SIZE
    x = np.linspace(0.0, 1.0, n, dtype=np.float32)
    table = np.stack([x, 1 - x, np.full(n, 0.5), np.ones(n)], axis=1)  # a linear ramp
    f = _img(np.array([[[0.25] * 3, [1.5] * 3]]))
    out = SV.ramp(f, table)
    np.testing.assert_allclose(out.value[0, 0], [0.25, 0.75, 0.5], atol=1e-6)
    np.testing.assert_allclose(out.value[0, 1], [1.0, 0.0, 0.5], atol=1e-6)  # clamped
    steps = SV.ramp(SV.constant(0.25), table, interpolate=False)  # CONSTANT: the entry
    np.testing.assert_allclose(steps.value[0], x[int(0.25 * (n - 1))], atol=1e-6)


def test_vertex_colours_that_vary_follow_only_a_product():
    """glTF's base colour times its vertex colours keeps the colour attribute (the passes
    interpolate it between corners as Cycles does); any other arithmetic on it (a sum, a
    blend, a float socket's luminance) is not a texel's and is refused, not guessed."""
    col = SV.attribute("Col")
    one = SV.constant(1.0)
    out = SV.mix("MULTIPLY", one, _img(np.full((2, 2, 3), 0.5)), col)
    assert out.attribute == "Col" and out.is_image
    np.testing.assert_allclose(out.value, 0.5)
    scaled = SV.multiply(SV.constant([0.5, 1.0, 0.8]), col)
    assert scaled.attribute == "Col" and not scaled.is_image
    for refused in (lambda: SV.mix("MULTIPLY", SV.constant(0.5), one, col),
                    lambda: SV.mix("ADD", one, one, col), lambda: SV.to_float(col),
                    lambda: SV.math("ADD", col, one, one), lambda: SV.multiply(col, col)):
        with pytest.raises(SV.Unsupported):
            refused()
