"""Quality metrics of a rendered or restyled image sequence against a reference,
measured inside the character mask: what the per-character skin model is judged by.

- :mod:`.metrics` — pure functions, arrays in, numbers out: masked PSNR, SSIM, FLIP,
  and the warping error of Lai et al. 2018 with the renderer's flow and depth occlusion.
- :mod:`.images` — reads the PNG / EXR files of a passes or frames folder (Pillow,
  pypng, OpenEXR; never bpy), so the metrics run in the backend venv and beside bpy.
- :mod:`.score` — ``painted-skin score``: pairs frames by number, writes the per-frame
  JSON atomically and prints the one-line summary.

The reference's own warping error is reported beside the frames': a perfect render
still has some (bilinear resampling, silhouettes, shading that moves over the skin),
so the ratio of the two, not the raw value, says how much flicker a model adds.
"""

from __future__ import annotations
