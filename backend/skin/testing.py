"""Tiny skin models trained in seconds on synthetic frames (torch): for tests and benchmarks."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from . import export, synthetic
from .train import TrainConfig, TrainResult, train

TINY_MODEL: dict[str, Any] = {"tex_channels": 8, "tex_sizes": [128, 64, 32],
                              "grid_sizes": [16, 8], "unet": [16, 32]}


def tiny_config(**overrides: Any) -> TrainConfig:
    """A run of a few seconds on 2 cores: small network, 32² crops, batch 8."""
    model = {**TINY_MODEL, **overrides.pop("model", {})}
    base: dict[str, Any] = {"steps": 40, "batch": 8, "crop": 32, "progress": False,
                            "lr_texture": 1e-2, "lr_net": 2e-3, "model": model}
    return TrainConfig(**{**base, **overrides})


def train_tiny(folder: str | Path | None = None, *, temporal: bool = False, size: int = 48,
               frames: int = 24, **overrides: Any) -> tuple[TrainResult, list]:
    """Train a tiny model on synthetic frames (one shot when ``temporal``) and,
    given ``folder``, export it there. Returns (result, the training frames)."""
    data = (synthetic.shot(frames, size, seed=3) if temporal
            else synthetic.dataset(frames, size, seed=3))
    prev = [None] + list(range(frames - 1)) if temporal else None
    res = train(data, tiny_config(temporal=temporal, **overrides), previous=prev)
    if folder is not None:
        export.export_model(res.net, res.model_cfg, folder, synthetic.FINGERPRINT, res.report)
    return res, data


@contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """torch on ``n`` threads for the duration (tests: the CI machine's cores, not
    whatever torch would pick), then as it was."""
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)
