"""Hostile and unlucky inputs the backend must survive with a clear answer."""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import zmq
from painted_skin import wire as P
from painted_skin.backend import auth
from painted_skin.backend.broker.service import Broker, BrokerConfig
from painted_skin.backend.log_limit import LogLimiter
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
        done = subprocess.run([sys.executable, "-m", "painted_skin.backend", "serve",
                               "--bind", f"tcp://127.0.0.1:{port}"],
                              capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and time.monotonic() - t0 < 30
    assert "another" in done.stderr or "in use" in done.stderr


def test_credits_must_be_positive():
    done = subprocess.run([sys.executable, "-m", "painted_skin.backend", "serve",
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


# ---- header abuse: the right code, one log line, rate-limited --------------------------------


NESTED = b'{"v":1,"type":"ping","id":"deep","x":' + b"[" * 5000 + b"]" * 5000 + b"}"
DIGITS = b'{"v":1,"type":"open","id":"digits","session":"s","width":' + b"9" * 5000 + b"}"


@pytest.mark.parametrize("head, words", [
    (NESTED, "nests over"), (DIGITS, "digits"),
    (b'{"v":1,"type":"open","session":"s","width":1e999,"height":8}', "out of range"),
    (b'{"v":1,"type":"open","session":"s","width":NaN,"height":8}', "NaN"),
    (b'{"v":1,"type":"ping","x":' + b'{"a":' * 40 + b"1" + b"}" * 40 + b"}", "nests over"),
])
def test_header_abuse_is_bad_message(head, words):
    with pytest.raises(P.ProtocolError) as e:
        P.decode([head], expect=P.CLIENT_TYPES)
    assert e.value.code == P.E_BAD_MESSAGE and words in str(e.value)


def test_header_abuse_gets_bad_message_logged_once_a_line_rate_limited(serve, client, caplog):
    _, ep = serve()
    c = client(ep)
    caplog.set_level(logging.INFO, logger="painted_skin.backend")
    for i in range(60):
        c.sock.send_multipart([NESTED if i % 2 else DIGITS])
        m = c.recv()
        assert m.type == P.ERROR and m.header["code"] == P.E_BAD_MESSAGE, m.header
    assert c.request(P.PING).type == P.PONG
    mine = [r for r in caplog.records if r.name == "painted_skin.backend"]
    assert not [r for r in mine if r.exc_info], "a client's bad header logged a traceback"
    assert 1 <= len(mine) <= 10, [r.getMessage() for r in mine]  # 60 messages, 5 lines
    assert all("\n" not in r.getMessage() for r in mine)
    assert any("bad_message" in r.getMessage() for r in mine)


def test_log_limiter_counts_what_it_leaves_out(caplog):
    now = [0.0]
    limiter = LogLimiter(logging.getLogger("painted_skin.test_limit"), interval=10.0, burst=3,
                         clock=lambda: now[0])
    caplog.set_level(logging.INFO, logger="painted_skin.test_limit")
    logged = [limiter.warn("bad_message", "line %d\nwith a newline", i) for i in range(100)]
    assert logged.count(True) == 3 and limiter.suppressed == 97
    assert limiter.warn("too_big", "another kind") is True  # its own budget
    now[0] = 11.0
    assert limiter.warn("bad_message", "later") is True
    texts = [r.getMessage() for r in caplog.records]
    assert "97 more 'bad_message' messages in the last 11 s not logged" in texts
    assert all("\n" not in t for t in texts) and "line 0\\nwith a newline" in texts


# ---- per-client quotas and fairness -----------------------------------------------------------


def test_one_client_cannot_take_every_session(serve, client):
    _, ep = serve(client_sessions=2, max_sessions=4)
    a, b = client(ep), client(ep)
    for name in ("s1", "s2"):
        assert a.request(P.OPEN, session=name, width=8, height=8).type == P.OPENED
    m = a.request(P.OPEN, session="s3", width=8, height=8)
    assert m.header["code"] == P.E_BUSY and "--client-sessions 2" in m.header["message"]
    assert a.request(P.OPEN, session="s1", width=16, height=8).type == P.OPENED  # re-open
    assert b.request(P.OPEN, session="s1", width=8, height=8).type == P.OPENED  # others: fine
    assert a.request(P.CLOSE, session="s2").type == P.CLOSED
    assert a.request(P.OPEN, session="s3", width=8, height=8).type == P.OPENED


def test_one_client_cannot_hold_unbounded_bytes(serve, client):
    from test_backend_server import make_passes

    _, ep = serve(client_mb=0.1, credits=8, cache_mb=0)  # 104857 bytes a client
    a, b = client(ep), client(ep)
    big = {"ref0": np.zeros((200, 200, 3), np.uint8)}  # 120000 bytes
    m = a.request(P.OPEN, big, session="s", width=32, height=32)
    assert m.header["code"] == P.E_BUSY and "--client-mb" in m.header["message"]
    ref = {"ref0": np.zeros((100, 100, 3), np.uint8)}  # 30000 bytes
    opts = {"steps": 1, "delay_ms": 400, "progress": False}
    assert a.request(P.OPEN, ref, session="s", width=32, height=32, options=opts).type == P.OPENED
    passes = make_passes(32, 32)  # 23552 bytes a frame
    for f in range(3):  # 30000 + 3 * 23552 = 100656: fits
        a.send(P.FRAME, passes, session="s", frame=f)
    m = a.request(P.FRAME, passes, session="s", frame=3)
    assert m.header["code"] == P.E_BUSY and "--client-mb" in m.header["message"], m.header
    assert m.frame == 3
    # another client is not held back by the first one's bytes
    assert b.request(P.OPEN, ref, session="s", width=32, height=32).type == P.OPENED
    b.send(P.FRAME, passes, session="s", frame=0)
    assert b.result("s", 0, timeout=10)[0].type == P.RESULT
    for f in range(3):  # the first client's frames all come back; then it may send again
        assert a.result("s", f, timeout=10)[0].type == P.RESULT
    a.send(P.FRAME, passes, session="s", frame=3)
    assert a.result("s", 3, timeout=10)[0].type == P.RESULT


def test_compute_is_shared_between_clients_not_sessions(serve, client):
    """A client with three busy sessions gets the compute as often as one with one."""
    _, ep = serve(credits=4, cache_mb=0)
    many, one = client(ep), client(ep)
    opts = {"steps": 1, "delay_ms": 30, "progress": False}
    for name in ("a", "b", "c"):
        many.request(P.OPEN, session=name, width=8, height=8, options=opts)
    one.request(P.OPEN, session="z", width=8, height=8, options=opts)
    mask = {"mask": np.ones((8, 8), np.uint8)}
    for f in range(4):
        for name in ("a", "b", "c"):
            many.send(P.FRAME, mask, session=name, frame=f)
    for f in range(4):
        one.send(P.FRAME, mask, session="z", frame=f)
    order: list[tuple[str, float]] = []
    end = time.monotonic() + 15
    while len(order) < 16:
        assert time.monotonic() < end
        for who, c in (("many", many), ("one", one)):
            try:
                m = c.recv(0.05)
            except TimeoutError:
                continue
            if m.type == P.RESULT:
                order.append((who, m.header["timings"]["queue_ms"]))
    # Round-robin over clients: the lone client's 4 frames are done among the first 9
    # (over sessions they would come every 4th: the last at 16).
    last_one = max(i for i, (who, _) in enumerate(order) if who == "one")
    assert last_one < 10, [w for w, _ in order]


def test_broker_limits_sessions_and_bytes_per_client():
    broker = Broker(BrokerConfig(frontend="tcp://127.0.0.1:*", backend="tcp://127.0.0.1:*",
                                 client_sessions=1, client_mb=0.05))
    front, back = broker.bind()
    thread = broker.start()
    w = Server(ServeConfig())
    w.connect(back)
    wt = w.start()
    a, b = Client(front), Client(front)
    try:
        deadline = time.monotonic() + 10
        while a.request(P.STATUS).header["workers"] < 1:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert a.request(P.OPEN, session="s1", width=8, height=8).type == P.OPENED
        m = a.request(P.OPEN, session="s2", width=8, height=8)
        assert m.header["code"] == P.E_BUSY and "--client-sessions 1" in m.header["message"]
        assert b.request(P.OPEN, session="s1", width=8, height=8).type == P.OPENED
        big = {"ref0": np.zeros((150, 150, 3), np.uint8)}  # 67500 bytes > 52428
        m = b.request(P.OPEN, big, session="s1", width=8, height=8)
        assert m.header["code"] == P.E_BUSY and "--client-mb" in m.header["message"]
    finally:
        a.close()
        b.close()
        w.stop()
        wt.join(5)
        broker.stop()
        thread.join(5)


def test_broker_answers_too_big():
    broker = Broker(BrokerConfig(frontend="tcp://127.0.0.1:*", backend="tcp://127.0.0.1:*",
                                 max_message_mb=1))
    front, _ = broker.bind()
    thread = broker.start()
    c = Client(front)
    try:
        c.sock.send_multipart([P.encode(P.PING, id="big")[0], b"x" * 2**20, b"x" * 2**20])
        m = c.recv()
        assert m.type == P.ERROR and m.header["code"] == P.E_TOO_BIG
        assert c.request(P.PING).type == P.PONG
    finally:
        c.close()
        broker.stop()
        thread.join(5)


def test_with_keys_a_client_is_its_key_not_its_connection(serve, tmp_path):
    """Two connections with one CurveZMQ key share the key's quota; another key has its own."""
    keys = tmp_path / "keys"
    auth.create_keys(keys)
    other_pair = zmq.curve_keypair()
    (keys / "other.key").write_text(  # admit a second client key
        f'metadata\ncurve\n    public-key = "{other_pair[0].decode()}"\n')
    _, ep = serve(keys=str(keys), client_sessions=1)
    first, second = Client(ep, keys=keys), Client(ep, keys=keys)
    other = Client(ep, keys=keys, secret=other_pair)
    try:
        assert first.request(P.OPEN, session="a", width=8, height=8).type == P.OPENED
        m = second.request(P.OPEN, session="b", width=8, height=8)
        assert m.header["code"] == P.E_BUSY and "--client-sessions 1" in m.header["message"]
        assert other.request(P.OPEN, session="a", width=8, height=8).type == P.OPENED
    finally:
        for c in (first, second, other):
            c.close()
