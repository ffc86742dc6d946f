"""Looks: a skin model fine-tuned on a few painted keyframes (torch).

An artist paints one or a few frames of a shot (or a diffusion pipeline does); every
other frame takes that look. Where EbSynth or few-shot patch training guess where a
painted pixel goes from the pixels themselves, a look knows it exactly: each keyframe
comes with its passes (UV, rest position, normals, light), so the base skin model is
fine-tuned on the keys and paints any frame, pose, camera or light after.

The recipe: start from the base model's weights, textures included (same character).
What changes everywhere (a recolour, a toon ramp, outlines) is learned by a few numbers
for the whole character, so it reaches surfaces no key shows: one colour transform of
the albedo pass (:meth:`SkinNet.colour_response`, a 3x3 matrix and offset); one curve
of the irradiance (:meth:`SkinNet.light_response`, :data:`LIGHT_KNOTS` knots: a cel
look's hard terminator, shown on the surfaces the keys light, reaches those they show
only in shadow); one curve of the facing ratio towards one edge colour
(:meth:`SkinNet.facing_response`, :data:`FACING_KNOTS` knots: the outlines the keys
show reach every silhouette). The curves are read over each pixel's footprint
(:data:`model.FOOTPRINT`), as Cycles' film averages a terminator or an outline that
crosses a pixel. Four more numbers scale what the base's network adds per material
(:meth:`SkinNet.shade`'s ``gates``: its change of the albedo, its residual, its gloss,
and an ambient offset), so a look that replaces the materials' response (a cel look
has no gloss and a flat fill) replaces it on surfaces no key shows. All of them learn
from the first step (the toon look on the dance: 19.4 dB with the curves waiting for
the textures, 21.2 without). The U-Net
learns at :data:`NET_RATE` of the base's rate: faster, it fits the keys in ways that
hold on the keys alone. For the first :data:`TEXTURE_FROM` of the schedule the neural
texture waits; then it learns what is local (a painted pattern) where the keys show it.
A surface no key shows keeps the base model's texture under the look's network: the
base's shading remapped by what the keys show, never a hole. The loss reads only the
pixels a key paints (the character's mask, and the key's alpha when it has one).

A look is an ordinary model folder (``config.json`` records ``look``: its name, the
base model's identity and a digest of the keys). ``--look NAME`` writes it inside a
multi-look folder instead, ``OUT/looks/NAME`` (:data:`runtime.LOOKS_DIR`): ``OUT`` is
the base model (copied there first when ``OUT`` is new) and is the look ``base``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ...addon.core.files.atomic import TMP_MARK
from ...addon.core.files.paths import files_digest
from . import features, runtime
from .train import Frame, TrainConfig, TrainError, TrainResult, calibrate_steps, train

#: The share of the schedule the neural textures stay still (see the module doc).
TEXTURE_FROM = 0.5
DEFAULT_STEPS = 100
NET_RATE = 0.2  # the fine-tune's network rate, a share of the base's
#: The fine-tune's SSIM weight (the reconstruction loss's): the one the looks were
#: measured with, not train-skin's.
LOOK_SSIM_WEIGHT = 0.2
LIGHT_KNOTS = 33  # the look's light curve: a knot every 0.05 of luminance up to 1.6
FACING_KNOTS = 21  # the look's facing curve: a knot every 0.05 of the facing ratio
KEY_ALPHA = 0.5  # a key's pixel counts where its alpha is at least this


def load_keys(folder: str | Path) -> list[Frame]:
    """The keyframes of ``folder``: ``.npz`` files (sorted by name) holding the passes
    and the painted key as ``beauty`` (H, W, 3 or 4) uint8; its alpha, when it has
    one, marks the pixels the key speaks for (``loss_mask``)."""
    files = sorted(Path(folder).glob("[!.]*.npz"))
    if not files:
        raise TrainError(f"no keyframes in {folder}: write one .npz per key (passes + beauty)")
    out: list[Frame] = []
    for f in files:
        with np.load(f, allow_pickle=False) as z:
            d = {k: z[k] for k in z.files}
        key = d.pop("beauty", None)
        if key is None or key.dtype != np.uint8 or key.ndim != 3 or key.shape[2] not in (3, 4):
            raise TrainError(f"{f}: 'beauty' must be the painted key, (H, W, 3 or 4) uint8")
        mask = np.asarray(d["mask"]) > 0
        if key.shape[:2] != mask.shape:
            raise TrainError(f"{f}: the key is {key.shape[1]}x{key.shape[0]}, its passes "
                             f"{mask.shape[1]}x{mask.shape[0]}: paint at the shot's size")
        if key.shape[2] == 4:
            mask = mask & (key[..., 3] >= KEY_ALPHA * 255)
        if not mask.any():
            raise TrainError(f"{f}: the key paints none of the character (its mask, or "
                             "its alpha, is empty): choose a frame where it is in view")
        d["loss_mask"] = mask
        out.append((d, key[..., :3]))
    return out


def base_config(base: Path) -> dict[str, Any]:
    """The base model folder's config (checked), refused when it has no torch weights."""
    cfg = runtime.read_config(base)
    if not (base / str(cfg.get("weights", ""))).is_file():
        raise TrainError(f"base model {str(base)!r} has no weights.safetensors: re-export "
                         "it with this version (train-skin writes them)")
    return cfg


def base_rates(base: Path) -> tuple[float, float]:
    """(texture, network) learning rates of the base model's own training (its report),
    else train-skin's defaults."""
    defaults = TrainConfig()
    try:
        trained = json.loads((base / runtime.REPORT).read_text()).get("train_config") or {}
    except (OSError, ValueError):
        trained = {}
    return (float(trained.get("lr_texture", defaults.lr_texture)),
            float(trained.get("lr_net", defaults.lr_net)))


def look_config(base_cfg: dict[str, Any], steps: int, seed: int = 0, device: str = "cpu",
                minutes: float | None = None, checkpoint: str | None = None,
                base: Path | None = None) -> TrainConfig:
    """The fine-tune's settings: the base model's inputs, a short schedule at
    :data:`NET_RATE` of the base's network rate (its texture's rate as it was), the
    textures still for the schedule's first part; batches of single frames (no
    previous output to learn from: a key has no painted neighbour)."""
    lr_texture, lr_net = base_rates(base) if base is not None else base_rates(Path())
    return TrainConfig(seed=seed, steps=steps, batch=16, crop=64, lr_texture=lr_texture,
                       lr_net=NET_RATE * lr_net, ssim_weight=LOOK_SSIM_WEIGHT,
                       head_weight=0.0,  # a look may move the colours and lift anywhere
                       temporal=bool(base_cfg.get("temporal")),
                       texture_from=TEXTURE_FROM, device=device, minutes=minutes,
                       checkpoint=checkpoint)


def fit_crop(cfg: TrainConfig, keys: list[Frame]) -> TrainConfig:
    """``cfg`` with its crop no larger than the smallest key (a multiple of 4)."""
    size = min(min(k[1].shape[:2]) for k in keys)
    return dataclasses.replace(cfg, crop=min(cfg.crop, size - size % 4))


def look_model_config(base_cfg: dict[str, Any]) -> dict[str, Any]:
    """The look's network: the base's, plus its own curves, colour transform and gates
    (each as the base at the start) where the base has the inputs they read."""
    from .model import net_config

    mcfg = net_config(base_cfg)
    if mcfg.get("shading"):  # the look's own light response, the base's at the start
        mcfg = {**mcfg, "light_curve": LIGHT_KNOTS, "footprint": True, "head_gates": True}
        if all(features.offset(mcfg["layout"], n) is not None
               for n in ("normal_world", "view_dir")):
            mcfg["facing_curve"] = FACING_KNOTS
        if features.offset(mcfg["layout"], "albedo") is not None:
            mcfg["colour_matrix"] = True
    return mcfg


def learn_look(keys: list[Frame], base: Path, cfg: TrainConfig,
               fingerprint: dict[str, Any], resume: bool = False) -> TrainResult:
    """Fine-tune the base model at ``base`` on ``keys`` (see the module doc)."""
    bcfg = base_config(base)
    runtime.check_fingerprint(bcfg, fingerprint, base)
    cfg = dataclasses.replace(fit_crop(cfg, keys), init_from=str(base))
    return train(keys, cfg, previous=[None] * len(keys), resume=resume,
                 fingerprint=bcfg["fingerprint"], model_cfg=look_model_config(bcfg))


def key_scores(net: Any, mcfg: dict[str, Any], keys: list[Frame]) -> dict[str, float]:
    """The look against its own keys (masked PSNR / SSIM where they paint)."""
    from .train import masked_metrics, predict

    rows = [masked_metrics(predict(net, mcfg, p), k, p["loss_mask"]) for p, k in keys]
    return {n: float(np.mean([r[n] for r in rows])) for n in rows[0]}


def prepare_out(out: Path, base: Path, look: str | None) -> Path:
    """Where the look's folder goes: ``out`` itself, or ``out/looks/NAME`` with the base
    copied to ``out`` first (atomically: a temp folder renamed) when ``out`` is new.
    An existing ``out`` must hold the same base (its weights' bytes)."""
    if look is None:
        return out
    if look == runtime.BASE_LOOK or not runtime.LOOK_NAME.fullmatch(look):
        raise TrainError(f"--look {look!r}: a name of letters, digits, - and _ (up to 64), "
                         f"not {runtime.BASE_LOOK!r} (the base model's own look)")
    if out.exists():
        runtime.read_config(out)
        if runtime.weights_digest(out) != runtime.weights_digest(base):
            raise TrainError(f"--out {out} holds another base model than --base {base}: "
                             "learn the look from the folder's own base (--base OUT)")
    elif out.resolve() != base.resolve():
        tmp = out.with_name(f".{out.name}.copy{TMP_MARK}")
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(base, tmp, ignore=shutil.ignore_patterns(runtime.LOOKS_DIR, ".*"))
        tmp.replace(out)
    return out / runtime.LOOKS_DIR / look


def main(argv: list[str] | None = None) -> int:
    """``python -m painted_skin.backend.skin.look --keys DIR --base MODEL --out DIR``."""
    ap = argparse.ArgumentParser(prog="skin-look", description=__doc__.splitlines()[0])
    ap.add_argument("--keys", required=True, help="folder of keyframe .npz (passes + the "
                    "painted key as 'beauty')")
    ap.add_argument("--base", required=True, help="the base skin-model folder")
    ap.add_argument("--out", required=True, help="the look's model folder (with --look: "
                    "the multi-look folder it joins)")
    ap.add_argument("--look", help="name of the look inside --out (the base is 'base')")
    ap.add_argument("--steps", type=int, help=f"schedule length (default {DEFAULT_STEPS}, "
                    "fewer when they do not fit --minutes)")
    ap.add_argument("--minutes", type=float, help="a time cap: the schedule shortens to fit")
    ap.add_argument("--checkpoint", help="checkpoint file (default: beside the look)")
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--fingerprint", help="JSON file: the shot's character")
    ap.add_argument("--digest", help="the keys' digest to record (default: of the .npz)")
    ap.add_argument("--report-extra", help="JSON file merged into the report")
    a = ap.parse_args(argv)
    from . import export

    try:
        base, out = Path(a.base), Path(a.out)
        keys = load_keys(a.keys)
        bcfg = base_config(base)
        fingerprint = (json.loads(Path(a.fingerprint).read_text()) if a.fingerprint
                       else bcfg["fingerprint"])
        runtime.check_fingerprint(bcfg, fingerprint, base)
        target = prepare_out(out, base, a.look)
        base_in_out = out if a.look else base  # the copy the look sits beside
        ckpt = a.checkpoint or str(target.parent / f".{target.name}.look.ckpt")
        cfg = look_config(bcfg, a.steps or DEFAULT_STEPS, a.seed, a.device, a.minutes, ckpt,
                          base)
        if a.steps is None and a.resume and Path(ckpt).is_file():
            saved = torch.load(ckpt, map_location="cpu", weights_only=False)
            cfg = dataclasses.replace(cfg, steps=saved["train_cfg"]["steps"])
        elif a.steps is None and a.minutes:
            # a cap, not a target: a longer schedule fits the keys in ways that hold on
            # the keys alone (the toon look on the dance: 24.3 dB at 100 steps, 23.1 at
            # 500), so a budget only shortens the recipe's on a slow machine
            probe = dataclasses.replace(fit_crop(cfg, keys), init_from=str(base))
            fit = calibrate_steps(keys, probe, a.minutes, previous=[None] * len(keys),
                                  model_cfg=look_model_config(bcfg))
            cfg = dataclasses.replace(cfg, steps=min(DEFAULT_STEPS, fit),
                                      fit_minutes=fit < DEFAULT_STEPS)
            print(f"look: {cfg.steps} steps (the recipe's {DEFAULT_STEPS}; {fit} fit "
                  f"{a.minutes:g} minutes here)")
        res = learn_look(keys, base, cfg, fingerprint, resume=a.resume)
    except (TrainError, runtime.ModelFolderError, OSError, ValueError) as e:
        print(f"skin-look: error: {e}", file=sys.stderr)
        return 2
    if res.interrupted:
        return 130
    fit = key_scores(res.net, res.model_cfg, keys)
    report = {**res.report, "keys": len(keys), "key_fit": fit}
    if a.report_extra:
        report.update(json.loads(Path(a.report_extra).read_text()))
    key_files = sorted(Path(a.keys).glob("[!.]*.npz"))
    record = {"name": a.look or target.name, "base": runtime.weights_digest(base_in_out),
              "keys": a.digest or files_digest(key_files), "key_frames": len(keys)}
    export.export_model(res.net.cpu(), res.model_cfg, target, bcfg["fingerprint"], report,
                        extra={"look": record, **({"pass_version": bcfg["pass_version"]}
                                                  if "pass_version" in bcfg else {})})
    Path(ckpt).unlink(missing_ok=True)
    print(f"look: keys {fit['psnr']:.2f} dB / {fit['ssim']:.3f} in {res.report['elapsed_s']:.0f} "
          f"s ({res.report['steps']} steps)")
    print(f"look folder written: {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
