"""``painted-skin bench diffusion``: the torch and onnx engines, and temporal mode.

One SD1.5-shaped pipeline — SD1.5's architecture (UNet CrossAttnDown×3 +
Down / Up + CrossAttnUp×3, 2 layers a block, 8 attention heads,
cross-attention 768; ControlNets of the same shape with the 16-32-96-256
conditioning embedding; a 4-block VAE, ×8; a CLIP-L-wide text encoder) at
reduced width (``block_out_channels`` (32, 64, 128, 128)), random weights —
with 3 ControlNets (depth, normal, openpose), LCM, 4 steps, 256², batch 1, on
this CPU:

1. ms/frame of the ``torch`` engine and of the ``onnx`` engine (onnxruntime,
   the best provider offered; the export is cached), same frames and seeds, in
   one run; the ratio torch / onnx. Both use the same threads (torch's). The
   torch engine is diffusers' eager pipeline as is; the onnx engine runs the
   same loop over the exported graphs, which hold exact rewrites: attention as
   one MultiHeadAttention node, the ControlNets' conditioning embeddings once
   a frame instead of once a step, upsampling convolutions on the small grid
   (see :mod:`backend.diffusion.onnx.export`). Measured on 2 cores: ~1.8-1.9x.
2. The warping error (Lai et al. 2018, with the renderer's flow and occlusion
   mask) of temporal mode against independent frames on a generated shot
   (:func:`temporal.synthetic_shot`, 6 frames); the ratio temporal / independent.

Last line: ``diffusion speedup: <ratio>x warp_ratio: <v>``.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

SD15_TEXT = dict(hidden_size=768, intermediate_size=3072, num_attention_heads=12,
                 num_hidden_layers=12, max_position_embeddings=77, vocab_size=49408,
                 hidden_act="quick_gelu", projection_dim=768, bos_token_id=0, eos_token_id=2,
                 pad_token_id=1)


def sd15_components(block_out_channels: tuple[int, ...] = (32, 64, 128, 128),
                    vae_channels: tuple[int, ...] | None = None, text_layers: int = 4,
                    n_controlnets: int = 3, seed: int = 0) -> Any:
    """SD1.5-architecture components with random weights (no downloads).

    ``block_out_channels=(320, 640, 1280, 1280)``, ``vae_channels=(128, 256,
    512, 512)``, ``text_layers=12`` give the real SD1.5 + ControlNet v1.1 sizes.
    """
    import torch
    from diffusers import AutoencoderKL, ControlNetModel, DDIMScheduler, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel

    from ..backend.diffusion.components import CONTROL_KINDS, Components

    # The control-image embedding narrowed with the rest: at full width it would be a
    from ..backend.diffusion.tiny import randomize_zero_convs, tiny_tokenizer

    # The control-image embedding narrowed with the rest: at full width it would be a
    # quarter of each reduced-width step (2-3 % in real SD1.5 at 512²), overweighting
    # what the onnx engine saves by running it once a frame.
    ratio = block_out_channels[0] / 320
    cond_channels = tuple(max(4, round(c * ratio)) for c in (16, 32, 96, 256))
    down = ("CrossAttnDownBlock2D",) * 3 + ("DownBlock2D",)
    up = ("UpBlock2D",) + ("CrossAttnUpBlock2D",) * 3
    common = dict(block_out_channels=block_out_channels, layers_per_block=2, in_channels=4,
                  down_block_types=down, cross_attention_dim=768, attention_head_dim=8,
                  norm_num_groups=32)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        unet = UNet2DConditionModel(sample_size=64, out_channels=4, up_block_types=up, **common)
        cns = {}
        for i, kind in enumerate(CONTROL_KINDS[:n_controlnets]):
            torch.manual_seed(seed * 1000 + 17 + i)
            cns[kind] = ControlNetModel(
                conditioning_embedding_out_channels=cond_channels, **common)
            randomize_zero_convs(cns[kind], std=0.02)
        torch.manual_seed(seed * 1000 + 7)
        vc = list(vae_channels or block_out_channels)
        vae = AutoencoderKL(block_out_channels=vc, in_channels=3, out_channels=3,
                            down_block_types=["DownEncoderBlock2D"] * 4,
                            up_block_types=["UpDecoderBlock2D"] * 4, latent_channels=4,
                            layers_per_block=2, norm_num_groups=32, sample_size=512)
        torch.manual_seed(seed * 1000 + 8)
        text = CLIPTextModel(CLIPTextConfig(**{**SD15_TEXT, "num_hidden_layers": text_layers}))
    sched = DDIMScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear",
                          clip_sample=False, set_alpha_to_one=False, steps_offset=1)
    for m in (unet, vae, text, *cns.values()):
        m.eval()
    return Components(unet, vae, text, tiny_tokenizer(), sched, cns, scheduler_name="lcm",
                      name="sd15-shaped")


def time_engines(pipes: dict[str, Any], shot: list[dict], size: int, frames: int,
                 steps: int) -> dict[str, float]:
    """Median ms/frame of each engine; the engines alternate frame by frame (one
    warm-up frame each first) so a change in the machine's load hits both alike."""
    from ..backend.diffusion.seeds import frame_seed

    opts = {"scheduler": "lcm", "steps": steps}
    times: dict[str, list[float]] = {k: [] for k in pipes}
    for f in range(-1, frames):
        for name, pipe in pipes.items():
            t0 = time.perf_counter()
            pipe.run(shot[max(f, 0) % len(shot)], prompt="a painted knight",
                     seed=frame_seed(3, max(f, 0)), width=size, height=size, options=opts)
            if f >= 0:
                times[name].append((time.perf_counter() - t0) * 1000.0)
    return {k: float(np.median(v)) for k, v in times.items()}


def warp_ratio(pipe: Any, shot: list[dict], size: int, steps: int) -> tuple[float, float]:
    """(warping error of temporal mode, of independent frames) on ``shot``."""
    from ..backend.diffusion import temporal as T
    from ..backend.diffusion.seeds import frame_seed

    opts = {"scheduler": "lcm", "steps": steps}
    seeds = [frame_seed(5, f) for f in range(len(shot))]
    state: dict = {}
    tem = [pipe.run(p, prompt="a painted knight", seed=seeds[f], frame=f, state=state,
                    width=size, height=size, options=opts).image for f, p in enumerate(shot)]
    ind = [pipe.run(p, prompt="a painted knight", seed=seeds[f], frame=f, width=size,
                    height=size, options=opts).image for f, p in enumerate(shot)]
    flows = [shot[f]["motion"] for f in range(len(shot) - 1)]
    masks = [T.occlusion_mask(shot[f]["depth"], shot[f + 1]["depth"], shot[f]["motion"][..., 2:])
             for f in range(len(shot) - 1)]
    return T.warping_error(tem, flows, masks), T.warping_error(ind, flows, masks)


def main(size: int = 256, frames: int = 5, steps: int = 4, shot_frames: int = 6,
         cache_dir: str | None = None, providers: str = "auto") -> int:
    import torch

    from ..backend.diffusion import temporal as T
    from ..backend.diffusion.controlnet_pipeline import RestylePipeline
    from ..backend.diffusion.onnx.pipeline import OnnxRestylePipeline

    t0 = time.perf_counter()
    shot = T.synthetic_shot(max(shot_frames, 2), size, size, speed=size / 64)
    comps = sd15_components()
    n_par = sum(p.numel() for p in comps.unet.parameters()) / 1e6
    n_cn = sum(p.numel() for c in comps.controlnets.values() for p in c.parameters()) / 1e6
    print(f"model: SD1.5-shaped UNet {n_par:.1f}M + 3 ControlNets {n_cn:.1f}M params, "
          f"LCM {steps} steps, {size}x{size}, batch 1, torch threads {torch.get_num_threads()}")
    tp = RestylePipeline(comps, "cpu")
    op = OnnxRestylePipeline(sd15_components(), "cpu", cache_dir=cache_dir, providers=providers)
    te = time.perf_counter()
    op.onnx.prepare(size, size)
    print(f"onnx export/cache + sessions: {time.perf_counter() - te:.1f} s "
          f"({op.onnx.engine.folder.name}, exporter "
          f"{op.onnx.engine.manifest['exporter']['unet_controlnets']}); "
          f"providers: {op.providers['unet_controlnets']}")
    ms = time_engines({"torch": tp, "onnx": op}, shot, size, frames, steps)
    ms_torch, ms_onnx = ms["torch"], ms["onnx"]
    print(f"torch: {ms_torch:8.1f} ms/frame (median of {frames}, engines alternating)")
    print(f"onnx:  {ms_onnx:8.1f} ms/frame")
    speedup = ms_torch / ms_onnx
    print(f"onnx speedup over torch: {speedup:.2f}x (target >= 1.5x)")
    a = tp.run(shot[0], prompt="a painted knight", seed=9, width=size, height=size,
               options={"steps": steps}).image
    b = op.run(shot[0], prompt="a painted knight", seed=9, width=size, height=size,
               options={"steps": steps}).image
    print(f"same seed, torch vs onnx image: mean |d| {np.abs(a.astype(int) - b).mean():.3f} "
          f"max |d| {np.abs(a.astype(int) - b).max()} (uint8 levels)")
    e_tem, e_ind = warp_ratio(op, shot[:shot_frames], size, steps)
    ratio = e_tem / max(e_ind, 1e-12)
    print(f"warping error over {shot_frames} frames: temporal {e_tem:.5f}, independent "
          f"{e_ind:.5f}, ratio {ratio:.3f} (target <= 0.5)")
    print(f"total {time.perf_counter() - t0:.0f} s")
    print(f"diffusion speedup: {speedup:.2f}x warp_ratio: {ratio:.3f}")
    return 0


def cli(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=256)
    p.add_argument("--frames", type=int, default=5, help="timed frames per engine")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--cache", help="ONNX export cache folder")
    a = p.parse_args(argv)
    return main(a.size, a.frames, a.steps, cache_dir=a.cache)


if __name__ == "__main__":
    raise SystemExit(cli())
