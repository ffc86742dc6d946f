"""TensorRT is used only when its library loads, and its engine cache is keyed by
TensorRT version, onnxruntime version and GPU (onnxruntime checks neither)."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

pytest.importorskip("onnxruntime")

from painted_skin.backend.diffusion.onnx import runtime as RT  # noqa: E402
from painted_skin.backend.diffusion.onnx import tensorrt as R  # noqa: E402


def test_library_version_codes() -> None:
    assert R.format_version(100900) == "10.9.0"  # TensorRT 10: major*10000 + minor*100 + patch
    assert R.format_version(101302) == "10.13.2"
    assert R.format_version(8601) == "8.6.1"  # TensorRT 8: major*1000 + minor*100 + patch


@pytest.mark.skipif(sys.platform == "win32" or shutil.which("cc") is None,
                    reason="needs a C compiler to build a stand-in libnvinfer")
def test_version_read_from_the_library_that_loads(tmp_path, monkeypatch) -> None:
    src = tmp_path / "nvinfer.c"
    src.write_text("int getInferLibVersion(void) { return 101302; }\n")
    lib = tmp_path / "libnvinfer.so.10"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    R.tensorrt_version.cache_clear()
    monkeypatch.setattr(R, "_SONAMES", (str(tmp_path / "missing.so"), str(lib)))
    try:
        assert R.tensorrt_version() == "10.13.2"
        R.tensorrt_version.cache_clear()
        monkeypatch.setattr(R, "_SONAMES", (str(tmp_path / "missing.so"),))
        assert R.tensorrt_version() is None
    finally:
        R.tensorrt_version.cache_clear()


def test_listed_but_unloadable_tensorrt_is_not_chosen(tmp_path, monkeypatch, caplog) -> None:
    monkeypatch.setattr(RT, "available_providers", lambda: [RT.TRT, RT.CUDA, RT.CPU])
    monkeypatch.setattr(RT, "tensorrt_version", lambda: None)
    RT.warn_once.cache_clear()
    with caplog.at_level("WARNING"):
        assert RT.provider_names("auto") == [RT.CUDA, RT.CPU]
        assert [n for n, _ in RT.provider_chain(tmp_path, "tensorrt")] == [RT.CUDA, RT.CPU]
    assert "tensorrt-cu12" in caplog.text  # the warning names the fix
    assert not (tmp_path / "trt").exists()
    monkeypatch.setattr(RT, "tensorrt_version", lambda: "10.9.0")
    assert RT.provider_names("auto") == [RT.TRT, RT.CUDA, RT.CPU]


def test_engine_cache_is_keyed_by_tensorrt_version(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(RT, "available_providers", lambda: [RT.TRT, RT.CUDA, RT.CPU])
    monkeypatch.setattr(RT, "tensorrt_version", lambda: "10.9.0")

    def cache_path(version: str) -> str:
        monkeypatch.setattr(R, "tensorrt_version", lambda: version)
        trt = dict(RT.provider_chain(tmp_path, "auto"))[RT.TRT]
        assert trt["trt_engine_cache_path"] == trt["trt_timing_cache_path"]
        return trt["trt_engine_cache_path"]

    old, new = cache_path("10.9.0"), cache_path("10.13.2")
    assert old != new  # an upgrade builds new engines instead of loading stale ones
    import onnxruntime

    for path in (old, new):
        assert (tmp_path / "trt").resolve() in RT.Path(path).resolve().parents
        assert RT.Path(path).is_dir() and onnxruntime.__version__ in path
