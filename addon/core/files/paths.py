"""Paths a command reads and writes, checked before the work: an output that is one
of the inputs (or another output) would be overwritten by the run itself, e.g.
``--report`` naming the mocap clip replaces the clip with JSON."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from pathlib import Path

PathLike = str | os.PathLike
_REPO = Path(__file__).resolve().parents[3]  # addon/core/files -> the repository root


class AliasedPaths(ValueError):
    """An output names the same file or folder as an input or another output."""


def same_path(a: PathLike, b: PathLike) -> bool:
    """Whether ``a`` and ``b`` name one file: the same inode when both exist (hard
    links and symlinks included), else the same resolved path."""
    try:
        sa, sb = os.stat(a), os.stat(b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def check_distinct(outputs: Mapping[str, PathLike | None],
                   inputs: Mapping[str, PathLike | None] | None = None) -> None:
    """Raise :class:`AliasedPaths` when an output is one of ``inputs`` or another of
    ``outputs``. Keys are what the user typed (e.g. ``"--report"``); ``None`` values
    (options not given) are skipped."""
    outs = [(k, v) for k, v in outputs.items() if v is not None and str(v) != ""]
    ins = [(k, v) for k, v in (inputs or {}).items() if v is not None and str(v) != ""]
    for i, (name, path) in enumerate(outs):
        for other, opath in ins:
            if same_path(path, opath):
                raise AliasedPaths(f"{name} {str(path)!r} is the same file as the input "
                                   f"{other} {str(opath)!r}: the run would overwrite its own "
                                   f"input; give {name} another path")
        for other, opath in outs[i + 1:]:
            if same_path(path, opath):
                raise AliasedPaths(f"{name} {str(path)!r} and {other} {str(opath)!r} are the "
                                   f"same file: one would overwrite the other; give them "
                                   "different paths")


@contextlib.contextmanager
def removed_if_left_empty(folder: PathLike, always: bool = False) -> Iterator[Path]:
    """Run a block that may create ``folder``; if the block fails (with ``always``: in
    any case, e.g. a probe that only checks the folder can be made), the folders it
    created (``folder`` and missing parents) are removed again when still empty, so no
    empty output folder is left behind."""
    folder = Path(folder)
    new: list[Path] = []
    p = folder.absolute()
    while not p.exists() and p != p.parent:
        new.append(p)
        p = p.parent
    try:
        yield folder
    except BaseException:
        _remove_empty(new)
        raise
    if always:
        _remove_empty(new)


def _remove_empty(folders: list[Path]) -> None:
    for p in folders:  # deepest first
        try:
            p.rmdir()
        except OSError:  # not empty (work was done) or not ours to remove
            break


def files_digest(paths: list[Path]) -> str:
    """A digest of files' names and bytes (sorted by name): what a result was made
    from (a look records its keyframes'), the same on any machine."""
    import hashlib

    h = hashlib.blake2b(digest_size=16)
    for p in sorted(Path(x) for x in paths):
        h.update(f"\0{p.name}\0".encode())
        with open(p, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    return "blake2b:" + h.hexdigest()


def shared_data(relative: str) -> Path | None:
    """A file of the project's shared real data (mocap clips, characters: ../shared/data
    beside the repository, or ``$PAINTED_SKIN_SHARED/data``), or None where it is absent:
    benchmarks and held-out sets use it when a checkout has it, and skip it cleanly
    otherwise (an installed extension never has it)."""
    root = Path(os.environ.get("PAINTED_SKIN_SHARED", _REPO.parent / "shared")) / "data"
    path = root / relative
    return path if path.is_file() else None
