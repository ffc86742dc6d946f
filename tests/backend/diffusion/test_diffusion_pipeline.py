"""RestylePipeline end to end on tiny random components (CPU, no downloads)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("diffusers")

from painted_skin.backend import pipelines  # noqa: E402
from painted_skin.backend.diffusion import temporal as T  # noqa: E402
from painted_skin.backend.diffusion.controlnet_pipeline import (  # noqa: E402
    RestylePipeline,
    depth_control,
)
from painted_skin.backend.diffusion.seeds import frame_seed  # noqa: E402
from painted_skin.backend.diffusion.tiny import random_ip_adapter, random_lora, tiny_components  # noqa: E402

H = W = 64
SHOT = T.synthetic_shot(4, H, W, speed=2)


@pytest.fixture(scope="module")
def pipe() -> RestylePipeline:
    return RestylePipeline(tiny_components(0), "cpu")


def _run(p: RestylePipeline, seed: int = 1, **kw):
    return p.run(SHOT[0], prompt="a painted knight", negative_prompt="blurry", seed=seed,
                 width=W, height=H, **kw)


def test_three_controlnets_lcm_4_steps_reproducible(pipe: RestylePipeline) -> None:
    assert pipe.kinds == ["depth", "normal", "openpose"]
    steps: list[tuple[int, int]] = []
    a = _run(pipe, callback=lambda s, n: steps.append((s, n)) or True,
             options={"scheduler": "lcm", "steps": 4})
    assert a.image.shape == (H, W, 3) and a.image.dtype == np.uint8
    assert steps == [(1, 4), (2, 4), (3, 4), (4, 4)]
    assert pipe.scheduler_name == "lcm" and a.seed == 1 and a.mode == "fresh"
    b = _run(pipe, options={"scheduler": "lcm", "steps": 4})
    c = _run(pipe, seed=2, options={"scheduler": "lcm", "steps": 4})
    np.testing.assert_array_equal(a.image, b.image)
    assert np.abs(a.image.astype(int) - c.image).mean() > 1.0


def test_control_settings_change_the_output(pipe: RestylePipeline) -> None:
    a = _run(pipe).image
    b = _run(pipe, options={"controlnet": {"depth": {"scale": 0.0}, "normal": {"scale": 2.0},
                                           "openpose": {"start": 0.5, "end": 1.0}}}).image
    assert np.abs(a.astype(int) - b).max() > 0


@pytest.mark.parametrize("name", ["tcd", "ddim", "euler"])
def test_other_schedulers(pipe: RestylePipeline, name: str) -> None:
    out = _run(pipe, options={"scheduler": name, "steps": 2})
    assert out.image.shape == (H, W, 3) and pipe.scheduler_name == name
    pipe.set_scheduler("lcm")


def test_cancel_between_steps(pipe: RestylePipeline) -> None:
    seen: list[int] = []

    def cb(step: int, steps: int) -> bool:
        seen.append(step)
        return step < 2

    with pytest.raises(pipelines.Cancelled):
        _run(pipe, callback=cb)
    assert seen == [1, 2]
    assert _run(pipe).image.shape == (H, W, 3)  # usable afterwards


def test_missing_passes_and_depth_encoding(pipe: RestylePipeline) -> None:
    out = pipe(SHOT[0] | {}, seed=3, width=W, height=H)
    only_depth = pipe({"depth": SHOT[0]["depth"]}, seed=3, width=W, height=H)
    assert out.shape == only_depth.shape == (H, W, 3)
    d = depth_control(np.array([[1.0, 3.0, np.inf]], np.float32), 1.0, 3.0)
    assert d[0, :, 0].tolist() == [255, 0, 0] and d.shape == (1, 3, 3)


def test_per_frame_seeds_are_deterministic(pipe: RestylePipeline) -> None:
    s = [frame_seed(11, f) for f in range(3)]
    assert s == [frame_seed(11, f) for f in range(3)] and len(set(s)) == 3
    r = pipe.run(SHOT[1], seed=s[1], frame=1, width=W, height=H)
    assert r.seed == s[1] and r.frame == 1


def test_temporal_mode_uses_the_warped_init(pipe: RestylePipeline) -> None:
    state: dict = {}
    seeds = [frame_seed(5, f) for f in range(3)]
    tem = [pipe.run(SHOT[f], seed=seeds[f], frame=f, state=state, width=W, height=H)
           for f in range(3)]
    assert [r.mode for r in tem] == ["fresh", "temporal", "temporal"]
    assert 0.5 <= tem[1].strength < 0.6 and tem[1].valid_fraction > 0.9
    assert tem[1].steps == 2 and state["frame"] == 2
    ind = [pipe.run(SHOT[f], seed=seeds[f], frame=f, width=W, height=H) for f in range(3)]
    flows = [SHOT[f]["motion"] for f in range(2)]
    masks = [T.occlusion_mask(SHOT[f]["depth"], SHOT[f + 1]["depth"],
                              SHOT[f]["motion"][..., 2:]) for f in range(2)]
    e_tem = T.warping_error([r.image for r in tem], flows, masks)
    e_ind = T.warping_error([r.image for r in ind], flows, masks)
    assert e_tem < 0.5 * e_ind
    # a gap in the frame numbers (or no motion pass) runs fresh
    assert pipe.run(SHOT[3], seed=1, frame=5, state=state, width=W, height=H).mode == "fresh"
    # the image-space variant runs too
    st2: dict = {}
    for f in range(2):
        r = pipe.run(SHOT[f], seed=seeds[f], frame=f, state=st2, width=W, height=H,
                     options={"temporal_space": "image"})
    assert r.mode == "temporal"


def test_lora_load_changes_the_output(tmp_path) -> None:
    pytest.importorskip("peft")
    comps = tiny_components(0)
    p = RestylePipeline(comps)
    before = _run(p).image
    path = random_lora(comps.unet, tmp_path, seed=4, std=1.0)
    np.testing.assert_array_equal(_run(p).image, before)  # making it left the UNet alone
    p.load_lora(path, scale=1.0, name="hero")
    after = _run(p).image
    assert np.abs(after.astype(int) - before).mean() > 0.5
    p.load_lora(str(tmp_path), scale=0.5, name="hero2")  # a folder works too
    assert [lo.name for lo in p.loras] == ["hero", "hero2"]


def test_ip_adapter_with_random_weights(pipe: RestylePipeline) -> None:
    comps = tiny_components(0)
    comps.ip_adapter = (random_ip_adapter(comps.unet, 32, seed=1), 1.0)
    p = RestylePipeline(comps)
    rng = np.random.default_rng(0)
    refs = [rng.integers(0, 256, (40, 30, 3), dtype=np.uint8) for _ in range(2)]
    no_ref = _run(p).image
    with_refs = _run(p, refs=refs).image
    again = _run(p, refs=refs).image
    np.testing.assert_array_equal(with_refs, again)
    assert np.abs(with_refs.astype(int) - no_ref).max() > 0
    cfg = _run(p, refs=refs[:1], options={"guidance_scale": 3.0, "scheduler": "ddim",
                                          "steps": 2})
    assert cfg.image.shape == (H, W, 3)


def test_registered_pipeline_through_create() -> None:
    assert "sd15-controlnet" in pipelines.register_builtin()
    entry = pipelines.get("sd15-controlnet")
    assert entry.size_multiple == 8 and "tiny" in entry.load_keys
    p = pipelines.create("sd15-controlnet", {"tiny": True}, "cpu")
    state: dict = {}
    calls: list[int] = []
    out = p(SHOT[0], prompt="x", negative_prompt="", seed=9, width=W, height=H, refs=[],
            options={"steps": 4}, callback=lambda s, n: calls.append(s) or True,
            frame=0, state=state)
    assert out.shape == (H, W, 3) and out.dtype == np.uint8 and calls == [1, 2, 3, 4]
    assert getattr(p, "stateful", False) and state["frame"] == 0
    assert entry.check({"tiny": True}) == []


def test_options_of_one_session_do_not_stick_to_the_next():
    """The backend shares one pipeline between sessions: a session that names a
    scheduler must not change the pictures of a session that does not."""
    from painted_skin.backend.diffusion.controlnet_pipeline import RestylePipeline
    from painted_skin.backend.diffusion.temporal import synthetic_shot
    from painted_skin.backend.diffusion.tiny import tiny_components

    passes = synthetic_shot(1, 32, 32)[0]
    kw = {"prompt": "x", "negative_prompt": "", "seed": 5, "width": 32, "height": 32,
          "refs": [], "callback": lambda step, steps: True}
    fresh = RestylePipeline(tiny_components(0), "cpu")(passes, options={"steps": 2}, **kw)
    shared = RestylePipeline(tiny_components(0), "cpu")
    shared(passes, options={"steps": 2, "scheduler": "euler_a"}, **kw)
    again = shared(passes, options={"steps": 2}, **kw)
    np.testing.assert_array_equal(again, fresh)
