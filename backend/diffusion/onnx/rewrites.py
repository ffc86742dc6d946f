"""Exact rewrites of diffusers modules for export (the torch modules are unchanged).

:func:`subpixel_upsampling`: diffusers' ``Upsample2D`` doubles a feature map
(nearest neighbour) and then runs a 3x3 convolution on the big map. Each output
pixel of that convolution sees only a 2x2 neighbourhood of the small map, with
the 3x3 taps summed per output phase, so the same result is four 2x2
convolutions on the small map, interleaved (``pixel_shuffle``): 16/36 of the
multiply-adds. In the VAE decoder these convolutions are the largest (the
128x128 and 256x256 ones of a 256² frame): about a quarter of its time.
Only the rounding differs (weights summed before, not after, the products).
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Iterator
from typing import Any

# Rows (or columns) of the 3x3 kernel that land on each of the two small-map taps,
# per output phase: phase 0 reads rows i-1, i; phase 1 rows i, i+1.
_TAPS = (((0,), (1, 2)), ((0, 1), (2,)))


def phase_kernels(weight: Any) -> list[Any]:
    """The four (Cout, Cin, 2, 2) kernels of a (Cout, Cin, 3, 3) one after a 2x
    nearest upsampling, in phase order (0,0), (0,1), (1,0), (1,1)."""
    import torch

    out = []
    for rows in _TAPS:
        for cols in _TAPS:
            k = [[sum(weight[:, :, r, c] for r in rs for c in cs) for cs in cols] for rs in rows]
            out.append(torch.stack([torch.stack(row, dim=-1) for row in k], dim=-2))
    return out


def upsample_conv(x: Any, conv: Any) -> Any:
    """``conv(interpolate(x, scale_factor=2, mode="nearest"))`` for a 3x3, stride 1,
    padding 1 convolution, computed on ``x``'s grid."""
    import torch
    import torch.nn.functional as F

    b, _, h, w = x.shape
    xp = F.pad(x, (1, 1, 1, 1))
    ys = []
    for i, k in enumerate(phase_kernels(conv.weight)):
        a, c = divmod(i, 2)
        ys.append(F.conv2d(xp[:, :, a:a + h + 1, c:c + w + 1], k, conv.bias))
    y = torch.stack(ys, dim=2).reshape(b, -1, h, w)  # channel c*4 + phase
    return F.pixel_shuffle(y, 2)


def _fits(m: Any) -> bool:
    conv = getattr(m, "conv", None) if getattr(m, "name", "conv") == "conv" else None
    return (m.use_conv and m.interpolate and not m.use_conv_transpose and m.norm is None
            and conv is not None and tuple(conv.kernel_size) == (3, 3)
            and tuple(conv.stride) == (1, 1) and tuple(conv.padding) == (1, 1)
            and tuple(conv.dilation) == (1, 1) and conv.groups == 1
            and conv.padding_mode == "zeros")


def _forward(self: Any, hidden_states: Any, output_size: Any = None, *args: Any,
             **kw: Any) -> Any:
    h, w = hidden_states.shape[-2:]
    if output_size is not None and tuple(int(s) for s in output_size) != (2 * h, 2 * w):
        return type(self).forward(self, hidden_states, output_size, *args, **kw)
    return upsample_conv(hidden_states, self.conv)


@contextlib.contextmanager
def subpixel_upsampling(*modules: Any) -> Iterator[int]:
    """Within: every plain ``Upsample2D`` (nearest x2 + 3x3 conv) of ``modules``
    runs as :func:`upsample_conv` (yields how many); restored after."""
    from diffusers.models.upsampling import Upsample2D

    done: list[Any] = []
    try:
        for module in modules:
            for m in module.modules():
                if isinstance(m, Upsample2D) and "forward" not in m.__dict__ and _fits(m):
                    m.forward = types.MethodType(_forward, m)
                    done.append(m)
        yield len(done)
    finally:
        for m in done:
            del m.forward
