"""CurveZMQ keys and the loopback-only rule for the backend sockets.

Key folder (``painted-skin keys DIR``, made by ``zmq.auth.create_certificates``)::

    DIR/server.key          server public key   (clients need it)
    DIR/server.key_secret   server key pair     (server and broker only)
    DIR/client.key          client public key   (allowed by the server)
    DIR/client.key_secret   client key pair     (Blender clients, broker workers)

The server allows every public key ``DIR/*.key``: to admit another client,
copy its ``NAME.key`` there. Binding or connecting anywhere but loopback
(tcp://127.*, localhost, [::1]) or ipc/inproc needs keys; without them the
backend refuses to start.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator

SERVER, CLIENT = "server", "client"


class InsecureEndpoint(ValueError):
    """A non-loopback endpoint without CurveZMQ keys."""


def is_loopback(endpoint: str) -> bool:
    """True for endpoints only this machine can reach."""
    if endpoint.startswith(("ipc://", "inproc://")):
        return True
    m = re.match(r"^tcp://(?:[^;]+;)?(\[[^\]]*\]|[^:]+):", endpoint)
    if not m:
        return False
    host = m.group(1).strip("[]").lower()
    return host == "localhost" or host.startswith("127.") or host == "::1"


def require_safe(endpoint: str, keys: str | os.PathLike | None, what: str = "bind") -> None:
    """Refuse a public endpoint without keys (raises :class:`InsecureEndpoint`)."""
    if keys is None and not is_loopback(endpoint):
        raise InsecureEndpoint(
            f"refusing to {what} {endpoint} without encryption: anyone on the network could "
            f"use this backend. Make keys with `painted-skin keys DIR` and pass --keys DIR "
            f"(clients need DIR/client.key_secret and DIR/server.key), or use "
            f"tcp://127.0.0.1:PORT")


def create_keys(directory: str | os.PathLike) -> dict[str, Path]:
    """Server and client key pairs in ``directory`` (made if missing); existing kept."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    out = {}
    for name in (SERVER, CLIENT):
        public, secret = d / f"{name}.key", d / f"{name}.key_secret"
        if not (public.exists() and secret.exists()):
            zmq.auth.create_certificates(str(d), name)
        os.chmod(secret, 0o600)
        out[name] = public
        out[name + "_secret"] = secret
    return out


def _load(directory: str | os.PathLike, name: str) -> tuple[bytes, bytes]:
    path = Path(directory) / f"{name}.key_secret"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: run `painted-skin keys {directory}`")
    public, secret = zmq.auth.load_certificate(str(path))
    assert secret is not None
    return public, secret


def start_authenticator(ctx: zmq.Context, keys: str | os.PathLike) -> ThreadAuthenticator:
    """A ZAP handler on ``ctx`` admitting the public keys DIR/*.key."""
    auth = ThreadAuthenticator(ctx)
    auth.start()
    auth.configure_curve(domain="*", location=str(Path(keys)))
    return auth


def make_server(sock: zmq.Socket, keys: str | os.PathLike) -> None:
    """Make ``sock`` a CurveZMQ server with DIR/server.key_secret (before bind)."""
    public, secret = _load(keys, SERVER)
    sock.curve_publickey, sock.curve_secretkey = public, secret
    sock.curve_server = True


def make_client(sock: zmq.Socket, keys: str | os.PathLike, name: str = CLIENT) -> None:
    """Make ``sock`` a CurveZMQ client of DIR/server.key (before connect)."""
    public, secret = _load(keys, name)
    server_public, _ = zmq.auth.load_certificate(str(Path(keys) / f"{SERVER}.key"))
    sock.curve_publickey, sock.curve_secretkey = public, secret
    sock.curve_serverkey = server_public
