"""OPEN loads the session's pipeline: a model that cannot load fails the OPEN
(which component, where it looked, how to provide it), never the first frame;
a model that loads is loaded before the first frame arrives."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zmq

pytest.importorskip("torch")
pytest.importorskip("diffusers")

from painted_skin import wire as P  # noqa: E402
from painted_skin.backend import pipelines  # noqa: E402
from painted_skin.backend.diffusion import components as C  # noqa: E402
from painted_skin.backend.pipelines.echo import EchoPipeline  # noqa: E402
from painted_skin.backend.server import ServeConfig, Server  # noqa: E402


class Client:
    """A bare DEALER client of the protocol."""

    def __init__(self, endpoint: str) -> None:
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.linger = 0
        self.sock.connect(endpoint)
        self.n = 0

    def send(self, mtype: str, arrays: dict | None = None, **fields: Any) -> str:
        self.n += 1
        fields.setdefault("id", f"r{self.n}")
        self.sock.send_multipart(P.encode(mtype, arrays, **fields), copy=False)
        return fields["id"]

    def recv(self, timeout: float = 10.0) -> P.Message:
        if not self.sock.poll(int(timeout * 1000)):
            raise TimeoutError("no reply")
        return P.decode(self.sock.recv_multipart(copy=False))

    def wait(self, ref: str, timeout: float = 60.0) -> P.Message:
        """The reply to ``ref`` (other messages and progress are skipped)."""
        end = time.monotonic() + timeout
        while True:
            m = self.recv(max(0.01, end - time.monotonic()))
            if m.header.get("ref") == ref and m.type != P.PROGRESS:
                return m

    def close(self) -> None:
        self.sock.close(linger=0)
        self.ctx.term()


@pytest.fixture
def server() -> Iterator[Server]:
    srv = Server(ServeConfig(bind="tcp://127.0.0.1:*", cache_mb=0, session_timeout=60))
    srv.bind()
    t = srv.start()
    yield srv
    srv.stop()
    t.join(timeout=10)


@pytest.fixture
def client(server: Server) -> Iterator[Client]:
    c = Client(server.endpoint)
    yield c
    c.close()


class SlowLoad:
    """A test pipeline: its factory sleeps (a slow load) or fails; ``prepare`` records."""

    def __init__(self) -> None:
        self.created: list[dict] = []
        self.prepared_for: list[tuple[int, int]] = []
        self.delay = 0.4
        self.threads: set[str] = set()

    def factory(self, options: dict, device: str) -> Any:
        self.threads.add(threading.current_thread().name)
        time.sleep(self.delay)
        if options.get("fail"):
            raise C.MissingWeights("m", ["controlnet depth: not found; looked in the path "
                                         "'/nowhere'; put the files at '/nowhere'"])
        self.created.append(dict(options))
        outer = self

        class Pipe(EchoPipeline):
            def prepare(self, *, width: int, height: int, options: dict, refs: list) -> None:
                outer.prepared_for.append((width, height))

        return Pipe(device)


@pytest.fixture
def slow() -> Iterator[SlowLoad]:
    s = SlowLoad()
    pipelines.register("slow-load", s.factory, load_keys=("variant", "fail"))
    yield s
    pipelines.REGISTRY.pop("slow-load", None)


def _open(c: Client, **kw: Any) -> str:
    fields = dict(session="s", pipeline="slow-load", width=16, height=16, seed=1, options={})
    fields.update(kw)
    return c.send(P.OPEN, **fields)


def _frame(c: Client, frame: int, session: str = "s", size: int = 16) -> str:
    depth = np.ones((size, size), np.float32)
    return c.send(P.FRAME, {"depth": depth}, session=session, frame=frame)


def test_open_loads_the_pipeline_before_answering(server, client, slow) -> None:
    ref = _open(client, options={"variant": 1})
    pong = client.wait(client.send(P.PING), timeout=5)  # the loop is free while it loads
    assert pong.type == P.PONG and not slow.created
    opened = client.wait(ref)
    assert opened.type == P.OPENED and opened.header["load_ms"] >= slow.delay * 1000 * 0.9
    assert slow.created == [{"variant": 1}] and slow.prepared_for == [(16, 16)]
    assert slow.threads == {"painted-skin-compute"}
    assert any(m.startswith("slow-load@cpu variant=1")
               for m in client.wait(client.send(P.STATUS)).header["loaded_models"])
    loads = server.loads
    res = client.wait(_frame(client, 0))
    assert res.type == P.RESULT and res.header["timings"]["compute_ms"] < slow.delay * 1000
    assert server.loads == loads  # the first frame loaded nothing
    # Same load options: answered at once, nothing loaded or prepared again.
    t0 = time.monotonic()
    again = client.wait(_open(client, session="s2", options={"variant": 1}))
    assert again.type == P.OPENED and "load_ms" not in again.header
    assert time.monotonic() - t0 < slow.delay and len(slow.created) == 1


def test_a_load_failure_fails_the_open_and_frames_sent_meanwhile(server, client, slow) -> None:
    ref = _open(client, options={"fail": True})
    fref = _frame(client, 0)  # (while it loads) a broker replaying a session sends
    # frames before OPENED: they get the OPEN's error too, just before it
    ferr = client.wait(fref)
    assert ferr.type == P.ERROR and ferr.header["frame"] == 0 and "controlnet depth" in \
        ferr.header["message"]
    err = client.wait(ref)
    assert err.type == P.ERROR and err.header["code"] == P.E_BAD_MESSAGE
    text = err.header["message"]
    assert "controlnet depth" in text and "/nowhere" in text and "put the files" in text
    gone = client.wait(_frame(client, 1))
    assert gone.header["code"] == P.E_NO_SESSION


def test_reopen_while_loading_answers_only_the_latest_open(server, client, slow) -> None:
    first = _open(client, options={"variant": 2})
    second = _open(client, options={"variant": 3})
    m = client.wait(second)
    assert m.type == P.OPENED and m.header["pipeline"] == "slow-load"
    with pytest.raises(TimeoutError):  # the replaced OPEN is never answered
        client.wait(first, timeout=slow.delay * 2)


# ---- the diffusion pipeline ------------------------------------------------------------


def _registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> None:
    reg = tmp_path / "models.toml"
    reg.write_text(body)
    monkeypatch.setenv("PAINTED_SKIN_MODELS", str(reg))


def test_missing_local_folder_is_named_on_open(client, tmp_path, monkeypatch) -> None:
    missing = tmp_path / "no-such-model"
    _registry(tmp_path, monkeypatch, f'[models.m]\nbase = "{missing}"\n')
    err = client.wait(_open(client, pipeline="sd15-controlnet", options={"model": "m"}))
    assert err.type == P.ERROR and err.header["code"] == P.E_BAD_MESSAGE
    text = err.header["message"]
    assert "base: not found" in text and str(missing) in text and "put the files at" in text


def _fake_base(folder: Path) -> None:
    """A model folder with every file the check looks for, but a corrupt UNet config."""
    for part in ("unet", "vae", "text_encoder"):
        (folder / part).mkdir(parents=True)
        (folder / part / "config.json").write_text("{}" if part != "unet" else "not json")
        (folder / part / "model.safetensors").write_bytes(b"\0" * 16)
    for part in ("tokenizer", "scheduler"):
        (folder / part).mkdir()


def test_corrupt_files_fail_the_open_not_the_first_frame(server, client, tmp_path,
                                                         monkeypatch) -> None:
    base = tmp_path / "sd15"
    _fake_base(base)
    _registry(tmp_path, monkeypatch,
              f'[models.m]\nbase = "{base}"\nlocal_files_only = true\n')
    err = client.wait(_open(client, pipeline="sd15-controlnet", options={"model": "m"}))
    assert err.type == P.ERROR and err.header["code"] == P.E_BAD_MESSAGE
    text = err.header["message"]
    assert "base unet: could not load" in text and str(base) in text
    assert server.loaded_models == ["echo@cpu"]  # only the default pipeline


def test_a_failed_download_is_named_on_open(client, tmp_path, monkeypatch) -> None:
    """An online hub id that is not cached passes the check; OPEN downloads it, and
    a failed download (no network here: simulated) is the OPEN's error."""
    from diffusers import UNet2DConditionModel
    from huggingface_hub import constants

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(C, "hub_reachable", lambda: True)  # the host answers; the files not
    _registry(tmp_path, monkeypatch, '[models.m]\nbase = "someone/some-model"\n')
    calls: list[str] = []

    def no_network(ref: str, *a: Any, **k: Any) -> Any:
        calls.append(ref)
        assert k.get("local_files_only") is False  # online: a download is allowed
        raise OSError("We couldn't connect to 'https://huggingface.co' to load the files")

    monkeypatch.setattr(UNet2DConditionModel, "from_pretrained", no_network)
    err = client.wait(_open(client, pipeline="sd15-controlnet", options={"model": "m"}))
    text = err.header["message"]
    assert err.type == P.ERROR and calls == ["someone/some-model"]
    assert "base unet: could not load" in text and "hf download someone/some-model" in text


def test_tiny_diffusion_pipeline_is_loaded_before_the_first_frame(server, client) -> None:
    opts = {"tiny": True, "steps": 2, "progress": False}
    opened = client.wait(_open(client, pipeline="sd15-controlnet", width=64, height=64,
                               options=opts))
    assert opened.type == P.OPENED and opened.header["load_ms"] > 0
    st = client.wait(client.send(P.STATUS)).header
    assert "sd15-controlnet@cpu tiny=true" in st["loaded_models"]
    loads = server.loads
    res = client.wait(_frame(client, 0, size=64))
    assert res.type == P.RESULT and res.arrays["rgb"].shape == (64, 64, 3)
    assert server.loads == loads


def test_through_a_broker(slow) -> None:
    """A broker forwards the late OPENED, and a failed load's frame errors and OPEN
    error (frames first: the broker drops the session on the OPEN's error)."""
    from painted_skin.backend.broker.service import Broker, BrokerConfig

    broker = Broker(BrokerConfig(frontend="tcp://127.0.0.1:*", backend="tcp://127.0.0.1:*"))
    front, back = broker.bind()
    threads = [(broker, broker.start())]
    worker = Server(ServeConfig(connect=back, cache_mb=0))
    worker.connect()
    threads.append((worker, worker.start()))
    c = Client(front)
    try:
        end = time.monotonic() + 10
        while c.wait(c.send(P.STATUS)).header["workers"] < 1:
            assert time.monotonic() < end, "the worker never registered"
            time.sleep(0.05)
        opened = c.wait(_open(c, options={"variant": 7}))
        assert opened.type == P.OPENED and opened.header["load_ms"] >= slow.delay * 900
        assert c.wait(_frame(c, 0)).type == P.RESULT
        ref = _open(c, session="bad", options={"fail": True})
        fref = _frame(c, 0, session="bad")
        ferr = c.wait(fref)
        assert ferr.type == P.ERROR and "controlnet depth" in ferr.header["message"]
        err = c.wait(ref)
        assert err.type == P.ERROR and "controlnet depth" in err.header["message"]
    finally:
        c.close()
        for obj, t in reversed(threads):
            obj.stop()
            t.join(5)


def test_a_silent_client_keeps_its_session_while_the_model_loads(slow) -> None:
    """A client may wait for OPENED without a word: the idle sweep must not drop a
    session whose model is still loading (its OPEN would never be answered)."""
    srv = Server(ServeConfig(bind="tcp://127.0.0.1:*", cache_mb=0, session_timeout=1))
    srv.bind()
    t = srv.start()
    c = Client(srv.endpoint)
    try:
        slow.delay = 2.5  # longer than the session timeout
        opened = c.wait(_open(c, options={"variant": 7}), timeout=20)
        assert opened.type == P.OPENED
        res = c.wait(_frame(c, 0), timeout=10)
        assert res.type == P.RESULT
    finally:
        c.close()
        srv.stop()
        t.join(timeout=10)


def test_a_load_that_calls_sys_exit_fails_the_open_not_the_backend(server, client) -> None:
    def exiting(options: dict, device: str) -> Any:
        if options.get("exit"):
            raise SystemExit(3)  # a library giving up the way scripts do
        return EchoPipeline(device)

    pipelines.register("exiting", exiting, load_keys=("exit",))
    try:
        err = client.wait(_open(client, pipeline="exiting", options={"exit": True}))
        assert err.type == P.ERROR and "SystemExit" in err.header["message"]
        ok = client.wait(_open(client, session="s2", pipeline="exiting"))
        assert ok.type == P.OPENED  # the compute thread lives on
        res = client.wait(_frame(client, 0, session="s2"))
        assert res.type == P.RESULT
    finally:
        pipelines.REGISTRY.pop("exiting", None)


def test_an_option_given_as_its_default_shares_the_loaded_model(server, client, slow) -> None:
    """``engine`` left out and ``engine: "torch"`` load the same thing: one instance."""
    pipelines.REGISTRY["slow-load"].load_defaults["variant"] = 0
    slow.delay = 0.05
    assert client.wait(_open(client, options={})).type == P.OPENED
    assert client.wait(_open(client, session="s2", options={"variant": 0})).type == P.OPENED
    assert client.wait(_open(client, session="s3", options={"variant": 1})).type == P.OPENED
    assert len(slow.created) == 2  # {} and {"variant": 0} share one
