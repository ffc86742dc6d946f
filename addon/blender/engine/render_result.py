"""A painted frame and its passes as Blender's Render Result wants them: float32 rows
bottom first, scene-linear colour, Blender's own pass conventions. Numpy only.

The painting is display-ready sRGB (what Restyle writes as PNG); the Combined pass holds
its scene-linear values, so a scene whose view transform is *Standard* saves the very
bytes Restyle writes (to Blender's dither, at most 1/255)."""

from __future__ import annotations

import numpy as np

from ...core.passes.albedo import srgb_to_linear as decode_srgb

#: The passes the engine adds beside Combined: (name, channels, channel ids).
PASSES = (("Depth", 1, "Z"), ("Normal", 3, "XYZ"), ("Vector", 4, "XYZW"), ("Mask", 1, "X"))
#: What Blender's Depth pass holds where nothing is hit.
BACKGROUND_DEPTH = 1e10


def srgb_to_linear(rgb8: np.ndarray) -> np.ndarray:
    """uint8 sRGB -> float32 scene-linear (the sRGB EOTF, as OpenColorIO's Standard)."""
    return decode_srgb(np.asarray(rgb8, np.float32) / np.float32(255))


def _rows(img: np.ndarray) -> np.ndarray:
    """(H, W, C) top row first -> (H*W, C) float32, bottom row first."""
    img = np.asarray(img, np.float32)
    if img.ndim == 2:
        img = img[..., None]
    return np.ascontiguousarray(img[::-1].reshape(-1, img.shape[-1]))


def combined(rgb8: np.ndarray, mask: np.ndarray | None, transparent: bool) -> np.ndarray:
    """The Combined pass: linear RGB, alpha the character's mask on a transparent film
    (else opaque, black around the character as Restyle paints it)."""
    h, w = rgb8.shape[:2]
    if transparent and mask is not None:
        alpha = (np.asarray(mask) > 0).astype(np.float32)
    else:
        alpha = np.ones((h, w), np.float32)
    return _rows(np.concatenate([srgb_to_linear(rgb8), alpha[..., None]], axis=-1))


def pass_rects(arrays: dict[str, np.ndarray], camera_world: np.ndarray
               ) -> dict[str, np.ndarray]:
    """Depth, Normal, Vector and Mask from the frame's wire passes, in Blender's
    conventions: depth planar (1e10 where empty), normals in world space (as Cycles'),
    Vector ``(prev - now)`` xy and ``(now - next)`` zw in pixels with y up, the mask 0/1."""
    out: dict[str, np.ndarray] = {}
    depth = np.asarray(arrays["depth"], np.float32)
    out["Depth"] = _rows(np.where(np.isfinite(depth), depth, BACKGROUND_DEPTH))
    if "normal" in arrays:
        rot = np.asarray(camera_world, np.float64)[:3, :3]
        rot = rot / np.linalg.norm(rot, axis=0, keepdims=True)
        n = np.asarray(arrays["normal"], np.float32) @ rot.T.astype(np.float32)
        out["Normal"] = _rows(n)
    if "motion" in arrays:
        m = np.asarray(arrays["motion"], np.float32)
        out["Vector"] = _rows(np.stack([m[..., 0], -m[..., 1], -m[..., 2], m[..., 3]], -1))
    if "mask" in arrays:
        out["Mask"] = _rows(np.asarray(arrays["mask"]) > 0)
    return out
