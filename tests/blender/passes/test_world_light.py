"""The world_light pass is the light Cycles' world puts on the surface: the world's colour
and strength times the share of sky each point sees, as Cycles' Diffuse Direct pass holds
it with no lamp in the scene. The skin model adds it to the lamps' light, so a body whose
front the key does not reach is lit, and darkened in its creases, as the render is."""

from __future__ import annotations

import json

import numpy as np
from test_canonical_passes import _camera, _plane, run_engines
from test_irradiance import _cycles_diffuse_direct


def _world_scene(bpy, colour, strength=1.0):
    """A floor and a box on it under a world of one colour, no lamp."""
    _plane(bpy, "floor", 6.0)
    bpy.ops.mesh.primitive_cube_add(size=0.8, location=(0.0, 0.0, 0.4))
    world = bpy.data.worlds.new("sky")
    bg = world.node_tree.nodes["Background"]
    bg.inputs["Color"].default_value = (*colour, 1.0)
    bg.inputs["Strength"].default_value = strength
    bpy.context.scene.world = world
    _camera(bpy, (2.2, -3.5, 2.6), target=(0.0, 0.0, 0.2))
    return bg


def _inner(a: dict) -> np.ndarray:
    """Covered pixels away from depth edges (Cycles' film blends floor and box there)."""
    m = a["mask"] > 0
    d = np.where(m, a["depth"], 0.0)
    inner = m.copy()
    inner[1:-1, 1:-1] &= (np.abs(np.diff(d, axis=0))[1:, 1:-1] < 0.05) \
        & (np.abs(np.diff(d, axis=1))[1:-1, 1:] < 0.05)
    return inner


def test_world_light_matches_cycles_and_is_darker_where_the_sky_is_hidden(bpy_clean, tmp_path):
    bpy = bpy_clean
    _world_scene(bpy, (0.3, 0.4, 0.5))
    out = run_engines(bpy.context.scene, [1], (64, 64), passes=("depth", "mask", "world_light"))
    ref = _cycles_diffuse_direct(bpy, tmp_path, 64)
    for engine in ("fast", "cycles"):
        a = out[engine][1][1]
        m = _inner(a)
        ours, theirs = a["world_light"][m], ref[m]
        # in the world's units: an open sky reads its colour
        assert np.abs(ours - theirs).mean() < 0.02, engine
        assert np.corrcoef(ours[:, 2], theirs[:, 2])[0, 1] > 0.9, engine
        # open floor and the box's top read the sky; its sides, half of it hidden, less
        lum = ours[:, 2] / 0.5
        assert lum.max() > 0.95 and lum.min() < 0.7, engine


def test_world_light_follows_the_worlds_colour_and_strength_and_says_it(bpy_clean, tmp_path):
    from painted_skin.addon.blender.passes.render import PassOptions, make_passes

    bpy = bpy_clean
    bg = _world_scene(bpy, (0.3, 0.4, 0.5))
    scene = bpy.context.scene
    opts = PassOptions(frames=range(1, 2), width=48, height=48, engine="fast",
                       passes=("depth", "mask", "world_light"))
    first = run_engines(scene, [1], (48, 48), passes=opts.passes, engines=("fast",))
    bg.inputs["Color"].default_value = (0.5, 0.2, 0.1, 1.0)
    bg.inputs["Strength"].default_value = 2.0
    second = run_engines(scene, [1], (48, 48), passes=opts.passes, engines=("fast",))
    a, b = first["fast"][1][1], second["fast"][1][1]
    m = a["mask"] > 0
    ratio = b["world_light"][m].mean(axis=0) / a["world_light"][m].mean(axis=0)
    np.testing.assert_allclose(ratio, [2 * 0.5 / 0.3, 2 * 0.2 / 0.4, 2 * 0.1 / 0.5], rtol=1e-3)
    make_passes(scene, opts, tmp_path / "p")
    manifest = json.loads((tmp_path / "p" / "manifest.json").read_text())
    np.testing.assert_allclose(manifest["world"]["color"], [1.0, 0.4, 0.2], rtol=1e-5)
    assert (tmp_path / "p" / "world_light" / "0001.exr").is_file()
    # a scene without a world is painted under the training world, and the run says so
    scene.world = None
    done = make_passes(scene, opts, tmp_path / "q")
    manifest = json.loads((tmp_path / "q" / "manifest.json").read_text())
    assert manifest["world"]["color"] == [0.05, 0.05, 0.05]
    assert any("no world" in w for w in done["warnings"])
