"""Temporal stabilisation of painted frames: flicker goes, real changes pass, nothing lags."""

from __future__ import annotations

import numpy as np
import pytest
from painted_skin.backend.skin import stabilize as S


def _chain(frames: list[np.ndarray], strength: float) -> list[np.ndarray]:
    """Each frame blended with the previous output (a static camera: the warp is identity)."""
    out = [frames[0]]
    valid = np.ones(frames[0].shape[:2], bool)
    for f in frames[1:]:
        out.append(S.stabilize(f, out[-1], valid, strength))
    return out


def _flicker(frames: list[np.ndarray]) -> float:
    pairs = zip(frames[:-1], frames[1:], strict=True)
    return float(np.mean([np.mean((a - b) ** 2) for a, b in pairs]))


def test_flicker_on_a_still_surface_is_damped() -> None:
    rng = np.random.default_rng(0)
    texture = rng.uniform(0.2, 0.8, (32, 32, 3)).astype(np.float32)
    painted = [texture + rng.normal(0, 0.02, texture.shape).astype(np.float32)
               for _ in range(20)]
    steady = _chain(painted, S.ON_STRENGTH)
    assert _flicker(steady) < 0.25 * _flicker(painted)
    # and the picture is the surface, closer to it than any single painted frame
    assert np.mean((steady[-1] - texture) ** 2) < np.mean((painted[-1] - texture) ** 2)


def test_a_real_change_passes_at_once_without_ghosting() -> None:
    before = np.full((16, 16, 3), 0.2, np.float32)
    after = before.copy()
    after[:, 8:] = 0.9  # a shadow leaves half the surface: a change far beyond flicker
    out = _chain([before, before, after], S.ON_STRENGTH)
    assert np.abs(out[-1][:, 8:] - 0.9).max() < 0.01
    np.testing.assert_allclose(out[-1][:, :8], 0.2, atol=1e-6)


def test_pixels_not_seen_a_frame_ago_keep_the_painted_value() -> None:
    painted = np.full((8, 8, 3), 0.5, np.float32)
    warped = np.full((8, 8, 3), 0.52, np.float32)
    valid = np.zeros((8, 8), bool)
    valid[:, :4] = True
    out = S.stabilize(painted, warped, valid)
    assert (out[:, 4:] == 0.5).all() and (out[:, :4] > 0.505).all()
    np.testing.assert_array_equal(S.stabilize(painted, warped, np.ones((8, 8), bool), 0.0),
                                  painted)


@pytest.mark.parametrize("value", [1.0, -0.1, "high", [0.5], float("nan")])
def test_strengths_outside_zero_to_one_are_refused(value) -> None:
    with pytest.raises(S.StabilizeError, match=r"\[0, 1\)"):
        S.check_strength(value)


def test_strength_vocabulary() -> None:
    # unset: a temporal model's own frames; true: the blend at its usual strength
    assert S.check_strength(None) == S.DEFAULT_STRENGTH == 0.0
    assert S.check_strength(True) == S.ON_STRENGTH > 0.0
    assert S.check_strength(False) == 0.0 and S.check_strength(0) == 0.0
    assert S.check_strength(0.5) == 0.5
