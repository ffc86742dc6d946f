"""Reading the PNG and EXR files of passes and frames folders without bpy.

PNG through Pillow (8-bit, and 16-bit grey); a 16-bit colour PNG through pypng, since
Pillow silently drops such a file to 8 bits. EXR through the PyPI ``OpenEXR`` package.
Every array has the image's top row first, as the passes writer stores them.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


class UnreadableImage(ValueError):
    """An image file that cannot be read; the message names the file and the fix."""


def _png_header(path: Path) -> tuple[int, int]:
    """(bit depth, colour type) from the PNG's IHDR chunk."""
    with open(path, "rb") as fh:
        head = fh.read(26)
    if len(head) < 26 or head[:8] != _PNG_SIGNATURE or head[12:16] != b"IHDR":
        raise UnreadableImage(f"{path} is not a PNG file: re-render that frame")
    return head[24], head[25]


def _read_png16_colour(path: Path) -> np.ndarray:
    import png  # pypng

    w, h, rows, info = png.Reader(filename=os.fspath(path)).asDirect()
    planes = info["planes"]
    return np.vstack([np.asarray(r, np.uint16) for r in rows]).reshape(h, w, planes)


def read_png(path: str | os.PathLike) -> np.ndarray:
    """A PNG as uint8 or uint16 (its own bit depth): (H, W) grey, else (H, W, C) with
    C = 2 (grey + alpha), 3 or 4; palette images come back as RGB(A)."""
    from PIL import Image

    path = Path(path)
    try:
        depth, colour = _png_header(path)
        if depth == 16 and colour in (2, 4, 6):
            return _read_png16_colour(path)
        with Image.open(path) as im:
            if im.mode == "P":
                im = im.convert("RGBA" if "transparency" in im.info else "RGB")
            elif im.mode == "1":
                im = im.convert("L")
            a = np.asarray(im)
    except UnreadableImage:
        raise
    except Exception as e:  # a truncated or damaged file: Pillow's and pypng's many errors
        raise UnreadableImage(f"cannot read {path} ({e}): re-render that frame") from None
    if a.dtype.kind == "i" or a.dtype.kind == "u" and a.dtype.itemsize > 1:
        a = a.astype(np.uint16)  # Pillow's 16-bit grey modes (I;16, I)
    return a


def read_exr(path: str | os.PathLike, channels: Sequence[str]) -> np.ndarray:
    """The named channels of an EXR's first part as float32 (H, W, len(channels))."""
    import OpenEXR

    path = Path(path)
    try:
        with OpenEXR.File(os.fspath(path), separate_channels=True) as f:
            have = f.channels()
            missing = [c for c in channels if c not in have]
            if missing:
                raise UnreadableImage(f"{path} has no channel(s) {', '.join(missing)} "
                                      f"(it has {', '.join(sorted(have))}): re-render the "
                                      "passes with this version")
            return np.stack([np.asarray(have[c].pixels, np.float32) for c in channels], -1)
    except UnreadableImage:
        raise
    except Exception as e:  # OpenEXR raises plain RuntimeErrors for damaged files
        raise UnreadableImage(f"cannot read {path} ({e}): re-render that frame") from None
