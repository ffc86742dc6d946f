"""``painted-skin score``: a frames folder against a reference, inside the character mask.

    painted-skin score --reference PASSES_OR_FRAMES --frames FRAMES [--passes PASSES]

The reference is a passes folder (``beauty/####.png``, ``mask/####.png``) or a folder of
``####.png`` (then the mask comes from ``--passes``); frames are a folder of
``####.png`` or a restyle output folder (``restyled/####.png``). Depth and motion come
from ``--passes`` (default: the reference folder). Frames pair by number; frames that
only one side has are named on stderr and left out. The per-frame values go to a JSON
(written atomically, so a reader never sees half of one); the last line printed is

    score psnr: <dB> ssim: <v> flip: <v> warp_ratio: <frames' warping error / reference's>
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ...addon.core.files.atomic import check_writable, read_json, write_json_atomic
from ...addon.core.files.paths import check_distinct
from ...addon.core.passes.encodings import CONVENTIONS
from . import metrics
from .images import UnreadableImage, read_exr, read_png

RESTYLED = "restyled"  # restyle's output sub-folder (addon/blender/restyle/loop.py)
BEAUTY, MASK, DEPTH, MOTION = "beauty", "mask", "depth", "motion"
JSON_NAME = "score.json"
DESCRIPTION = "compare an image sequence with a reference inside the character mask"


class ScoreInputError(ValueError):
    """Folders that cannot be scored; the message names the problem and the fix."""


@dataclass
class Occlusion:
    """How a pixel is judged visible in the next frame (see metrics.visible_in_next)."""

    rel_tol: float = 0.05
    abs_tol: float = 1e-3
    round_trip_px: float = 1.0


@dataclass
class _Frame:
    number: int
    ref: np.ndarray
    test: np.ndarray
    mask: np.ndarray
    depth: np.ndarray | None = None
    motion: np.ndarray | None = None


@dataclass
class Sources:
    """The numbered files of one scoring run, each ``{frame: path}``."""

    reference: dict[int, Path]
    frames: dict[int, Path]
    mask: dict[int, Path]
    depth: dict[int, Path] = field(default_factory=dict)
    motion: dict[int, Path] = field(default_factory=dict)
    folders: dict[str, Path] = field(default_factory=dict)


_DIGITS = re.compile(r"(\d+)")


def numbered(folder: Path, ext: str) -> dict[int, Path]:
    """``{frame: path}`` of the frame files ``<digits>.<ext>`` in ``folder``, or, as a
    farm's pattern names them, ``<prefix><digits><suffix>.<ext>`` (``sh010_0007_v2.png``).
    The frame is the run of digits that names the most files when the rest of the name
    is kept (plain digits first, then the longer run, on a tie), so a stray
    ``notes_1.png`` beside ``shot_####`` frames is not a frame."""
    if not folder.is_dir():
        return {}
    groups: dict[str, dict[int, Path]] = {}
    widest: dict[str, int] = {}
    for p in folder.iterdir():
        if p.suffix.lower() != f".{ext}" or p.name.startswith(".") or not p.is_file():
            continue
        parts = _DIGITS.split(p.stem)  # odd indices: the runs of digits
        for k in range(1, len(parts), 2):
            key = "".join(parts[:k]) + "#" + "".join(parts[k + 1:])
            groups.setdefault(key, {})[int(parts[k])] = p
            widest[key] = max(widest.get(key, 0), len(parts[k]))
    if not groups:
        return {}
    best = max(groups, key=lambda k: (len(groups[k]), k == "#", widest[k], k))  # (k: stable)
    return groups[best]


def _image_folder(root: Path, subs: tuple[str, ...], what: str, flag: str) -> Path:
    if not root.is_dir():
        raise ScoreInputError(f"{flag} {root}: no such folder; give the {what} folder")
    for sub in subs:
        if numbered(root / sub, "png"):
            return root / sub
    if numbered(root, "png"):
        return root
    looked = ", ".join(f"{root / s}/" for s in subs)
    raise ScoreInputError(f"{flag} {root}: no ####.png files there (nor in {looked}); give "
                          f"the folder that holds the {what} frames")


def _ranges(numbers: list[int]) -> str:
    """[1, 2, 3, 7, 9, 10] -> '1-3, 7, 9-10'."""
    spans: list[list[int]] = []
    for n in sorted(numbers):
        if spans and n == spans[-1][1] + 1:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans) or "none"


def find_sources(reference: Path, frames: Path, passes: Path | None = None) -> Sources:
    """Locate every numbered file; raises :class:`ScoreInputError` for a missing folder."""
    ref_dir = _image_folder(reference, (BEAUTY, RESTYLED), "reference", "--reference")
    frames_dir = _image_folder(frames, (RESTYLED,), "restyled", "--frames")
    passes = passes or reference
    if not passes.is_dir():
        raise ScoreInputError(f"--passes {passes}: no such folder; give the shot's passes "
                              "folder (mask/, depth/, motion/)")
    mask_dir = next((d / MASK for d in (reference, passes) if numbered(d / MASK, "png")), None)
    if mask_dir is None:
        raise ScoreInputError(f"no mask pass: neither {reference / MASK}/ nor {passes / MASK}/ "
                              "holds ####.png files; render the passes with mask")
    for sub in (DEPTH, MOTION):
        if not numbered(passes / sub, "exr"):
            raise ScoreInputError(f"--passes {passes}: no {sub}/####.exr files; render the "
                                  f"shot's passes with {DEPTH},{MOTION} (painted-skin passes)")
    _check_conventions(passes)
    return Sources(reference=numbered(ref_dir, "png"), frames=numbered(frames_dir, "png"),
                   mask=numbered(mask_dir, "png"), depth=numbered(passes / DEPTH, "exr"),
                   motion=numbered(passes / MOTION, "exr"),
                   folders={"reference": ref_dir, "frames": frames_dir, "mask": mask_dir,
                            "passes": passes})


def read_files(src: Sources) -> dict[str, Path]:
    """Every file a scoring run reads, named as an error shows it: the numbered frames of
    each source and the folders' manifests (a ``--json`` there would replace them)."""
    files = {f"{what} frame {f}": p
             for what, found in (("reference", src.reference), ("restyled", src.frames),
                                 ("mask", src.mask), ("depth", src.depth),
                                 ("motion", src.motion))
             for f, p in found.items()}
    for folder in {*src.folders.values(), *(d.parent for d in src.folders.values())}:
        for name in ("manifest.json", "restyle.json"):
            if (folder / name).is_file():
                files[name] = folder / name
    return files


# The same vectors under the channel names R, G, B, A (what older passes folders say).
_MOTION_BEFORE = ("EXR float32 pixels, channels R,G = (u, v) to the previous frame, B,A = "
                  "(u, v) to the next frame: where this pixel's surface point is in that "
                  "frame minus where it is now (u right, v down); 0 where empty")


def _check_conventions(passes: Path) -> None:
    """A passes folder from another convention would flip the warp: refuse it."""
    path = passes / "manifest.json"
    if not path.is_file():
        return
    conv = read_json(path, "pass manifest").get("conventions", {})
    if conv.get(MOTION, CONVENTIONS[MOTION]) not in (CONVENTIONS[MOTION], _MOTION_BEFORE):
        raise ScoreInputError(f"{path}: its motion vectors follow another convention "
                              f"({conv[MOTION]!r}); re-render the passes with this version")


def _rgb(path: Path) -> np.ndarray:
    return metrics.to_unit_float(read_png(path))


def _mask(path: Path) -> np.ndarray:
    a = read_png(path)
    a = a[..., 0] if a.ndim == 3 else a
    return a > (np.iinfo(a.dtype).max // 2)


#: The motion pass's channels (passes_output.MOTION_CHANNELS), then the older names.
_MOTION = ("backward.u", "backward.v", "forward.u", "forward.v")


def _read_motion(path: Path) -> np.ndarray:
    try:
        return read_exr(path, _MOTION)
    except UnreadableImage:
        return read_exr(path, ["R", "G", "B", "A"])  # passes from before the named channels


def _load(src: Sources, f: int) -> _Frame:
    fr = _Frame(f, _rgb(src.reference[f]), _rgb(src.frames[f]), _mask(src.mask[f]))
    if f in src.depth:
        fr.depth = read_exr(src.depth[f], ["Z"])[..., 0]
    if f in src.motion:
        fr.motion = _read_motion(src.motion[f])
    size = fr.mask.shape
    for what, shape, path in (("reference", fr.ref.shape[:2], src.reference[f]),
                              ("frame", fr.test.shape[:2], src.frames[f]),
                              ("depth", None if fr.depth is None else fr.depth.shape,
                               src.depth.get(f)),
                              ("motion", None if fr.motion is None else fr.motion.shape[:2],
                               src.motion.get(f))):
        if shape is not None and shape != size:
            raise ScoreInputError(f"frame {f}: the {what} {path} is {shape[1]}x{shape[0]} but "
                                  f"the mask is {size[1]}x{size[0]}; render the frames at the "
                                  "reference's size")
    if not fr.mask.any():
        raise ScoreInputError(f"frame {f}: the mask {src.mask[f]} is empty (the character is "
                              "out of view); score a frame range where it is seen (--range)")
    return fr


def _pair(a: _Frame, b: _Frame, occ: Occlusion) -> dict | None:
    if a.depth is None or a.motion is None or b.depth is None or b.number != a.number + 1:
        return None
    flow = a.motion[..., 2:4]
    back = b.motion[..., 0:2] if b.motion is not None else None
    valid = metrics.visible_in_next(a.mask, a.depth, b.depth, flow, back, b.mask,
                                    rel_tol=occ.rel_tol, abs_tol=occ.abs_tol,
                                    round_trip_px=occ.round_trip_px)
    return {"warp_frames": metrics.pair_warping_error(a.test, b.test, flow, valid),
            "warp_reference": metrics.pair_warping_error(a.ref, b.ref, flow, valid),
            "warp_pixels": int(valid.sum())}


def _finite(x: float) -> float | None:
    return float(x) if x is not None and math.isfinite(x) else None


def score(reference: str | Path, frames: str | Path, passes: str | Path | None = None,
          json_path: str | Path | None = None, frame_range: range | None = None,
          occlusion: Occlusion | None = None) -> dict:
    """Score ``frames`` against ``reference`` (see the module doc), write the per-frame
    JSON to ``json_path`` (default ``<frames folder>/score.json``) and return the summary:
    ``psnr ssim flip warp_frames warp_reference warp_ratio psnr_slope_db_per_frame``
    (floats, NaN where undefined), ``frames``, ``pairs``, ``notes`` on frames left out
    and ``json``, the file written. In the file, NaN and infinity are written as null."""
    occ = occlusion or Occlusion()
    src = find_sources(Path(reference), Path(frames), Path(passes) if passes else None)
    out = Path(json_path) if json_path else src.folders["frames"] / JSON_NAME
    check_distinct({"--json": out}, read_files(src))  # never written over what it reads
    check_writable(out, "score JSON", folder=False)
    notes: list[str] = []
    ref_set, frame_set, mask_set = set(src.reference), set(src.frames), set(src.mask)
    for only, what in ((ref_set - frame_set, "the reference has but the frames folder lacks"),
                       (frame_set - ref_set, "the frames folder has but the reference lacks"),
                       ((ref_set & frame_set) - mask_set, "have no mask")):
        if only:
            notes.append(f"{len(only)} frame(s) {what}: {_ranges(list(only))}; left out")
    common = sorted(ref_set & frame_set & mask_set)
    if frame_range is not None:
        common = [f for f in common if f in frame_range]
    if not common:
        raise ScoreInputError(
            f"no frame number is in both {src.folders['reference']} ({_ranges(list(ref_set))})"
            f" and {src.folders['frames']} ({_ranges(list(frame_set))})"
            + (f" within {frame_range.start}-{frame_range.stop - 1}" if frame_range else "")
            + "; name the frames as the reference's (####.png, same numbers)")
    no_flow = [f for f in common if f not in src.depth or f not in src.motion]
    if no_flow:
        notes.append(f"{len(no_flow)} frame(s) lack depth or motion: {_ranges(no_flow)}; their "
                     "pairs are left out of the warping error")
    rows: list[dict] = []
    prev: _Frame | None = None
    for f in common:
        cur = _load(src, f)
        row = {"frame": f, "mask_pixels": int(cur.mask.sum()),
               "psnr": metrics.masked_psnr(cur.ref, cur.test, cur.mask),
               "ssim": metrics.masked_ssim(cur.ref, cur.test, cur.mask),
               "flip": metrics.masked_flip(cur.ref, cur.test, cur.mask),
               "warp_frames": float("nan"), "warp_reference": float("nan"), "warp_pixels": 0}
        if prev is not None:
            pair = _pair(prev, cur, occ)
            if pair is not None:
                rows[-1].update(pair)
        rows.append(row)
        prev = cur
    pairs = [r for r in rows if math.isfinite(r["warp_frames"])
             and math.isfinite(r["warp_reference"])]
    if not pairs:
        notes.append("no two consecutive frames with depth and motion: no warping error")
    warp_f = metrics.finite_mean([r["warp_frames"] for r in pairs])
    warp_r = metrics.finite_mean([r["warp_reference"] for r in pairs])
    psnrs = [r["psnr"] for r in rows]
    summary = {
        "frames": len(rows), "pairs": len(pairs),
        "psnr": metrics.finite_mean(psnrs), "ssim": metrics.finite_mean([r["ssim"] for r in rows]),
        "flip": metrics.finite_mean([r["flip"] for r in rows]),
        "psnr_slope_db_per_frame": metrics.slope_per_frame([r["frame"] for r in rows], psnrs),
        "warp_frames": warp_f, "warp_reference": warp_r,
        "warp_ratio": metrics.ratio(warp_f, warp_r),
    }
    doc = {
        "summary": {k: (_finite(v) if isinstance(v, float) else v) for k, v in summary.items()},
        "frames": [{k: (_finite(v) if isinstance(v, float) else v) for k, v in r.items()}
                   for r in rows],
        "notes": notes,
        "sources": {k: str(v) for k, v in src.folders.items()},
        "definitions": {
            "psnr": f"10*log10(1/MSE) dB, MSE over the mask's pixels and RGB, floats in [0,1]; "
                    f"mean over frames; identical frames score the cap {metrics.PSNR_CAP_DB:g}",
            "ssim": "scikit-image SSIM map (Gaussian sigma 1.5), both images black outside "
                    "the mask, averaged over the mask and RGB; mean over frames",
            "flip": "NVIDIA LDR-FLIP error map (its default 67 ppd), both images black "
                    "outside the mask, averaged over the mask; mean over frames",
            "warp": "Lai et al. 2018: per pair (t, t+1) sum M*|V_t - warp(V_t+1)|^2 / sum M, "
                    "RGB in [0,1], warp by the motion pass towards t+1 (bilinear), M = the "
                    "mask of t where the point is seen in t+1 (depth within "
                    f"{occ.rel_tol:g}*d+{occ.abs_tol:g} m, flow round trip within "
                    f"{occ.round_trip_px:g} px, the warp's 4 taps on the mask of t+1); "
                    "stored on frame t; mean over pairs",
            "warp_ratio": "warp_frames / warp_reference (the reference's own is the floor)",
            "psnr_slope_db_per_frame": "least-squares slope of per-frame PSNR over frame "
                                       "numbers",
        },
    }
    write_json_atomic(out, doc)
    return summary | {"notes": notes, "json": str(out)}


def _fmt(x: float, digits: int) -> str:
    return "n/a" if math.isnan(x) else f"{x:.{digits}f}"


def summary_line(summary: dict) -> str:
    """``score psnr: <dB> ssim: <v> flip: <v> warp_ratio: <v>`` (``n/a`` when undefined)."""
    return (f"score psnr: {_fmt(summary['psnr'], 2)} ssim: {_fmt(summary['ssim'], 4)} "
            f"flip: {_fmt(summary['flip'], 4)} warp_ratio: {_fmt(summary['warp_ratio'], 3)}")


def _frame_range(text: str) -> range:
    try:
        first, _, last = text.partition("-")
        a, b = int(first), int(last or first)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not FIRST-LAST") from None
    if b < a:
        raise argparse.ArgumentTypeError(f"{text!r}: FIRST must be <= LAST")
    return range(a, b + 1)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``score`` sub-command's options."""
    parser.add_argument("--reference", required=True,
                        help="reference: a passes folder (beauty/, mask/) or a folder of ####.png")
    parser.add_argument("--frames", required=True,
                        help="frames to score: a folder of ####.png or a restyle output folder")
    parser.add_argument("--passes", help="the shot's passes folder for mask, depth and motion "
                        "(default: the reference folder)")
    parser.add_argument("--json", help=f"per-frame JSON (default: FRAMES/{JSON_NAME})")
    parser.add_argument("--range", dest="frame_range", type=_frame_range, metavar="FIRST-LAST",
                        help="score only these frame numbers")


def run(args: argparse.Namespace) -> int:
    """Score, print the notes on stderr and the summary as the last line of stdout.
    Bad input raises :class:`ScoreInputError` (a ValueError: the CLI's exit 2)."""
    s = score(args.reference, args.frames, args.passes, args.json, args.frame_range)
    for note in s["notes"]:
        print(f"painted-skin score: {note}", file=sys.stderr)
    print(f"score: {s['frames']} frames, {s['pairs']} pairs; warping error frames "
          f"{_fmt(s['warp_frames'], 6)} reference {_fmt(s['warp_reference'], 6)}; PSNR slope "
          f"{_fmt(s['psnr_slope_db_per_frame'], 4)} dB/frame; {s['json']}")
    print(summary_line(s))
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m painted_skin.backend.evaluate.score``: the same command alone."""
    parser = argparse.ArgumentParser(prog="painted-skin score", description=DESCRIPTION)
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run(args)
    except ValueError as e:
        print(f"painted-skin: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
