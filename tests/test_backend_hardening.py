"""Hostile and unlucky inputs the backend must survive with a clear answer."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import zmq
from painted_skin.backend import auth
from painted_skin.backend import protocol as P
from painted_skin.backend.broker import Broker, BrokerConfig
from painted_skin.backend.server import ServeConfig, Server
from test_backend_server import Client


def test_shape_overflow_is_a_protocol_error():
    """2**40 x 2**40 wraps a 64-bit product to 0: must be refused, not reshaped."""
    head = (b'{"v":1,"type":"frame","session":"s","frame":1,'
            b'"arrays":[{"name":"a","dtype":"uint8","shape":[1,1,1099511627776,1099511627776]}]}')
    with pytest.raises(P.ProtocolError) as e:
        P.decode([head, b""])
    assert e.value.code in (P.E_TOO_BIG, P.E_BAD_ARRAY)


@pytest.mark.parametrize("endpoint, loopback", [
    ("tcp://127.0.0.1:5555", True), ("tcp://localhost:5555", True), ("tcp://[::1]:5555", True),
    ("ipc:///tmp/x", True), ("tcp://127.0.0.1.example.net:5555", False),
    ("tcp://0.0.0.0:5555", False), ("tcp://10.0.0.2:5555", False),
])
def test_loopback_rule(endpoint, loopback):
    assert auth.is_loopback(endpoint) is loopback


def test_too_many_parts_get_an_error_and_the_server_keeps_serving(serve, client):
    _, ep = serve()
    c = client(ep)
    head = P.encode(P.PING, id="big")[0]
    c.sock.send_multipart([head] + [b"x"] * (P.MAX_ARRAYS + 20))
    reply = c.recv()
    assert reply.type == P.ERROR and reply.header["code"] == P.E_TOO_BIG
    assert c.request(P.PING).type == P.PONG


def test_busy_port_exits_2_at_once():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        t0 = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "painted_skin.backend.commands", "serve",
                               "--bind", f"tcp://127.0.0.1:{port}"],
                              capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and time.monotonic() - t0 < 30
    assert "another" in done.stderr or "in use" in done.stderr


def test_credits_must_be_positive():
    done = subprocess.run([sys.executable, "-m", "painted_skin.backend.commands", "serve",
                           "--credits", "0"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "positive" in done.stderr


def test_broker_worker_port_refuses_client_keys(tmp_path):
    """With keys, only DIR/workers keys may register as workers."""
    keys = tmp_path / "keys"
    auth.create_keys(keys)
    broker = Broker(BrokerConfig(frontend="tcp://127.0.0.1:*", backend="tcp://127.0.0.1:*",
                                 keys=str(keys)))
    front, back = broker.bind()
    broker.start()
    workers = []
    try:
        # A rogue "worker" holding only the client key gets nowhere.
        ctx = zmq.Context()
        rogue = ctx.socket(zmq.DEALER)
        rogue.linger = 0
        auth.make_client(rogue, keys)
        rogue.connect(back)
        rogue.send_multipart(P.encode(P.READY, credits=4))
        time.sleep(0.5)
        c = Client(front, keys=keys)
        try:
            assert c.request(P.STATUS).header["workers"] == 0
            # A real worker with the worker key is admitted.
            w = Server(ServeConfig(keys=str(keys)))
            w.connect(back)
            w.start()
            workers.append(w)
            deadline = time.monotonic() + 10
            while c.request(P.STATUS).header["workers"] < 1:
                assert time.monotonic() < deadline, "worker with the worker key not admitted"
                time.sleep(0.2)
            c.request(P.OPEN, session="s", width=8, height=8)
            c.send(P.FRAME, {"mask": np.ones((8, 8), np.uint8)}, session="s", frame=1)
            m, _ = c.result("s", 1, timeout=10, keepalive=0.5)
            assert m.type == P.RESULT
        finally:
            c.close()
            rogue.close(0)
            ctx.term()
    finally:
        for w in workers:
            w.stop()
        broker.stop()
