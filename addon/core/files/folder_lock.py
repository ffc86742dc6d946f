"""Who is writing into an output folder now, so a settings check cannot race.

A run that writes a folder's frames holds a *shared* lock on ``.active.lock`` for
as long as it runs: farm chunks with the same settings share the folder. Changing
the folder's settings needs that lock *exclusively* for a moment (no other run is
writing), and the check-then-write of the settings file happens under a short
exclusive lock on ``.settings.lock``, so two runs cannot both see "no frames yet"
and both go on. ``fcntl.flock`` locks die with their process (a killed run leaves
no stale lock). Where ``fcntl`` is missing (Windows) runs are not guarded.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None

ACTIVE_LOCK = ".active.lock"
SETTINGS_LOCK = ".settings.lock"


class FolderRun:
    """The shared lock a run holds on its output folder; :meth:`close` to release."""

    def __init__(self, fd: int | None) -> None:
        self._fd = fd
        self._tags: list[int] = []  # shared locks on what this run uses (hold_tag)

    def close(self) -> None:
        for fd in self._tags:
            os.close(fd)
        self._tags = []
        if self._fd is not None:
            os.close(self._fd)  # releases the flock
            self._fd = None

    __del__ = close  # a run that forgot to close still lets go when it is dropped

    def __enter__(self) -> FolderRun:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def _open(path: Path) -> int:
    return os.open(path, os.O_RDWR | os.O_CREAT, 0o666)


@contextlib.contextmanager
def _settings_mutex(folder: Path) -> Iterator[None]:
    fd = _open(folder / SETTINGS_LOCK)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # held for a check and a small write only
        yield
    finally:
        os.close(fd)


def update_settings(folder: Path, update: Callable[[], None]) -> None:
    """``update()`` under the settings lock: a check-then-write of the settings file
    that a run starting at the same moment cannot interleave with."""
    if fcntl is None:
        update()
        return
    with _settings_mutex(folder):
        update()


def _tag_file(folder: Path, tag: str) -> Path:
    return folder / f".uses-{hashlib.blake2b(tag.encode(), digest_size=8).hexdigest()}.lock"


def hold_tag(folder: Path, run: FolderRun, tag: str) -> None:
    """Mark ``run`` as using ``tag`` (e.g. a model version) until it closes."""
    if fcntl is None or run._fd is None:
        return
    fd = _open(_tag_file(folder, tag))
    fcntl.flock(fd, fcntl.LOCK_SH)
    run._tags.append(fd)


def tag_in_use(folder: Path, tag: str) -> bool:
    """Whether a run writing ``folder`` now holds ``tag`` (:func:`hold_tag`). Its own
    lock file, not the run's: a shared lock turned exclusive would be dropped, not
    kept, when the conversion fails."""
    path = _tag_file(folder, tag)
    if fcntl is None or not path.exists():
        return False
    fd = _open(path)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def join_run(folder: Path, same_settings: Callable[[], bool],
             write_settings: Callable[[], None], busy: Callable[[], Exception]) -> FolderRun:
    """Start a run in ``folder`` (which exists): under the settings lock, if
    ``same_settings()`` is false and another run is writing the folder now, raise
    ``busy()``; else call ``write_settings()`` (which does the rest of the settings
    check and may raise) and return the held shared lock."""
    if fcntl is None:
        write_settings()
        return FolderRun(None)
    with _settings_mutex(folder):
        fd = _open(folder / ACTIVE_LOCK)
        try:
            if not same_settings():
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    raise busy() from None
            write_settings()
            fcntl.flock(fd, fcntl.LOCK_SH)  # only ours is held now: does not wait
        except BaseException:
            os.close(fd)
            raise
    return FolderRun(fd)
