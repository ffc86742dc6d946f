"""What runs a skin model, as a backend without torch sees it (the demo's own backend)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from painted_skin.backend.skin import engines


def test_tensorrt_engines_follow_the_graphs_bytes(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    graph = tmp_path / "model" / "model.onnx"
    graph.parent.mkdir()
    graph.write_bytes(b"weights v1")
    first = engines._trt_cache(graph)
    assert first.is_relative_to(tmp_path / "cache" / "painted-skin")
    assert engines._trt_cache(graph) == first  # reused while the graph is the same
    graph.write_bytes(b"weights v2")  # retrained into the same folder
    assert engines._trt_cache(graph) != first


def test_engines_refuse_with_the_fix(tmp_path) -> None:
    folder = tmp_path / "m"
    folder.mkdir()
    cfg = {"graph": "model.onnx"}
    assert engines.check_engine(None, cfg, folder) == "onnx"
    with pytest.raises(engines.EngineError, match="one of onnx, torch"):
        engines.check_engine("trt", cfg, folder)
    with pytest.raises(engines.EngineError, match="no torch weights"):
        engines.check_engine("torch", cfg, folder)
    (folder / "weights.safetensors").write_bytes(b"x")
    cfg["weights"] = "weights.safetensors"
    if importlib.util.find_spec("torch") is None:  # this venv: the add-on's, no torch
        with pytest.raises(engines.EngineError, match="pip install torch"):
            engines.check_engine("torch", cfg, folder)
    else:
        assert engines.check_engine("torch", cfg, folder) == "torch"


def test_the_embedded_model_carries_what_both_engines_need() -> None:
    folder = Path(__file__).resolve().parents[2] / "rigs" / "skin_models" / "demo"
    cfg = json.loads((folder / "config.json").read_text())
    assert (folder / cfg["graph"]).is_file()
    assert (folder / cfg["weights"]).is_file()  # the torch engine's, beside the ONNX graph


def test_a_broken_model_registry_lists_none_and_keeps_status(monkeypatch) -> None:
    from painted_skin.backend.pipelines import registry

    def broken() -> list[str]:
        raise AttributeError("'str' object has no attribute 'get'")  # a TOML typo's crash

    monkeypatch.setitem(registry.REGISTRY, "typo", registry.Entry(
        "typo", lambda o, d: None, models=broken))
    names = registry.model_names()
    assert names["typo"] == []
