"""The doctor in the backend's Python (torch there), and a GPU device the backend cannot
use refused when the session opens, with the install line, instead of frames quietly
painted on the CPU."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
import zmq

pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

import torch  # noqa: E402
from painted_skin import wire as P  # noqa: E402
from painted_skin.backend import pipelines  # noqa: E402
from painted_skin.backend.diffusion.options import device_problem  # noqa: E402
from painted_skin.backend.doctor import CUDA, provider_loads  # noqa: E402
from painted_skin.backend.server import ServeConfig, Server  # noqa: E402
from painted_skin.backend.skin import registry  # noqa: E402
from painted_skin.backend.skin import testing as X  # noqa: E402

pipelines.register_builtin()
ORT_CUDA = provider_loads(CUDA)[0]


def test_doctor_names_torch_device_dtype_and_threads() -> None:
    proc = subprocess.run([sys.executable, "-m", "painted_skin.backend.doctor", "--json"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    t = json.loads(proc.stdout)["torch"]
    assert t["version"] == torch.__version__ and t["cuda"] == torch.cuda.is_available()
    assert (t["device"], t["dtype"], t["usable"]) == ("cpu", "float32", True)
    assert t["threads"] == torch.get_num_threads()
    if torch.cuda.is_available():
        free, total = torch.cuda.mem_get_info(0)
        assert 0 < t["devices"][0]["free_gib"] <= t["devices"][0]["total_gib"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="this torch runs CUDA")
def test_a_cpu_torch_refuses_a_cuda_device_with_the_install_line() -> None:
    for runtime in ("torch", "onnx"):
        problem = device_problem("cuda", runtime)
        assert problem and "download.pytorch.org/whl/cu" in problem
        assert "--device cpu" in problem
    assert device_problem("cpu", "onnx") is None
    assert "use cpu, cuda or cuda:N" in device_problem("gpu0")


@pytest.fixture
def gpu_server(tmp_path, monkeypatch) -> Iterator[Server]:
    X.train_tiny(tmp_path / "hero", steps=2, size=32, frames=4)
    reg = tmp_path / "registry.toml"
    reg.write_text('[models.hero]\npath = "hero"\n')
    monkeypatch.setenv(registry.ENV, str(reg))
    srv = Server(ServeConfig(bind="tcp://127.0.0.1:*", device="cuda", cache_mb=0))
    srv.bind()
    thread = srv.start()
    yield srv
    srv.stop()
    thread.join(timeout=10)


@pytest.mark.skipif(ORT_CUDA, reason="this onnxruntime runs CUDA")
def test_open_of_a_skin_session_on_a_cuda_backend_without_onnxruntime_gpu_fails(
        gpu_server) -> None:
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.linger = 0
    sock.connect(gpu_server.endpoint)
    try:
        sock.send_multipart(P.encode(P.OPEN, None, id="o1", session="s", pipeline="skin",
                                     width=32, height=32, options={"model": "hero"}))
        end = time.monotonic() + 60
        while True:
            assert sock.poll(int(max(0.01, end - time.monotonic()) * 1000)), "no reply"
            m = P.decode(sock.recv_multipart())
            if m.header.get("ref") == "o1" and m.type != P.PROGRESS:
                break
    finally:
        sock.close(linger=0)
        ctx.term()
    assert m.type == P.ERROR and m.header["code"] == P.E_BAD_MESSAGE
    text = m.header["message"]
    assert "device 'cuda'" in text and "onnxruntime-gpu" in text and "--device cpu" in text
