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
from painted_skin.backend.diffusion import temporal as T  # noqa: E402
from painted_skin.backend.diffusion.onnx import export as E  # noqa: E402
from painted_skin.backend.diffusion.onnx import runtime as RT  # noqa: E402
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
    from painted_skin.backend.diffusion.onnx.xl import OnnxRestyleXLPipeline

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
    assert a.mode == "temporal" and set(op.providers[E.UNET]) == {RT.CPU}


def test_factory_and_open_checks(cache) -> None:
    from painted_skin.backend.diffusion.onnx.xl import OnnxRestyleXLPipeline
    from painted_skin.backend.diffusion.sdxl_pipeline import check_xl
    from painted_skin.backend.pipelines import diffusion
    from painted_skin.backend.pipelines.diffusion import sdxl_controlnet as sdxl_factory

    assert "engine" in diffusion.XL_LOAD_KEYS
    # told on OPEN, not found on the first frame: union and cross-frame are accepted
    assert check_xl({"tiny": True, "engine": "onnx", "union": True}) == []
    assert check_xl({"tiny": True, "engine": "onnx", "union": True,
                     "cross_frame": "previous"}) == []
    assert diffusion.check({"tiny": True, "engine": "onnx", "cross_frame": "first"}) == []
    assert "must be" in diffusion.check({"tiny": True, "engine": "tensorrt"})[0]
    assert check_xl({"tiny": True, "engine": "onnx"}) == []
    p = sdxl_factory({"tiny": True, "engine": "onnx", "union": True}, "cpu")
    assert isinstance(p, OnnxRestyleXLPipeline) and p.union


@pytest.fixture(scope="module")
def union_pipes(cache):
    from painted_skin.backend.diffusion.onnx.xl import OnnxRestyleXLPipeline

    return (RestyleXLPipeline(tiny_xl_components(0, union=True)),
            OnnxRestyleXLPipeline(tiny_xl_components(0, union=True), cache_dir=cache,
                                  dynamo=False))


def test_union_inside_the_unet_graph(union_pipes) -> None:
    """ControlNet-Union + UNet as one graph against torch, with three, one (the union's
    single-condition path: the scale on the outputs) and two conditions, and a
    classifier-free-guidance batch (run in chunks: the union's transformer attends
    across the batch, whose rows the pipelines make identical)."""
    _, op = union_pipes
    eng = op.onnx.prepare(H, W)
    assert eng.union and eng.manifest["union"] and eng.kinds == ["depth", "normal", "openpose"]
    ins = [n for n in eng.manifest["graphs"][E.UNET]["inputs"] if not n.startswith("prompt_")]
    assert ins[4:10] == ["cond_emb_0", "cond_emb_1", "cond_emb_2", "out_scale",
                         "control_type", "control_idx"]
    c = op.components_for_export()
    g = torch.Generator().manual_seed(1)
    lat = torch.randn(1, 4, H // 2, W // 2, generator=g).repeat(2, 1, 1, 1)
    ehs = torch.randn(2, 77, 64, generator=g)
    conds = [torch.rand(1, 3, H, W, generator=g).repeat(2, 1, 1, 1) for _ in range(3)]
    added = {"text_embeds": torch.randn(2, 32, generator=g),
             "time_ids": torch.tensor([[64.0, 64, 0, 0, 64, 64]] * 2)}
    with torch.no_grad():
        bare = c.unet(lat, torch.tensor(500), ehs, added_cond_kwargs=added,
                      return_dict=False)[0]
    for modes, scales in (([1, 4, 0], [0.8, 0.5, 1.0]), ([4], [0.7]), ([0, 1], [1.0, 0.0])):
        n = len(modes)
        ctype = torch.zeros(2, 6)
        ctype[:, modes] = 1.0
        with torch.no_grad():
            down, mid = c.union(lat, torch.tensor(500), ehs, controlnet_cond=conds[:n],
                                control_type=ctype, control_type_idx=modes,
                                conditioning_scale=scales, added_cond_kwargs=added,
                                return_dict=False)
            ref = c.unet(lat, torch.tensor(500), ehs, added_cond_kwargs=added,
                         down_block_additional_residuals=down,
                         mid_block_additional_residual=mid, return_dict=False)[0]
        out = eng.noise_pred(lat, 500, ehs, conds[:n], scales, union=(ctype, modes), **added)
        assert float((out - ref).abs().max()) <= TOL, modes
        assert float((ref - bare).abs().max()) > 1e-3  # the union's residuals count
    with pytest.raises(ValueError, match="ControlNet-Union"):
        eng.noise_pred(lat, 500, ehs, conds, [1.0] * 3, **added)
    # the union's weights are in the cache key
    other = tiny_xl_components(0, union=True)
    h = E.model_hash(other)
    with torch.no_grad():
        other.union.task_embedding.add_(1e-3)
    assert E.model_hash(other) != h


def test_union_images_match_torch(union_pipes) -> None:
    """Every pass, only depth (one condition), two with one ending early under CFG."""
    tp, op = union_pipes
    s0 = SHOT[0]
    cases = ((s0, {"steps": 2}),
             ({"depth": s0["depth"]}, {"steps": 2}),
             ({"depth": s0["depth"], "normal": s0["normal"]},
              {"steps": 2, "scheduler": "euler", "guidance_scale": 3.0,
               "controlnet": {"normal": {"end": 0.5}}}))
    images = []
    for passes, opts in cases:
        kw = dict(prompt="a knight", seed=3, width=W, height=H, options=opts)
        a = op.run(passes, **kw).image
        _close(a, tp.run(passes, **kw).image)
        images.append(a.astype(int))
    assert np.abs(images[0] - images[1]).mean() > 0.3  # the conditions change the picture


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
    args = p.parse_args(["export-onnx", "--tiny", "--xl", "--union", "--size", f"{W}x{H}",
                         "--out", str(cache), "--dynamo", "off"])
    assert args.func(args) == 0
    folder = Path(capsys.readouterr().out.strip().split(" -> ")[-1])
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["union"] and "control_idx" in manifest["graphs"][E.UNET]["inputs"]
    with pytest.raises(ValueError, match="--xl"):
        args.xl = False
        args.func(args)


def test_fp16_export_of_a_vae_that_needs_upcasting_is_refused() -> None:
    from painted_skin.backend.diffusion.onnx.xl import check_vae_precision

    vae = tiny_xl_components(0).vae
    vae.register_to_config(force_upcast=True)
    with pytest.raises(ValueError, match="fp16-safe VAE"):
        check_vae_precision(vae, "fp16")
    check_vae_precision(vae, "fp32")  # fp32 graphs do not overflow
    vae.register_to_config(force_upcast=False)
    check_vae_precision(vae, "fp16")
