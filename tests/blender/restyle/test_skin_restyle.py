"""The skin pipeline from the Blender client over ZeroMQ: a real shot of the demo
character painted by the embedded skin model (``rigs/skin_models/demo``) in a backend
that has onnxruntime and numpy only, each written frame exactly what the model paints
from the frame's passes; a model for another character is refused on OPEN."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import demo_walk_blend


@pytest.fixture(scope="module")
def model_dir() -> Path:
    from painted_skin.backend.skin import registry

    folder = registry.resolve("demo")
    assert (folder / "config.json").is_file(), \
        f"the embedded skin model is missing at {folder}: painted-skin train-skin --character demo"
    return folder


@pytest.fixture(scope="module")
def shot(tmp_path_factory) -> Path:
    return demo_walk_blend(tmp_path_factory.mktemp("skin_shot"), frames=6)


def test_skin_pipeline_paints_the_shot_exactly_as_the_model(bpy_clean, shot, skin_backend,
                                                            model_dir, tmp_path):
    from painted_skin.addon.blender.client.backend_client import BackendError
    from painted_skin.addon.blender.passes.image_io import read_image
    from painted_skin.addon.blender.restyle.loop import (
        RestyleRequest,
        restyle_shot,
        result_path,
        shot_frames,
        wire_passes,
    )
    from painted_skin.backend.skin.runtime import load_model

    bpy_clean.ops.wm.open_mainfile(filepath=str(shot))
    scene = bpy_clean.context.scene
    size = json.loads((model_dir / "report.json").read_text()).get("dataset", {}).get("size",
                                                                                      128)
    s = restyle_shot(scene, RestyleRequest.make(tmp_path, url=skin_backend, frames=[2, 3],
                                                size=size, pipeline="skin"))
    assert (s["written"], s["frames"]) == (2, 2)
    settings = json.loads((tmp_path / "restyle.json").read_text())
    assert settings["options"]["character"]["meshes"]  # the fingerprint travelled
    model = load_model(model_dir, settings["options"]["character"])
    # Frame 2 opens the session: a temporal model has no previous output to warp yet.
    f, wire = next(shot_frames(scene, [2], size, size, passes=wire_passes("skin")))
    painted = read_image(result_path(tmp_path, 2))
    expect = np.where(wire["mask"][..., None] > 0, model.render(wire, None, 0), 0)
    np.testing.assert_array_equal(painted, expect)
    on = wire["mask"] > 0
    assert painted[on].std() > 5 and not painted[~on].any()

    other = {"meshes": [["SomeoneElse", 10, 8]]}
    with pytest.raises(BackendError, match="character"):
        restyle_shot(scene, RestyleRequest.make(tmp_path / "other", url=skin_backend, frames=[2],
                                                size=size, pipeline="skin",
                                                options={"character": other}))
    assert not list((tmp_path / "other").glob("restyled/*.png"))
