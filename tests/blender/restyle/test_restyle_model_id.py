"""A restyle resumes only frames the same model painted: the backend's OPENED carries the
loaded model's identity (``model_id``, a digest of the skin model folder's config, ONNX
graph and weights), the output folder's settings file records it, and a re-run whose
model was retrained into the same folder refuses instead of mixing old and new frames."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import demo_walk_blend


@pytest.fixture(scope="module")
def shot(tmp_path_factory) -> Path:
    return demo_walk_blend(tmp_path_factory.mktemp("model_id_shot"), frames=6)


@pytest.fixture
def my_model(tmp_path, monkeypatch) -> Path:
    """A copy of the embedded skin model, served as "mine" by the backend's registry."""
    from painted_skin.backend.skin import registry

    folder = tmp_path / "mine"
    shutil.copytree(registry.resolve("demo"), folder)
    reg = tmp_path / "skin_models.toml"
    reg.write_text(f'[models.mine]\npath = "{folder}"\n')
    monkeypatch.setenv(registry.ENV, str(reg))
    return folder


def _retrain(folder: Path) -> None:
    """Change the weights the way a retrain does, keeping the graph loadable: one
    byte in the middle of the ONNX graph's raw weight data."""
    graph = folder / "model.onnx"
    data = bytearray(graph.read_bytes())
    data[len(data) // 2] ^= 0x01
    graph.write_bytes(bytes(data))


def _size(folder: Path) -> int:
    return json.loads((folder / "report.json").read_text()).get("dataset", {}).get("size", 128)


def test_a_rerun_with_a_retrained_model_refuses_and_an_unchanged_one_resumes(
        bpy_clean, shot, my_model, serve, tmp_path):
    from painted_skin.addon.blender.restyle.loop import (
        MODEL_KEY,
        SETTINGS_FILE,
        ModelChanged,
        RestyleRequest,
        restyle_shot,
        result_path,
    )

    bpy_clean.ops.wm.open_mainfile(filepath=str(shot))
    scene, size, out = bpy_clean.context.scene, _size(my_model), tmp_path / "out"
    opts = {"model": "mine"}
    _, url = serve()
    s = restyle_shot(scene, RestyleRequest.make(out, url=url, frames=[2], size=size,
                                                pipeline="skin", options=opts))
    assert s["written"] == 1
    first = json.loads((out / SETTINGS_FILE).read_text())[MODEL_KEY]
    assert first.startswith("blake2b:")

    # The same model (a new backend process loads it again): the run resumes.
    _, url = serve()
    s = restyle_shot(scene, RestyleRequest.make(out, url=url, frames=[2, 3], size=size,
                                                pipeline="skin", options=opts))
    assert (s["skipped"], s["written"]) == (1, 1)
    assert json.loads((out / SETTINGS_FILE).read_text())[MODEL_KEY] == first

    _retrain(my_model)
    _, url = serve()  # a backend that loads the retrained folder
    with pytest.raises(ModelChanged, match=r"the frames in .* were painted by another version "
                                           r"of model 'mine'.*another output folder"):
        restyle_shot(scene, RestyleRequest.make(out, url=url, frames=[2, 3, 4], size=size,
                                                pipeline="skin", options=opts))
    assert not result_path(out, 4).exists()  # nothing mixed in
    assert json.loads((out / SETTINGS_FILE).read_text())[MODEL_KEY] == first

    # A new folder takes the retrained model, with its own identity.
    s = restyle_shot(scene, RestyleRequest.make(tmp_path / "new", url=url, frames=[2], size=size,
                                                pipeline="skin", options=opts))
    assert s["written"] == 1
    second = json.loads((tmp_path / "new" / SETTINGS_FILE).read_text())[MODEL_KEY]
    assert second.startswith("blake2b:") and second != first


def test_opened_tells_the_model_id_of_every_pipeline(serve, tmp_path, my_model):
    """OPENED carries ``model_id``; the skin model's follows its bytes, not its mtime."""
    import os

    from painted_skin.addon.blender.client.backend_client import BackendClient

    def opened_id(pipeline: str, options: dict) -> str | None:
        _, url = serve()
        c = BackendClient(url, timeout_s=20)
        try:
            c.open(pipeline, 64, 64, options=options)
            return c.model_id
        finally:
            c.close()

    assert opened_id("echo", {}) == "echo"
    skin = opened_id("skin", {"model": "mine"})
    graph = my_model / "model.onnx"
    os.utime(graph, ns=(1, 1))  # touched, same bytes: the same model
    assert opened_id("skin", {"model": "mine"}) == skin
    _retrain(my_model)
    assert opened_id("skin", {"model": "mine"}) not in (None, skin)


def test_a_model_that_learned_older_passes_is_named_as_the_shot_opens(
        bpy_clean, shot, my_model, serve, tmp_path):
    """A skin model trained on an older add-on's passes still paints the shot; OPENED
    tells the client so (``notice``) and the restyle's summary carries it (the CLI
    prints it, the panel reports it), while a model of these passes says nothing."""
    from painted_skin.addon.blender.client.backend_client import BackendClient
    from painted_skin.addon.blender.restyle.loop import RestyleRequest, restyle_shot
    from painted_skin.wire import VALUES_VERSION

    def stamp(version: int) -> None:
        cfg_path = my_model / "config.json"
        cfg_path.write_text(json.dumps({**json.loads(cfg_path.read_text()),
                                        "pass_version": version}))

    bpy_clean.ops.wm.open_mainfile(filepath=str(shot))
    scene, size = bpy_clean.context.scene, _size(my_model)
    stamp(VALUES_VERSION - 2)
    _, url = serve()
    c = BackendClient(url, timeout_s=20)
    try:
        c.open("skin", 64, 64, options={"model": "mine"})
        assert f"'mine' learned version {VALUES_VERSION - 2} of the passes" in c.notice
    finally:
        c.close()
    s = restyle_shot(scene, RestyleRequest.make(tmp_path / "old", url=url, frames=[2],
                                                size=size, pipeline="skin",
                                                options={"model": "mine"}))
    assert s["written"] == 1 and "retrain it" in s["notice"]

    stamp(VALUES_VERSION)
    _, url = serve()
    s = restyle_shot(scene, RestyleRequest.make(tmp_path / "new", url=url, frames=[2],
                                                size=size, pipeline="skin",
                                                options={"model": "mine"}))
    assert s["written"] == 1 and "notice" not in s


def test_a_reopen_onto_another_model_version_ends_the_shot(serve):
    """A reconnect, restart or broker move re-opens the session: OPENED telling another
    ``model_id`` than the session first had ends the shot instead of painting on."""
    from painted_skin.addon.blender.client.backend_client import BackendClient
    from painted_skin.addon.blender.client.shot import Shot

    _, url = serve()
    c = BackendClient(url, timeout_s=20)
    try:
        c.open("echo", 64, 64)
        c.shot = Shot(iter([]), on_result=lambda r: None)
        c._on_opened({"model_id": "echo", "credits": 2, "moved": True})  # the same model
        assert c.shot.error is None
        c._on_opened({"model_id": "blake2b:0123", "credits": 2, "moved": True})
        assert "another version of model 'echo'" in str(c.shot.error)
    finally:
        c.close()


def test_a_diffusion_model_id_follows_its_local_weights(tmp_path):
    """A registry model's ``model_id`` changes when a weight file behind its name is
    swapped, and with the entry's sources; read again, or from a copy of the folder
    elsewhere (a farm node's), it is the same."""
    import shutil

    from painted_skin.backend.diffusion.components import parse_entry
    from painted_skin.backend.pipelines.diffusion import registry_identity

    base = tmp_path / "sd15"
    (base / "unet").mkdir(parents=True)
    weights = base / "unet" / "diffusion_pytorch_model.safetensors"
    weights.write_bytes(b"\0" * 64)
    entry = parse_entry("mine", {"base": str(base), "local_files_only": True})
    first = registry_identity(entry)
    assert registry_identity(parse_entry("mine", {"base": str(base),
                                                  "local_files_only": True})) == first
    copy = tmp_path / "node" / "sd15"
    shutil.copytree(base, copy)  # new mtimes, another path: the same weights
    assert registry_identity(parse_entry("mine", {"base": str(copy),
                                                  "local_files_only": True})) == first
    weights.write_bytes(b"\1" * 64)  # the same size, other bytes
    assert registry_identity(entry) != first
    with_cn = parse_entry("mine", {"base": str(base), "local_files_only": True,
                                "controlnets": {"depth": str(tmp_path / "cn")}})
    assert registry_identity(with_cn) != registry_identity(entry)


def test_two_runs_starting_together_with_two_model_versions_do_not_both_paint(tmp_path):
    """Farm chunks of one shot opened on two backends holding different versions: the
    second refuses although no frame is on disk yet; alone, a folder without frames
    takes the new version."""
    from painted_skin.addon.blender.restyle.output import (
        MODEL_KEY,
        SETTINGS_FILE,
        ModelChanged,
        check_model,
        check_settings,
    )

    settings = {"pipeline": "skin", "options": {"model": "mine"}}
    first = check_settings(tmp_path, settings)
    second = check_settings(tmp_path, settings)  # same settings: they share the folder
    check_model(tmp_path, "blake2b:aaaa", "mine", first)
    with pytest.raises(ModelChanged, match="another version of model 'mine'"):
        check_model(tmp_path, "blake2b:bbbb", "mine", second)
    second.close()
    first.close()
    with check_settings(tmp_path, settings) as alone:
        check_model(tmp_path, "blake2b:bbbb", "mine", alone)  # no frames, nobody else
    assert json.loads((tmp_path / SETTINGS_FILE).read_text())[MODEL_KEY] == "blake2b:bbbb"


def test_a_large_weight_file_is_told_by_samples_of_its_bytes(tmp_path, monkeypatch):
    """Above the full-hash limit a file is identified by its size and samples at its
    start, middle and end: a retrain (every tensor changes) is told, a copy is not."""
    from painted_skin.backend.pipelines import base

    monkeypatch.setattr(base, "FULL_HASH_LIMIT", 1024)
    monkeypatch.setattr(base, "SAMPLE", 256)
    data = bytearray(range(256)) * 40  # 10 KiB
    big = tmp_path / "unet.safetensors"
    big.write_bytes(bytes(data))
    first = base.files_identity([big])
    (tmp_path / "copy").mkdir()
    (tmp_path / "copy" / big.name).write_bytes(bytes(data))
    assert base.files_identity([tmp_path / "copy" / big.name]) == first
    data[len(data) // 2] ^= 1  # inside the middle sample
    big.write_bytes(bytes(data))
    assert base.files_identity([big]) != first


def test_an_sdxl_model_id_follows_its_union_controlnet(tmp_path, monkeypatch):
    """The union ControlNet and its modes sit beside an SDXL entry in the registry: a
    new union net, or other modes, is another model; asked for the separate nets, the
    union does not count."""
    from painted_skin.backend.pipelines.diffusion import xl_identity

    base, union = tmp_path / "xl", tmp_path / "union"
    for folder in (base / "unet", union):
        folder.mkdir(parents=True)
        (folder / "diffusion_pytorch_model.safetensors").write_bytes(b"\0" * 64)
    registry = tmp_path / "models.toml"

    def write(modes: str) -> None:
        registry.write_text(f'[models.xl]\nbase = "{base}"\nlocal_files_only = true\n'
                            f'controlnet_union = "{union}"\nunion_modes = {{ {modes} }}\n')

    monkeypatch.setenv("PAINTED_SKIN_MODELS", str(registry))
    write("depth = 1, normal = 4")
    first, separate = xl_identity("xl", None), xl_identity("xl", False)
    (union / "diffusion_pytorch_model.safetensors").write_bytes(b"\1" * 64)
    second = xl_identity("xl", None)
    assert second != first and xl_identity("xl", True) == second
    assert xl_identity("xl", False) == separate
    write("normal = 5, depth = 1")
    third = xl_identity("xl", None)
    assert third != second
    assert xl_identity("xl", False) == separate  # the union's modes are not used then
    write("depth = 1, normal = 5")
    assert xl_identity("xl", None) == third  # the order they are written in is no model
