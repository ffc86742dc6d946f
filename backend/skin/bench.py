"""Measured comparison of skin-model variants on synthetic renders (torch + onnxruntime).

``python -m painted_skin.backend.skin.bench --size 128 --seconds 90 --out bench.json``:
trains each variant (regressor, diffusion head, regressor without the learned
texture, regressor with the mapping losses) for the same time, reports masked
PSNR / SSIM on held-out poses against the part-mean-colour baseline, and
onnxruntime CPU ms/frame of the exported regressor at 128² and 256².
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from . import export, runtime, synthetic
from .train import TrainConfig, evaluate, part_mean_baseline, train

VARIANTS = {
    "regressor": {"model": {"head": "regressor"}},
    "diffusion (4 DDIM steps)": {"model": {"head": "diffusion"}},
    "regressor, no texture": {"model": {"use_texture": False}},
    "regressor + mapping losses": {"group_weights": {"skin": 1.0, "clothes": 1.0,
                                                     "accessory": 1.0}},
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="skin-bench")
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--frames", type=int, default=300)
    ap.add_argument("--seconds", type=float, default=90)
    ap.add_argument("--steps", type=int, default=400, help="cosine schedule length")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--out", default="skin_bench.json")
    a = ap.parse_args(argv)
    data = synthetic.dataset(a.frames, a.size, seed=3)
    held = synthetic.dataset(16, a.size, seed=99)
    rows = {"part mean colour": part_mean_baseline(data, held)}
    tmp = Path(tempfile.mkdtemp())
    for name, over in VARIANTS.items():
        cfg = TrainConfig(steps=a.steps, batch=16, crop=64, minutes=a.seconds / 60,
                          device=a.device, progress=False, **over)
        res = train(data, cfg)
        net = res.net.cpu()
        rows[name] = {**evaluate(net, res.model_cfg, held), "steps": res.report["steps"],
                      "train_s": res.report["elapsed_s"],
                      "train": evaluate(net, res.model_cfg, data[:16])}
        print(name, rows[name], flush=True)
        if name == "regressor":
            export.export_model(net, res.model_cfg, tmp / "reg", synthetic.FINGERPRINT)
    timing = {}
    for size in (128, 256):
        model = runtime.load_model(tmp / "reg", threads=2)
        passes, _ = synthetic.dataset(1, size, seed=5)[0]
        model.render(passes)
        t0 = time.perf_counter()
        for _ in range(10):
            model.render(passes)
        timing[f"{size}"] = round((time.perf_counter() - t0) * 100, 2)
    out = {"rows": rows, "onnxruntime_cpu_ms_per_frame": timing, "args": vars(a),
           "torch": torch.__version__, "np": np.__version__}
    Path(a.out).write_text(json.dumps(out, indent=2))
    print(json.dumps(out["onnxruntime_cpu_ms_per_frame"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
