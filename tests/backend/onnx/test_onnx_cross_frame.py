"""Cross-frame attention on the onnx engine against the torch engine (tiny SD 1.5
components with amplified self-attention, CPU EP).

Tolerances (as tests/backend/onnx/test_onnx_engine.py): graph outputs max |Δ| ≤ 1e-4
(measured ~5e-7); whole pipelines' uint8 images mean |Δ| ≤ 0.5, max |Δ| ≤ 2 levels
(measured mean 0.000, max 0-1).
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("onnxruntime")
pytest.importorskip("diffusers")

import torch  # noqa: E402
from painted_skin.backend import pipelines  # noqa: E402
from painted_skin.backend.diffusion import temporal as T  # noqa: E402
from painted_skin.backend.diffusion.controlnet_pipeline import RestylePipeline  # noqa: E402
from painted_skin.backend.diffusion.cross_frame import (  # noqa: E402
    _Run,
    enable_cross_frame_attention,
)
from painted_skin.backend.diffusion.onnx import cross_frame as X  # noqa: E402
from painted_skin.backend.diffusion.onnx import engine as OE  # noqa: E402
from painted_skin.backend.diffusion.onnx import export as E  # noqa: E402
from painted_skin.backend.diffusion.onnx import pipeline as OP  # noqa: E402
from painted_skin.backend.diffusion.seeds import frame_seed  # noqa: E402
from painted_skin.backend.diffusion.tiny import tiny_components  # noqa: E402

H = W = 64
SHOT = T.synthetic_shot(3, H, W, speed=2)
TOL = 1e-4


def amplified() -> object:
    """Tiny components whose self-attention shows in the picture (random UNets do not
    denoise: see tests/backend/diffusion/test_cross_frame.py)."""
    c = tiny_components(0)
    with torch.no_grad():
        for name, m in c.unet.named_modules():
            if name.endswith("attn1"):
                m.to_out[0].weight.mul_(300.0)
        c.unet.conv_out.weight.mul_(5.0)
        c.unet.conv_out.bias.mul_(5.0)
    return c


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory):
    return tmp_path_factory.mktemp("onnx-xf-cache")


@pytest.fixture(scope="module")
def pipes(cache):
    return (RestylePipeline(amplified()),
            OP.OnnxRestylePipeline(amplified(), cache_dir=cache, dynamo=False))


def _close(a: np.ndarray, b: np.ndarray) -> None:
    d = np.abs(a.astype(int) - b.astype(int))
    assert d.mean() <= 0.5 and d.max() <= 2, (d.mean(), d.max())


def test_graph_attends_to_the_anchor_like_the_torch_processors(cache) -> None:
    """The cross-frame UNet graph: an anchor frame gives the plain prediction and its
    keys/values; a later frame fed them gives what the torch processors give."""
    from diffusers.models.controlnets.multicontrolnet import MultiControlNetModel

    c = amplified()
    folder = E.export_components(c, E.ExportSpec(H, W, cross_frame=True), cache, dynamo=False)
    eng = OE.OnnxEngine(folder, "cpu")
    torch_layers = [n.removesuffix(".processor") for n in c.unet.attn_processors
                    if n.endswith("attn1.processor")]
    assert eng.cross_layers == torch_layers and len(torch_layers) == 6
    ins = eng.manifest["graphs"][E.UNET]["inputs"]
    assert ins[:7] == ["sample", "timestep", "encoder_hidden_states", "scales", "cond_emb_0",
                       "cond_emb_1", "cond_emb_2"] and X.USE in ins
    assert ins[-12:] == [f"anchor_{p}_{j}" for j in range(6) for p in ("key", "value")]
    g = torch.Generator().manual_seed(3)
    lat0, lat1 = (torch.randn(2, 4, H // 2, W // 2, generator=g) for _ in range(2))
    ehs = torch.randn(2, 77, 32, generator=g)
    conds = [torch.rand(2, 3, H, W, generator=g) for _ in range(3)]
    multi = MultiControlNetModel([c.controlnets[k] for k in ("depth", "normal", "openpose")])
    ctl = enable_cross_frame_attention(c.unet)

    def torch_pred(x: torch.Tensor, run: _Run | None) -> torch.Tensor:
        ctl.active = run
        try:
            with torch.no_grad():
                d, m = multi(x, torch.tensor(500), ehs, conds, [0.8, 0.5, 1.0], return_dict=False)
                return c.unet(x, torch.tensor(500), ehs, down_block_additional_residuals=d,
                              mid_block_additional_residual=m, return_dict=False)[0]
        finally:
            ctl.active = None

    t_run, o_run = _Run({}, None), _Run({}, None)
    plain = torch_pred(lat0, None)
    anchor_t = torch_pred(lat0, t_run)
    anchor_o = eng.noise_pred(lat0, 500, ehs, conds, [0.8, 0.5, 1.0], cross=o_run)
    assert float((anchor_t - plain).abs().max()) == 0.0
    assert float((anchor_o - plain).abs().max()) <= TOL  # attending to itself twice: plain
    assert sorted(o_run.record) == sorted(f"{p}_{j}" for j in range(6) for p in ("key", "value"))
    later_t = torch_pred(lat1, _Run(None, t_run.record))
    later_o = eng.noise_pred(lat1, 500, ehs, conds, [0.8, 0.5, 1.0],
                             cross=_Run(None, o_run.record))
    assert float((later_o - later_t).abs().max()) <= TOL
    assert float((later_t - torch_pred(lat1, None)).abs().max()) > 100 * TOL  # it attends
    # a recorded anchor of another batch is not used (as on torch): plain attention
    one = eng.noise_pred(lat1[:1], 500, ehs[:1], [x[:1] for x in conds], [0.8, 0.5, 1.0],
                         cross=_Run(None, o_run.record))
    assert float((one - torch_pred(lat1, None)[:1]).abs().max()) <= TOL


def test_frames_match_the_torch_engine(pipes) -> None:
    """Both anchors, with classifier-free guidance (batch chunks) and temporal frames."""
    tp, op = pipes
    effect = 0.0
    for mode, opts in (("first", {"temporal": False, "scheduler": "euler", "steps": 2,
                                  "guidance_scale": 3.0}),
                       ("previous", {"steps": 3})):
        s_onnx: dict = {}
        s_torch: dict = {}
        s_plain: dict = {}
        for f in range(3):
            kw = dict(prompt="a knight", seed=frame_seed(3, f), frame=f, width=W, height=H)
            a = op.run(SHOT[f], state=s_onnx, options={**opts, "cross_frame": mode}, **kw)
            b = tp.run(SHOT[f], state=s_torch, options={**opts, "cross_frame": mode}, **kw)
            p = tp.run(SHOT[f], state=s_plain, options=opts, **kw)
            assert a.mode == b.mode
            _close(a.image, b.image)
            if f == 0:  # the anchor itself is the plain frame
                _close(a.image, p.image)
            effect += np.abs(b.image.astype(int) - p.image).mean()
        assert s_onnx["cross_frame"].anchor_frame == (0 if mode == "first" else 2)
    assert effect > 0.3  # cross-frame attention did change the later frames
    assert sorted(k[3] for k in op.onnx.engines) == [True]


def test_anchor_memory_is_bounded(pipes) -> None:
    """One anchor frame's keys and values per layer and step, replaced (not added to)
    frame after frame: twice the torch engine's hidden states, whatever the shot length."""
    tp, op = pipes
    s_onnx: dict = {}
    s_torch: dict = {}
    sizes = []
    for f in range(4):
        kw = dict(seed=f, frame=f, width=W, height=H,
                  options={"steps": 2, "temporal": False, "cross_frame": "previous"})
        op.run(SHOT[f % 3], state=s_onnx, **kw)
        tp.run(SHOT[f % 3], state=s_torch, **kw)
        sizes.append(s_onnx["cross_frame"].nbytes())
    cf = s_onnx["cross_frame"]
    assert len(set(sizes)) == 1 and cf.anchor_frame == 3
    assert len(cf.anchor) == 12 and all(len(d) == 2 for d in cf.anchor.values())  # 2 steps
    assert sizes[0] == 2 * s_torch["cross_frame"].nbytes()


def test_cancelled_anchor_records_nothing_and_sessions_do_not_mix(pipes) -> None:
    _, op = pipes
    state: dict = {}
    opts = {"steps": 2, "temporal": False, "cross_frame": "first"}
    with pytest.raises(pipelines.Cancelled):
        op.run(SHOT[0], seed=1, frame=0, state=state, width=W, height=H, options=opts,
               callback=lambda s, n: False)
    assert not state["cross_frame"].anchor and op.onnx.cross is None
    st: dict = {}
    alone = [op.run(SHOT[f], seed=f, frame=f, state=st, width=W, height=H,
                    options=opts).image for f in range(2)]
    sa: dict = {}
    sb: dict = {}
    for f in range(2):  # interleaved with another session's frames
        a = op.run(SHOT[f], seed=f, frame=f, state=sa, width=W, height=H, options=opts).image
        op.run(SHOT[2 - f], seed=9 + f, frame=f, state=sb, width=W, height=H, options=opts,
               prompt="a red dragon")
        np.testing.assert_array_equal(a, alone[f])


def test_variant_is_cached_apart_and_accepted_at_open(pipes, cache) -> None:
    from painted_skin.backend.pipelines import diffusion

    _, op = pipes
    comps = op.components_for_export()
    h = E.model_hash(comps)
    plain, xf = E.ExportSpec(H, W), E.ExportSpec(H, W, cross_frame=True)
    assert E.cache_key(comps, plain, h) != E.cache_key(comps, xf, h)
    assert "-xf-" in E.cache_key(comps, xf, h) and "-xf-" not in E.cache_key(comps, plain, h)
    # accepted at OPEN; prepare exports the variant the session asks for, and only it
    opts = {"tiny": True, "engine": "onnx", "cross_frame": "previous"}
    assert diffusion.check(opts) == []
    assert not op.prepared(width=W, height=2 * H, options=opts)
    op.prepare(width=W, height=2 * H, options=opts)
    assert op.prepared(width=W, height=2 * H, options=opts)
    assert not op.prepared(width=W, height=2 * H, options={})
    eng = op.onnx.engines[(2 * H, W, 0, True)]
    assert eng.cross_layers and X.USE in eng.inputs(E.UNET)
    folders = {p.name for p in cache.iterdir() if not p.name.startswith(".")}
    assert any("-xf-" in n for n in folders)
    plain_folder = E.export_components(comps, plain, cache, dynamo=False)
    eng_plain = OE.OnnxEngine(plain_folder, "cpu")
    assert not eng_plain.cross_layers and X.USE not in eng_plain.inputs(E.UNET)
    assert eng_plain.manifest["graphs"][E.UNET]["outputs"] == ["noise_pred"]


@pytest.mark.slow
def test_sdxl_frames_match_the_torch_engine(cache) -> None:
    """The same graph variant for SDXL (12 self-attention layers; the amplified tiny
    SDXL of tests/backend/diffusion/test_cross_frame.py, where attention moves the picture by
    tens of levels)."""
    from painted_skin.backend.diffusion.onnx.xl import OnnxRestyleXLPipeline
    from painted_skin.backend.diffusion.sdxl_pipeline import (
        RestyleXLPipeline,
        tiny_xl_components,
    )

    def comps() -> object:
        c = tiny_xl_components(0)
        with torch.no_grad():
            for name, m in c.unet.named_modules():
                if name.endswith("attn1"):
                    m.to_out[0].weight.mul_(300.0)
            c.unet.conv_out.weight.mul_(5.0)
            c.unet.conv_out.bias.mul_(5.0)
        return c

    tp, op = RestyleXLPipeline(comps()), OnnxRestyleXLPipeline(comps(), cache_dir=cache,
                                                               dynamo=False)
    static = T.synthetic_shot(1, H, W)[0]
    opts = {"temporal": False, "scheduler": "euler", "steps": 2, "cross_frame": "previous"}
    s_onnx: dict = {}
    s_torch: dict = {}
    for f in range(3):
        kw = dict(seed=frame_seed(3, f), frame=f, width=W, height=H, options=opts)
        a = op.run(static, state=s_onnx, **kw).image
        b = tp.run(static, state=s_torch, **kw).image
        _close(a, b)
        if f:
            plain = tp.run(static, **kw).image  # no state: no anchor
            assert np.abs(b.astype(int) - plain).mean() > 5.0
    assert len(op.onnx.engine.cross_layers) == 12


def test_export_cli_exports_the_variant(cache, capsys) -> None:
    import argparse
    import json
    from pathlib import Path

    from painted_skin.backend.diffusion.engine_cli import add_commands

    p = argparse.ArgumentParser()
    add_commands(p.add_subparsers(dest="command"))
    args = p.parse_args(["export-onnx", "--tiny", "--cross-frame", "--size", f"{W}x{H}",
                         "--out", str(cache), "--dynamo", "off"])
    assert args.func(args) == 0
    folder = Path(capsys.readouterr().out.strip().split(" -> ")[-1])
    manifest = json.loads((folder / "manifest.json").read_text())
    assert "-xf-" in folder.name and manifest["spec"]["cross_frame"]
    assert len(manifest["cross_frame_layers"]) == 6
    assert manifest["graphs"][E.UNET]["outputs"][:3] == ["noise_pred", "key_0", "value_0"]
