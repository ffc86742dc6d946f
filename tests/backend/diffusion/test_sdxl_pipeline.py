"""RestyleXLPipeline (SDXL + ControlNets / ControlNet-Union) end to end on tiny
random components (CPU, no downloads)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("diffusers")

from painted_skin.backend import pipelines  # noqa: E402
from painted_skin.backend.diffusion import components as C  # noqa: E402
from painted_skin.backend.diffusion import temporal as T  # noqa: E402
from painted_skin.backend.diffusion.sdxl_pipeline import (  # noqa: E402
    RestyleXLPipeline,
    check_xl,
    tiny_xl_components,
)
from painted_skin.backend.diffusion.seeds import frame_seed  # noqa: E402
from painted_skin.backend.pipelines.diffusion import sdxl_controlnet as sdxl_factory  # noqa: E402

H = W = 64
SHOT = T.synthetic_shot(3, H, W, speed=2)


@pytest.fixture(scope="module")
def multi() -> RestyleXLPipeline:
    return RestyleXLPipeline(tiny_xl_components(0), "cpu")


@pytest.fixture(scope="module")
def union() -> RestyleXLPipeline:
    return RestyleXLPipeline(tiny_xl_components(0, union=True), "cpu")


def _run(p: RestyleXLPipeline, passes: dict | None = None, seed: int = 1, **kw):
    return p.run(SHOT[0] if passes is None else passes, prompt="a painted knight",
                 negative_prompt="blurry", seed=seed, width=W, height=H, **kw)


def test_three_controlnets_lcm_reproducible(multi: RestyleXLPipeline) -> None:
    from diffusers.models.controlnets.multicontrolnet import MultiControlNetModel

    assert multi.kinds == ["depth", "normal", "openpose"] and not multi.union
    assert isinstance(multi.txt2img.controlnet, MultiControlNetModel)
    assert len(multi.txt2img.controlnet.nets) == 3
    steps: list[tuple[int, int]] = []
    a = _run(multi, callback=lambda s, n: steps.append((s, n)) or True,
             options={"scheduler": "lcm", "steps": 4})
    assert a.image.shape == (H, W, 3) and a.image.dtype == np.uint8 and a.mode == "fresh"
    assert steps == [(1, 4), (2, 4), (3, 4), (4, 4)] and multi.scheduler_name == "lcm"
    b = _run(multi, options={"scheduler": "lcm", "steps": 4})
    c = _run(multi, seed=2, options={"scheduler": "lcm", "steps": 4})
    np.testing.assert_array_equal(a.image, b.image)
    assert np.abs(a.image.astype(int) - c.image).mean() > 1.0
    # each net has its own scale/start/end
    d = _run(multi, options={"controlnet": {"depth": {"scale": 0.0}, "normal": {"scale": 2.0},
                                            "openpose": {"start": 0.5}}})
    assert np.abs(a.image.astype(int) - d.image).max() > 0


def test_euler_with_guidance(multi: RestyleXLPipeline) -> None:
    out = _run(multi, options={"scheduler": "euler", "steps": 2, "guidance_scale": 5.0})
    assert out.image.shape == (H, W, 3) and multi.scheduler_name == "euler"
    assert _run(multi).image.shape == (H, W, 3) and multi.scheduler_name == "lcm"


def test_controlnet_union_end_to_end(union: RestyleXLPipeline) -> None:
    from diffusers import ControlNetUnionModel

    assert union.union and isinstance(union.txt2img.controlnet, ControlNetUnionModel)
    a = _run(union, options={"steps": 3})
    assert a.image.shape == (H, W, 3) and a.steps == 3
    assert union.txt2img.control_modes == [1, 4, 0]  # depth, normal, openpose
    np.testing.assert_array_equal(a.image, _run(union, options={"steps": 3}).image)
    only_depth = _run(union, {"depth": SHOT[0]["depth"]}, options={"steps": 3})
    assert union.txt2img.control_modes == [1]
    assert np.abs(only_depth.image.astype(int) - a.image).max() > 0
    weak = _run(union, options={"steps": 3, "controlnet": {"normal": {"scale": 0.1}}})
    assert np.abs(weak.image.astype(int) - a.image).max() > 0
    nothing = _run(union, {}, options={"steps": 3})  # no pass at all: still a picture
    assert nothing.image.shape == (H, W, 3)


def test_cancel_raises_cancelled(multi: RestyleXLPipeline, union: RestyleXLPipeline) -> None:
    for p in (multi, union):
        seen: list[int] = []

        def cb(step: int, steps: int, seen: list[int] = seen) -> bool:
            seen.append(step)
            return step < 2

        with pytest.raises(pipelines.Cancelled):
            _run(p, callback=cb)
        assert seen == [1, 2]
        assert _run(p).image.shape == (H, W, 3)  # usable afterwards


@pytest.mark.parametrize("which", ["multi", "union"])
def test_temporal_mode_uses_the_warped_init(which: str, request) -> None:
    p: RestyleXLPipeline = request.getfixturevalue(which)
    seen: list[tuple] = []
    orig = type(p.img2img).__call__

    def spy(self, *args, **kw):
        seen.append((kw["image"].clone(), kw["strength"]))
        return orig(self, *args, **kw)

    state: dict = {}
    seeds = [frame_seed(5, f) for f in range(3)]
    mp = pytest.MonkeyPatch()
    mp.setattr(type(p.img2img), "__call__", spy)
    try:
        tem = [p.run(SHOT[f], seed=seeds[f], frame=f, state=state, width=W, height=H)
               for f in range(3)]
        prev = state["latents"]
    finally:
        mp.undo()
    assert [r.mode for r in tem] == ["fresh", "temporal", "temporal"]
    assert tem[1].steps == 2 and 0.5 <= tem[1].strength < 0.6 and tem[1].valid_fraction > 0.9
    # the init of frame 2 is frame 1's final latents warped by frame 2's motion
    init2, strength = seen[1]
    assert init2.shape == prev.shape and strength == tem[2].strength
    st1: dict = {}
    for f in range(2):
        p.run(SHOT[f], seed=seeds[f], frame=f, state=st1, width=W, height=H)
    f8 = p.txt2img.vae_scale_factor
    expect = T.warp_torch(st1["latents"].float(),
                          T.downsample_flow(SHOT[2]["motion"][..., :2], f8))
    seen_px = T.occlusion_mask(SHOT[2]["depth"], SHOT[1]["depth"], SHOT[2]["motion"][..., :2])
    cells = seen_px.reshape(H // f8, f8, W // f8, f8).all(axis=(1, 3))  # holes get filled
    cells[[0, -1]] = cells[:, [0, -1]] = False
    assert cells.sum() > 10
    np.testing.assert_allclose(init2[0][:, cells].numpy(), expect[0][:, cells].numpy(),
                               atol=1e-4)
    if which == "union":
        return  # the rest is the same code path as with separate ControlNets
    ind = [p.run(SHOT[f], seed=seeds[f], frame=f, width=W, height=H) for f in range(3)]
    flows = [SHOT[f]["motion"] for f in range(2)]
    masks = [T.occlusion_mask(SHOT[f]["depth"], SHOT[f + 1]["depth"],
                              SHOT[f]["motion"][..., 2:]) for f in range(2)]
    e_tem = T.warping_error([r.image for r in tem], flows, masks)
    e_ind = T.warping_error([r.image for r in ind], flows, masks)
    assert e_tem < 0.5 * e_ind
    # the image-space variant (VAE-encoded warped RGB) runs too
    st2: dict = {}
    for f in range(2):
        r = p.run(SHOT[f], seed=seeds[f], frame=f, state=st2, width=W, height=H,
                  options={"temporal_space": "image"})
    assert r.mode == "temporal"


def test_factory_and_check() -> None:
    p = sdxl_factory({"tiny": True, "union": True, "tiny_seed": 1}, "cpu")
    assert isinstance(p, RestyleXLPipeline) and p.union and p.stateful
    state: dict = {}
    out = p(SHOT[0], prompt="x", negative_prompt="", seed=9, width=W, height=H, refs=[],
            options={"steps": 2}, callback=lambda s, n: True, frame=0, state=state)
    assert out.shape == (H, W, 3) and state["frame"] == 0
    assert check_xl({"tiny": True}) == []
    assert "steps" in check_xl({"tiny": True, "steps": 0})[0]
    assert "cross_frame" in check_xl({"tiny": True, "cross_frame": "last"})[0]
    assert "registry" in check_xl({"registry": "/etc"})[0]


def test_registry_model_loads_from_local_folders(tmp_path, monkeypatch) -> None:
    comps = tiny_xl_components(2, union=True)
    union_pipe = RestyleXLPipeline(comps)
    base = tmp_path / "sdxl"
    union_pipe.txt2img.save_pretrained(base)
    comps.union.save_pretrained(tmp_path / "union")
    reg = tmp_path / "models.toml"
    reg.write_text(f'[models.xl]\nbase = "{base}"\nlocal_files_only = true\n'
                   f'controlnet_union = "{tmp_path / "union"}"\n'
                   f'union_modes = {{ depth = 1, normal = 4, openpose = 0 }}\n'
                   f'[models.broken]\nbase = "{tmp_path / "nowhere"}"\n')
    monkeypatch.setenv("PAINTED_SKIN_MODELS", str(reg))
    assert check_xl({"model": "xl"}) == []
    problems = check_xl({"model": "broken"})
    assert any("nowhere" in s for s in problems) and any("controlnet" in s for s in problems)
    assert "not in the registry" in check_xl({"model": "nope"})[0]
    loaded = sdxl_factory({"model": "xl"}, "cpu")
    assert loaded.union and loaded.union_modes == {"depth": 1, "normal": 4, "openpose": 0}
    a = _run(loaded, options={"steps": 2}).image
    b = _run(union_pipe, options={"steps": 2}).image  # (the saved scheduler config is LCM's)
    assert np.abs(a.astype(int) - b).max() <= 1
    config = base / "unet" / "config.json"
    good = config.read_text()
    config.write_text("not json")  # present but corrupt: found by the load, named
    with pytest.raises(C.MissingWeights, match="base unet: could not load.*looked in"):
        sdxl_factory({"model": "xl"}, "cpu")
    config.write_text(good)
    import shutil

    shutil.rmtree(base / "text_encoder_2")
    assert any("text_encoder_2" in s for s in check_xl({"model": "xl"}))
    with pytest.raises(C.MissingWeights):
        sdxl_factory({"model": "xl"}, "cpu")
