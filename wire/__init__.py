"""The Painted Skin wire: what the Blender client and the backend say to each other.

Neutral ground between the two sides: it imports no bpy, no torch and nothing of
``addon/`` or ``backend/`` (numpy only; pyzmq only inside :func:`recv_capped`), so
the add-on ships it without the backend. docs/protocol.md describes it for other
clients. Modules: :mod:`.limits` (caps, dtypes, timing), :mod:`.messages` (types,
error codes), :mod:`.codec` (encode/decode), :mod:`.segments` (shared memory),
:mod:`.endpoints` (the loopback test), :mod:`.replies` (reply/error builders),
:mod:`.passes` (the table of passes), :mod:`.options` (the ``cross_frame`` values both
sides read). Everything public is importable from here.
"""

from __future__ import annotations

from .codec import TooBig, decode, encode, parse_header, recv_capped
from .endpoints import DEFAULT_URL, is_local_endpoint, is_loopback_host
from .limits import (
    DTYPES,
    HEARTBEAT_INTERVAL,
    HEARTBEAT_LIVENESS,
    MAX_ARRAY_BYTES,
    MAX_ARRAYS,
    MAX_HEADER_BYTES,
    MAX_HEADER_DEPTH,
    MAX_INT_DIGITS,
    MAX_MESSAGE_BYTES,
    MAX_NAME,
    MAX_NDIM,
    MAX_ROUTING_PARTS,
    MAX_SEGMENT_BYTES,
    MAX_SIDE,
    MAX_TEXT,
    PROTOCOL_VERSION,
    RECONNECT_INIT,
    RECONNECT_MAX,
)
from .messages import (
    ALL_TYPES,
    CANCEL,
    CLIENT_TYPES,
    CLOSE,
    CLOSED,
    DISCONNECT,
    E_BAD_ARRAY,
    E_BAD_MESSAGE,
    E_BUSY,
    E_CANCELLED,
    E_INTERNAL,
    E_NO_SESSION,
    E_TOO_BIG,
    E_UNKNOWN_TYPE,
    E_VERSION,
    ERROR,
    FRAME,
    HEARTBEAT,
    OPEN,
    OPENED,
    PING,
    PONG,
    PROGRESS,
    READY,
    RESULT,
    SERVER_TYPES,
    STATUS,
    STATUS_REPLY,
    WORKER_TYPES,
    Message,
    ProtocolError,
    ShmRef,
    check_array,
    new_id,
)
from .options import CROSS_FRAME_MODES, CROSS_FRAME_OFF, CrossFrameError, cross_frame_mode
from .passes import (
    CANONICAL_PASSES,
    CONTROL_PASSES,
    VALUES_VERSION,
    WIRE_PASSES,
    WirePass,
    bytes_per_pixel,
    to_wire,
    values_age,
)
from .replies import (
    SERVER_NAME,
    backend_version,
    clean,
    error,
    error_frames,
    is_int,
    reply,
)
from .segments import (
    SHM_ALIGN,
    SHM_DIR,
    SHM_FILE_RE,
    SHM_HEADER,
    SHM_MAGIC,
    SHM_MEMFD_RE,
    SHM_NAME_RE,
    SHM_SWEEP_MIN_AGE,
    ShmSegment,
    reap_shm,
    segment_path,
    shm_supported,
    sweep_shm,
)

__all__ = [
    "ALL_TYPES", "CANCEL", "CANONICAL_PASSES", "CLIENT_TYPES", "CLOSE", "CLOSED",
    "CONTROL_PASSES", "CROSS_FRAME_MODES", "CROSS_FRAME_OFF", "CrossFrameError",
    "DEFAULT_URL", "DISCONNECT", "DTYPES", "E_BAD_ARRAY", "E_BAD_MESSAGE", "E_BUSY", "E_CANCELLED",
    "E_INTERNAL", "E_NO_SESSION", "E_TOO_BIG", "E_UNKNOWN_TYPE", "E_VERSION", "ERROR",
    "FRAME", "HEARTBEAT", "HEARTBEAT_INTERVAL", "HEARTBEAT_LIVENESS", "MAX_ARRAYS",
    "MAX_ARRAY_BYTES", "MAX_HEADER_BYTES", "MAX_HEADER_DEPTH", "MAX_INT_DIGITS",
    "MAX_MESSAGE_BYTES", "MAX_NAME", "MAX_NDIM", "MAX_ROUTING_PARTS", "MAX_SEGMENT_BYTES",
    "MAX_SIDE", "MAX_TEXT", "OPEN", "OPENED", "PING", "PONG", "PROGRESS",
    "PROTOCOL_VERSION", "READY", "RECONNECT_INIT", "RECONNECT_MAX", "RESULT", "SERVER_NAME",
    "SERVER_TYPES", "SHM_ALIGN", "SHM_DIR", "SHM_FILE_RE", "SHM_HEADER", "SHM_MAGIC",
    "SHM_MEMFD_RE", "SHM_NAME_RE", "SHM_SWEEP_MIN_AGE", "STATUS", "STATUS_REPLY",
    "VALUES_VERSION", "WIRE_PASSES", "WORKER_TYPES", "Message", "ProtocolError", "ShmRef",
    "ShmSegment",
    "TooBig", "WirePass", "backend_version", "bytes_per_pixel", "check_array", "clean",
    "cross_frame_mode", "decode", "encode", "error", "error_frames", "is_int",
    "is_local_endpoint", "is_loopback_host", "new_id", "parse_header", "reap_shm",
    "recv_capped", "reply", "segment_path", "shm_supported", "sweep_shm", "to_wire",
    "values_age",
]
