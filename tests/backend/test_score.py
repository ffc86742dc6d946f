"""``painted-skin score``: masked PSNR / SSIM / FLIP, warping error with the renderer's
flow and depth occlusion, the per-frame JSON and the bad-input messages. Needs no bpy:
runs in the backend venv and in the bpy venv (scikit-image, flip-evaluator, OpenEXR,
Pillow, pypng installed)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("skimage")
pytest.importorskip("flip_evaluator")
OpenEXR = pytest.importorskip("OpenEXR")
Image = pytest.importorskip("PIL.Image")
png = pytest.importorskip("png")

from painted_skin.backend.evaluate import metrics as M  # noqa: E402
from painted_skin.backend.evaluate import score as S  # noqa: E402
from painted_skin.backend.evaluate.images import read_exr, read_png  # noqa: E402

LAST_LINE = re.compile(r"^score psnr: (\S+) ssim: (\S+) flip: (\S+) warp_ratio: (\S+)$")
rng = np.random.default_rng


def _texture(h: int, w: int, seed: int = 0) -> np.ndarray:
    """A smooth random texture in [0.2, 0.8] (RGB float64)."""
    base = rng(seed).random((h // 4 + 2, w // 4 + 2, 3))
    up = np.kron(base, np.ones((4, 4, 1)))[:h, :w]
    return 0.2 + 0.6 * up


# ---- metrics against known values -------------------------------------------------------

def _square_mask(h: int = 64, w: int = 64, lo: int = 16, hi: int = 48) -> np.ndarray:
    m = np.zeros((h, w), bool)
    m[lo:hi, lo:hi] = True
    return m


def test_identical_images_score_the_cap_one_and_zero() -> None:
    img = _texture(64, 64)
    mask = _square_mask()
    assert M.masked_psnr(img, img.copy(), mask) == M.PSNR_CAP_DB
    assert M.masked_ssim(img, img.copy(), mask) == pytest.approx(1.0, abs=1e-9)
    assert M.masked_flip(img, img.copy(), mask) == 0.0


def test_constant_shift_gives_the_exact_psnr_on_uint8_without_wrapping() -> None:
    ref = (rng(1).integers(20, 200, (48, 40, 3))).astype(np.uint8)
    test = ref + np.uint8(10)  # test > ref: a uint8 ref - test would wrap to 246
    mask = np.ones((48, 40), bool)
    assert M.masked_psnr(ref, test, mask) == pytest.approx(20 * np.log10(255 / 10), abs=1e-9)
    assert M.masked_psnr(test, ref, mask) == pytest.approx(20 * np.log10(255 / 10), abs=1e-9)


def test_gaussian_noise_psnr_is_within_a_tenth_of_a_db_of_the_formula() -> None:
    sigma = 0.02
    ref = 0.3 + 0.4 * rng(2).random((128, 128, 3))  # far from 0 and 1: no clipping
    test = ref + rng(3).normal(0.0, sigma, ref.shape)
    mask = np.ones((128, 128), bool)
    assert abs(M.masked_psnr(ref, test, mask) - (-20 * np.log10(sigma))) < 0.1


def test_uint16_images_are_read_on_the_same_scale_as_uint8() -> None:
    ref8 = rng(4).integers(0, 256, (32, 32, 3)).astype(np.uint8)
    ref16 = ref8.astype(np.uint16) * 257  # the same picture at 16 bits
    test8 = np.clip(ref8.astype(int) + 5, 0, 255).astype(np.uint8)
    mask = np.ones((32, 32), bool)
    assert M.masked_psnr(ref16, test8, mask) == pytest.approx(M.masked_psnr(ref8, test8, mask))


def test_pixels_outside_the_mask_do_not_matter() -> None:
    ref = _texture(64, 64, 5)
    test = np.clip(ref + rng(6).normal(0, 0.05, ref.shape), 0, 1)
    mask = _square_mask()
    wild = test.copy()
    wild[~mask] = rng(7).random(((~mask).sum(), 3))  # any other background
    ref_wild = ref.copy()
    ref_wild[~mask] = 1.0
    for metric in (M.masked_psnr, M.masked_ssim, M.masked_flip):
        base = metric(ref, test, mask)
        assert metric(ref, wild, mask) == base
        assert metric(ref_wild, wild, mask) == base
        inside = test.copy()
        inside[30:34, 30:34] = 1.0  # a change inside the mask does count
        assert metric(ref, inside, mask) != base


def test_ssim_and_flip_equal_the_whole_frame_computation() -> None:
    """They are computed on the mask's box (plus a margin): the same as on the frame."""
    import flip_evaluator
    from skimage.metrics import structural_similarity

    ref = _texture(160, 200, 15)
    test = np.clip(ref + rng(16).normal(0, 0.05, ref.shape), 0, 1)
    mask = np.zeros((160, 200), bool)
    mask[5:30, 150:190] = True  # near an edge: the box is clipped there
    r0, t0 = np.where(mask[..., None], ref, 0), np.where(mask[..., None], test, 0)
    _, smap = structural_similarity(r0, t0, channel_axis=-1, full=True, **M.SSIM_SETTINGS)
    fmap = flip_evaluator.evaluate(r0.astype(np.float32), t0.astype(np.float32), "LDR",
                                   applyMagma=False)[0][..., 0]
    assert M.masked_ssim(ref, test, mask) == pytest.approx(smap[mask].mean(), abs=1e-12)
    assert M.masked_flip(ref, test, mask) == pytest.approx(fmap[mask].mean(), abs=1e-7)


def test_metrics_refuse_an_empty_mask_and_mismatched_sizes() -> None:
    img = _texture(32, 32)
    with pytest.raises(M.MetricInputError, match="mask is empty"):
        M.masked_psnr(img, img, np.zeros((32, 32), bool))
    with pytest.raises(M.MetricInputError, match="sizes differ"):
        M.masked_psnr(img, img[:, :30], np.ones((32, 32), bool))


def test_psnr_slope_is_the_least_squares_slope_over_frame_numbers() -> None:
    frames = [3, 4, 5, 7]
    values = [30.0, 29.5, 29.0, 28.0]  # falling by 0.5 dB a frame
    assert M.slope_per_frame(frames, values) == pytest.approx(-0.5)
    assert np.isnan(M.slope_per_frame([1], [30.0]))


# ---- warping error: direction, exactness, occlusion ---------------------------------------

def _flow(h: int, w: int, u: float, v: float) -> np.ndarray:
    f = np.zeros((h, w, 2), np.float32)
    f[..., 0], f[..., 1] = u, v
    return f


def _moved(img: np.ndarray, du: int, dv: int) -> np.ndarray:
    """The next frame of ``img`` whose every surface point moved by (du right, dv down)."""
    return np.roll(img, (dv, du), axis=(0, 1))


def test_a_pattern_moved_exactly_by_its_flow_has_zero_warping_error() -> None:
    h, w = 40, 50
    now = _texture(h, w, 8)
    nxt = _moved(now, 3, -2)  # the point at p is at p + (3, -2) in the next frame
    mask = _square_mask(h, w, 10, 30)
    fwd = _flow(h, w, 3.0, -2.0)  # CONVENTIONS["motion"]: there minus here
    assert M.pair_warping_error(now, nxt, fwd, mask) == 0.0
    assert M.pair_warping_error(now, nxt, -fwd, mask) > 1e-3  # the opposite sign
    assert M.pair_warping_error(now, nxt, _flow(h, w, 0, 0), mask) > 1e-3


def test_subpixel_flow_is_exact_on_a_linear_ramp() -> None:
    h, w = 32, 32
    jj, ii = np.meshgrid(np.arange(w, dtype=np.float64), np.arange(h, dtype=np.float64))
    now = np.stack([0.01 * jj, 0.02 * ii, 0.005 * (jj + ii)], -1)
    du, dv = 0.5, 0.25  # next(p + d) = now(p): next(x) = now(x - d)
    nxt = np.stack([0.01 * (jj - du), 0.02 * (ii - dv), 0.005 * (jj - du + ii - dv)], -1)
    mask = _square_mask(h, w, 4, 28)
    assert M.pair_warping_error(now, nxt, _flow(h, w, du, dv), mask) < 1e-10
    assert M.pair_warping_error(now, nxt, _flow(h, w, -du, -dv), mask) > 1e-6


def _occluder_scene(h: int = 40, w: int = 40):
    """A wall at 4 m (whole frame, static) and, in the next frame only, a near card at
    1 m covering columns 10-19: the wall's pixels there are hidden in the next frame."""
    depth = np.full((h, w), 4.0, np.float32)
    depth_next = depth.copy()
    depth_next[:, 10:20] = 1.0
    cover = np.zeros((h, w), bool)
    cover[:, 10:20] = True
    return depth, depth_next, cover


def test_occlusion_from_depth_hides_the_covered_pixels() -> None:
    h, w = 40, 40
    depth, depth_next, cover = _occluder_scene(h, w)
    mask = np.ones((h, w), bool)
    valid = M.visible_in_next(mask, depth, depth_next, _flow(h, w, 0, 0))
    np.testing.assert_array_equal(valid, ~cover)
    # the card's own colour in the next frame does not count against the wall's pixels
    now = _texture(h, w, 9)
    nxt = now.copy()
    nxt[cover] = 1.0
    assert M.pair_warping_error(now, nxt, _flow(h, w, 0, 0), valid) == 0.0
    assert M.pair_warping_error(now, nxt, _flow(h, w, 0, 0), mask) > 1e-3


def test_occlusion_follows_the_flow_to_where_the_point_lands() -> None:
    h, w = 40, 40
    depth, depth_next, cover = _occluder_scene(h, w)
    valid = M.visible_in_next(np.ones((h, w), bool), depth, depth_next, _flow(h, w, 5, 0))
    expect = ~np.roll(cover, -5, axis=1)  # columns 5-14 land on the card
    expect[:, w - 5:] = False  # land outside the image
    np.testing.assert_array_equal(valid, expect)


def test_the_flow_round_trip_hides_an_occluder_at_the_same_depth() -> None:
    h, w = 30, 30
    depth = np.full((h, w), 3.0, np.float32)
    mask = np.ones((h, w), bool)
    back = _flow(h, w, 0, 0)
    back[5:15, 5:15] = (4.0, 0.0)  # those next-frame pixels show a surface from elsewhere
    valid = M.visible_in_next(mask, depth, depth, _flow(h, w, 0, 0), back)
    expect = np.ones((h, w), bool)
    expect[5:15, 5:15] = False
    np.testing.assert_array_equal(valid, expect)
    assert M.visible_in_next(mask, depth, depth, _flow(h, w, 0, 0)).all()  # depth alone


def test_the_warp_never_reads_the_background_of_the_next_frame() -> None:
    h, w = 30, 30
    mask = _square_mask(h, w, 10, 20)
    depth = np.where(mask, 2.0, np.inf).astype(np.float32)
    fwd = _flow(h, w, 0.5, 0.0)  # half a pixel right: the right column's taps straddle
    valid = M.visible_in_next(mask, depth, depth, fwd, mask_next=mask)
    expect = mask.copy()
    expect[:, 19] = False  # its second tap (column 20) is background in the next frame
    np.testing.assert_array_equal(valid, expect)
    on_int = M.visible_in_next(mask, depth, depth, _flow(h, w, 1.0, 0.0), mask_next=mask)
    np.testing.assert_array_equal(on_int, mask & (np.arange(w) < 19))  # 0-weight tap unread


# ---- image files ------------------------------------------------------------------------

def _write_png(path: Path, a: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if a.dtype == np.uint16 and a.ndim == 3:
        h, w, c = a.shape
        png.Writer(w, h, greyscale=False, alpha=c == 4, bitdepth=16).write(
            open(path, "wb"), a.reshape(h, w * c).tolist())
    else:
        Image.fromarray(a).save(path)


def _write_exr(path: Path, channels: dict[str, np.ndarray]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    header = {"compression": OpenEXR.ZIP_COMPRESSION, "type": OpenEXR.scanlineimage}
    OpenEXR.File(header, {k: np.ascontiguousarray(v, np.float32)
                          for k, v in channels.items()}).write(str(path))


def test_png_reading_keeps_8_and_16_bits(tmp_path: Path) -> None:
    rgb16 = rng(10).integers(0, 65536, (6, 5, 3)).astype(np.uint16)
    grey16 = rng(11).integers(0, 65536, (6, 5)).astype(np.uint16)
    rgba8 = rng(12).integers(0, 256, (6, 5, 4)).astype(np.uint8)
    for name, a in (("rgb16", rgb16), ("grey16", grey16), ("rgba8", rgba8)):
        _write_png(tmp_path / f"{name}.png", a)
        back = read_png(tmp_path / f"{name}.png")
        assert back.dtype == a.dtype
        np.testing.assert_array_equal(back, a)


def test_exr_channels_come_back_by_name(tmp_path: Path) -> None:
    mv = rng(13).normal(0, 3, (6, 5, 4)).astype(np.float32)
    _write_exr(tmp_path / "m.exr", dict(zip("RGBA", np.moveaxis(mv, -1, 0), strict=True)))
    np.testing.assert_array_equal(read_exr(tmp_path / "m.exr", ["R", "G", "B", "A"]), mv)
    with pytest.raises(ValueError, match="no channel"):
        read_exr(tmp_path / "m.exr", ["Z"])


def test_a_damaged_file_is_named(tmp_path: Path) -> None:
    (tmp_path / "0001.png").write_bytes(b"\x89PNG\r\n\x1a\n garbage")
    with pytest.raises(ValueError, match="0001.png"):
        read_png(tmp_path / "0001.png")


# ---- the command: folders, pairing, JSON, last line -----------------------------------------

H = W = 48
SPEED = 2  # pixels a frame to the right


def _shot(n: int = 5, first: int = 1, speed: float = SPEED):
    """A textured card sliding right over an empty background, lit a little brighter
    each frame: the exact renderer passes and beauty (RGB float) per frame (exact for
    a whole-pixel ``speed``)."""
    tex = _texture(H, W + 2 * n, 14)
    out = []
    for k in range(n):
        x0 = int(round(8 + speed * k))
        mask = np.zeros((H, W), bool)
        mask[12:36, x0:x0 + 20] = True
        depth = np.where(mask, 2.0, np.inf).astype(np.float32)
        motion = np.zeros((H, W, 4), np.float32)
        if k > 0:
            motion[mask, 0] = -speed
        if k < n - 1:
            motion[mask, 2] = speed
        beauty = np.zeros((H, W, 3))
        # the card's texture is fixed to it: the pixel at column x shows texel x - x0
        cols = np.arange(W) - x0
        beauty[:, :] = tex[:, np.clip(cols, 0, tex.shape[1] - 1)]
        beauty *= 0.9 + 0.02 * k  # light flicker: the reference's own warping error
        beauty[~mask] = 0
        out.append({"frame": first + k, "mask": mask, "depth": depth, "motion": motion,
                    "beauty": beauty})
    return out


def _u8(x: np.ndarray) -> np.ndarray:
    return np.round(np.clip(x, 0, 1) * 255).astype(np.uint8)


def _write_passes(folder: Path, shot: list[dict]) -> Path:
    for fr in shot:
        name = f"{fr['frame']:04d}"
        _write_png(folder / "mask" / f"{name}.png", (fr["mask"] * 255).astype(np.uint8))
        alpha = (fr["mask"] * 255).astype(np.uint8)[..., None]
        _write_png(folder / "beauty" / f"{name}.png",
                   np.concatenate([_u8(fr["beauty"]), alpha], -1))
        _write_exr(folder / "depth" / f"{name}.exr", {"Z": fr["depth"]})
        _write_exr(folder / "motion" / f"{name}.exr",
                   dict(zip("RGBA", np.moveaxis(fr["motion"], -1, 0), strict=True)))
    return folder


def _write_frames(folder: Path, images: dict[int, np.ndarray]) -> Path:
    for f, img in images.items():
        _write_png(folder / f"{f:04d}.png", _u8(img))
    return folder


def _run(capsys, *argv: str) -> tuple[int, list[str], str]:
    rc = S.main(list(argv))
    cap = capsys.readouterr()
    return rc, cap.out.strip().splitlines(), cap.err


def test_frames_equal_to_the_reference_score_perfectly(tmp_path: Path, capsys) -> None:
    shot = _shot()
    passes = _write_passes(tmp_path / "passes", shot)
    frames = _write_frames(tmp_path / "out" / "restyled",
                           {fr["frame"]: fr["beauty"] for fr in shot})
    rc, out, err = _run(capsys, "--reference", str(passes), "--frames", str(tmp_path / "out"))
    assert rc == 0, err
    psnr, ssim, flip, ratio = LAST_LINE.match(out[-1]).groups()
    assert float(psnr) == M.PSNR_CAP_DB and float(ssim) == 1.0 and float(flip) == 0.0
    assert float(ratio) == 1.0
    def strict(name: str):
        raise AssertionError(f"{name} is not JSON")

    doc = json.loads((frames / S.JSON_NAME).read_text(), parse_constant=strict)
    assert [r["frame"] for r in doc["frames"]] == [fr["frame"] for fr in shot]
    assert doc["summary"]["pairs"] == len(shot) - 1
    assert doc["summary"]["warp_reference"] > 0  # the flicker: a floor above zero
    assert doc["frames"][-1]["warp_frames"] is None  # no pair after the last frame


def test_the_frames_background_changes_no_score(tmp_path: Path, capsys) -> None:
    """A restyled frame paints its own background: outside the mask it must not count,
    in the warping error either (a sub-pixel warp would read it at the silhouette)."""
    shot = _shot(speed=1.5)
    passes = _write_passes(tmp_path / "passes", shot)
    images = {}
    for k, fr in enumerate(shot):
        img = fr["beauty"].copy()
        img[~fr["mask"]] = rng(20 + k).random(((~fr["mask"]).sum(), 3))
        images[fr["frame"]] = img
    frames = _write_frames(tmp_path / "frames", images)
    rc, out, err = _run(capsys, "--reference", str(passes), "--frames", str(frames),
                        "--json", str(tmp_path / "s.json"))
    assert rc == 0, err
    assert out[-1] == f"score psnr: {M.PSNR_CAP_DB:.2f} ssim: 1.0000 flip: 0.0000 " \
                      "warp_ratio: 1.000"


def test_the_reference_warping_error_is_the_flicker_alone(tmp_path: Path) -> None:
    """The card's texture moves exactly with the motion pass, so the reference's own
    warping error is the brightness step between frames (sign check end to end)."""
    shot = _shot()
    passes = _write_passes(tmp_path / "passes", shot)
    _write_frames(tmp_path / "frames", {fr["frame"]: fr["beauty"] for fr in shot})
    summary = S.score(passes, tmp_path / "frames")
    assert summary["pairs"] == len(shot) - 1 and summary["warp_ratio"] == 1.0
    doc = json.loads(Path(summary["json"]).read_text())
    for k, row in enumerate(doc["frames"][:-1]):
        a = M.to_unit_float(_u8(shot[k]["beauty"]))[shot[k]["mask"]]
        b = M.to_unit_float(_u8(shot[k + 1]["beauty"]))  # the same texels, one step brighter
        src = np.argwhere(shot[k]["mask"])
        b = b[src[:, 0], src[:, 1] + SPEED]
        expect = ((a.astype(np.float32) - b.astype(np.float32)) ** 2).sum(-1).mean()
        assert row["warp_reference"] == pytest.approx(float(expect), rel=1e-6)
        assert row["warp_pixels"] == shot[k]["mask"].sum()


def test_noisy_frames_score_the_known_psnr_and_flicker_more(tmp_path: Path, capsys) -> None:
    shot = _shot(n=6)
    passes = _write_passes(tmp_path / "passes", shot)
    shifts = {fr["frame"]: 2 * (k + 1) for k, fr in enumerate(shot)}  # grey levels, growing
    images = {}
    for k, fr in enumerate(shot):
        noisy = _u8(fr["beauty"]).astype(int) + shifts[fr["frame"]] * (-1) ** (k + 1)
        images[fr["frame"]] = np.clip(noisy, 0, 255).astype(np.uint8)
    folder = tmp_path / "frames"
    for f, img in images.items():
        _write_png(folder / f"{f:04d}.png", img)
    json_path = tmp_path / "report" / "s.json"
    rc, out, err = _run(capsys, "--reference", str(passes), "--frames", str(folder),
                        "--json", str(json_path))
    assert rc == 0, err
    doc = json.loads(json_path.read_text())
    expect = [20 * np.log10(255 / shifts[r["frame"]]) for r in doc["frames"]]
    assert [r["psnr"] for r in doc["frames"]] == pytest.approx(expect, abs=1e-9)
    assert doc["summary"]["psnr"] == pytest.approx(np.mean(expect), abs=1e-9)
    slope = np.polyfit([r["frame"] for r in doc["frames"]], expect, 1)[0]
    assert doc["summary"]["psnr_slope_db_per_frame"] == pytest.approx(slope) and slope < 0
    psnr, ssim, flip, ratio = LAST_LINE.match(out[-1]).groups()
    assert float(psnr) == pytest.approx(np.mean(expect), abs=0.005)
    assert float(ratio) == pytest.approx(doc["summary"]["warp_ratio"], abs=5e-4)
    assert float(ratio) > 2  # the frames' flicker (alternating shifts) exceeds the reference's
    assert 0 < float(flip) < 1 and float(ssim) < 1


def test_unmatched_frame_numbers_are_named_and_left_out(tmp_path: Path, capsys) -> None:
    shot = _shot(n=5)
    passes = _write_passes(tmp_path / "passes", shot)
    _write_frames(tmp_path / "frames", {fr["frame"]: fr["beauty"] for fr in shot[1:]}
                  | {9: shot[0]["beauty"]})
    rc, out, err = _run(capsys, "--reference", str(passes), "--frames", str(tmp_path / "frames"))
    assert rc == 0
    assert "1 frame(s) the reference has but the frames folder lacks: 1; left out" in err
    assert "1 frame(s) the frames folder has but the reference lacks: 9; left out" in err
    doc = json.loads((tmp_path / "frames" / S.JSON_NAME).read_text())
    assert [r["frame"] for r in doc["frames"]] == [2, 3, 4, 5]


def _bad(capsys, *argv: str) -> str:
    rc, out, err = _run(capsys, *argv)
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("painted-skin: error: ")
    return lines[0]


def test_bad_input_gets_one_line_and_exit_2(tmp_path: Path, capsys) -> None:
    shot = _shot(n=3)
    passes = _write_passes(tmp_path / "passes", shot)
    good = _write_frames(tmp_path / "good", {fr["frame"]: fr["beauty"] for fr in shot})

    msg = _bad(capsys, "--reference", str(tmp_path / "nope"), "--frames", str(good))
    assert "--reference" in msg and "no such folder" in msg

    _write_frames(tmp_path / "later", {f + 100: fr["beauty"] for f, fr in enumerate(shot)})
    msg = _bad(capsys, "--reference", str(passes), "--frames", str(tmp_path / "later"))
    assert "no frame number is in both" in msg and "100-102" in msg

    (tmp_path / "empty").mkdir()
    msg = _bad(capsys, "--reference", str(passes), "--frames", str(tmp_path / "empty"))
    assert "no ####.png files" in msg

    _write_frames(tmp_path / "small", {fr["frame"]: fr["beauty"][:40, :40] for fr in shot})
    msg = _bad(capsys, "--reference", str(passes), "--frames", str(tmp_path / "small"))
    assert "40x40" in msg and f"{W}x{H}" in msg and "same size" not in msg.split(";")[0]

    _write_png(passes / "mask" / "0002.png", np.zeros((H, W), np.uint8))
    msg = _bad(capsys, "--reference", str(passes), "--frames", str(good))
    assert "0002.png is empty" in msg and "--range" in msg
    assert not (good / S.JSON_NAME).exists()  # no half-written output


def test_a_passes_folder_without_motion_is_refused(tmp_path: Path, capsys) -> None:
    shot = _shot(n=3)
    passes = _write_passes(tmp_path / "passes", shot)
    frames = _write_frames(tmp_path / "frames", {fr["frame"]: fr["beauty"] for fr in shot})
    for p in (passes / "motion").iterdir():
        p.unlink()
    msg = _bad(capsys, "--reference", str(passes), "--frames", str(frames))
    assert "motion/####.exr" in msg


def test_range_limits_the_scored_frames(tmp_path: Path, capsys) -> None:
    shot = _shot(n=5)
    passes = _write_passes(tmp_path / "passes", shot)
    frames = _write_frames(tmp_path / "frames", {fr["frame"]: fr["beauty"] for fr in shot})
    _write_png(passes / "mask" / "0005.png", np.zeros((H, W), np.uint8))  # out of view
    rc, out, err = _run(capsys, "--reference", str(passes), "--frames", str(frames),
                        "--range", "2-4")
    assert rc == 0, err
    doc = json.loads((frames / S.JSON_NAME).read_text())
    assert [r["frame"] for r in doc["frames"]] == [2, 3, 4]
    assert doc["summary"]["pairs"] == 2


def test_passes_with_another_motion_convention_are_refused(tmp_path: Path, capsys) -> None:
    shot = _shot(n=3)
    passes = _write_passes(tmp_path / "passes", shot)
    frames = _write_frames(tmp_path / "frames", {fr["frame"]: fr["beauty"] for fr in shot})
    manifest = {"conventions": {"motion": "R,G = (u, v) to the next frame, v up"}}
    (passes / "manifest.json").write_text(json.dumps(manifest))
    msg = _bad(capsys, "--reference", str(passes), "--frames", str(frames))
    assert "another convention" in msg
    manifest["conventions"]["motion"] = S.CONVENTIONS["motion"]
    (passes / "manifest.json").write_text(json.dumps(manifest))
    assert _run(capsys, "--reference", str(passes), "--frames", str(frames))[0] == 0
    # folders from before the named EXR channels: the same vectors, still scored
    manifest["conventions"]["motion"] = S._MOTION_BEFORE
    (passes / "manifest.json").write_text(json.dumps(manifest))
    assert _run(capsys, "--reference", str(passes), "--frames", str(frames))[0] == 0


# ---- the real renderer's passes (the demo character walking; bpy venv only) ---------------
# The files Blender's OpenImageIO writes are read the same without bpy, and the motion pass
# moves a surface-fixed pattern (the body-part colours) the way the warp assumes.

REAL_FRAMES = range(1, 9)
MOTION = ("backward.u", "backward.v", "forward.u", "forward.v")  # the motion pass channels


@pytest.fixture(scope="module")
def real_passes(tmp_path_factory) -> Path:
    """Fast-engine passes of 8 frames of the demo walk at 96x96 (bpy venv only)."""
    bpy = pytest.importorskip("bpy")
    from conftest import demo_walk_blend
    from painted_skin.addon.blender.passes.render import PassOptions, make_passes

    folder = tmp_path_factory.mktemp("score")
    bpy.ops.wm.open_mainfile(filepath=str(demo_walk_blend(folder, frames=12)))
    out = folder / "passes"
    make_passes(bpy.context.scene, PassOptions(frames=REAL_FRAMES, width=96, height=96,
                passes=("depth", "mask", "parts", "motion")), out)
    return out


def test_the_readers_agree_with_blenders_openimageio(real_passes: Path) -> None:
    from painted_skin.addon.blender.passes.image_io import read_image

    f = f"{REAL_FRAMES[3]:04d}"
    np.testing.assert_array_equal(read_exr(real_passes / "motion" / f"{f}.exr", MOTION),
                                  read_image(real_passes / "motion" / f"{f}.exr"))
    depth = read_exr(real_passes / "depth" / f"{f}.exr", ["Z"])[..., 0]
    np.testing.assert_array_equal(depth, read_image(real_passes / "depth" / f"{f}.exr"))
    assert np.isinf(depth).any() and np.isfinite(depth).any()
    for sub in ("mask", "parts_color"):
        np.testing.assert_array_equal(read_png(real_passes / sub / f"{f}.png"),
                                      read_image(real_passes / sub / f"{f}.png"))


def test_the_motion_pass_carries_surface_colours_to_the_next_frame(real_passes: Path) -> None:
    """Part colours are fixed to the skin: warped by the pass's next-frame vectors they
    match the next frame far better than unwarped or warped the opposite way."""
    def frame(f: int) -> tuple[np.ndarray, ...]:
        return (read_png(real_passes / "parts_color" / f"{f:04d}.png"),
                read_png(real_passes / "mask" / f"{f:04d}.png") > 127,
                read_exr(real_passes / "depth" / f"{f:04d}.exr", ["Z"])[..., 0],
                read_exr(real_passes / "motion" / f"{f:04d}.exr", MOTION))

    for f in REAL_FRAMES[:-1]:
        (col, mask, depth, mv), (col1, _, depth1, mv1) = frame(f), frame(f + 1)
        fwd = mv[..., 2:4]
        assert np.abs(fwd[mask]).max() > 0.5  # the character moves on screen
        valid = M.visible_in_next(mask, depth, depth1, fwd, mv1[..., :2])
        assert 0.8 * mask.sum() < valid.sum() < mask.sum()  # some self-occlusion at most
        err = M.pair_warping_error(col, col1, fwd, valid)
        assert err < 0.4 * M.pair_warping_error(col, col1, np.zeros_like(fwd), valid)
        assert err < 0.4 * M.pair_warping_error(col, col1, -fwd, valid)


def test_score_of_the_passes_against_themselves(real_passes: Path, tmp_path: Path, capsys) -> None:
    json_path = tmp_path / "score.json"
    rc = S.main(["--reference", str(real_passes / "parts_color"), "--passes", str(real_passes),
                 "--frames", str(real_passes / "parts_color"), "--json", str(json_path)])
    out = capsys.readouterr().out.strip().splitlines()
    assert rc == 0
    assert out[-1] == f"score psnr: {M.PSNR_CAP_DB:.2f} ssim: 1.0000 flip: 0.0000 warp_ratio: " \
                      "1.000"
    doc = json.loads(json_path.read_text())
    assert [r["frame"] for r in doc["frames"]] == list(REAL_FRAMES)
    assert doc["summary"]["pairs"] == len(REAL_FRAMES) - 1
    assert doc["summary"]["warp_reference"] > 0  # part boundaries resample: the floor


def test_frames_named_by_a_farm_pattern_are_numbered(tmp_path: Path) -> None:
    """Folders written with ``shot_####`` patterns pair by frame like ``####`` ones; a
    stray numbered file of another naming is not taken for a frame."""
    from painted_skin.backend.evaluate.score import numbered

    for f in (3, 4, 10):
        (tmp_path / f"sh010_{f:04d}_v2.png").write_bytes(b"x")
    (tmp_path / "notes_1.png").write_bytes(b"x")
    (tmp_path / ".sh010_0005_v2.png.k1.tmp.png").write_bytes(b"x")
    assert {f: p.name for f, p in numbered(tmp_path, "png").items()} == {
        3: "sh010_0003_v2.png", 4: "sh010_0004_v2.png", 10: "sh010_0010_v2.png"}
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "0007.png").write_bytes(b"x")
    (plain / "shot_0008.png").write_bytes(b"x")  # a tie: the plain naming wins
    assert list(numbered(plain, "png")) == [7]


@pytest.mark.parametrize("target", ["out/restyled/0002.png", "passes/mask/0001.png",
                                    "passes/depth/0003.exr", "passes/manifest.json"])
def test_a_json_naming_an_input_is_refused_and_the_input_kept(tmp_path: Path, capsys,
                                                              target) -> None:
    shot = _shot()
    passes = _write_passes(tmp_path / "passes", shot)
    (passes / "manifest.json").write_text("{}")
    _write_frames(tmp_path / "out" / "restyled", {fr["frame"]: fr["beauty"] for fr in shot})
    victim = tmp_path / target
    before = victim.read_bytes()
    rc, _, err = _run(capsys, "--reference", str(passes), "--frames", str(tmp_path / "out"),
                      "--json", str(victim))
    assert rc == 2
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "--json" in lines[0] and "another path" in lines[0], err
    assert victim.read_bytes() == before
