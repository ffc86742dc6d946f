"""The numbers both ends of the wire agree on: caps, dtypes, timing.

Every size a peer sends is checked against these *before* anything is allocated,
so they bound what a hostile or broken peer can make a process hold.
"""

from __future__ import annotations

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

# Routing frames a ROUTER adds in front of a message (identity, optional delimiter,
# broker envelopes) besides the header and the arrays.
MAX_ROUTING_PARTS = 4

MAX_SEGMENT_BYTES = 16 * MAX_ARRAY_BYTES  # 4 GiB: one shared-memory segment

# What a reply echoes back: longer client-sent names are dropped, longer texts cut.
MAX_NAME = 256  # session names, ids echoed back
MAX_TEXT = 4000  # error messages (a model's missing components, one line each)

# Paranoid Pirate timing (ZeroMQ guide, ppqueue/ppworker), shared by worker and broker.
HEARTBEAT_INTERVAL = 1.0  # seconds
HEARTBEAT_LIVENESS = 3  # beats missed before the peer is taken for dead
RECONNECT_INIT, RECONNECT_MAX = 1.0, 16.0  # worker back-off, seconds
