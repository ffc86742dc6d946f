"""The ``skin`` backend pipeline: registry names, OPEN checks, frames, resumed temporal shots."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

from painted_skin.backend import pipelines  # noqa: E402
from painted_skin.backend.diffusion import carry  # noqa: E402
from painted_skin.backend.skin import registry  # noqa: E402
from painted_skin.backend.skin import synthetic as S  # noqa: E402
from painted_skin.backend.skin import testing as X  # noqa: E402

pipelines.register_builtin()


@pytest.fixture(scope="module")
def registry_file(tmp_path_factory):
    root = tmp_path_factory.mktemp("skin-models")
    X.train_tiny(root / "hero-t", temporal=True, steps=20, size=32, frames=8)
    X.train_tiny(root / "hero", steps=3, size=32, frames=4)
    reg = root / "registry.toml"
    reg.write_text('[models.hero]\npath = "hero"\n[models.hero-t]\npath = "hero-t"\n')
    return reg


@pytest.fixture
def reg(registry_file, monkeypatch):
    monkeypatch.setenv(registry.ENV, str(registry_file))
    return registry_file


def _run(pipe, passes, frame, state, options=None):
    return pipe(passes, seed=frame, width=32, height=32, options=options or {},
                callback=lambda s, n: True, frame=frame, state=state)


def test_runs_a_frame_by_registry_name(reg) -> None:
    assert pipelines.get("skin").check({"model": "hero"}) == []
    pipe = pipelines.create("skin", {"model": "hero"})
    passes, _ = S.dataset(1, 32, seed=5)[0]
    rgb = _run(pipe, passes, 0, {})
    assert rgb.dtype == np.uint8 and rgb.shape == (32, 32, 3)
    assert not pipe.stateful


def test_open_refuses_paths_other_characters_and_unknown_names(reg) -> None:
    check = pipelines.get("skin").check
    assert "not accepted from clients" in check({"path": "/etc"})[0]
    assert "another character" in check({"model": "hero", "character": {"vertices": 9}})[0]
    assert check({"model": "hero", "character": S.FINGERPRINT}) == []
    assert "not in the registry" in check({"model": "villain"})[0]
    assert "without the temporal input" in check({"model": "hero", "temporal": True})[0]


def test_default_demo_model_missing_says_how_to_train_it(monkeypatch) -> None:
    monkeypatch.delenv(registry.ENV, raising=False)
    if registry.resolve(None).exists():
        pytest.skip("the demo skin model is present")
    (problem,) = pipelines.get("skin").check({})
    assert "skin_models/demo" in problem and "train" in problem


def test_resumed_temporal_shot_is_identical_to_an_uninterrupted_one(reg) -> None:
    shot = [p for p, _ in S.shot(5, 32, seed=8)]
    pipe = pipelines.create("skin", {"model": "hero-t"})
    assert pipe.stateful
    state: dict = {}
    whole = [_run(pipe, p, k, state) for k, p in enumerate(shot)]
    # the previous output is an input: painting frame 3 fresh gives another picture
    assert not np.array_equal(_run(pipe, shot[3], 3, {}), whole[3])
    # resume after frame 2 in a new session, the client carrying frame 2 back
    state = {}
    carried = {"carry_rgb": whole[2], "carry_depth": shot[2]["depth"]}
    assert carry.check(carried, 32, 32) is None
    carry.restore(pipe, state, 2, carried)
    for k in (3, 4):
        np.testing.assert_array_equal(_run(pipe, shot[k], k, state), whole[k])


def test_stabilize_is_checked_on_open_and_blends_the_chain(reg) -> None:
    check = pipelines.get("skin").check
    assert "[0, 1)" in check({"model": "hero-t", "stabilize": 1.5})[0]
    assert "[0, 1)" in check({"model": "hero-t", "stabilize": "strong"})[0]
    assert check({"model": "hero-t", "stabilize": 0}) == []
    shot = [p for p, _ in S.shot(4, 32, seed=8)]
    pipe = pipelines.create("skin", {"model": "hero-t"})
    steady, raw = {}, {}
    a = [_run(pipe, p, k, steady, {"stabilize": 0.5}) for k, p in enumerate(shot)]
    b = [_run(pipe, p, k, raw) for k, p in enumerate(shot)]
    np.testing.assert_array_equal(a[0], b[0])  # a shot's first frame has nothing to keep
    assert any(not np.array_equal(x, y) for x, y in zip(a[1:], b[1:], strict=True))
    # unset (the default): exactly the model's own chain
    prev = None
    for k, p in enumerate(shot):
        if k:
            from painted_skin.backend.skin import features

            prev = features.warp_previous_output(b[k - 1], p["motion"], p["depth"],
                                                 shot[k - 1]["depth"])
        expect = pipe.model.render(p, prev, k, 0.0)
        np.testing.assert_array_equal(b[k], np.where(p["mask"][..., None] > 0, expect, 0))


def test_engine_is_a_load_option_checked_on_open(reg) -> None:
    check = pipelines.get("skin").check
    assert check({"model": "hero", "engine": "torch"}) == []
    assert "must be one of onnx, torch" in check({"model": "hero", "engine": "tf"})[0]
    assert pipelines.get("skin").load_keys == ("model", "engine")
    passes, _ = S.dataset(1, 32, seed=5)[0]
    a = _run(pipelines.create("skin", {"model": "hero", "engine": "torch"}), passes, 0, {})
    b = _run(pipelines.create("skin", {"model": "hero"}), passes, 0, {})
    assert np.abs(a.astype(int) - b).max() <= 1


def test_a_model_that_learned_other_passes_is_named_on_open_not_refused(reg, tmp_path,
                                                                         monkeypatch) -> None:
    """A model trained on an older add-on's passes still paints, and the OPEN says so
    (which model, what it learned, retrain it); one that learned these says nothing."""
    import json
    import shutil

    from painted_skin.wire import VALUES_VERSION

    folders = {}
    for name, version in (("unrecorded", None), ("older", VALUES_VERSION - 1),
                          ("current", VALUES_VERSION), ("newer", VALUES_VERSION + 1)):
        folder = folders[name] = tmp_path / name
        shutil.copytree(reg.parent / "hero", folder)
        cfg = json.loads((folder / "config.json").read_text())
        cfg.pop("pass_version", None)
        if version is not None:
            cfg["pass_version"] = version
        (folder / "config.json").write_text(json.dumps(cfg))
    mine = tmp_path / "mine.toml"
    mine.write_text("".join(f'[models.{n}]\npath = "{f}"\n' for n, f in folders.items()))
    monkeypatch.setenv(registry.ENV, str(mine))
    passes, _ = S.dataset(1, 32, seed=5)[0]
    notices = {}
    for name in folders:
        assert pipelines.get("skin").check({"model": name}) == []  # never refused
        pipe = pipelines.create("skin", {"model": name})
        assert _run(pipe, passes, 0, {}).shape == (32, 32, 3)
        notices[name] = pipe.notice
    assert notices["current"] is None
    assert "'unrecorded' learned an older add-on's passes" in notices["unrecorded"]
    assert f"learned version {VALUES_VERSION - 1} of the passes" in notices["older"]
    assert f"renders version {VALUES_VERSION}" in notices["older"]
    assert "retrain it" in notices["older"] and "retrain" in notices["unrecorded"]
    assert "update the add-on" in notices["newer"]
    assert pipelines.base.opened_fields(pipe)["notice"] == notices["newer"]
