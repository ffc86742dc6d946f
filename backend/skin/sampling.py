"""The diffusion head's noise schedule and few-step sampler (numpy only).

Clean-image (x0) prediction on a cosine schedule, sampled with deterministic
DDIM steps (eta 0): the same arithmetic in training (torch calls
:func:`alpha_bar` on numpy times) and serving, so an exported model samples
exactly as it was evaluated.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def alpha_bar(t: np.ndarray | float) -> np.ndarray:
    """Signal fraction at time ``t`` in [0, 1]: 1 at t = 0 (clean), 0 at t = 1 (noise)."""
    return np.clip(np.cos(np.asarray(t, np.float64) * np.pi / 2) ** 2, 0.0, 1.0)


def times(steps: int) -> np.ndarray:
    """The ``steps + 1`` times from pure noise (1) to clean (0)."""
    return np.linspace(1.0, 0.0, int(steps) + 1)


def ddim_sample(predict_x0: Callable[[np.ndarray, float], np.ndarray], noise: np.ndarray,
                steps: int) -> np.ndarray:
    """Run ``steps`` DDIM steps from ``noise`` (the image in [-1, 1] units);
    ``predict_x0(x_t, t)`` is the network. Returns the last x0 prediction."""
    x = noise.astype(np.float32)
    ts = times(steps)
    x0 = x
    for k in range(len(ts) - 1):
        ab, ab_next = float(alpha_bar(ts[k])), float(alpha_bar(ts[k + 1]))
        x0 = predict_x0(x, float(ts[k]))
        eps = (x - np.sqrt(ab) * x0) / np.sqrt(max(1.0 - ab, 1e-8))
        x = (np.sqrt(ab_next) * x0 + np.sqrt(1.0 - ab_next) * eps).astype(np.float32)
    return x0
