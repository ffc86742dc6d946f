"""Warping by motion vectors, occlusion from depth, warping error (pure numpy:
runs in the bpy venv and in the backend venv)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from painted_skin.backend.diffusion import temporal as T
from painted_skin.backend.diffusion.seeds import frame_seed


def _flow(h: int, w: int, u: float, v: float) -> np.ndarray:
    f = np.zeros((h, w, 2), np.float32)
    f[..., 0], f[..., 1] = u, v
    return f


def test_integer_shift_gives_the_known_image() -> None:
    rng = np.random.default_rng(0)
    prev = rng.integers(0, 256, (20, 30, 3), dtype=np.uint8)
    # every current pixel's surface was 3 px right and 2 px up in the previous frame
    warped, inside = T.warp_previous(prev, _flow(20, 30, 3.0, -2.0))
    expect = np.zeros_like(inside)
    expect[2:, :27] = True
    np.testing.assert_array_equal(inside, expect)
    np.testing.assert_array_equal(warped[2:, :27], prev[:18, 3:].astype(np.float32))
    assert (warped[~inside] == 0).all()


@settings(max_examples=25, deadline=None)
@given(st.integers(-5, 5), st.integers(-5, 5), st.integers(0, 2**31 - 1))
def test_integer_shift_property(u: int, v: int, seed: int) -> None:
    prev = np.random.default_rng(seed).random((12, 13)).astype(np.float32)
    warped, inside = T.warp_previous(prev, _flow(12, 13, u, v))
    ii, jj = np.nonzero(inside)
    np.testing.assert_array_equal(warped[ii, jj], prev[ii + v, jj + u])
    assert inside.sum() == max(12 - abs(v), 0) * max(13 - abs(u), 0)


def test_subpixel_shift_of_a_ramp_is_exact() -> None:
    ramp = np.tile(np.arange(16, dtype=np.float32), (8, 1))
    warped, inside = T.warp_previous(ramp, _flow(8, 16, 0.25, 0.0))
    np.testing.assert_allclose(warped[inside], (ramp + 0.25)[inside], atol=1e-5)


def _moving_square(shift: int = 4) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A square at 2 m moving right by ``shift`` over a wall at 5 m."""
    h, w = 32, 48
    prev = np.full((h, w), 5.0, np.float32)
    now = prev.copy()
    prev[8:24, 10:26] = 2.0
    now[8:24, 10 + shift:26 + shift] = 2.0
    flow = np.zeros((h, w, 2), np.float32)
    flow[8:24, 10 + shift:26 + shift, 0] = -shift
    return now, prev, flow


def test_occlusion_where_a_surface_appears() -> None:
    now, prev, flow = _moving_square(4)
    valid = T.occlusion_mask(now, prev, flow)
    revealed = np.zeros_like(valid)
    revealed[8:24, 10:14] = True  # the wall was behind the square in the previous frame
    np.testing.assert_array_equal(valid, ~revealed)


def test_occlusion_background_and_borders() -> None:
    d = np.full((8, 8), np.inf, np.float32)
    assert T.occlusion_mask(d, d, _flow(8, 8, 0, 0)).all()
    assert not T.occlusion_mask(d, d, _flow(8, 8, 0, 0), include_background=False).any()
    d2 = np.full((8, 8), 3.0, np.float32)
    valid = T.occlusion_mask(d2, d2, _flow(8, 8, 2, 0))
    assert valid[:, :6].all() and not valid[:, 6:].any()  # came from outside the image
    # depth moving within the tolerance stays valid, beyond it does not
    assert T.occlusion_mask(d2, d2 * 1.03, _flow(8, 8, 0, 0)).all()
    assert not T.occlusion_mask(d2, d2 * 1.2, _flow(8, 8, 0, 0)).any()


def test_temporal_init_warps_valid_and_fills_holes() -> None:
    now, prev_d, flow = _moving_square(4)
    rng = np.random.default_rng(1)
    prev_rgb = rng.integers(0, 256, now.shape + (3,), dtype=np.uint8)
    init, valid = T.temporal_init(prev_rgb, flow, now, prev_d)
    warped, _ = T.warp_previous(prev_rgb, flow)
    np.testing.assert_array_equal(init[valid], warped[valid].astype(np.uint8))
    assert init.dtype == np.uint8 and not valid[8:24, 10:14].any()
    fresh = np.full_like(prev_rgb, 7)
    init2, _ = T.temporal_init(prev_rgb, flow, now, prev_d, fresh=fresh)
    assert (init2[~valid] == 7).all()


def test_fill_holes_is_smooth_and_keeps_valid() -> None:
    img = np.zeros((9, 9), np.float32)
    img[:, :4] = 10.0
    valid = np.zeros((9, 9), bool)
    valid[:, :4] = True
    out = T.fill_holes(img, valid)
    np.testing.assert_array_equal(out[valid], img[valid])
    np.testing.assert_allclose(out, 10.0)


def test_warping_error_consistent_vs_noise() -> None:
    shot = T.synthetic_shot(5, 48, 48, speed=2)
    rng = np.random.default_rng(2)
    tex = rng.integers(0, 256, (48, 96, 3), dtype=np.uint8)
    # a texture glued to the moving sphere: frame t shows tex shifted by 2t
    frames = []
    for t, p in enumerate(shot):
        f = np.zeros((48, 48, 3), np.uint8)
        on = p["mask"] > 0
        f[on] = tex[:, 20 - 2 * t:68 - 2 * t][on]
        frames.append(f)
    flows = [p["motion"] for p in shot[:-1]]
    masks = [T.occlusion_mask(shot[t]["depth"], shot[t + 1]["depth"], shot[t]["motion"][..., 2:])
             for t in range(4)]
    consistent = T.warping_error(frames, flows, masks)
    noise = T.warping_error([rng.integers(0, 256, f.shape, dtype=np.uint8) for f in frames],
                            flows, masks)
    assert consistent < 1e-9
    assert noise > 0.1
    with pytest.raises(ValueError):
        T.warping_error(frames, flows[:2], masks)


def test_strength_schedule() -> None:
    s = [T.strength_schedule(v, 0.4, 0.9) for v in (1.0, 0.8, 0.5, 0.0)]
    assert s[0] == pytest.approx(0.4) and s[-1] == pytest.approx(0.9)
    assert s == sorted(s)


def test_downsample_flow() -> None:
    f = np.zeros((16, 16, 2), np.float32)
    f[..., 0] = 8.0
    np.testing.assert_allclose(T.downsample_flow(f, 8), np.broadcast_to([1.0, 0.0], (2, 2, 2)))


def test_frame_seed_deterministic_and_matches_the_server() -> None:
    assert frame_seed(7, 3) == frame_seed(7, 3)
    seeds = {frame_seed(7, f) for f in range(1000)}
    assert len(seeds) == 1000 and all(0 <= s < 2**32 for s in seeds)
    assert frame_seed(7, 3) != frame_seed(8, 3)
    pytest.importorskip("zmq")
    from painted_skin.backend.server import frame_seed as server_seed

    assert all(frame_seed(s, f) == server_seed(s, f) for s in (0, 7, -3) for f in (0, 1, 99))


def test_warp_torch_matches_numpy() -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    x = rng.random((10, 12, 4)).astype(np.float32)
    flow = rng.uniform(-2, 2, (10, 12, 2)).astype(np.float32)
    ref, inside = T.warp_previous(x, flow)
    got = T.warp_torch(torch.from_numpy(x).permute(2, 0, 1)[None], flow)[0].permute(1, 2, 0)
    np.testing.assert_allclose(got.numpy()[inside], ref[inside], atol=1e-5)
