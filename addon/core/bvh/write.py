"""Writing BVH: a clip as text (:func:`format_bvh`), atomically to a file, or built
from joint arrays (:func:`make_clip`, :func:`write_bvh`)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from ..files.atomic import write_text_atomic
from .clip import BvhClip, matrices_to_channels

# --------------------------------------------------------------------------- writing

def write_bvh(path: str | os.PathLike, names: Sequence[str], parents: Sequence[int],
              offsets: np.ndarray, channel_orders: str | Sequence[str],
              root_positions: np.ndarray, rotations: np.ndarray, frame_time: float,
              end_sites: Mapping[int | str, Sequence[float]] | None = None,
              precision: int = 6) -> Path:
    """Write a standard BVH (Y-up, file units as given, usually cm), atomically.

    ``channel_orders``: rotation axes per joint as listed in the file (``"ZYX"`` means
    ``Zrotation Yrotation Xrotation``), or one string for all. Roots also get
    ``Xposition Yposition Zposition`` (from ``root_positions``, (F, 3)). ``rotations``:
    local rotation matrices (F, n, 3, 3) or channel degrees (F, n, 3) in each joint's
    listed order. ``end_sites``: joint index or name -> End Site OFFSET; leaves missing
    from it get one continuing their own offset.
    """
    clip = make_clip(names, parents, offsets, channel_orders, root_positions, rotations,
                     frame_time, end_sites)
    return write_bvh_clip(path, clip, precision)


def make_clip(names: Sequence[str], parents: Sequence[int], offsets: np.ndarray,
              channel_orders: str | Sequence[str], root_positions: np.ndarray,
              rotations: np.ndarray, frame_time: float,
              end_sites: Mapping[int | str, Sequence[float]] | None = None) -> BvhClip:
    """Assemble a :class:`BvhClip` from arrays (see :func:`write_bvh`)."""
    n = len(names)
    parents = np.asarray(parents, dtype=np.int64)
    orders = [channel_orders] * n if isinstance(channel_orders, str) else list(channel_orders)
    rotations = np.asarray(rotations, dtype=np.float64)
    root_positions = np.asarray(root_positions, dtype=np.float64).reshape(-1, 3)
    if len(orders) != n or parents.shape != (n,):
        raise ValueError("names, parents and channel_orders must have one entry per joint")
    cols, channels = [], []
    for j in range(n):
        rot = rotations[:, j]
        deg = matrices_to_channels(rot, orders[j]) if rot.shape[-2:] == (3, 3) else rot
        if parents[j] < 0:
            channels.append(("Xposition", "Yposition", "Zposition")
                            + tuple(f"{a}rotation" for a in orders[j]))
            cols.append(root_positions)
        else:
            channels.append(tuple(f"{a}rotation" for a in orders[j]))
        cols.append(deg)
    sites = {}
    for key, off in (end_sites or {}).items():
        sites[names.index(key) if isinstance(key, str) else int(key)] = np.asarray(off, float)
    offsets = np.asarray(offsets, dtype=np.float64)
    has_child = set(int(p) for p in parents if p >= 0)
    for j in range(n):
        if j not in has_child and j not in sites:
            sites[j] = offsets[j] * 0.5 if np.linalg.norm(offsets[j]) > 0 else np.array(
                [0.0, 1.0, 0.0])
    clip = BvhClip(list(names), parents, offsets, channels, sites, float(frame_time),
                   np.concatenate(cols, axis=1))
    return clip.in_file_order()


def write_bvh_clip(path: str | os.PathLike, clip: BvhClip, precision: int = 6) -> Path:
    """Write ``clip`` as BVH text, atomically (temp file in the same folder + rename)."""
    return write_text_atomic(path, format_bvh(clip, precision))


def format_bvh(clip: BvhClip, precision: int = 6) -> str:
    """BVH text of ``clip`` (joints written depth-first, motion columns to match)."""
    clip = clip.in_file_order()
    out = ["HIERARCHY"]
    kids: list[list[int]] = [[] for _ in range(clip.num_joints)]
    for j, p in enumerate(clip.parents):
        if p >= 0:
            kids[p].append(j)

    def num(v: np.ndarray) -> str:
        return " ".join(f"{x:.{precision}f}" for x in v)

    def emit(j: int, depth: int) -> None:
        ind = "\t" * depth
        kw = "ROOT" if clip.parents[j] < 0 else "JOINT"
        out.extend([f"{ind}{kw} {clip.names[j]}", f"{ind}{{",
                    f"{ind}\tOFFSET {num(clip.offsets[j])}",
                    f"{ind}\tCHANNELS {len(clip.channels[j])} {' '.join(clip.channels[j])}"])
        for c in kids[j]:
            emit(c, depth + 1)
        if j in clip.end_sites:
            out.extend([f"{ind}\tEnd Site", f"{ind}\t{{",
                        f"{ind}\t\tOFFSET {num(clip.end_sites[j])}", f"{ind}\t}}"])
        out.append(f"{ind}}}")

    for j in np.flatnonzero(clip.parents < 0):
        emit(int(j), 0)
    out += ["MOTION", f"Frames: {clip.num_frames}", f"Frame Time: {clip.frame_time:.9g}"]
    fmt = " ".join([f"%.{precision}f"] * clip.frames.shape[1])
    out.extend(fmt % tuple(row) for row in clip.frames)
    return "\n".join(out) + "\n"
