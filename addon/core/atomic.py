"""Atomic file writes: a temp file in the same folder, then ``os.replace``.

A reader (or a resumed run) sees the old file or the new one, never half of
one; a failed write leaves nothing behind.
"""

from __future__ import annotations

import functools
import json
import os
import tempfile
from pathlib import Path

TMP_MARK = ".tmp"  # in every temp file's name: a killed run's leftovers are found by it


@functools.cache
def _umask() -> int:
    """The process umask, read without changing it where the OS allows (thread-safe)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)  # elsewhere: the classic read-by-setting, once
    os.umask(mask)
    return mask


def plain_mode(folder: bool = False) -> int:
    """The permissions a plain ``open`` / ``mkdir`` would give under the umask
    (``mkstemp``/``mkdtemp`` give 0600/0700: a farm's other users could not read)."""
    return (0o777 if folder else 0o666) & ~_umask()


def temp_file_for(path: Path, suffix: str = "") -> str:
    """A new empty temp file beside ``path`` with the permissions a plain ``open``
    would give (``mkstemp`` makes it 0600: a farm's other users could not read the
    results). Returns its name; the caller fills it and ``os.replace``-s it."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.",
                               suffix=f"{TMP_MARK}{suffix}")
    os.close(fd)
    try:
        os.chmod(tmp, plain_mode())
    except OSError:  # a filesystem without modes: keep what it gave
        pass
    return tmp


def remove_stale_temps(folders: list[Path], older_than_s: float = 900.0) -> int:
    """Delete the temp files killed runs left in ``folders`` (not their sub-folders):
    only names this module makes for frame files (``.####.<ext>.<random>.tmp...``),
    not touched for ``older_than_s``, measured against a probe file's time (the file
    server's clock, not this machine's: a farm's clocks may differ). The age test
    spares files other processes (farm chunks) are writing now. Returns how many."""
    n = 0
    for folder in folders:
        if not folder.is_dir():
            continue
        probe = Path(temp_file_for(folder / ".clock"))
        try:
            now = probe.stat().st_mtime
        finally:
            probe.unlink(missing_ok=True)
        for f in folder.glob(f".[0-9][0-9][0-9][0-9]*{TMP_MARK}*"):
            try:
                if f.is_file() and f.stat().st_mtime < now - older_than_s:
                    f.unlink()
                    n += 1
            except OSError:  # gone already (its writer finished), or not ours to delete
                pass
    return n


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    """Write UTF-8 ``text`` (LF line ends) to ``path`` atomically; folders made."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_file_for(path)
    try:
        with open(tmp, "w", encoding="utf-8", newline="\n") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_json_atomic(path: str | os.PathLike, data: object, indent: int = 2) -> Path:
    """Write ``data`` as JSON to ``path`` atomically (folders made as needed)."""
    return write_text_atomic(path, json.dumps(data, indent=indent, default=float) + "\n")


def read_json(path: str | os.PathLike, what: str) -> dict:
    """Read a JSON object the project wrote, with a clear error if it is damaged."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"{what} {path} is unreadable ({e}): delete it to start over") from None
    if not isinstance(data, dict):
        raise ValueError(f"{what} {path} is not a JSON object: delete it to start over")
    return data


class UnwritableOutput(ValueError):
    """An output folder or file that cannot be written; the message names the fix."""


def check_writable(path: str | os.PathLike, what: str, *, folder: bool = True) -> Path:
    """Make sure ``path`` (a folder, or with ``folder=False`` a file) can be written
    before any work starts: its folder is made and a probe file written and removed.
    Raises :class:`UnwritableOutput` naming the path and the fix."""
    path = Path(path)
    target = path if folder else path.parent
    try:
        if not folder and path.is_dir():
            raise IsADirectoryError(21, "is a folder")
        target.mkdir(parents=True, exist_ok=True)
        Path(temp_file_for(target / ".write-test")).unlink()
    except OSError as e:
        why = e.strerror or str(e)
        raise UnwritableOutput(f"cannot write the {what} {str(path)!r} ({why}): choose a "
                               "folder you can write to") from None
    return path


def write_npy_atomic(path: str | os.PathLike, array) -> Path:
    """Save a numpy array (``np.save`` format, no pickles) to ``path`` atomically."""
    import numpy as np

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_file_for(path)
    try:
        with open(tmp, "wb") as fh:
            np.save(fh, np.asarray(array), allow_pickle=False)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
