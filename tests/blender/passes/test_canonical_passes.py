"""The passes a per-character neural renderer needs: rest_position, uv, normal_world,
view_dir and light_visibility. The fast engine must match the references (Cycles AOVs
and passes; ray-traced light visibility), keep a skin point's rest position whatever
the pose, and leave the user's file as it found it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from painted_skin.addon import motion as gen
from test_passes_accuracy import walking_shot

NEW = ("rest_position", "uv", "normal_world", "view_dir", "light_visibility")
PASSES = ("depth", "normal", "mask", "motion") + NEW


def run_engines(scene, frames: list[int], size: tuple[int, int], passes=PASSES,
                engines=("cycles", "fast")) -> dict[str, dict]:
    from painted_skin.addon.blender.passes.geometry import ShotGeometry
    from painted_skin.addon.blender.passes.render import PassOptions, iter_frames

    out = {}
    for engine in engines:
        opts = PassOptions(frames=range(frames[0], frames[-1] + 1), width=size[0],
                           height=size[1], engine=engine, passes=passes)
        geo = ShotGeometry(scene, *size)
        out[engine] = {f: (g, a) for f, g, a, _ in iter_frames(scene, geo, opts, frames)}
    return out


def analytic_uvs(ob) -> None:
    """A UV map from the rest positions (cylindrical), for meshes that have none."""
    me = ob.data
    co = np.empty(len(me.vertices) * 3, np.float32)
    me.vertices.foreach_get("co", co)
    co = co.reshape(-1, 3)
    lv = np.empty(len(me.loops), np.int64)
    me.loops.foreach_get("vertex_index", lv)
    uv = np.stack([np.arctan2(co[lv, 1], co[lv, 0]) / (2 * np.pi) + 0.5, co[lv, 2] / 2], 1)
    layer = me.uv_layers.new(name="UVMap")
    layer.data.foreach_set("uv", uv.astype(np.float32).ravel())


def scene_state(bpy) -> dict:
    """What the Cycles reference touches and must put back."""
    scene = bpy.context.scene
    return {
        "aovs": [a.name for vl in scene.view_layers for a in vl.aovs],
        "position_pass": [vl.use_pass_position for vl in scene.view_layers],
        "flags": {o.name: o.add_rest_position_attribute for o in scene.objects},
        "props": {o.name: sorted(o.keys()) for o in scene.objects},
        "materials": sorted(m.name for m in bpy.data.materials),
        "nodes": {m.name: len(m.node_tree.nodes) for m in bpy.data.materials if m.node_tree},
        "slots": {o.name: [s.material.name if s.material else None for s in o.material_slots]
                  for o in scene.objects if o.type == "MESH"},
    }


def assert_canonical_match(out: dict[str, dict], height: float, vis_agree: float = 0.97
                           ) -> None:
    """The project's bars on pixels both engines cover: rest positions within 1e-3 of the
    character height and UVs within 1e-3 (but for the pixels where the engines see
    another triangle: silhouettes, UV seams), world normals, view directions, and light
    visibility mostly equal (shadow-map edges)."""
    for f, (_, cyc) in out["cycles"].items():
        fast = out["fast"][f][1]
        both = cyc["mask"] & fast["mask"]
        assert both.sum() > 300
        rest = np.abs(fast["rest_position"][both] - cyc["rest_position"][both]).max(axis=-1)
        assert np.median(rest) <= 1e-4 * height and (rest <= 1e-3 * height).mean() >= 0.99
        uv = np.abs(fast["uv"][both] - cyc["uv"][both]).max(axis=-1)
        assert (uv <= 1e-3).mean() >= 0.98, np.percentile(uv, [50, 98])
        assert (cyc["uv"][both][:, 2] == 1).all() and (fast["uv"][both][:, 2] == 1).all()
        for key, bar in (("normal_world", 1.0), ("view_dir", 0.05)):
            cos = np.sum(fast[key][both] * cyc[key][both], axis=-1)
            assert np.degrees(np.arccos(np.clip(cos, -1, 1))).mean() <= bar, key
        vis = fast["light_visibility"][both] == cyc["light_visibility"][both]
        assert vis.all(axis=-1).mean() >= vis_agree
        for key in NEW:  # empty pixels are 0 in both engines
            assert not fast[key][~fast["mask"]].any() and not cyc[key][~cyc["mask"]].any()


def test_demo_character_canonical_passes_match_cycles(bpy_clean, tmp_path):
    from painted_skin.addon.blender.retarget.api import retarget_clip
    from painted_skin.demo.character import build_demo_character, setup_demo_scene

    bpy = bpy_clean
    arm = build_demo_character()
    setup_demo_scene(arm)
    for ob in arm.children:
        if not ob.data.uv_layers:
            analytic_uvs(ob)
    retarget_clip(gen.write_clip(tmp_path / "walk.bvh", "walk", frames=12, fps=24), arm)
    before = scene_state(bpy)
    out = run_engines(bpy.context.scene, [4, 9], (128, 128))
    assert scene_state(bpy) == before  # AOVs, nodes, flags, properties all removed
    assert_canonical_match(out, height=1.75)
    # Some of the figure is in its own shadow (the sun is fixed), not all of it.
    vis = out["fast"][4][1]["light_visibility"][out["fast"][4][1]["mask"]][:, 0]
    assert 0.02 < 1 - vis.mean() < 0.98


def test_real_character_canonical_passes_match_cycles(bpy_clean, shared_data, tmp_path):
    from painted_skin.addon.blender.retarget.importers import import_character

    bpy = bpy_clean
    arm = import_character(shared_data / "characters" / "human-male.glb")
    walking_shot(bpy, tmp_path, arm)
    sun = bpy.data.objects.new("Sun", bpy.data.lights.new("Sun", "SUN"))
    sun.rotation_euler = (0.7, 0.2, 0.9)
    bpy.context.scene.collection.objects.link(sun)
    out = run_engines(bpy.context.scene, [5], (128, 128))
    height = max(v[2] for c in arm.children for v in c.bound_box)
    assert_canonical_match(out, height=height)


def test_rest_position_stays_on_the_skin_when_the_pose_changes(bpy_clean, tmp_path):
    """Follow each pixel's surface point to the next frame with the motion vectors: its
    rest position there is the one it had (to interpolation), while it moved in the
    world."""
    from painted_skin.demo.character import build_demo_character

    bpy = bpy_clean
    arm = build_demo_character()
    walking_shot(bpy, tmp_path, arm)  # a walk, seen by a camera that stays put
    out = run_engines(bpy.context.scene, [5, 6], (160, 160),
                      passes=("depth", "mask", "motion", "rest_position", "view_dir"),
                      engines=("fast",))["fast"]
    (_, a), (_, b) = out[5], out[6]
    h, w = a["mask"].shape
    ii, jj = np.nonzero(a["mask"])
    u = jj + 0.5 + a["motion"][ii, jj, 2]
    v = ii + 0.5 + a["motion"][ii, jj, 3]
    # Bilinear sampling of frame 6 where all four neighbours are covered and the depth
    # is smooth (no occlusion edge in between).
    x0, y0 = np.floor(u - 0.5).astype(int), np.floor(v - 0.5).astype(int)
    ok = (x0 >= 0) & (y0 >= 0) & (x0 < w - 1) & (y0 < h - 1)
    x0, y0, u, v, ii, jj = x0[ok], y0[ok], u[ok], v[ok], ii[ok], jj[ok]
    quad = [(y0, x0), (y0, x0 + 1), (y0 + 1, x0), (y0 + 1, x0 + 1)]
    cover = np.all([b["mask"][q] for q in quad], axis=0)
    d = np.stack([b["depth"][q] for q in quad])
    smooth = cover & (np.ptp(np.where(np.isfinite(d), d, 0), axis=0) < 0.02)
    fx, fy = (u - 0.5 - x0)[:, None], (v - 0.5 - y0)[:, None]
    r = b["rest_position"]
    sample = ((1 - fy) * ((1 - fx) * r[quad[0]] + fx * r[quad[1]])
              + fy * ((1 - fx) * r[quad[2]] + fx * r[quad[3]]))
    err = np.linalg.norm(sample - a["rest_position"][ii, jj], axis=-1)[smooth]
    assert smooth.sum() > 500
    assert np.median(err) < 1e-3  # metres: a small fraction of a pixel's footprint (~1 cm)
    # ...while the surface moved on screen (the camera stays put: it moved in the world).
    moved = np.linalg.norm(a["motion"][ii, jj, 2:], axis=-1)[smooth]
    assert np.median(moved) > 1.0  # pixels


def _plane(bpy, name: str, size: float, z: float = 0.0, with_uv: bool = True):
    h = size / 2
    me = bpy.data.meshes.new(name)
    me.from_pydata([(-h, -h, z), (h, -h, z), (h, h, z), (-h, h, z)], [], [(0, 1, 2, 3)])
    if with_uv:
        me.uv_layers.new(name="UVMap")  # the unit square on the quad
    ob = bpy.data.objects.new(name, me)
    bpy.context.scene.collection.objects.link(ob)
    return ob


def _camera(bpy, location, target=(0.0, 0.0, 0.0), lens=35.0):
    from mathutils import Vector

    cam = bpy.data.objects.new("cam", bpy.data.cameras.new("cam"))
    cam.data.lens = lens
    bpy.context.scene.collection.objects.link(cam)
    cam.location = location
    cam.rotation_euler = (Vector(target) - cam.location).to_track_quat("-Z", "Y").to_euler()
    bpy.context.scene.camera = cam
    return cam


def test_mesh_without_uvs_has_uv_zero_and_world_normals_turn_with_the_camera(bpy_clean):
    """A mesh with UVs beside one without (and without a material): has_uv is 1 on
    the first, 0 on the second, in both engines; the UVs are the quad's; world normals
    are the camera normals turned by the camera's rotation."""
    bpy = bpy_clean
    with_uv = _plane(bpy, "with_uv", 1.0)
    with_uv.location.x = -0.7
    bpy.ops.mesh.primitive_uv_sphere_add(radius=0.5, location=(0.7, 0.0, 0.3))
    bare = bpy.context.object
    while bare.data.uv_layers:
        bare.data.uv_layers.remove(bare.data.uv_layers[0])
    _camera(bpy, (0.4, -3.0, 2.5))
    before = scene_state(bpy)
    out = run_engines(bpy.context.scene, [1], (96, 80))
    assert scene_state(bpy) == before  # the temporary material is gone too
    for engine in ("fast", "cycles"):
        g, a = out[engine][1]
        m = a["mask"]
        flat = np.abs(a["normal_world"][..., 2]) > 0.999
        on_plane = m & (a["rest_position"][..., 2] == 0) & flat
        on_sphere = m & (np.linalg.norm(a["rest_position"], axis=-1) > 0.45) & ~on_plane
        assert on_plane.sum() > 200 and on_sphere.sum() > 200
        assert (a["uv"][on_plane][:, 2] == 1).all() and not a["uv"][on_sphere].any()
        # The quad's default UVs are its corners: u, v follow x, y of the rest mesh.
        rest = a["rest_position"][on_plane]
        np.testing.assert_allclose(a["uv"][on_plane][:, :2], rest[:, :2] + 0.5, atol=2e-3)
        rot = g.camera.world[:3, :3]
        np.testing.assert_allclose(a["normal_world"][m], a["normal"][m] @ rot.T, atol=2e-5)
        view = a["view_dir"][m]
        np.testing.assert_allclose(np.linalg.norm(view, axis=-1), 1.0, atol=1e-5)


def _box_shadowed(p: np.ndarray, to_light: np.ndarray, lo, hi, reach: np.ndarray) -> np.ndarray:
    """Whether the segment p + t * to_light, 0 < t < reach, meets the box [lo, hi]."""
    with np.errstate(divide="ignore", invalid="ignore"):
        t0 = (np.asarray(lo) - p) / to_light
        t1 = (np.asarray(hi) - p) / to_light
    tn = np.nanmax(np.minimum(t0, t1), axis=-1)
    tf = np.nanmin(np.maximum(t0, t1), axis=-1)
    return (tn <= tf) & (tf > 1e-6) & (tn < reach)


def test_light_visibility_shadow_of_a_box_is_where_geometry_says(bpy_clean):
    """A box above a floor, lit by a sun (a parallelogram shadow) and by a low point
    light (a wide cone: the cube-map path): on the floor, both engines' visibility is
    the analytic one (a segment-box test); the box's sides facing away are unlit."""
    from painted_skin.addon.blender.passes.geometry import ShotGeometry

    bpy = bpy_clean
    _plane(bpy, "floor", 6.0)
    bpy.ops.mesh.primitive_cube_add(size=0.6, location=(0.0, 0.0, 0.8))
    lo, hi = np.array([-0.3, -0.3, 0.5]), np.array([0.3, 0.3, 1.1])
    sun = bpy.data.objects.new("A_sun", bpy.data.lights.new("A_sun", "SUN"))
    sun.rotation_euler = (-0.5, -0.3, 0.0)  # leans to -x, +y: the shadow falls towards us
    lamp = bpy.data.objects.new("B_lamp", bpy.data.lights.new("B_lamp", "POINT"))
    lamp.location = (0.25, -0.15, 1.9)
    for ob in (sun, lamp):
        bpy.context.scene.collection.objects.link(ob)
    _camera(bpy, (2.2, -4.5, 4.0), target=(0.0, 0.0, 0.3))
    out = run_engines(bpy.context.scene, [1], (128, 128),
                      passes=("depth", "mask", "view_dir", "light_visibility"))
    g = out["fast"][1][0]
    assert [li.name for li in g.lights] == ["A_sun", "B_lamp"]
    geo = ShotGeometry(bpy.context.scene, 128, 128)
    cam = geo.frame(1).camera
    for engine, bar in (("cycles", 0.997), ("fast", 0.98)):
        a = out[engine][1][1]
        m = a["mask"]
        # World position from the view direction and the planar depth.
        ii, jj = np.nonzero(m)
        view = a["view_dir"][m].astype(np.float64)
        eye = cam.world[:3, 3]
        back = cam.world[:3, 2]
        p = eye - view * (a["depth"][m] / (view @ back))[:, None]
        floor = np.abs(p[:, 2]) < 1e-4
        sun_dir = g.lights[0].direction
        expect_sun = ~_box_shadowed(p, np.broadcast_to(sun_dir, p.shape), lo, hi,
                                    np.full(len(p), np.inf))
        to_lamp = g.lights[1].position - p
        dist = np.linalg.norm(to_lamp, axis=1)
        expect_lamp = ~_box_shadowed(p, to_lamp / dist[:, None], lo, hi, dist)
        vis = a["light_visibility"][m]
        for k, expect in ((0, expect_sun), (1, expect_lamp)):
            assert (~expect[floor]).sum() > 150  # a real shadow on the floor, seen
            assert (vis[floor, k] == expect[floor]).mean() >= bar, (engine, k)
        assert not vis[:, 2:].any()  # unused channels
        # A box side facing away from the sun (its -y side) is unlit.
        away = (np.abs(p[:, 1] - lo[1]) < 1e-4) & (p[:, 2] > lo[2] + 0.01)
        assert away.sum() > 20 and not vis[away, 0].any()


def test_make_passes_writes_canonical_files_and_manifest(bpy_clean, tmp_path):
    from painted_skin.addon.blender.passes.image_io import read_exr_layers, read_image
    from painted_skin.addon.blender.passes.render import PassOptions, make_passes

    bpy = bpy_clean
    _plane(bpy, "floor", 3.0)
    bpy.ops.mesh.primitive_cube_add(size=0.5, location=(0.0, 0.0, 0.6))
    sun = bpy.data.objects.new("sun", bpy.data.lights.new("sun", "SUN"))
    bpy.context.scene.collection.objects.link(sun)
    _camera(bpy, (1.5, -4.0, 3.0))
    out = Path(tmp_path / "passes")
    make_passes(bpy.context.scene, PassOptions(frames=range(1, 2), width=64, height=48,
                                               passes=("mask",) + NEW), out)
    manifest = json.loads((out / "manifest.json").read_text())
    assert [li["name"] for li in manifest["lights"]] == ["sun"]
    np.testing.assert_allclose(manifest["lights"][0]["direction"], [0, 0, 1], atol=1e-6)
    assert all(k in manifest["conventions"] for k in NEW)
    assert manifest["rest_box"][0][2] == pytest.approx(-0.25)  # the cube, object space
    layers = read_exr_layers(out / "uv" / "0001.exr")
    assert sorted(layers) == ["B", "G", "R"]
    mask = read_image(out / "mask" / "0001.png") > 0
    np.testing.assert_array_equal(layers["B"] > 0, mask)  # the floor and cube have UVs
    rest16 = read_image(out / "rest_position16" / "0001.png")
    assert rest16.dtype == np.uint16 and (rest16[mask] > 0).all() and not rest16[~mask].any()
    cam = json.loads((out / "camera" / "0001.json").read_text())
    assert cam["lights"][0]["type"] == "SUN"
