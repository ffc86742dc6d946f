"""The skin network (torch): learned textures sampled at the surface + a small U-Net.

- A **neural texture pyramid** (Thies et al. 2019): ``tex_channels`` features at
  several resolutions (256² ... 32², finer for larger frames: :func:`texture_sizes`),
  each sampled bilinearly at the pixel's UV and summed, so coarse levels learn smooth
  colour fast and fine levels detail.
- A **3-D feature grid pyramid** over the rest-pose box, sampled trilinearly at
  the rest position: the same idea for meshes without UVs (``has_uv`` = 0 there).
- A **U-Net** without normalisation layers (statistics over a training crop would
  differ from a whole frame's) renders the features with the conditioning inputs.

Heads: ``regressor`` maps features to the image in one step; ``diffusion`` also
takes a noisy image and its time and predicts the clean image (x0) for a few
DDIM steps (:mod:`.sampling`). Everything exports to ONNX (GridSample, opset 20).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from . import features

DEFAULTS: dict[str, Any] = {
    "tex_channels": 16, "tex_sizes": [256, 128, 64, 32], "grid_sizes": [32, 16, 8],
    "unet": [32, 64, 128], "head": "regressor", "use_texture": True, "diffusion_steps": 4,
    "shading": None,  # None: on when the layout has the irradiance input (regressor head)
}
#: How far the shaded head's residual may move a pixel (sRGB units): highlights and
#: small corrections fit; the lighting must come through albedo x irradiance.
RESIDUAL_RANGE = 0.25
#: How much a unit of the albedo outputs' change (logit units) costs against a unit of
#: the residual (sRGB units) in :meth:`SkinNet.head_penalty`: Cycles' diffuse colour
#: is the base colour less what the gloss takes at a grazing view, a real change of a
#: few tenths, where the residual should be all but zero.
CHANGE_PENALTY = 0.1
HEADS = ("regressor", "diffusion")


def texture_sizes(side: int) -> list[int]:
    """The neural texture pyramid for frames ``side`` pixels across: the default
    levels, with finer ones up to ``side`` (rounded up to a power of two). A 512²
    frame's close-up reads a texel of the 256² level across two pixels or more: the
    finer level holds what its training frames show at that size."""
    sizes = [int(s) for s in DEFAULTS["tex_sizes"]]
    while sizes[0] < side:
        sizes.insert(0, sizes[0] * 2)
    return sizes


def model_config(lay: list[list], bounds: list[list[float]], **overrides: Any) -> dict[str, Any]:
    """The network's config (what :class:`SkinNet` and a runtime need): defaults,
    ``overrides``, the input layout and the rest-pose box."""
    unknown = sorted(set(overrides) - set(DEFAULTS))
    if unknown:
        raise ValueError(f"unknown model option(s) {', '.join(unknown)}; "
                         f"known: {', '.join(DEFAULTS)}")
    cfg = {**DEFAULTS, **overrides, "layout": lay, "rest_bounds": bounds}
    if cfg["head"] not in HEADS:
        raise ValueError(f"head {cfg['head']!r} must be one of {', '.join(HEADS)}")
    has_irr = features.offset(lay, "irradiance") is not None
    if cfg["shading"] is None:
        cfg["shading"] = has_irr and cfg["head"] == "regressor"
    if cfg["shading"] and (not has_irr or cfg["head"] != "regressor"):
        raise ValueError("the shaded head needs the irradiance input and the regressor head")
    return cfg


def net_config(folder_config: dict[str, Any]) -> dict[str, Any]:
    """The network's config from a model folder's ``config.json`` (what export wrote)."""
    return {**folder_config["model"], "layout": folder_config["layout"],
            "rest_bounds": folder_config["rest_bounds"], "head": folder_config["head"],
            "diffusion_steps": folder_config.get("diffusion_steps", 4)}


#: The albedo pass is clamped this far inside (0, 1) before its logit (a black pixel
#: stays reachable: logit(1e-3) = -6.9).
ALBEDO_EPS = 1e-3
#: The light-response curve a look learns (``light_curve`` knots in its config): the
#: irradiance's luminance from 0 to LIGHT_MAX, each knot's change of it; above, as lit.
LIGHT_MAX = 1.6
#: Luminance under which the curve's change is not divided further (the unlit, where
#: the irradiance's colour says nothing).
LIGHT_FLOOR = 0.05
LUMINANCE = (0.2126, 0.7152, 0.0722)  # Rec. 709: how the curve weighs the light's colour
#: The curve's learning rate: its knots move in units of light (the network's weights
#: in far smaller steps; measured on the toon look, 0.03 gained 0.46 dB, 0.1 0.67).
LIGHT_CURVE_LR = 0.1
#: The facing curve a look learns (``facing_curve`` knots in its config): over the
#: facing ratio |normal . view| from 0 (grazing: the silhouette) to 1 (facing the
#: camera), how far each pixel turns to the look's one edge colour (a cel look's ink
#: outlines, a painter's rim). Zero at the start: the look starts as its base. The edge
#: colour starts as ink (display units):
EDGE_INK = 0.02
#: The rate of a look's colour transform (``colour_matrix`` in its config): one 3x3
#: matrix and offset of the albedo pass for the whole character, the identity at the start.
COLOUR_LR = 0.02
#: How far a pixel's footprint reaches on a look's curves (``footprint`` in its config),
#: in units of the pass's change to the next pixel: Cycles' film averages a cel
#: terminator or an outline that crosses a pixel, so the curves are read as their mean
#: over a Gaussian of this width times the pass's local gradient, not at the pixel's
#: centre. Fitted to Cycles' toon look on the dance (all 24 frames, oracle of a step of
#: the irradiance and of the facing ratio): 0.65 reads 24.1 dB, the curves at the
#: centre 21.3.
FOOTPRINT = 0.65


def srgb_encode(lin: torch.Tensor) -> torch.Tensor:
    """Blender's Standard view: the sRGB curve of linear light (clipped at 0)."""
    lin = lin.clamp_min(0.0)
    return torch.where(lin <= 0.0031308, 12.92 * lin,
                       1.055 * lin.clamp_min(0.0031308) ** (1.0 / 2.4) - 0.055)


def pass_spread(value: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(N, 1, H, W): :data:`FOOTPRINT` times the magnitude of ``value``'s change per pixel
    (central differences on the character, one-sided at its edge, 0 off it): how wide
    a pass's values spread under one pixel of the film."""
    on = (mask > 0.5).to(value.dtype)
    grads = []
    for dim in (2, 3):
        n = value.shape[dim]
        pad = (0, 0, 1, 1) if dim == 2 else (1, 1, 0, 0)
        v, m = F.pad(value, pad), F.pad(on, pad)
        prev, nxt = v.narrow(dim, 0, n), v.narrow(dim, 2, n)
        mp, mn = m.narrow(dim, 0, n), m.narrow(dim, 2, n)
        both = (nxt - prev) / 2.0
        grads.append(torch.where(mp * mn > 0, both, mn * (nxt - value) + mp * (value - prev)))
    return FOOTPRINT * on * torch.sqrt(grads[0] ** 2 + grads[1] ** 2 + 1e-12)


def curve_mean(x: torch.Tensor, spread: torch.Tensor | None, values: torch.Tensor,
               step: float, zero_after: bool = False) -> torch.Tensor:
    """The piecewise-linear curve through ``values`` at 0, ``step``, 2 ``step``... (held
    at its ends; ``zero_after``: one more knot of 0 after the last) read at ``x``, or its
    mean over a Gaussian of ``spread`` around ``x`` (exact: a sum of ramps, each one's
    Gaussian mean in closed form), so a curve's step under a pixel paints as the film
    averages it. (N, 1, H, W) in and out."""
    if zero_after:
        values = torch.cat([values, values.new_zeros(1)])
    k = values.shape[0]
    knots = step * torch.arange(k, dtype=x.dtype, device=x.device).view(1, k, 1, 1)
    a = x - knots
    if spread is None:
        ramp = F.relu(a)
    else:
        s = spread + 1e-6
        ramp = a * 0.5 * (1.0 + torch.erf(a / (s * math.sqrt(2.0)))) \
            + s * torch.exp(-0.5 * (a / s) ** 2) / math.sqrt(2.0 * math.pi)
    slopes = ((values[1:] - values[:-1]) / step).view(1, k - 1, 1, 1)
    return values[0] + (slopes * (ramp[:, :-1] - ramp[:, 1:])).sum(1, keepdim=True)


def _block(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.SiLU(),
                         nn.Conv2d(cout, cout, 3, padding=1), nn.SiLU())


class UNet(nn.Module):
    """Conv blocks, average-pool down, nearest up, skip concatenation."""

    def __init__(self, cin: int, widths: list[int], cout: int = 3) -> None:
        super().__init__()
        self.down = nn.ModuleList()
        c = cin
        for w in widths:
            self.down.append(_block(c, w))
            c = w
        self.up = nn.ModuleList(_block(widths[i + 1] + widths[i], widths[i])
                                for i in reversed(range(len(widths) - 1)))
        self.out = nn.Conv2d(widths[0], cout, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skips = []
        for i, blk in enumerate(self.down):
            if i:
                x = F.avg_pool2d(x, 2)
            x = blk(x)
            skips.append(x)
        for blk, skip in zip(self.up, reversed(skips[:-1]), strict=True):
            x = F.interpolate(x, scale_factor=2.0, mode="nearest")
            x = blk(torch.cat([x, skip], 1))
        return self.out(x)


class SkinNet(nn.Module):
    """``forward(x)`` (regressor) or ``forward(x, x_t, t)`` (diffusion): ``x`` the
    (N, C, H, W) features of :func:`features.frame_features` (H, W multiples of
    ``2 ** (len(unet) - 1)``); returns the image in [0, 1] units (regressor) or
    the clean-image prediction in [-1, 1] (diffusion)."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        super().__init__()
        self.cfg = cfg
        ch = int(cfg["tex_channels"])
        self.use_texture = bool(cfg["use_texture"])
        self.diffusion = cfg["head"] == "diffusion"
        self.shading = bool(cfg.get("shading"))  # models from before the option: off
        self.irr_at = features.offset(cfg["layout"], "irradiance")
        self.spec_at = features.offset(cfg["layout"], "specular") if self.shading else None
        self.alb_at = features.offset(cfg["layout"], "albedo") if self.shading else None
        self.cond_ch = features.channels(cfg["layout"]) - 6
        if self.use_texture:
            self.tex = nn.ParameterList(nn.Parameter(torch.randn(1, ch, s, s) * 0.01)
                                        for s in cfg["tex_sizes"])
            self.grid = nn.ParameterList(nn.Parameter(torch.randn(1, ch, s, s, s) * 0.01)
                                         for s in cfg["grid_sizes"])
        cin = self.cond_ch + (ch if self.use_texture else 0) + (4 if self.diffusion else 0)
        cout = (9 + (self.spec_at is not None)) if self.shading else 3
        self.unet = UNet(cin, list(cfg["unet"]), cout)
        knots = int(cfg.get("light_curve") or 0) if self.shading else 0
        self.light_curve = nn.Parameter(torch.zeros(knots)) if knots > 1 else None
        fknots = int(cfg.get("facing_curve") or 0) if self.shading else 0
        self.nrm_at = features.offset(cfg["layout"], "normal_world")
        self.view_at = features.offset(cfg["layout"], "view_dir")
        if fknots > 1 and (self.nrm_at is None or self.view_at is None):
            raise ValueError("the facing curve needs the normal_world and view_dir inputs")
        self.facing_curve = nn.Parameter(torch.zeros(fknots)) if fknots > 1 else None
        # the edge colour in display units, ink at the start (outlines are drawn dark)
        self.edge_colour = nn.Parameter(torch.full((3,), EDGE_INK)) if fknots > 1 else None
        colour = bool(cfg.get("colour_matrix")) and self.alb_at is not None
        self.colour_matrix = nn.Parameter(torch.eye(3)) if colour else None
        self.colour_bias = nn.Parameter(torch.zeros(3)) if colour else None
        # a look's scales of the network's albedo change, residual and gloss and an offset
        # of its ambient (:meth:`shade`'s gates): as the base at the start
        self.head_gates = (nn.Parameter(torch.tensor([1.0, 1.0, 1.0, 0.0]))
                           if cfg.get("head_gates") and self.shading else None)
        # the curves read over each pixel's footprint (looks from before the option: off)
        self.footprint = bool(cfg.get("footprint"))

    def light_response(self, irradiance: torch.Tensor,
                       mask: torch.Tensor | None = None) -> torch.Tensor:
        """The irradiance as the look's light curve bends it: one curve of the light's
        luminance for the whole character (a cel look's hard terminator, a painter's
        ramp), so what the keys show of light and shadow on one surface reaches every
        surface, also one no key shows lit; with the ``footprint`` option (and the
        ``mask``) read over each pixel's footprint (:func:`curve_mean`). Zero knots
        (the start): the pass itself."""
        if self.light_curve is None:
            return irradiance
        w = irradiance.new_tensor(LUMINANCE).view(1, 3, 1, 1)
        lum = (irradiance * w).sum(1, keepdim=True)
        spread = pass_spread(lum, mask) if self.footprint and mask is not None else None
        change = curve_mean(lum, spread, self.light_curve,
                            LIGHT_MAX / (self.light_curve.shape[0] - 1), zero_after=True)
        return F.relu(irradiance * (1.0 + change / lum.clamp(min=LIGHT_FLOOR)))

    def colour_response(self, albedo: torch.Tensor) -> torch.Tensor:
        """The albedo pass as the look's colour transform moves it: one linear map of the
        materials' colours for the whole character (a recolour, a skin state), so the
        colours the keys show change every surface alike, also those no key shows. The
        identity at the start: the pass itself."""
        if self.colour_matrix is None:
            return albedo
        return (torch.einsum("ij,njhw->nihw", self.colour_matrix, albedo)
                + self.colour_bias.view(1, 3, 1, 1))

    def facing_response(self, image: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """The image turned towards the look's edge colour by the facing curve: ink
        where the surface grazes the view (outlines), a rim, or nothing (zero knots,
        the start). One curve of a pixel's geometry for the whole character, so the
        outlines the keys show reach every silhouette of every frame."""
        if self.facing_curve is None:
            return image
        n = x[:, self.nrm_at:self.nrm_at + 3]
        v = x[:, self.view_at:self.view_at + 3]
        facing = (n * v).sum(1, keepdim=True).abs().clamp(max=1.0)
        spread = pass_spread(facing, self._mask(x)) if self.footprint else None
        # not clamped: a knot pushed below zero still learns back (a clamp would hold it)
        w = curve_mean(facing, spread, self.facing_curve,
                       1.0 / (self.facing_curve.shape[0] - 1))
        return image + w * (self.edge_colour.view(1, 3, 1, 1) - image)

    def surface_features(self, x: torch.Tensor) -> torch.Tensor:
        """(N, tex_channels, H, W): the neural texture at the UV where ``has_uv``,
        else the 3-D grid at the rest position (0 off the character)."""
        uv = x[:, 0:2].permute(0, 2, 3, 1) * 2.0 - 1.0
        has_uv = x[:, 2:3]
        rest = x[:, 3:6].permute(0, 2, 3, 1).unsqueeze(1)
        n = x.shape[0]
        tex = sum(F.grid_sample(t.expand(n, -1, -1, -1), uv, mode="bilinear",
                                padding_mode="border", align_corners=False) for t in self.tex)
        grid = sum(F.grid_sample(g.expand(n, -1, -1, -1, -1), rest, mode="bilinear",
                                 padding_mode="border", align_corners=False)[:, :, 0]
                   for g in self.grid)
        return has_uv * tex + (1.0 - has_uv) * self._mask(x) * grid

    def _mask(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, 6 + self._mask_index():7 + self._mask_index()]

    def _mask_index(self) -> int:
        c = 0
        for name, n in self.cfg["layout"][2:]:
            if name == "mask":
                return c
            c += int(n)
        raise ValueError("the skin model's layout has no mask channel")

    def forward(self, x: torch.Tensor, x_t: torch.Tensor | None = None,
                t: torch.Tensor | None = None) -> torch.Tensor:
        parts = [x[:, 6:]]
        if self.use_texture:
            parts.insert(0, self.surface_features(x))
        if self.diffusion:
            if x_t is None or t is None:
                raise ValueError("the diffusion head needs x_t and t")
            parts += [x_t, t.reshape(-1, 1, 1, 1).expand(-1, 1, x.shape[2], x.shape[3])]
        out = self.unet(torch.cat(parts, 1))
        # for head_penalty; an exported graph (eval mode) keeps nothing
        self._head = out if self.shading and self.training else None
        if self.shading:
            spec = None if self.spec_at is None else x[:, self.spec_at:self.spec_at + 3]
            alb = None if self.alb_at is None else self.colour_response(
                x[:, self.alb_at:self.alb_at + 3])
            irr = self.light_response(x[:, self.irr_at:self.irr_at + 3], self._mask(x))
            return self.facing_response(self.shade(out, irr, spec, alb, self.head_gates), x)
        return out if self.diffusion else out + 0.5

    def head_penalty(self, mask: torch.Tensor) -> torch.Tensor:
        """The last training forward's shaded head away from its physical reading, masked
        mean: the residual's size plus :data:`CHANGE_PENALTY` times the albedo change's.

        Unpenalised, a network retrained release after release from its predecessor drifted to
        a fake split that fits the scene's light: an albedo at a third of the pass, the
        gloss at half the specular pass and a lift of +0.1 added in sRGB. It paints the
        training light well and a key from behind badly: the lift does not scale with
        the light, so the texture's contrast and the rim's highlight come out at half
        of Cycles' (a dim back-lit shot 0.04 too dark on its lit pixels and smoother than
        the reference). The penalty keeps the light on the albedo x irradiance and gloss
        x specular path, where a moved light moves it."""
        out = getattr(self, "_head", None)
        if out is None or not self.shading:
            return mask.new_zeros((), dtype=torch.float32)
        m = mask.float()
        pen = RESIDUAL_RANGE * torch.tanh(out[:, 6:9]).abs().mean(1, keepdim=True)
        if self.alb_at is not None:
            pen = pen + CHANGE_PENALTY * out[:, 0:3].abs().mean(1, keepdim=True)
        return (pen * m).sum() / m.sum().clamp_min(1.0)

    @staticmethod
    def shade(out: torch.Tensor, irradiance: torch.Tensor,
              specular: torch.Tensor | None = None,
              albedo_pass: torch.Tensor | None = None,
              gates: torch.Tensor | None = None) -> torch.Tensor:
        """The shaded head: the U-Net's channels are an albedo, the light no pass
        carries (the world's, bounces: a learned ambient), a bounded residual and, with
        the specular input, how glossy the surface is (0..2 times the reference
        surface's reflection); the image is the Standard view of albedo x (irradiance
        + ambient) + gloss x specular, plus the residual. The scene's lights reach the
        pixel through the irradiance and specular passes, so a light moved after
        training moves the shading and the highlights the way Cycles would.

        With the albedo pass, the albedo outputs are a change of that pass in logit
        space (zero: the pass itself): the materials' own colours, sharp at any size and
        right on faces training never saw, so the network learns how they are lit; and a
        look fine-tuned from the model can still move any colour to any other.

        ``gates`` (a look's ``head_gates``): scales of the network's albedo change, its
        residual and its gloss, and an offset of its ambient, the same for every pixel
        (1, 1, 1, 0: as the base). What the base learned per material (its sheen, how
        dark its diffuse renders) is taken back by four numbers, so a look that
        replaces the materials' response takes it back also on surfaces no key shows:
        the toon look on the dance, 24.7 → 25.4 dB."""
        change, resid, gloss, fill = (1.0, 1.0, 1.0, None) if gates is None else gates
        if albedo_pass is None:
            albedo = torch.sigmoid(out[:, 0:3])
        else:
            albedo = torch.sigmoid(torch.logit(albedo_pass.clamp(ALBEDO_EPS, 1.0 - ALBEDO_EPS))
                                   + change * out[:, 0:3])
        ambient = F.softplus(out[:, 3:6] - 2.0)
        if fill is not None:
            ambient = F.relu(ambient + fill)
        residual = resid * RESIDUAL_RANGE * torch.tanh(out[:, 6:9])
        linear = albedo * (irradiance + ambient)
        if specular is not None:
            linear = linear + gloss * 2.0 * torch.sigmoid(out[:, 9:10]) * specular
        return srgb_encode(linear) + residual

    def param_groups(self, lr_texture: float, lr_net: float) -> list[dict[str, Any]]:
        """AdamW groups: the textures learn faster than the U-Net (DNR's recipe); the
        textures' group ``waits`` for the trainer's ``texture_from``."""
        tex = list(self.tex) + list(self.grid) if self.use_texture else []
        curves = [p for p in (self.light_curve, self.facing_curve, self.edge_colour)
                  if p is not None]
        colour = [p for p in (self.colour_matrix, self.colour_bias, self.head_gates)
                  if p is not None]
        ids = {id(p) for p in tex + curves + colour}
        rest = [p for p in self.parameters() if id(p) not in ids]
        groups = [{"params": rest, "lr": lr_net, "weight_decay": 1e-4}]
        if tex:
            groups.append({"params": tex, "lr": lr_texture, "weight_decay": 0.0,
                           "waits": True})
        if curves:  # a few numbers for the whole character: their own, faster rate
            groups.append({"params": curves, "lr": LIGHT_CURVE_LR, "weight_decay": 0.0})
        if colour:  # a matrix and scales near the identity: smaller steps than the knots
            groups.append({"params": colour, "lr": COLOUR_LR, "weight_decay": 0.0})
        return groups


def _gauss(size: int = 7, sigma: float = 1.5) -> torch.Tensor:
    g = torch.exp(-((torch.arange(size) - size // 2) ** 2) / (2 * sigma * sigma))
    g = g / g.sum()
    return (g[:, None] * g[None, :])[None, None].repeat(3, 1, 1, 1)


def ssim_map(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Per-pixel SSIM (N, 3, H, W) of images in [0, 1] (Wang et al. 2004, 7×7 Gaussian)."""
    w = _gauss().to(a)
    pad = 3

    def blur(z: torch.Tensor) -> torch.Tensor:
        return F.conv2d(F.pad(z, [pad] * 4, mode="replicate"), w, groups=3)

    mu_a, mu_b = blur(a), blur(b)
    va = blur(a * a) - mu_a ** 2
    vb = blur(b * b) - mu_b ** 2
    cov = blur(a * b) - mu_a * mu_b
    c1, c2 = 0.01 ** 2, 0.03 ** 2
    return ((2 * mu_a * mu_b + c1) * (2 * cov + c2)) / ((mu_a ** 2 + mu_b ** 2 + c1)
                                                        * (va + vb + c2))


# parts grouped for the mapping losses (addon.core.encodings.PARTS ids)
PART_GROUPS = {"skin": [1, 7, 8], "clothes": [2, 3, 4, 5, 6, 9, 10, 11, 12, 13, 14],
               "accessory": [15]}


def reconstruction_loss(pred: torch.Tensor, target: torch.Tensor, mask: torch.Tensor,
                        parts: torch.Tensor | None = None, ssim_weight: float = 0.2,
                        group_weights: dict[str, float] | None = None) -> torch.Tensor:
    """Masked L1 + ``ssim_weight`` · (1 − SSIM) on the character (images in [0, 1];
    the background is taken from the target so it costs nothing).

    With ``group_weights`` (the mapping losses), the loss is the weighted mean of
    the loss inside each part group present (:data:`PART_GROUPS`): a small region
    such as the accessory weighs as its weight says, not by its pixel count."""
    m = mask.float()
    pred_m = pred * m + target * (1 - m)
    per_pixel = (pred - target).abs().mean(1, keepdim=True)
    if ssim_weight:
        per_pixel = per_pixel + ssim_weight * (1 - ssim_map(pred_m, target)).mean(1, keepdim=True)
    if not group_weights or parts is None:
        return (per_pixel * m).sum() / m.sum().clamp_min(1.0)
    total = pred.new_zeros(())
    weight = pred.new_zeros(())
    for name, w in group_weights.items():
        g = torch.zeros_like(m)
        for pid in PART_GROUPS[name]:
            g = g + (parts == pid).float()
        g = g * m
        n = g.sum()
        if n > 0:
            total = total + w * (per_pixel * g).sum() / n
            weight = weight + w
    return total / weight.clamp_min(1e-8)
