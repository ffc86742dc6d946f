"""Shading that follows the light: a skin model paints albedo x the irradiance pass, so
a light moved after training moves the shading. Synthetic frames under a new sun every
frame; held out, other poses under other suns."""

from __future__ import annotations

import numpy as np
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


WITHOUT_IRRADIANCE = tuple(n for n in F.DEFAULT_INPUTS if n != "irradiance")


def test_a_model_with_the_irradiance_pass_follows_lights_it_never_saw() -> None:
    frames = S.dataset(32, 48, seed=5, light="random")
    held_out = S.dataset(8, 48, seed=77, light="random")
    shaded = T.train(frames, X.tiny_config(steps=150))
    assert shaded.model_cfg["shading"]
    blind = T.train(frames, X.tiny_config(steps=150, inputs=WITHOUT_IRRADIANCE))
    assert not blind.model_cfg["shading"]
    a = T.evaluate(shaded.net, shaded.model_cfg, held_out)
    b = T.evaluate(blind.net, blind.model_cfg, held_out)
    assert a["psnr"] > b["psnr"] + 1.0, (a, b)


def test_init_from_a_model_without_an_input_paints_what_it_painted(tmp_path) -> None:
    """A network started from another model (here one trained before the irradiance
    input existed) begins where that model was: the new input's weights start at zero."""
    old, _ = X.train_tiny(tmp_path / "old", steps=5, inputs=WITHOUT_IRRADIANCE)
    cfg = X.tiny_config(steps=1, model={"shading": False})
    frames = S.dataset(4, 48, seed=9)
    from painted_skin.backend.skin.model import SkinNet, model_config

    mcfg = model_config(F.layout(cfg.inputs), old.model_cfg["rest_bounds"], **cfg.model)
    net = SkinNet(mcfg)
    copied = T.init_from_model(net, tmp_path / "old")
    assert "unet.down.0.0.weight" in copied and "tex.0" in copied
    for passes, _ in frames:
        a = T.predict(old.net, old.model_cfg, passes)
        b = T.predict(net.eval(), mcfg, passes)
        assert np.abs(a.astype(int) - b.astype(int)).max() <= 1


def test_init_from_refuses_a_folder_that_is_not_a_model(tmp_path) -> None:
    cfg = X.tiny_config()
    from painted_skin.backend.skin.model import SkinNet, model_config

    net = SkinNet(model_config(F.layout(cfg.inputs), [[-1, -1, -1], [1, 1, 1]], **cfg.model))
    with pytest.raises(T.TrainError, match="--init-from"):
        T.init_from_model(net, tmp_path)


def test_init_from_another_characters_model_keeps_its_network_not_its_textures(tmp_path):
    """A new character starts from the shading a trained network knows; the old
    character's neural textures (laid out on its own UVs) would only be noise to it."""
    X.train_tiny(tmp_path / "old", steps=2)
    cfg = X.tiny_config()
    from painted_skin.backend.skin.model import SkinNet, model_config

    net = SkinNet(model_config(F.layout(cfg.inputs), [[-1, -1, -1], [1, 1, 1]], **cfg.model))
    fresh = net.state_dict()["tex.0"].clone()
    copied = T.init_from_model(net, tmp_path / "old", fingerprint={"mesh": "another"})
    assert "unet.down.0.0.weight" in copied and not any(n.startswith("tex.") for n in copied)
    assert torch.equal(net.state_dict()["tex.0"], fresh)
    same = T.init_from_model(net, tmp_path / "old", fingerprint=S.FINGERPRINT)
    assert "tex.0" in same
