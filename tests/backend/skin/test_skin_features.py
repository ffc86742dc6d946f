"""Skin-model inputs from the passes, and the serving side's freedom from torch (numpy)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from painted_skin.addon.core.passes.encodings import PARTS
from painted_skin.backend.skin import features as F
from painted_skin.backend.skin import synthetic as S


def test_serving_modules_import_no_torch() -> None:
    code = ("import sys\n"
            "import painted_skin.backend.skin.runtime, painted_skin.backend.skin.features\n"
            "import painted_skin.backend.skin.registry, painted_skin.backend.skin.synthetic\n"
            "import painted_skin.backend.pipelines.skin\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'bpy'))\n"
            "assert not bad, bad\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_layout_matches_the_part_labels_and_the_tensor() -> None:
    assert F.NUM_PARTS == len(PARTS)
    lay = F.layout(temporal_input=True)
    passes, _ = S.dataset(1, 32)[0]
    x = F.frame_features(passes, lay, F.rest_bounds([passes]))
    assert x.shape == (F.channels(lay), 32, 32) and x.dtype == np.float32
    names = [n for n, _ in lay]
    off = sum(c for n, c in lay[:names.index("parts")])
    on = passes["mask"] > 0
    # one-hot parts: exactly one label per character pixel, nothing off it
    np.testing.assert_array_equal(x[off:off + F.NUM_PARTS].sum(0), on.astype(np.float32))
    assert x[3:6][:, on].min() >= -1 and x[3:6][:, on].max() <= 1
    assert not x[-4:].any()  # a fresh frame: no previous output


def test_warped_previous_output_lines_up_with_this_frame() -> None:
    (p0, _), (p1, _) = S.shot(2, 64, speed=0.15)
    # the rest position is fixed to the surface: warped, frame 0's must be frame 1's
    r0, r1 = ((p["rest_position"] + 2) / 4 for p in (p0, p1))
    warped, valid = F.warp_previous_output(r0, p1["motion"], p1["depth"], p0["depth"])
    assert 0.5 < valid.sum() / (p1["mask"] > 0).sum() <= 1.0
    assert not valid[p1["mask"] == 0].any()
    err_warped = np.abs(warped - r1)[valid].mean()
    err_static = np.abs(r0 - r1)[valid].mean()
    assert err_warped < 0.25 * err_static


def test_a_window_of_the_warp_is_the_whole_frames_warp_there() -> None:
    """The trainer warps the previous output into its crop alone: every pixel of the
    window reads the previous frame where its motion points, in the window or not."""
    (p0, t0), (p1, _) = S.shot(2, 64, speed=0.15)
    rng = np.random.default_rng(3)
    motion = p1["motion"].copy()
    motion[..., :2] += rng.normal(0.0, 6.0, motion[..., :2].shape)  # reach out of the window
    whole = F.warp_previous_output(t0, motion, p1["depth"], p0["depth"])
    for y0, x0, h, w in ((0, 0, 64, 64), (10, 23, 32, 32), (32, 0, 32, 40)):
        part = F.warp_previous_output(t0, motion, p1["depth"], p0["depth"],
                                      window=(y0, x0, h, w))
        for a, b in zip(part, whole, strict=True):
            np.testing.assert_array_equal(a, b[y0:y0 + h, x0:x0 + w])
        assert part[1].any() and not part[1].all()


def test_missing_pass_is_named() -> None:
    passes, _ = S.dataset(1, 32)[0]
    del passes["light_visibility"]
    with pytest.raises(F.FeatureError, match="'light_visibility' pass"):
        F.frame_features(passes, F.layout(), [[-1] * 3, [1] * 3])
    with pytest.raises(F.FeatureError, match="unknown skin-model input"):
        F.layout(["normal", "roughness"])


def test_light_visibility_as_wire_bytes_gives_the_same_features() -> None:
    """The wire carries light visibility as 0/255 bytes; the model sees 0/1 either way."""
    lay = F.layout()
    passes, _ = S.dataset(1, 32)[0]
    lit = np.asarray(passes["light_visibility"], np.float32) > 0.5
    floats = dict(passes, light_visibility=lit.astype(np.float32))
    wire = dict(passes, light_visibility=lit.astype(np.uint8) * np.uint8(255))
    bounds = F.rest_bounds([passes])
    np.testing.assert_array_equal(F.frame_features(wire, lay, bounds),
                                  F.frame_features(floats, lay, bounds))
    assert lit.any() and not lit.all()
