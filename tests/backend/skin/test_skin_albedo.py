"""The albedo pass: the skin model multiplies its light by the materials' own colours,
so a surface painted differently from anything in training (a retextured character, a
face no camera saw) comes out in its own colours; a model started from one without the
pass begins from those colours, not from what its old outputs meant."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from painted_skin.backend.skin import features as F  # noqa: E402
from painted_skin.backend.skin import synthetic as S  # noqa: E402
from painted_skin.backend.skin import testing as X  # noqa: E402
from painted_skin.backend.skin import train as T  # noqa: E402


@pytest.fixture(autouse=True)
def _two_threads():
    with X.torch_threads(2):
        yield


WITHOUT_ALBEDO = tuple(n for n in F.DEFAULT_INPUTS if n != "albedo")


def test_a_model_with_the_albedo_pass_paints_colours_it_never_saw() -> None:
    frames = S.dataset(16, 48, seed=5, light="random")
    other = S.dataset(6, 48, seed=77, light="random", tex=S.texture(seed=4))
    reads = T.train(frames, X.tiny_config(steps=60))
    learns = T.train(frames, X.tiny_config(steps=60, inputs=WITHOUT_ALBEDO))
    a = T.evaluate(reads.net, reads.model_cfg, other)
    b = T.evaluate(learns.net, learns.model_cfg, other)
    assert a["psnr"] > b["psnr"] + 4.0, (a, b)


def test_init_from_a_model_without_the_pass_starts_from_the_materials_colours(tmp_path):
    old, _ = X.train_tiny(tmp_path / "old", steps=20, inputs=WITHOUT_ALBEDO)
    cfg = X.tiny_config(steps=1)
    from painted_skin.backend.skin.model import SkinNet, model_config

    mcfg = model_config(F.layout(cfg.inputs), old.model_cfg["rest_bounds"], **cfg.model)
    net = SkinNet(mcfg)
    T.init_from_model(net, tmp_path / "old")
    retextured = S.dataset(6, 48, seed=21, tex=S.texture(seed=4))
    before = T.evaluate(old.net, old.model_cfg, retextured)
    after = T.evaluate(net.eval(), mcfg, retextured)
    assert after["psnr"] > before["psnr"] + 4.0, (before, after)


def test_the_trainer_leaves_the_pass_out_when_told(tmp_path) -> None:
    """``--no-albedo`` (train-skin passes it for materials the pass cannot read): the
    model's layout has no albedo input, so it learns the colours itself."""
    import json

    with X.torch_threads(2):
        for extra, want in (([], True), (["--no-albedo"], False)):
            out = tmp_path / f"m{len(extra)}"
            assert T.main(["--synthetic", "8", "--out", str(out), "--steps", "2",
                           "--batch", "2", "--crop", "32", "--device", "cpu", *extra]) == 0
            layout = json.loads((out / "config.json").read_text())["layout"]
            assert ("albedo" in [n for n, _ in layout]) is want
