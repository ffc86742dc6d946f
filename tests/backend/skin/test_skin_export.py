"""Skin model folders: ONNX matches torch, and bad folders are refused with the fix."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

from painted_skin.backend.skin import FORMAT_VERSION  # noqa: E402
from painted_skin.backend.skin import features as F  # noqa: E402
from painted_skin.backend.skin import runtime as R  # noqa: E402
from painted_skin.backend.skin import synthetic as S  # noqa: E402
from painted_skin.backend.skin import testing as X  # noqa: E402
from painted_skin.backend.skin import train as T  # noqa: E402

TOL = 1e-4  # float32 graph vs eager: summation order only


@pytest.fixture(scope="module", params=["regressor", "diffusion"])
def exported(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp("skin") / request.param
    res, _ = X.train_tiny(folder, steps=3, model={"head": request.param})
    return res, folder


def test_onnx_matches_torch(exported) -> None:
    res, folder = exported
    model = R.load_model(folder, S.FINGERPRINT)
    passes, _ = S.dataset(1, 48, seed=7)[0]
    x = F.frame_features(passes, res.model_cfg["layout"], res.model_cfg["rest_bounds"])[None]
    feeds = {"features": x}
    args = [torch.from_numpy(x)]
    if res.model_cfg["head"] == "diffusion":
        x_t = np.random.default_rng(0).standard_normal((1, 3, 48, 48)).astype(np.float32)
        feeds |= {"x_t": x_t, "t": np.full((1,), 0.7, np.float32)}
        args += [torch.from_numpy(x_t), torch.full((1,), 0.7)]
    onnx_out = model.engine.run(feeds)
    with torch.no_grad():
        torch_out = res.net(*args).numpy()
    np.testing.assert_allclose(onnx_out, torch_out, atol=TOL, rtol=0)
    rgb = model.render(passes, seed=3)
    ref = T.predict(res.net, res.model_cfg, passes, seed=3)
    # The runtime paints the character's box (the film around it black): its pixels are
    # the whole frame's torch prediction, to the box's edge effect.
    on = np.asarray(passes["mask"]) > 0
    assert rgb.shape == (48, 48, 3) and np.abs(rgb[on].astype(int) - ref[on]).max() <= 2


def test_folder_holds_config_graph_and_report(exported) -> None:
    _, folder = exported
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "model.onnx",
                                                        "report.json", "weights.safetensors"]
    cfg = json.loads((folder / "config.json").read_text())
    assert cfg["format_version"] == FORMAT_VERSION and cfg["fingerprint"] == S.FINGERPRINT
    assert F.channels(cfg["layout"]) == 46  # 6 coordinates + 40 conditioning channels
    assert json.loads((folder / "report.json").read_text())["steps"] == 3
    assert not [p for p in folder.parent.iterdir() if p.name.startswith(".")]  # no temp left
    modes = {p.name: p.stat().st_mode & 0o777 for p in folder.iterdir()}
    assert len(set(modes.values())) == 1, modes  # every file as readable as the others


def _copy(folder, tmp_path):
    import shutil

    return shutil.copytree(folder, tmp_path / "copy")


def test_other_format_version_is_refused(exported, tmp_path) -> None:
    bad = _copy(exported[1], tmp_path)
    cfg = json.loads((bad / "config.json").read_text())
    (bad / "config.json").write_text(json.dumps({**cfg, "format_version": 0}))
    with pytest.raises(R.ModelFolderError, match="format version 0.*retrain or re-export"):
        R.load_model(bad)


def test_other_character_is_refused(exported) -> None:
    other = {**S.FINGERPRINT, "vertices": 1234}
    with pytest.raises(R.ModelFolderError, match="another character .*vertices"):
        R.load_model(exported[1], other)
    R.load_model(exported[1], S.FINGERPRINT)  # its own character loads


def test_missing_files_are_refused(exported, tmp_path) -> None:
    bad = _copy(exported[1], tmp_path)
    (bad / "model.onnx").unlink()
    with pytest.raises(R.ModelFolderError, match="lacks model.onnx: copy the whole folder"):
        R.load_model(bad)
    (bad / "config.json").unlink()
    with pytest.raises(R.ModelFolderError, match="has no config.json"):
        R.load_model(bad)
    with pytest.raises(R.ModelFolderError, match="does not exist: train one"):
        R.load_model(tmp_path / "nowhere")


@pytest.mark.parametrize("kind", ["file", "link"])
def test_a_model_path_that_is_not_a_folder_is_refused_and_kept(exported, tmp_path, kind) -> None:
    """Exporting moves the old model folder aside and puts the new one in its place: a
    file (or a link) at that path would be replaced, so it is refused and left as is."""
    from painted_skin.backend.skin import export

    res, _ = exported
    victim = tmp_path / "notes.txt"
    victim.write_text("keep me")
    out = tmp_path / "model"
    if kind == "file":
        out = victim
    else:
        out.symlink_to(victim)
    with pytest.raises(ValueError, match="is not a folder"):
        export.export_model(res.net, res.model_cfg, out, S.FINGERPRINT, res.report)
    assert victim.read_text() == "keep me" and (kind == "file" or out.is_symlink())


def test_torch_engine_paints_what_onnx_paints(exported) -> None:
    res, folder = exported
    passes, _ = S.dataset(1, 48, seed=7)[0]
    onnx_model = R.load_model(folder, S.FINGERPRINT)
    torch_model = R.load_model(folder, S.FINGERPRINT, engine="torch")
    assert torch_model.engine.providers == ["torch:cpu"]
    x = F.frame_features(passes, res.model_cfg["layout"], res.model_cfg["rest_bounds"])[None]
    feeds = {"features": x}
    if res.model_cfg["head"] == "diffusion":
        feeds |= {"x_t": np.zeros((1, 3, 48, 48), np.float32), "t": np.ones(1, np.float32)}
    np.testing.assert_allclose(torch_model.engine.run(feeds), onnx_model.engine.run(feeds),
                               atol=TOL, rtol=0)
    a, b = torch_model.render(passes, seed=3), onnx_model.render(passes, seed=3)
    assert np.abs(a.astype(int) - b).max() <= 1


def test_engines_refuse_what_they_cannot_run(exported, tmp_path) -> None:
    import shutil

    from painted_skin.backend.skin import engines

    _, folder = exported
    with pytest.raises(engines.EngineError, match="must be one of onnx, torch"):
        R.load_model(folder, S.FINGERPRINT, engine="tensorflow")
    bare = tmp_path / "no-weights"
    shutil.copytree(folder, bare)
    (bare / "weights.safetensors").unlink()
    with pytest.raises(engines.EngineError, match="no torch weights.*re-export"):
        R.load_model(bare, S.FINGERPRINT, engine="torch")
    assert R.load_model(bare, S.FINGERPRINT).render(S.dataset(1, 48, seed=7)[0][0]).any()
