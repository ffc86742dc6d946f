"""Reading BVH text into a :class:`~.clip.BvhClip`: the hierarchy, the motion
header and table, each checked against the limits with a message that names the line
and the fix (:class:`~.clip.BvhError`)."""

from __future__ import annotations

import os
import re
from itertools import chain
from pathlib import Path

import numpy as np

from .clip import (
    CHANNEL_NAMES,
    MAX_FRAME_TIME,
    MAX_FRAMES,
    MAX_JOINTS,
    MAX_VALUE,
    MIN_FRAME_TIME,
    BvhClip,
    BvhError,
)

_CHANNEL_LOOKUP = {c.lower(): c for c in CHANNEL_NAMES}
_FRAMES_RE = re.compile(r"^\s*frames\s*:\s*(\S*)\s*$", re.IGNORECASE)
_FRAME_TIME_RE = re.compile(r"^\s*frame\s+time\s*:\s*(\S*)\s*$", re.IGNORECASE)
_BLOCK = 512  # motion lines converted to numbers per call


# A motion value as text: sign, 17 significant digits, point, exponent, and spacing.
MAX_VALUE_CHARS = 32
MAX_FILE_BYTES = 2 * 2**30  # MAX_FRAMES lines of a full skeleton fit well below this


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
        size = path.stat().st_size if path.is_file() else 0
        data = path.read_bytes() if path.is_file() and size <= MAX_FILE_BYTES else None
    except (OSError, ValueError) as e:  # a name too long, a file we may not read
        raise BvhError(f"{str(path)[:80]}: cannot read the file ({e.strerror or e}). Fix: "
                       "check the path to the .bvh file.") from None
    if size > MAX_FILE_BYTES:
        raise BvhError(f"{str(path)[:80]}: the file is {size:,} bytes, over the "
                       f"{MAX_FILE_BYTES:,} a clip may be. Fix: split the take into shorter "
                       "clips.")
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
                   h.channels, h.end_sites, frame_time, frames, label, warnings, h.renamed)


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
        self.renamed: list[tuple[str, str, int]] = []  # (name in the file, read as, line)
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
                # Some exporters name it ("End Site Head_end"), as Blender's importer allows.
                while k < len(toks) and toks[k] != "{":
                    k += 1
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
        if name != base:
            self.renamed.append((base, name, ln))
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
    # A line far wider than its channels can be written is refused before it is split:
    # splitting it first cost 30x the file's size in memory for a few absurd lines.
    widest = n_ch * MAX_VALUE_CHARS + 64
    for k, i in enumerate(numbers):
        if len(lines[i]) > widest:
            raise BvhError(f"{label}:{i + 1}: motion frame {k + 1} is {len(lines[i]):,} "
                           f"characters long, more than {n_ch} values can take. Fix: the "
                           "file is corrupt here; re-export it.")
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
        # In blocks: one conversion of a whole long take holds the GIL for ~0.4 s, which
        # would freeze Blender's window while the panel reads the clip on a worker thread.
        flat = np.concatenate([np.array(list(chain.from_iterable(rows[i:i + _BLOCK])),
                                        dtype=np.float64)
                               for i in range(0, len(rows), _BLOCK)])
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


