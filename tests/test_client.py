"""Transport client against a live backend process on 127.0.0.1: ping/status, a
whole shot, credits, SIGKILL + restart mid-shot, resume without re-sending.

Runs the real ``painted-skin serve`` when backend/server.py exists, else the
small fake ROUTER below (``python tests/test_client.py URL [LOG]``), which
follows the same contract with the real echo pipeline's picture.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
REAL_SERVER = (REPO / "backend" / "server.py").exists()


# -- the fake backend (a subprocess, so that it can be SIGKILLed) -----------------------------

def fake_serve(url: str, log: str | None = None) -> None:
    """A ROUTER echo following the contract: sessions, credits, progress, cancel.
    ``log``: one JSON line per computed frame (to count what the backend did)."""
    import zmq
    from painted_skin.backend import protocol as P
    from painted_skin.backend.pipelines.echo import echo_image

    sock = zmq.Context.instance().socket(zmq.ROUTER)
    sock.bind(url)
    sessions: dict[str, dict] = {}
    queue: list[tuple[bytes, str, int, str, dict]] = []  # ident, session, frame, id, arrays
    logf = open(log, "a") if log else None  # noqa: SIM115

    def reply(ident: bytes, mtype: str, arrays=None, **fields) -> None:
        sock.send_multipart([ident, *P.encode(mtype, arrays, **fields)], copy=False)

    while True:
        timeout = 0 if queue else 100
        if sock.poll(timeout):
            ident, *frames = sock.recv_multipart(copy=False)
            ident = ident.bytes
            try:
                m = P.decode(frames, expect=P.CLIENT_TYPES)
            except P.ProtocolError as e:
                sock.send_multipart([ident, *P.error_frames(e)])
                continue
            h, sid = m.header, m.header.get("session")
            if m.type == P.PING:
                reply(ident, P.PONG, version=P.PROTOCOL_VERSION, server="fake", ref=m.id)
            elif m.type == P.STATUS:
                reply(ident, P.STATUS_REPLY, ref=m.id, version=P.PROTOCOL_VERSION,
                      devices=["cpu"], pipelines=["echo"], loaded_models=[],
                      queue_depth=len(queue), sessions=len(sessions), workers=1)
            elif m.type == P.OPEN:
                queue[:] = [q for q in queue if q[1] != sid]
                sessions[sid] = dict(h, credits=2)
                reply(ident, P.OPENED, session=sid, credits=2, ref=m.id)
            elif m.type == P.FRAME:
                if sid not in sessions:
                    reply(ident, P.ERROR, code=P.E_NO_SESSION, message="no such session",
                          ref=m.id, session=sid)
                elif sum(q[1] == sid for q in queue) >= sessions[sid]["credits"]:
                    reply(ident, P.ERROR, code=P.E_BUSY, message="over credits", ref=m.id,
                          session=sid)
                else:
                    arrays = {k: np.array(v) for k, v in m.arrays.items()}
                    queue.append((ident, sid, int(h["frame"]), m.id, arrays))
            elif m.type == P.CANCEL:
                for q in [q for q in queue if q[1] == sid]:
                    queue.remove(q)
                    reply(ident, P.ERROR, code="cancelled", message="cancelled", ref=q[3],
                          session=sid, frame=q[2])
            elif m.type == P.CLOSE:
                sessions.pop(sid, None)
                reply(ident, P.CLOSED, session=sid, ref=m.id)
            continue
        if queue:
            ident, sid, f, mid, arrays = queue.pop(0)
            s = sessions[sid]
            delay = float(s.get("options", {}).get("delay_ms", 0)) / 1000
            for step in (1, 2):
                time.sleep(delay / 2)
                reply(ident, P.PROGRESS, session=sid, frame=f, step=step, steps=2)
            rgb = echo_image(arrays, s["seed"], s["width"], s["height"])
            if logf:
                logf.write(json.dumps({"session": sid, "frame": f}) + "\n")
                logf.flush()
            reply(ident, P.RESULT, {"rgb": rgb}, session=sid, frame=f, seed=s["seed"],
                  timings={"total_ms": delay * 1000}, cached=False, ref=mid)


# -- helpers shared with test_restyle.py -------------------------------------------------------

def free_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{s.getsockname()[1]}"


def start_backend(url: str, log: Path | None = None) -> subprocess.Popen:
    """The backend as a child process (real server when present, else the fake)."""
    if REAL_SERVER:
        cmd = [sys.executable, "-m", "painted_skin.cli", "serve", "--bind", url]
    else:
        cmd = [sys.executable, __file__, url] + ([str(log)] if log else [])
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(10)
    if proc.stderr:
        proc.stderr.close()


@pytest.fixture
def backend():
    url = free_url()
    proc = start_backend(url)
    yield url, proc
    stop(proc)


def passes(f: int, h: int = 24, w: int = 32) -> dict[str, np.ndarray]:
    """Wire-typed passes whose echo picture differs per frame."""
    rng = np.random.default_rng(f)
    normal = rng.uniform(-1, 1, (h, w, 3)).astype(np.float16)
    return {"depth": np.full((h, w), 2.0 + f, np.float32), "normal": normal,
            "skeleton": np.zeros((h, w, 3), np.uint8),
            "mask": (rng.random((h, w)) > 0.3).astype(np.uint8) * 255,
            "motion": np.zeros((h, w, 4), np.float16), "parts": np.zeros((h, w), np.uint8)}


def expected(f: int, seed: int, h: int = 24, w: int = 32) -> np.ndarray:
    from painted_skin.backend.pipelines.echo import echo_image

    return echo_image(passes(f, h, w), seed, w, h)


def client(url: str, **kw):
    from painted_skin.addon.blender.client import BackendClient

    kw = {"timeout_s": 20.0, "heartbeat_s": 0.3, "heartbeat_timeout": 1.5, **kw}
    return BackendClient(url, **kw)


# -- tests -----------------------------------------------------------------------------------

def test_ping_status_and_unavailable(backend):
    from painted_skin.addon.blender.client import BackendUnavailable

    url, _ = backend
    with client(url) as c:
        pong = c.ping()
        assert pong["type"] == "pong" and pong["version"] == 1
        st = c.status()
        assert "echo" in st["pipelines"] and "queue_depth" in st
    t = time.monotonic()
    with client(free_url(), timeout_s=1.0) as c, pytest.raises(BackendUnavailable):
        c.ping()
    assert time.monotonic() - t < 3


def test_shot_results_correct_and_credits_respected(backend):
    url, _ = backend
    seed = 7
    got: dict[int, np.ndarray] = {}
    progress: list[tuple[int, int, int]] = []
    with client(url) as c:
        credits = c.open("echo", width=32, height=24, seed=seed, options={"delay_ms": 10})
        assert credits >= 1
        peak = 0

        def frames():
            nonlocal peak
            for f in range(1, 13):
                peak = max(peak, len(c.shot.inflight) + 1)
                yield f, passes(f)

        summary = c.run_shot(frames(), lambda r: got.__setitem__(r.frame, np.array(r.rgb)),
                             lambda *p: progress.append(p))
    assert sorted(got) == list(range(1, 13))
    for f, rgb in got.items():
        np.testing.assert_array_equal(rgb, expected(f, seed))
    assert peak <= credits
    assert summary["answered"] == 12 and summary["resent"] == 0
    assert progress and all(1 <= s <= n for _, s, n in progress)


def test_cancel_drops_the_rest(backend):
    url, _ = backend
    got: list[int] = []
    with client(url) as c:
        c.open("echo", width=32, height=24, options={"delay_ms": 100})
        summary = c.run_shot(((f, passes(f)) for f in range(100)),
                             lambda r: got.append(r.frame), cancelled=lambda: len(got) >= 2)
    assert summary["cancelled"] and 2 <= len(got) < 10
    assert len(got) == len(set(got))


@pytest.mark.slow
def test_backend_killed_mid_shot_resumes_without_loss(tmp_path):
    """SIGKILL the backend mid-shot, restart it: the client notices within the
    heartbeat timeout, re-opens, re-sends what was unanswered; every frame is
    answered exactly once. A re-run skips frames already on disk."""
    url = free_url()
    log = tmp_path / "backend.log"
    proc = start_backend(url, log)
    out = tmp_path / "out"
    out.mkdir()
    seed, n = 3, 24
    answered: list[int] = []
    killed: dict[str, float] = {}

    def on_result(r) -> None:
        answered.append(r.frame)
        np.save(out / f"{r.frame:04d}.npy", r.rgb)
        if len(answered) == 6 and not killed:
            proc.send_signal(signal.SIGKILL)
            proc.wait(5)
            killed["t"] = time.monotonic()

    def restart() -> None:
        nonlocal proc
        if proc.poll() is not None:
            killed.setdefault("noticed", time.monotonic())
            stop(proc)
            proc = start_backend(url, log)

    try:
        with client(url, on_dead=restart) as c:
            c.open("echo", width=32, height=24, seed=seed, options={"delay_ms": 30})
            summary = c.run_shot(((f, passes(f)) for f in range(n)), on_result)
            assert c.reconnects >= 1
        print("noticed after", killed["noticed"] - killed["t"], summary)
        assert killed["noticed"] - killed["t"] < 1.5 + 0.5  # heartbeat timeout + a poll
        assert sorted(answered) == list(range(n)), "lost or duplicated frames"
        for f in range(n):
            np.testing.assert_array_equal(np.load(out / f"{f:04d}.npy"), expected(f, seed))
        assert summary["resent"] >= 1
        # Re-run over the same folder: only the missing frames go out.
        for f in (5, 17):
            (out / f"{f:04d}.npy").unlink()
        sent: list[int] = []

        def todo():
            for f in range(n):
                if not (out / f"{f:04d}.npy").exists():
                    sent.append(f)
                    yield f, passes(f)

        with client(url) as c:
            c.open("echo", width=32, height=24, seed=seed)
            c.run_shot(todo(), lambda r: np.save(out / f"{r.frame:04d}.npy", r.rgb))
        assert sent == [5, 17]
        assert all((out / f"{f:04d}.npy").exists() for f in range(n))
    finally:
        stop(proc)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    fake_serve(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None)
