"""Soak: 4 clients x 200 frames through a broker with two workers, one worker
SIGKILLed and replaced every 50 frames; every frame arrives exactly once and
correct, and the broker's memory stays flat. Slow (about a minute): ``-m slow``."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import zmq
from painted_skin import wire as P
from test_backend_memory import rss_mb
from test_backend_server import LOOP, Client, expected, make_passes, spawn, stop
from test_broker import wait_workers

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not Path("/proc/self/status").exists(),
                                 reason="reads the broker's RSS from /proc")]

CLIENTS, FRAMES, KILL_EVERY, CREDITS = 4, 200, 50, 4
W, H, SEED = 32, 24, 5


def passes_of(k: int, f: int) -> dict[str, np.ndarray]:
    return make_passes(H, W, salt=1000 * k + f)


def test_soak_worker_killed_every_50_frames_nothing_lost_or_doubled(tmp_path):
    broker, line = spawn("broker", "--frontend", LOOP, "--backend", LOOP,
                         log=tmp_path / "broker.log")
    front, back = line.split("listening on ")[1].split()[0], line.split()[-2]
    workers = [spawn("serve", "--connect", back, log=tmp_path / f"w{i}.log")[0]
               for i in range(2)]
    clients = [Client(front) for _ in range(CLIENTS)]
    try:
        wait_workers(clients[0], 2, timeout=30)
        for k, c in enumerate(clients):
            assert c.request(P.OPEN, session="s", seed=SEED + k, width=W, height=H,
                             options={"steps": 1, "delay_ms": 5, "progress": False},
                             timeout=20).type == P.OPENED
        poller = zmq.Poller()
        for c in clients:
            poller.register(c.sock, zmq.POLLIN)
        by_sock = {c.sock: k for k, c in enumerate(clients)}
        sent = [0] * CLIENTS
        pending: list[set[int]] = [set() for _ in range(CLIENTS)]
        got: dict[tuple[int, int], int] = {}
        kills, spawned, rss = 0, 2, {}
        last_ping = 0.0
        end = time.monotonic() + 600
        while len(got) < CLIENTS * FRAMES:
            assert time.monotonic() < end, (len(got), pending)
            for k, c in enumerate(clients):
                while sent[k] < FRAMES and len(pending[k]) < CREDITS:
                    c.send(P.FRAME, passes_of(k, sent[k]), session="s", frame=sent[k])
                    pending[k].add(sent[k])
                    sent[k] += 1
            now = time.monotonic()
            if now - last_ping > 1.0:  # keep the sessions alive while a move is noticed
                for c in clients:
                    c.send(P.PING)
                last_ping = now
            for sock, _ in poller.poll(100):
                k = by_sock[sock]
                c = clients[k]
                while sock.poll(0):
                    m = c.recv(0)
                    if m.type in (P.PONG, P.OPENED):  # OPENED: moved (state starts empty)
                        continue
                    if m.type == P.ERROR:  # handed back by a move: send it again
                        assert m.header["code"] == P.E_CANCELLED, m.header
                        assert m.frame in pending[k], m.header
                        c.send(P.FRAME, passes_of(k, m.frame), session="s", frame=m.frame)
                        continue
                    assert m.type == P.RESULT, m.header
                    got[(k, m.frame)] = got.get((k, m.frame), 0) + 1
                    pending[k].discard(m.frame)
                    np.testing.assert_array_equal(
                        m.arrays["rgb"], expected(passes_of(k, m.frame), SEED + k, m.frame, W, H))
            done = len(got)
            if done >= 2 * KILL_EVERY and "start" not in rss:
                rss["start"] = rss_mb(broker.pid)
            if done >= KILL_EVERY * (kills + 1) and done < CLIENTS * FRAMES:
                victim = workers.pop(0)  # the older one: both get replaced in turn
                victim.send_signal(signal.SIGKILL)
                victim.wait(5)
                workers.append(spawn("serve", "--connect", back,
                                     log=tmp_path / f"w{spawned}.log")[0])
                kills += 1
                spawned += 1
        rss["end"] = rss_mb(broker.pid)
        late = [m for c in clients for m in c.drain(1.0) if m.type == P.RESULT]
    finally:
        for c in clients:
            c.close()
        for p in [*workers, broker]:
            stop(p)
    lost = CLIENTS * FRAMES - len(got)
    doubled = sum(n - 1 for n in got.values()) + len(late)
    growth = rss["end"] - rss["start"]
    print(f"soak: {len(got)} frames, {kills} workers killed, {lost} lost, {doubled} doubled; "
          f"broker RSS {rss['start']:.1f} -> {rss['end']:.1f} MB", file=sys.stderr)
    assert kills == CLIENTS * FRAMES // KILL_EVERY - 1
    assert lost == 0 and doubled == 0
    assert growth < 16, f"broker RSS grew {growth:.1f} MB"
