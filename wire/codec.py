"""The message codec: a message as a list of ZeroMQ frames, and back.

A message is a ZeroMQ multipart: frame 0 is a UTF-8 JSON header, frames 1..n are
raw array buffers (C order, little-endian) described by ``header["arrays"]`` as
``{"name", "dtype", "shape"}`` in the same order. Arrays are sent without a copy
(``copy=False``) and received as ``np.frombuffer`` views. Nothing is ever pickled.
Every size is checked against the caps (:mod:`.limits`) *before* anything is
allocated, and a bad message raises :class:`ProtocolError` (code + text) — the
server turns it into an ``error`` reply and keeps serving.

Same-machine option (Linux): FRAME arrays may instead lie in a shared-memory segment
the client owns (:mod:`.segments`); their descriptor then carries
``"shm": {"segment", "offset"}`` and no buffer frame follows for them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .limits import (
    DTYPES,
    MAX_ARRAY_BYTES,
    MAX_ARRAYS,
    MAX_HEADER_BYTES,
    MAX_HEADER_DEPTH,
    MAX_INT_DIGITS,
    MAX_MESSAGE_BYTES,
    MAX_NDIM,
    MAX_ROUTING_PARTS,
    MAX_SEGMENT_BYTES,
    MAX_SIDE,
    PROTOCOL_VERSION,
)
from .messages import (
    ALL_TYPES,
    E_BAD_ARRAY,
    E_BAD_MESSAGE,
    E_TOO_BIG,
    E_UNKNOWN_TYPE,
    E_VERSION,
    Message,
    ProtocolError,
    ShmRef,
    check_array,
)
from .segments import SHM_NAME_RE


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
            check_array(name, a)
            descs.append({"name": name, "dtype": a.dtype.name, "shape": list(a.shape),
                          "shm": placements[name]})
            continue
        if a.dtype.byteorder == ">":
            a = a.astype(a.dtype.newbyteorder("<"))
        a = np.ascontiguousarray(a)
        check_array(name, a)
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

