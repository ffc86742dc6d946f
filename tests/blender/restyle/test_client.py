"""Transport client against a live backend process (``painted-skin serve``, the
echo pipeline) on 127.0.0.1: ping/status, a whole shot, credits, cancel,
SIGKILL + restart mid-shot, and a re-run that sends only what is missing."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

# -- helpers shared with test_restyle.py -------------------------------------------------------

def free_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{s.getsockname()[1]}"


def serve_command(url: str) -> list[str]:
    return [sys.executable, "-m", "painted_skin.backend", "serve", "--bind", url]


def start_backend(url: str) -> subprocess.Popen:
    """The backend as a child process (so that it can be SIGKILLed)."""
    return subprocess.Popen(serve_command(url), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(10)


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
    """The echo picture of frame ``f`` under the frame's own seed (from the result)."""
    from painted_skin.backend.pipelines.echo import echo_image

    return echo_image(passes(f, h, w), seed, w, h)


def client(url: str, **kw):
    from painted_skin.addon.blender.client.backend_client import BackendClient

    kw = {"timeout_s": 20.0, "heartbeat_s": 0.3, "heartbeat_timeout": 1.5, **kw}
    return BackendClient(url, **kw)


# -- tests -----------------------------------------------------------------------------------

def test_ping_status_and_unavailable(backend):
    from painted_skin.addon.blender.client.backend_client import BackendUnavailable

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
    got: dict[int, tuple[np.ndarray, int]] = {}
    progress: list[tuple[int, int, int]] = []
    with client(url) as c:
        credits = c.open("echo", width=32, height=24, seed=7, options={"delay_ms": 10})
        assert credits >= 1
        peak = 0

        def frames():
            nonlocal peak
            for f in range(1, 13):
                peak = max(peak, len(c.shot.inflight) + 1)
                yield f, passes(f)

        summary = c.run_shot(frames(), lambda r: got.__setitem__(r.frame, (r.rgb, r.seed)),
                             lambda *p: progress.append(p))
    assert sorted(got) == list(range(1, 13))
    for f, (rgb, seed) in got.items():
        np.testing.assert_array_equal(rgb, expected(f, seed))
    assert len({seed for _, seed in got.values()}) == 12  # a seed per frame
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


def test_backend_killed_mid_shot_resumes_without_loss(tmp_path):
    """SIGKILL the backend mid-shot, restart it: the client notices within the
    heartbeat timeout, re-opens, re-sends what was unanswered; every frame is
    answered exactly once. A re-run skips frames already on disk."""
    url = free_url()
    proc = start_backend(url)
    out = tmp_path / "out"
    out.mkdir()
    n = 24
    answered: list[int] = []
    seeds: dict[int, int] = {}
    killed: dict[str, float] = {}

    def on_result(r) -> None:
        answered.append(r.frame)
        seeds[r.frame] = r.seed
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
            proc = start_backend(url)

    try:
        with client(url, on_dead=restart) as c:
            c.open("echo", width=32, height=24, seed=3, options={"delay_ms": 30})
            summary = c.run_shot(((f, passes(f)) for f in range(n)), on_result)
            assert c.reconnects >= 1
        assert killed["noticed"] - killed["t"] < 1.5 + 0.5  # heartbeat timeout + a poll
        assert sorted(answered) == list(range(n)), "lost or duplicated frames"
        for f in range(n):
            np.testing.assert_array_equal(np.load(out / f"{f:04d}.npy"), expected(f, seeds[f]))
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
            c.open("echo", width=32, height=24, seed=3)
            c.run_shot(todo(), lambda r: np.save(out / f"{r.frame:04d}.npy", r.rgb))
        assert sent == [5, 17]
        assert all((out / f"{f:04d}.npy").exists() for f in range(n))
    finally:
        stop(proc)



def test_curve_keys(tmp_path):
    """A backend started with --keys admits a client holding the keys, no other."""
    from painted_skin.addon.blender.client.backend_client import BackendUnavailable
    from painted_skin.backend.auth import create_keys

    create_keys(tmp_path)
    url = free_url()
    proc = subprocess.Popen(serve_command(url) + ["--keys", str(tmp_path)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        with client(url, keys=tmp_path) as c:
            assert c.ping()["type"] == "pong"
        with client(url, timeout_s=0.5) as c, pytest.raises(BackendUnavailable):
            c.ping()
    finally:
        stop(proc)


def test_open_waits_for_a_slow_model_load_while_the_backend_is_alive(serve):
    """The backend answers OPEN only once the model is loaded (first downloads and ONNX
    exports take minutes): the client waits past its silence timeout as long as the
    backend answers heartbeats, then runs the shot; a hard ``timeout_s`` still holds."""
    from painted_skin.addon.blender.client.backend_client import BackendUnavailable
    from painted_skin.backend import pipelines
    from painted_skin.backend.pipelines.echo import EchoPipeline

    def slow_factory(options: dict, device: str) -> EchoPipeline:
        time.sleep(2.5)
        return EchoPipeline(device)

    pipelines.register("slow-load-client", slow_factory, load_keys=("variant",))
    try:
        _, url = serve()
        with client(url, timeout_s=1.0) as c:
            with pytest.raises(BackendUnavailable):
                c.open("slow-load-client", 32, 24, options={"variant": 1}, timeout_s=0.5)
            t0 = time.monotonic()
            c.open("slow-load-client", 32, 24, seed=3, options={"variant": 2})
            assert time.monotonic() - t0 > 2.0  # waited through the load, past timeout_s
            got = {}
            c.run_shot(((f, passes(f)) for f in range(3)),
                       lambda r: got.__setitem__(r.frame, r))
            assert sorted(got) == [0, 1, 2]
            np.testing.assert_array_equal(got[1].rgb, expected(1, got[1].seed))
    finally:
        pipelines.REGISTRY.pop("slow-load-client", None)


def test_open_is_sent_again_when_the_backend_restarts_while_loading():
    """The backend dies while loading the session's model and a supervisor restarts it
    within the heartbeat timeout: the client sees another boot id in PONG and opens
    again, instead of waiting for an answer that will never come."""
    import threading

    import zmq
    from painted_skin import wire as P

    url = free_url()
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    router.linger = 0
    router.bind(url)
    got_open = threading.Event()

    def loading_backend() -> None:  # answers PING, sits on OPEN like a long model load
        end = time.monotonic() + 1.5
        while time.monotonic() < end:
            if router.poll(50):
                ident, *body = router.recv_multipart(copy=False)
                m = P.decode(body)
                if m.type == P.PING:
                    router.send_multipart([ident.bytes, *P.encode(
                        P.PONG, version=1, boot="first-process", ref=m.id)])
                elif m.type == P.OPEN:
                    got_open.set()
        router.close(linger=0)  # killed while loading

    th = threading.Thread(target=loading_backend)
    th.start()
    c = client(url, timeout_s=5.0, heartbeat_timeout=30.0)  # no reconnect by silence
    res: dict = {}

    def opener() -> None:
        try:
            res["credits"] = c.open("echo", 32, 24, timeout_s=20)
        except Exception as e:  # noqa: BLE001 - reported below
            res["error"] = e

    t = threading.Thread(target=opener)
    t.start()
    th.join()
    proc = start_backend(url)
    try:
        t.join(25)
        assert got_open.is_set()
        assert res.get("credits", 0) >= 1, res
        assert c.restarts == 1 and c.reconnects == 0
        got = {}
        c.run_shot(((f, passes(f)) for f in range(2)), lambda r: got.__setitem__(r.frame, r))
        assert sorted(got) == [0, 1]
    finally:
        c.close()
        ctx.term()
        stop(proc)


def test_primers_and_the_carry_survive_a_busy_backend(monkeypatch):
    """With one credit the frame after a primer bounces (busy): sent again, it still
    carries the previous frame, and the primer's result is not delivered."""
    from painted_skin.addon.blender.client import backend_client as C

    sent: list[tuple[int, bool]] = []
    orig = C.BackendClient._send_one

    def spy(self, f, arrays):
        sent.append((f, "carry_rgb" in arrays))
        return orig(self, f, arrays)

    monkeypatch.setattr(C.BackendClient, "_send_one", spy)
    url = free_url()
    proc = subprocess.Popen(serve_command(url) + ["--credits", "1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    carry = {"carry_rgb": np.zeros((24, 32, 3), np.uint8),
             "carry_depth": np.zeros((24, 32), np.float32)}
    try:
        with client(url) as c:
            c.open("echo", width=32, height=24, seed=3, options={"delay_ms": 30})
            got: list[int] = []
            summary = c.run_shot(((f, passes(f)) for f in range(5, 8)),
                                 lambda r: got.append(r.frame), carry_for=lambda f: carry,
                                 primers_for=lambda f: [(2, passes(2))])
    finally:
        stop(proc)
    assert got == [5, 6, 7] and summary["dropped"] == 0  # the primer (2) is not a result
    assert sent[0] == (2, False)
    assert [c for f, c in sent if f == 5] and all(c for f, c in sent if f == 5)
    assert not any(c for f, c in sent if f in (6, 7))


@pytest.mark.parametrize("url, words", [
    ("not-a-url", "not a ZeroMQ endpoint"),
    ("tcp://127.0.0.1", "not a ZeroMQ endpoint"),  # no port
    ("tcp://127.0.0.1:70000", "not a ZeroMQ endpoint"),
    ("http://127.0.0.1:5555", "not a ZeroMQ endpoint"),
    ("tcp://192.0.2.1:5555", "no keys were given"),  # remote without keys: refused, not 30 s
    ("tcp://127.0.0.1.example.net:5555", "no keys were given"),
])
def test_unusable_url_is_refused_at_once_with_one_line(url, words):
    from painted_skin.addon.blender.client.backend_client import BackendClient, BadBackendURL

    with pytest.raises(BadBackendURL) as e:  # raised by the constructor: no 30 s wait
        BackendClient(url, timeout_s=30)
    text = str(e.value)
    assert isinstance(e.value, ValueError)  # the CLI prints it on one line, exit 2
    assert words in text and "\n" not in text and ("--keys" in text or "tcp://" in text)


def test_remote_url_with_keys_is_accepted(tmp_path):
    from painted_skin.addon.blender.client.backend_client import BackendClient
    from painted_skin.backend.auth import create_keys

    create_keys(tmp_path)
    c = BackendClient("tcp://192.0.2.1:5555", keys=tmp_path, timeout_s=0.1)
    c.close()
