"""The Paranoid Pirate broker: workers behind one address, a dead worker's frames re-queued."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator

import numpy as np
import pytest
from painted_skin import wire as P
from painted_skin.backend.broker.service import Broker, BrokerConfig
from painted_skin.backend.server import E_CANCELLED, ServeConfig, Server
from test_backend_server import LOOP, Client, expected, make_passes, spawn, stop


def wait_workers(c: Client, n: int, timeout: float = 8.0) -> dict:
    end = time.monotonic() + timeout
    while True:
        st = c.request(P.STATUS).header
        if st["workers"] == n:
            return st
        assert time.monotonic() < end, st
        time.sleep(0.1)


@pytest.fixture
def cluster() -> Iterator:
    """cluster(workers, **broker config) -> (broker, frontend, [worker servers]), in-process."""
    made: list = []

    def make(workers: int = 2, **kw) -> tuple[Broker, str, list[Server]]:
        broker = Broker(BrokerConfig(frontend=LOOP, backend=LOOP, **kw))
        front, back = broker.bind()
        made.append((broker, broker.start()))
        servers = []
        for _ in range(workers):
            s = Server(ServeConfig(connect=back))
            s.connect()
            made.append((s, s.start()))
            servers.append(s)
        return broker, front, servers

    yield make
    for obj, thread in reversed(made):
        obj.stop()
        thread.join(5)


def test_broker_looks_like_a_server(cluster):
    broker, front, _ = cluster(2)
    c = Client(front)
    try:
        st = wait_workers(c, 2)
        assert "echo" in st["pipelines"] and "cpu" in st["devices"]
        assert "demo" in st["models"]["skin"]  # the workers' registries, merged
        pong = c.request(P.PING)
        assert pong.type == P.PONG and pong.header["version"] == P.PROTOCOL_VERSION
        assert c.request(P.FRAME, session="ghost", frame=0).header["code"] == P.E_NO_SESSION
        m = c.request(P.OPEN, session="s", pipeline="nope", width=8, height=8)
        assert m.type == P.ERROR and "nope" in m.header["message"]
        m = c.request(P.OPEN, session="s", width=0, height=8)
        assert m.type == P.ERROR and "bad size" in m.header["message"]
        assert c.request(P.STATUS).header["sessions"] == 0
        opened = c.request(P.OPEN, session="s", seed=9, width=32, height=16,
                           options={"steps": 2})
        assert opened.type == P.OPENED and opened.header["credits"] == 4
        passes = make_passes(16, 32, salt=4)
        c.send(P.FRAME, passes, session="s", frame=3)
        res, progress = c.result("s", 3)
        assert res.type == P.RESULT and len(progress) == 2
        np.testing.assert_array_equal(res.arrays["rgb"], expected(passes, 9, 3, 32, 16))
        m = c.request(P.FRAME, {"depth": np.zeros((16, 32), np.float16)}, session="s", frame=4)
        assert m.header["code"] == P.E_BAD_ARRAY
        # cancel through the broker
        c.request(P.OPEN, session="slow", width=8, height=8,
                  options={"delay_ms": 100, "progress": False})
        for f in range(3):
            c.send(P.FRAME, {}, session="slow", frame=f)
        c.send(P.CANCEL, session="slow")
        codes = sorted((m.frame, m.header.get("code")) for m in (c.recv() for _ in range(3)))
        assert codes == [(f, E_CANCELLED) for f in range(3)]
        assert c.drain(0.5) == []
        assert c.request(P.CLOSE, session="s").type == P.CLOSED
        assert c.request(P.CLOSE, session="s").header["code"] == P.E_NO_SESSION
    finally:
        c.close()


def test_no_workers_is_busy(cluster):
    _, front, _ = cluster(0)
    c = Client(front)
    try:
        m = c.request(P.OPEN, session="s", width=8, height=8)
        assert m.header["code"] == P.E_BUSY and "no backend worker" in m.header["message"]
        assert c.request(P.STATUS).header["workers"] == 0
    finally:
        c.close()


def test_silent_client_sessions_freed(cluster):
    broker, front, servers = cluster(1, session_timeout=0.8)
    quiet, other = Client(front), Client(front)
    try:
        wait_workers(other, 1)
        quiet.request(P.OPEN, session="q", width=8, height=8)
        assert other.request(P.STATUS).header["sessions"] == 1
        end = time.monotonic() + 5
        while broker.sessions or servers[0].status()["sessions"]:
            assert time.monotonic() < end
            other.request(P.PING)
            time.sleep(0.1)
    finally:
        quiet.close()
        other.close()


def test_worker_killed_mid_shot_frames_arrive_once(tmp_path):
    log = tmp_path / "broker.log"
    broker, line = spawn("broker", "--frontend", LOOP, "--backend", LOOP, log=log)
    procs = [broker]
    try:
        front, back = line.split("listening on ")[1].split()[0], line.split()[-2]
        assert back.startswith("tcp://127.0.0.1:")
        workers = [spawn("serve", "--connect", back)[0] for _ in range(2)]
        procs += workers
        c = Client(front)
        try:
            wait_workers(c, 2)
            S, N, W, H = 4, 10, 32, 24
            for k in range(S):
                assert c.request(P.OPEN, session=f"s{k}", seed=k, width=W, height=H,
                                 options={"steps": 2, "delay_ms": 40,
                                          "progress": False}).type == P.OPENED
            sent = dict.fromkeys(range(S), 0)
            pending: dict[int, set[int]] = {k: set() for k in range(S)}
            results: dict[tuple[int, int], int] = {}
            killed = False
            end = time.monotonic() + 30
            while len(results) < S * N:
                assert time.monotonic() < end, (len(results), pending)
                for k in range(S):
                    while sent[k] < N and len(pending[k]) < 4:
                        f = sent[k]
                        c.send(P.FRAME, make_passes(H, W, salt=100 * k + f), session=f"s{k}",
                               frame=f)
                        pending[k].add(f)
                        sent[k] += 1
                if not killed and len(results) >= 8:
                    workers[0].send_signal(signal.SIGKILL)
                    killed = True
                try:
                    m = c.recv(0.5)
                except TimeoutError:
                    c.send(P.PING)  # keep our sessions alive while the broker notices
                    continue
                if m.type == P.OPENED:  # moved to the other worker (empty state there)
                    assert m.header["moved"] is True
                    continue
                if m.type == P.ERROR:  # its frames in flight come back: send them again
                    assert m.header["code"] == P.E_CANCELLED and "moved" in m.header["message"]
                    k = int(m.session[1:])
                    c.send(P.FRAME, make_passes(H, W, salt=100 * k + m.frame),
                           session=m.session, frame=m.frame)
                    continue
                if m.type != P.RESULT:
                    assert m.type == P.PONG, m.header
                    continue
                k = int(m.session[1:])
                results[(k, m.frame)] = results.get((k, m.frame), 0) + 1
                pending[k].discard(m.frame)
                want = expected(make_passes(H, W, salt=100 * k + m.frame), k, m.frame, W, H)
                np.testing.assert_array_equal(m.arrays["rgb"], want)
            assert killed and set(results.values()) == {1}
            assert [m for m in c.drain(0.5) if m.type == P.RESULT] == []  # no late duplicate
            st = wait_workers(c, 1)
            assert st["sessions"] == S and st["queue_depth"] == 0
            moved = log.read_text()
            assert "taken for dead" in moved and "moved to worker" in moved, moved
        finally:
            c.close()
    finally:
        for p in reversed(procs):
            stop(p)


def test_worker_reconnects_to_a_restarted_broker(cluster):
    broker, front, servers = cluster(1)
    c = Client(front)
    try:
        wait_workers(c, 1)
    finally:
        c.close()
    broker.stop()
    time.sleep(0.3)  # its run loop closes the sockets
    again = Broker(BrokerConfig(frontend=front, backend=servers[0].endpoint))
    again.bind()
    thread = again.start()
    c = Client(front)
    try:
        wait_workers(c, 1, timeout=10)  # Paranoid Pirate: the worker comes back
        c.request(P.OPEN, session="s", width=8, height=8)
        c.send(P.FRAME, {}, session="s", frame=0)
        assert c.result("s", 0)[0].type == P.RESULT
    finally:
        c.close()
        again.stop()
        thread.join(5)


def test_add_on_client_carries_its_chain_across_a_worker_failover(tmp_path):
    """A worker dies mid-shot: the broker hands the session's frames back, the add-on's
    client sends them again to the new worker, the first with the previous frame
    carried (a temporal chain continues), and every frame arrives once, correct."""
    from painted_skin.addon.blender.client.backend_client import BackendClient

    broker, line = spawn("broker", "--frontend", LOOP, "--backend", LOOP,
                         log=tmp_path / "broker.log")
    procs = [broker]
    try:
        front, back = line.split("listening on ")[1].split()[0], line.split()[-2]
        workers = [spawn("serve", "--connect", back)[0] for _ in range(2)]
        procs += workers
        probe = Client(front)
        try:
            wait_workers(probe, 2)
        finally:
            probe.close()
        W, H, N = 32, 24, 16
        got: dict[int, np.ndarray] = {}
        carried: list[int] = []

        def carry_for(f: int) -> dict | None:
            if f - 1 not in got:
                return None
            carried.append(f)
            return {"carry_rgb": got[f - 1], "carry_depth": np.zeros((H, W), np.float32)}

        def on_result(r) -> None:
            got[r.frame] = r.rgb
            if len(got) == 5:  # both workers die; a new one takes the session over
                for w in workers:
                    w.send_signal(signal.SIGKILL)
                procs.append(spawn("serve", "--connect", back)[0])

        frames = ((f, make_passes(H, W, salt=f)) for f in range(N))
        with BackendClient(front, timeout_s=30) as c:
            c.open("echo", W, H, seed=9, options={"steps": 2, "delay_ms": 60,
                                                  "progress": False})
            c.run_shot(frames, on_result, carry_for=carry_for)
        assert sorted(got) == list(range(N))
        for f, rgb in got.items():
            np.testing.assert_array_equal(rgb, expected(make_passes(H, W, salt=f), 9, f, W, H))
        assert carried == [5]  # the first frame sent again after the move, and only it
    finally:
        for p in reversed(procs):
            stop(p)
