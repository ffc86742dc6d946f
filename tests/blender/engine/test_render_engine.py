"""The ``PAINTED_SKIN`` render engine in the bpy module: it registers with Blender's own
output panels; F12 (``render(write_still=True)``) writes the frame Restyle writes for
that frame; Render Animation honours the output path's ``#`` and paints the same chain
as a restyled shot; a frame that cannot be painted is an error, not a black file."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import demo_walk_blend


@pytest.fixture(scope="module")
def shot(tmp_path_factory) -> Path:
    return demo_walk_blend(tmp_path_factory.mktemp("engine_shot"), frames=8)


@pytest.fixture(scope="module")
def size() -> int:
    from painted_skin.backend.skin import registry

    report = json.loads((registry.resolve("demo") / "report.json").read_text())
    return int(report.get("dataset", {}).get("size", 128))


@pytest.fixture
def registered():
    import painted_skin

    painted_skin.register()
    yield
    painted_skin.unregister()


def _open(bpy, shot: Path, url: str, size: int, out: str):
    bpy.ops.wm.open_mainfile(filepath=str(shot))
    scene = bpy.context.scene
    scene.render.engine = "PAINTED_SKIN"
    scene.render.resolution_x = scene.render.resolution_y = size
    scene.render.resolution_percentage = 100
    scene.render.image_settings.file_format = "PNG"
    scene.render.image_settings.color_mode = "RGB"
    scene.render.filepath = out
    scene.painted_skin_engine.url = url
    scene.painted_skin_engine.start_local = False
    bpy.ops.painted_skin.engine_standard_view()
    return scene


def test_engine_registers_with_blenders_output_panels(bpy_clean, registered):
    bpy = bpy_clean
    scene = bpy.context.scene
    scene.render.engine = "PAINTED_SKIN"  # an engine Blender does not list raises TypeError
    assert scene.render.engine == "PAINTED_SKIN"
    # Blender's own Dimensions / Output / Color Management panels show for it.
    assert "PAINTED_SKIN" in bpy.types.RENDER_PT_format.COMPAT_ENGINES
    assert "PAINTED_SKIN" in bpy.types.RENDER_PT_color_management.COMPAT_ENGINES
    assert scene.painted_skin_engine.viewport_scale == pytest.approx(0.25)


def test_unregister_leaves_blenders_panels_as_they_were(bpy_clean):
    import painted_skin

    painted_skin.register()
    painted_skin.unregister()
    assert "PAINTED_SKIN" not in bpy_clean.types.RENDER_PT_format.COMPAT_ENGINES
    assert not hasattr(bpy_clean.types.Scene, "painted_skin_engine")


def _restyled(bpy, scene, url, size, frames, out):
    from painted_skin.addon.blender.passes.image_io import read_image
    from painted_skin.addon.blender.restyle.loop import (
        RestyleRequest,
        restyle_shot,
        result_path,
    )

    restyle_shot(scene, RestyleRequest.make(out, url=url, frames=frames, size=size,
                                            pipeline="skin", chain_start=frames[0]))
    return {f: read_image(result_path(out, f)) for f in frames}


def test_f12_writes_the_frame_restyle_writes(bpy_clean, registered, shot, skin_backend, size,
                                            tmp_path):
    from painted_skin.addon.blender.passes.image_io import read_image

    bpy = bpy_clean
    still = tmp_path / "still.png"
    scene = _open(bpy, shot, skin_backend, size, str(still))
    scene.frame_set(4)
    bpy.ops.render.render(write_still=True)
    painted = read_image(still)[..., :3]
    expect = _restyled(bpy, scene, skin_backend, size, [4], tmp_path / "restyle")[4]
    assert painted.shape == expect.shape == (size, size, 3)
    diff = np.abs(painted.astype(int) - expect.astype(int))
    assert diff.max() <= 1, f"F12 differs from restyle by up to {diff.max()}/255"
    assert expect.std() > 5  # a painted character, not an empty frame


def test_render_animation_follows_the_output_path_and_the_chain(
        bpy_clean, registered, shot, skin_backend, size, tmp_path):
    from painted_skin.addon.blender.passes.image_io import read_image

    bpy = bpy_clean
    scene = _open(bpy, shot, skin_backend, size, str(tmp_path / "anim" / "shot_####"))
    scene.frame_start, scene.frame_end = 2, 5
    bpy.ops.render.render(animation=True)
    names = sorted(p.name for p in (tmp_path / "anim").iterdir())
    assert names == [f"shot_{f:04d}.png" for f in range(2, 6)]
    expect = _restyled(bpy, scene, skin_backend, size, [2, 3, 4, 5], tmp_path / "restyle")
    for f in range(2, 6):
        painted = read_image(tmp_path / "anim" / f"shot_{f:04d}.png")[..., :3]
        diff = np.abs(painted.astype(int) - expect[f].astype(int))
        assert diff.max() <= 1, f"frame {f} differs from restyle by up to {diff.max()}/255"


def test_a_frame_that_cannot_be_painted_is_an_error_not_a_file(bpy_clean, registered, shot,
                                                               size, tmp_path):
    from test_client import free_url

    bpy = bpy_clean
    out = tmp_path / "nobackend.png"
    _open(bpy, shot, free_url(), size, str(out))  # nothing answers there
    with pytest.raises(RuntimeError, match="no backend answers"):
        bpy.ops.render.render(write_still=True)
    assert not out.exists()


def test_f12_at_a_size_the_model_does_not_take_paints_it_padded(bpy_clean, registered, shot,
                                                                  skin_backend, tmp_path):
    """126x94 (not multiples of the skin model's 4): the frame is painted padded with empty
    film and cropped back, the character as the model paints it."""
    from painted_skin.addon.blender.engine.frame_painter import padded_passes
    from painted_skin.addon.blender.passes.image_io import read_image
    from painted_skin.addon.blender.restyle.loop import pipeline_options, shot_frames, wire_passes
    from painted_skin.backend.skin import registry
    from painted_skin.backend.skin.runtime import load_model

    bpy = bpy_clean
    still = tmp_path / "odd.png"
    scene = _open(bpy, shot, skin_backend, 128, str(still))
    scene.render.resolution_x, scene.render.resolution_y = 126, 94
    scene.frame_set(3)
    bpy.ops.render.render(write_still=True)
    painted = read_image(still)[..., :3]
    assert painted.shape == (94, 126, 3)
    _, wire = next(shot_frames(scene, [3], 126, 94, passes=wire_passes("skin")))
    fingerprint = pipeline_options(scene, "skin", {})["character"]
    model = load_model(registry.resolve("demo"), fingerprint)
    expect = model.render(padded_passes(wire, 94, 126, 96, 128))[:94, :126]
    expect = np.where(wire["mask"][..., None] > 0, expect, 0)
    assert np.abs(painted.astype(int) - expect.astype(int)).max() <= 1
    assert painted[wire["mask"] > 0].std() > 5


def test_f12_fills_depth_normal_vector_and_mask_passes(bpy_clean, registered, shot,
                                                       skin_backend, size, tmp_path):
    """A multilayer EXR of the render holds the engine's passes in Blender's conventions:
    planar depth (1e10 where empty), the mask, unit world normals and the Vector pass,
    beside Combined, whose alpha is the mask on a transparent film."""
    from painted_skin.addon.blender.passes.image_io import read_exr_layers
    from painted_skin.addon.blender.restyle.loop import shot_frames, wire_passes

    bpy = bpy_clean
    exr = tmp_path / "passes.exr"
    scene = _open(bpy, shot, skin_backend, size, str(exr))
    scene.render.image_settings.media_type = "MULTI_LAYER_IMAGE"  # Blender 5: multilayer EXR
    scene.render.image_settings.file_format = "OPEN_EXR_MULTILAYER"
    scene.render.film_transparent = True
    scene.frame_set(3)
    bpy.ops.render.render(write_still=True)
    layers = read_exr_layers(exr)
    vl = scene.view_layers[0].name
    _, wire = next(shot_frames(scene, [3], size, size, passes=wire_passes("skin")))
    on = wire["mask"] > 0
    mask = layers[f"{vl}.Mask.X"]
    np.testing.assert_array_equal(mask > 0.5, on)
    depth = layers[f"{vl}.Depth.Z"]
    np.testing.assert_allclose(depth[on], wire["depth"][on], rtol=1e-5)
    assert (depth[~on] == 1e10).all()
    normal = np.stack([layers[f"{vl}.Normal.{c}"] for c in "XYZ"], -1)
    np.testing.assert_allclose(np.linalg.norm(normal[on], axis=-1), 1.0, atol=1e-3)
    # Cycles' raw Vector convention (passes/cycles.py): X, -Y to the previous frame,
    # -Z, W to the next, in pixels.
    vec = np.stack([layers[f"{vl}.Vector.{c}"] for c in "XYZW"], -1)
    m = wire["motion"].astype(np.float32)
    np.testing.assert_allclose(vec[on], np.stack([m[..., 0], -m[..., 1], -m[..., 2],
                                                  m[..., 3]], -1)[on], atol=1e-3)
    assert np.abs(m[on]).max() > 0.1  # the character moves: the check compares motion
    np.testing.assert_array_equal(layers[f"{vl}.Combined.A"] > 0.5, on)


def test_a_render_under_another_view_transform_is_warned_once(bpy_clean, registered, shot,
                                                              skin_backend, size, tmp_path,
                                                              capfd):
    bpy = bpy_clean
    scene = _open(bpy, shot, skin_backend, size, str(tmp_path / "agx_####"))
    scene.view_settings.view_transform = "AgX"
    scene.frame_start, scene.frame_end = 2, 4
    bpy.ops.render.render(animation=True)
    out = capfd.readouterr()
    assert (out.out + out.err).count("View Transform is AgX") == 1
    assert len(list(tmp_path.glob("agx_*.png"))) == 3
