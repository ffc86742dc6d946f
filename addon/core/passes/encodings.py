"""How float passes become the images ControlNets and people read (pure numpy).

Every choice here is written into the pass manifest (``CONVENTIONS``).
"""

from __future__ import annotations

import numpy as np

from ..rig.humanoid import JOINT_BY_NAME

# Body-part labels. Bones map to canonical joints through the bone map; each
# vertex takes the label of its dominant deforming bone.
PARTS = (
    "background", "head", "torso", "left_upper_arm", "right_upper_arm", "left_lower_arm",
    "right_lower_arm", "left_hand", "right_hand", "left_upper_leg", "right_upper_leg",
    "left_lower_leg", "right_lower_leg", "left_foot", "right_foot", "accessory",
)
PART_ID = {name: i for i, name in enumerate(PARTS)}
_PART_OF_JOINT = {
    "hips": "torso", "spine": "torso", "chest": "torso", "upperChest": "torso",
    "neck": "head", "head": "head",
}
for _side in ("left", "right"):
    _PART_OF_JOINT |= {
        f"{_side}Shoulder": "torso", f"{_side}UpperArm": f"{_side}_upper_arm",
        f"{_side}UpperArmTwist": f"{_side}_upper_arm", f"{_side}LowerArm": f"{_side}_lower_arm",
        f"{_side}LowerArmTwist": f"{_side}_lower_arm", f"{_side}Hand": f"{_side}_hand",
        f"{_side}UpperLeg": f"{_side}_upper_leg", f"{_side}UpperLegTwist": f"{_side}_upper_leg",
        f"{_side}LowerLeg": f"{_side}_lower_leg", f"{_side}LowerLegTwist": f"{_side}_lower_leg",
        f"{_side}Foot": f"{_side}_foot", f"{_side}Toes": f"{_side}_foot",
    }

# A fixed, well-separated palette for the parts preview image.
PART_COLORS = np.array([
    [0, 0, 0], [255, 205, 148], [200, 60, 60], [60, 200, 60], [60, 60, 200], [130, 230, 130],
    [130, 130, 230], [40, 120, 40], [40, 40, 120], [230, 200, 60], [60, 200, 230],
    [240, 240, 130], [130, 240, 240], [150, 110, 20], [20, 110, 150], [200, 80, 200],
], dtype=np.uint8)

CONVENTIONS = {
    "axes": "world Z-up, metres; camera space x right, y up, looking down -Z",
    "pixels": "u right, v down, origin top-left, pixel centres at +0.5",
    "depth": "planar camera distance (-z_cam) in metres, float32, +inf where empty",
    "depth16": "uint16 PNG, 1 + round(65534*clip((far-d)/(far-near), 0, 1)) with the "
               "shot-fixed near/far of the manifest (near = 65535 bright, far = 1, like "
               "MiDaS-style depth ControlNets); 0 where empty",
    "depth8": "uint8 greyscale PNG for ControlNet depth models and ComfyUI's LoadImage (which "
              "reads 16-bit PNGs as flat white): 1 + round(254*clip((far-d)/(far-near), 0, 1)) "
              "with depth16's near/far (near = 255 white, far = 1); 0 where empty",
    "normal": "camera-space unit normals (x right, y up, z towards the viewer), float32",
    "normal_color": "ControlNet 1.1 normalbae (ScanNet protocol): RGB = 255*((-x, y, z)+1)/2 "
                    "in camera space: red = left, green = up, blue = towards the viewer; "
                    "black where empty",
    "motion": "EXR float32 pixels, channels backward.u, backward.v = (u, v) to the previous "
              "frame, forward.u, forward.v = (u, v) to the next frame (Nuke's layer names; "
              "in this order in the file; folders from before hold them as R,G,B,A): where "
              "this pixel's surface point is in that frame minus where it is now (u right, "
              "v down, unlike Nuke's y up); 0 where empty",
    "mask": "uint8 PNG, 255 on the character",
    "parts": "uint8 PNG of part ids (see manifest 'parts'), 0 background",
    "skeleton": "OpenPose JSON (BODY_25 + hands + face; COCO-18 in skeleton_coco18/) and the "
                "ControlNet-style drawing",
    "skeleton_normalized": "with --openpose-normalized: skeleton_coco18's JSON with x / "
                           "canvas_width and y / canvas_height (0-1, the form controlnet_aux "
                           "and ComfyUI pose tools read); [0, 0, 0] for points left out",
    "beauty": "a Cycles render at the manifest's 'beauty' settings (samples, denoising; "
              "default the skin model's training target: 16 denoised), the scene's lights "
              "and pixel filter, 8-bit sRGB (Blender's Standard view, not the scene's view "
              "transform), straight alpha on a transparent film",
    "rest_position": "EXR float32 X,Y,Z: the visible surface point's position in the object "
                     "space of its mesh at rest (Blender's rest_position attribute: before "
                     "shape keys and modifiers, so pose-invariant), metres, every mesh; "
                     "0 where empty",
    "rest_position16": "uint16 RGB PNG preview, per axis 1 + round(65534*(p-lo)/(hi-lo)) "
                       "with the manifest's shot-fixed 'rest_box' [lo, hi]; 0 where empty",
    "uv": "EXR float32 R,G,B = (u, v, has_uv): the active render UV map of the visible "
          "mesh (v up, as Blender stores it), has_uv 1 where that mesh has a UV map; "
          "0 where it has none or the pixel is empty",
    "uv16": "uint16 RGB PNG preview: R,G = 1 + round(65534*clip(u or v, 0, 1)), B = 65535 "
            "where has_uv; 0 where empty or without UVs",
    "normal_world": "EXR float32 X,Y,Z world-space unit normals (Z up); 0 where empty",
    "view_dir": "EXR float32 X,Y,Z world-space unit vector from the surface point towards "
                "the camera (orthographic: the camera's backward axis); 0 where empty",
    "light_visibility": "EXR float32 R,G,B,A: per light of the manifest's 'lights' (in that "
                        "order, up to 4, unused channels 0) 1 where the segment from the "
                        "visible side of the surface point to the light meets no geometry "
                        "(a side facing away from the light never sees it), else 0; 0 where "
                        "empty. Fast engine: shadow maps (errors within ~a shadow-map texel "
                        "of shadow edges); cycles engine: ray traced (exact)",
    "irradiance": "EXR float32 R,G,B linear: the lights' direct diffuse light on a white "
                  "surface (Cycles' Diffuse Direct pass: a sun of strength S gives S/pi at "
                  "normal incidence, a point light of P watts P/(4 pi^2 d^2)), times each "
                  "light's colour and light_visibility; 0 where empty. World light and "
                  "bounces are not in it. Fast engine: filtered over the pixel as Cycles' "
                  "film filters (Blackman-Harris over +-1.5 px, 2x2 samples a pixel, the "
                  "covered ones): shadow edges and outlines blend as in the render; "
                  "cycles engine: at the pixel's centre",
    "specular": "EXR float32 R,G,B linear: the lights' direct light reflected toward the "
                "camera by a glossy dielectric of the material's roughness and F0 (GGX: "
                "a black Principled BSDF of its IOR, Specular IOR Level and Specular "
                "Tint; 0.6 and 0.04 where they are not read), times "
                "each light's colour and light_visibility; 0 where empty. Highlights and "
                "the Fresnel rim of a light from behind. Filtered over the pixel as "
                "irradiance is",
    "world_light": "EXR float32 R,G,B linear: the world's direct diffuse light on a white "
                   "surface (Cycles' Diffuse Direct pass with the lamps hidden): the "
                   "manifest's world colour (its strength included) times the "
                   "cosine-weighted share of open sky the visible side of the point sees "
                   "(1 under an open sky, less in creases, armpits, under the chin), over "
                   "32 directions by shadow maps; 0 where empty. At the pixel's centre",
    "albedo": "EXR float32 R,G,B linear: the surface's base colour as its material "
              "gives it (Principled BSDF Base Color times 1 - Metallic: Cycles' Diffuse "
              "Color pass), image textures read at their UV map; 0 where empty. Fast "
              "engine: constants, RGB nodes and Image Textures, averaged over the "
              "pixel filter's window (Cycles' Blackman-Harris of width 1.5, +-1.5 px) "
              "where a pixel covers many texels, and across outlines and material "
              "edges as irradiance is; "
              "other node trees give the material's viewport colour (the manifest's "
              "warnings name them)",
    "lights": "per light: name, type (SUN, POINT, SPOT, AREA), world position, world "
              "direction towards the light (a sun's light travels along -direction), "
              "linear colour and energy (a sun's strength, else watts); "
              "the manifest gives them at the scene's first frame, camera/####.json per frame",
    "world": "with world_light: color, the world's light as one linear colour (its "
             "Background's colour, an environment image's mean, times its strength; "
             "a scene without a world: the training world's)",
}


def part_of_joint(canonical: str | None) -> int:
    """Part id of a canonical joint; bones outside the humanoid are accessories."""
    if canonical is None:
        return PART_ID["accessory"]
    if canonical in _PART_OF_JOINT:
        return PART_ID[_PART_OF_JOINT[canonical]]
    joint = JOINT_BY_NAME.get(canonical)
    if joint is not None and joint.group == "finger":
        return PART_ID[f"{joint.side}_hand"]
    return PART_ID["accessory"]


def _depth_to_uint(depth: np.ndarray, near: float, far: float, dtype: type) -> np.ndarray:
    """Shot-stable integer depth: near -> the dtype's max, far -> 1, empty -> 0."""
    if not far > near:
        raise ValueError(f"depth range needs far > near (got near={near}, far={far})")
    top = np.iinfo(dtype).max
    d = np.clip((far - depth) / (far - near), 0.0, 1.0)
    out = np.round(1 + d * (top - 1)).astype(dtype)
    out[~np.isfinite(depth)] = 0
    return out


def depth_to_u16(depth: np.ndarray, near: float, far: float) -> np.ndarray:
    """Shot-stable 16-bit depth: near -> 65535, far -> 1, empty -> 0."""
    return _depth_to_uint(depth, near, far, np.uint16)


def depth_to_u8(depth: np.ndarray, near: float, far: float) -> np.ndarray:
    """depth16's mapping at 8 bits (near 255, far 1, empty 0): the depth image ComfyUI's
    LoadImage and ControlNet depth models read (they take 8-bit PNGs)."""
    return _depth_to_uint(depth, near, far, np.uint8)


def normal_to_color(normal_cam: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Camera-space normals -> ControlNet normalbae colours (uint8 RGB), black
    where ``mask`` is False. A surface facing the camera is (128, 128, 255)."""
    rgb = np.stack([-normal_cam[..., 0], normal_cam[..., 1], normal_cam[..., 2]], axis=-1)
    out = np.round((rgb + 1.0) * 127.5).clip(0, 255).astype(np.uint8)
    out[~mask] = 0
    return out


def parts_to_color(parts: np.ndarray) -> np.ndarray:
    """Part-id image -> RGB preview with the fixed palette."""
    return PART_COLORS[np.clip(parts, 0, len(PART_COLORS) - 1)]


def rest_to_u16(rest: np.ndarray, mask: np.ndarray, lo: np.ndarray, hi: np.ndarray
                ) -> np.ndarray:
    """Rest positions (H, W, 3) -> uint16 RGB preview over the shot's box [lo, hi];
    0 where ``mask`` is False."""
    lo = np.asarray(lo, np.float64)
    span = np.maximum(np.asarray(hi, np.float64) - lo, 1e-12)
    d = np.clip((rest - lo) / span, 0.0, 1.0)
    out = np.round(1 + d * 65534).astype(np.uint16)
    out[~mask] = 0
    return out


def uv_to_u16(uv: np.ndarray) -> np.ndarray:
    """(u, v, has_uv) (H, W, 3) -> uint16 RGB preview: u, v in 1..65535 (clipped to
    [0, 1]), blue 65535 where the mesh has UVs; 0 without UVs or where empty."""
    has = uv[..., 2] > 0.5
    out = np.zeros(uv.shape, np.uint16)
    out[..., :2] = np.round(1 + np.clip(uv[..., :2], 0.0, 1.0) * 65534).astype(np.uint16)
    out[..., 2] = 65535
    out[~has] = 0
    return out
