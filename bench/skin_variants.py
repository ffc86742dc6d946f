"""Skin-model design rows on held-out motion, at one equal time budget each.

    .venv-backend/bin/python -m painted_skin.bench.skin_variants \\
        --frames ~/.cache/painted-skin/skin-data/<train> \\
        --eval-frames ~/.cache/painted-skin/skin-data/<held-out> --minutes 5

Trains the one-step regressor, the few-step diffusion head, the regressor with the
per-part-group mapping losses and the regressor without the neural texture on the same
rendered training set (``train-skin`` prints its folders), and prints each one's masked
PSNR/SSIM on the held-out frames beside the part-mean and UV-lookup baselines.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

VARIANTS = {
    "regressor": [],
    "diffusion (4 DDIM steps)": ["--head", "diffusion"],
    "regressor + mapping losses": ["--group-weights", "skin=2,clothes=1,accessory=1"],
    "regressor without texture": ["--no-texture"],
}


def main(argv: list[str] | None = None) -> int:
    from ..backend.skin import baselines, train
    from ..backend.skin.train import load_frames, masked_metrics

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", required=True)
    ap.add_argument("--eval-frames", required=True)
    ap.add_argument("--minutes", type=float, default=5.0)
    ap.add_argument("--only", action="append", help="a variant name (repeatable)")
    ap.add_argument("--json", help="write the rows here")
    a = ap.parse_args(argv)
    rows: dict[str, dict] = {}
    train_frames, test = load_frames(a.frames), load_frames(a.eval_frames)
    for name, painter in (("part mean", baselines.PartMean(train_frames)),
                          ("UV lookup (mean colour per texel)",
                           baselines.UVLookup(train_frames))):
        vals = [masked_metrics(painter.paint(p), t, p["mask"]) for p, t in test]
        rows[name] = {k: sum(v[k] for v in vals) / len(vals) for k in ("psnr", "ssim")}
    with tempfile.TemporaryDirectory(prefix="painted-skin-variants-") as tmp:
        for name, extra in VARIANTS.items():
            if a.only and name not in a.only:
                continue
            out = Path(tmp) / str(len(rows))
            code = train.main(["--frames", a.frames, "--eval-frames", a.eval_frames,
                               "--out", str(out), "--minutes", f"{a.minutes:g}", *extra])
            if code != 0:
                print(f"{name}: training failed ({code})", file=sys.stderr)
                continue
            report = json.loads((out / "report.json").read_text())
            rows[name] = {**report["held_out"]["model"], "steps": report["steps"]}
    print(f"{'row':40s} {'PSNR dB':>8s} {'SSIM':>7s} {'steps':>6s}")
    for name, r in rows.items():
        print(f"{name:40s} {r['psnr']:8.2f} {r['ssim']:7.3f} {r.get('steps', ''):>6}")
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
