"""Looks: a skin model fine-tuned on a few painted keyframes (``backend.skin.look``), the
multi-look folder, and mixing looks when painting (``runtime``, the ``skin`` pipeline)."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from painted_skin.backend.pipelines import skin as skin_pipeline  # noqa: E402
from painted_skin.backend.skin import look, runtime, synthetic  # noqa: E402
from painted_skin.backend.skin.testing import torch_threads, train_tiny  # noqa: E402
from painted_skin.backend.skin.train import masked_metrics  # noqa: E402


def recolour(rgb: np.ndarray) -> np.ndarray:
    """The test's look: a red skin state (green and blue mostly gone, red lifted)."""
    tinted = rgb.astype(np.float32) * [1.0, 0.35, 0.3] + [40.0, 0.0, 0.0]
    return np.clip(tinted, 0, 255).astype(np.uint8)


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> tuple[Path, list]:
    folder = tmp_path_factory.mktemp("look") / "base"
    with torch_threads(2):
        _, frames = train_tiny(folder, steps=60)
    return folder, frames


def write_keys(folder: Path, frames: list, which: list[int], alpha: bool = False) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for i in which:
        passes, rgb = frames[i]
        key = recolour(rgb)
        if alpha:
            a = np.where(np.asarray(passes["mask"]) > 0, 255, 0).astype(np.uint8)
            key = np.dstack([key, a])
        np.savez(folder / f"{i:04d}.npz", beauty=key, **passes)
    return folder


def learn(keys: Path, base: Path, out: Path, *extra: str, steps: int = 60) -> int:
    with torch_threads(2):
        return look.main(["--keys", str(keys), "--base", str(base), "--out", str(out),
                          "--steps", str(steps), "--device", "cpu", *extra])


def mean_psnr(model: runtime.SkinModel, frames: list, target, look_option=None) -> float:
    rows = [masked_metrics(model.render(p, None, look=look_option), target(t), p["mask"])
            for p, t in frames]
    return float(np.mean([r["psnr"] for r in rows]))


def base_and_look(folder: Path, frames: list, **look_options):
    """(config, the base's network, a look's network with ``look_options`` sharing every
    base weight, its own parameters at their start, first frame's passes, its input)."""
    from painted_skin.backend.skin import features
    from painted_skin.backend.skin.model import SkinNet, net_config

    cfg = net_config(runtime.read_config(folder))
    plain, looked = SkinNet(cfg), SkinNet({**cfg, **look_options})
    base_weights = plain.state_dict()
    own = {k: v for k, v in looked.state_dict().items() if k not in base_weights}
    looked.load_state_dict({**base_weights, **own})
    passes = frames[0][0]
    x = torch.from_numpy(features.frame_features(passes, cfg["layout"], cfg["rest_bounds"])
                         )[None]
    return cfg, plain, looked, passes, x


def input_pass(cfg: dict, x: torch.Tensor):
    """A function: a pass's three channels of the network's input ``x``, by name."""
    from painted_skin.backend.skin import features

    def at(name: str) -> torch.Tensor:
        c = features.offset(cfg["layout"], name)
        return x[:, c:c + 3]

    return at


def base_heads(net, x: torch.Tensor) -> torch.Tensor:
    """The network's raw heads (before :meth:`SkinNet.shade`) for the input ``x``."""
    return net.unet(torch.cat([net.surface_features(x), x[:, 6:]], 1))


def test_a_look_learned_from_two_keys_paints_frames_it_never_saw(base, tmp_path):
    folder, frames = base
    keys = write_keys(tmp_path / "keys", frames, [0, 12], alpha=True)
    assert learn(keys, folder, tmp_path / "look", steps=30) == 0
    cfg = runtime.read_config(tmp_path / "look")
    assert cfg["look"]["base"] == runtime.weights_digest(folder)
    assert cfg["look"]["key_frames"] == 2 and cfg["look"]["keys"].startswith("blake2b:")
    assert cfg["model"]["light_curve"] == look.LIGHT_KNOTS  # the look's own light response
    assert cfg["model"]["facing_curve"] == look.FACING_KNOTS  # and its own outlines
    assert cfg["model"]["colour_matrix"] is True  # and its own colours
    assert cfg["model"]["footprint"] is True  # its curves read over each pixel's footprint
    assert cfg["model"]["head_gates"] is True  # and its own scales of the base's heads
    held = synthetic.dataset(8, 48, seed=11)  # other poses and lights than the keys'
    base_model, look_model = runtime.load_model(folder), runtime.load_model(tmp_path / "look")
    before = mean_psnr(base_model, held, recolour)
    after = mean_psnr(look_model, held, recolour)
    # the base paints the old colours; the look, the keys' colours on unseen frames
    # (measured: 14.6 -> 19.5 dB after 30 steps of this tiny model)
    assert after > before + 3.0, (before, after)


def test_a_looks_light_curve_starts_as_the_pass_and_bends_only_the_light(base):
    """A look learns one light-response curve for the whole character (a cel look's hard
    terminator reaches surfaces its keys show only in shadow); at its start the look
    paints exactly as its base, and the curve changes nothing where no light falls."""
    folder, frames = base
    cfg, plain, curved, passes, x = base_and_look(folder, frames,
                                                  light_curve=look.LIGHT_KNOTS)
    assert cfg["shading"], "the tiny base must have the shaded head"
    with torch.no_grad():
        assert torch.equal(plain(x), curved(x))
        curved.light_curve.fill_(0.4)  # every lit pixel brighter
        before, after = plain(x), curved(x)
    irr = np.asarray(passes["irradiance"]).sum(-1)
    on = np.asarray(passes["mask"]) > 0
    lit, dark = on & (irr > 0.05), on & (irr == 0)
    assert lit.any() and dark.any()
    delta = (after - before)[0].sum(0).numpy()
    assert delta[lit].mean() > 0.05
    np.testing.assert_allclose(delta[dark], 0.0, atol=1e-6)


def test_a_looks_facing_curve_starts_as_the_base_and_inks_only_grazing_surfaces(base):
    """A look learns one curve of the facing ratio for the whole character (a cel look's
    outlines reach every silhouette); at its start the look paints exactly as its base,
    and raising the grazing end of the curve inks the silhouette, not the surfaces that
    face the camera."""
    from painted_skin.backend.skin.model import EDGE_INK, pass_spread

    folder, frames = base
    _, plain, inked, passes, x = base_and_look(folder, frames, footprint=True,
                                               facing_curve=look.FACING_KNOTS)
    with torch.no_grad():
        assert torch.equal(plain(x), inked(x))
        inked.facing_curve[:8] = 1.0  # facing ratio under 0.35: all ink; 0.4 and up: none
        before, after = plain(x), inked(x)
    facing = np.abs((np.asarray(passes["normal_world"]) * np.asarray(passes["view_dir"])
                     ).sum(-1)).clip(max=1.0)
    on = np.asarray(passes["mask"]) > 0
    # where the pixel's footprint lies wholly on one side of the outline's edge
    spread = pass_spread(torch.from_numpy(facing)[None, None].float(),
                         torch.from_numpy(on)[None, None].float())[0, 0].numpy()
    grazing = on & (facing < 0.2)  # at the silhouette: the footprint spans the edge
    facing_cam = on & (facing - 3 * spread > 0.4)
    assert grazing.any() and facing_cam.any()
    to_ink = [(img[0].permute(1, 2, 0).numpy()[grazing] - EDGE_INK) for img in (before, after)]
    assert (np.abs(to_ink[1]) < 0.5 * np.abs(to_ink[0]) + 1e-4).all()  # more ink than not
    delta = (after - before)[0].abs().sum(0).numpy()
    np.testing.assert_allclose(delta[facing_cam], 0.0, atol=3e-3)


def test_curve_mean_reads_the_curve_or_its_mean_over_a_pixels_footprint():
    """A look's curves are read at the pixel (no footprint: the line through the knots,
    held at its ends) or as their mean over a Gaussian footprint (what the film averages
    where a cel terminator crosses the pixel), against numerical integration."""
    from painted_skin.backend.skin.model import curve_mean

    gen = torch.Generator().manual_seed(3)
    values = torch.randn(9, generator=gen, dtype=torch.float64)
    step = 0.1
    x = torch.linspace(-0.2, 1.1, 131, dtype=torch.float64).view(1, 1, 1, -1)
    knots = step * torch.arange(10, dtype=torch.float64)
    padded = torch.cat([values, values.new_zeros(1)])
    line = np.interp(x.flatten().numpy(), knots.numpy(), padded.numpy())
    at = curve_mean(x, None, values, step, zero_after=True)
    np.testing.assert_allclose(at.flatten().numpy(), line, atol=1e-9)

    spread = torch.full_like(x, 0.07)
    z = np.linspace(-8, 8, 4001)
    weight = np.exp(-0.5 * z * z)
    weight /= weight.sum()
    for zero_after, ys in ((True, padded), (False, values)):
        xs = x.flatten().numpy()[:, None] + 0.07 * z[None]
        kn = knots.numpy()[:len(ys)]
        integral = (np.interp(xs, kn, ys.numpy()) * weight).sum(1)
        mean = curve_mean(x, spread, values, step, zero_after=zero_after)
        np.testing.assert_allclose(mean.flatten().numpy(), integral, atol=1e-4)


def test_a_looks_terminator_is_averaged_over_the_pixel_not_read_at_its_centre(base):
    """A cel look's hard terminator that crosses a pixel paints it partly lit, as Cycles'
    film averages it: across a surface whose light falls fast, the step is spread over
    the pixels it crosses (no pixel jumps by the whole step) and the light in all is the
    film's (the curve averaged over each pixel's width); an evenly lit surface paints as
    the curve says."""
    folder, frames = base
    _, _, hard, _, _ = base_and_look(folder, frames, light_curve=look.LIGHT_KNOTS)
    _, _, soft, _, _ = base_and_look(folder, frames, light_curve=look.LIGHT_KNOTS,
                                     footprint=True)
    knots = torch.arange(look.LIGHT_KNOTS) * 1.6 / (look.LIGHT_KNOTS - 1)
    n, lo, hi = 9, 0.2, 1.2  # light falling 0.125 a pixel: the step crosses one pixel
    ramp = torch.linspace(lo, hi, n).view(1, 1, 1, n).expand(1, 3, 4, n)
    width = (hi - lo) / (n - 1)
    fine = torch.linspace(lo - width / 2, hi + width / 2, 64 * n).view(1, 1, 1, -1)
    flat = torch.full((1, 3, 4, n), 0.9)
    with torch.no_grad():
        for net in (hard, soft):
            net.light_curve.copy_(0.3 * (knots > 0.66).float() - 0.15)  # the cel step
        h = hard.light_response(ramp, torch.ones(1, 1, 4, n))[0, 0, 0]
        s = soft.light_response(ramp, torch.ones(1, 1, 4, n))[0, 0, 0]
        film = hard.light_response(fine.expand(1, 3, 1, -1))[0, 0, 0].view(n, 64).mean(1)
        torch.testing.assert_close(soft.light_response(flat, torch.ones(1, 1, 4, n)),
                                   hard.light_response(flat, torch.ones(1, 1, 4, n)))
    # the step's own part of the largest jump between neighbours (the ramp's removed)
    assert s.diff().abs().max() - width < 0.6 * (h.diff().abs().max() - width)
    assert abs(float(s.sum() - film.sum())) < 0.01, (s, film)


def test_a_looks_colour_transform_starts_as_the_base_and_moves_every_colour_alike(base):
    """A look learns one linear map of the albedo pass for the whole character (a
    recolour reaches surfaces no key shows): the identity at the start, and a map is
    exactly the base's shading of the mapped colours (the network's own input is not
    moved)."""
    from painted_skin.backend.skin.model import SkinNet

    folder, frames = base
    cfg, plain, coloured, _, x = base_and_look(folder, frames, colour_matrix=True)
    at = input_pass(cfg, x)
    with torch.no_grad():
        assert torch.equal(plain(x), coloured(x))
        coloured.colour_matrix.copy_(torch.eye(3).flip(1))  # red and blue traded
        out = base_heads(plain, x)
        swapped = SkinNet.shade(out, at("irradiance"), at("specular"), at("albedo").flip(1))
        assert not torch.allclose(plain(x), coloured(x))
        torch.testing.assert_close(coloured(x), swapped, atol=1e-6, rtol=0)


def test_a_looks_head_gates_start_as_the_base_and_can_take_back_what_it_learned(base):
    """A look learns four numbers for the whole character that scale what the base's
    network adds per material (its albedo change, residual and gloss) and offset its
    ambient: as the base at the start; closed, the look paints the materials' own
    colours (the albedo pass) lit by the passes and a flat fill, on every surface alike
    (a cel look's response, also where no key shows it)."""
    from painted_skin.backend.skin.model import SkinNet

    folder, frames = base
    cfg, plain, gated, _, x = base_and_look(folder, frames, head_gates=True)
    at = input_pass(cfg, x)
    with torch.no_grad():
        assert torch.equal(plain(x), gated(x))
        gated.head_gates.copy_(torch.tensor([0.0, 0.0, 0.0, 0.3]))
        out = base_heads(plain, x)
        flat = torch.cat([torch.zeros_like(out[:, 0:3]), out[:, 3:6],
                          torch.zeros_like(out[:, 6:9])], 1)
        lit = SkinNet.shade(flat, at("irradiance") + 0.3, None, at("albedo"))
        assert not torch.allclose(plain(x), gated(x))
        torch.testing.assert_close(gated(x), lit, atol=1e-5, rtol=0)


def test_a_looks_curves_learn_while_its_textures_wait(base, tmp_path):
    """The look's curves learn from its first step (before the network fits the keys'
    light and outlines in a way that holds on the keys alone); the textures wait."""
    from safetensors.numpy import load_file

    folder, frames = base
    keys = write_keys(tmp_path / "keys", frames, [0, 12])
    with torch_threads(2):
        bcfg = look.base_config(folder)
        cfg = dataclasses.replace(look.look_config(bcfg, steps=6, base=folder),
                                  texture_from=1.0, progress=False)
        net = look.learn_look(look.load_keys(keys), folder, cfg, bcfg["fingerprint"]).net
    learned = {k: v.numpy() for k, v in net.state_dict().items()}
    start = load_file(str(folder / "weights.safetensors"))
    for name in ("light_curve", "facing_curve", "colour_bias"):
        assert np.abs(learned[name]).max() > 1e-3, f"the {name} did not learn"
    assert np.abs(learned["head_gates"] - [1.0, 1.0, 1.0, 0.0]).max() > 1e-3
    textures = [k for k in start if k.startswith(("tex.", "grid."))]
    assert textures
    for k in textures:
        np.testing.assert_array_equal(learned[k], start[k])


def test_a_time_budget_caps_the_looks_schedule_and_never_lengthens_it(base, tmp_path,
                                                                     monkeypatch):
    """``--minutes`` (the panel's Minutes) only shortens a look's schedule on a slow
    machine: a longer one fits the keys in ways that hold on the keys alone."""
    folder, frames = base
    monkeypatch.setattr(look, "DEFAULT_STEPS", 6)  # many more fit 5 minutes here
    keys = write_keys(tmp_path / "keys", frames, [0])
    with torch_threads(2):
        assert look.main(["--keys", str(keys), "--base", str(folder), "--out",
                          str(tmp_path / "look"), "--minutes", "5", "--device", "cpu"]) == 0
    report = json.loads((tmp_path / "look" / runtime.REPORT).read_text())
    assert report["steps"] == 6


def test_looks_share_one_folder_and_mix_smoothly(base, tmp_path):
    folder, frames = base
    out = tmp_path / "character"
    assert learn(write_keys(tmp_path / "k1", frames, [3]), folder, out, "--look", "ill",
                 steps=20) == 0
    assert learn(write_keys(tmp_path / "k2", frames, [5]), folder, out, "--look", "old",
                 steps=20) == 0
    assert runtime.look_names(out) == ["base", "ill", "old"]
    # the folder's own model is the base, copied whole
    assert runtime.weights_digest(out) == runtime.weights_digest(folder)
    model = runtime.load_model(out)
    passes = frames[7][0]
    a = model.render(passes, look="ill").astype(np.float64)
    b = model.render(passes, look="old").astype(np.float64)
    assert np.abs(a - b).max() > 8  # two different looks
    half = model.render(passes, look={"ill": 1.0, "old": 1.0}).astype(np.float64)
    assert np.abs(half - (a + b) / 2).max() <= 1.0  # weights scaled to sum 1, mixed linearly
    m = np.asarray(passes["mask"]) > 0
    steps = [model.render(passes, look={"ill": 1 - w, "old": w}).astype(np.float64)
             for w in np.linspace(0, 1, 11)]
    psnr = [10 * math.log10(255 ** 2 / max(((x - y)[m] ** 2).mean(), 1e-9))
            for x, y in zip(steps, steps[1:], strict=False)]
    assert min(psnr) >= 30.0, psnr


def test_bad_looks_are_refused_with_the_fix(base, tmp_path):
    folder, frames = base
    names = ["base", "ill"]
    with pytest.raises(ValueError, match="not in this skin model.*learn-look"):
        runtime.look_weights("toon", names)
    with pytest.raises(ValueError, match="0 or more"):
        runtime.look_weights({"ill": -1}, names)
    with pytest.raises(ValueError, match="all 0"):
        runtime.look_weights({"ill": 0, "base": 0.0}, names)
    assert runtime.look_weights({"ill": 3, "base": 1}, names) == {"ill": 0.75, "base": 0.25}
    problems = skin_pipeline.check({"look": "ill"})  # the demo model has no looks
    assert problems and "not in this skin model" in problems[0]
    keys = write_keys(tmp_path / "keys", frames, [1])
    assert learn(keys, folder, tmp_path / "x", "--look", "base", steps=1) == 2
    # an --out holding another base is refused, and left as it was
    other = tmp_path / "other"
    with torch_threads(2):
        train_tiny(other, steps=2, seed=5)
    before = sorted(p.name for p in other.iterdir())
    assert learn(keys, folder, other, "--look", "ill", steps=1) == 2
    assert sorted(p.name for p in other.iterdir()) == before


def test_keys_that_paint_nothing_are_refused(base, tmp_path, capsys):
    folder, frames = base
    keys = tmp_path / "keys"
    keys.mkdir()
    passes, rgb = frames[0]
    np.savez(keys / "0001.npz", beauty=np.dstack([rgb, np.zeros(rgb.shape[:2], np.uint8)]),
             **passes)
    assert learn(keys, folder, tmp_path / "look", steps=1) == 2
    assert "paints none of the character" in capsys.readouterr().err
    assert not (tmp_path / "look").exists()


def test_a_look_changes_the_model_identity(base, tmp_path):
    """A shot resumed after a look was added is painted by other bytes: OPENED says so."""
    folder, frames = base
    import shutil

    out = tmp_path / "m"
    shutil.copytree(folder, out)
    before = skin_pipeline.model_identity(out)
    assert learn(write_keys(tmp_path / "k", frames, [2]), folder, out, "--look", "a",
                 steps=1) == 0
    assert skin_pipeline.model_identity(out) != before
    cfg = json.loads((out / "looks" / "a" / "config.json").read_text())
    assert cfg["fingerprint"] == runtime.read_config(folder)["fingerprint"]


def test_a_checkpoint_from_before_a_setting_existed_resumes(tmp_path):
    """A checkpoint written before ``texture_from`` existed resumes (the setting counts as
    its default there); one with another real setting is still refused."""
    from painted_skin.backend.skin.testing import tiny_config
    from painted_skin.backend.skin.train import TrainError, train

    data = synthetic.dataset(6, 32, seed=2)
    ckpt = tmp_path / "run.ckpt"
    cfg = tiny_config(steps=3, crop=32, checkpoint=str(ckpt))
    with torch_threads(2):
        train(data, dataclasses.replace(cfg, steps=3, minutes=None), resume=False)
        state = torch.load(ckpt, weights_only=False)
        del state["train_cfg"]["texture_from"]
        state["step"] = 1
        torch.save(state, ckpt)
        assert train(data, cfg, resume=True).report["steps"] == 3
        with pytest.raises(TrainError, match="other settings.*seed"):
            train(data, dataclasses.replace(cfg, seed=9), resume=True)
