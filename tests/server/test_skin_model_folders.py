"""A damaged or hostile skin-model folder is one line naming the file and the fix, never a
traceback: a config nested to the limit, missing or mistyped fields, a graph that is not
ONNX, a graph outside the folder."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from painted_skin.backend.skin import runtime

DEMO = Path(__file__).resolve().parents[2] / "rigs" / "skin_models" / "demo"


@pytest.fixture
def folder(tmp_path) -> Path:
    """A copy of the embedded model's folder (its big files linked, not copied)."""
    out = tmp_path / "model"
    out.mkdir()
    for f in DEMO.iterdir():
        if f.name == "config.json":
            (out / f.name).write_text(f.read_text())
        else:
            os.symlink(f, out / f.name)
    return out


def _config(folder: Path, **changes) -> None:
    cfg = json.loads((folder / "config.json").read_text())
    for k, v in changes.items():
        if v is None:
            cfg.pop(k)
        else:
            cfg[k] = v
    (folder / "config.json").write_text(json.dumps(cfg))


def test_the_copy_loads(folder) -> None:
    assert runtime.read_config(folder)["graph"] == "model.onnx"


@pytest.mark.parametrize(("changes", "words"), [
    ({"layout": None}, "lacks 'layout'"),
    ({"fingerprint": 5}, "'fingerprint' is int, not a table"),
    ({"size_multiple": 0}, "'size_multiple' is 0"),
    ({"size_multiple": "4"}, "'size_multiple' is str"),
    ({"graph": "/etc/hostname"}, "points outside the model folder"),
    ({"graph": "../../model.onnx"}, "points outside the model folder"),
    ({"weights": "/etc/passwd"}, "points outside the model folder"),
    ({"graph": "nope.onnx"}, "lacks nope.onnx"),
])
def test_a_damaged_config_is_one_line(folder, changes, words) -> None:
    _config(folder, **changes)
    with pytest.raises(runtime.ModelFolderError, match="^[^\n]+$") as e:
        runtime.read_config(folder)
    assert words in str(e.value)


def test_a_config_nested_to_the_limit_is_one_line(folder) -> None:
    (folder / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(runtime.ModelFolderError, match="nested too deeply"):
        runtime.read_config(folder)


@pytest.mark.parametrize("graph", [b"", b"\x08\x07garbage", None], ids=["empty", "garbage",
                                                                        "truncated"])
def test_a_graph_that_is_not_onnx_is_one_line_with_the_fix(folder, graph) -> None:
    (folder / "model.onnx").unlink()
    data = (DEMO / "model.onnx").read_bytes()[:4096] if graph is None else graph
    (folder / "model.onnx").write_bytes(data)
    with pytest.raises(ValueError, match="^[^\n]+$") as e:
        runtime.load_model(folder)
    assert "not a graph onnxruntime can load" in str(e.value)
    assert "re-export" in str(e.value)


def test_a_broken_graph_is_refused_at_open_not_an_internal_error(folder, serve, client,
                                                                  tmp_path, monkeypatch):
    from painted_skin import wire as P

    (folder / "model.onnx").unlink()
    (folder / "model.onnx").write_bytes(b"garbage")
    registry = tmp_path / "skin.toml"
    registry.write_text(f'[models.broken]\npath = "{folder}"\n')
    monkeypatch.setenv("PAINTED_SKIN_SKIN_MODELS", str(registry))
    _, ep = serve()
    c = client(ep)
    m = c.request(P.OPEN, session="s", pipeline="skin", width=32, height=32,
                  options={"model": "broken"}, timeout=60)
    if m.type == P.OPENED:  # the load runs after OPENED: its failure comes next
        m = c.recv(60)
    assert m.type == P.ERROR and m.header["code"] == P.E_BAD_MESSAGE, m.header
    assert "not a graph onnxruntime can load" in m.header["message"]


def test_another_characters_model_is_told_in_a_line_a_popup_can_show() -> None:
    """The mismatch names the meshes, not their whole fingerprint (which ran off the
    screen), and the fix: train this character's model or pick its own."""
    cfg = {"fingerprint": {"meshes": [[f"PaintedSkinDemo_Part{i}", 16782 + i, 19554]
                                      for i in range(12)], "bones": 52}}
    scene = {"meshes": [["Mannequin_Body", 5000, 4000]], "bones": 40}
    with pytest.raises(runtime.ModelFolderError) as e:
        runtime.check_fingerprint(cfg, scene, "/models/demo")
    text = str(e.value)
    assert len(text) < 320 and "\n" not in text, text
    assert "'demo'" in text and "Mannequin_Body" in text and "and 9 more" in text
    assert "Train Skin Model" in text and "pick its own" in text
