"""CurveZMQ keys and the loopback-only rule for the backend sockets.

Key folder (``painted-skin keys DIR``, made by ``zmq.auth.create_certificates``)::

    DIR/server.key          server public key   (clients need it)
    DIR/server.key_secret   server key pair     (server and broker only)
    DIR/client.key          client public key   (allowed by the server)
    DIR/client.key_secret   client key pair     (Blender clients)
    DIR/workers/worker.key(_secret)   worker key pair (``serve --connect`` behind a broker)

The server and the broker's client side allow every public key ``DIR/*.key``: to
admit another client, copy its ``NAME.key`` there. The broker's worker side
admits only ``DIR/workers/*.key`` (its own ZAP domain), so a client key cannot
register as a worker and see other users' frames. Binding or connecting anywhere but loopback
(tcp://127.*, localhost, [::1]) or ipc/inproc needs keys; without them the
backend refuses to start.
"""

from __future__ import annotations

import os
from pathlib import Path

import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator

from ..wire.endpoints import is_local_endpoint as is_loopback

SERVER, CLIENT, WORKER = "server", "client", "worker"
WORKERS_DIR, WORKERS_DOMAIN = "workers", "workers"


class InsecureEndpoint(ValueError):
    """A non-loopback endpoint without CurveZMQ keys."""


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
    (d / WORKERS_DIR).mkdir(exist_ok=True)
    for name, folder in ((SERVER, d), (CLIENT, d), (WORKER, d / WORKERS_DIR)):
        public, secret = folder / f"{name}.key", folder / f"{name}.key_secret"
        if not (public.exists() and secret.exists()):
            zmq.auth.create_certificates(str(folder), name)
        os.chmod(secret, 0o600)
        out[name] = public
        out[name + "_secret"] = secret
    return out


def _load(directory: str | os.PathLike, name: str) -> tuple[bytes, bytes]:
    folder = Path(directory) / WORKERS_DIR if name == WORKER else Path(directory)
    path = folder / f"{name}.key_secret"
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
    workers = Path(keys) / WORKERS_DIR
    if workers.is_dir():
        auth.configure_curve(domain=WORKERS_DOMAIN, location=str(workers))
    return auth


def make_server(sock: zmq.Socket, keys: str | os.PathLike, domain: str | None = None) -> None:
    """Make ``sock`` a CurveZMQ server with DIR/server.key_secret (before bind);
    ``domain`` picks which keys it admits (None: DIR/*.key, "workers")."""
    public, secret = _load(keys, SERVER)
    sock.curve_publickey, sock.curve_secretkey = public, secret
    sock.curve_server = True
    if domain:
        sock.zap_domain = domain.encode()


def make_client(sock: zmq.Socket, keys: str | os.PathLike, name: str = CLIENT) -> None:
    """Make ``sock`` a CurveZMQ client of DIR/server.key (before connect)."""
    public, secret = _load(keys, name)
    server_public, _ = zmq.auth.load_certificate(str(Path(keys) / f"{SERVER}.key"))
    sock.curve_publickey, sock.curve_secretkey = public, secret
    sock.curve_serverkey = server_public
