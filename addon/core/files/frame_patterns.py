"""Per-frame file names as render farms and Blender's render output write them.

A pattern is a file name whose one run of ``#`` is the frame, zero padded to the
run's length (``shot_####.png`` -> ``shot_0007.png``); a pattern without ``#`` gets
the frame as 4 digits appended before the extension (``shot_`` -> ``shot_0007``), as
Blender does. Managers hand these out (Flamenco's and Deadline's "output" fields), so
a shot's frames land where the rest of the pipeline already looks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

DEFAULT_DIGITS = 4
# Image files a frame pattern may name by mistake (``shot.exr`` for PNG frames): refused,
# not taken for a prefix (that would write ``shot.exr0001.png``).
IMAGE_EXTENSIONS = (".png", ".exr", ".jpg", ".jpeg", ".tif", ".tiff", ".bmp", ".tga",
                    ".webp", ".dpx", ".hdr")
_RUN = re.compile(r"#+")
MAX_DIGITS = 10  # Blender's frame numbers have at most 7 digits
MAX_NAME_BYTES = 255  # a file name's limit on Linux, macOS and Windows (NAME_MAX)


class FramePatternError(ValueError):
    """A pattern that cannot name one file per frame."""


@dataclass(frozen=True)
class FramePattern:
    """``folder/prefix<frame, digits wide>suffix``; ``folder`` may be empty."""

    folder: str
    prefix: str
    digits: int
    suffix: str

    def name(self, frame: int) -> str:
        """The file name of ``frame`` (negative frames as Blender: ``-001``)."""
        return f"{self.prefix}{frame:0{self.digits}d}{self.suffix}"

    def path(self, root: str | Path, frame: int) -> Path:
        """The file of ``frame`` under ``root`` (an absolute ``folder`` replaces it)."""
        return Path(root) / self.folder / self.name(frame)

    def glob(self) -> str:
        """A glob matching the frames' files inside ``folder`` (for "any frame yet")."""
        return f"{_glob_escape(self.prefix)}*[0-9]{_glob_escape(self.suffix)}"

    def text(self) -> str:
        """The pattern as written: ``folder/prefix####suffix``."""
        name = f"{self.prefix}{'#' * self.digits}{self.suffix}"
        return f"{self.folder}/{name}" if self.folder else name


def _glob_escape(text: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", text)


def has_frame_run(text: str) -> bool:
    """Whether ``text`` holds a ``#`` run (a pattern, not a plain path)."""
    return "#" in str(text)


def parse_frame_pattern(text: str, extension: str = "", what: str = "frame pattern"
                        ) -> FramePattern:
    """``text`` as a :class:`FramePattern`. ``extension`` (e.g. ``.png``): the file
    type written; appended when the pattern has none, refused when it names another.
    One ``#`` run, in the file name (no path separator after it)."""
    text = str(text)
    folder, sep, name = text.replace("\\", "/").rpartition("/")
    folder = text[:len(folder)] if sep else ""
    runs = _RUN.findall(text)
    if len(runs) > 1:
        raise FramePatternError(f"{what} {text!r} has {len(runs)} runs of '#': use one, "
                                "e.g. shot_####.png")
    if "#" in folder:
        raise FramePatternError(f"{what} {text!r} has a path separator after its '#' run: "
                                "the frame goes in the file name, e.g. shots/shot_####.png")
    if not name or name in (".", ".."):
        raise FramePatternError(f"{what} {text!r} names no file: end it with a file name, "
                                "e.g. shot_####.png")
    m = _RUN.search(name)
    if m:
        prefix, digits, suffix = name[:m.start()], m.end() - m.start(), name[m.end():]
    else:
        stem, dot, ext = name.rpartition(".")
        known = extension and dot and f".{ext}".lower() == extension.lower()
        if extension and dot and not known and f".{ext}".lower() in IMAGE_EXTENSIONS:
            raise FramePatternError(f"{what} {text!r} ends in .{ext}, but these frames are "
                                    f"{extension} files: end it with {extension} or no "
                                    "extension")
        prefix, digits, suffix = (stem, DEFAULT_DIGITS, f".{ext}") if known else \
            (name, DEFAULT_DIGITS, "")
    if extension:
        ext = Path(f"x{suffix}").suffix
        if not ext:
            suffix += extension
        elif ext.lower() != extension.lower():
            raise FramePatternError(f"{what} {text!r} ends in {ext}, but these frames are "
                                    f"{extension} files: end it with {extension} or no "
                                    "extension")
    if digits > MAX_DIGITS:
        raise FramePatternError(f"{what} {text!r} pads the frame to {digits} digits: use at "
                                f"most {MAX_DIGITS} '#' (Blender's frames have at most 7 "
                                "digits), e.g. shot_####.png")
    longest = len(f"{prefix}{'0' * digits}{suffix}".encode())
    if longest > MAX_NAME_BYTES:
        raise FramePatternError(f"{what} {text!r} makes file names of {longest} bytes: the "
                                f"file system takes at most {MAX_NAME_BYTES}; shorten it")
    return FramePattern(folder, prefix, digits, suffix)


def split_output_path(path: str, extension: str = "", what: str = "output path"
                      ) -> tuple[str, FramePattern | None]:
    """A render-output style path (``/farm/sh010/shot_####.png``) as its folder and
    the pattern of its file name; a path without ``#`` is a folder: ``(path, None)``."""
    if not has_frame_run(path):
        return path, None
    pattern = parse_frame_pattern(path, extension, what)
    return pattern.folder or ".", FramePattern("", pattern.prefix, pattern.digits,
                                               pattern.suffix)


def blend_relative(path: str, blend_file: str | Path) -> str:
    """Blender's ``//`` prefix (relative to the .blend's folder) made a plain path."""
    path = str(path)
    if path.startswith("//"):
        return str(Path(blend_file).resolve().parent / path[2:])
    return path
