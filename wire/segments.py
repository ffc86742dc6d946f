"""Shared-memory segments: the same-machine data path for FRAME arrays.

A client on the backend's machine may put FRAME arrays in a POSIX shared-memory
segment (a file under /dev/shm on Linux, what shm_open(3) uses) instead of the
socket. Two kinds, and a reader opens nothing else:

- ``psfd-<creator pid>-<fd>-<32 hex>``: a memfd(2) the creator sealed against
  shrinking (F_SEAL_SHRINK), opened by the reader through /proc/<pid>/fd/<fd> (same
  user). A sealed segment cannot shrink under a mapping, so the reader maps it and
  reads the passes in place (zero-copy). It has no name in /dev/shm: it goes when
  the last process holding it does, crashed clients included.
- ``ps-<creator pid>-<32 hex>``: a file in /dev/shm (where memfd is missing). Its
  owner could ftruncate it under a reader's mapping, and touching a page past the
  new end is SIGBUS, which kills the reader: a reader copies from it with pread(2)
  instead (a short read is an error for that frame). The creator holds a shared
  flock(2) on it for its whole life, so a segment whose lock can be taken
  exclusively has no live owner and may be unlinked: :func:`reap_shm`,
  :func:`sweep_shm`.
"""

from __future__ import annotations

import errno
import math
import mmap
import os
import re
import stat
import struct
import sys
import time
import uuid
import weakref

try:  # POSIX only: shared memory is offered where it exists, the socket carries the rest
    import fcntl
except ImportError:  # Windows
    fcntl = None
from collections.abc import Sequence
from typing import Any

import numpy as np

from .limits import MAX_SEGMENT_BYTES
from .messages import E_BAD_ARRAY, ProtocolError, check_array

SHM_DIR = "/dev/shm"
SHM_FILE_RE = re.compile(r"ps-[0-9]{1,10}-[0-9a-f]{32}")
SHM_MEMFD_RE = re.compile(r"psfd-([0-9]{1,10})-([0-9]{1,9})-([0-9a-f]{32})")
SHM_NAME_RE = re.compile(f"{SHM_FILE_RE.pattern}|{SHM_MEMFD_RE.pattern}")
SHM_MAGIC = b"PSKNSHM1"  # segment bytes 0..7; 8..23: the client's probe token
SHM_HEADER = 64  # segment header; slots follow
SHM_ALIGN = 64  # arrays and slot headers start at multiples of this
SHM_SWEEP_MIN_AGE = 10.0  # seconds: a sweep leaves younger segments alone (creation race)


def shm_supported() -> bool:
    """Shared memory is offered on Linux only (named segments there can be swept)."""
    return fcntl is not None and sys.platform.startswith("linux") and os.path.isdir(SHM_DIR)


def segment_path(name: str) -> str:
    """Where segment ``name`` is opened: /dev/shm/NAME, or /proc/PID/fd/FD for a memfd."""
    m = SHM_MEMFD_RE.fullmatch(name)
    if m is not None:
        return f"/proc/{m.group(1)}/fd/{m.group(2)}"
    if not SHM_FILE_RE.fullmatch(name):
        raise ProtocolError(E_BAD_ARRAY, f"shared-memory segment {name[:80]!r} is not a "
                                         "Painted Skin segment name")
    return os.path.join(SHM_DIR, name)


def memfd_sealing() -> bool:
    """memfd segments sealed against shrinking are possible here (Linux), and not
    turned off (``PAINTED_SKIN_SHM=file``: a backend that cannot open the client's
    /proc/PID/fd, e.g. in another PID namespace, still reads /dev/shm segments)."""
    if os.environ.get("PAINTED_SKIN_SHM", "").lower() == "file":
        return False
    return (hasattr(os, "memfd_create") and fcntl is not None
            and hasattr(fcntl, "F_ADD_SEALS") and os.path.isdir("/proc/self/fd"))


def _memfd_label(name: str) -> str:
    """What /proc/…/fd/N links to for the memfd of segment ``name``."""
    return f"/memfd:ps-{SHM_MEMFD_RE.fullmatch(name).group(3)} (deleted)"


def _release(mm: mmap.mmap | None, fd: int, path: str | None) -> None:
    """Finalizer: unmap (if no view is left), close, unlink (creator only)."""
    if path is not None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
    try:
        if mm is not None:
            mm.close()
    except BufferError:  # numpy views still alive: unmapped when the last one goes
        pass
    if fd >= 0:
        try:
            os.close(fd)  # drops the liveness lock
        except OSError:
            pass


class ShmSegment:
    """A shared-memory segment: :meth:`create` (writer: owns and maps it) or
    :meth:`attach` (reader).

    A reader maps a sealed memfd segment read-only and :meth:`read` gives views of it
    (it cannot shrink: no SIGBUS). A /dev/shm segment could be shrunk (``ftruncate``)
    by its owner while a view of it is read, and touching a mapped page past the new
    end is SIGBUS, which kills the reading process: a reader never maps one, and
    :meth:`read` copies with ``pread``, which just returns short there. Either way
    the worst a client can cause is an error for its own frame."""

    def __init__(self, name: str, mm: mmap.mmap | None, size: int, fd: int,
                 owner: bool) -> None:
        self.name, self.buf, self.size, self.owner = name, mm, size, owner
        self._fd = fd
        unlink = os.path.join(SHM_DIR, name) if owner and SHM_FILE_RE.fullmatch(name) else None
        self._final = weakref.finalize(self, _release, mm, fd, unlink)

    @classmethod
    def create(cls, size: int, memfd: bool | None = None) -> ShmSegment:
        """A new segment of ``size`` bytes: a memfd sealed against shrinking where the
        system has them (``memfd``: None picks), else a /dev/shm file of mode 0600,
        locked while this process lives and unlinked by :meth:`close`, garbage
        collection or interpreter exit."""
        if not 0 < size <= MAX_SEGMENT_BYTES:
            raise ValueError(f"segment size {size} outside 1..{MAX_SEGMENT_BYTES}")
        if memfd is None:
            memfd = memfd_sealing()
        if memfd:
            return cls._create_memfd(size)
        name = f"ps-{os.getpid()}-{uuid.uuid4().hex}"
        path = segment_path(name)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # liveness: see reap_shm
            os.ftruncate(fd, size)  # sparse: pages cost memory once written
            mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            os.close(fd)
            os.unlink(path)
            raise
        return cls(name, mm, size, fd, owner=True)

    @classmethod
    def _create_memfd(cls, size: int) -> ShmSegment:
        tag = uuid.uuid4().hex
        fd = os.memfd_create(f"ps-{tag}", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(fd, size)  # sparse: pages cost memory once written
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS,
                        fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
            mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            os.close(fd)
            raise
        return cls(f"psfd-{os.getpid()}-{fd}-{tag}", mm, size, fd, owner=True)

    @classmethod
    def attach(cls, name: str, max_size: int = MAX_SEGMENT_BYTES) -> ShmSegment:
        """Open an existing segment to read. Only Painted Skin segment names, regular
        files of this user, no symlinks (a memfd: the one its name says, sealed against
        shrinking, then mapped read-only); anything else is :class:`ProtocolError`
        ``bad_array``."""
        path = segment_path(name)

        def bad(text: str) -> ProtocolError:
            return ProtocolError(E_BAD_ARRAY, f"shared-memory segment {name!r}: {text}")

        memfd = SHM_MEMFD_RE.fullmatch(name) is not None
        # /proc/PID/fd/N is a link by nature: O_NOFOLLOW only for /dev/shm names
        flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | (0 if memfd else os.O_NOFOLLOW)
        try:
            fd = os.open(path, flags)
        except OSError as e:
            raise bad("not found on this machine" if e.errno == errno.ENOENT
                      else f"cannot be opened ({os.strerror(e.errno or 0)})") from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
                raise bad("not a segment of this user")
            if not 0 < st.st_size <= max_size:
                raise bad(f"size {st.st_size} outside 1..{max_size}")
            if memfd:
                # what we opened (checked on our own descriptor: the creator's fd number
                # may have been reused for anything since it sent the name)
                if os.readlink(f"/proc/self/fd/{fd}") != _memfd_label(name):
                    raise bad("not the memfd its name says")
                if not fcntl.fcntl(fd, fcntl.F_GET_SEALS) & fcntl.F_SEAL_SHRINK:
                    raise bad("not sealed against shrinking")
                mm = mmap.mmap(fd, st.st_size, mmap.MAP_SHARED, mmap.PROT_READ)
                return cls(name, mm, st.st_size, fd, owner=False)
        except OSError as e:
            os.close(fd)
            raise bad(f"cannot be read ({os.strerror(e.errno or 0)})") from None
        except BaseException:
            os.close(fd)
            raise
        return cls(name, None, st.st_size, fd, owner=False)  # readers take no lock

    @property
    def closed(self) -> bool:
        """Closed (a creator's close with views still alive leaves the mapping readable)."""
        return self.buf.closed if self.buf is not None else not self._final.alive

    def _pread(self, out: memoryview, offset: int) -> None:
        """Fill ``out`` from ``offset`` of an attached segment, or ``bad_array`` when
        the segment ends before (its owner shrank it since it was attached)."""
        done = 0
        while done < len(out):
            try:
                n = os.preadv(self._fd, [out[done:]], offset + done)
            except OSError as e:
                raise ProtocolError(E_BAD_ARRAY, f"shared-memory segment {self.name!r}: "
                                                 f"read failed ({os.strerror(e.errno or 0)})"
                                    ) from None
            if n == 0:
                raise ProtocolError(E_BAD_ARRAY, f"shared-memory segment {self.name!r} "
                                                 f"shrank below {offset + len(out)} bytes "
                                                 "while in use (its client truncated it)")
            done += n

    @property
    def in_place(self) -> bool:
        """:meth:`read` gives views of the segment (a reader's sealed memfd): valid
        while the segment is open, and rewritten when its owner rewrites the slot."""
        return self.buf is not None and not self.owner

    def read(self, dtype: str, shape: Sequence[int], offset: int) -> np.ndarray:
        """The array at ``offset`` (bounds checked first): a read-only view when
        :attr:`in_place`, else a private copy, safe however the segment's owner
        resizes it meanwhile."""
        if self.in_place:
            return self.view(dtype, shape, offset)
        src = self._check(dtype, shape, offset)
        out = np.empty(tuple(shape), dtype=np.dtype(dtype).newbyteorder("<"))
        if self.buf is not None:
            np.copyto(out, self.view(dtype, shape, offset))
        elif out.nbytes:
            self._pread(memoryview(out).cast("B"), src)
        return out

    def read_bytes(self, offset: int, n: int) -> bytes | None:
        """``n`` bytes at ``offset``; None when closed or outside the segment."""
        if self.closed or not 0 <= offset <= self.size - n:
            return None
        if self.buf is not None:
            return bytes(self.buf[offset:offset + n])
        out = bytearray(n)
        try:
            self._pread(memoryview(out), offset)
        except ProtocolError:
            return None
        return bytes(out)

    def _check(self, dtype: str, shape: Sequence[int], offset: int) -> int:
        nbytes = math.prod(shape) * np.dtype(dtype).itemsize
        if self.closed:
            raise ProtocolError(E_BAD_ARRAY, f"shared-memory segment {self.name!r} is closed")
        if offset < 0 or offset + nbytes > self.size:
            raise ProtocolError(E_BAD_ARRAY, f"{dtype}{list(shape)} at offset {offset} "
                                             f"({nbytes} bytes) is outside shared-memory segment "
                                             f"{self.name!r} of {self.size} bytes")
        if offset % np.dtype(dtype).itemsize:
            raise ProtocolError(E_BAD_ARRAY, f"offset {offset} is not aligned for {dtype}")
        return offset

    def view(self, dtype: str, shape: Sequence[int], offset: int) -> np.ndarray:
        """The array at ``offset`` in this process's mapping (read-only for a reader),
        bounds checked before the view is made (a /dev/shm reader has no mapping:
        :meth:`read`)."""
        if self.buf is None:
            raise ProtocolError(E_BAD_ARRAY, f"shared-memory segment {self.name!r} is not "
                                             "mapped here; read() copies from it")
        self._check(dtype, shape, offset)
        a = np.frombuffer(self.buf, dtype=np.dtype(dtype).newbyteorder("<"),
                          count=math.prod(shape), offset=offset)
        return a.reshape(tuple(shape))

    def read_u64(self, offset: int) -> int | None:
        """The little-endian uint64 at ``offset`` (slot generations); None if out of range."""
        raw = self.read_bytes(offset, 8)
        return None if raw is None else struct.unpack("<Q", raw)[0]

    def write_u64(self, offset: int, value: int) -> None:
        struct.pack_into("<Q", self.buf, offset, value)

    def write(self, arrays: dict[str, np.ndarray], offset: int, end: int
              ) -> dict[str, dict[str, Any]] | None:
        """Copy ``arrays`` (converted to little-endian wire dtypes) one after the other
        from ``offset``, each aligned; their placements for :func:`encode`, or None
        when they do not fit before ``end`` (nothing written then)."""
        plan, pos = [], offset
        for name, a in arrays.items():
            a = np.asarray(a)
            check_array(name, a)
            pos = -(-pos // SHM_ALIGN) * SHM_ALIGN
            plan.append((name, a, pos))
            pos += a.nbytes
        if pos > end:
            return None
        out = {}
        for name, a, at in plan:
            np.copyto(self.view(a.dtype.name, a.shape, at), a)
            out[name] = {"segment": self.name, "offset": at}
        return out

    def close(self) -> None:
        """Unmap (once no view is left) and, for the creator, unlink the name."""
        self._final()


def reap_shm(name: str, min_age_s: float = 0.0) -> bool:
    """Unlink segment ``name`` if no live process holds its lock (its creator died)
    and it is at least ``min_age_s`` old. True when it was removed."""
    if not SHM_FILE_RE.fullmatch(name):
        return False  # a memfd has no name to unlink: it goes with its last holder
    try:
        path = segment_path(name)
    except ProtocolError:
        return False
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        if (not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid()
                or time.time() - st.st_ctime < min_age_s):
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False  # its creator is alive
        try:
            os.unlink(path)
        except FileNotFoundError:
            return False
        return True
    finally:
        os.close(fd)


def sweep_shm(min_age_s: float = SHM_SWEEP_MIN_AGE) -> list[str]:
    """Unlink this user's ``ps-…`` segments whose creator is dead (crashed clients);
    the names removed. Run by every client creating a segment and by the server."""
    if not shm_supported():
        return []
    try:
        names = os.listdir(SHM_DIR)
    except OSError:
        return []
    return [n for n in names if SHM_FILE_RE.fullmatch(n) and reap_shm(n, min_age_s)]
