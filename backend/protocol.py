"""The Painted Skin wire protocol, shared by the Blender client and the backend.

Importable without bpy, torch or even pyzmq: it only turns messages into lists
of byte buffers and back (docs/protocol.md describes it for other clients).

A message is a ZeroMQ multipart: frame 0 is a UTF-8 JSON header, frames 1..n
are raw array buffers (C order, little-endian) described by ``header["arrays"]``
as ``{"name", "dtype", "shape"}`` in the same order. Arrays are sent without a
copy (``copy=False``) and received as ``np.frombuffer`` views. Nothing is ever
pickled. Every size is checked against the caps *before* anything is allocated,
and a bad message raises :class:`ProtocolError` (code + text) — the server turns
it into an ``error`` reply and keeps serving.

Same-machine option (Linux): FRAME arrays may instead lie in a POSIX shared-memory
segment the client owns (:class:`ShmSegment`); their descriptor then carries
``"shm": {"segment", "offset"}`` and no buffer frame follows for them.
"""

from __future__ import annotations

import errno
import ipaddress
import json
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
from dataclasses import dataclass, field
from typing import Any

import numpy as np

PROTOCOL_VERSION = 1

# Caps (bytes unless said). A 4096² float32 RGBA pass is 268 MB; refuse more.
MAX_HEADER_BYTES = 64 * 1024
MAX_ARRAYS = 32
MAX_ARRAY_BYTES = 256 * 1024 * 1024
MAX_MESSAGE_BYTES = 1024 * 1024 * 1024
MAX_SIDE = 8192  # image height/width
MAX_NDIM = 4
DTYPES = {"uint8", "uint16", "int32", "float16", "float32"}

# Client -> server
PING, STATUS, OPEN, FRAME, CANCEL, CLOSE = "ping", "status", "open", "frame", "cancel", "close"
# Server -> client
PONG, STATUS_REPLY, OPENED, PROGRESS, RESULT, ERROR, CLOSED = (
    "pong", "status_reply", "opened", "progress", "result", "error", "closed")
# Worker <-> broker (Paranoid Pirate); client envelopes travel inside.
READY, HEARTBEAT, DISCONNECT = "ready", "heartbeat", "disconnect"

CLIENT_TYPES = {PING, STATUS, OPEN, FRAME, CANCEL, CLOSE}
SERVER_TYPES = {PONG, STATUS_REPLY, OPENED, PROGRESS, RESULT, ERROR, CLOSED}
WORKER_TYPES = {READY, HEARTBEAT, DISCONNECT}
ALL_TYPES = CLIENT_TYPES | SERVER_TYPES | WORKER_TYPES

# Error codes carried by ``error`` replies.
E_BAD_MESSAGE = "bad_message"
E_VERSION = "version"
E_TOO_BIG = "too_big"
E_UNKNOWN_TYPE = "unknown_type"
E_NO_SESSION = "no_session"
E_BAD_ARRAY = "bad_array"
E_BUSY = "busy"
E_INTERNAL = "internal"
E_CANCELLED = "cancelled"


class ProtocolError(ValueError):
    """A message that breaks the protocol; ``code`` is one of the E_* constants."""

    def __init__(self, code: str, message: str, ref: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.ref = ref


@dataclass
class Message:
    """A decoded message: its type, the whole header and its arrays (read-only views)."""

    type: str
    header: dict[str, Any]
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    shm: list[ShmRef] = field(default_factory=list)  # arrays in shared memory, unresolved

    @property
    def session(self) -> str | None:
        return self.header.get("session")

    @property
    def frame(self) -> int | None:
        return self.header.get("frame")

    @property
    def id(self) -> str | None:
        return self.header.get("id")


def new_id() -> str:
    return uuid.uuid4().hex


def _check_array(name: str, a: np.ndarray) -> None:
    if a.dtype.name not in DTYPES:
        raise ProtocolError(E_BAD_ARRAY, f"array {name!r}: dtype {a.dtype} is not one of "
                                         f"{sorted(DTYPES)}")
    if a.ndim > MAX_NDIM or any(d > MAX_SIDE * MAX_SIDE for d in a.shape):
        raise ProtocolError(E_BAD_ARRAY, f"array {name!r}: shape {a.shape} is too large")
    if a.nbytes > MAX_ARRAY_BYTES:
        raise ProtocolError(E_TOO_BIG, f"array {name!r}: {a.nbytes} bytes > {MAX_ARRAY_BYTES}")


def encode(mtype: str, arrays: dict[str, np.ndarray] | None = None, *,
           placements: dict[str, dict[str, Any]] | None = None, **fields: Any
           ) -> list[bytes | memoryview]:
    """Frames of one message: header JSON, then each array's buffer (no copy
    for C-contiguous little-endian arrays).

    ``placements`` maps array names to ``{"segment", "offset"}`` where the caller
    already wrote them (:meth:`ShmSegment.write`): those get a ``shm`` descriptor
    and no buffer frame."""
    if mtype not in ALL_TYPES:
        raise ProtocolError(E_UNKNOWN_TYPE, f"unknown message type {mtype!r}")
    arrays = arrays or {}
    if len(arrays) > MAX_ARRAYS:
        raise ProtocolError(E_TOO_BIG, f"{len(arrays)} arrays > {MAX_ARRAYS}")
    descs, bufs = [], []
    for name, a in arrays.items():
        a = np.asarray(a)
        if placements and name in placements:  # already in shared memory: describe only
            _check_array(name, a)
            descs.append({"name": name, "dtype": a.dtype.name, "shape": list(a.shape),
                          "shm": placements[name]})
            continue
        if a.dtype.byteorder == ">":
            a = a.astype(a.dtype.newbyteorder("<"))
        a = np.ascontiguousarray(a)
        _check_array(name, a)
        descs.append({"name": name, "dtype": a.dtype.name, "shape": list(a.shape)})
        bufs.append(memoryview(a).cast("B") if a.size else b"")
    header = {"v": PROTOCOL_VERSION, "type": mtype, **fields, "arrays": descs}
    head = json.dumps(header, separators=(",", ":"), allow_nan=False).encode()
    if len(head) > MAX_HEADER_BYTES:
        raise ProtocolError(E_TOO_BIG, f"header {len(head)} bytes > {MAX_HEADER_BYTES}")
    return [head, *bufs]


def _buffer(frame: Any) -> memoryview:
    """bytes / memoryview / zmq.Frame -> memoryview without copying."""
    buf = getattr(frame, "buffer", frame)
    return memoryview(buf).cast("B") if not isinstance(buf, memoryview) else buf.cast("B")


def decode(frames: Sequence[Any], expect: set[str] | None = None,
           allow_shm: bool = False) -> Message:
    """Validate and decode the frames of one message (arrays are zero-copy views).

    ``expect`` restricts the accepted message types (a server only takes
    client messages). Shared-memory descriptors are refused unless ``allow_shm``;
    then they are checked (name pattern, caps) and listed in ``Message.shm`` for
    the receiver to resolve (:meth:`ShmSegment.view`). Raises
    :class:`ProtocolError` on anything malformed.
    """
    if not frames:
        raise ProtocolError(E_BAD_MESSAGE, "empty message")
    head = _buffer(frames[0])
    if len(head) > MAX_HEADER_BYTES:
        raise ProtocolError(E_TOO_BIG, f"header {len(head)} bytes > {MAX_HEADER_BYTES}")
    try:
        header = json.loads(bytes(head).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ProtocolError(E_BAD_MESSAGE, f"header is not UTF-8 JSON: {e}") from None
    if not isinstance(header, dict):
        raise ProtocolError(E_BAD_MESSAGE, "header must be a JSON object")
    ref = header.get("id") if isinstance(header.get("id"), str) else None
    if header.get("v") != PROTOCOL_VERSION:
        raise ProtocolError(E_VERSION, f"protocol version {header.get('v')!r} is not "
                                       f"{PROTOCOL_VERSION}: update the client or the backend",
                            ref)
    mtype = header.get("type")
    if not isinstance(mtype, str) or mtype not in ALL_TYPES or (expect and mtype not in expect):
        raise ProtocolError(E_UNKNOWN_TYPE, f"unexpected message type {mtype!r}", ref)
    descs = header.get("arrays", [])
    if not isinstance(descs, list) or len(descs) > MAX_ARRAYS:
        raise ProtocolError(E_BAD_MESSAGE, "header 'arrays' must be a list of at most "
                                           f"{MAX_ARRAYS} descriptors", ref)
    inline = sum(1 for d in descs if not (isinstance(d, dict) and "shm" in d))
    if inline != len(frames) - 1:
        raise ProtocolError(E_BAD_MESSAGE, f"{inline} arrays described, "
                                           f"{len(frames) - 1} sent", ref)
    total = len(head)
    arrays: dict[str, np.ndarray] = {}
    shm: list[ShmRef] = []
    rest = iter(frames[1:])
    for desc in descs:
        name, dtype, shape = _desc(desc, ref)
        nbytes = math.prod(shape) * np.dtype(dtype).itemsize  # Python ints: no overflow
        if nbytes > MAX_ARRAY_BYTES:
            raise ProtocolError(E_TOO_BIG, f"array {name!r}: {nbytes} bytes > "
                                           f"{MAX_ARRAY_BYTES}", ref)
        if name in arrays or any(r.name == name for r in shm):
            raise ProtocolError(E_BAD_MESSAGE, f"array {name!r} sent twice", ref)
        if "shm" in desc:
            if not allow_shm:
                raise ProtocolError(E_BAD_ARRAY, f"array {name!r}: shared memory is not "
                                                 "accepted here (send the array inline)", ref)
            segment, offset = _shm_desc(desc["shm"], name, ref)
            total += nbytes
            if total > MAX_MESSAGE_BYTES:
                raise ProtocolError(E_TOO_BIG, f"message over {MAX_MESSAGE_BYTES} bytes", ref)
            shm.append(ShmRef(name, dtype, shape, segment, offset, nbytes))
            continue
        buf = _buffer(next(rest))
        if len(buf) != nbytes:
            raise ProtocolError(E_BAD_ARRAY, f"array {name!r}: {len(buf)} bytes sent, "
                                             f"{nbytes} declared for {dtype}{list(shape)}", ref)
        total += nbytes
        if total > MAX_MESSAGE_BYTES:
            raise ProtocolError(E_TOO_BIG, f"message over {MAX_MESSAGE_BYTES} bytes", ref)
        arr = np.frombuffer(buf, dtype=np.dtype(dtype).newbyteorder("<"))
        arrays[name] = arr.reshape(shape)
    return Message(mtype, header, arrays, shm)


def _shm_desc(value: Any, name: str, ref: str | None) -> tuple[str, int]:
    if not isinstance(value, dict):
        raise ProtocolError(E_BAD_ARRAY, f"array {name!r}: 'shm' must be an object", ref)
    segment, offset = value.get("segment"), value.get("offset")
    if not isinstance(segment, str) or not SHM_NAME_RE.fullmatch(segment):
        raise ProtocolError(E_BAD_ARRAY, f"array {name!r}: shared-memory segment name must "
                                         f"match {SHM_NAME_RE.pattern}", ref)
    if (not isinstance(offset, int) or isinstance(offset, bool)
            or not 0 <= offset <= MAX_SEGMENT_BYTES):
        raise ProtocolError(E_BAD_ARRAY, f"array {name!r}: bad shared-memory offset", ref)
    return segment, offset


def _desc(desc: Any, ref: str | None) -> tuple[str, str, tuple[int, ...]]:
    if not isinstance(desc, dict):
        raise ProtocolError(E_BAD_MESSAGE, "array descriptor must be an object", ref)
    name, dtype, shape = desc.get("name"), desc.get("dtype"), desc.get("shape")
    if not isinstance(name, str) or not name or len(name) > 128:
        raise ProtocolError(E_BAD_MESSAGE, "array name must be a short string", ref)
    if dtype not in DTYPES:
        raise ProtocolError(E_BAD_ARRAY, f"array {name!r}: dtype {dtype!r} not allowed "
                                         f"({sorted(DTYPES)})", ref)
    if (not isinstance(shape, list) or len(shape) > MAX_NDIM
            or not all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d for d in shape)):
        raise ProtocolError(E_BAD_ARRAY, f"array {name!r}: bad shape {shape!r}", ref)
    if any(d > MAX_ARRAY_BYTES for d in shape):
        raise ProtocolError(E_TOO_BIG, f"array {name!r}: dimension over {MAX_ARRAY_BYTES}", ref)
    if len(shape) >= 2 and (shape[0] > MAX_SIDE or shape[1] > MAX_SIDE):
        raise ProtocolError(E_TOO_BIG, f"array {name!r}: image {shape[1]}x{shape[0]} over "
                                       f"{MAX_SIDE} pixels a side", ref)
    return name, dtype, tuple(shape)


# Routing frames a ROUTER adds in front of a message (identity, optional delimiter,
# broker envelopes) besides the header and the arrays.
MAX_ROUTING_PARTS = 4


def recv_capped(sock: Any, flags: int = 0) -> list[Any]:
    """Receive one multipart message part by part, enforcing the caps as it goes.

    ``MAXMSGSIZE`` on the socket bounds each part; this bounds the number of
    parts and their total, so a peer cannot make the process hold an unbounded
    message. An oversized message is drained (its parts dropped as they come)
    and reported as :class:`ProtocolError` ``too_big`` with the routing frames
    in ``err.routing`` so the caller can reply. Raises ``zmq.Again`` like
    ``recv_multipart`` when nothing is waiting.
    """
    import zmq

    first = sock.recv(flags, copy=False)
    frames, total, over = [first], len(first.buffer), False
    max_parts = MAX_ARRAYS + 1 + MAX_ROUTING_PARTS
    while sock.getsockopt(zmq.RCVMORE):
        part = sock.recv(copy=False)
        total += len(part.buffer)
        if over or len(frames) >= max_parts or total > MAX_MESSAGE_BYTES + MAX_HEADER_BYTES:
            if not over:
                over = True
                del frames[MAX_ROUTING_PARTS:]  # keep what routing needs, drop the rest
            continue
        frames.append(part)
    if over:
        err = ProtocolError(E_TOO_BIG, f"message over {max_parts} parts or "
                                       f"{MAX_MESSAGE_BYTES} bytes: refused")
        err.routing = frames  # type: ignore[attr-defined]
        raise err
    return frames


def error_frames(err: ProtocolError, session: str | None = None) -> list[bytes | memoryview]:
    """The ``error`` reply for a rejected message (long texts cut so the reply
    header always fits under the cap)."""
    ref = err.ref[:128] if isinstance(err.ref, str) else None
    sess = session[:128] if isinstance(session, str) else None
    return encode(ERROR, code=err.code, message=str(err)[:2000], ref=ref, session=sess)


# ---- shared memory: the same-machine data path ----------------------------------------------
#
# A client on the backend's machine may put FRAME arrays in a POSIX shared-memory
# segment (a file under /dev/shm on Linux, what shm_open(3) uses) instead of the
# socket. Names are ``ps-<creator pid>-<32 hex>``; a reader opens nothing else. The
# creator holds a shared flock(2) on the segment for its whole life, so a segment
# whose lock can be taken exclusively has no live owner (the kernel drops locks of
# dead processes, SIGKILL included) and may be unlinked: :func:`reap_shm`,
# :func:`sweep_shm`.

SHM_DIR = "/dev/shm"
SHM_NAME_RE = re.compile(r"ps-[0-9]{1,10}-[0-9a-f]{32}")
SHM_MAGIC = b"PSKNSHM1"  # segment bytes 0..7; 8..23: the client's probe token
SHM_HEADER = 64  # segment header; slots follow
SHM_ALIGN = 64  # arrays and slot headers start at multiples of this
MAX_SEGMENT_BYTES = 16 * MAX_ARRAY_BYTES  # 4 GiB
SHM_SWEEP_MIN_AGE = 10.0  # seconds: a sweep leaves younger segments alone (creation race)


@dataclass
class ShmRef:
    """An array descriptor pointing into a shared-memory segment (not yet mapped)."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    segment: str
    offset: int
    nbytes: int


def shm_supported() -> bool:
    """Shared memory is offered on Linux only (named segments there can be swept)."""
    return fcntl is not None and sys.platform.startswith("linux") and os.path.isdir(SHM_DIR)


def is_local_endpoint(endpoint: str) -> bool:
    """ipc://, inproc:// or tcp:// to a loopback address (no pyzmq needed)."""
    if endpoint.startswith(("ipc://", "inproc://")):
        return True
    m = re.match(r"^tcp://(?:[^;]+;)?(\[[^\]]*\]|[^:]+):", endpoint)
    if not m:
        return False
    return is_loopback_host(m.group(1))


def is_loopback_host(host: str) -> bool:
    host = host.strip("[]").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _shm_path(name: str) -> str:
    if not SHM_NAME_RE.fullmatch(name):
        raise ProtocolError(E_BAD_ARRAY, f"shared-memory segment {name[:80]!r} is not a "
                                         "Painted Skin segment name")
    return os.path.join(SHM_DIR, name)


def _release(mm: mmap.mmap, fd: int, path: str | None) -> None:
    """Finalizer: unmap (if no view is left), close, unlink (creator only)."""
    if path is not None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
    try:
        mm.close()
    except BufferError:  # numpy views still alive: unmapped when the last one goes
        pass
    if fd >= 0:
        try:
            os.close(fd)  # drops the liveness lock
        except OSError:
            pass


class ShmSegment:
    """A mapped shared-memory segment: :meth:`create` (writer, owns and unlinks it)
    or :meth:`attach` (reader: read-only mapping, ``PROT_READ``)."""

    def __init__(self, name: str, mm: mmap.mmap, size: int, fd: int, owner: bool) -> None:
        self.name, self.buf, self.size, self.owner = name, mm, size, owner
        self._final = weakref.finalize(self, _release, mm, fd,
                                       os.path.join(SHM_DIR, name) if owner else None)

    @classmethod
    def create(cls, size: int) -> ShmSegment:
        """A new segment of ``size`` bytes, mode 0600, locked while this process lives;
        unlinked by :meth:`close`, garbage collection or interpreter exit."""
        if not 0 < size <= MAX_SEGMENT_BYTES:
            raise ValueError(f"segment size {size} outside 1..{MAX_SEGMENT_BYTES}")
        name = f"ps-{os.getpid()}-{uuid.uuid4().hex}"
        path = _shm_path(name)
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
    def attach(cls, name: str, max_size: int = MAX_SEGMENT_BYTES) -> ShmSegment:
        """Map an existing segment read-only. Only ``ps-…`` names, regular files of
        this user, no symlinks; anything else is :class:`ProtocolError` ``bad_array``."""
        path = _shm_path(name)

        def bad(text: str) -> ProtocolError:
            return ProtocolError(E_BAD_ARRAY, f"shared-memory segment {name!r}: {text}")

        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError as e:
            raise bad("not found on this machine" if e.errno == errno.ENOENT
                      else f"cannot be opened ({os.strerror(e.errno or 0)})") from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
                raise bad("not a segment of this user")
            if not 0 < st.st_size <= max_size:
                raise bad(f"size {st.st_size} outside 1..{max_size}")
            mm = mmap.mmap(fd, st.st_size, mmap.MAP_SHARED, mmap.PROT_READ)
        finally:
            os.close(fd)  # the mapping stays; readers hold no lock
        return cls(name, mm, st.st_size, -1, owner=False)

    @property
    def closed(self) -> bool:
        """Unmapped (a close with views still alive leaves the mapping readable)."""
        return self.buf.closed

    def view(self, dtype: str, shape: Sequence[int], offset: int) -> np.ndarray:
        """The array at ``offset`` — bounds checked before the view is made
        (read-only for an attached segment)."""
        count = math.prod(shape)
        nbytes = count * np.dtype(dtype).itemsize
        if self.closed:
            raise ProtocolError(E_BAD_ARRAY, f"shared-memory segment {self.name!r} is closed")
        if offset < 0 or offset + nbytes > self.size:
            raise ProtocolError(E_BAD_ARRAY, f"{dtype}{list(shape)} at offset {offset} "
                                             f"({nbytes} bytes) is outside shared-memory segment "
                                             f"{self.name!r} of {self.size} bytes")
        if offset % np.dtype(dtype).itemsize:
            raise ProtocolError(E_BAD_ARRAY, f"offset {offset} is not aligned for {dtype}")
        a = np.frombuffer(self.buf, dtype=np.dtype(dtype).newbyteorder("<"), count=count,
                          offset=offset)
        return a.reshape(tuple(shape))

    def read_u64(self, offset: int) -> int | None:
        """The little-endian uint64 at ``offset`` (slot generations); None if out of range."""
        if self.closed or not 0 <= offset <= self.size - 8:
            return None
        return struct.unpack_from("<Q", self.buf, offset)[0]

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
            _check_array(name, a)
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
    try:
        path = _shm_path(name)
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
    return [n for n in names if SHM_NAME_RE.fullmatch(n) and reap_shm(n, min_age_s)]
