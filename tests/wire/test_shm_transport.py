"""The shared-memory data path: same results as TCP, slots reused only after replies,
never behind a broker, bad descriptors refused, segments cleaned up (close, exit, SIGKILL)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import textwrap
import time
import uuid
from collections.abc import Iterator

import numpy as np
import pytest
from painted_skin import wire as P
from painted_skin.addon.blender.client.backend_client import BackendClient, ShmRing, Shot
from painted_skin.backend.broker.service import Broker, BrokerConfig
from painted_skin.backend.server import E_CANCELLED, ServeConfig, Server
from test_backend_server import LOOP, PY, Client, expected, make_passes, spawn
from test_backend_server import stop as stop_proc

pytestmark = pytest.mark.skipif(not P.shm_supported(), reason="shared memory: Linux only")

H, W = 24, 32


def exists(name: str) -> bool:
    """Segment ``name`` is still there: its /dev/shm file, or its creator's memfd."""
    m = P.SHM_MEMFD_RE.fullmatch(name)
    if m is None:
        return os.path.exists(os.path.join(P.SHM_DIR, name))
    try:
        return os.readlink(P.segment_path(name)) == f"/memfd:ps-{m.group(3)} (deleted)"
    except OSError:
        return False


def shot(c: BackendClient, frames: range, salt: int = 0) -> dict[int, np.ndarray]:
    out: dict[int, np.ndarray] = {}
    summary = c.run_shot(((f, make_passes(H, W, salt + f)) for f in frames),
                         lambda r: out.__setitem__(r.frame, np.array(r.rgb)))
    assert summary["answered"] == len(frames) and summary["resent"] == 0, summary
    return out


# ---- results, slots ---------------------------------------------------------------------------


def test_results_identical_via_shm_and_tcp_real_processes():
    proc, line = spawn("serve", "--bind", LOOP, "--cache-mb", "0")
    try:
        url = re.search(r"tcp://\S+", line).group(0)
        results = {}
        for shm in (True, False):
            with BackendClient(url, timeout_s=20, shm=shm) as c:
                c.open("echo", W, H, seed=5, options={"progress": False})
                assert c.shm_active is shm
                results[shm] = shot(c, range(30))
                if shm:
                    assert c.bytes_shm > 0 and c.bytes_sent < c.bytes_shm / 10
                else:
                    assert c.bytes_shm == 0
        for f in range(30):
            np.testing.assert_array_equal(results[True][f], results[False][f])
            np.testing.assert_array_equal(results[True][f],
                                          expected(make_passes(H, W, f), 5, f, W, H))
    finally:
        stop_proc(proc)


def test_slots_reused_only_after_replies(serve):
    """Many distinct frames through few slots with all credits in flight and a slow
    pipeline: every result is the echo of its own frame (no slot overwritten early)."""
    _, ep = serve(credits=4, cache_mb=0)
    with BackendClient(ep, timeout_s=20) as c:
        c.open("echo", W, H, seed=2, options={"steps": 2, "delay_ms": 1, "progress": False})
        assert c.shm_active and c._ring is not None
        assert c._ring.slots < 120
        out = shot(c, range(120), salt=1000)
    for f in range(120):
        np.testing.assert_array_equal(out[f], expected(make_passes(H, W, 1000 + f), 2, f, W, H))


def test_ring_never_hands_out_a_held_frames_slot():
    ring = ShmRing(3, 4096)
    try:
        s = Shot(iter(()), lambda r: None)
        a = {"mask": np.ones((8, 8), np.uint8)}
        for f in range(3):
            s.held[f] = a
            assert ring.place(s, f, a) is not None
        s.held[3] = a
        assert ring.place(s, 3, a) is None  # all slots held: inline
        assert ring.place(s, 1, a) == ring.place(s, 1, a)  # a re-send reuses its slot
        gen1 = ring.place(s, 1, a)[1]["gen"]
        del s.held[1]  # frame 1 answered: its slot is free again
        placed = ring.place(s, 3, a)
        assert placed is not None and placed[1]["gen"] > gen1
        assert ring.seg.read_u64(placed[1]["offset"]) == placed[1]["gen"]
    finally:
        ring.close()
    assert not exists(ring.name)


# ---- negotiation --------------------------------------------------------------------------------


def test_broker_never_grants_shm():
    broker = Broker(BrokerConfig(frontend=LOOP, backend=LOOP))
    front, back = broker.bind()
    threads = [(broker, broker.start())]
    worker = Server(ServeConfig(connect=back))
    worker.connect()
    threads.append((worker, worker.start()))
    raw = Client(front)
    try:
        assert not worker._shm_possible()
        end = time.monotonic() + 8
        while raw.request(P.STATUS).header["workers"] < 1:
            assert time.monotonic() < end
            time.sleep(0.05)
        with BackendClient(front, timeout_s=20) as c:
            assert c.shm_requested  # a loopback URL: the client asks ...
            c.open("echo", W, H, seed=1, options={"progress": False})
            assert not c.shm_active  # ... the worker behind the broker refuses
            out = shot(c, range(6))
            assert c.bytes_shm == 0
        for f in range(6):
            np.testing.assert_array_equal(out[f], expected(make_passes(H, W, f), 1, f, W, H))
        # a client that sends shm descriptors anyway gets an error from the broker
        seg = P.ShmSegment.create(1 << 16)
        try:
            raw.request(P.OPEN, session="s", width=W, height=H, shm=True,
                        shm_probe={"segment": seg.name, "token": "0" * 32})
            mask = np.ones((H, W), np.uint8)
            placed = seg.write({"mask": mask}, 64, seg.size)
            m = raw.request(P.FRAME, {"mask": mask}, placements=placed, session="s", frame=0)
            assert m.type == P.ERROR and m.header["code"] == P.E_BAD_ARRAY
            assert raw.request(P.PING).type == P.PONG
        finally:
            seg.close()
    finally:
        raw.close()
        for obj, t in reversed(threads):
            obj.stop()
            t.join(5)


def test_opt_out_and_non_local_urls_do_not_ask(serve, tmp_path):
    from painted_skin.backend import auth

    _, ep = serve()
    with BackendClient(ep, shm=False, timeout_s=10) as c:
        assert not c.shm_requested
        c.open("echo", W, H)
        assert not c.shm_active and c._ring is None
    auth.create_keys(tmp_path)  # a remote backend needs keys (the client refuses otherwise)
    remote = BackendClient("tcp://192.0.2.1:5555", keys=tmp_path, timeout_s=0.1)
    try:
        assert not remote.shm_requested
    finally:
        remote.close()


def test_shm_disabled_server_does_not_grant(serve):
    _, ep = serve(shm=False)
    with BackendClient(ep, timeout_s=10) as c:
        c.open("echo", W, H, seed=3)
        assert c.shm_requested and not c.shm_active
        out = shot(c, range(3))
    np.testing.assert_array_equal(out[2], expected(make_passes(H, W, 2), 3, 2, W, H))


# ---- bad descriptors ---------------------------------------------------------------------------


@pytest.fixture
def granted(serve) -> Iterator:
    """(server, raw client, segment, token): session "s" opened with shm granted."""
    server, ep = serve(cache_mb=0)
    seg = P.ShmSegment.create(1 << 20)
    token = uuid.uuid4().hex
    seg.buf[:24] = P.SHM_MAGIC + bytes.fromhex(token)
    c = Client(ep)
    try:
        m = c.request(P.OPEN, session="s", width=W, height=H, seed=4, shm=True,
                      shm_probe={"segment": seg.name, "token": token},
                      options={"progress": False})
        assert m.type == P.OPENED and m.header.get("shm") is True
        yield server, c, seg, token
    finally:
        c.close()
        seg.close()


def test_wrong_token_is_not_granted(granted):
    _, c, seg, _ = granted
    m = c.request(P.OPEN, session="t", width=W, height=H, shm=True,
                  shm_probe={"segment": seg.name, "token": "f" * 32})
    assert m.type == P.OPENED and "shm" not in m.header
    mask = np.ones((H, W), np.uint8)
    m = c.request(P.FRAME, {"mask": mask}, placements=seg.write({"mask": mask}, 64, seg.size),
                  session="t", frame=0)
    assert m.header["code"] == P.E_BAD_ARRAY and "not granted" in m.header["message"]


def test_bad_descriptors_get_errors_and_server_stays_up(granted, tmp_path):
    _, c, seg, _ = granted
    passes = make_passes(H, W, 7)
    good = seg.write(passes, 64, seg.size)
    m = c.request(P.FRAME, passes, placements=good, session="s", frame=0)
    assert m.type == P.RESULT
    np.testing.assert_array_equal(m.arrays["rgb"], expected(passes, 4, 0, W, H))

    mask = {"mask": passes["mask"]}
    missing = f"ps-{os.getpid()}-{uuid.uuid4().hex}"
    link = f"ps-1-{uuid.uuid4().hex}"
    os.symlink(tmp_path / "target", os.path.join(P.SHM_DIR, link))
    (tmp_path / "target").write_bytes(b"x" * 4096)
    try:
        cases = [
            ({"segment": missing, "offset": 0}, "not found"),  # unknown segment
            ({"segment": "../../etc/passwd", "offset": 0}, "segment name"),  # foreign names
            ({"segment": "/dev/shm/" + seg.name, "offset": 0}, "segment name"),
            ({"segment": "psm_" + seg.name[3:], "offset": 0}, "segment name"),
            ({"segment": link, "offset": 0}, "cannot be opened"),  # a symlink: not followed
            ({"segment": seg.name, "offset": seg.size - 10}, "outside"),  # beyond the end
            ({"segment": seg.name, "offset": P.MAX_SEGMENT_BYTES + 1}, "offset"),
            ({"segment": seg.name, "offset": -1}, "offset"),
            ({"segment": seg.name, "offset": 1}, ""),  # unaligned: uint8 is fine, see below
            ({"segment": seg.name}, "offset"),
            ("nope", "'shm' must be an object"),
        ]
        for i, (where, words) in enumerate(cases):
            m = c.request(P.FRAME, mask, placements={"mask": where}, session="s", frame=10 + i)
            if words == "":
                assert m.type == P.RESULT
                continue
            assert m.type == P.ERROR and m.header["code"] == P.E_BAD_ARRAY, (where, m.header)
            assert words in m.header["message"], (where, m.header["message"])
        # wrong dtype / shape for the pass (described truthfully, laid in the segment)
        for arrays in ({"mask": np.ones((H, W), np.float32)},
                       {"depth": np.ones((H, 8), np.float32)},
                       {"depth": np.ones((H, W), np.float32)[None]}):
            placed = seg.write(arrays, 64, seg.size)
            m = c.request(P.FRAME, arrays, placements=placed, session="s", frame=50)
            assert m.header["code"] == P.E_BAD_ARRAY and "must be" in m.header["message"]
        depth = np.ones((H, W), np.float32)
        m = c.request(P.FRAME, {"depth": depth}, placements={"depth": {"segment": seg.name,
                                                                        "offset": 66}},
                      session="s", frame=51)
        assert m.header["code"] == P.E_BAD_ARRAY and "aligned" in m.header["message"]
        # caps still apply to shared-memory descriptors
        huge = {"name": "depth", "dtype": "float32", "shape": [8192, 8192, 4, 2],
                "shm": {"segment": seg.name, "offset": 0}}
        c.sock.send_multipart([json.dumps({"v": 1, "type": "frame", "id": "big",
                                             "session": "s", "frame": 52,
                                             "arrays": [huge]}).encode()])
        m = c.recv()
        assert m.header["ref"] == "big" and m.header["code"] in (P.E_TOO_BIG, P.E_BAD_ARRAY)
        # shared memory only in frames; OPEN's identity images go inline
        ref = np.zeros((4, 4, 3), np.uint8)
        m = c.request(P.OPEN, {"ref0": ref}, session="r", width=W, height=H,
                      placements={"ref0": {"segment": seg.name, "offset": 64}})
        assert m.header["code"] == P.E_BAD_ARRAY and "only frame" in m.header["message"]
        # a stale message: the slot now holds newer data
        seg.write_u64(4096, 7)
        placed = seg.write(mask, 4096 + 64, seg.size)
        m = c.request(P.FRAME, mask, placements=placed, session="s", frame=60,
                      slot={"segment": seg.name, "offset": 4096, "gen": 6})
        assert m.header["code"] == E_CANCELLED and "stale" in m.header["message"]
        m = c.request(P.FRAME, mask, placements=placed, session="s", frame=60,
                      slot={"segment": seg.name, "offset": 4096, "gen": 7})
        assert m.type == P.RESULT
        assert c.request(P.PING).type == P.PONG
    finally:
        os.unlink(os.path.join(P.SHM_DIR, link))


def test_slot_rewritten_while_queued_is_cancelled_not_cached(serve):
    server, ep = serve(credits=2)
    seg = P.ShmSegment.create(1 << 20)
    token = uuid.uuid4().hex
    seg.buf[:24] = P.SHM_MAGIC + bytes.fromhex(token)
    c = Client(ep)
    try:
        c.request(P.OPEN, session="s", width=W, height=H, shm=True, options={"progress": False,
                                                                                "steps": 1,
                                                                                "delay_ms": 300},
                  shm_probe={"segment": seg.name, "token": token})
        blocker = {"mask": np.zeros((H, W), np.uint8)}
        c.send(P.FRAME, blocker, session="s", frame=0)  # inline, keeps the compute busy
        mask = {"mask": np.full((H, W), 3, np.uint8)}
        seg.write_u64(4096, 1)
        placed = seg.write(mask, 4096 + 64, seg.size)
        c.send(P.FRAME, mask, placements=placed, session="s", frame=1,
               slot={"segment": seg.name, "offset": 4096, "gen": 1})
        time.sleep(0.1)
        seg.write_u64(4096, 0)  # the client reuses the slot while frame 1 waits
        seg.write({"mask": np.full((H, W), 9, np.uint8)}, 4096 + 64, seg.size)
        seg.write_u64(4096, 2)
        got = {m.frame: m for m in (c.result("s", f, timeout=5)[0] for f in (0, 1))}
        assert got[0].type == P.RESULT
        assert got[1].header["code"] == E_CANCELLED and "rewritten" in got[1].header["message"]
        assert len(server.cache) == 1  # only the inline frame
    finally:
        c.close()
        seg.close()


def test_a_sealed_segment_cannot_shrink_and_is_read_in_place():
    """The default segment is a memfd sealed against shrinking: the kernel refuses a
    truncate (so a mapping of it never faults) and a reader maps it: views, no copy."""
    seg = P.ShmSegment.create(1 << 16)
    assert P.SHM_MEMFD_RE.fullmatch(seg.name), seg.name
    placed = seg.write({"depth": np.arange(64, dtype=np.float32)}, 4096, seg.size)
    with pytest.raises(PermissionError):
        os.ftruncate(seg._fd, 4096)
    reader = P.ShmSegment.attach(seg.name)
    try:
        got = reader.read("float32", (64,), placed["depth"]["offset"])
        assert reader.in_place and not got.flags.writeable and got.base is not None
        np.testing.assert_array_equal(got, np.arange(64, dtype=np.float32))
    finally:
        del got
        reader.close()
        seg.close()


def test_a_memfd_that_is_not_the_named_sealed_one_is_refused(tmp_path):
    """A reader opens /proc/PID/fd/N only for a memfd carrying the name's tag and
    sealed against shrinking: any other descriptor of the process (a file, an
    unsealed memfd, a reused number) is ``bad_array``, never read."""
    plain = open(tmp_path / "secret.txt", "wb")  # noqa: SIM115 - held open on purpose
    plain.write(b"x" * 4096)
    plain.flush()
    unsealed = os.memfd_create("ps-" + "0" * 32)
    os.ftruncate(unsealed, 4096)
    try:
        for fd, tag in ((plain.fileno(), "1" * 32), (unsealed, "0" * 32),
                        (unsealed, "2" * 32)):
            with pytest.raises(P.ProtocolError) as e:
                P.ShmSegment.attach(f"psfd-{os.getpid()}-{fd}-{tag}")
            assert e.value.code == P.E_BAD_ARRAY
    finally:
        plain.close()
        os.close(unsealed)


def test_segment_shrunk_after_open_is_an_error_not_a_crash(tmp_path):
    """A /dev/shm segment (``PAINTED_SKIN_SHM=file``) can be truncated by its client after
    the server attached it: a mapping would fault (SIGBUS kills the server); the server
    copies with pread instead, answers an error and keeps serving."""
    proc, line = spawn("serve", "--bind", LOOP, "--cache-mb", "0", log=tmp_path / "serve.log")
    seg = P.ShmSegment.create(1 << 20, memfd=False)
    token = uuid.uuid4().hex
    seg.buf[:24] = P.SHM_MAGIC + bytes.fromhex(token)
    path = os.path.join(P.SHM_DIR, seg.name)
    c = Client(line.split("listening on ")[1].split()[0])
    try:
        m = c.request(P.OPEN, session="s", width=W, height=H, shm=True,
                      shm_probe={"segment": seg.name, "token": token},
                      options={"progress": False, "steps": 1})
        assert m.header.get("shm") is True, m.header
        passes = make_passes(H, W, 3)
        far = seg.write(passes, 512 * 1024, seg.size)  # pages past the new end below
        m = c.request(P.FRAME, passes, placements=far, session="s", frame=0)
        assert m.type == P.RESULT  # fine while the segment is whole
        os.truncate(path, 4096)  # the test touches no page of it from here on
        m = c.request(P.FRAME, passes, placements=far, session="s", frame=1, timeout=10)
        assert m.type == P.ERROR and m.header["code"] == P.E_BAD_ARRAY, m.header
        assert "shrank" in m.header["message"] and m.frame == 1
        for f in range(2, 12):  # shrink racing the read: an answer each, never a crash
            os.truncate(path, 1 << 20)
            c.send(P.FRAME, passes, placements=far, session="s", frame=f)
            os.truncate(path, 4096)
            m, _ = c.result("s", f, timeout=10)
            assert m.type == P.RESULT or m.header["code"] == P.E_BAD_ARRAY, m.header
        assert c.request(P.PING).type == P.PONG and proc.poll() is None
    finally:
        c.close()
        seg.close()
        code = stop_proc(proc)
    assert code in (0, -signal.SIGTERM), f"server ended with {code} (SIGBUS is -7)"


# ---- cleanup ------------------------------------------------------------------------------------


CLIENT = textwrap.dedent("""
    import sys, time
    import numpy as np
    from painted_skin.addon.blender.client.backend_client import BackendClient
    c = BackendClient(sys.argv[1], timeout_s=10)
    c.open("echo", 32, 24)
    assert c.shm_active
    passes = {"mask": np.ones((24, 32), np.uint8)}
    c.run_shot(((f, passes) for f in range(3)), lambda r: None)
    print(c._ring.name, flush=True)
    if sys.argv[2] == "exit":
        sys.exit(0)  # no close(): the finalizer unlinks at exit
    time.sleep(60)
""")


def run_client(ep: str, mode: str, kind: str = "") -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "PAINTED_SKIN_SHM": kind}
    proc = subprocess.Popen([PY, "-c", CLIENT, ep, mode], stdout=subprocess.PIPE, text=True,
                            env=env)
    name = proc.stdout.readline().strip()
    assert P.SHM_NAME_RE.fullmatch(name), name
    return proc, name


def test_client_close_and_exit_unlink_segments(serve):
    _, ep = serve()
    with BackendClient(ep, timeout_s=10) as c:
        c.open("echo", W, H)
        name = c._ring.name
        assert c.shm_active and exists(name)
    assert not exists(name)
    proc, name = run_client(ep, "exit")
    assert proc.wait(10) == 0
    assert not exists(name)


def test_sigkilled_client_segments_removed_when_server_frees_session(serve):
    """A /dev/shm segment outlives its SIGKILLed creator until reaped (a memfd goes
    with its last holder by itself)."""
    server, ep = serve(session_timeout=1.0)
    proc, name = run_client(ep, "sleep", kind="file")
    try:
        assert exists(name)
        assert not P.reap_shm(name)  # its creator is alive: kept
        proc.send_signal(signal.SIGKILL)
        proc.wait(5)
        end = time.monotonic() + 5
        while exists(name):  # the server frees the silent client's session and reaps
            assert time.monotonic() < end, "segment of the killed client still there"
            time.sleep(0.1)
        assert server.status()["sessions"] == 0
    finally:
        proc.kill()
        proc.wait(5)


def test_sweep_removes_only_dead_creators_segments():
    code = ("from painted_skin import wire as P; import time; "
            "s = P.ShmSegment.create(4096, memfd=False); print(s.name, flush=True); "
            "time.sleep(60)")
    proc = subprocess.Popen([PY, "-c", code], stdout=subprocess.PIPE, text=True)
    live = P.ShmSegment.create(4096, memfd=False)
    try:
        name = proc.stdout.readline().strip()
        proc.send_signal(signal.SIGKILL)
        proc.wait(5)
        assert exists(name)
        assert name not in P.sweep_shm()  # younger than the minimum age: left alone
        removed = P.sweep_shm(min_age_s=0)
        assert name in removed and live.name not in removed
        assert not exists(name) and exists(live.name)
    finally:
        proc.kill()
        proc.wait(5)
        live.close()
    assert not exists(live.name)
