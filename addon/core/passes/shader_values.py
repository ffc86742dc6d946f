"""What a small shader-node tree gives a socket, as numbers: a constant or an image.

Why: real characters rarely wire an image straight into the Principled BSDF. glTF's
importer multiplies the base colour by its factor and the mesh's colour attribute (Mix,
Multiply), splits the metallic-roughness image into channels (Separate Color), scales a
roughness by a factor (Math); hand-made materials invert and remap maps. Those trees are
per-texel arithmetic on images read at one UV map, so the albedo and specular passes can
follow them exactly instead of falling back to the viewport colour.

A :class:`ShaderValue` is (..., 3) float32: a constant (3,) or an image (H, W, 3), row 0
at the bottom, with the :class:`Sampler` it is read with, optionally times a colour
attribute that varies over the mesh (glTF's vertex colours: interpolated between the
corners, so not a texel's arithmetic; a product is all that follows it exactly). A float
is the same value in every channel. Operations broadcast constants over images; two
images combine when they are read at the same UV map (the coarser is resampled to the
finer's texels). Anything else raises :class:`Unsupported`, and the caller falls back and
says so.

Blender-free: the Blender layer walks the nodes and calls these with the nodes' settings.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .albedo import sample_bilinear

#: Rec. 709 luminance: how Blender turns a colour into the float a value socket takes.
LUMINANCE = np.array([0.2126, 0.7152, 0.0722], np.float32)


class Unsupported(ValueError):
    """A node or setting these values cannot follow exactly."""


@dataclass(frozen=True)
class Sampler:
    """How an image is read: at ``uv_map`` (None: the render UV map), Blender's Image
    Texture ``extension`` and ``interpolation``."""

    uv_map: str | None = None
    extension: str = "REPEAT"
    interpolation: str = "Linear"


@dataclass(frozen=True)
class ShaderValue:
    """A socket's value: ``value`` (3,) for a constant, (H, W, 3) for an image read with
    ``sampler``; times colour attribute ``attribute`` where one is named ("" the mesh's
    render colour attribute)."""

    value: np.ndarray
    sampler: Sampler | None = None
    attribute: str | None = None

    @property
    def is_image(self) -> bool:
        return self.sampler is not None


def attribute(name: str) -> ShaderValue:
    """Colour attribute ``name`` ("" the render one), varying over the mesh."""
    return ShaderValue(np.ones(3, np.float32), None, name)


def _no_attribute(*values: ShaderValue) -> None:
    if any(v.attribute is not None for v in values):
        raise Unsupported("a colour attribute that varies over the mesh, other than "
                          "multiplied")


def multiply(a: ShaderValue, b: ShaderValue) -> ShaderValue:
    """``a`` times ``b``, channel by channel; one of them may carry a colour attribute."""
    if a.attribute is not None and b.attribute is not None:
        raise Unsupported("two colour attributes multiplied")
    name = a.attribute if a.attribute is not None else b.attribute
    plain = [ShaderValue(v.value, v.sampler) for v in (a, b)]
    out = apply(lambda x, y: x * y, *plain)
    return ShaderValue(out.value, out.sampler, name)


def constant(v) -> ShaderValue:
    """A colour (3 or 4 numbers: alpha dropped) or a float (every channel)."""
    a = np.asarray(v, np.float32).reshape(-1)
    if a.size == 1:
        a = np.repeat(a, 3)
    return ShaderValue(np.ascontiguousarray(a[:3], np.float32))


def image(pixels: np.ndarray, sampler: Sampler) -> ShaderValue:
    """An image's (H, W, 3) linear pixels, read with ``sampler``."""
    return ShaderValue(np.asarray(pixels, np.float32), sampler)


def to_float(v: ShaderValue) -> ShaderValue:
    """The value a float socket takes from a colour: its luminance, in every channel."""
    _no_attribute(v)
    lum = v.value @ LUMINANCE
    return ShaderValue(np.repeat(lum[..., None], 3, axis=-1).astype(np.float32), v.sampler)


def channel(v: ShaderValue, k: int) -> ShaderValue:
    """Channel ``k`` (0 red, 1 green, 2 blue) of a colour, as a float."""
    _no_attribute(v)
    one = v.value[..., k:k + 1]
    return ShaderValue(np.repeat(one, 3, axis=-1).astype(np.float32), v.sampler)


def _resample(v: ShaderValue, shape: tuple[int, int]) -> np.ndarray:
    """``v``'s image read at the texel centres of an image of ``shape`` (H, W)."""
    h, w = shape
    ys, xs = np.meshgrid((np.arange(h) + 0.5) / h, (np.arange(w) + 0.5) / w, indexing="ij")
    uv = np.stack([xs.ravel(), ys.ravel()], axis=1)
    return sample_bilinear(v.value, uv, v.sampler.extension).reshape(h, w, 3)


def _operands(*values: ShaderValue) -> tuple[list[np.ndarray], Sampler | None]:
    """The values as arrays that broadcast together, and the result's sampler."""
    _no_attribute(*values)
    images = [v for v in values if v.is_image]
    if not images:
        return [v.value for v in values], None
    first = images[0].sampler
    if any(v.sampler.uv_map != first.uv_map or v.sampler.extension != first.extension
           for v in images):
        raise Unsupported("images read at different UV maps or extensions are combined")
    finest = max(images, key=lambda v: v.value.shape[0] * v.value.shape[1])
    shape = finest.value.shape[:2]
    arrays = [v.value if not v.is_image or v.value.shape[:2] == shape else _resample(v, shape)
              for v in values]
    return arrays, finest.sampler


def apply(fn, *values: ShaderValue, clamp: bool = False) -> ShaderValue:
    """``fn`` on the values' arrays, per texel (clamped to [0, 1] when asked)."""
    arrays, sampler = _operands(*values)
    with np.errstate(all="ignore"):
        out = np.asarray(fn(*arrays), np.float32)
    out = np.nan_to_num(out, nan=0.0, posinf=0.0, neginf=0.0)
    if clamp:
        out = np.clip(out, 0.0, 1.0)
    return ShaderValue(np.ascontiguousarray(out, np.float32), sampler)


def _lerp(a, b, f):
    return a + f * (b - a)


#: The Mix node's colour blends (Cycles' ``svm_mix``), as (a, b, factor) -> result.
MIX_BLENDS = {
    "MIX": lambda a, b, f: _lerp(a, b, f),
    "ADD": lambda a, b, f: a + f * b,
    "MULTIPLY": lambda a, b, f: a * (1.0 - f + f * b),
    "SUBTRACT": lambda a, b, f: a - f * b,
    "SCREEN": lambda a, b, f: 1.0 - (1.0 - f + f * (1.0 - b)) * (1.0 - a),
    "DIFFERENCE": lambda a, b, f: _lerp(a, np.abs(a - b), f),
    "DARKEN": lambda a, b, f: _lerp(a, np.minimum(a, b), f),
    "LIGHTEN": lambda a, b, f: _lerp(a, np.maximum(a, b), f),
    "DIVIDE": lambda a, b, f: np.where(b != 0.0, (1.0 - f) * a + f * a / np.where(b != 0.0, b, 1.0),
                                       a),
}


def mix(blend: str, factor: ShaderValue, a: ShaderValue, b: ShaderValue,
        clamp_factor: bool = True, clamp_result: bool = False) -> ShaderValue:
    """The Mix node (and the older MixRGB) on colours: ``blend`` one of
    :data:`MIX_BLENDS`; a float mix is the same with every channel equal."""
    if blend not in MIX_BLENDS:
        raise Unsupported(f"a Mix node's {blend} blend")
    if blend == "MULTIPLY" and not factor.is_image and factor.attribute is None \
            and np.all(factor.value >= 1.0) and (clamp_factor or np.all(factor.value == 1.0)) \
            and not clamp_result:
        return multiply(a, b)  # the factor at 1: a plain product (glTF's tree)
    op = MIX_BLENDS[blend]
    return apply(lambda f, x, y: op(x, y, np.clip(f, 0.0, 1.0) if clamp_factor else f),
                 factor, a, b, clamp=clamp_result)


def _power(a, b):
    # Cycles' safe_powf: a negative base takes only whole exponents, else 0.
    whole = np.floor(b) == b
    return np.where(a >= 0.0, np.power(np.abs(a), b),
                    np.where(whole, np.power(np.abs(a), b) * np.where(np.mod(b, 2) == 1, -1, 1),
                             0.0))


#: The Math node's operations this follows (Cycles' ``svm_math``): (a, b, c) -> result.
MATH_OPS = {
    "ADD": lambda a, b, c: a + b,
    "SUBTRACT": lambda a, b, c: a - b,
    "MULTIPLY": lambda a, b, c: a * b,
    "DIVIDE": lambda a, b, c: np.where(b != 0.0, a / np.where(b != 0.0, b, 1.0), 0.0),
    "MULTIPLY_ADD": lambda a, b, c: a * b + c,
    "POWER": lambda a, b, c: _power(a, b),
    "MINIMUM": lambda a, b, c: np.minimum(a, b),
    "MAXIMUM": lambda a, b, c: np.maximum(a, b),
    "ABSOLUTE": lambda a, b, c: np.abs(a),
    "SQRT": lambda a, b, c: np.where(a > 0.0, np.sqrt(np.maximum(a, 0.0)), 0.0),
}


def math(op: str, a: ShaderValue, b: ShaderValue, c: ShaderValue,
         clamp: bool = False) -> ShaderValue:
    """The Math node: ``op`` one of :data:`MATH_OPS`."""
    if op not in MATH_OPS:
        raise Unsupported(f"a Math node's {op} operation")
    return apply(MATH_OPS[op], a, b, c, clamp=clamp)


def invert(factor: ShaderValue, color: ShaderValue) -> ShaderValue:
    """The Invert Color node: ``color`` toward 1 - ``color`` by ``factor``."""
    return apply(lambda f, x: _lerp(x, 1.0 - x, f), factor, color)


def map_range(value: ShaderValue, from_min: ShaderValue, from_max: ShaderValue,
              to_min: ShaderValue, to_max: ShaderValue, clamp: bool = True) -> ShaderValue:
    """The Map Range node, linear: ``value`` from [from_min, from_max] to [to_min,
    to_max] (an empty source range gives 0, as Cycles)."""
    def fn(v, a, b, c, d):
        span = b - a
        t = np.where(span != 0.0, (v - a) / np.where(span != 0.0, span, 1.0), 0.0)
        out = c + t * (d - c)
        if clamp:
            out = np.where(d > c, np.clip(out, c, d), np.clip(out, d, c))
        return np.where(span != 0.0, out, 0.0)
    return apply(fn, value, from_min, from_max, to_min, to_max)


def clamp_range(value: ShaderValue, lo: ShaderValue, hi: ShaderValue,
                ordered: bool = True) -> ShaderValue:
    """The Clamp node: MINMAX (``ordered``) or RANGE (either bound may be the larger)."""
    if ordered:
        return apply(lambda v, a, b: np.minimum(np.maximum(v, a), b), value, lo, hi)
    return apply(lambda v, a, b: np.clip(v, np.minimum(a, b), np.maximum(a, b)), value, lo, hi)


def combine(red: ShaderValue, green: ShaderValue, blue: ShaderValue) -> ShaderValue:
    """The Combine Color node (RGB): three floats into a colour."""
    return apply(lambda r, g, b: np.stack(np.broadcast_arrays(r[..., 0], g[..., 0], b[..., 0]),
                                          axis=-1), red, green, blue)


def gamma(color: ShaderValue, exponent: ShaderValue) -> ShaderValue:
    """The Gamma node: each channel to the power ``exponent`` (Cycles leaves a
    non-positive channel as it is)."""
    return apply(lambda c, g: np.where(c > 0.0, np.power(np.maximum(c, 0.0), g), c),
                 color, exponent)


#: Entries of a Color Ramp's table: Cycles bakes every ramp into this many and reads it
#: with linear interpolation (``rgb_ramp_lookup``), so a table this size is exact.
RAMP_TABLE_SIZE = 256


def ramp(factor: ShaderValue, table: np.ndarray, interpolate: bool = True) -> ShaderValue:
    """The Color Ramp node: ``table`` (RAMP_TABLE_SIZE, 4) RGBA, the ramp evaluated at
    ``i / (size - 1)``, read at the factor (a float); the Color output (its Alpha is
    :func:`ramp_alpha`)."""
    return _ramp_lookup(factor, np.asarray(table, np.float32)[:, :3], interpolate)


def ramp_alpha(factor: ShaderValue, table: np.ndarray, interpolate: bool = True
               ) -> ShaderValue:
    """The Color Ramp's Alpha output (every channel the ramp's alpha)."""
    a = np.asarray(table, np.float32)[:, 3:4]
    return _ramp_lookup(factor, np.repeat(a, 3, axis=1), interpolate)


def _ramp_lookup(factor: ShaderValue, table: np.ndarray, interpolate: bool) -> ShaderValue:
    n = len(table)

    def fn(f):
        x = np.clip(f[..., 0], 0.0, 1.0) * (n - 1)
        i = np.clip(x.astype(np.int64), 0, n - 1)
        out = table[i]
        if interpolate:
            t = (x - i)[..., None]
            out = out * (1.0 - t) + table[np.minimum(i + 1, n - 1)] * t
        return out
    return apply(fn, factor)
