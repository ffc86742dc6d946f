"""Cross-frame attention to an anchor frame, one frame per call (tiny random
components, CPU)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")

from painted_skin.backend import pipelines  # noqa: E402
from painted_skin.backend.diffusion import temporal as T  # noqa: E402
from painted_skin.backend.diffusion.controlnet_pipeline import RestylePipeline  # noqa: E402
from painted_skin.backend.diffusion.cross_frame import (  # noqa: E402
    CrossFrameAttnProcessor,
    CrossFrameRestyle,
    CrossFrameState,
    cross_frame_session,
    disable_cross_frame_attention,
    enable_cross_frame_attention,
    is_enabled,
)
from painted_skin.backend.diffusion.sdxl_pipeline import (  # noqa: E402
    RestyleXLPipeline,
    tiny_xl_components,
)
from painted_skin.backend.diffusion.seeds import frame_seed  # noqa: E402
from painted_skin.backend.diffusion.tiny import tiny_components  # noqa: E402

H = W = 64
STATIC = T.synthetic_shot(1, H, W)[0]  # a static shot: every frame has these passes
OPTS = {"temporal": False, "scheduler": "euler", "steps": 2}


def _amplified_xl() -> RestyleXLPipeline:
    """Random UNets do not denoise: a frame is decided by its noise, not by what
    flows through attention. Scaling every self-attention output (x300) and the
    UNet's output (x5) makes what attention carries show in the image — a
    stand-in for a trained model, where appearance does flow through it."""
    comps = tiny_xl_components(0)
    with torch.no_grad():
        for name, m in comps.unet.named_modules():
            if name.endswith("attn1"):
                m.to_out[0].weight.mul_(300.0)
        comps.unet.conv_out.weight.mul_(5.0)
        comps.unet.conv_out.bias.mul_(5.0)
    return RestyleXLPipeline(comps)


def _frames(p, seed: int, mode: str | None, n: int = 2, state: dict | None = None,
            **kw) -> list[np.ndarray]:
    state = {} if state is None else state
    return [p.run(STATIC, seed=frame_seed(seed, f), frame=f, state=state, width=W, height=H,
                  options={**OPTS, "cross_frame": mode}, **kw).image.astype(int)
            for f in range(n)]


@pytest.fixture(scope="module")
def xl() -> RestyleXLPipeline:
    return _amplified_xl()


def test_second_frame_is_closer_to_the_anchor(xl: RestyleXLPipeline) -> None:
    """(For the second frame both anchors are frame 0.)"""
    near = far = 0.0
    for seed in (3, 4, 5):
        a0, a1 = _frames(xl, seed, "first")
        b0, b1 = _frames(xl, seed, None)
        np.testing.assert_array_equal(a0, b0)  # the anchor itself is unchanged
        near += np.abs(a1 - a0).mean()
        far += np.abs(b1 - b0).mean()
    assert near < 0.9 * far


def test_anchor_cache_lives_in_the_session_state(xl: RestyleXLPipeline) -> None:
    state: dict = {}
    first = _frames(xl, 3, "first", n=3, state=state)
    cf = state["cross_frame"]
    assert isinstance(cf, CrossFrameState) and cf.mode == "first" and cf.anchor_frame == 0
    n_attn1 = sum(1 for n in xl.txt2img.unet.attn_processors if n.endswith("attn1.processor"))
    assert len(cf.anchor) == n_attn1 == 12  # 2x2 down, 1x2 mid, 3x2 up transformer layers
    assert all(len(d) == 2 for d in cf.anchor.values())  # one entry per step (timestep)
    # bytes: per layer and step, (batch 2 with CFG) x tokens x channels float32
    t = next(iter(next(iter(cf.anchor.values())).values()))
    assert t.shape[0] == 2 and cf.nbytes() > 0
    st2: dict = {}
    prev = _frames(xl, 3, "previous", n=3, state=st2)
    assert st2["cross_frame"].anchor_frame == 2
    np.testing.assert_array_equal(prev[1], first[1])  # both attend to frame 0
    assert np.abs(prev[2] - first[2]).max() > 0  # frame 2: to frame 1, not to frame 0
    # a gap in the frame numbers: that frame becomes the anchor (it attends to nothing)
    gap = xl.run(STATIC, seed=frame_seed(3, 7), frame=7, state=st2, width=W, height=H,
                 options={**OPTS, "cross_frame": "previous"}).image
    plain = xl.run(STATIC, seed=frame_seed(3, 7), frame=7, width=W, height=H,
                   options=OPTS).image
    np.testing.assert_array_equal(gap, plain)
    assert st2["cross_frame"].anchor_frame == 7


def test_two_sessions_do_not_mix(xl: RestyleXLPipeline) -> None:
    alone_a = _frames(xl, 11, "first")
    alone_b = _frames(xl, 12, "first", prompt="a red dragon")
    sa: dict = {}
    sb: dict = {}
    inter = []
    for f in range(2):
        for seed, st, kw in ((11, sa, {}), (12, sb, {"prompt": "a red dragon"})):
            inter.append(xl.run(STATIC, seed=frame_seed(seed, f), frame=f, state=st, width=W,
                                height=H, options={**OPTS, "cross_frame": "first"},
                                **kw).image.astype(int))
    for got, want in zip(inter, [alone_a[0], alone_b[0], alone_a[1], alone_b[1]], strict=True):
        np.testing.assert_array_equal(got, want)
    assert np.abs(alone_a[1] - _frames(xl, 11, None)[1]).max() > 0  # it did act


def test_cancelled_anchor_records_nothing(xl: RestyleXLPipeline) -> None:
    state: dict = {}
    with pytest.raises(pipelines.Cancelled):
        xl.run(STATIC, seed=1, frame=0, state=state, width=W, height=H,
               options={**OPTS, "cross_frame": "first"}, callback=lambda s, n: False)
    assert not state["cross_frame"].anchor and xl.txt2img.unet._painted_skin_cross_frame.active \
        is None
    with pytest.raises(ValueError):
        xl.run(STATIC, seed=1, frame=0, state=state, width=W, height=H,
               options={**OPTS, "cross_frame": "last"})


def test_wrapper_for_sd15_and_disable_restores_the_processors() -> None:
    pipe = RestylePipeline(tiny_components(0))
    unet = pipe.txt2img.unet
    before = dict(unet.attn_processors)
    wrapped = CrossFrameRestyle(pipe)
    assert wrapped.stateful and wrapped.name == "sd15-controlnet" and not is_enabled(unet)
    state: dict = {}
    kw = dict(width=W, height=H, options={"temporal": False, "cross_frame": "first"})
    for f in range(2):
        out = wrapped(STATIC, seed=frame_seed(2, f), frame=f, state=state, **kw)
    assert out.shape == (H, W, 3) and is_enabled(unet)
    assert sum(isinstance(p, CrossFrameAttnProcessor)
               for p in unet.attn_processors.values()) == 6  # every attn1, no attn2
    disable_cross_frame_attention(unet)
    assert not is_enabled(unet)
    after = unet.attn_processors
    assert after.keys() == before.keys() and all(after[k] is before[k] for k in before)
    fresh = RestylePipeline(tiny_components(0))
    for f in range(2):
        plain = pipe.run(STATIC, seed=frame_seed(2, f), frame=f, width=W, height=H).image
        ref = fresh.run(STATIC, seed=frame_seed(2, f), frame=f, width=W, height=H).image
        np.testing.assert_array_equal(plain, ref)
    disable_cross_frame_attention(unet)  # a no-op when off


def test_enable_is_idempotent_and_inert_outside_a_session() -> None:
    pipe = RestylePipeline(tiny_components(0))
    unet = pipe.txt2img.unet
    ref = pipe.run(STATIC, seed=4, width=W, height=H).image
    ctl = enable_cross_frame_attention(unet, anchor="previous")
    assert enable_cross_frame_attention(unet) is ctl and ctl.anchor == "first"
    np.testing.assert_array_equal(pipe.run(STATIC, seed=4, width=W, height=H).image, ref)
    with cross_frame_session(unet, None, 0, "first") as cf:  # no state: plain
        assert cf is None
    st: dict = {}
    with cross_frame_session(unet, st, 0, "first") as outer:  # nested: the same session
        with cross_frame_session(unet, st, 0, "first") as inner:
            assert inner is outer and ctl.active is not None
        with pytest.raises(RuntimeError), cross_frame_session(unet, {}, 0, "first"):
            pass  # another session while one is running
    assert ctl.active is None
    with pytest.raises(ValueError):
        enable_cross_frame_attention(unet, anchor="middle")
    disable_cross_frame_attention(unet)


def test_a_sessions_true_is_first_whatever_another_session_left_installed() -> None:
    """``cross_frame: true`` means "first" on torch as on onnx and in the add-on's
    resume (which re-runs the first frame), not the mode of the UNet's last user."""
    pipe = RestylePipeline(tiny_components(0))
    other: dict = {}
    with pipe.cross_frame(other, 3, "previous"):
        pass
    assert other["cross_frame"].mode == "previous"
    mine: dict = {}
    with pipe.cross_frame(mine, 3, True):
        pass
    assert mine["cross_frame"].mode == "first"
