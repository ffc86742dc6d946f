"""Which ZeroMQ endpoints only this machine can reach: the one loopback test.

The backend refuses to bind or connect anywhere else without CurveZMQ keys, the
client refuses a remote URL without keys, and shared memory is offered only here.
"""

from __future__ import annotations

import ipaddress
import re

DEFAULT_URL = "tcp://127.0.0.1:5555"  # where a backend serves unless told otherwise
_TCP_HOST = re.compile(r"^tcp://(?:[^;]+;)?(\[[^\]]*\]|[^:]+):")


def is_local_endpoint(endpoint: str) -> bool:
    """ipc://, inproc:// or tcp:// to a loopback address (no pyzmq needed)."""
    if endpoint.startswith(("ipc://", "inproc://")):
        return True
    m = _TCP_HOST.match(endpoint)
    if not m:
        return False
    return is_loopback_host(m.group(1))


def is_loopback_host(host: str) -> bool:
    """``localhost`` or a literal loopback address; names like 127.0.0.1.example.net
    are not loopback."""
    host = host.strip("[]").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
