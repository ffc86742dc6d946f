"""A range-of-motion ("ROM") take: the calibration clip every mocap session starts with.

Standing, the arms sweep through their range one key pose after another — hanging,
forward, out to the side, raised to the side, overhead, across the chest — with the
elbows bending, while the torso twists, bends and rolls and the head follows. It is a
training motion for the skin model: a character's surface must be seen lit from every
side the body can turn it to (arms raised face the key light, which walks and runs never
show). The key poses come in a seeded random order and timing, each arm its own.
"""

from __future__ import annotations

import numpy as np

from ..core.rig.transforms import normalize
from .gaits import idle_body, standing_feet
from .pose import (
    PoseBuilder,
    aim_frame,
    curl_fingers,
    hang_arms,
    ramp_between,
    slerp_matrices,
    smoothstep,
    solve_legs,
    sway_torso,
)

# Upper-arm directions of the right arm (CMU axes: x to the character's left, y up,
# z forward); the left arm mirrors x. Each key pose's forearm bends toward ``BEND``.
ARM_KEYS = np.array([
    [-0.25, -1.0, 0.15],   # hanging
    [-0.15, 0.0, 1.0],     # forward
    [-1.0, 0.0, 0.1],      # out to the side
    [-0.7, 0.7, 0.15],     # raised to the side
    [-0.15, 1.0, 0.1],     # overhead
    [0.6, -0.1, 0.8],      # across the chest
    [-0.6, 0.5, 0.6],      # raised forward
])
BEND = np.array([0.0, 0.3, 1.0])  # elbows fold forward and up
SECONDS_PER_KEY = 0.9


def _keyed(t: np.ndarray, keys: np.ndarray, times: np.ndarray) -> np.ndarray:
    """Directions (n, 3) easing from key to key at ``times`` (smoothstep, normalised)."""
    i = np.clip(np.searchsorted(times, t, side="right") - 1, 0, len(keys) - 2)
    w = smoothstep(np.clip((t - times[i]) / (times[i + 1] - times[i]), 0.0, 1.0))[:, None]
    return normalize((1.0 - w) * keys[i] + w * keys[i + 1])


def _arm(pose: PoseBuilder, side: str, t: np.ndarray, rng: np.random.Generator,
         weight: np.ndarray) -> None:
    sign = 1.0 if side == "right" else -1.0
    order = rng.permutation(len(ARM_KEYS))
    keys = ARM_KEYS[np.concatenate([[0], order[order != 0], [0]])] * [sign, 1.0, 1.0]
    times = np.cumsum(np.r_[0.0, rng.uniform(0.7, 1.1, len(keys) - 1) * SECONDS_PER_KEY])
    times *= max(float(t[-1]), 1e-3) / times[-1]  # the whole sweep fits the clip
    d_ua = _keyed(t, keys, times)
    bend = np.radians(rng.uniform(15.0, 35.0) + 50.0 * (0.5 + 0.5 * np.sin(
        2 * np.pi * rng.uniform(0.3, 0.5) * t + rng.uniform(0, 2 * np.pi))))
    side_dir = BEND * [sign, 1.0, 1.0]
    off = normalize(side_dir - np.sum(side_dir * d_ua, -1, keepdims=True) * d_ua)
    d_la = normalize(np.cos(bend)[:, None] * d_ua + np.sin(bend)[:, None] * off)
    rest = (-sign, 0.0, 0.0)
    w_ua = aim_frame(rest, (0.0, 0.0, 1.0), d_ua, d_la)
    w_la = aim_frame(rest, (0.0, 0.0, 1.0), d_la, -d_ua)
    w_sh = pose.world_rot(f"{side}Shoulder")
    ua = w_sh.swapaxes(-1, -2) @ w_ua
    la = w_ua.swapaxes(-1, -2) @ w_la
    pose.set(f"{side}UpperArm", slerp_matrices(pose.get(f"{side}UpperArm"), ua, weight))
    pose.set(f"{side}LowerArm", slerp_matrices(pose.get(f"{side}LowerArm"), la, weight))
    curl_fingers(pose, side, rng.uniform(0.0, 0.3))


def build_rom(t, fps, rng):
    n = len(t)
    dur = float(t[-1]) if n > 1 else 1.0
    pose = PoseBuilder(n)
    pose.root[:] = [0.0, 95.5, 0.0]
    idle_body(pose, t)
    phase = rng.uniform(0, 2 * np.pi, 3)
    freq = rng.uniform(0.25, 0.45, 3)
    twist = np.radians(rng.uniform(25, 45)) * np.sin(2 * np.pi * freq[0] * t + phase[0])
    bend = np.radians(rng.uniform(10, 25)) * (0.5 + 0.5 * np.sin(2 * np.pi * freq[1] * t
                                                                  + phase[1]))
    roll = np.radians(rng.uniform(8, 15)) * np.sin(2 * np.pi * freq[2] * t + phase[2])
    sway_torso(pose, twist, -bend, roll)
    zeros = np.zeros(n)
    hang_arms(pose, zeros + 0.05, zeros + 0.05, np.radians(80.0), zeros + 0.2, zeros + 0.2,
              0.2)
    ankles, feet, toes = standing_feet(n)
    solve_legs(pose, ankles, feet, toes)
    weight = ramp_between(t, 0.0, min(0.3, 0.1 * dur)) if dur > 0.5 else np.ones(n)
    for side in ("right", "left"):
        _arm(pose, side, t, rng, weight)
    return pose, None
