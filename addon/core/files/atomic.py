"""Atomic file writes: a temp file in the same folder, then ``os.replace``.

A reader (or a resumed run) sees the old file or the new one, never half of
one; a failed write leaves nothing behind. ``os.replace`` swaps whatever sits at
the path for the new file, so every writer first asks :func:`output_target`:
a device, FIFO, socket or folder there is refused (replacing ``/dev/full`` as
root would destroy the device), and a symlink is written *through* to its target.
"""

from __future__ import annotations

import functools
import glob
import json
import os
import stat
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


def remove_stale_temps(folders: list[Path], older_than_s: float = 900.0,
                       prefix: str = "") -> int:
    """Delete the temp files killed runs left in ``folders`` (not their sub-folders):
    only names this module makes for frame files (``.<prefix>####.<ext>.<random>.tmp...``,
    ``prefix`` the frame pattern's, e.g. ``shot_``),
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
        for f in folder.glob(f".{glob.escape(prefix)}[0-9]*{TMP_MARK}*"):
            try:
                if f.is_file() and f.stat().st_mtime < now - older_than_s:
                    f.unlink()
                    n += 1
            except OSError:  # gone already (its writer finished), or not ours to delete
                pass
    return n


class UnwritableOutput(ValueError):
    """An output folder or file that cannot be written; the message names the fix."""


_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"))


def output_target(path: str | os.PathLike, what: str = "output file") -> Path:
    """The regular file an atomic write of ``path`` should replace.

    A symlink is followed to its target (the file the user meant; the link stays
    a link); a path that is, or links to, anything but a regular file (device,
    FIFO, socket, folder) is refused with :class:`UnwritableOutput`: replacing it
    would destroy it, and writing into it is not an atomic write."""
    path = Path(path)
    target = Path(os.path.realpath(path)) if path.is_symlink() else path
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        return target
    except OSError as e:  # a symlink loop, a folder we may not search
        raise UnwritableOutput(f"cannot write the {what} {str(path)!r} "
                               f"({e.strerror or e}): choose a plain file path") from None
    if stat.S_ISREG(mode):
        return target
    kind = next((k for test, k in _KINDS if test(mode)), "not a regular file")
    via = f" (a link to {str(target)!r})" if target != path else ""
    raise UnwritableOutput(f"the {what} {str(path)!r}{via} is {kind}, not a regular file: "
                           "choose a plain file path (it would be replaced, not written)")


def replace_atomic(tmp: str | os.PathLike, target: Path) -> None:
    """``os.replace(tmp, target)`` after checking ``target`` again right before (the
    path may have become a FIFO or device since :func:`output_target`)."""
    output_target(target)
    os.replace(tmp, target)


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    """Write UTF-8 ``text`` (LF line ends) to ``path`` atomically; folders made.
    A symlink is written through; a special file at ``path`` is refused."""
    path = Path(path)
    target = output_target(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_file_for(target)
    try:
        with open(tmp, "w", encoding="utf-8", newline="\n") as fh:
            fh.write(text)
        replace_atomic(tmp, target)
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


def check_writable(path: str | os.PathLike, what: str, *, folder: bool = True) -> Path:
    """Make sure ``path`` (a folder, or with ``folder=False`` a file) can be written
    before any work starts: its folder is made and a probe file written and removed.
    Raises :class:`UnwritableOutput` naming the path and the fix."""
    path = Path(path)
    # a file: a device, FIFO, socket or folder there is refused; a symlink's target's
    # folder is the one written
    target = path if folder else output_target(path, what).parent
    try:
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
    target = output_target(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_file_for(target)
    try:
        with open(tmp, "wb") as fh:
            np.save(fh, np.asarray(array), allow_pickle=False)
        replace_atomic(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
