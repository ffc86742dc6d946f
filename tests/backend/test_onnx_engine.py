"""ONNX export + onnxruntime engine against the torch engine (tiny components, CPU EP).

Tolerances: graph outputs max |Δ| ≤ 1e-4 (measured ~5e-7); the whole 4-step LCM
pipeline's uint8 image mean |Δ| ≤ 0.5 and max |Δ| ≤ 2 levels (measured 0).
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("onnxruntime")
pytest.importorskip("diffusers")

import torch  # noqa: E402
from painted_skin.backend.diffusion import export as E  # noqa: E402
from painted_skin.backend.diffusion import onnx_engine as O  # noqa: E402
from painted_skin.backend.diffusion import temporal as T  # noqa: E402
from painted_skin.backend.diffusion.components import (  # noqa: E402
    random_ip_adapter,
    tiny_components,
)
from painted_skin.backend.diffusion.controlnet_pipeline import RestylePipeline  # noqa: E402

H = W = 64
SHOT = T.synthetic_shot(3, H, W, speed=2)
TOL = 1e-4


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory):
    return tmp_path_factory.mktemp("onnx-cache")


@pytest.fixture(scope="module")
def comps():
    return tiny_components(0)


@pytest.fixture(scope="module")
def folder(comps, cache):
    return E.export_components(comps, E.ExportSpec(H, W), cache, dynamo=False)


@pytest.fixture(scope="module")
def engine(folder):
    return O.OnnxEngine(folder, "auto")


@pytest.fixture(scope="module")
def pipes(cache):
    tp = RestylePipeline(tiny_components(0))
    op = O.OnnxRestylePipeline(tiny_components(0), cache_dir=cache, dynamo=False)
    return tp, op


def test_unet_and_three_controlnets_as_one_graph(comps, engine) -> None:
    from diffusers.models.controlnets.multicontrolnet import MultiControlNetModel

    g = torch.Generator().manual_seed(3)
    lat = torch.randn(1, 4, H // 2, W // 2, generator=g)
    ehs = torch.randn(1, 77, 32, generator=g)
    conds = [torch.rand(1, 3, H, W, generator=g) for _ in range(3)]
    scales = [0.8, 0.0, 1.3]
    t = torch.tensor(421)
    multi = MultiControlNetModel([comps.controlnets[k] for k in ("depth", "normal", "openpose")])
    with torch.no_grad():
        down, mid = multi(lat, t, ehs, conds, scales, return_dict=False)
        ref = comps.unet(lat, t, encoder_hidden_states=ehs, down_block_additional_residuals=down,
                         mid_block_additional_residual=mid, return_dict=False)[0]
    out = engine.noise_pred(lat, t, ehs, conds, scales)
    assert engine.manifest["graphs"][E.UNET]["inputs"] == [
        "sample", "timestep", "encoder_hidden_states", "scales", "cond_0", "cond_1", "cond_2"]
    assert float((out - ref).abs().max()) <= TOL
    # the scales are inputs: another set changes the output like torch does
    out2 = engine.noise_pred(lat, t, ehs, conds, [0.0, 0.0, 0.0])
    with torch.no_grad():
        ref2 = comps.unet(lat, t, encoder_hidden_states=ehs, return_dict=False)[0]
    assert float((out2 - ref2).abs().max()) <= TOL and float((out2 - out).abs().max()) > 1e-3


def test_vae_and_text_encoder_parity(comps, engine) -> None:
    g = torch.Generator().manual_seed(4)
    z = torch.randn(1, 4, H // 2, W // 2, generator=g)
    img = torch.rand(1, 3, H, W, generator=g) * 2 - 1
    ids = torch.randint(0, 1000, (1, 77), generator=g)
    with torch.no_grad():
        dec = comps.vae.decode(z, return_dict=False)[0]
        mom = comps.vae.encode(img).latent_dist.parameters
        hid = comps.text_encoder(ids)[0]
    assert np.abs(engine.run(E.VAE_DEC, {"latent": z})[0] - dec.numpy()).max() <= TOL
    assert np.abs(engine.run(E.VAE_ENC, {"image": img})[0] - mom.numpy()).max() <= TOL
    assert np.abs(engine.run(E.TEXT, {"input_ids": ids})[0] - hid.numpy()).max() <= TOL
    px = torch.rand(1, 3, 32, 32, generator=g)
    with torch.no_grad():
        emb = comps.image_encoder(px).image_embeds
    assert np.abs(engine.run(E.IMAGE, {"pixel_values": px})[0] - emb.numpy()).max() <= TOL


def _close(a: np.ndarray, b: np.ndarray) -> None:
    d = np.abs(a.astype(int) - b.astype(int))
    assert d.mean() <= 0.5 and d.max() <= 2, (d.mean(), d.max())


def test_lcm_4_steps_image_matches_torch(pipes) -> None:
    tp, op = pipes
    kw = dict(prompt="a painted knight", negative_prompt="blurry", seed=7, width=W, height=H,
              options={"scheduler": "lcm", "steps": 4})
    steps: list[int] = []
    a = op.run(SHOT[0], callback=lambda s, n: steps.append(s) or True, **kw)
    b = tp.run(SHOT[0], **kw)
    assert steps == [1, 2, 3, 4] and a.image.shape == (H, W, 3)
    _close(a.image, b.image)
    assert set(op.providers[E.UNET]) == {O.CPU}


def test_cfg_and_temporal_frames_match_torch(pipes) -> None:
    tp, op = pipes
    kw = dict(prompt="x", negative_prompt="y", seed=2, width=W, height=H,
              options={"scheduler": "ddim", "steps": 2, "guidance_scale": 3.0})
    _close(op.run(SHOT[0], **kw).image, tp.run(SHOT[0], **kw).image)  # batch 2 in chunks
    s1: dict = {}
    s2: dict = {}
    for f in range(2):
        opts = {"temporal_space": "image"}
        a = op.run(SHOT[f], seed=f, frame=f, state=s1, width=W, height=H, options=opts)
        b = tp.run(SHOT[f], seed=f, frame=f, state=s2, width=W, height=H, options=opts)
        assert a.mode == b.mode
        _close(a.image, b.image)
    assert a.mode == "temporal"  # the VAE encoder ran


def test_cache_reuse_and_keys(comps, cache, folder) -> None:
    n = E.stats["exports"]
    mtime = (folder / "manifest.json").stat().st_mtime_ns
    again = E.export_components(comps, E.ExportSpec(H, W), cache, dynamo=False)
    assert again == folder and E.stats["exports"] == n
    assert (folder / "manifest.json").stat().st_mtime_ns == mtime
    assert not [p for p in cache.iterdir() if p.name.startswith(".tmp")]
    m = json.loads((folder / "manifest.json").read_text())
    assert m["exporter"][E.UNET] == "torchscript" and m["kinds"] == ["depth", "normal", "openpose"]
    h = E.model_hash(comps)
    assert E.cache_key(comps, E.ExportSpec(H, W), h) != E.cache_key(comps, E.ExportSpec(H, 2 * W),
                                                                        h)
    assert E.cache_key(comps, E.ExportSpec(H, W), h) != E.cache_key(
        comps, E.ExportSpec(H, W, precision="fp16"), h)
    other = tiny_components(0)
    with torch.no_grad():
        other.controlnets["normal"].controlnet_mid_block.bias.add_(1e-3)
    assert E.model_hash(other) != h


def test_failed_export_leaves_no_folder(comps, tmp_path, monkeypatch) -> None:
    def boom(*a, **k):
        raise RuntimeError("no")

    monkeypatch.setattr(E, "_export_graph", boom)
    with pytest.raises(RuntimeError):
        E.export_components(comps, E.ExportSpec(H, W), tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_provider_selection(folder, engine, monkeypatch) -> None:
    assert engine.provider == O.CPU  # this machine: CPU only
    assert [n for n, _ in O.provider_chain(folder, "auto")][-1] == O.CPU
    so = O.session_options()
    import onnxruntime as ort

    assert so.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    assert so.intra_op_num_threads >= 1
    monkeypatch.setattr(O, "available_providers", lambda: [O.TRT, O.CUDA, O.CPU])
    chain = O.provider_chain(folder, "auto")
    assert [n for n, _ in chain] == [O.TRT, O.CUDA, O.CPU]
    trt, cuda = chain[0][1], chain[1][1]
    assert trt["trt_fp16_enable"] and trt["trt_engine_cache_enable"]
    assert trt["trt_engine_cache_path"].endswith("trt") and cuda["enable_cuda_graph"]
    assert [n for n, _ in O.provider_chain(folder, "cuda")] == [O.CUDA, O.CPU]
    monkeypatch.setattr(O, "available_providers", lambda: [O.CPU])
    assert [n for n, _ in O.provider_chain(folder, "tensorrt")] == [O.CPU]


def test_export_cli_hits_the_cache(cache, folder, capsys) -> None:
    from painted_skin.backend.diffusion.engine_cli import add_commands

    p = argparse.ArgumentParser()
    add_commands(p.add_subparsers(dest="command"))
    args = p.parse_args(["export-onnx", "--tiny", "--size", f"{W}x{H}", "--out", str(cache),
                         "--dynamo", "off"])
    n = E.stats["exports"]
    assert args.func(args) == 0
    assert str(folder) in capsys.readouterr().out and E.stats["exports"] == n
    with pytest.raises(ValueError):
        E.parse_size("63x64")


def test_ip_adapter_is_refused_clearly(cache) -> None:
    c = tiny_components(0)
    c.ip_adapter = (random_ip_adapter(c.unet, 32, seed=1), 1.0)
    with pytest.raises(NotImplementedError, match="torch engine"):
        O.OnnxRestylePipeline(c, cache_dir=cache)


@pytest.mark.slow
def test_dynamo_export_parity(tmp_path) -> None:
    c = tiny_components(1, n_controlnets=2)
    folder = E.export_components(c, E.ExportSpec(H, W), tmp_path, dynamo=True)
    m = json.loads((folder / "manifest.json").read_text())
    assert set(m["exporter"].values()) == {"dynamo"}
    eng = O.OnnxEngine(folder, "cpu")
    g = torch.Generator().manual_seed(0)
    z = torch.randn(1, 4, H // 2, W // 2, generator=g)
    with torch.no_grad():
        dec = c.vae.decode(z, return_dict=False)[0]
    assert np.abs(eng.run(E.VAE_DEC, {"latent": z})[0] - dec.numpy()).max() <= TOL
