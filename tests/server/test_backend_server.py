"""The backend over real sockets: sessions, credits, cache, cancel, faults, CurveZMQ."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from painted_skin import wire as P
from painted_skin.backend import auth, commands
from painted_skin.backend.pipelines.echo import echo_image
from painted_skin.backend.server import E_CANCELLED, ServeConfig, Server, frame_seed

LOOP = "tcp://127.0.0.1:*"
PY = sys.executable


# ---- helpers (test_broker.py uses them too) ------------------------------------------------


class Client:
    """A bare DEALER client of the protocol (the real one lives in the add-on)."""

    def __init__(self, endpoint: str, keys: str | Path | None = None,
                 secret: tuple[bytes, bytes] | None = None) -> None:
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.linger = 0
        if keys is not None:
            auth.make_client(self.sock, keys)
            if secret is not None:  # a key pair the server does not know
                self.sock.curve_publickey, self.sock.curve_secretkey = secret
        self.sock.connect(endpoint)
        self.n = 0

    def send(self, mtype: str, arrays: dict | None = None, **fields) -> str:
        self.n += 1
        fields.setdefault("id", f"r{self.n}")
        self.sock.send_multipart(P.encode(mtype, arrays, **fields), copy=False)
        return fields["id"]

    def recv(self, timeout: float = 5.0) -> P.Message:
        if not self.sock.poll(int(timeout * 1000)):
            raise TimeoutError("no reply")
        frames = self.sock.recv_multipart(copy=False)
        if len(frames) > 1 and len(frames[0]) == 0:  # we sent an empty first frame (REQ style)
            frames = frames[1:]
        return P.decode(frames)

    def request(self, mtype: str, arrays: dict | None = None, timeout: float = 5.0,
                **fields) -> P.Message:
        ref = self.send(mtype, arrays, **fields)
        while True:
            m = self.recv(timeout)
            if m.header.get("ref") == ref:
                return m

    def result(self, session: str, frame: int, timeout: float = 5.0, keepalive: float = 0.0
               ) -> tuple[P.Message, list[P.Message]]:
        """The next result or error of (session, frame), and the progress before it;
        PING every ``keepalive`` seconds meanwhile, as real clients do."""
        progress = []
        end = time.monotonic() + timeout
        while True:
            wait = max(0.01, end - time.monotonic())
            if keepalive:
                self.send(P.PING)
                try:
                    m = self.recv(min(wait, keepalive))
                except TimeoutError:
                    if time.monotonic() < end:
                        continue
                    raise
            else:
                m = self.recv(wait)
            if m.session != session or m.frame != frame:
                continue
            if m.type == P.PROGRESS:
                progress.append(m)
            else:
                return m, progress

    def drain(self, seconds: float) -> list[P.Message]:
        out, end = [], time.monotonic() + seconds
        while True:
            try:
                out.append(self.recv(max(0.0, end - time.monotonic())))
            except TimeoutError:
                return out

    def close(self) -> None:
        self.sock.close(linger=0)
        self.ctx.term()


def make_passes(h: int, w: int, salt: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(salt)
    mask = np.zeros((h, w), np.uint8)
    mask[h // 4: 3 * h // 4, w // 4: 3 * w // 4] = 1
    return {"depth": rng.random((h, w), np.float32) * 5,
            "normal": rng.uniform(-1, 1, (h, w, 3)).astype(np.float16),
            "skeleton": rng.integers(0, 255, (h, w, 3), np.uint8), "mask": mask,
            "motion": rng.uniform(-2, 2, (h, w, 4)).astype(np.float16),
            "parts": rng.integers(0, 16, (h, w), np.uint8)}


def expected(passes: dict, seed: int, frame: int, w: int, h: int) -> np.ndarray:
    return echo_image(passes, frame_seed(seed, frame), w, h)


def spawn(*args: str, timeout: float = 20.0, log: Path | None = None
          ) -> tuple[subprocess.Popen, str]:
    """Start a backend command; returns it with its first stdout line (the endpoint)."""
    err = open(log, "w") if log else subprocess.DEVNULL
    proc = subprocess.Popen([PY, "-m", "painted_skin.backend", *args],
                            stdout=subprocess.PIPE, stderr=err, text=True)
    if log:
        err.close()  # the child has its own copy
    line: list[str] = []
    t = threading.Thread(target=lambda: line.append(proc.stdout.readline()), daemon=True)
    t.start()
    t.join(timeout)
    if not line or not line[0]:
        proc.kill()
        raise RuntimeError(f"{args} did not start")
    return proc, line[0]


def stop(proc: subprocess.Popen, sig: int = signal.SIGTERM) -> int:
    if proc.poll() is None:
        proc.send_signal(sig)
    try:
        return proc.wait(5)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait(5)


# ---- basics ---------------------------------------------------------------------------------


def test_ping_and_status(serve, client):
    _, ep = serve()
    c = client(ep)
    pong = c.request(P.PING)
    assert pong.type == P.PONG and pong.header["version"] == P.PROTOCOL_VERSION
    assert pong.header["server"].startswith("painted-skin ")
    st_ = c.request(P.STATUS).header
    assert st_["devices"][0] == "cpu" and "echo" in st_["pipelines"]
    assert (st_["queue_depth"], st_["sessions"], st_["workers"]) == (0, 0, 1)
    # the models each pipeline names, for the panel's Model menu: the skin registry's
    assert "demo" in st_["models"]["skin"] and "echo" not in st_["models"]


def test_req_socket_with_delimiter(serve):
    _, ep = serve()
    ctx = zmq.Context()
    req = ctx.socket(zmq.REQ)
    req.linger = 0
    req.connect(ep)
    try:
        req.send_multipart(P.encode(P.PING, id="q"))
        assert req.poll(5000)
        assert P.decode(req.recv_multipart()).type == P.PONG
    finally:
        req.close()
        ctx.term()


def test_frame_result_is_correct(serve, client):
    _, ep = serve()
    c = client(ep)
    refs = {"ref0": np.full((8, 8, 3), 7, np.uint8)}
    opened = c.request(P.OPEN, refs, session="s", pipeline="echo", prompt="a knight",
                       negative_prompt="blur", seed=11, width=40, height=24,
                       options={"steps": 3})
    assert opened.type == P.OPENED and opened.header["credits"] == 4
    assert opened.header["pipeline"] == "echo"
    passes = make_passes(24, 40)
    c.send(P.FRAME, passes, session="s", frame=5)
    res, progress = c.result("s", 5)
    assert res.type == P.RESULT, res.header
    assert [p.header["step"] for p in progress] == [1, 2, 3]
    assert res.header["seed"] == frame_seed(11, 5) and res.header["cached"] is False
    assert set(res.header["timings"]) == {"queue_ms", "compute_ms"}
    np.testing.assert_array_equal(res.arrays["rgb"], expected(passes, 11, 5, 40, 24))
    # a subset of passes is fine
    c.send(P.FRAME, {"depth": passes["depth"]}, session="s", frame=6)
    res, _ = c.result("s", 6)
    np.testing.assert_array_equal(res.arrays["rgb"],
                                  expected({"depth": passes["depth"]}, 11, 6, 40, 24))


@pytest.mark.parametrize("fields, arrays, words", [
    ({"pipeline": "nope"}, {}, "unknown pipeline 'nope'"),
    ({"width": 0}, {}, "bad size"),
    ({"width": 99999}, {}, "bad size"),
    ({"height": "64"}, {}, "bad size"),
    ({"seed": 1.5}, {}, "seed"),
    ({"seed": 2**64}, {}, "out of range: give an integer in"),
    ({"options": [1]}, {}, "options"),
    ({"session": ""}, {}, "session"),
    ({}, {"ref0": np.zeros((4, 4), np.uint8)}, "uint8 (H, W, 3)"),
    ({}, {"face": np.zeros((4, 4, 3), np.uint8)}, "ref0..refN"),
    ({"options": {"ref_weights": [1, 1]}}, {"ref0": np.zeros((4, 4, 3), np.uint8)},
     "2 weights for 1 reference"),
    ({"options": {"ref_weights": [-1]}}, {"ref0": np.zeros((4, 4, 3), np.uint8)}, "below 0"),
])
def test_open_errors(serve, client, fields, arrays, words):
    _, ep = serve()
    c = client(ep)
    f = {"session": "s", "pipeline": "echo", "width": 16, "height": 16, "seed": 1, **fields}
    m = c.request(P.OPEN, arrays, **f)
    assert m.type == P.ERROR and words in m.header["message"], m.header
    assert c.request(P.PING).type == P.PONG


@pytest.mark.parametrize("arrays, words", [
    ({"depth": np.zeros((16, 16), np.float16)}, "float32[16, 16]"),
    ({"normal": np.zeros((16, 8, 3), np.float16)}, "float16[16, 16, 3]"),
    ({"mask": np.zeros((16, 16, 1), np.uint8)}, "uint8[16, 16]"),
    ({"beauty": np.zeros((16, 16, 3), np.uint8)}, "unknown pass 'beauty'"),
])
def test_frame_bad_arrays(serve, client, arrays, words):
    _, ep = serve()
    c = client(ep)
    c.request(P.OPEN, session="s", width=16, height=16)
    m = c.request(P.FRAME, arrays, session="s", frame=0)
    assert m.type == P.ERROR and m.header["code"] == P.E_BAD_ARRAY
    assert words in m.header["message"] and m.session == "s" and m.frame == 0
    m = c.request(P.FRAME, {}, session="s", frame=1)
    assert m.type in (P.PROGRESS, P.RESULT)


_RGB, _DEPTH = np.zeros((16, 16, 3), np.uint8), np.zeros((16, 16), np.float32)


@pytest.mark.parametrize("arrays, header, words", [
    ({"carry_rgb": _RGB}, {"carry_frame": 4}, "needs carry_rgb and carry_depth"),
    ({"carry_rgb": _RGB[:8], "carry_depth": _DEPTH}, {"carry_frame": 4}, "carry_rgb must be"),
    ({"carry_rgb": _RGB, "carry_depth": _DEPTH, "carry_latents": np.zeros((1, 4, 64, 64),
                                                                          np.float32)},
     {"carry_frame": 4}, "latents"),
    ({"carry_rgb": _RGB, "carry_depth": _DEPTH, "carry_x": _DEPTH}, {"carry_frame": 4},
     "unknown carry"),
    ({"carry_rgb": _RGB, "carry_depth": _DEPTH}, {"carry_frame": 5}, "below 'frame'"),
    ({"carry_rgb": _RGB, "carry_depth": _DEPTH}, {}, "below 'frame'"),
])
def test_frame_bad_carry(serve, client, arrays, header, words):
    """A temporal frame may carry the previous one (resume): checked like the passes."""
    _, ep = serve()
    c = client(ep)
    c.request(P.OPEN, session="s", width=16, height=16)
    m = c.request(P.FRAME, arrays, session="s", frame=5, **header)
    assert m.type == P.ERROR and m.header["code"] == P.E_BAD_ARRAY, m.header
    assert words in m.header["message"]
    ok = {"carry_rgb": _RGB, "carry_depth": _DEPTH,
          "carry_latents": np.zeros((1, 4, 2, 2), np.float16)}
    m = c.request(P.FRAME, ok, session="s", frame=6, carry_frame=5)  # fine (echo: ignored)
    while m.type == P.PROGRESS:
        m = c.recv()
    assert m.type == P.RESULT and list(m.arrays) == ["rgb"]


def test_unknown_session_and_close(serve, client):
    _, ep = serve()
    c = client(ep)
    for mtype in (P.FRAME, P.CANCEL, P.CLOSE):
        m = c.request(mtype, session="ghost", frame=0)
        assert m.type == P.ERROR and m.header["code"] == P.E_NO_SESSION
    c.request(P.OPEN, session="s", width=8, height=8)
    m = c.request(P.CLOSE, session="s")
    assert m.type == P.CLOSED and m.session == "s"
    assert c.request(P.FRAME, session="s", frame=0).header["code"] == P.E_NO_SESSION
    # sessions are per client: another client cannot touch this one's
    c.request(P.OPEN, session="s", width=8, height=8)
    other = Client(c.sock.getsockopt_string(zmq.LAST_ENDPOINT))
    try:
        assert other.request(P.CLOSE, session="s").header["code"] == P.E_NO_SESSION
    finally:
        other.close()


# ---- flow control, cache, cancel ------------------------------------------------------------


def test_credits_busy_beyond(serve, client):
    _, ep = serve(credits=2)
    c = client(ep)
    assert c.request(P.OPEN, session="s", width=8, height=8,
                     options={"delay_ms": 30, "progress": False}).header["credits"] == 2
    for f in range(4):
        c.send(P.FRAME, {}, session="s", frame=f)
    got = {}
    while len(got) < 4:
        m = c.recv()
        got[m.frame] = m
    assert got[0].type == got[1].type == P.RESULT
    assert got[2].header["code"] == got[3].header["code"] == P.E_BUSY
    c.send(P.FRAME, {}, session="s", frame=2)  # a credit is free again
    assert c.result("s", 2)[0].type == P.RESULT


def test_cache_hit_same_settings_across_clients(serve, client):
    server, ep = serve()
    a, b = client(ep), client(ep)
    passes = make_passes(32, 32, salt=3)
    refs = {"ref0": np.full((4, 4, 3), 9, np.uint8)}
    settings_ = dict(width=32, height=32, seed=5, prompt="p", options={"steps": 2})
    a.request(P.OPEN, refs, session="x", **settings_)
    a.send(P.FRAME, passes, session="x", frame=1)
    first, _ = a.result("x", 1)
    a.send(P.FRAME, passes, session="x", frame=1)
    again, progress = a.result("x", 1)
    assert first.header["cached"] is False and again.header["cached"] is True
    assert progress == []
    np.testing.assert_array_equal(first.arrays["rgb"], again.arrays["rgb"])
    b.request(P.OPEN, refs, session="other-name", **settings_)
    b.send(P.FRAME, passes, session="other-name", frame=1)
    assert b.result("other-name", 1)[0].header["cached"] is True
    # any setting, ref image or pass byte changed: computed again
    b.request(P.OPEN, {"ref0": np.full((4, 4, 3), 8, np.uint8)}, session="r", **settings_)
    b.send(P.FRAME, passes, session="r", frame=1)
    assert b.result("r", 1)[0].header["cached"] is False
    b.request(P.OPEN, refs, session="y", **{**settings_, "seed": 6})
    b.send(P.FRAME, passes, session="y", frame=1)
    assert b.result("y", 1)[0].header["cached"] is False
    changed = dict(passes, mask=passes["mask"].copy())
    changed["mask"][0, 0] ^= 1
    a.send(P.FRAME, changed, session="x", frame=1)
    assert a.result("x", 1)[0].header["cached"] is False
    assert server.cache.bytes <= server.cache.max_bytes


def test_cache_is_bounded_by_bytes(serve, client):
    server, ep = serve(cache_mb=3 * 64 * 64 * 3 / 2**20)  # room for three 64x64 results
    c = client(ep)
    c.request(P.OPEN, session="s", width=64, height=64, options={"steps": 1})
    for f in range(6):
        c.send(P.FRAME, {}, session="s", frame=f)
        assert c.result("s", f)[0].type == P.RESULT
    assert len(server.cache) == 3 and server.cache.bytes == 3 * 64 * 64 * 3
    c.send(P.FRAME, {}, session="s", frame=0)  # evicted first
    assert c.result("s", 0)[0].header["cached"] is False
    c.send(P.FRAME, {}, session="s", frame=5)
    assert c.result("s", 5)[0].header["cached"] is True


def test_cancel_mid_frame(serve, client):
    server, ep = serve()
    c = client(ep)
    c.request(P.OPEN, session="s", width=16, height=16,
              options={"delay_ms": 150, "steps": 6})
    for f in range(3):
        c.send(P.FRAME, {}, session="s", frame=f)
    m = c.recv()
    assert m.type == P.PROGRESS and m.frame == 0
    t = time.monotonic()
    c.send(P.CANCEL, session="s")
    replies = [c.recv() for _ in range(3)]
    assert time.monotonic() - t < 0.5  # answered at once, not after the frame
    assert [(r.type, r.header["code"], r.frame) for r in replies] == [
        (P.ERROR, E_CANCELLED, f) for f in range(3)]
    # nothing else arrives for them; the running frame stopped between steps
    assert [m for m in c.drain(0.5) if m.type == P.RESULT] == []
    assert server.status()["queue_depth"] == 0
    assert c.request(P.PING).type == P.PONG
    c.request(P.OPEN, session="s", width=16, height=16, options={"steps": 1})
    c.send(P.FRAME, {}, session="s", frame=0)
    assert c.result("s", 0)[0].type == P.RESULT


def test_cancel_one_queued_frame(serve, client):
    _, ep = serve()
    c = client(ep)
    c.request(P.OPEN, session="s", width=16, height=16,
              options={"delay_ms": 40, "progress": False})
    for f in range(3):
        c.send(P.FRAME, {}, session="s", frame=f)
    c.send(P.CANCEL, session="s", frame=2)
    got = {}
    while len(got) < 3:
        m = c.recv()
        got[m.frame] = m
    assert got[0].type == got[1].type == P.RESULT
    assert got[2].header["code"] == E_CANCELLED
    assert c.drain(0.3) == []


# ---- malformed input ------------------------------------------------------------------------


def raw(**fields) -> bytes:
    return json.dumps({"v": P.PROTOCOL_VERSION, **fields}).encode()


MALFORMED = [
    ([b"\x00\xffnot json"], P.E_BAD_MESSAGE),
    ([b"{}"], P.E_VERSION),
    ([json.dumps({"v": 2, "type": "ping", "id": "z"}).encode()], P.E_VERSION),
    ([raw(type="teleport")], P.E_UNKNOWN_TYPE),
    ([raw(type="pong")], P.E_UNKNOWN_TYPE),
    ([raw(type="frame", session="s", frame=0,
          arrays=[{"name": "depth", "dtype": "float32", "shape": [8, 8]}])], P.E_BAD_MESSAGE),
    ([raw(type="frame", session="s", frame=0,
          arrays=[{"name": "depth", "dtype": "float32", "shape": [8, 8]}]), b"\0" * 10],
     P.E_BAD_ARRAY),
    ([raw(type="frame", session="s", frame=0,
          arrays=[{"name": "depth", "dtype": "float64", "shape": [8, 8]}]), b"\0" * 512],
     P.E_BAD_ARRAY),
    ([raw(type="frame", session="s", frame=0,
          arrays=[{"name": "depth", "dtype": "float32", "shape": [8000, 8000, 4]}]), b"\0"],
     P.E_TOO_BIG),
    ([raw(type="frame", session="s", frame="zero")], P.E_BAD_MESSAGE),
    ([raw(type="open", session="t", width=8, height=8, options="fast")], P.E_BAD_MESSAGE),
    ([raw(type="ping", pad="x" * (P.MAX_HEADER_BYTES + 1))], P.E_TOO_BIG),
    ([raw(type="ping", id="i" * 100_000)], P.E_TOO_BIG),
]


def test_malformed_messages_get_errors(serve, client):
    _, ep = serve()
    c = client(ep)
    c.request(P.OPEN, session="s", width=8, height=8)
    for frames, code in MALFORMED:
        c.sock.send_multipart(frames)
        m = c.recv()
        assert m.type == P.ERROR and m.header["code"] == code, (frames[0][:80], m.header)
    assert c.request(P.PING).type == P.PONG
    c.send(P.FRAME, make_passes(8, 8), session="s", frame=0)
    assert c.result("s", 0)[0].type == P.RESULT


json_value = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=10),
                          lambda v: st.lists(v, max_size=3)
                          | st.dictionaries(st.text(max_size=5), v, max_size=3), max_leaves=8)
header = st.fixed_dictionaries(
    {}, optional={"v": st.sampled_from([1, 1, 1, 0, "1"]),
                  "type": st.sampled_from(sorted(P.ALL_TYPES) + ["x"]),
                  "session": st.sampled_from(["s", "t", 3]),
                  "frame": st.one_of(st.integers(-2, 3), st.text(max_size=3)),
                  "width": st.integers(-1, 20), "height": st.integers(-1, 20),
                  "arrays": st.lists(st.fixed_dictionaries(
                      {}, optional={"name": st.sampled_from(["depth", "mask", "ref0", ""]),
                                    "dtype": st.sampled_from(sorted(P.DTYPES) + ["f8"]),
                                    "shape": st.lists(st.integers(-1, 9), max_size=4)}),
                      max_size=3),
                  "options": json_value, "seed": json_value})
message = st.one_of(
    st.lists(st.binary(max_size=200), min_size=1, max_size=4),
    st.tuples(header, st.lists(st.binary(max_size=600), max_size=3)).map(
        lambda hb: [json.dumps(hb[0]).encode(), *hb[1]]))


@pytest.fixture(scope="module")
def fuzz_target():
    server = Server(ServeConfig(bind=LOOP))
    ep = server.bind()
    thread = server.start()
    c = Client(ep)
    c.request(P.OPEN, session="s", width=8, height=8)
    yield server, c
    c.close()
    server.stop()
    thread.join(5)


@settings(max_examples=250, deadline=None, suppress_health_check=[
    HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(msgs=st.lists(message, min_size=1, max_size=4))
def test_fuzz_live_server(fuzz_target, msgs):
    server, c = fuzz_target
    for frames in msgs:
        c.sock.send_multipart(frames)
    c.drain(0.0)
    pong = c.request(P.PING, timeout=3)
    assert pong.type == P.PONG


def test_fuzz_then_normal_session(fuzz_target):
    server, c = fuzz_target
    c.drain(0.1)
    c.request(P.OPEN, session="after", width=8, height=8, options={"steps": 1})
    c.send(P.FRAME, {"mask": np.ones((8, 8), np.uint8)}, session="after", frame=0)
    res, _ = c.result("after", 0)
    assert res.type == P.RESULT
    assert server.status()["sessions"] <= server.cfg.max_sessions


# ---- several clients, idle clients ----------------------------------------------------------


def test_four_concurrent_clients(serve):
    _, ep = serve()
    W, H, N = 48, 32, 8
    errors: list[str] = []

    def shot(k: int) -> None:
        c = Client(ep)
        try:
            c.request(P.OPEN, session="shot", width=W, height=H, seed=100 + k,
                      options={"steps": 2, "delay_ms": 2})
            pending, sent, done = set(), 0, {}
            while len(done) < N:
                while sent < N and len(pending) < 4:
                    c.send(P.FRAME, make_passes(H, W, salt=k * 100 + sent), session="shot",
                           frame=sent)
                    pending.add(sent)
                    sent += 1
                m = c.recv()
                if m.type == P.RESULT:
                    pending.discard(m.frame)
                    assert m.frame not in done
                    done[m.frame] = m.arrays["rgb"].copy()
                elif m.type == P.ERROR:
                    raise AssertionError(m.header)
            for f, rgb in done.items():
                want = expected(make_passes(H, W, salt=k * 100 + f), 100 + k, f, W, H)
                np.testing.assert_array_equal(rgb, want)
        except Exception as e:  # reported by the main thread
            errors.append(f"client {k}: {e!r}")
        finally:
            c.close()

    threads = [threading.Thread(target=shot, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert errors == []


CLIENT_SCRIPT = textwrap.dedent("""
    import sys, time, zmq
    from painted_skin import wire as P
    ctx = zmq.Context(); s = ctx.socket(zmq.DEALER); s.connect(sys.argv[1])
    s.send_multipart(P.encode(P.OPEN, session="doomed", width=16, height=16,
                              options={"delay_ms": 200}))
    s.recv_multipart()
    for f in range(4):
        s.send_multipart(P.encode(P.FRAME, session="doomed", frame=f))
    print("streaming", flush=True)
    while True:
        s.send_multipart(P.encode(P.PING)); time.sleep(0.2)
""")


def test_killed_client_is_freed_others_served(serve, client, tmp_path):
    server, ep = serve(session_timeout=1.0)
    script = tmp_path / "client.py"
    script.write_text(CLIENT_SCRIPT)
    proc = subprocess.Popen([PY, str(script), ep], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "streaming"
        live = client(ep)
        live.request(P.OPEN, session="alive", width=16, height=16, options={"steps": 1})
        assert live.request(P.STATUS).header["sessions"] == 2
        proc.send_signal(signal.SIGKILL)
        proc.wait(5)
        deadline = time.monotonic() + 6
        frame = 0
        while True:  # the live client keeps working (and pinging) meanwhile
            live.send(P.FRAME, {}, session="alive", frame=frame)
            res, _ = live.result("alive", frame, timeout=5, keepalive=0.3)
            assert res.type == P.RESULT
            frame += 1
            st_ = live.request(P.STATUS).header
            if st_["sessions"] == 1:
                break
            assert time.monotonic() < deadline, st_
            time.sleep(0.2)
        assert st_["queue_depth"] == 0
    finally:
        proc.kill()
        proc.wait(5)


# ---- CurveZMQ and the command line ----------------------------------------------------------


def test_public_bind_without_keys_is_refused(capsys):
    for ep in ("tcp://0.0.0.0:5555", "tcp://*:5555", "tcp://192.168.1.20:5555"):
        with pytest.raises(auth.InsecureEndpoint):
            Server(ServeConfig(bind=ep)).bind()
        assert commands.main(["serve", "--bind", ep]) == 2
        assert "refusing to bind" in capsys.readouterr().err
    assert commands.main(["serve", "--connect", "tcp://10.0.0.1:5556"]) == 2
    assert commands.main(["broker", "--frontend", "tcp://0.0.0.0:5555"]) == 2
    for ep in ("tcp://127.0.0.1:5555", "tcp://localhost:1", "tcp://[::1]:5", "ipc:///tmp/x"):
        assert auth.is_loopback(ep)


def test_curve_keys(serve, client, tmp_path):
    keys = tmp_path / "keys"
    assert commands.main(["keys", str(keys)]) == 0
    names = sorted(p.name for p in keys.iterdir())
    assert names == ["client.key", "client.key_secret", "server.key", "server.key_secret",
                     "workers"]
    assert sorted(p.name for p in (keys / "workers").iterdir()) == ["worker.key",
                                                                    "worker.key_secret"]
    _, ep = serve(keys=str(keys))  # curve on, even on loopback
    plain = client(ep)
    plain.send(P.PING)
    with pytest.raises(TimeoutError):
        plain.recv(0.7)
    stranger = client(ep, keys=keys, secret=zmq.curve_keypair())
    stranger.send(P.PING)
    with pytest.raises(TimeoutError):
        stranger.recv(0.7)
    good = client(ep, keys=keys)
    assert good.request(P.PING).type == P.PONG


def test_serve_command_process(tmp_path):
    proc, line = spawn("serve", "--bind", LOOP, "--credits", "3")
    try:
        assert "listening on tcp://127.0.0.1:" in line
        ep = line.split("listening on ")[1].split()[0]
        c = Client(ep)
        try:
            assert c.request(P.OPEN, session="s", width=8, height=8).header["credits"] == 3
        finally:
            c.close()
    finally:
        assert stop(proc) == 0


def test_module_entry_point():
    """``python -m painted_skin.backend serve`` is the backend's own entry (no CLI)."""
    out = subprocess.run([PY, "-m", "painted_skin.backend", "serve", "--bind",
                          "tcp://0.0.0.0:1"], capture_output=True, text=True, timeout=20)
    assert out.returncode == 2 and "--keys" in out.stderr
    assert os.path.basename(PY)  # the venv's python ran it


@pytest.mark.parametrize("change, words", [
    ({"parts": np.full((32, 32), 255, np.uint8)}, "parts pass holds id 255"),
    ({"uv": None}, "needs pass(es) uv"),
    ({"light_visibility": None}, "needs pass(es) light_visibility"),
], ids=["parts-255", "no-uv", "no-light-visibility"])
def test_a_skin_frame_it_cannot_paint_is_bad_array_not_a_bug(serve, client, caplog, change,
                                                             words):
    """A frame whose passes the skin model cannot use is the client's to fix: ``bad_array``
    with the reason, no traceback in the log, and the backend keeps serving."""
    from painted_skin.backend.skin import features

    _, ep = serve()
    c = client(ep)
    opened = c.request(P.OPEN, session="s", pipeline="skin", width=32, height=32,
                       options={"model": "demo"}, timeout=60)
    assert opened.type == P.OPENED, opened.header
    passes = make_passes(32, 32)
    passes["parts"] = passes["parts"] % features.NUM_PARTS
    passes["uv"] = np.zeros((32, 32, 3), np.float32)
    passes["rest_position"] = np.zeros((32, 32, 3), np.float32)
    passes["light_visibility"] = np.zeros((32, 32, features.NUM_LIGHTS), np.uint8)
    passes["normal_world"] = np.zeros((32, 32, 3), np.float16)
    passes["view_dir"] = np.zeros((32, 32, 3), np.float16)
    passes["irradiance"] = np.zeros((32, 32, 3), np.float16)
    passes["specular"] = np.zeros((32, 32, 3), np.float16)
    passes["albedo"] = np.zeros((32, 32, 3), np.float16)
    for name, value in change.items():
        if value is None:
            passes.pop(name)
        else:
            passes[name] = value
    caplog.set_level(logging.WARNING)
    c.send(P.FRAME, passes, session="s", frame=1)
    m, _ = c.result("s", 1, timeout=60)
    assert m.type == P.ERROR and m.header["code"] == P.E_BAD_ARRAY, m.header
    assert words in m.header["message"]
    assert not [r for r in caplog.records if r.exc_info]  # no traceback: not a bug
    assert c.request(P.PING).type == P.PONG
