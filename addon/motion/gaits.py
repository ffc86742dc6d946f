"""The motion kinds: walk/run/turn gaits with planted feet, wave, sit and jump.

Each builder takes (t, fps, rng) and returns the pose and the feet's contact phases.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from ..core.rig.transforms import axis_angle_to_matrix, normalize
from .pose import (
    PoseBuilder,
    aim_frame,
    curl_fingers,
    gauss_smooth,
    hang_arms,
    hermite,
    leg_reach_height,
    ramp_between,
    rx,
    ry,
    rz,
    slerp_matrices,
    smoothstep,
    solve_legs,
    sway_torso,
    yaw_frame,
)
from .skeleton import ANKLE_HEIGHT, FLAT, HEEL, HEEL_VEC, SHIN, SWING, THIGH, TOE, TOE_VEC

# ----------------------------------------------------------------------------- gaits


@dataclass(frozen=True)
class _Gait:
    cycle: float  # s per full cycle (two steps)
    stride: float  # cm per cycle
    duty: float  # stance fraction
    heel_end: float  # fraction of stance rolling over the heel
    toe_start: float  # fraction of stance where the heel lifts
    under_hip: float  # fraction of stance where the ankle passes under the hip
    lift: float  # swing clearance, cm
    heel_pitch: float  # deg, toes up at heel strike
    toe_pitch: float  # deg, heel up at toe-off
    height: float  # nominal root height, cm
    bob: float  # cm; >0 highest at mid-stance (walk), <0 highest in flight (run)
    width: float  # lateral distance of each foot from the path
    arm_swing: float  # deg
    elbow: float  # deg
    lean: float  # deg
    pelvis_yaw: float  # deg
    pelvis_roll: float  # deg


WALK = _Gait(1.08, 128.0, 0.6, 0.15, 0.6, 0.375, 7.0, 15.0, 35.0, 96.0, 2.0, 8.5, 18.0,
             15.0, 4.0, 5.0, 3.0)
RUN = _Gait(0.66, 190.0, 0.36, 0.05, 0.45, 0.3, 16.0, 5.0, 40.0, 95.0, -3.0, 7.0, 35.0,
            85.0, 10.0, 8.0, 4.0)


def _jitter(g: _Gait, rng: np.random.Generator) -> _Gait:
    """Small seeded variations of one gait (same speed/stride ratio family)."""
    def j(v: float, amount: float) -> float:
        return float(v * (1.0 + amount * rng.uniform(-1, 1)))
    return replace(g, cycle=j(g.cycle, 0.05), stride=j(g.stride, 0.05),
                   arm_swing=j(g.arm_swing, 0.15), lean=j(g.lean, 0.2),
                   pelvis_yaw=j(g.pelvis_yaw, 0.2))


def _root_path(t: np.ndarray, g: _Gait, heading: Callable[[np.ndarray], np.ndarray]):
    """Ground path of the root as a function of time: P(tau) -> (m, 3), y = 0."""
    lo, hi = float(t[0]) - 3 * g.cycle, float(t[-1]) + 3 * g.cycle
    tt = np.arange(lo, hi + 1e-3, 1e-3)
    fwd, _ = yaw_frame(heading(tt))
    vel = fwd * (g.stride / g.cycle)
    px, pz = (np.concatenate([[0.0], np.cumsum(0.5 * (vel[1:, a] + vel[:-1, a]) * 1e-3)])
              for a in (0, 2))
    x0, z0 = np.interp(0.0, tt, px), np.interp(0.0, tt, pz)

    def at(tau: np.ndarray) -> np.ndarray:
        tau = np.asarray(tau, dtype=np.float64)
        return np.stack([np.interp(tau, tt, px) - x0, np.zeros_like(tau),
                         np.interp(tau, tt, pz) - z0], -1)
    return at


def _heel_pose(a: np.ndarray, yaw: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Ankle when a foot flat at ``a`` rocks on its heel by pitch ``p``."""
    return a + yaw @ HEEL_VEC + np.einsum("fij,j->fi", yaw @ rx(p), -HEEL_VEC)


def _toe_pose(a: np.ndarray, yaw: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Ankle when a foot flat at ``a`` rolls over its toe joint by pitch ``p``."""
    return a + yaw @ TOE_VEC + np.einsum("fij,j->fi", yaw @ rx(p), -TOE_VEC)


def _foot_track(t: np.ndarray, phase: float, side: float, g: _Gait, path, heading):
    """Ankle target (F, 3), foot world rotation (F, 3, 3), toe local rotation, phases."""
    c = t / g.cycle + phase
    n = np.floor(c)
    phi = c - n

    def plant(k: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        tau = (k - phase + g.duty * g.under_hip) * g.cycle
        psi = heading(tau)
        _, left = yaw_frame(psi)
        a = path(tau) + side * g.width * left
        a[:, 1] = ANKLE_HEIGHT
        return a, psi, ry(psi)

    a0, psi0, yaw0 = plant(n)
    a1, psi1, yaw1 = plant(n + 1)
    stance = phi < g.duty
    u = phi / g.duty
    hs, to = np.radians(-g.heel_pitch), np.radians(g.toe_pitch)
    heel_w = 1.0 - smoothstep(u / g.heel_end)
    toe_w = smoothstep((u - g.toe_start) / (1.0 - g.toe_start))
    p_st = hs * heel_w + to * toe_w
    ankle_st = np.where((u < g.heel_end)[:, None], _heel_pose(a0, yaw0, hs * heel_w),
                        _toe_pose(a0, yaw0, to * toe_w))
    w = np.clip((phi - g.duty) / (1.0 - g.duty), 0.0, 1.0)
    s = smoothstep(w)
    start = _toe_pose(a0, yaw0, np.full_like(w, to))
    end = _heel_pose(a1, yaw1, np.full_like(w, hs))
    ankle_sw = start + (end - start) * s[:, None]
    ankle_sw[:, 1] += g.lift * np.sin(np.pi * w) ** 1.5
    p_sw = to + (hs - to) * smoothstep(w * 1.4)
    psi_sw = psi0 + (psi1 - psi0) * s
    ankle = np.where(stance[:, None], ankle_st, ankle_sw)
    pitch = np.where(stance, p_st, p_sw)
    psi = np.where(stance, psi0, psi_sw)
    toe = np.where(stance, -to * toe_w, -to * (1.0 - smoothstep(w / 0.4)))
    phases = np.select([~stance, u < g.heel_end, u <= g.toe_start], [SWING, HEEL, FLAT], TOE)
    return ankle, ry(psi) @ rx(pitch), rx(toe), phases


def _gait_motion(t: np.ndarray, g: _Gait, heading: Callable[[np.ndarray], np.ndarray],
                 fps: float) -> tuple[PoseBuilder, dict[str, np.ndarray]]:
    pose = PoseBuilder(len(t))
    path = _root_path(t, g, heading)
    ankles, feet, toes, phases = {}, {}, {}, {}
    for side, phase, sx in (("left", 0.0, 1.0), ("right", 0.5, -1.0)):
        ankles[side], feet[side], toes[side], phases[side] = _foot_track(
            t, phase, sx, g, path, heading)
    phi_l = (t / g.cycle) % 1.0
    mid = g.duty * g.under_hip
    yaw_osc = -np.radians(g.pelvis_yaw) * np.cos(2 * np.pi * phi_l)
    roll = np.radians(g.pelvis_roll) * np.sin(2 * np.pi * (phi_l - mid + 0.25) * 2) * 0.5
    tilt = np.full_like(t, np.radians(g.lean))
    pose.set("hips", ry(heading(t) + yaw_osc) @ rx(tilt) @ rz(roll))
    pose.root[:] = path(t)
    nominal = g.height + g.bob * np.cos(2 * np.pi * 2 * (phi_l - mid))
    pose.root[:, 1] = 1e3
    limit = leg_reach_height(pose, ankles, 0.985)
    y = np.minimum(nominal, limit)
    pose.root[:, 1] = np.minimum(gauss_smooth(y, 0.03 * fps), limit)
    solve_legs(pose, ankles, feet, toes)
    sway_torso(pose, yaw_osc, tilt, roll)
    swing = np.radians(g.arm_swing)
    fwd_l = -swing * np.cos(2 * np.pi * phi_l)
    fwd_r = -fwd_l
    elbow = np.radians(g.elbow)
    hang_arms(pose, fwd_l + 0.05, fwd_r + 0.05, np.radians(78.0),
               elbow + 0.4 * np.maximum(fwd_l, 0), elbow + 0.4 * np.maximum(fwd_r, 0), 0.25)
    return pose, phases


# ----------------------------------------------------------------------------- clips


def standing_feet(n: int, psi: float = 0.0, z: float = 0.0):
    """Both feet flat under the hips."""
    ankles, feet, toes = {}, {}, {}
    _, left = yaw_frame(np.array(psi))
    for side, sx in (("left", 1.0), ("right", -1.0)):
        a = np.array([0.0, ANKLE_HEIGHT, z]) + sx * 9.5 * left
        ankles[side] = np.broadcast_to(a, (n, 3)).copy()
        feet[side] = np.broadcast_to(ry(np.array(psi)), (n, 3, 3)).copy()
        toes[side] = np.broadcast_to(np.eye(3), (n, 3, 3)).copy()
    return ankles, feet, toes


def build_walk(t, fps, rng, turn=False):
    g = _jitter(WALK, rng)
    if turn:
        total = np.radians(rng.uniform(100.0, 170.0))
        dur = float(t[-1]) if len(t) > 1 else 1.0

        def heading(tau):
            return total * ramp_between(np.asarray(tau), 0.2 * dur, 0.8 * dur)
    else:
        def heading(tau):
            return np.zeros_like(np.asarray(tau, dtype=np.float64))
    return _gait_motion(t, g, heading, fps)


def build_run(t, fps, rng):
    g = _jitter(RUN, rng)
    return _gait_motion(t, g, lambda tau: np.zeros_like(np.asarray(tau, float)), fps)


def idle_body(pose: PoseBuilder, t: np.ndarray, lean: np.ndarray | None = None) -> None:
    """Standing pelvis with a slow breathing sway."""
    sway = np.radians(1.0) * np.sin(2 * np.pi * 0.3 * t)
    tilt = np.radians(3.0) + (0.0 if lean is None else lean)
    pose.set("hips", ry(sway * 0.5) @ rx(np.broadcast_to(tilt, t.shape)) @ rz(sway))
    sway_torso(pose, sway * 0.5, np.broadcast_to(tilt, t.shape), sway)


def build_wave(t, fps, rng):
    n = len(t)
    dur = float(t[-1]) if n > 1 else 1.0
    pose = PoseBuilder(n)
    pose.root[:] = [0.0, 95.5, 0.0]
    pose.root[:, 1] += 0.4 * np.sin(2 * np.pi * 0.3 * t)
    idle_body(pose, t)
    zeros = np.zeros(n)
    hang_arms(pose, zeros + 0.05, zeros + 0.05, np.radians(80.0), zeros + 0.2, zeros + 0.2,
               0.3)
    ankles, feet, toes = standing_feet(n)
    solve_legs(pose, ankles, feet, toes)
    # Right arm: upper arm out and a little up, forearm up, forearm sways side to side.
    up = rng.uniform(0.25, 0.45)
    d_ua = normalize(np.array([-1.0, up, 0.25]))
    d_la = normalize(np.array([-0.1, 1.0, 0.15]))
    w_ua = aim_frame((-1.0, 0.0, 0.0), (0.0, 0.0, 1.0), d_ua, d_la)
    w_la = aim_frame((-1.0, 0.0, 0.0), (0.0, 0.0, 1.0), d_la, -d_ua)
    freq, amp = rng.uniform(1.8, 2.4), np.radians(rng.uniform(20.0, 30.0))
    osc = amp * np.sin(2 * np.pi * freq * t)
    w_la = axis_angle_to_matrix(np.broadcast_to([0.0, 0.0, 1.0], (n, 3)), osc) @ w_la
    w_sh = pose.world_rot("rightShoulder")
    ua_wave = w_sh.swapaxes(-1, -2) @ w_ua
    la_wave = w_ua.swapaxes(-1, -2) @ w_la
    raise_w = ramp_between(t, 0.1 * dur, 0.1 * dur + min(0.6, 0.25 * dur))
    if dur > 2.5:
        raise_w = raise_w * (1.0 - ramp_between(t, dur - 0.7, dur - 0.1))
    pose.set("rightUpperArm", slerp_matrices(pose.get("rightUpperArm"), ua_wave, raise_w))
    pose.set("rightLowerArm", slerp_matrices(pose.get("rightLowerArm"), la_wave, raise_w))
    curl_fingers(pose, "right", 0.05)
    return pose, None


def build_sit(t, fps, rng):
    n = len(t)
    dur = float(t[-1]) if n > 1 else 1.0
    k = min(1.0, dur / 2.6)
    t0 = 0.3 * k
    pose = PoseBuilder(n)
    back = rng.uniform(36.0, 42.0)
    seat = rng.uniform(54.0, 58.0)
    z = -back * ramp_between(t, t0, t0 + 1.3 * k)
    y = 96.0 + (seat - 96.0) * ramp_between(t, t0 + 0.25 * k, t0 + 1.7 * k)
    pose.root[:] = np.stack([np.zeros(n), y, z], -1)
    lean = np.radians(35.0) * np.sin(np.pi * ramp_between(t, t0, t0 + 1.9 * k)) + np.radians(
        8.0) * ramp_between(t, t0, t0 + 1.0 * k)
    idle_body(pose, t, lean)
    # Hands reach forward to balance, then rest on the thighs.
    reach = (np.radians(50.0) * np.sin(np.pi * ramp_between(t, t0, t0 + 2.0 * k))
             + np.radians(20.0) * ramp_between(t, t0 + 0.8 * k, t0 + 2.0 * k))
    elbow = np.radians(10.0) + np.radians(45.0) * ramp_between(t, t0 + 0.8 * k, t0 + 2.0 * k)
    hang_arms(pose, reach, reach, np.radians(76.0), elbow, elbow, 0.35)
    ankles, feet, toes = standing_feet(n, z=3.0)
    solve_legs(pose, ankles, feet, toes)
    return pose, None


def build_jump(t, fps, rng):
    n = len(t)
    dur = float(t[-1]) if n > 1 else 1.0
    apex = rng.uniform(28.0, 38.0)
    dist = rng.uniform(35.0, 60.0)
    g = 981.0
    ankle_to = ANKLE_HEIGHT + (_toe_pose(np.zeros((1, 3)), np.eye(3)[None], np.radians(
        [40.0]))[0, 1])
    h_to = ankle_to + 0.97 * (THIGH + SHIN) + 7.0
    land_pitch = np.radians(20.0)
    ankle_land_y = ANKLE_HEIGHT + _toe_pose(np.zeros((1, 3)), np.eye(3)[None],
                                            np.array([land_pitch]))[0, 1]
    h_land = ankle_land_y + 0.97 * (THIGH + SHIN) + 7.0
    v0 = np.sqrt(2 * g * apex)
    t_fl = (v0 + np.sqrt(v0**2 + 2 * g * (h_to - h_land))) / g
    total = 0.3 + 0.5 + 0.25 + t_fl + 0.08 + 0.3 + 0.5
    k = min(1.0, dur / total)  # short clips play the jump faster
    t_c0 = 0.3 * k + max(0.0, (dur - total) / 2)
    t_p0 = t_c0 + 0.5 * k
    t_to = t_p0 + 0.25 * k
    t_ld = t_to + t_fl * k
    t_fl_end = t_ld + 0.08 * k
    t_ab = t_fl_end + 0.3 * k
    t_end = t_ab + 0.5 * k
    gk, v0k = g / k**2, v0 / k
    h0, h_crouch, h_absorb = 96.0, 72.0, 78.0
    y = np.full(n, h0)
    y = np.where(t >= t_c0, h0 + (h_crouch - h0) * ramp_between(t, t_c0, t_p0), y)
    y = np.where(t >= t_p0, hermite(t, t_p0, t_to, h_crouch, h_to, 0.0, v0k), y)
    tau = t - t_to
    y = np.where(t >= t_to, h_to + v0k * tau - 0.5 * gk * tau**2, y)
    v_land = v0k - gk * (t_ld - t_to)
    y = np.where(t >= t_ld, hermite(t, t_ld, t_ab, h_land, h_absorb, v_land, 0.0), y)
    y = np.where(t >= t_ab, h_absorb + (h0 - h_absorb) * ramp_between(t, t_ab, t_end), y)
    vh = 0.7 * dist / (t_ld - t_to)
    z = np.where(t < t_p0, 0.0, hermite(t, t_p0, t_to, 0.0, 0.15 * dist, 0.0, vh))
    z = np.where(t >= t_to, 0.15 * dist + vh * (t - t_to), z)
    z = np.where(t >= t_ld, hermite(t, t_ld, t_ab, 0.85 * dist, dist, vh, 0.0), z)
    pose = PoseBuilder(n)
    pose.root[:] = np.stack([np.zeros(n), y, z], -1)
    crouch = ramp_between(t, t_c0, t_p0) * (1 - ramp_between(t, t_p0, t_to))
    absorb = ramp_between(t, t_ld, t_fl_end + 0.1 * k) * (1 - ramp_between(t, t_ab, t_end))
    lean = np.radians(30.0) * crouch + np.radians(20.0) * absorb
    idle_body(pose, t, lean)
    # Arms: back in the crouch, forward and up through take-off, down on landing.
    arms = (-np.radians(45.0) * crouch + np.radians(120.0) * ramp_between(t, t_p0, t_to + 0.1 * k)
            * (1 - ramp_between(t, t_to + 0.2 * k, t_fl_end)) + np.radians(25.0) * absorb)
    hang_arms(pose, arms, arms, np.radians(75.0), np.radians(15.0) + 0.3 * np.abs(arms),
               np.radians(15.0) + 0.3 * np.abs(arms), 0.3)
    times = (t_to - 0.12 * k, t_to, t_ld, t_fl_end)
    ankles, feet, toes = _jump_feet(t, pose.root, dist, times, land_pitch)
    solve_legs(pose, ankles, feet, toes)
    phase = np.select([(t > times[0]) & (t <= times[1]), (t > times[1]) & (t < times[2]),
                       (t >= times[2]) & (t < times[3])], [TOE, SWING, TOE], FLAT)
    return pose, {"left": phase, "right": phase.copy()}


def _jump_feet(t, root, dist, times, land_pitch):
    """Feet planted, heels rising into take-off, tucked in flight, toe-first landing."""
    t_heel, t_to, t_ld, t_land_end = times
    n = len(t)
    yaw = np.broadcast_to(np.eye(3), (n, 3, 3))
    ankles, feet, toes = {}, {}, {}
    push = np.radians(40.0) * ramp_between(t, t_heel, t_to)
    land = land_pitch * (1 - ramp_between(t, t_ld, t_land_end))
    for side, sx in (("left", 1.0), ("right", -1.0)):
        a_start = np.broadcast_to([9.5 * sx, ANKLE_HEIGHT, 0.0], (n, 3))
        a_end = a_start + np.array([0.0, 0.0, dist])
        take = _toe_pose(a_start, yaw, push)
        touch = _toe_pose(a_end, yaw, land)
        i_to = min(np.searchsorted(t, t_to), n - 1)
        i_ld = min(np.searchsorted(t, t_ld), n - 1)
        r_to = np.array([0.0, root[i_to, 1], root[i_to, 2]])
        d_to = _toe_pose(a_start[:1], yaw[:1], np.radians([40.0]))[0] - r_to
        r_ld = np.array([0.0, root[i_ld, 1], root[i_ld, 2]])
        d_ld = _toe_pose(a_end[:1], yaw[:1], np.array([land_pitch]))[0] - r_ld
        w = np.clip((t - t_to) / max(t_ld - t_to, 1e-9), 0.0, 1.0)
        fly = root * [0.0, 1.0, 1.0] + d_to + (d_ld - d_to) * smoothstep(w)[:, None]
        fly[:, 1] += 14.0 * np.sin(np.pi * w)
        fly[:, 0] = a_start[:, 0]
        flying = (t > t_to) & (t < t_ld)
        ankle = np.where((t <= t_to)[:, None], take, touch)
        ankles[side] = np.where(flying[:, None], fly, ankle)
        pitch_fly = np.radians(40.0) + (land_pitch - np.radians(40.0)) * smoothstep(w)
        pitch = np.where(t <= t_to, push, np.where(flying, pitch_fly, land))
        feet[side] = rx(pitch)
        toes[side] = rx(-pitch)
    return ankles, feet, toes
