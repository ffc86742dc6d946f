"""Per-client limits and fair scheduling, shared by the server and the broker.

Without them one client can take every session of a backend (the others get
``busy``) or park gigabytes in queued frames and reference images. A *client*
is its CurveZMQ public key when the socket authenticates (ZAP ``User-Id``: a
client cannot forge it, and one key opening many connections is still one
client); otherwise its ZeroMQ routing identity, i.e. one connection. Without
keys there is nothing better: every local process shares the loopback peer
address, so quotas by address would lump all local users together. A local
client can dodge the per-client limits by opening many connections; the global
limits (``max_sessions``, credits per session, the message caps) still bound
the whole.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from .. import wire
from ..wire import ProtocolError

T = TypeVar("T")

DEFAULT_CLIENT_SESSIONS = 16
DEFAULT_CLIENT_MB = 4096.0  # 4 credits of a 4K frame with every pass fit


@dataclass(frozen=True)
class ClientLimits:
    """What one client may hold at once."""

    sessions: int = DEFAULT_CLIENT_SESSIONS
    bytes: int = int(DEFAULT_CLIENT_MB * 2**20)  # queued frames + reference images


def client_id(peer_frame: Any, identity: bytes) -> bytes:
    """Who sent ``peer_frame``: ``key:<curve public key>`` when authenticated, else
    ``id:<routing identity>``."""
    try:
        user = peer_frame.get("User-Id")
    except Exception:  # no ZAP handler on this socket (zmq.ZMQError), or not a Frame
        user = None
    if isinstance(user, str) and user:
        return b"key:" + user.encode()
    return b"id:" + identity


def session_bytes(refs: Iterable[Any], frames: Iterable[dict[str, Any]]) -> int:
    """Bytes a session holds: its reference images and its queued frames' arrays."""
    return (sum(r.nbytes for r in refs)
            + sum(a.nbytes for arrays in frames for a in arrays.values()))


def check_open(limits: ClientLimits, sessions: int, held: int, adding: int, ref: Any) -> None:
    """Refuse (``busy``) an OPEN that would give the client one session too many, or
    more than its bytes. ``sessions``/``held``: what it has besides the one opened."""
    if sessions >= limits.sessions:
        raise ProtocolError(wire.E_BUSY, f"open: this client has {sessions} sessions "
                                             f"open, the most one client may (--client-sessions "
                                             f"{limits.sessions}); close one first", ref)
    if held + adding > limits.bytes:
        raise ProtocolError(wire.E_BUSY, f"open: {adding} bytes of reference images would "
                                             f"put this client at {held + adding} bytes held, "
                                             f"over its {limits.bytes} (--client-mb); close a "
                                             "session or send smaller images", ref)


def check_frame(limits: ClientLimits, held: int, adding: int, frame: Any, ref: Any) -> None:
    """Refuse (``busy``) a FRAME that would put the client over its bytes."""
    if held + adding > limits.bytes:
        raise ProtocolError(wire.E_BUSY, f"frame {frame}: this client holds {held} bytes "
                                             f"(queued frames and reference images); {adding} "
                                             f"more is over its {limits.bytes} (--client-mb); "
                                             "wait for a result", ref)


class FairQueue(Generic[T]):
    """Ready items round-robin over clients, then over each client's items.

    A client with ten busy sessions gets the same share of the compute thread as
    a client with one (round-robin over sessions would give it ten times more)."""

    def __init__(self) -> None:
        self._clients: OrderedDict[bytes, OrderedDict[Hashable, T]] = OrderedDict()

    def __bool__(self) -> bool:
        return bool(self._clients)

    def __len__(self) -> int:
        return sum(len(items) for items in self._clients.values())

    def __contains__(self, where: tuple[bytes, Hashable]) -> bool:
        client, key = where
        return key in self._clients.get(client, ())

    def add(self, client: bytes, key: Hashable, item: T) -> None:
        """Mark ``item`` ready (no-op when it is already)."""
        self._clients.setdefault(client, OrderedDict()).setdefault(key, item)

    def discard(self, client: bytes, key: Hashable) -> None:
        items = self._clients.get(client)
        if items is not None:
            items.pop(key, None)
            if not items:
                del self._clients[client]

    def pop(self) -> T:
        """The next item: the first client's first; that client goes to the back of
        the line (re-:meth:`add` the item to put it at the back of its client's)."""
        client, items = next(iter(self._clients.items()))
        _, item = items.popitem(last=False)
        if items:
            self._clients.move_to_end(client)
        else:
            del self._clients[client]
        return item
