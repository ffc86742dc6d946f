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
MAX_HEADER_DEPTH = 32  # nested lists/objects in a header
MAX_INT_DIGITS = 40  # digits of an integer in a header (a uint64 has 20)
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


def _parse_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise ProtocolError(E_BAD_MESSAGE, f"header has an integer of {len(text)} digits (at "
                                           f"most {MAX_INT_DIGITS})")
    return int(text)


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ProtocolError(E_BAD_MESSAGE, f"header number {text[:40]} is out of range")
    return value


def _parse_constant(text: str) -> float:
    raise ProtocolError(E_BAD_MESSAGE, f"header has {text}, which JSON does not allow")


def _depth_over(value: Any, limit: int) -> bool:
    """Whether ``value`` nests lists/objects more than ``limit`` deep (iterative: a
    recursive walk is what the limit guards against)."""
    stack = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        items = v.values() if isinstance(v, dict) else v if isinstance(v, list) else None
        if items is None:
            continue
        if depth > limit:
            return True
        stack.extend((x, depth + 1) for x in items)
    return False


def parse_header(head: bytes | memoryview) -> dict[str, Any]:
    """Frame 0 as a JSON object, or :class:`ProtocolError` ``bad_message``: not UTF-8,
    not JSON, not an object, nested over ``MAX_HEADER_DEPTH``, an integer over
    ``MAX_INT_DIGITS`` digits or a non-finite number (which later code would choke on)."""
    try:
        header = json.loads(bytes(head).decode("utf-8"), parse_int=_parse_int,
                            parse_float=_parse_float, parse_constant=_parse_constant)
    except ProtocolError:
        raise
    except RecursionError:
        raise ProtocolError(E_BAD_MESSAGE, f"header nests over {MAX_HEADER_DEPTH} levels"
                            ) from None
    except ValueError as e:  # UnicodeDecodeError, JSONDecodeError
        raise ProtocolError(E_BAD_MESSAGE, f"header is not UTF-8 JSON: {str(e)[:200]}"
                            ) from None
    if not isinstance(header, dict):
        raise ProtocolError(E_BAD_MESSAGE, "header must be a JSON object")
    if _depth_over(header, MAX_HEADER_DEPTH):
        raise ProtocolError(E_BAD_MESSAGE, f"header nests over {MAX_HEADER_DEPTH} levels")
    return header


def decode(frames: Sequence[Any], expect: set[str] | None = None,
           allow_shm: bool = False) -> Message:
    """Validate and decode the frames of one message (arrays are zero-copy views).

    ``expect`` restricts the accepted message types (a server only takes
    client messages). Shared-memory descriptors are refused unless ``allow_shm``;
    then they are checked (name pattern, caps) and listed in ``Message.shm`` for
    the receiver to resolve (:meth:`ShmSegment.read`). Raises
    :class:`ProtocolError` on anything malformed.
    """
    if not frames:
        raise ProtocolError(E_BAD_MESSAGE, "empty message")
    head = _buffer(frames[0])
    if len(head) > MAX_HEADER_BYTES:
        raise ProtocolError(E_TOO_BIG, f"header {len(head)} bytes > {MAX_HEADER_BYTES}")
    header = parse_header(head)
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


class TooBig(ProtocolError):
    """A message refused by :func:`recv_capped`; ``routing`` holds only the sender's
    identity (bytes), never a part of the refused message."""

    def __init__(self, routing: list[bytes], max_parts: int, max_bytes: int) -> None:
        super().__init__(E_TOO_BIG, f"message over {max_parts} parts or {max_bytes} bytes: "
                                    "refused")
        self.routing = routing


def recv_capped(sock: Any, flags: int = 0, max_bytes: int = MAX_MESSAGE_BYTES) -> list[Any]:
    """Receive one multipart message part by part, enforcing the caps as it goes.

    ``MAXMSGSIZE`` on the socket bounds each part; this bounds the number of
    parts and their total (``max_bytes`` of arrays plus a header), so a peer
    cannot make the process hold an unbounded message. An oversized message is
    drained, every part of it released before this returns, and reported as
    :class:`TooBig` carrying only the sender's identity so the caller can reply.
    Raises ``zmq.Again`` like ``recv_multipart`` when nothing is waiting.
    """
    import zmq

    first = sock.recv(flags, copy=False)
    frames, total, over = [first], len(first.buffer), False
    max_parts = MAX_ARRAYS + 1 + MAX_ROUTING_PARTS
    while sock.getsockopt(zmq.RCVMORE):
        part = sock.recv(copy=False)
        total += len(part.buffer)
        if not over and (len(frames) >= max_parts or total > max_bytes + MAX_HEADER_BYTES):
            over = True
            frames.clear()  # the parts go now: nothing of a refused message is kept
        if not over:
            frames.append(part)
        del part  # a refused part is freed as soon as it is read
    if over:
        # Only the identity survives, as bytes; no local refers to a part, and the
        # exception is built in the raise, so no reference cycle keeps one alive.
        ident = bytes(first.buffer[:255])  # a ROUTER identity is at most 255 bytes
        del first
        raise TooBig([ident], max_parts, max_bytes)
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
# socket. Two kinds, and a reader opens nothing else:
#
# - ``psfd-<creator pid>-<fd>-<32 hex>``: a memfd(2) the creator sealed against
#   shrinking (F_SEAL_SHRINK), opened by the reader through /proc/<pid>/fd/<fd> (same
#   user). A sealed segment cannot shrink under a mapping, so the reader maps it and
#   reads the passes in place (zero-copy). It has no name in /dev/shm: it goes when
#   the last process holding it does, crashed clients included.
# - ``ps-<creator pid>-<32 hex>``: a file in /dev/shm (where memfd is missing). Its
#   owner could ftruncate it under a reader's mapping, and touching a page past the
#   new end is SIGBUS, which kills the reader: a reader copies from it with pread(2)
#   instead (a short read is an error for that frame). The creator holds a shared
#   flock(2) on it for its whole life, so a segment whose lock can be taken
#   exclusively has no live owner and may be unlinked: :func:`reap_shm`,
#   :func:`sweep_shm`.

SHM_DIR = "/dev/shm"
SHM_FILE_RE = re.compile(r"ps-[0-9]{1,10}-[0-9a-f]{32}")
SHM_MEMFD_RE = re.compile(r"psfd-([0-9]{1,10})-([0-9]{1,9})-([0-9a-f]{32})")
SHM_NAME_RE = re.compile(f"{SHM_FILE_RE.pattern}|{SHM_MEMFD_RE.pattern}")
SHM_MAGIC = b"PSKNSHM1"  # segment bytes 0..7; 8..23: the client's probe token
SHM_HEADER = 64  # segment header; slots follow
SHM_ALIGN = 64  # arrays and slot headers start at multiples of this
MAX_SEGMENT_BYTES = 16 * MAX_ARRAY_BYTES  # 4 GiB
SHM_SWEEP_MIN_AGE = 10.0  # seconds: a sweep leaves younger segments alone (creation race)


@dataclass
class ShmRef:
    """An array descriptor pointing into a shared-memory segment (not yet read)."""

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
    """Where segment ``name`` is opened: /dev/shm/NAME, or /proc/PID/fd/FD for a memfd."""
    m = SHM_MEMFD_RE.fullmatch(name)
    if m is not None:
        return f"/proc/{m.group(1)}/fd/{m.group(2)}"
    if not SHM_FILE_RE.fullmatch(name):
        raise ProtocolError(E_BAD_ARRAY, f"shared-memory segment {name[:80]!r} is not a "
                                         "Painted Skin segment name")
    return os.path.join(SHM_DIR, name)


def _memfd_sealing() -> bool:
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
            memfd = _memfd_sealing()
        if memfd:
            return cls._create_memfd(size)
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
        path = _shm_path(name)

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
    if not SHM_FILE_RE.fullmatch(name):
        return False  # a memfd has no name to unlink: it goes with its last holder
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
    return [n for n in names if SHM_FILE_RE.fullmatch(n) and reap_shm(n, min_age_s)]
