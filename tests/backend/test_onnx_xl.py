"""SDXL on the onnx engine against torch (tiny SDXL components, CPU EP).

Tolerances as for SD 1.5: graph outputs max |Δ| ≤ 1e-4 (measured ~1e-6); whole
pipelines' uint8 images mean |Δ| ≤ 0.5, max |Δ| ≤ 2 levels (measured 0-1).
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("onnxruntime")
pytest.importorskip("diffusers")

import torch  # noqa: E402
from painted_skin.backend.diffusion import export as E  # noqa: E402
from painted_skin.backend.diffusion import onnx_engine as O  # noqa: E402
from painted_skin.backend.diffusion import temporal as T  # noqa: E402
from painted_skin.backend.diffusion.sdxl_pipeline import (  # noqa: E402
    RestyleXLPipeline,
    tiny_xl_components,
)

H = W = 64
SHOT = T.synthetic_shot(2, H, W, speed=2)
TOL = 1e-4


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory):
    return tmp_path_factory.mktemp("onnx-xl-cache")


@pytest.fixture(scope="module")
def pipes(cache):
    from painted_skin.backend.diffusion.onnx_xl import OnnxRestyleXLPipeline

    return (RestyleXLPipeline(tiny_xl_components(0)),
            OnnxRestyleXLPipeline(tiny_xl_components(0), cache_dir=cache, dynamo=False))


def _close(a: np.ndarray, b: np.ndarray) -> None:
    d = np.abs(a.astype(int) - b.astype(int))
    assert d.mean() <= 0.5 and d.max() <= 2, (d.mean(), d.max())


def test_unet_with_added_conditions_and_text_encoders(pipes) -> None:
    from diffusers.models.controlnets.multicontrolnet import MultiControlNetModel

    _, op = pipes
    eng = op.onnx.prepare(H, W)
    assert eng.manifest["xl"] and eng.manifest["graphs"][E.UNET]["inputs"][-2:] == [
        "text_embeds", "time_ids"]
    c = op.components_for_export()
    g = torch.Generator().manual_seed(0)
    lat, ehs = torch.randn(1, 4, H // 2, W // 2, generator=g), torch.randn(1, 77, 64, generator=g)
    conds = [torch.rand(1, 3, H, W, generator=g) for _ in range(3)]
    added = {"text_embeds": torch.randn(1, 32, generator=g),
             "time_ids": torch.tensor([[64.0, 64, 0, 0, 64, 64]])}
    multi = MultiControlNetModel([c.controlnets[k] for k in ("depth", "normal", "openpose")])
    with torch.no_grad():
        down, mid = multi(lat, torch.tensor(500), ehs, conds, [0.8, 0.5, 1.0],
                          added_cond_kwargs=added, return_dict=False)
        ref = c.unet(lat, torch.tensor(500), ehs, added_cond_kwargs=added,
                     down_block_additional_residuals=down, mid_block_additional_residual=mid,
                     return_dict=False)[0]
    out = eng.noise_pred(lat, 500, ehs, conds, [0.8, 0.5, 1.0], **added)
    assert float((out - ref).abs().max()) <= TOL
    ids = torch.randint(0, 1000, (1, 77), generator=g)
    for graph, enc in ((E.TEXT, c.text_encoder), (E.TEXT2, c.text_encoder_2)):
        with torch.no_grad():
            o = enc(ids, output_hidden_states=True)
        first, penultimate = eng.run(graph, {"input_ids": ids})
        assert np.abs(first - o[0].numpy()).max() <= TOL
        assert np.abs(penultimate - o.hidden_states[-2].numpy()).max() <= TOL


def test_sdxl_images_match_torch(pipes) -> None:
    tp, op = pipes
    for opts in ({"steps": 2}, {"steps": 2, "scheduler": "euler", "guidance_scale": 3.0}):
        kw = dict(prompt="a knight", negative_prompt="blurry", seed=3, width=W, height=H,
                  options=opts)
        _close(op.run(SHOT[0], **kw).image, tp.run(SHOT[0], **kw).image)
    s1: dict = {}
    s2: dict = {}
    for f in range(2):
        opts = {"steps": 2, "temporal_space": "image"}
        a = op.run(SHOT[f], seed=f, frame=f, state=s1, width=W, height=H, options=opts)
        b = tp.run(SHOT[f], seed=f, frame=f, state=s2, width=W, height=H, options=opts)
        assert a.mode == b.mode
        _close(a.image, b.image)
    assert a.mode == "temporal" and set(op.providers[E.UNET]) == {O.CPU}


def test_factory_and_union_refused(cache) -> None:
    from painted_skin.backend.diffusion.onnx_xl import OnnxRestyleXLPipeline
    from painted_skin.backend.diffusion.sdxl_pipeline import check_xl
    from painted_skin.backend.pipelines import diffusion

    assert "engine" in diffusion.XL_LOAD_KEYS
    # told on OPEN, not found on the first frame
    assert "torch engine" in check_xl({"tiny": True, "engine": "onnx", "union": True})[0]
    assert "torch engine" in diffusion.check({"tiny": True, "engine": "onnx",
                                              "cross_frame": "first"})[0]
    assert "must be" in diffusion.check({"tiny": True, "engine": "tensorrt"})[0]
    assert check_xl({"tiny": True, "engine": "onnx"}) == []
    with pytest.raises(NotImplementedError, match="ControlNet-Union"):
        OnnxRestyleXLPipeline(tiny_xl_components(0, union=True), cache_dir=cache)


def test_export_cli_exports_sdxl_graphs(cache, capsys) -> None:
    import argparse
    import json
    from pathlib import Path

    from painted_skin.backend.diffusion.engine_cli import add_commands

    p = argparse.ArgumentParser()
    add_commands(p.add_subparsers(dest="command"))
    args = p.parse_args(["export-onnx", "--tiny", "--xl", "--size", f"{W}x{H}", "--out",
                         str(cache), "--dynamo", "off"])
    assert args.func(args) == 0
    folder = Path(capsys.readouterr().out.strip().split(" -> ")[-1])
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["xl"] and manifest["graphs"][E.UNET]["inputs"][-2:] == [
        "text_embeds", "time_ids"]
    assert (folder / f"{E.TEXT2}.onnx").is_file()


def test_fp16_export_of_a_vae_that_needs_upcasting_is_refused() -> None:
    from painted_skin.backend.diffusion.onnx_xl import check_vae_precision

    vae = tiny_xl_components(0).vae
    vae.register_to_config(force_upcast=True)
    with pytest.raises(ValueError, match="fp16-safe VAE"):
        check_vae_precision(vae, "fp16")
    check_vae_precision(vae, "fp32")  # fp32 graphs do not overflow
    vae.register_to_config(force_upcast=False)
    check_vae_precision(vae, "fp16")
