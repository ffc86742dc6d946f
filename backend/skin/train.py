"""Training the skin model by self-reconstruction of a character's renders (torch).

A dataset is any sequence of frames ``(passes dict, target RGB uint8 (H, W, 3))``.
Each step draws a batch of random crops centred on character pixels. Every
random choice of step ``s`` comes from generators seeded by ``(seed, s)``, so a
run resumed from a checkpoint draws exactly the batches the uninterrupted run
would have, and ends with the same weights. Ctrl-C (SIGINT) is noticed between
steps: the step in progress completes, a checkpoint is written (temp file +
``os.replace``), and :func:`train` returns with ``interrupted`` set.

Temporal training (``temporal=True``): each frame's input also holds the previous
frame's *target*, corrupted by noise and warped by the motion pass (dropped now
and then, as at a shot's first frame), so at inference the network copes with
its own slightly wrong previous outputs (autoregressive) instead of drifting.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ...addon.core.files.atomic import output_target, replace_atomic, temp_file_for
from . import features, sampling
from .model import DEFAULTS, SkinNet, model_config, reconstruction_loss, ssim_map, texture_sizes

Frame = tuple[dict[str, np.ndarray], np.ndarray]


class TrainError(ValueError):
    """A training run cannot start or resume; the message names the fix."""


@dataclasses.dataclass
class TrainConfig:
    """What decides a run's weights (besides the data); ``minutes``,
    ``checkpoint*`` and ``progress`` do not (a resumed run may change them)."""

    seed: int = 0
    steps: int = 2000  # the cosine schedule's length
    batch: int = 16
    crop: int = 64
    lr_texture: float = 2e-3
    lr_net: float = 5e-4
    # (1 - SSIM) against L1: SSIM scores the fine detail (a 1.5 px window) where the
    # painting's misses are. The KayKit mannequin from the embedded network, held out:
    # 0.2 reads 32.18 dB / 0.966 (train-skin's 12 minutes, 1507 steps); 1400 steps at
    # 1.0 32.33 / 0.968, at 3.0 32.35 / 0.968, at 10 32.33 / 0.968 (levelled off)
    ssim_weight: float = 3.0
    # SkinNet.head_penalty's weight: the shaded head kept on its physical reading
    head_weight: float = 0.3
    group_weights: dict[str, float] | None = None  # the mapping losses (model.PART_GROUPS)
    temporal: bool = False
    temporal_noise: float = 0.04
    temporal_drop: float = 0.25
    inputs: tuple[str, ...] = features.DEFAULT_INPUTS
    model: dict[str, Any] = dataclasses.field(default_factory=dict)  # model.DEFAULTS overrides
    init_from: str | None = None  # a model folder whose network starts this run
    # The share of the schedule the neural textures stay still (a look's fine-tune:
    # the U-Net first learns what changes everywhere, the texture then what is local).
    texture_from: float = 0.0
    device: str = "cpu"
    minutes: float | None = None
    # With ``minutes``: ``steps`` is an estimate, re-planned from the measured speed so
    # the schedule ends when the budget does.
    fit_minutes: bool = False
    checkpoint: str | None = None
    checkpoint_every: int = 200
    progress: bool = True

    def fixed(self) -> dict[str, Any]:
        """The fields a resumed run must share with the run it continues."""
        d = dataclasses.asdict(self)
        for k in ("minutes", "fit_minutes", "checkpoint", "checkpoint_every", "progress",
                  "device"):
            d.pop(k)
        d["inputs"] = list(d["inputs"])
        return d


@dataclasses.dataclass
class TrainResult:
    net: SkinNet
    model_cfg: dict[str, Any]
    report: dict[str, Any]
    interrupted: bool = False


def _crop_box(mask: np.ndarray, crop: int, rng: np.random.Generator) -> tuple[int, int]:
    h, w = mask.shape
    ys, xs = np.nonzero(mask)
    if len(ys) == 0:
        cy, cx = h // 2, w // 2
    else:
        k = int(rng.integers(len(ys)))
        cy, cx = int(ys[k]), int(xs[k])
    y0 = int(np.clip(cy - crop // 2, 0, h - crop))
    x0 = int(np.clip(cx - crop // 2, 0, w - crop))
    return y0, x0


def _previous_output(frames: Sequence[Frame], j: int | None, cfg: TrainConfig,
                     rng: np.random.Generator) -> np.ndarray | None:
    """What stands in for the previous frame's output: its target, with noise and a
    slightly wrong colour (the network must not trust it blindly); None: a shot's
    first frame (or dropped, so the network also learns to paint without it)."""
    if j is None or rng.random() < cfg.temporal_drop:
        return None
    prev = frames[j][1].astype(np.float32) / 255.0
    prev = prev + rng.normal(0.0, cfg.temporal_noise, prev.shape).astype(np.float32)
    prev = prev * rng.uniform(0.95, 1.05, 3).astype(np.float32)  # a slightly wrong colour
    return np.clip(prev, 0, 1)


#: Frames whose whole-frame input is kept between steps (the features of a frame without
#: a previous output never change): at most this many bytes of them.
FEATURE_CACHE_BYTES = 1 << 30
#: Training seconds between two points of the held-out curve (report ``curve``).
CURVE_EVERY_S = 120.0
#: The add-on's record of a folder of training frames (the passes' version, the spec).
DATASET_META = "dataset.json"


def make_batch(frames: Sequence[Frame], model_cfg: dict[str, Any], cfg: TrainConfig,
               step: int, previous: Sequence[int | None] | None,
               cache: dict[int, np.ndarray] | None = None
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(features, target, mask, parts) crops of step ``step``: a function of
    (seed, step) only. ``cache``: frame index -> its input without a previous output,
    filled as frames are met (the input is most of a step). The previous output is
    warped into the crop alone: a frame's other channels never depend on it, and the
    crop's warp is the whole frame's there (on a GPU the batch is the step's cost)."""
    rng = np.random.default_rng([cfg.seed, step])
    xs, ys, ms, ps = [], [], [], []
    lay, bounds = model_cfg["layout"], model_cfg["rest_bounds"]
    at, av = features.offset(lay, "prev_rgb"), features.offset(lay, "prev_valid")
    for _ in range(cfg.batch):
        i = int(rng.integers(len(frames)))
        passes, target = frames[i]
        j = previous[i] if previous else None
        prev = _previous_output(frames, j, cfg, rng) if cfg.temporal else None
        if cache is not None and i in cache:
            x = cache[i]
        else:
            x = features.frame_features(passes, lay, bounds)
            if cache is not None and (len(cache) + 1) * x.nbytes <= FEATURE_CACHE_BYTES:
                cache[i] = x
        # "loss_mask": the pixels a target speaks for (a painted keyframe's alpha)
        mask = np.asarray(passes.get("loss_mask", passes["mask"])) > 0
        y0, x0 = _crop_box(mask, cfg.crop, rng)
        sl = (slice(y0, y0 + cfg.crop), slice(x0, x0 + cfg.crop))
        xc = x[:, sl[0], sl[1]]
        if prev is not None and at is not None and av is not None:
            rgb, valid = features.warp_previous_output(
                prev, passes["motion"], passes["depth"], frames[j][0]["depth"],
                window=(y0, x0, cfg.crop, cfg.crop))
            xc = xc.copy()
            xc[at:at + 3] = np.moveaxis(rgb, -1, 0)
            xc[av] = valid
        xs.append(xc)
        ys.append(np.moveaxis(target[sl][..., :3], -1, 0).astype(np.float32) / 255.0)
        ms.append(mask[sl][None])
        ps.append(np.asarray(passes["parts"])[sl][None].astype(np.int64)
                  if "parts" in passes else np.zeros((1, cfg.crop, cfg.crop), np.int64))
    dev = cfg.device
    return (torch.from_numpy(np.stack(xs)).to(dev), torch.from_numpy(np.stack(ys)).to(dev),
            torch.from_numpy(np.stack(ms)).to(dev), torch.from_numpy(np.stack(ps)).to(dev))


class Schedule:
    """The cosine learning-rate schedule over ``steps`` (0.05 of the peak at its end).

    With a minutes budget to fit, ``steps`` is re-planned after every step from the
    speed measured over the last REPLAN_WINDOW steps (the first step, which pays the
    warm-up, left out): a speed probed before training is off (its steps fill caches a
    running trainer has filled; the machine's load changes), and a schedule cut off by
    the clock ends at a high rate while one that ends early leaves budget unused.
    Progress never goes back when the plan grows."""

    REPLAN_WINDOW = 50

    def __init__(self, steps: int, minutes: float | None = None) -> None:
        self.steps, self.minutes = int(steps), minutes
        self._progress = 0.0
        self._marks: list[tuple[int, float]] = []

    def factor(self, step: int) -> float:
        p = max(self._progress, min(step, self.steps) / max(self.steps, 1))
        self._progress = p
        return 0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * p))

    def replan(self, step: int, elapsed: float) -> None:
        """Fit the schedule to what is left of the budget at ``elapsed`` seconds."""
        if self.minutes is None:
            return
        self._marks = [*self._marks[-self.REPLAN_WINDOW:], (step, elapsed)]
        if len(self._marks) < 2:
            return
        (s0, e0), (s1, e1) = self._marks[0], self._marks[-1]
        per_step = (e1 - e0) / max(s1 - s0, 1)
        if per_step <= 0:
            return
        left = self.minutes * 60.0 - elapsed
        self.steps = step + max(1, int(left / per_step))


def save_checkpoint(path: str | os.PathLike, data: dict[str, Any]) -> Path:
    """``torch.save`` to a temp file beside ``path``, then ``os.replace``: a crash
    leaves the previous checkpoint whole."""
    path = output_target(path, "checkpoint")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_file_for(path)
    try:
        torch.save(data, tmp)
        replace_atomic(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


class _SigintFlag:
    """SIGINT sets a flag (the loop stops between steps) instead of raising
    inside an optimiser step; the old handler is restored on exit."""

    def __init__(self) -> None:
        self.hit = False
        self._old: Any = None

    def __enter__(self) -> _SigintFlag:
        if threading.current_thread() is threading.main_thread():
            self._old = signal.signal(signal.SIGINT, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        self.hit = True

    def __exit__(self, *exc: Any) -> None:
        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)


def _check_input(frames: Sequence[Frame], cfg: TrainConfig,
                 previous: Sequence[int | None] | None) -> None:
    if not frames:
        raise TrainError("no training frames: render the character's passes first")
    if cfg.temporal and previous is None:
        raise TrainError("temporal training needs previous= (each frame's previous frame)")
    h, w = frames[0][1].shape[:2]
    if cfg.crop > min(h, w) or cfg.crop % 4:
        raise TrainError(f"crop {cfg.crop} must be a multiple of 4 and at most the frame "
                         f"size {w}x{h}: pass a smaller --crop")


def _resume_state(ckpt: Path | None, cfg: TrainConfig) -> dict[str, Any]:
    """The checkpoint to continue from, refused when its settings are not ``cfg``'s."""
    if ckpt is None or not ckpt.is_file():
        raise TrainError(f"nothing to resume: no checkpoint at {ckpt}; drop --resume "
                         "to start a new run")
    state = torch.load(ckpt, map_location=cfg.device, weights_only=False)
    # a setting newer than the checkpoint counts as its default there
    saved = {**TrainConfig().fixed(), **state["train_cfg"]}
    if saved != cfg.fixed():
        diff = sorted(k for k in cfg.fixed() if saved.get(k) != cfg.fixed()[k])
        raise TrainError(f"checkpoint {ckpt} was trained with other settings "
                         f"({', '.join(diff)}): use the same ones or start a new run")
    return state


def train(frames: Sequence[Frame], cfg: TrainConfig, *,
          previous: Sequence[int | None] | None = None, resume: bool = False,
          on_step: Callable[[int, float], None] | None = None,
          fingerprint: dict[str, Any] | None = None,
          model_cfg: dict[str, Any] | None = None,
          held_out: Sequence[Frame] | None = None,
          curve_every_s: float = CURVE_EVERY_S) -> TrainResult:
    """Train (or with ``resume`` continue from ``cfg.checkpoint``) on ``frames``.

    ``previous[i]``: the index of frame i's previous frame in its shot (None at a
    shot's start), for ``cfg.temporal``. ``on_step(step, loss)`` is called after
    each step. Stops at ``cfg.steps``, at the ``cfg.minutes`` budget, or on
    Ctrl-C, writing the checkpoint each time (when ``cfg.checkpoint`` is set).
    ``fingerprint``: the character the frames show (``cfg.init_from`` keeps its
    textures only for the same one). ``model_cfg``: the network's config when it is
    given (a look keeps its base model's), else built from ``cfg`` and the frames.
    ``held_out``: frames it never trains on, scored at the start, every
    ``curve_every_s`` seconds of training and at the end: the report's ``curve`` of
    held-out PSNR against training minutes (what a longer budget would buy); the
    scoring is not counted in the minutes."""
    from tqdm.auto import tqdm

    _check_input(frames, cfg, previous)
    ckpt = Path(cfg.checkpoint) if cfg.checkpoint else None
    state = _resume_state(ckpt, cfg) if resume else None
    lay = features.layout(cfg.inputs, cfg.temporal)
    mcfg = state["model_cfg"] if state else model_cfg or model_config(
        lay, features.rest_bounds([f[0] for f in frames]), **cfg.model)
    torch.manual_seed(cfg.seed)
    net = SkinNet(mcfg)
    if cfg.init_from and not state:
        init_from_model(net, cfg.init_from, fingerprint)
    net = net.to(cfg.device)
    opt = torch.optim.AdamW(net.param_groups(cfg.lr_texture, cfg.lr_net))
    plan = Schedule(cfg.steps, cfg.minutes if cfg.fit_minutes else None)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, plan.factor)
    step, losses, elapsed, curve = 0, [], 0.0, []
    scored_at = [0.0]  # unrounded seconds of the last curve point: the curve rounds minutes
    if state:
        net.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        sched.load_state_dict(state["sched"])
        step, losses, elapsed = state["step"], list(state["losses"]), float(state["elapsed_s"])
        curve = list(state.get("curve", []))
        plan.steps = int(state.get("plan_steps", plan.steps))
        scored_at[0] = curve[-1][0] * 60.0 if curve else 0.0

    def checkpoint() -> None:
        if ckpt is not None:
            save_checkpoint(ckpt, {"step": step, "model": net.state_dict(),
                                   "opt": opt.state_dict(), "sched": sched.state_dict(),
                                   "model_cfg": mcfg, "train_cfg": cfg.fixed(),
                                   "losses": losses, "elapsed_s": elapsed, "curve": curve,
                                   "plan_steps": plan.steps})

    def score_held_out() -> float:
        """One point of the curve; returns the seconds it took (off the clock)."""
        s0 = time.monotonic()
        net.eval()
        with torch.no_grad():
            row = held_out_rows(net, mcfg, (), held_out, baseline=False)["model"]
        net.train()
        curve.append([round(elapsed / 60.0, 3), step, round(row["psnr"], 3),
                      round(row["ssim"], 4)])
        scored_at[0] = elapsed
        return time.monotonic() - s0

    diffusion = mcfg["head"] == "diffusion"
    # what waits for texture_from: the neural textures (what is local), so what changes
    # everywhere is learned first by the network and a look's curves and colour
    # transform, which learn from the start
    textures = [p for g in net.param_groups(0.0, 0.0) if g.get("waits") for p in g["params"]]
    cache: dict[int, np.ndarray] = {}
    t0 = time.monotonic() - elapsed
    if held_out and not curve:
        t0 += score_held_out()
    interrupted = False
    bar = tqdm(total=plan.steps, initial=step, disable=not cfg.progress, desc="skin",
               unit="step", dynamic_ncols=True)
    net.train()
    with _SigintFlag() as sigint, bar:
        while step < plan.steps:
            x, y, m, parts = make_batch(frames, mcfg, cfg, step, previous, cache)
            if diffusion:
                pred = _diffusion_forward(net, x, y, cfg.seed, step)
            else:
                pred = net(x)
            loss = reconstruction_loss(pred, y, m, parts, cfg.ssim_weight, cfg.group_weights)
            if cfg.head_weight and not diffusion:
                loss = loss + cfg.head_weight * net.head_penalty(m)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if step < cfg.texture_from * plan.steps:
                for p in textures:  # no gradient: AdamW leaves the parameter as it is
                    p.grad = None
            opt.step()
            sched.step()
            step += 1
            losses.append(loss.item())
            elapsed = time.monotonic() - t0
            plan.replan(step, elapsed)
            if bar.total != plan.steps:
                bar.total = plan.steps
            bar.update(1)
            bar.set_postfix(loss=f"{losses[-1]:.4f}")
            if on_step is not None:
                on_step(step, losses[-1])
            if sigint.hit:
                interrupted = True
                break
            if cfg.minutes is not None and elapsed >= cfg.minutes * 60.0:
                break
            if held_out and elapsed - scored_at[0] >= curve_every_s:
                t0 += score_held_out()
            if ckpt is not None and cfg.checkpoint_every and step % cfg.checkpoint_every == 0:
                checkpoint()
    if held_out and not interrupted and curve[-1][1] != step:
        score_held_out()  # not on Ctrl-C: the user asked to stop now
    checkpoint()
    if interrupted and ckpt is not None:
        print(f"interrupted at step {step}: checkpoint {ckpt}; --resume continues")
    report = {"steps": step, "steps_planned": plan.steps, "elapsed_s": round(elapsed, 2),
              "s_per_step": round(elapsed / max(step, 1), 4), "loss_first": losses[:1],
              "loss_last_100": float(np.mean(losses[-100:])) if losses else None,
              "losses_every_10": losses[::10], "train_config": cfg.fixed(),
              "curve": curve,
              "parameters": sum(p.numel() for p in net.parameters())}
    net.eval()
    return TrainResult(net, mcfg, report, interrupted)


def init_from_model(net: SkinNet, folder: str | os.PathLike,
                    fingerprint: dict[str, Any] | None = None) -> list[str]:
    """Start ``net`` from another skin model's weights: every tensor of the same name
    and shape is copied; the U-Net's first convolution takes its weights input by
    input (a channel the old layout lacks starts at zero, so the copy paints what the
    old model painted), and a last convolution with more outputs keeps the old ones
    (the new start at zero, whatever the head makes of that); anything else (a new
    head) keeps its fresh start. Returns the names copied. This is how a new character
    (or a new input) begins from what a trained network already knows about shading,
    instead of from noise.

    ``fingerprint``: the character being trained; when it is not the model's, the
    neural textures (laid out on that other character's UVs) start fresh."""
    from safetensors.torch import load_file

    folder = Path(folder)
    try:
        old_cfg = json.loads((folder / "config.json").read_text())
        old = load_file(str(folder / old_cfg.get("weights", "weights.safetensors")))
    except (OSError, ValueError, KeyError) as e:
        raise TrainError(f"--init-from {folder}: cannot read the model ({e}); give a "
                         "folder train-skin wrote") from None
    own = net.state_dict()
    first = "unet.down.0.0.weight"
    copied = []
    other = fingerprint is not None and old_cfg.get("fingerprint") != fingerprint
    with torch.no_grad():
        if not other and net.use_texture:
            copied += _texture_levels_by_size(own, old, net.cfg["tex_sizes"])
        for name, value in old.items():
            if name.startswith("tex.") or (other and name.startswith("grid.")):
                continue
            if name in own and own[name].shape == value.shape:
                own[name].copy_(value)
                copied.append(name)
        if first in old and first in own and own[first].shape != old[first].shape:
            tex = int(net.cfg["tex_channels"]) if net.use_texture else 0
            w_old, w_new = old[first], own[first]
            w_new[:, :tex] = w_old[:, :tex]
            w_new[:, tex:] = 0.0
            old_lay, new_lay = old_cfg["layout"][2:], net.cfg["layout"][2:]
            new_channels = {n: int(k) for n, k in new_lay}
            for n, k in old_lay:
                a, b = features.offset(old_lay, n), features.offset(new_lay, n)
                if b is not None and int(k) == new_channels[n]:
                    w_new[:, tex + b:tex + b + int(k)] = w_old[:, tex + a:tex + a + int(k)]
            copied.append(first)
        for last in ("unet.out.weight", "unet.out.bias"):
            # A head that grew (a new shading term): the old outputs keep their weights,
            # the new ones start at zero (the shaded head's gloss: 1, the reference
            # surface's highlight).
            if last in old and last in own and own[last].shape != old[last].shape \
                    and own[last].shape[1:] == old[last].shape[1:] \
                    and own[last].shape[0] > old[last].shape[0]:
                k = old[last].shape[0]
                own[last][:k] = old[last]
                own[last][k:] = 0.0
                copied.append(last)
        if net.alb_at is not None and features.offset(old_cfg["layout"], "albedo") is None:
            # The albedo outputs become a change of the new albedo pass: zero is the
            # materials' own colours, where the old outputs meant a colour.
            for last in ("unet.out.weight", "unet.out.bias"):
                own[last][0:3] = 0.0
    net.load_state_dict(own)
    return copied


def _texture_levels_by_size(own: dict[str, torch.Tensor], old: dict[str, torch.Tensor],
                            sizes: list[int]) -> list[str]:
    """Copy the old model's neural texture levels into ``own`` by their size, not their
    place in the pyramid (a pyramid grown for larger frames puts a finer level first);
    a level the old model lacks starts at zero, which adds nothing to the sum, so the
    start paints what the old model painted. Returns the names copied."""
    by_size = {int(v.shape[-1]): v for n, v in old.items() if n.startswith("tex.")}
    copied = []
    for i, size in enumerate(sizes):
        name, value = f"tex.{i}", by_size.get(int(size))
        if value is not None and own[name].shape == value.shape:
            own[name].copy_(value)
            copied.append(name)
        elif value is None and by_size:
            own[name].zero_()
    return copied


def _diffusion_forward(net: SkinNet, x: torch.Tensor, y: torch.Tensor, seed: int,
                       step: int) -> torch.Tensor:
    """The x0 prediction (as an image in [0, 1]) from a noised target at a random
    time: clean-image prediction on the cosine schedule."""
    rng = np.random.default_rng([seed, step, 1])
    t = rng.uniform(0.0, 1.0, x.shape[0])
    ab = torch.from_numpy(sampling.alpha_bar(t).astype(np.float32)).to(x).view(-1, 1, 1, 1)
    eps = torch.from_numpy(rng.standard_normal(y.shape).astype(np.float32)).to(x)
    x_t = ab.sqrt() * (2 * y - 1) + (1 - ab).sqrt() * eps
    x0 = net(x, x_t, torch.from_numpy(t.astype(np.float32)).to(x))
    return (x0 + 1) / 2


@torch.no_grad()
def predict(net: SkinNet, mcfg: dict[str, Any], passes: dict[str, np.ndarray],
            previous: tuple[np.ndarray, np.ndarray] | None = None, seed: int = 0
            ) -> np.ndarray:
    """uint8 (H, W, 3) image of one frame with the torch network (for evaluation;
    serving runs the ONNX graph with :mod:`.runtime`, the same arithmetic)."""
    x = torch.from_numpy(features.frame_features(passes, mcfg["layout"], mcfg["rest_bounds"],
                                                 previous)[None])
    dev = next(net.parameters()).device
    x = x.to(dev)
    if mcfg["head"] == "diffusion":
        noise = np.random.default_rng(seed).standard_normal((1, 3) + x.shape[2:])

        def f(x_t: np.ndarray, t: float) -> np.ndarray:
            tt = torch.full((1,), t, dtype=torch.float32, device=dev)
            return net(x, torch.from_numpy(x_t).to(dev), tt).cpu().numpy()

        out = (sampling.ddim_sample(f, noise, int(mcfg["diffusion_steps"])) + 1) / 2
    else:
        out = net(x).cpu().numpy()
    return np.clip(np.rint(np.moveaxis(out[0], 0, -1) * 255), 0, 255).astype(np.uint8)


def masked_metrics(pred: np.ndarray, target: np.ndarray, mask: np.ndarray) -> dict[str, float]:
    """PSNR (dB, floats in [0, 1]) and mean SSIM on the character's pixels."""
    m = np.asarray(mask) > 0
    a = pred[..., :3].astype(np.float32) / 255.0
    b = target[..., :3].astype(np.float32) / 255.0
    mse = float(((a - b) ** 2)[m].mean())
    ta = torch.from_numpy(np.moveaxis(np.where(m[..., None], a, b), -1, 0)[None].copy())
    tb = torch.from_numpy(np.moveaxis(b, -1, 0)[None].copy())
    s = ssim_map(ta, tb)[0].mean(0).numpy()
    return {"psnr": 10 * math.log10(1.0 / max(mse, 1e-10)), "ssim": float(s[m].mean())}


def evaluate(net: SkinNet, mcfg: dict[str, Any], frames: Sequence[Frame],
             temporal_chain: bool = False) -> dict[str, float]:
    """Mean masked PSNR / SSIM over ``frames``; with ``temporal_chain`` the frames
    are one shot, each fed the previous *output* (as at inference)."""
    rows = []
    prev_out = None
    for k, (passes, target) in enumerate(frames):
        prev = None
        if temporal_chain and prev_out is not None:
            prev = features.warp_previous_output(prev_out, passes["motion"], passes["depth"],
                                                 frames[k - 1][0]["depth"])
        out = predict(net, mcfg, passes, prev)
        prev_out = out
        rows.append(masked_metrics(out, target, passes["mask"]))
    return {k: float(np.mean([r[k] for r in rows])) for k in rows[0]}


def part_mean_baseline(train: Sequence[Frame], test: Sequence[Frame]) -> dict[str, float]:
    """Masked PSNR / SSIM of painting each part its mean training colour."""
    sums = np.zeros((features.NUM_PARTS, 3))
    counts = np.zeros(features.NUM_PARTS)
    for passes, target in train:
        m = np.asarray(passes["mask"]) > 0
        p = np.asarray(passes["parts"])[m]
        np.add.at(sums, p, target[m][:, :3].astype(np.float64))
        np.add.at(counts, p, 1)
    means = (sums / np.maximum(counts, 1)[:, None]).astype(np.uint8)
    rows = [masked_metrics(means[np.asarray(p["parts"])], t, p["mask"]) for p, t in test]
    return {k: float(np.mean([r[k] for r in rows])) for k in rows[0]}


def load_frames(folder: str | os.PathLike) -> list[Frame]:
    """Frames from a folder of ``.npz`` files (sorted by name), each holding the
    passes by name and the Cycles render as ``beauty`` (H, W, 3 or 4) uint8."""
    files = sorted(Path(folder).glob("[!.]*.npz"))  # not a writer's .frame-*.npz temp
    if not files:
        raise TrainError(f"no .npz frames in {folder}: write one per frame (passes + beauty)")
    out = []
    for f in files:
        with np.load(f, allow_pickle=False) as z:
            d = {k: z[k] for k in z.files}
        if "beauty" not in d:
            raise TrainError(f"{f} has no 'beauty' array: save the render beside the passes")
        out.append((d, d.pop("beauty")[..., :3]))
    return out


def pass_version(folder: str | os.PathLike | None) -> int | None:
    """The version of the passes' values a folder of frames holds (its ``dataset.json``,
    written by the add-on: :data:`painted_skin.wire.VALUES_VERSION` then); None when it
    does not say (frames from elsewhere, generated ones)."""
    meta = Path(folder) / DATASET_META if folder else None
    if meta is None or not meta.is_file():
        return None
    try:
        version = json.loads(meta.read_text()).get("pass_version")
    except (OSError, UnicodeDecodeError, ValueError, AttributeError):
        return None
    return version if isinstance(version, int) and not isinstance(version, bool) else None


def previous_frames(folder: str | None, count: int) -> list[int | None]:
    """Each frame's previous frame in its clip: frames are ``<clip>_<frame>.npz``
    (``skin_dataset``), and a clip's first frame has none. Without names (synthetic
    shots) the frames are one shot."""
    names = sorted(p.stem for p in Path(folder).glob("[!.]*.npz")) if folder else []
    if len(names) != count:
        return [None] + list(range(count - 1))
    out: list[int | None] = [None]
    for i in range(1, count):
        (c0, _, f0), (c1, _, f1) = names[i - 1].partition("_"), names[i].partition("_")
        same = c0 == c1 and f0.isdigit() and f1.isdigit() and int(f1) == int(f0) + 1
        out.append(i - 1 if same else None)
    return out


#: How much the detail frames weigh in the batches' draw against the main set: half.
#: Measured on the demo (1248 frames at 128², 320 at 256²), the fine-tune with them at
#: half the main set's weight lifted the 256² close-ups with the key behind from SSIM
#: 0.944 to 0.965, and the 128² held-out set from 34.00 to 34.50 dB.
DETAIL_WEIGHT = 0.5


def with_detail(frames: list[Frame], previous: list[int | None] | None,
                detail: list[Frame], detail_previous: list[int | None] | None
                ) -> tuple[list[Frame], list[int | None] | None]:
    """``frames`` and the ``detail`` frames (the same motions rendered larger, fewer a
    clip) as one set, the detail frames repeated so they weigh :data:`DETAIL_WEIGHT` of
    the main set in the uniform draw of a batch (the crop is the same size, so at the
    larger size a crop holds the fine levels of the neural texture a close-up or a
    larger frame reads: trained on the small frames alone, they were the speckled
    light of a 256² close-up). Each repeat's previous frames point into itself."""
    if not detail:
        return frames, previous
    repeat = max(1, round(DETAIL_WEIGHT * len(frames) / len(detail)))
    out, prev = list(frames), None if previous is None else list(previous)
    for _ in range(repeat):
        base = len(out)
        out += detail
        if prev is not None:
            dp = detail_previous or [None] * len(detail)
            prev += [None if p is None else p + base for p in dp]
    return out, prev


def calibrate_steps(frames: Sequence[Frame], cfg: TrainConfig, minutes: float,
                    probe: int = 4, previous: Sequence[int | None] | None = None,
                    model_cfg: dict[str, Any] | None = None) -> int:
    """How many steps fit ``minutes`` on this machine: a few timed steps of a throwaway
    run (the cosine schedule must end when the budget does, not be cut off mid-way)."""
    trial = dataclasses.replace(cfg, steps=probe + 2, minutes=None, checkpoint=None,
                                progress=False)
    stamps: list[float] = []
    n = max(1, min(len(frames), 64))
    prev = None if previous is None else [p if p is not None and p < n else None
                                          for p in previous[:n]]
    train(frames[:n], trial, previous=prev, model_cfg=model_cfg,
          on_step=lambda _s, _l: stamps.append(time.monotonic()))
    # From the end of the first step on: it pays the one-time allocations and warm-up.
    per_step = (stamps[-1] - stamps[0]) / (len(stamps) - 1)
    return max(10, int(minutes * 60.0 * 0.97 / per_step))


def held_out_rows(net: SkinNet, mcfg: dict[str, Any], train_frames: Sequence[Frame],
                  test: Sequence[Frame], baseline: bool = True
                  ) -> dict[str, dict[str, float]]:
    """The model against the part-mean baseline on frames it never saw."""
    temporal = any(n == "prev_rgb" for n, _ in mcfg["layout"])  # fed its own last output
    rows = {"model": evaluate(net, mcfg, test, temporal_chain=temporal)}
    if baseline:
        rows["part_mean"] = part_mean_baseline(train_frames, test)
    return rows


def main(argv: list[str] | None = None) -> int:
    """``python -m painted_skin.backend.skin.train --frames DIR --out MODEL_DIR``."""
    ap = argparse.ArgumentParser(prog="skin-train", description=__doc__.splitlines()[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--frames", help="folder of .npz frames (passes + beauty)")
    src.add_argument("--synthetic", type=int, metavar="N", help="N generated frames (demo)")
    ap.add_argument("--out", required=True, help="model folder to write")
    ap.add_argument("--checkpoint", help="checkpoint file (default: OUT.ckpt)")
    ap.add_argument("--resume", action="store_true", help="continue from the checkpoint")
    ap.add_argument("--steps", type=int, help="schedule length (default: what fits --minutes, "
                    "else 2000)")
    ap.add_argument("--minutes", type=float)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--crop", type=int, default=64)
    ap.add_argument("--head", choices=("regressor", "diffusion"), default="regressor")
    ap.add_argument("--no-texture", action="store_true")
    ap.add_argument("--no-albedo", action="store_true",
                    help="do not read the albedo pass (materials it cannot read: the "
                         "neural texture learns the colours)")
    ap.add_argument("--temporal", action="store_true",
                    help="feed the previous output warped by the motion vectors")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--fingerprint", help="JSON file: the character the frames show (a "
                    "model refuses other characters)")
    ap.add_argument("--detail-frames", metavar="DIR", help="folder of .npz frames of the same "
                    "motions rendered larger: trained beside --frames at half its weight "
                    "(the fine texture a close-up and a larger frame read)")
    ap.add_argument("--eval-frames", help="folder of held-out .npz frames: the report gets "
                    "the model's and the part-mean baseline's masked PSNR/SSIM on them")
    ap.add_argument("--report-extra", help="JSON file merged into the report")
    ap.add_argument("--init-from", metavar="MODEL", help="a skin model folder whose "
                    "network starts this run (what it knows of shading carries over)")
    ap.add_argument("--group-weights", help="the mapping losses: a weight per part group, "
                    "e.g. skin=2,clothes=1,accessory=1 (default: plain reconstruction)")
    a = ap.parse_args(argv)
    from . import export, synthetic

    try:
        if a.frames:
            frames = load_frames(a.frames)
            fingerprint = {"frames": str(Path(a.frames).resolve())}
        else:
            frames = synthetic.shot(a.synthetic, 128) if a.temporal else synthetic.dataset(
                a.synthetic, 128)
            fingerprint = synthetic.FINGERPRINT
        if a.fingerprint:
            fingerprint = json.loads(Path(a.fingerprint).read_text())
        test = load_frames(a.eval_frames) if a.eval_frames else []
        ckpt = a.checkpoint or f"{a.out.rstrip('/')}.ckpt"
        groups = None
        if a.group_weights:
            try:
                groups = {k: float(v) for k, v in (kv.split("=") for kv in
                                                   a.group_weights.split(","))}
            except ValueError:
                raise TrainError(f"--group-weights {a.group_weights!r}: write "
                                 "skin=2,clothes=1,accessory=1") from None
        cfg = TrainConfig(seed=a.seed, steps=a.steps or 2000, batch=a.batch, crop=a.crop,
                          group_weights=groups,
                          inputs=tuple(n for n in features.DEFAULT_INPUTS
                                       if not (a.no_albedo and n == "albedo")),
                          temporal=a.temporal, model={"head": a.head,
                                                      "use_texture": not a.no_texture},
                          device=a.device, minutes=a.minutes, checkpoint=ckpt,
                          init_from=a.init_from)
        if a.steps is None and a.resume and Path(ckpt).is_file():
            saved = torch.load(ckpt, map_location="cpu", weights_only=False)
            cfg = dataclasses.replace(cfg, steps=saved["train_cfg"]["steps"])
        prev = previous_frames(a.frames, len(frames)) if a.temporal else None
        main_count = len(frames)
        if a.detail_frames:
            detail = load_frames(a.detail_frames)
            frames, prev = with_detail(frames, prev, detail, previous_frames(
                a.detail_frames, len(detail)) if a.temporal else None)
        sizes = texture_sizes(max(max(f[1].shape[:2]) for f in frames))
        if sizes != DEFAULTS["tex_sizes"]:  # set only when grown: earlier checkpoints resume
            cfg = dataclasses.replace(cfg, model={**cfg.model, "tex_sizes": sizes})
        if a.steps is None and a.minutes and not (a.resume and Path(ckpt).is_file()):
            cfg = dataclasses.replace(cfg, steps=calibrate_steps(frames, cfg, a.minutes,
                                                                 previous=prev),
                                      fit_minutes=True)
            print(f"skin: about {cfg.steps} steps fit {a.minutes:g} minutes here (re-planned "
                  "from the measured speed as it trains)")
        res = train(frames, cfg, previous=prev, resume=a.resume, fingerprint=fingerprint,
                    held_out=test or None)
    except (TrainError, OSError, ValueError) as e:
        print(f"skin-train: error: {e}", file=sys.stderr)
        return 2
    if res.interrupted:
        return 130
    report = dict(res.report)
    if test:
        report["held_out"] = held_out_rows(res.net, res.model_cfg, frames[:main_count], test)
        m, b = report["held_out"]["model"], report["held_out"]["part_mean"]
        print(f"held-out: model {m['psnr']:.2f} dB / {m['ssim']:.3f}, part mean "
              f"{b['psnr']:.2f} dB / {b['ssim']:.3f}")
        print("held-out PSNR by training minutes: " + ", ".join(
            f"{mins:.1f} min {psnr:.2f} dB" for mins, _, psnr, _ in res.report["curve"]))
    if a.report_extra:
        report.update(json.loads(Path(a.report_extra).read_text()))
    version = pass_version(a.frames)
    export.export_model(res.net.cpu(), res.model_cfg, a.out, fingerprint, report,
                        extra=None if version is None else {"pass_version": version})
    print(f"model folder written: {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
