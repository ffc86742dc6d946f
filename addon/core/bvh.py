"""BVH reading, validation and writing (pure Python + numpy, no bpy).

Conventions, chosen to match Blender's own importer (``io_anim_bvh``) exactly:

- A joint's local rotation is built from its rotation channels in the order the
  file lists them: ``Zrotation Xrotation Yrotation`` means ``R = Rz @ Rx @ Ry``
  acting on column vectors (intrinsic rotations in listed order).
- A joint without position channels sits at ``parent + W_parent @ OFFSET``; a
  joint with position channels replaces its OFFSET by them (missing position
  components count as 0). For the root this means its world position is the
  position channels alone: the root OFFSET only places the rest pose.
- :func:`bvh_to_skeleton_motion` converts BVH (Y-up, usually cm) into Blender
  (Z-up, metres) like ``import_anim.bvh(axis_forward='-Z', axis_up='Y')``: the
  axis conversion ``C`` maps (x, y, z) to (x, -z, y). Every bone's rest rotation
  is ``C`` and its basis rotation is the file's local rotation, so
  ``skeleton.forward_kinematics`` reproduces the importer's bone heads.
- File frame ``k`` (0-based) is Blender frame ``1 + k`` (``Motion.frame_start``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path

import numpy as np

from .atomic import write_text_atomic
from .skeleton import Motion, Skeleton, compose, forward_kinematics
from .transforms import axis_angle_to_matrix, matrix_to_euler

MAX_FRAMES = 1_000_000
# Blender's BVH importer slows down steeply with the joint count (20,000 joints: ~107 s);
# real skeletons have tens to a few hundred joints.
MAX_JOINTS = 1_000
# OFFSETs and motion values beyond this (file units, usually cm; degrees) are not a body:
# 1e300 makes Blender's importer and the retarget's SVD fail.
MAX_VALUE = 1e6
# Frame Time bounds: 1 to 1000 fps (Blender's fps is an int; 1e-300 s overflows it).
MIN_FRAME_TIME, MAX_FRAME_TIME = 0.001, 1.0
CHANNEL_NAMES = ("Xposition", "Yposition", "Zposition", "Xrotation", "Yrotation", "Zrotation")
_CHANNEL_LOOKUP = {c.lower(): c for c in CHANNEL_NAMES}
_AXES = {"X": 0, "Y": 1, "Z": 2}
# BVH (Y-up) -> Blender (Z-up): (x, y, z) -> (x, -z, y).
AXIS_CONVERSION = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, -1.0], [0.0, 1.0, 0.0]])
_FRAMES_RE = re.compile(r"^\s*frames\s*:\s*(\S*)\s*$", re.IGNORECASE)
_FRAME_TIME_RE = re.compile(r"^\s*frame\s+time\s*:\s*(\S*)\s*$", re.IGNORECASE)


class BvhError(ValueError):
    """A BVH file that cannot be used; the message says what is wrong and how to fix it."""


@dataclass
class BvhClip:
    """A parsed BVH file: hierarchy plus the raw motion table."""

    names: list[str]
    parents: np.ndarray  # (n,) int, -1 for roots, parent before child
    offsets: np.ndarray  # (n, 3) OFFSET of each joint, file units
    channels: list[tuple[str, ...]]  # per joint, e.g. ("Zrotation", "Xrotation", "Yrotation")
    end_sites: dict[int, np.ndarray]  # joint index -> End Site OFFSET
    frame_time: float
    frames: np.ndarray  # (F, C) channel values, degrees for rotations
    source: str = "<text>"
    warnings: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.parents = np.asarray(self.parents, dtype=np.int64)
        self.offsets = np.asarray(self.offsets, dtype=np.float64).reshape(-1, 3)
        self.frames = np.asarray(self.frames, dtype=np.float64)
        self.channels = [tuple(c) for c in self.channels]
        self.end_sites = {int(k): np.asarray(v, dtype=np.float64) for k, v in
                          self.end_sites.items()}

    @property
    def num_joints(self) -> int:
        return len(self.names)

    @property
    def num_frames(self) -> int:
        return int(self.frames.shape[0])

    @property
    def num_channels(self) -> int:
        return sum(len(c) for c in self.channels)

    @property
    def fps(self) -> float:
        return 1.0 / self.frame_time

    @property
    def channel_starts(self) -> np.ndarray:
        """Column of each joint's first channel in :attr:`frames`."""
        sizes = [len(c) for c in self.channels]
        return np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)

    def index(self, name: str) -> int:
        return self.names.index(name)

    def rotation_order(self, j: int) -> str:
        """Rotation axes as listed in the file, e.g. ``"ZXY"``."""
        return "".join(c[0] for c in self.channels[j] if c.endswith("rotation"))

    def has_position(self, j: int) -> bool:
        return any(c.endswith("position") for c in self.channels[j])

    def channel_values(self, j: int, kind: str) -> np.ndarray:
        """(F, k) values of joint ``j``'s ``"rotation"`` or ``"position"`` channels."""
        start = self.channel_starts[j]
        cols = [start + i for i, c in enumerate(self.channels[j]) if c.endswith(kind)]
        return self.frames[:, cols]

    def local_rotations(self) -> np.ndarray:
        """(F, n, 3, 3) local rotation of every joint and frame."""
        out = np.empty((self.num_frames, self.num_joints, 3, 3))
        for j in range(self.num_joints):
            out[:, j] = channel_matrices(self.channel_values(j, "rotation"),
                                         self.rotation_order(j))
        return out

    def local_translations(self) -> np.ndarray:
        """(F, n, 3) translation of each joint from its parent, in the parent's frame."""
        out = np.broadcast_to(self.offsets, (self.num_frames,) + self.offsets.shape).copy()
        for j in range(self.num_joints):
            if self.has_position(j):
                out[:, j] = 0.0
                vals = self.channel_values(j, "position")
                axes = [_AXES[c[0]] for c in self.channels[j] if c.endswith("position")]
                out[:, j, axes] = vals
        return out

    def world_positions(self) -> np.ndarray:
        """(F, n, 3) BVH-space (file units, Y-up) joint positions."""
        return forward_kinematics_bvh(self.parents, self.local_rotations(),
                                      self.local_translations())[1]

    def file_order(self) -> list[int]:
        """Joint indices in the order a BVH file lists them (depth-first)."""
        kids: list[list[int]] = [[] for _ in range(self.num_joints)]
        for j, p in enumerate(self.parents):
            if p >= 0:
                kids[p].append(j)
        order: list[int] = []
        stack = [int(j) for j in np.flatnonzero(self.parents < 0)][::-1]
        while stack:
            j = stack.pop()
            order.append(j)
            stack.extend(kids[j][::-1])
        return order

    def in_file_order(self) -> BvhClip:
        """This clip with its joints (and motion columns) in depth-first file order."""
        order = self.file_order()
        if order == list(range(self.num_joints)):
            return self
        new = {old: k for k, old in enumerate(order)}
        starts = self.channel_starts
        cols = np.concatenate([np.arange(starts[j], starts[j] + len(self.channels[j]))
                               for j in order]).astype(np.int64)
        parents = [new[int(self.parents[j])] if self.parents[j] >= 0 else -1 for j in order]
        return BvhClip([self.names[j] for j in order], np.array(parents), self.offsets[order],
                       [self.channels[j] for j in order],
                       {new[j]: v for j, v in self.end_sites.items()}, self.frame_time,
                       self.frames[:, cols], self.source, list(self.warnings))

    def rest_positions(self) -> np.ndarray:
        """(n, 3) BVH-space rest joint positions (accumulated OFFSETs)."""
        out = np.zeros_like(self.offsets)
        for j, p in enumerate(self.parents):
            out[j] = self.offsets[j] + (out[p] if p >= 0 else 0.0)
        return out


# --------------------------------------------------------------------------- rotation helpers

def channel_matrices(degrees: np.ndarray, axes: str) -> np.ndarray:
    """(F, k) rotation channel values in degrees, listed ``axes`` -> (F, 3, 3).

    ``axes="ZXY"`` gives ``Rz @ Rx @ Ry`` (the BVH convention).
    """
    degrees = np.asarray(degrees, dtype=np.float64)
    m = np.broadcast_to(np.eye(3), degrees.shape[:-1] + (3, 3)).copy()
    for i, ax in enumerate(axes):
        e = np.zeros(3)
        e[_AXES[ax]] = 1.0
        m = m @ axis_angle_to_matrix(np.broadcast_to(e, degrees.shape[:-1] + (3,)),
                                     np.radians(degrees[..., i]))
    return m


def matrices_to_channels(m: np.ndarray, axes: str, unwrap: bool = True) -> np.ndarray:
    """(F, 3, 3) rotations -> (F, 3) channel degrees for the listed ``axes`` (3 distinct)."""
    if sorted(axes) != ["X", "Y", "Z"]:
        raise ValueError(f"rotation order {axes!r} must name X, Y and Z once each")
    # BVH "ZXY" (Rz @ Rx @ Ry) is Blender's Euler order "YXZ".
    e = matrix_to_euler(np.asarray(m, dtype=np.float64), axes[::-1])
    vals = e[..., [_AXES[a] for a in axes]]
    if unwrap and vals.ndim >= 2 and len(vals) > 1:
        vals = np.unwrap(vals, axis=0)
    return np.degrees(vals)


def forward_kinematics_bvh(parents: np.ndarray, local_rot: np.ndarray,
                           local_pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """BVH FK: world rotations (F, n, 3, 3) and positions (F, n, 3)."""
    world_rot = np.empty_like(local_rot)
    world_pos = np.empty_like(local_pos)
    for j, p in enumerate(parents):
        if p < 0:
            world_rot[:, j] = local_rot[:, j]
            world_pos[:, j] = local_pos[:, j]
        else:
            world_rot[:, j] = world_rot[:, p] @ local_rot[:, j]
            world_pos[:, j] = world_pos[:, p] + np.einsum(
                "fij,fj->fi", world_rot[:, p], local_pos[:, j])
    return world_rot, world_pos


# --------------------------------------------------------------------------- reading

def _read_text(source: str | os.PathLike | bytes) -> tuple[str, str]:
    """(text, label) from a path, BVH text or raw bytes."""
    if isinstance(source, bytes):
        return _decode(source, "<bytes>"), "<bytes>"
    if isinstance(source, str) and ("\n" in source or "\r" in source
                                     or source.lstrip("\ufeff \t").upper()
                                     .startswith("HIERARCHY")):
        return source.removeprefix("\ufeff"), "<text>"
    path = Path(source)
    try:
        data = path.read_bytes() if path.is_file() else None
    except (OSError, ValueError) as e:  # a name too long, a file we may not read
        raise BvhError(f"{str(path)[:80]}: cannot read the file ({e.strerror or e}). Fix: "
                       "check the path to the .bvh file.") from None
    if data is None:
        raise BvhError(f"{str(path)[:80]}: no such file. Fix: check the path to the .bvh "
                       "file.")
    return _decode(data, str(path)), str(path)


def _decode(data: bytes, label: str) -> str:
    if not data.strip():
        raise BvhError(f"{label}: the file is empty. Fix: re-export the clip as BVH.")
    if b"\x00" in data[:4096]:
        raise BvhError(f"{label}: this is a binary file, not BVH text. Fix: pass a .bvh "
                       "file (FBX/glTF clips go through their own importers).")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise BvhError(f"{label}:{line}: the file is not UTF-8 text (bad byte at offset "
                       f"{exc.start}). Fix: re-save it as UTF-8 or ASCII.") from None


def parse_bvh(source: str | os.PathLike | bytes, *, strict: bool = True) -> BvhClip:
    """Parse a BVH file (path), BVH text or bytes into a :class:`BvhClip`.

    ``strict=False`` accepts a ``Frames:`` header that disagrees with the number of
    motion lines (the lines win, a warning is recorded); everything else always raises
    :class:`BvhError`.
    """
    text, label = _read_text(source)
    lines = text.splitlines()
    first = next((i for i, ln in enumerate(lines) if ln.strip()), None)
    if first is None:
        raise BvhError(f"{label}: the file is empty. Fix: re-export the clip as BVH.")
    if lines[first].strip().upper() != "HIERARCHY":
        raise BvhError(f"{label}:{first + 1}: missing HIERARCHY (a BVH file starts with the "
                       f"line 'HIERARCHY', found {lines[first].strip()[:40]!r}). Fix: check "
                       "that this is a BVH file and not truncated at the start.")
    motion = next((i for i in range(first + 1, len(lines))
                   if lines[i].strip().upper() == "MOTION"), None)
    if motion is None:
        raise BvhError(f"{label}: missing MOTION section (no line 'MOTION' after the "
                       "hierarchy). Fix: the file is truncated or is a hierarchy-only file; "
                       "re-export it with animation.")
    h = _Hierarchy(label)
    h.parse(lines, first + 1, motion)
    frame_count, frame_time, data_start = _motion_header(lines, motion, label)
    n_ch = sum(len(c) for c in h.channels)
    frames, warnings = _motion_table(lines, data_start, n_ch, frame_count, label, strict)
    _check_finite(frames, lines, data_start, h, label)
    return BvhClip(h.names, np.array(h.parents, dtype=np.int64), np.array(h.offsets),
                   h.channels, h.end_sites, frame_time, frames, label, warnings)


def validate_bvh(path: str | os.PathLike) -> BvhClip:
    """Raise :class:`BvhError` unless ``path`` is a BVH file Blender can import.

    Beyond :func:`parse_bvh` (strict), every joint needs all three rotation channels:
    Blender's importer fails with a bare ``KeyError`` otherwise.
    """
    clip = parse_bvh(path, strict=True)
    for j in range(clip.num_joints):
        order = clip.rotation_order(j)
        if len(order) != 3:
            listed = " ".join(clip.channels[j]) or "none"
            raise BvhError(f"{clip.source}: joint {clip.names[j]!r} has {len(order)} rotation "
                           f"channels ({listed}); Blender's BVH importer needs all three. "
                           "Fix: re-export with X, Y and Z rotation channels on every joint.")
    return clip


def parse_bvh_header_fps(path: str | os.PathLike) -> float:
    """The clip's frame rate from its ``Frame Time:`` line, without reading the motion."""
    return 1.0 / read_bvh_header(path)[1]


def read_bvh_header(path: str | os.PathLike) -> tuple[int, float]:
    """(Frames, Frame Time) from the MOTION header; reads only up to that line."""
    label = str(path)
    frames = None
    with open(path, "rb") as fh:
        for raw in fh:
            line = _decode(raw, label) if raw.strip() else ""
            m = _FRAMES_RE.match(line)
            if m:
                frames = m.group(1)
                continue
            m = _FRAME_TIME_RE.match(line)
            if m and frames is not None:
                try:
                    count, ft = int(frames), float(m.group(1))
                except ValueError:
                    break
                if ft > 0 and np.isfinite(ft):
                    _check_frame_time(ft, m.group(1), label)
                    return count, ft
                break
    raise BvhError(f"{label}: no valid 'Frames:' / 'Frame Time:' header after MOTION. Fix: "
                   "check that this is a complete BVH file.")


class _Hierarchy:
    """Line-oriented parser of the HIERARCHY block."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.names: list[str] = []
        self.parents: list[int] = []
        self.offsets: list[np.ndarray | None] = []
        self.channels: list[tuple[str, ...]] = []
        self.end_sites: dict[int, np.ndarray] = {}
        self.opened_at: list[int] = []
        self._has_channels: list[bool] = []

    def fail(self, lineno: int, msg: str) -> BvhError:
        return BvhError(f"{self.label}:{lineno}: {msg}")

    def parse(self, lines: list[str], start: int, stop: int) -> None:
        stack: list[tuple[str, int, int]] = []  # (kind, joint index, line opened)
        pending: tuple[str, int, int] | None = None
        for i in range(start, stop):
            toks = lines[i].replace("{", " { ").replace("}", " } ").split()
            pending = self._line(toks, i + 1, stack, pending)
        if pending is not None:
            raise self.fail(pending[2], "unbalanced braces: the block opened here has no '{'. "
                            "Fix: add '{' after the ROOT/JOINT/End Site line.")
        if stack:
            kind, j, ln = stack[-1]
            what = "End Site" if kind == "end" else f"joint {self.names[j]!r}"
            raise self.fail(ln, f"unbalanced braces: {len(stack)} '{{' never closed "
                            f"(innermost: {what}). Fix: the hierarchy is truncated or a '}}' "
                            "is missing before MOTION.")
        if not self.names:
            raise BvhError(f"{self.label}: the hierarchy has no ROOT joint. Fix: re-export "
                           "the clip with its skeleton.")

    def _line(self, toks: list[str], ln: int, stack: list, pending):
        k = 0
        while k < len(toks):
            tok = toks[k]
            low = tok.lower()
            if low in ("root", "joint"):
                name_toks = []
                k += 1
                while k < len(toks) and toks[k] != "{":
                    name_toks.append(toks[k])
                    k += 1
                pending = self._open_joint(low, "_".join(name_toks), ln, stack, pending)
                continue
            if low == "end":
                if k + 1 >= len(toks) or toks[k + 1].lower() != "site":
                    raise self.fail(ln, "'End' must be followed by 'Site'. Fix: write "
                                    "'End Site'.")
                if not stack or stack[-1][0] != "joint" or pending is not None:
                    raise self.fail(ln, "End Site outside a joint. Fix: check the braces "
                                    "around this End Site.")
                pending = ("end", stack[-1][1], ln)
                k += 2
                continue
            if tok == "{":
                if pending is None:
                    raise self.fail(ln, "unbalanced braces: '{' without ROOT/JOINT/End Site. "
                                    "Fix: remove the extra '{'.")
                stack.append(pending)
                pending = None
            elif tok == "}":
                if not stack:
                    raise self.fail(ln, "unbalanced braces: '}' closes nothing. Fix: remove "
                                    "the extra '}'.")
                self._close(stack.pop(), ln)
            elif low == "offset":
                self._offset(toks[k + 1: k + 4], ln, stack)
                k += 4
                continue
            elif low == "channels":
                k = self._channels(toks, k, ln, stack)
                continue
            elif low == "hierarchy":
                raise self.fail(ln, "a second HIERARCHY line. Fix: the file holds two clips "
                                "pasted together; split them.")
            else:
                raise self.fail(ln, f"unexpected {tok!r} in the hierarchy. Fix: only ROOT, "
                                "JOINT, End Site, OFFSET, CHANNELS and braces belong here.")
            k += 1
        return pending

    def _open_joint(self, kind: str, name: str, ln: int, stack: list, pending) -> tuple:
        if pending is not None:
            raise self.fail(ln, "unbalanced braces: expected '{' before this line. Fix: add "
                            "the missing '{'.")
        if not name:
            raise self.fail(ln, f"{kind.upper()} without a name. Fix: name the joint.")
        if kind == "joint" and not stack:
            raise self.fail(ln, f"JOINT {name!r} outside any ROOT. Fix: check the braces "
                            "above this line.")
        if kind == "root" and stack:
            raise self.fail(ln, f"ROOT {name!r} inside another joint. Fix: close the previous "
                            "ROOT with '}' first.")
        if stack and stack[-1][0] == "end":
            raise self.fail(ln, f"JOINT {name!r} inside an End Site. Fix: close the End Site.")
        if len(self.names) >= MAX_JOINTS:
            raise self.fail(ln, f"more than {MAX_JOINTS:,} joints: over the limit Blender's "
                            "importer handles in reasonable time. Fix: remove helper/extra "
                            "joints before exporting the clip.")
        base, n = name, 1
        while name in self.names:  # Blender renames duplicates the same way.
            name, n = f"{base}.{n:03d}", n + 1
        self.names.append(name)
        self.parents.append(stack[-1][1] if stack else -1)
        self.offsets.append(None)
        self.channels.append(())
        self._has_channels.append(False)
        return ("joint", len(self.names) - 1, ln)

    def _close(self, item: tuple[str, int, int], ln: int) -> None:
        kind, j, opened = item
        if kind == "end":
            if j not in self.end_sites:
                raise self.fail(ln, "End Site without OFFSET. Fix: add 'OFFSET x y z'.")
            return
        if self.offsets[j] is None:
            raise self.fail(opened, f"joint {self.names[j]!r} has no OFFSET. Fix: add "
                            "'OFFSET x y z' after its '{'.")
        if not self._has_channels[j]:
            raise self.fail(opened, f"joint {self.names[j]!r} has no CHANNELS line. Fix: add "
                            "'CHANNELS 3 Zrotation Xrotation Yrotation' (or 'CHANNELS 0').")

    def _offset(self, vals: list[str], ln: int, stack: list) -> None:
        if not stack:
            raise self.fail(ln, "OFFSET outside a joint. Fix: check the braces.")
        try:
            xyz = np.array([float(v) for v in vals])
        except ValueError:
            xyz = np.zeros(0)
        if xyz.shape != (3,) or not np.all(np.isfinite(xyz)):
            raise self.fail(ln, f"OFFSET needs three finite numbers, got {' '.join(vals)!r}. "
                            "Fix: write 'OFFSET x y z' on one line.")
        if np.any(np.abs(xyz) >= MAX_VALUE):
            raise self.fail(ln, f"OFFSET {' '.join(vals)!r} is beyond {MAX_VALUE:g} units: not a "
                            "body's proportions. Fix: re-export the clip in cm or m.")
        kind, j, _ = stack[-1]
        if kind == "end":
            self.end_sites[j] = xyz
        else:
            self.offsets[j] = xyz

    def _channels(self, toks: list[str], k: int, ln: int, stack: list) -> int:
        if not stack or stack[-1][0] != "joint":
            raise self.fail(ln, "CHANNELS outside a joint (End Sites have none). Fix: move "
                            "or delete this line.")
        j = stack[-1][1]
        try:
            count = int(toks[k + 1])
        except (IndexError, ValueError):
            raise self.fail(ln, "CHANNELS must be followed by a channel count. Fix: write "
                            "e.g. 'CHANNELS 3 Zrotation Xrotation Yrotation'.") from None
        names = toks[k + 2: k + 2 + count]
        if count < 0 or count > 6 or len(names) != count:
            raise self.fail(ln, f"CHANNELS declares {count} channels but lists {len(names)} "
                            f"for joint {self.names[j]!r}. Fix: make the count match the "
                            "names, all on one line.")
        out = []
        for c in names:
            canon = _CHANNEL_LOOKUP.get(c.lower())
            if canon is None:
                raise self.fail(ln, f"unknown channel {c!r} on joint {self.names[j]!r}. Fix: "
                                f"use only {', '.join(CHANNEL_NAMES)}.")
            if canon in out:
                raise self.fail(ln, f"channel {canon} listed twice on joint "
                                f"{self.names[j]!r}. Fix: list each channel once.")
            out.append(canon)
        self.channels[j] = tuple(out)
        self._has_channels[j] = True
        return k + 2 + count


def _motion_header(lines: list[str], motion: int, label: str) -> tuple[int, float, int]:
    """Parse 'Frames:' and 'Frame Time:'; return (count, time, first data line index)."""
    idx = [i for i in range(motion + 1, len(lines)) if lines[i].strip()][:2]
    m = _FRAMES_RE.match(lines[idx[0]]) if idx else None
    if m is None:
        ln = idx[0] + 1 if idx else motion + 1
        raise BvhError(f"{label}:{ln}: expected 'Frames: N' after MOTION. Fix: add the "
                       "frame count line.")
    try:
        count = int(m.group(1))
    except ValueError:
        raise BvhError(f"{label}:{idx[0] + 1}: 'Frames:' needs a whole number, got "
                       f"{m.group(1)!r}. Fix: write the number of motion lines.") from None
    if count > MAX_FRAMES:
        raise BvhError(f"{label}:{idx[0] + 1}: Frames: {count} is over the limit of "
                       f"{MAX_FRAMES:,}. Fix: split the clip into shorter files.")
    if count < 0:
        raise BvhError(f"{label}:{idx[0] + 1}: Frames: {count} is negative. Fix: write the "
                       "number of motion lines.")
    m = _FRAME_TIME_RE.match(lines[idx[1]]) if len(idx) > 1 else None
    if m is None:
        ln = idx[1] + 1 if len(idx) > 1 else idx[0] + 2
        raise BvhError(f"{label}:{ln}: expected 'Frame Time: seconds' after 'Frames:'. Fix: "
                       "add e.g. 'Frame Time: 0.0333333' (30 fps).")
    try:
        ft = float(m.group(1))
    except ValueError:
        ft = float("nan")
    if not np.isfinite(ft) or ft <= 0:
        raise BvhError(f"{label}:{idx[1] + 1}: Frame Time must be a positive number of "
                       f"seconds, got {m.group(1)!r}. Fix: e.g. 'Frame Time: 0.0333333'.")
    _check_frame_time(ft, m.group(1), f"{label}:{idx[1] + 1}")
    return count, ft, idx[1] + 1


def _check_frame_time(ft: float, text: str, where: str) -> None:
    if not MIN_FRAME_TIME <= ft <= MAX_FRAME_TIME:
        raise BvhError(f"{where}: Frame Time {text!r} s is {1 / ft:.3g} fps, outside 1-1000 "
                       "fps. Fix: write the seconds per frame, e.g. 'Frame Time: 0.0333333' "
                       "(30 fps).")


def _motion_table(lines: list[str], start: int, n_ch: int, count: int, label: str,
                  strict: bool) -> tuple[np.ndarray, list[str]]:
    numbers = [i for i in range(start, len(lines)) if lines[i].strip()]
    if len(numbers) > MAX_FRAMES:
        raise BvhError(f"{label}: {len(numbers):,} motion lines is over the limit of "
                       f"{MAX_FRAMES:,}. Fix: split the clip into shorter files.")
    if not numbers:
        raise BvhError(f"{label}: the clip has zero frames (Frames: {count}, no motion "
                       "lines). Fix: re-export it with its animation.")
    rows = [lines[i].split() for i in numbers]
    counts = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
    bad = np.flatnonzero(counts != n_ch)
    if bad.size:
        b = int(bad[0])
        raise BvhError(f"{label}:{numbers[b] + 1}: motion frame {b + 1} has {counts[b]} "
                       f"values, expected {n_ch} (the hierarchy declares {n_ch} channels). "
                       "Fix: the file is truncated or corrupt here; re-export it or delete "
                       "the broken line and correct 'Frames:'.")
    warnings = []
    if count != len(rows):
        msg = (f"{label}: 'Frames: {count}' but the file has {len(rows)} motion lines")
        if strict:
            raise BvhError(msg + f". Fix: set 'Frames: {len(rows)}' if the data is complete, "
                           "or re-export the clip if it was cut off.")
        warnings.append(msg + "; using the lines")
    try:
        flat = np.array(list(chain.from_iterable(rows)), dtype=np.float64)
    except ValueError:
        _raise_bad_number(rows, numbers, label)
    return flat.reshape(len(rows), n_ch), warnings


def _raise_bad_number(rows: list[list[str]], numbers: list[int], label: str) -> None:
    for r, row in enumerate(rows):
        for tok in row:
            try:
                float(tok)
            except ValueError:
                raise BvhError(f"{label}:{numbers[r] + 1}: {tok!r} is not a number (motion "
                               f"frame {r + 1}). Fix: the file is corrupt here; re-export "
                               "it.") from None
    raise BvhError(f"{label}: unreadable motion data. Fix: re-export the clip.")


def _check_finite(frames: np.ndarray, lines: list[str], start: int, h: _Hierarchy,
                  label: str) -> None:
    bad = ~np.isfinite(frames)
    if not bad.any():
        big = np.abs(frames) >= MAX_VALUE
        if big.any():
            r, c = (int(v) for v in np.argwhere(big)[0])
            numbers = [i for i in range(start, len(lines)) if lines[i].strip()]
            raise BvhError(f"{label}:{numbers[r] + 1}: motion frame {r + 1} has the value "
                           f"{frames[r, c]:g}, beyond {MAX_VALUE:g} (units or degrees). Fix: "
                           "the clip is corrupt or in the wrong units; re-export it.")
        return
    r, c = (int(v) for v in np.argwhere(bad)[0])
    numbers = [i for i in range(start, len(lines)) if lines[i].strip()]
    col = 0
    for j, chans in enumerate(h.channels):
        if c < col + len(chans):
            where = f"joint {h.names[j]!r} channel {chans[c - col]}"
            break
        col += len(chans)
    raise BvhError(f"{label}:{numbers[r] + 1}: motion frame {r + 1} has a non-finite value "
                   f"({frames[r, c]}) in {where}; {int(bad.sum())} such values in all. Fix: "
                   "the exporter wrote NaN/inf; clean up the clip (e.g. remove the frames or "
                   "re-solve the mocap) and export again.")


# --------------------------------------------------------------------------- conversion

def bvh_basis(clip: BvhClip, scale: float = 0.01) -> tuple[Skeleton, np.ndarray]:
    """Skeleton (rest rotation ``C`` on every bone) and basis matrices (F, n, 4, 4)."""
    c = AXIS_CONVERSION
    heads = clip.rest_positions() * scale
    rest = compose(np.broadcast_to(c, (clip.num_joints, 3, 3)), heads @ c.T)
    skel = Skeleton(list(clip.names), clip.parents.copy(), rest, _tails(clip, scale) @ c.T)
    # Basis location lives in the bone's rest frame (rotation C): the BVH-axis delta
    # between the position channels and the OFFSET they replace.
    loc = np.zeros((clip.num_frames, clip.num_joints, 3))
    moving = [j for j in range(clip.num_joints) if clip.has_position(j)]
    if moving:
        trans = clip.local_translations()
        loc[:, moving] = (trans[:, moving] - clip.offsets[moving]) * scale
    return skel, compose(clip.local_rotations(), loc)


def bvh_to_skeleton_motion(clip: BvhClip, scale: float = 0.01) -> tuple[Skeleton, Motion]:
    """Convert to Blender's Z-up space like ``import_anim.bvh(global_scale=scale,
    axis_forward='-Z', axis_up='Y')``; world bone heads match the importer's."""
    skel, basis = bvh_basis(clip, scale)
    return skel, Motion(forward_kinematics(skel, basis), fps=clip.fps, frame_start=1)


def _tails(clip: BvhClip, scale: float) -> np.ndarray:
    """Rest tails (BVH axes, scaled) chosen like Blender's importer: End Site, else the
    only child's head, else the mean of the children's heads; never zero length."""
    heads = clip.rest_positions() * scale
    tails = heads.copy()
    kids: list[list[int]] = [[] for _ in range(clip.num_joints)]
    for j, p in enumerate(clip.parents):
        if p >= 0:
            kids[p].append(j)
    for j in range(clip.num_joints):
        if j in clip.end_sites:
            tails[j] = heads[j] + clip.end_sites[j] * scale
        elif kids[j]:
            tails[j] = heads[kids[j]].mean(axis=0)
    lengths = np.linalg.norm(clip.offsets, axis=-1) * abs(scale)
    typical = float(lengths[lengths > 0].mean()) if np.any(lengths > 0) else abs(scale)
    short = np.linalg.norm(tails - heads, axis=-1) < 1e-3 * typical
    tails[short, 1] += 0.25 * typical
    return tails


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
