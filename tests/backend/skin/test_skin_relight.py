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


WITHOUT_SPECULAR = tuple(n for n in F.DEFAULT_INPUTS if n != "specular")


def _highlight_psnr(result, frames) -> float:
    """PSNR over the pixels a highlight lights (where the error of a model blind to
    the light's direction lives)."""
    err, n = 0.0, 0
    for passes, beauty in frames:
        lit = passes["specular"][..., 0] > 0.02
        pred = T.predict(result.net, result.model_cfg, passes).astype(np.float64)
        err += ((pred - beauty[..., :3])[lit] ** 2).sum() / 3.0
        n += int(lit.sum())
    return float(10 * np.log10(255.0 ** 2 / max(err / max(n, 1), 1e-9)))


def test_the_specular_pass_puts_highlights_where_a_new_light_makes_them() -> None:
    """Under suns it never saw, a model with the specular input paints the highlights
    where they are; without it the network only knows the diffuse light's direction."""
    frames = S.dataset(32, 48, seed=5, light="random")
    held_out = S.dataset(8, 48, seed=77, light="random")
    glossy = T.train(frames, X.tiny_config(steps=150))
    assert glossy.net.spec_at is not None
    matte = T.train(frames, X.tiny_config(steps=150, inputs=WITHOUT_SPECULAR))
    assert matte.net.spec_at is None
    assert _highlight_psnr(glossy, held_out) > _highlight_psnr(matte, held_out) + 1.0


def test_init_from_a_model_without_specular_adds_the_reference_highlight(tmp_path) -> None:
    """A shaded network started from one trained before the specular input paints what
    that one painted where no light glints, and starts the new term at the reference
    glossy surface's highlight (gloss 1) where one does: training goes on from there."""
    old, _ = X.train_tiny(tmp_path / "old", steps=5, inputs=WITHOUT_SPECULAR)
    cfg = X.tiny_config(steps=1)
    from painted_skin.backend.skin.model import SkinNet, model_config

    mcfg = model_config(F.layout(cfg.inputs), old.model_cfg["rest_bounds"], **cfg.model)
    net = SkinNet(mcfg)
    copied = T.init_from_model(net, tmp_path / "old")
    assert "unet.out.weight" in copied and "unet.out.bias" in copied
    brighter = 0
    for passes, _ in S.dataset(4, 48, seed=9, light="random"):
        a = T.predict(old.net, old.model_cfg, passes).astype(int)
        b = T.predict(net.eval(), mcfg, passes).astype(int)
        dark = passes["specular"][..., 0] == 0
        assert np.abs(a - b)[dark].max() <= 1
        brighter += int(((b - a).sum(-1) > 3)[~dark].sum())
    assert brighter > 0


def test_a_pyramid_grown_for_larger_frames_starts_painting_what_its_model_painted(tmp_path):
    """Training at a larger size adds a finer neural texture level: the old levels keep
    their learned texels (matched by size, not by place), the new one starts at zero,
    so the grown model begins exactly where the old one was."""
    from painted_skin.backend.skin.model import SkinNet, model_config

    old, _ = X.train_tiny(tmp_path / "old", steps=5)
    sizes = old.model_cfg["tex_sizes"]
    cfg = X.tiny_config(model={"tex_sizes": [sizes[0] * 2, *sizes]})
    mcfg = model_config(F.layout(cfg.inputs), old.model_cfg["rest_bounds"], **cfg.model)
    net = SkinNet(mcfg)
    copied = T.init_from_model(net, tmp_path / "old", fingerprint=S.FINGERPRINT)
    assert {f"tex.{i}" for i in range(1, len(sizes) + 1)} <= set(copied)
    assert not net.state_dict()["tex.0"].any()
    for passes, _ in S.dataset(4, 48, seed=9):
        a = T.predict(old.net, old.model_cfg, passes)
        b = T.predict(net.eval(), mcfg, passes)
        assert np.abs(a.astype(int) - b.astype(int)).max() <= 1
