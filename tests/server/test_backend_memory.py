"""Refused and accepted messages leave a real server's memory where it was.

A message over the cap is answered ``too_big``; none of it may stay allocated
(an exception, its traceback or a routing list holding the parts would keep
tens of megabytes per message, and any local client could exhaust the machine).
The server runs as its own process with a small cap (``--max-message-mb``) so a
refused message costs the test 40 MB, not gigabytes.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
import zmq
from painted_skin import wire as P
from test_backend_server import LOOP, Client, make_passes, spawn, stop

pytestmark = pytest.mark.skipif(not Path("/proc/self/status").exists(),
                                reason="reads the server's RSS from /proc")

CAP_MB = 16
PART = 8 * 2**20  # five of them: over the cap, each under the per-part limit


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def refused(c: Client, blob: bytes, i: int) -> None:
    head = P.encode(P.PING, id=f"big{i}")[0]
    c.sock.send_multipart([head] + [blob] * 5, copy=False)
    m = c.recv(10)
    assert m.type == P.ERROR and m.header["code"] == P.E_TOO_BIG, m.header


def accepted(c: Client, frame: int) -> None:
    c.send(P.FRAME, make_passes(64, 64, salt=frame), session="s", frame=frame)
    assert c.result("s", frame, timeout=10)[0].type == P.RESULT


def peak_growth(pid: int, n: int, step) -> float:
    """The most the RSS of ``pid`` rose above its level before ``n`` calls of ``step``
    (sampled after each: a garbage collection late in the batch must not hide a
    leak that held hundreds of megabytes meanwhile)."""
    time.sleep(0.2)
    before = rss_mb(pid)
    peak = before
    for i in range(n):
        step(i)
        peak = max(peak, rss_mb(pid))
    print(f"RSS {before:.1f} MB, peak {peak:.1f} MB over {n} steps", file=sys.stderr)
    return peak - before


# Allocator pools may grow by a message's worth once (seen: +40 MB, then flat);
# keeping the parts held 24 MB a refused message, over 200 MB for a batch of 12.
BOUND_MB = 64


def test_refused_messages_leave_no_memory_behind(tmp_path):
    proc, line = spawn("serve", "--bind", LOOP, "--max-message-mb", str(CAP_MB),
                       "--cache-mb", "0", log=tmp_path / "serve.log")
    try:
        endpoint = line.split("listening on ")[1].split()[0]
        c = Client(endpoint)
        try:
            c.sock.setsockopt(zmq.SNDHWM, 4)
            assert c.request(P.OPEN, session="s", width=64, height=64,
                             options={"steps": 1, "progress": False}).type == P.OPENED
            blob = bytes(PART)

            def step(i: int) -> None:  # one refused 40 MB message, one accepted frame
                refused(c, blob, i)
                accepted(c, i)

            for i in range(3):  # warm up: allocator pools, first-use imports
                step(100 + i)
            growth = peak_growth(proc.pid, 12, step)
            assert c.request(P.PING).type == P.PONG
        finally:
            c.close()
    finally:
        stop(proc)
    assert growth < BOUND_MB, f"server RSS grew {growth:.1f} MB"


def test_refused_message_rss_on_the_broker(tmp_path):
    """The broker drains and frees a refused message the same way, and says too_big."""
    proc, line = spawn("broker", "--frontend", LOOP, "--backend", LOOP,
                       "--max-message-mb", str(CAP_MB), log=tmp_path / "broker.log")
    try:
        front = line.split("listening on ")[1].split()[0]
        c = Client(front)
        try:
            blob = bytes(PART)
            for i in range(3):
                refused(c, blob, 100 + i)
            growth = peak_growth(proc.pid, 12, lambda i: refused(c, blob, i))
            assert c.request(P.PING).type == P.PONG
        finally:
            c.close()
    finally:
        stop(proc)
    assert growth < BOUND_MB, f"broker RSS grew {growth:.1f} MB"

