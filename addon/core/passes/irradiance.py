"""The ``irradiance`` and ``specular`` passes: the scene's direct light on the surface
(pure numpy).

Defined as Cycles' *Diffuse Direct* light on a white Lambertian surface, in the
render's linear units: for each light, its colour times

- a sun of strength ``S``: ``S / pi * cos``;
- a point or spot light of power ``P`` at distance ``d``: ``P / (4 pi^2 d^2) * cos``
  (a spot also times its cone: 0 outside ``spot_size``, a smoothstep over ``spot_blend``);
- an area light, taken as a point that emits on its front side only:
  ``P * cos_l / (pi^2 d^2) * cos`` (``cos_l`` the angle off its normal),

with ``cos`` the shading normal's cosine to the light, times the light's
``light_visibility`` (cast shadows). Both constants were measured against Cycles
(a white plane under a sun of 1 reads 1/pi; 100 W at 1 m reads 100 / (4 pi^2)).

Why a pass: the skin model paints albedo times *this*, so the scene's lights (moved,
recoloured, a second one) reach the painting as the renderer would light them,
instead of the one light rig its training saw.

``specular`` is the same lights reflected toward the camera by a glossy dielectric of
the surface's roughness and reflectance (GGX; F0 from the Principled BSDF's IOR, 0.04 at
its default 1.5): the highlights and the
Fresnel rim a light behind the character draws, which no diffuse term carries and a
network cannot infer without the light's direction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from .shadow import Light


@dataclass
class LightEmission(Light):
    """A light's placement (what shadow maps need) plus what it sends."""

    color: np.ndarray = field(default_factory=lambda: np.ones(3))  # linear RGB
    energy: float = 1.0  # a sun's strength (W/m^2), else power (W)
    spot_size: float = np.pi  # full cone angle (SPOT)
    spot_blend: float = 0.0  # 0..1 (SPOT)


def _smoothstep(x: np.ndarray) -> np.ndarray:
    x = np.clip(x, 0.0, 1.0)
    return x * x * (3.0 - 2.0 * x)


def light_scale(light: LightEmission, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(to_light (N, 3) unit, radiance scale (N,)) of ``light`` at ``points``: the
    irradiance a surface facing it head-on gets, over pi (before colour)."""
    n = len(points)
    if light.type == "SUN":
        d = np.broadcast_to(np.asarray(light.direction, np.float64), (n, 3))
        return d, np.full(n, float(light.energy) / np.pi)
    to = np.asarray(light.position, np.float64) - points
    dist2 = np.maximum(np.einsum("ij,ij->i", to, to), 1e-8)
    d = to / np.sqrt(dist2)[:, None]
    if light.type == "AREA":
        cos_l = np.clip(-(d @ np.asarray(light.direction, np.float64)), 0.0, None)
        return d, float(light.energy) * cos_l / (np.pi ** 2 * dist2)
    scale = float(light.energy) / (4.0 * np.pi ** 2 * dist2)
    if light.type == "SPOT":
        # The cone's axis is the light's -direction; Cycles' blend smooths its edge.
        cos_axis = -(d @ np.asarray(light.direction, np.float64))
        cos_edge = np.cos(float(light.spot_size) / 2.0)
        spread = max(float(light.spot_blend), 1e-6) * (1.0 - cos_edge)
        scale = scale * _smoothstep((cos_axis - cos_edge) / spread)
    return d, scale


def irradiance(points: np.ndarray, normals: np.ndarray, visibility: np.ndarray,
               lights: Sequence[LightEmission]) -> np.ndarray:
    """(N, 3) float32 direct diffuse light at ``points`` (N, 3) world with unit shading
    ``normals`` (N, 3) world; ``visibility`` (N, >= len(lights)) 0/1 per light."""
    points = np.asarray(points, np.float64).reshape(-1, 3)
    normals = np.asarray(normals, np.float64).reshape(-1, 3)
    vis = np.asarray(visibility, np.float64).reshape(len(points), -1)
    out = np.zeros((len(points), 3), np.float64)
    for k, light in enumerate(lights):
        d, scale = light_scale(light, points)
        cos = np.clip(np.einsum("ij,ij->i", normals, d), 0.0, None)
        out += (scale * cos * vis[:, k])[:, None] * np.asarray(light.color, np.float64)[None]
    return out.astype(np.float32)


#: The ``specular`` pass's dielectric: Principled BSDF's default (IOR 1.5: F0 = 0.04),
#: at the surface's own roughness where the caller reads it (the passes do), else this
#: middle one. The lobe's shape has to be the material's: the skin model scales the pass
#: per pixel but cannot reshape it, and on a KayKit mannequin (roughness 1) Cycles'
#: Glossy Direct correlates 0.69 with a lobe of 0.6 and 0.98 with its own (key behind).
SPECULAR_ROUGHNESS = 0.6
SPECULAR_F0 = 0.04


def _smith_lambda(cos: np.ndarray, alpha2: float | np.ndarray) -> np.ndarray:
    """GGX's Smith Lambda of a direction at ``cos`` to the normal (Heitz 2014, eq. 72)."""
    c2 = np.maximum(cos * cos, 1e-12)
    return 0.5 * (np.sqrt(1.0 + alpha2 * np.maximum(1.0 / c2 - 1.0, 0.0)) - 1.0)


def dielectric_fresnel_blend(cos: np.ndarray, ior: float = 1.5) -> np.ndarray:
    """(N,) in [0, 1]: how far the Fresnel reflectance has gone from its head-on value
    to 1 at ``cos`` (the cosine between the view and the microfacet), for a dielectric
    of ``ior``: Cycles' Principled BSDF blends F0 (a colour) toward white by this, the
    exact dielectric curve (Schlick's (1 - cos)^5 reads 22 % under it at cos 0.5, 4-6 %
    over it nearer grazing)."""
    c = np.clip(cos, 0.0, 1.0)
    g = np.sqrt(ior * ior - 1.0 + c * c)
    exact = 0.5 * ((g - c) / (g + c)) ** 2 \
        * (1.0 + ((c * (g + c) - 1.0) / (c * (g - c) + 1.0)) ** 2)
    head_on = ((ior - 1.0) / (ior + 1.0)) ** 2
    return np.clip((exact - head_on) / (1.0 - head_on), 0.0, 1.0)


def specular(points: np.ndarray, normals: np.ndarray, view: np.ndarray,
             visibility: np.ndarray, lights: Sequence[LightEmission],
             roughness: float | np.ndarray = SPECULAR_ROUGHNESS,
             f0: float | np.ndarray = SPECULAR_F0) -> np.ndarray:
    """(N, 3) float32: the lights' direct light a glossy dielectric reflects toward the
    camera (GGX microfacets, height-correlated Smith masking and the dielectric Fresnel
    blend, as Cycles evaluates them), in the render's linear
    units: the radiance a black Principled BSDF of ``roughness`` (one value, or (N,),
    the surface's own) and reflectance ``f0`` (one value, (N,), or (N, 3): a metal's
    colour) shows, shadowed by ``visibility``. ``view`` (N, 3): unit directions from the
    surface to the camera.

    Against Cycles' glossy render of a black sphere, the height-correlated masking and
    the exact Fresnel curve read 0.020 / 0.050 / 0.060 (total error, roughness 0.6 / 0.9
    / 1) lit from the upper right where the separable masking and Schlick read 0.027 /
    0.077 / 0.106, and a key from behind a rough surface 0.84-0.86 of the render's rim
    where they read 0.41-0.50."""
    points = np.asarray(points, np.float64).reshape(-1, 3)
    n = np.asarray(normals, np.float64).reshape(-1, 3)
    v = np.asarray(view, np.float64).reshape(-1, 3)
    vis = np.asarray(visibility, np.float64).reshape(len(points), -1)
    rough = np.clip(np.asarray(roughness, np.float64), 1e-3, 1.0)
    alpha2 = rough.reshape(-1) ** 4 if rough.ndim else float(rough) ** 4  # alpha = r²
    f0 = np.asarray(f0, np.float64).reshape(len(points), -1) if np.ndim(f0) else float(f0)
    cos_v = np.clip(np.einsum("ij,ij->i", n, v), 0.0, 1.0)
    lam_v = _smith_lambda(cos_v, alpha2)
    out = np.zeros((len(points), 3), np.float64)
    for k, light in enumerate(lights):
        d, scale = light_scale(light, points)
        cos_l = np.clip(np.einsum("ij,ij->i", n, d), 0.0, None)
        h = d + v
        h /= np.maximum(np.linalg.norm(h, axis=1), 1e-12)[:, None]
        cos_h = np.clip(np.einsum("ij,ij->i", n, h), 0.0, 1.0)
        vh = np.clip(np.einsum("ij,ij->i", v, h), 0.0, 1.0)
        dist = alpha2 / (np.pi * (cos_h * cos_h * (alpha2 - 1.0) + 1.0) ** 2)
        fresnel = f0 + (1.0 - f0) * dielectric_fresnel_blend(vh)[:, None]  # (N, 1) or (N, 3)
        # radiance = BRDF * E * cos_l, E = pi * scale; BRDF = D G F / (4 cos_l cos_v) with
        # G = 1 / (1 + Lambda_l + Lambda_v)
        brdf_cos = dist / (4.0 * np.maximum(cos_v, 1e-12)
                           * (1.0 + _smith_lambda(cos_l, alpha2) + lam_v))
        lit = (cos_l > 0) & (cos_v > 0)
        out += (np.pi * scale * brdf_cos * lit * vis[:, k])[:, None] * fresnel \
            * np.asarray(light.color, np.float64)[None]
    return out.astype(np.float32)


def coated_specular(points: np.ndarray, normals: np.ndarray, view: np.ndarray,
                    visibility: np.ndarray, lights: Sequence[LightEmission],
                    roughness: float | np.ndarray, f0: float | np.ndarray,
                    coat: np.ndarray | None = None) -> np.ndarray:
    """:func:`specular` of the surface plus, where ``coat`` (N, 3: weight, roughness,
    F0) has weight, its clear coat's lobe times the weight: a lacquered surface's sharp
    highlight over its broad one, as Cycles' Principled BSDF layers them."""
    out = specular(points, normals, view, visibility, lights, roughness, f0)
    if coat is None:
        return out
    coat = np.asarray(coat, np.float64).reshape(-1, 3)
    on = coat[:, 0] > 0.0
    if on.any():
        vis = np.asarray(visibility).reshape(len(out), -1)
        out[on] += (coat[on, :1] * specular(
            np.asarray(points).reshape(-1, 3)[on], np.asarray(normals).reshape(-1, 3)[on],
            np.asarray(view).reshape(-1, 3)[on], vis[on], lights, coat[on, 1],
            coat[on, 2])).astype(np.float32)
    return out

