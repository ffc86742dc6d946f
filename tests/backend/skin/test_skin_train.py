"""Training the skin model on synthetic renders: it learns, resumes exactly, saves atomically."""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from painted_skin.backend.skin import synthetic as S  # noqa: E402
from painted_skin.backend.skin import testing as X  # noqa: E402
from painted_skin.backend.skin import train as T  # noqa: E402


@pytest.fixture(autouse=True)
def _two_threads():
    with X.torch_threads(2):
        yield


def test_learns_the_texture_better_than_part_mean_colours() -> None:
    res, data = X.train_tiny(steps=80)
    held_out = S.dataset(6, 48, seed=99)  # other poses and cameras
    model = T.evaluate(res.net, res.model_cfg, held_out)
    baseline = T.part_mean_baseline(data, held_out)
    assert model["psnr"] > baseline["psnr"] + 1.5
    assert model["ssim"] > baseline["ssim"] + 0.1


def _same_weights(a, b) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for k in sa:
        assert torch.equal(sa[k], sb[k]), k


def test_ctrl_c_then_resume_gives_the_uninterrupted_weights(tmp_path) -> None:
    frames = S.shot(8, 32, seed=1)
    prev = [None] + list(range(7))
    base = {"steps": 10, "crop": 16, "batch": 4, "temporal": True}
    whole = T.train(frames, X.tiny_config(**base), previous=prev)

    ckpt = tmp_path / "run.ckpt"
    cfg = X.tiny_config(**base, checkpoint=str(ckpt), checkpoint_every=3)

    def ctrl_c(step: int, loss: float) -> None:
        if step == 6:
            os.kill(os.getpid(), signal.SIGINT)

    part = T.train(frames, cfg, previous=prev, on_step=ctrl_c)
    assert part.interrupted and part.report["steps"] == 6
    assert torch.load(ckpt, weights_only=False)["step"] == 6
    assert [p.name for p in tmp_path.iterdir()] == ["run.ckpt"]  # no temp file left
    resumed = T.train(frames, cfg, previous=prev, resume=True)
    assert not resumed.interrupted and resumed.report["steps"] == 10
    _same_weights(resumed.net, whole.net)


def test_resume_refuses_other_settings_and_a_missing_checkpoint(tmp_path) -> None:
    frames = S.dataset(4, 32, seed=1)
    ckpt = str(tmp_path / "run.ckpt")
    T.train(frames, X.tiny_config(steps=2, crop=16, batch=2, checkpoint=ckpt))
    with pytest.raises(T.TrainError, match="other settings .*seed"):
        T.train(frames, X.tiny_config(steps=2, crop=16, batch=2, checkpoint=ckpt, seed=5),
                resume=True)
    with pytest.raises(T.TrainError, match="nothing to resume"):
        T.train(frames, X.tiny_config(checkpoint=str(tmp_path / "none.ckpt")), resume=True)


def test_mapping_losses_weigh_part_groups_by_their_weight() -> None:
    from painted_skin.backend.skin.model import reconstruction_loss

    target = torch.zeros(1, 3, 4, 4)
    pred = torch.zeros(1, 3, 4, 4)
    parts = torch.full((1, 1, 4, 4), 2)  # clothes ...
    parts[..., 0, 0] = 15  # ... and one accessory pixel, wrong by 1
    pred[..., 0, 0] = 1.0
    mask = torch.ones(1, 1, 4, 4, dtype=torch.bool)
    plain = reconstruction_loss(pred, target, mask, parts, ssim_weight=0)
    grouped = reconstruction_loss(pred, target, mask, parts, ssim_weight=0,
                                  group_weights={"clothes": 1.0, "accessory": 1.0})
    assert plain.item() == pytest.approx(1 / 16)
    assert grouped.item() == pytest.approx(0.5)  # the accessory's own mean counts half


def test_previous_frames_follow_each_clip_and_restart_at_its_first_frame(tmp_path) -> None:
    from painted_skin.backend.skin.train import previous_frames

    for name in ("00_0001", "00_0002", "00_0003", "01_0001", "01_0002", "02_0005"):
        (tmp_path / f"{name}.npz").write_bytes(b"")
    (tmp_path / ".frame-abc.npz").write_bytes(b"")  # a writer's temp file: not a frame
    assert previous_frames(str(tmp_path), 6) == [None, 0, 1, None, 3, None]
    assert previous_frames(None, 3) == [None, 0, 1]  # no names: one shot


class _TickingClock:
    """A monotonic clock that moves 7 ms per reading: the curve's timing without the
    machine's speed in it (minutes round to 0.001, i.e. 60 ms)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        self.now += 0.007
        return self.now


def test_the_report_curves_held_out_psnr_against_training_minutes(monkeypatch) -> None:
    """What a longer budget buys: the held-out PSNR at the start, along the way and at
    the end; scoring it changes nothing of the training."""
    frames, held_out = S.dataset(12, 48, seed=3), S.dataset(4, 48, seed=99)
    monkeypatch.setattr(T.time, "monotonic", _TickingClock())
    res = T.train(frames, X.tiny_config(steps=30), held_out=held_out, curve_every_s=0.0)
    monkeypatch.undo()
    curve = res.report["curve"]
    assert curve[0][:2] == [0.0, 0] and curve[-1][1] == 30 and len(curve) == 31
    assert [c[0] for c in curve] == sorted(c[0] for c in curve)
    final = T.evaluate(res.net, res.model_cfg, held_out)
    assert curve[-1][2] == pytest.approx(final["psnr"], abs=1e-3)
    assert curve[-1][2] > curve[0][2] + 3.0
    _same_weights(T.train(frames, X.tiny_config(steps=30)).net, res.net)


def test_ctrl_c_stops_without_scoring_the_held_out_set_again(tmp_path) -> None:
    """Ctrl-C means now: the checkpoint is written, the held-out set is not scored
    first (the curve keeps its start; a resume goes on from there)."""
    frames, held_out = S.dataset(8, 32, seed=3), S.dataset(2, 32, seed=99)
    cfg = X.tiny_config(steps=10, crop=16, batch=4, checkpoint=str(tmp_path / "run.ckpt"))

    def ctrl_c(step: int, loss: float) -> None:
        if step == 4:
            os.kill(os.getpid(), signal.SIGINT)

    part = T.train(frames, cfg, on_step=ctrl_c, held_out=held_out, curve_every_s=1e9)
    assert part.interrupted and [c[1] for c in part.report["curve"]] == [0]
    done = T.train(frames, cfg, resume=True, held_out=held_out, curve_every_s=1e9)
    assert [c[1] for c in done.report["curve"]] == [0, 10]


@pytest.mark.parametrize("probed, fits", [(100, 200), (400, 200)])
def test_a_minutes_budget_trains_to_its_end_when_the_probe_misjudged_the_speed(
        probed: int, fits: int) -> None:
    """A probe before training guesses the speed; the schedule follows the measured one,
    so the run neither stops early (budget unused) nor is cut off at a high rate."""
    plan = T.Schedule(probed, minutes=1.0)
    step, elapsed, per_step = 0, 0.0, 60.0 / fits
    while step < plan.steps:
        step += 1
        elapsed = per_step * step + (2.0 if step > 1 else 0.0)  # a slow first step
        plan.replan(step, elapsed)
        factor = plan.factor(step)
        if elapsed >= 60.0:
            break
    assert elapsed == pytest.approx(60.0, abs=2 * per_step)
    assert factor < 0.06  # the cosine ended with the budget


def test_train_fits_its_schedule_to_the_minutes_budget(monkeypatch) -> None:
    frames = S.dataset(8, 32, seed=3)
    monkeypatch.setattr(T.time, "monotonic", _TickingClock())
    cfg = X.tiny_config(steps=4, crop=16, batch=4, minutes=0.004, fit_minutes=True)
    res = T.train(frames, cfg)
    monkeypatch.undo()
    assert res.report["steps"] > 8
    assert res.report["elapsed_s"] >= 0.004 * 60 * 0.9



def _inputs(net, frame) -> torch.Tensor:
    """(1, C, H, W): one frame's features for ``net``."""
    from painted_skin.backend.skin import features

    return torch.from_numpy(features.frame_features(
        frame[0], net.cfg["layout"], net.cfg["rest_bounds"]))[None]


def _mean_residual(net, frame) -> float:
    """The shaded head's mean |residual| (sRGB units) on one frame's character."""
    from painted_skin.backend.skin.model import RESIDUAL_RANGE

    net.train()
    with torch.no_grad():
        net(_inputs(net, frame))
        res = RESIDUAL_RANGE * torch.tanh(net._head[:, 6:9]).abs().mean(1)[0]
    net.eval()
    return float(res[torch.from_numpy(frame[0]["mask"] > 0)].mean())


def test_the_head_penalty_keeps_the_light_off_the_residual() -> None:
    """The shaded head's bounded residual is for highlights and small corrections; the
    penalty makes training carry the light through albedo x irradiance + gloss x
    specular (where a moved light moves it), and an exported network keeps nothing."""
    from painted_skin.backend.skin.testing import train_tiny

    free, frames = train_tiny(head_weight=0.0, steps=60)
    kept, _ = train_tiny(head_weight=3.0, steps=60)
    assert free.net.shading
    r_free, r_kept = _mean_residual(free.net, frames[0]), _mean_residual(kept.net, frames[0])
    assert r_kept < 0.5 * r_free, (r_kept, r_free)
    x = _inputs(kept.net, frames[0])
    kept.net.eval()
    with torch.no_grad():
        kept.net(x)  # as export and serving run it
    assert kept.net.head_penalty(torch.ones(1, 1, *x.shape[2:])).item() == 0.0


def test_detail_frames_weigh_half_the_set_and_keep_their_own_previous_frames() -> None:
    """``--detail-frames`` (the motions rendered larger, fewer a clip) are drawn about half
    as often as the main set whatever their count, and each repeat's temporal input is
    its own clip's previous frame, never one of the main set's."""
    from painted_skin.backend.skin.train import with_detail

    main = [({"i": np.full((4, 4), i)}, None) for i in range(40)]
    main_prev = [None] + list(range(39))
    detail = [({"i": np.full((8, 8), 100 + i)}, None) for i in range(10)]
    detail_prev = [None, 0, 1, None, 3, 4, None, 6, 7, 8]
    frames, prev = with_detail(main, main_prev, detail, detail_prev)
    assert frames[:40] == main and prev[:40] == main_prev
    drawn = len(frames) - 40
    assert drawn == 20  # twice ten frames: half of forty
    for i in range(40, len(frames)):
        p = prev[i]
        if p is None:
            continue
        assert p >= 40 and frames[p][0]["i"][0, 0] + 1 == frames[i][0]["i"][0, 0]
        assert (i - 40) // 10 == (p - 40) // 10  # within the same repeat
    assert with_detail(main, main_prev, [], None) == (main, main_prev)
    assert with_detail(main, None, detail, None)[1] is None


def test_the_trainer_reads_which_passes_its_frames_hold(tmp_path) -> None:
    """The add-on's record beside the frames says which passes' values they hold; the
    model folder keeps it (``pass_version``), frames without a readable record none."""
    import json

    (tmp_path / "frames").mkdir()
    (tmp_path / "frames" / T.DATASET_META).write_text(json.dumps({"version": 16,
                                                                  "pass_version": 16}))
    assert T.pass_version(tmp_path / "frames") == 16
    assert T.pass_version(tmp_path) is None  # no record
    assert T.pass_version(None) is None  # generated frames
    for damaged in ("{", "[1, 2]", '{"pass_version": "16"}', '{"pass_version": true}'):
        (tmp_path / T.DATASET_META).write_text(damaged)
        assert T.pass_version(tmp_path) is None, damaged


def test_the_texture_pyramid_grows_with_the_largest_frames_trained_on(tmp_path) -> None:
    """Frames up to 256² keep the default pyramid (256² ... 32²); detail frames of
    300² give the model a 512² level, written to its folder for the runtime."""
    import json

    from painted_skin.backend.skin.model import DEFAULTS, texture_sizes

    assert texture_sizes(128) == texture_sizes(256) == DEFAULTS["tex_sizes"]
    assert texture_sizes(512) == texture_sizes(300) == [512, *DEFAULTS["tex_sizes"]]
    for name, frames in (("main", S.dataset(2, 48, seed=1)), ("detail", S.dataset(1, 300))):
        (tmp_path / name).mkdir()
        for i, (passes, beauty) in enumerate(frames):
            np.savez(tmp_path / name / f"{i:03d}.npz", beauty=beauty, **passes)
    argv = ["--frames", str(tmp_path / "main"), "--steps", "1", "--batch", "2", "--crop", "32",
            "--device", "cpu"]
    assert T.main([*argv, "--out", str(tmp_path / "small")]) == 0
    small = json.loads((tmp_path / "small" / "config.json").read_text())
    assert small["model"]["tex_sizes"] == DEFAULTS["tex_sizes"]
    assert T.main([*argv, "--out", str(tmp_path / "large"),
                   "--detail-frames", str(tmp_path / "detail")]) == 0
    large = json.loads((tmp_path / "large" / "config.json").read_text())
    assert large["model"]["tex_sizes"] == [512, *DEFAULTS["tex_sizes"]]
