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


def test_the_network_paints_the_characters_box_as_it_paints_the_whole_frame(
        bpy_clean, shot, model_dir):
    """The model runs on the character's box (a third of the time at the demo's
    framing): its pixels match the network over the whole frame (≤ 2/255, ≥ 60 dB), a previous
    frame is cut with the passes, and a frame without the character is the film's black."""
    from painted_skin.addon.blender.restyle.loop import shot_frames, wire_passes
    from painted_skin.backend.skin import features
    from painted_skin.backend.skin.runtime import character_box, load_model
    from painted_skin.backend.skin.stabilize import ON_STRENGTH

    bpy_clean.ops.wm.open_mainfile(filepath=str(shot))
    scene = bpy_clean.context.scene
    (_, a), (_, b) = shot_frames(scene, [3, 4], 128, 128, passes=wire_passes("skin"))
    model = load_model(model_dir)
    on = b["mask"] > 0
    box = character_box(on, model.multiple)
    assert box is not None and (box[1] - box[0]) * (box[3] - box[2]) < 0.8 * on.size
    assert all(v % model.multiple == 0 for v in (box[1] - box[0], box[3] - box[2]))
    whole = model._paint(b, None, None, ON_STRENGTH)
    cut = model.render(b)
    _close(cut[on], whole[on])
    assert not cut[~_box_mask(box, on.shape)].any()  # the film around the box is black
    if model.temporal:
        prev = features.warp_previous_output(model.render(a), b["motion"], b["depth"],
                                             a["depth"])
        whole = model._paint(b, prev, None, ON_STRENGTH)  # the blend cut with the box too
        cut = model.render(b, prev, stabilize_strength=ON_STRENGTH)
        _close(cut[on], whole[on])
    empty = {k: (np.zeros_like(v) if k == "mask" else v) for k, v in b.items()}
    assert not model.render(empty).any()


def _close(cut: np.ndarray, whole: np.ndarray) -> None:
    d = cut.astype(float) - whole.astype(float)
    assert np.abs(d).max() <= 2
    # The box lies on the network's pooling grid: the same sums as over the frame.
    assert 10 * np.log10(255 ** 2 / max(np.mean(d ** 2), 1e-12)) >= 60


def _box_mask(box, shape):
    m = np.zeros(shape, bool)
    m[box[0]:box[1], box[2]:box[3]] = True
    return m
