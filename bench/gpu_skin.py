"""The skin model's training on a GPU: ``train-skin`` and ``learn-look`` with ``--device cuda``.

Both commands render their frames in Blender, then run a backend trainer over the
rendered ``.npz`` frames. A lent GPU machine has torch with CUDA but no Blender, so the
check is cut at that seam: ``pack`` (here) copies frames that ``train-skin`` and
``bench look`` already rendered into a folder that travels with the working tree, and
``run`` (there) runs the product's own trainers on them, as the commands would:

- **train-skin**: ``python -m painted_skin.backend.skin.train`` over a new character's
  training frames, started from the embedded model (``train-skin``'s default for a user's
  character), within ``--minutes``; its report gives steps, s/step and the held-out PSNR
  against training minutes (the same figures ``train-skin`` prints);
- **learn-look**: ``python -m painted_skin.backend.skin.look`` on each look's K painted
  keys from the embedded model, ``learn-look``'s default steps as ``bench look``
  (``--look-steps`` others), timed as wall time; the look then paints every frame of
  its shot (ONNX, onnxruntime, chained as ``restyle`` chains them) and is scored on the
  non-key frames against Cycles' render of the look (:func:`bench.scoring.score`, as
  ``bench look`` scores it).

Last line::

    gpu skin: device <name> s_per_step: <x> steps: <n> held_out_psnr: <dB>
    look_train_s: <mean> look_psnr: <mean>

``--device cpu`` runs the same thing here (the same-run baseline for the same frames).

    python -m painted_skin.bench.gpu_skin pack --train CACHE/HASH --held CACHE/HASH \\
        --fingerprint MODEL/config.json --look-shot LOOKS/SHOT --out .gpudata
    python -P -m painted_skin.bench.gpu_skin run --data .gpudata --device cuda
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from .scoring import Shot, paint_model, score

ROOT = Path(__file__).resolve().parent.parent  # the repository root: the package
BASE_MODEL = ROOT / "rigs" / "skin_models" / "demo"
KEY_NAME = re.compile(r"^(\d{4})\.npz$")


class GpuSkinError(ValueError):
    """The check cannot run as asked; the message names the fix."""


# -- pack (here) ------------------------------------------------------------------------


def _clips(folder: Path) -> dict[str, list[Path]]:
    """A train-skin frame folder's frames by clip (``CC_FFFF.npz``: clip, frame)."""
    out: dict[str, list[Path]] = {}
    for p in sorted(folder.glob("*.npz")):
        out.setdefault(p.stem.split("_")[0], []).append(p)
    return out


def pack(train: Path, held: Path, fingerprint: Path, look_shot: Path, out: Path,
         keep_clips: int = 4, drop_every: int = 4) -> Path:
    """Write the check's data folder: the training frames less every ``drop_every``-th
    clip (whole clips, so each kept frame keeps its previous frame; the working tree
    travels in 64 MiB), the held-out frames, the character's fingerprint, and each
    look's keys (recompressed) with the look shot's frames and truths."""
    for p, what in ((train, "--train"), (held, "--held"), (look_shot, "--look-shot")):
        if not p.is_dir():
            raise GpuSkinError(f"{what} {p}: no such folder (give a train-skin cache folder "
                               "or a bench look shot folder)")
    cfg = json.loads(fingerprint.read_text())
    fp = cfg.get("fingerprint", cfg)
    tmp = Path(tempfile.mkdtemp(prefix=".gpudata-", dir=out.parent))
    try:
        clips = _clips(train)
        (tmp / "train").mkdir()
        for i, (_clip, files) in enumerate(sorted(clips.items())):
            if drop_every and i % drop_every == drop_every - 1:
                continue
            for f in files:
                shutil.copy2(f, tmp / "train" / f.name)
        shutil.copytree(held, tmp / "held", ignore=shutil.ignore_patterns(".*"))
        (tmp / "fingerprint.json").write_text(json.dumps(fp))
        (tmp / "shot").mkdir()
        for f in sorted((look_shot / "frames").glob("*.npz")):
            shutil.copy2(f, tmp / "shot" / f.name)
        for keys in sorted(look_shot.glob("keys_*_*")):
            dst = tmp / "looks" / keys.name
            dst.mkdir(parents=True)
            for f in sorted(keys.glob("*.npz")):
                with np.load(f) as z:
                    np.savez_compressed(dst / f.name, **{k: z[k] for k in z.files})
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


# -- run (there) ------------------------------------------------------------------------


def _trainer(module: str, args: list[str], log: Path) -> float:
    """Run a backend trainer as its command does; wall seconds. Its output goes to
    ``log``; a failure raises with the output's tail."""
    cmd = [sys.executable, "-P", "-m", f"painted_skin.backend.skin.{module}", *args]
    t0 = time.perf_counter()
    with log.open("w") as fh:
        proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL, env={**os.environ, "TQDM_DISABLE": "1"})
    seconds = time.perf_counter() - t0
    if proc.returncode:
        tail = log.read_text()[-1500:]
        raise GpuSkinError(f"{module} failed ({proc.returncode}):\n{tail}")
    return seconds


def run_train(data: Path, work: Path, device: str, minutes: float,
              batch: int | None = None) -> dict:
    """train-skin's trainer over the packed frames: its report's figures."""
    out = work / "character"
    seconds = _trainer("train", [*(["--batch", str(batch)] if batch else []),
        "--frames", str(data / "train"), "--eval-frames", str(data / "held"), "--out", str(out),
        "--fingerprint", str(data / "fingerprint.json"), "--device", device, "--seed", "0",
        "--crop", "64", "--minutes", f"{minutes:g}", "--temporal",
        "--init-from", str(BASE_MODEL)], work / "train.log")
    rep = json.loads((out / "report.json").read_text())
    held = rep["held_out"]["model"]
    return {"wall_s": round(seconds, 1), "steps": rep["steps"], "s_per_step": rep["s_per_step"],
            "train_s": rep["elapsed_s"], "frames": len(list((data / "train").glob("*.npz"))),
            "held_out_psnr": round(held["psnr"], 2), "held_out_ssim": round(held["ssim"], 4),
            "curve": rep["curve"]}


def load_shot(folder: Path) -> Shot:
    """The look shot's frames: passes, and each look's Cycles truth (``truth_<look>``)."""
    frames, passes, truth = [], {}, {}
    for p in sorted(folder.glob("*.npz")):
        f = int(p.stem)
        with np.load(p) as z:
            passes[f] = {k: z[k] for k in z.files if not k.startswith("truth_")}
            for k in z.files:
                if k.startswith("truth_"):
                    truth.setdefault(k[len("truth_"):], {})[f] = z[k]
        frames.append(f)
    if not frames:
        raise GpuSkinError(f"{folder}: no frames (run pack here first)")
    return Shot(folder.name, frames, passes, truth)


def run_looks(data: Path, work: Path, device: str, steps: int | None) -> list[dict]:
    """Each packed look learned from its keys, then scored on its shot's other frames."""
    from ..backend.skin import runtime

    shot = load_shot(data / "shot")
    rows = []
    for keys in sorted((data / "looks").glob("keys_*_*")):
        _, look, k = keys.name.split("_")
        out = work / f"look_{look}_{k}"
        seconds = _trainer("look", ["--keys", str(keys), "--base", str(BASE_MODEL), "--out",
                                    str(out), *(["--steps", str(steps)] if steps else []),
                                    "--device", device],
                           work / f"look_{look}_{k}.log")
        report = json.loads((out / runtime.REPORT).read_text())
        key_frames = sorted(int(m.group(1)) for p in keys.iterdir()
                            if (m := KEY_NAME.match(p.name)))
        outs = paint_model(runtime.load_model(out), shot)
        scored = [f for f in shot.frames if f not in key_frames]
        s = score(scored, shot.passes, shot.truth[look], outs)
        rows.append({"look": look, "k": int(k), "train_s": round(seconds, 1),
                     "steps": report.get("steps"), "s_per_step": report.get("s_per_step"),
                     "psnr": round(s["psnr"], 2), "ssim": round(s["ssim"], 4),
                     "warp_ratio": round(s["warp_ratio"], 3)})
    return rows


def device_name(device: str) -> str:
    import torch

    if device.startswith("cuda") and torch.cuda.is_available():
        return torch.cuda.get_device_name(torch.device(device))
    return f"{device} ({os.cpu_count()} CPUs, torch {torch.__version__})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="gpu_skin", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    pk = sub.add_parser("pack", help="here: the frames the check trains on, into a folder")
    pk.add_argument("--train", type=Path, required=True, help="train-skin's training frames")
    pk.add_argument("--held", type=Path, required=True, help="train-skin's held-out frames")
    pk.add_argument("--fingerprint", type=Path, required=True,
                    help="the character's model config.json (its fingerprint)")
    pk.add_argument("--look-shot", type=Path, required=True,
                    help="a bench look shot folder (frames/ with truths, keys_<look>_<K>/)")
    pk.add_argument("--out", type=Path, default=ROOT / ".gpudata")
    rn = sub.add_parser("run", help="there: train and score on the packed frames")
    rn.add_argument("--data", type=Path, default=ROOT / ".gpudata")
    rn.add_argument("--device", default="cuda")
    rn.add_argument("--minutes", type=float, default=2.0, help="train-skin's budget")
    rn.add_argument("--look-steps", type=int,
                    help="steps per look (default: learn-look's, as bench look)")
    rn.add_argument("--batch", type=int, help="train-skin's batch (the trainer's default: 16)")
    rn.add_argument("--skip", choices=("train", "looks"), action="append", default=[])
    rn.add_argument("--json", type=Path, help="write the figures here")
    a = ap.parse_args(argv)
    try:
        if a.cmd == "pack":
            out = pack(a.train, a.held, a.fingerprint, a.look_shot, a.out)
            mib = sum(p.stat().st_size for p in out.rglob("*") if p.is_file()) / 2**20
            print(f"packed {out} ({mib:.1f} MiB)")
            return 0
        if not (a.data / "train").is_dir():
            raise GpuSkinError(f"--data {a.data}: not a packed folder (run pack here first "
                               "and carry it)")
        result: dict = {"device": device_name(a.device)}
        print(f"gpu skin: {result['device']}", flush=True)
        with tempfile.TemporaryDirectory(prefix="gpu_skin-") as tmp:
            work = Path(tmp)
            try:
                if "train" not in a.skip:
                    t = result["train"] = run_train(a.data, work, a.device, a.minutes,
                                                         a.batch)
                    print(f"train-skin ({t['frames']} frames, {a.minutes:g} min budget): "
                          f"{t['steps']} steps, {t['s_per_step']:.4f} s/step, wall "
                          f"{t['wall_s']:.0f} s; held-out {t['held_out_psnr']:.2f} dB / "
                          f"{t['held_out_ssim']:.3f}", flush=True)
                    print("held-out PSNR by training minutes: " + ", ".join(
                        f"{m:.2f} min (step {s}) {p:.2f} dB" for m, s, p, _ in t["curve"]),
                        flush=True)
                if "looks" not in a.skip:
                    result["looks"] = []
                    for r in run_looks(a.data, work, a.device, a.look_steps):
                        result["looks"].append(r)
                        print(f"learn-look {r['look']:<8} K={r['k']}: {r['train_s']:6.1f} s "
                              f"({r['steps']} steps, {r['s_per_step']} s/step); "
                              f"{r['psnr']:.2f} dB / {r['ssim']:.3f}, warp "
                              f"{r['warp_ratio']:.3f}", flush=True)
            finally:
                for log in sorted(work.glob("*.log")):  # what the trainers printed
                    if a.json:
                        shutil.copy2(log, a.json.parent / f"{a.json.stem}.{log.name}")
    except GpuSkinError as e:
        print(f"gpu_skin: error: {e}", file=sys.stderr)
        return 2
    if a.json:
        a.json.write_text(json.dumps(result, indent=1))
    t, looks = result.get("train", {}), result.get("looks", [])
    print(f"gpu skin: device {result['device']} s_per_step: {t.get('s_per_step', float('nan'))}"
          f" steps: {t.get('steps', 0)} held_out_psnr: {t.get('held_out_psnr', float('nan'))}"
          f" look_train_s: {np.mean([r['train_s'] for r in looks]) if looks else float('nan'):.1f}"
          f" look_psnr: {np.mean([r['psnr'] for r in looks]) if looks else float('nan'):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
