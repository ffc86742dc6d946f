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
"""

from __future__ import annotations

import json
import math
import uuid
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


def encode(mtype: str, arrays: dict[str, np.ndarray] | None = None, **fields: Any
           ) -> list[bytes | memoryview]:
    """Frames of one message: header JSON, then each array's buffer (no copy
    for C-contiguous little-endian arrays)."""
    if mtype not in ALL_TYPES:
        raise ProtocolError(E_UNKNOWN_TYPE, f"unknown message type {mtype!r}")
    arrays = arrays or {}
    if len(arrays) > MAX_ARRAYS:
        raise ProtocolError(E_TOO_BIG, f"{len(arrays)} arrays > {MAX_ARRAYS}")
    descs, bufs = [], []
    for name, a in arrays.items():
        a = np.asarray(a)
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


def decode(frames: Sequence[Any], expect: set[str] | None = None) -> Message:
    """Validate and decode the frames of one message (arrays are zero-copy views).

    ``expect`` restricts the accepted message types (a server only takes
    client messages). Raises :class:`ProtocolError` on anything malformed.
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
    if len(descs) != len(frames) - 1:
        raise ProtocolError(E_BAD_MESSAGE, f"{len(descs)} arrays described, "
                                           f"{len(frames) - 1} sent", ref)
    total = len(head)
    arrays: dict[str, np.ndarray] = {}
    for desc, frame in zip(descs, frames[1:], strict=True):
        name, dtype, shape = _desc(desc, ref)
        nbytes = math.prod(shape) * np.dtype(dtype).itemsize  # Python ints: no overflow
        if nbytes > MAX_ARRAY_BYTES:
            raise ProtocolError(E_TOO_BIG, f"array {name!r}: {nbytes} bytes > "
                                           f"{MAX_ARRAY_BYTES}", ref)
        buf = _buffer(frame)
        if len(buf) != nbytes:
            raise ProtocolError(E_BAD_ARRAY, f"array {name!r}: {len(buf)} bytes sent, "
                                             f"{nbytes} declared for {dtype}{list(shape)}", ref)
        total += nbytes
        if total > MAX_MESSAGE_BYTES:
            raise ProtocolError(E_TOO_BIG, f"message over {MAX_MESSAGE_BYTES} bytes", ref)
        if name in arrays:
            raise ProtocolError(E_BAD_MESSAGE, f"array {name!r} sent twice", ref)
        arr = np.frombuffer(buf, dtype=np.dtype(dtype).newbyteorder("<"))
        arrays[name] = arr.reshape(shape)
    return Message(mtype, header, arrays)


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
