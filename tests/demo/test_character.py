"""The procedural demo character (real bpy) and the spring-chain simulation (pure numpy)."""

from __future__ import annotations

import math
import time
from collections import Counter

import numpy as np
import pytest
from painted_skin.addon.core.rig import humanoid
from painted_skin.demo.character import spring

# --------------------------------------------------------------------------- helpers


def _positions(me) -> np.ndarray:
    co = np.empty(len(me.vertices) * 3, dtype=np.float32)
    me.vertices.foreach_get("co", co)
    return co.reshape(-1, 3)


def _weights(obj) -> tuple[list[str], np.ndarray]:
    names = [g.name for g in obj.vertex_groups]
    w = np.zeros((len(obj.data.vertices), len(names)))
    for v in obj.data.vertices:
        for g in v.groups:
            w[v.index, g.group] = g.weight
    return names, w


def _snapshot(arm) -> dict:
    from painted_skin.demo import character

    body = next(c for c in arm.children if c.get("painted_skin_part") == "body")
    cape = next(c for c in arm.children if c.get("painted_skin_part") == "cape")
    me = body.data
    mat_index = np.zeros(len(me.polygons), dtype=np.int64)
    me.polygons.foreach_get("material_index", mat_index)
    loops = np.empty(len(me.loops), dtype=np.int64)
    me.loops.foreach_get("edge_index", loops)
    groups, weights = _weights(body)
    cape_groups, cape_weights = _weights(cape)
    bones = arm.data.bones
    return {
        "positions": _positions(me),
        "edge_faces": np.bincount(loops, minlength=len(me.edges)),
        "groups": groups,
        "weights": weights,
        "materials": [m["painted_skin_part"] for m in me.materials],
        "mat_index": mat_index,
        "cape_positions": _positions(cape.data),
        "cape_groups": cape_groups,
        "cape_weights": cape_weights,
        "cape_material": cape.data.materials[0]["painted_skin_part"],
        "cape_closed": character.is_closed(cape.data),
        "deform": {b.name for b in bones if b.use_deform},
        "heads": {b.name: np.array(b.head_local) for b in bones},
        "tails": {b.name: np.array(b.tail_local) for b in bones},
        "parents": {b.name: b.parent.name if b.parent else None for b in bones},
        "connected": {b.name: b.use_connect for b in bones},
        "collections": {b.name: [c.name for c in b.collections] for b in bones},
        "spring": {b.name for b in bones if b.get("painted_skin_spring")},
    }


@pytest.fixture(scope="module")
def demo():
    """Two builds in one fresh session, read into plain arrays (safe across resets)."""
    import bpy
    from painted_skin.demo import character

    bpy.ops.wm.read_factory_settings(use_empty=True)
    t = time.perf_counter()
    first = character.build_demo_character()
    elapsed = time.perf_counter() - t
    a = _snapshot(first)
    b = _snapshot(character.build_demo_character())
    a["build_s"] = elapsed
    return a, b


# --------------------------------------------------------------------------- character


def test_build_is_deterministic(demo):
    a, b = demo
    np.testing.assert_array_equal(a["positions"], b["positions"])
    assert a["groups"] == b["groups"]
    np.testing.assert_array_equal(a["weights"], b["weights"])
    np.testing.assert_array_equal(a["mat_index"], b["mat_index"])
    np.testing.assert_array_equal(a["cape_positions"], b["cape_positions"])


def test_build_is_fast(demo):
    assert demo[0]["build_s"] < 3.0


def test_body_is_closed_and_sized(demo):
    a, _ = demo
    assert set(a["edge_faces"].tolist()) == {2}
    assert a["cape_closed"]
    assert 5_000 <= len(a["positions"]) <= 20_000


def test_weights_are_normalised_on_deform_bones(demo):
    a, _ = demo
    assert set(a["groups"]) <= a["deform"]
    w = a["weights"]
    np.testing.assert_allclose(w.sum(axis=1), 1.0, atol=1e-5)
    assert (np.count_nonzero(w, axis=1) <= 4).all()
    # No body vertex listens to the cape; the cape listens to the chain and its parent.
    from painted_skin.demo.character import CAPE_BONES, CAPE_PARENT

    assert not set(a["groups"]) & set(CAPE_BONES)
    assert set(a["cape_groups"]) == {CAPE_PARENT, *CAPE_BONES}
    np.testing.assert_allclose(a["cape_weights"].sum(axis=1), 1.0, atol=1e-5)


def test_weights_follow_the_body(demo):
    """Hands go to hand/finger bones, feet to foot/toe, the head to the head."""
    a, _ = demo
    p, w, g = a["positions"], a["weights"], a["groups"]
    top = np.array(g)[np.argmax(w, axis=1)]
    left_tip = np.argmax(p[:, 0])
    assert top[left_tip].endswith(".L") and top[left_tip].startswith(("f_", "thumb", "hand"))
    assert top[np.argmax(p[:, 2])] == "spine.006"
    assert top[np.argmin(p[:, 1])] in ("toe.L", "toe.R")  # the toes are most forward
    lowest_right = np.argmin(np.where(p[:, 0] < 0, p[:, 2], np.inf))
    assert top[lowest_right] in ("foot.R", "toe.R")


def test_all_materials_used(demo):
    a, _ = demo
    assert sorted(a["materials"]) == sorted(["skin", "shirt", "trousers", "shoes", "hair"])
    used = {a["materials"][i] for i in np.unique(a["mat_index"])}
    assert used == set(a["materials"])
    counts = Counter(a["materials"][i] for i in a["mat_index"])
    assert min(counts.values()) > 200
    assert a["cape_material"] == "cape"


def test_bone_map_covers_the_humanoid(demo):
    from painted_skin.demo.character import CAPE_BONES, DEMO_BONE_MAP

    a, _ = demo
    wanted = set(humanoid.CORE) | {"chest", "upperChest", "neck"}
    wanted |= {j.name for j in humanoid.JOINTS if j.group in ("finger", "toes", "shoulder")}
    assert wanted <= set(DEMO_BONE_MAP)
    assert set(DEMO_BONE_MAP) <= set(humanoid.NAMES)
    assert set(DEMO_BONE_MAP.values()) <= set(a["heads"])
    assert len(set(DEMO_BONE_MAP.values())) == len(DEMO_BONE_MAP)
    assert not set(CAPE_BONES) & set(DEMO_BONE_MAP.values())
    # The bone tree agrees with the canonical one wherever both bones are mapped.
    inverse = {v: k for k, v in DEMO_BONE_MAP.items()}
    for canon, bone in DEMO_BONE_MAP.items():
        parent = a["parents"][bone]
        expected = humanoid.canonical_parent(canon, frozenset(DEMO_BONE_MAP))
        assert (inverse.get(parent) if parent else None) == expected, canon


def test_metarig_names_and_accessory_chain(demo):
    a, _ = demo
    for name in ("spine", "spine.001", "spine.002", "spine.003", "spine.004", "spine.006",
                 "upper_arm.L", "forearm.R", "f_pinky.03.L", "thumb.01.R", "toe.L"):
        assert name in a["heads"], name
    assert a["parents"]["cape.001"] == "spine.003"
    assert [a["parents"][f"cape.00{i}"] for i in (2, 3, 4)] == ["cape.001", "cape.002", "cape.003"]
    assert a["spring"] == {"cape.001", "cape.002", "cape.003", "cape.004"}
    assert all(a["collections"][n] == ["Accessory"] for n in a["spring"])
    assert a["connected"]["forearm.L"] and a["connected"]["shin.R"]
    assert not a["connected"]["thigh.L"] and not a["connected"]["upper_arm.L"]


def test_stands_on_the_floor_facing_minus_y(demo):
    a, _ = demo
    p, h, t = a["positions"], a["heads"], a["tails"]
    assert abs(float(p[:, 2].min())) < 1e-4
    assert 1.70 < float(p[:, 2].max()) < 1.82
    assert h["hand.L"][0] > 0.3 and h["hand.R"][0] < -0.3
    for s in ("L", "R"):
        assert t[f"toe.{s}"][1] < h[f"foot.{s}"][1] - 0.1  # feet point to -Y
    nose_y = p[(p[:, 2] > 1.6) & (p[:, 2] < 1.66) & (np.abs(p[:, 0]) < 0.01), 1].min()
    back_y = p[(p[:, 2] > 1.6) & (p[:, 2] < 1.66) & (np.abs(p[:, 0]) < 0.01), 1].max()
    assert nose_y < -0.1 < 0.05 < back_y
    np.testing.assert_allclose(np.abs(p[:, 0]).max(), -p[:, 0].min(), rtol=1e-3)  # symmetric


def test_rest_is_an_a_pose(demo):
    a, _ = demo
    for s, sign in (("L", 1), ("R", -1)):
        d = a["tails"][f"upper_arm.{s}"] - a["heads"][f"upper_arm.{s}"]
        below = math.degrees(math.atan2(-d[2], math.hypot(d[0], d[1])))
        assert 40.0 <= below <= 45.0
        assert sign * d[0] > 0
        fore = a["tails"][f"forearm.{s}"] - a["heads"][f"forearm.{s}"]
        bend = math.degrees(math.acos(d @ fore / np.linalg.norm(d) / np.linalg.norm(fore)))
        assert 0.0 < bend < 20.0
    for s in ("L", "R"):  # legs straight down within a few degrees
        d = a["tails"][f"shin.{s}"] - a["heads"][f"thigh.{s}"]
        assert math.degrees(math.acos(-d[2] / np.linalg.norm(d))) < 5.0


def test_posing_a_bone_deforms_the_mesh(bpy_clean):
    from mathutils import Quaternion
    from painted_skin.demo import character

    bpy = bpy_clean
    arm = character.build_demo_character()
    body = bpy.data.objects[f"{arm.name}_Body"]

    def evaluated() -> np.ndarray:
        bpy.context.view_layer.update()
        ev = body.evaluated_get(bpy.context.evaluated_depsgraph_get())
        me = ev.to_mesh()
        try:
            return _positions(me).copy()
        finally:
            ev.to_mesh_clear()

    rest = evaluated()
    np.testing.assert_allclose(rest, _positions(body.data), atol=1e-5)
    arm.pose.bones["forearm.L"].rotation_mode = "QUATERNION"
    arm.pose.bones["forearm.L"].rotation_quaternion = Quaternion((1, 0, 0), math.radians(60))
    posed = evaluated()
    moved = np.linalg.norm(posed - rest, axis=1)
    tip = np.argmax(rest[:, 0])
    assert moved[tip] > 0.1
    assert moved[rest[:, 0] < -0.05].max() < 1e-5  # the right side stays put
    np.testing.assert_allclose(moved[rest[:, 2] < 0.5], 0.0, atol=1e-5)


def test_spring_bake_writes_keys_and_lags(bpy_clean):
    from bpy_extras import anim_utils
    from painted_skin.demo import character

    bpy = bpy_clean
    scene = bpy.context.scene
    scene.render.fps = 24
    arm = character.build_demo_character()
    arm.animation_data_create()
    arm.animation_data.action = bpy.data.actions.new("Slide")
    hips = arm.pose.bones["spine"]
    for f in range(1, 41):
        hips.location = (0.4 * min(1.0, max(0.0, (f - 10) / 6)), 0.0, 0.0)
        hips.keyframe_insert("location", frame=f)
    baked = character.bake_spring_bones(arm)
    assert baked == list(character.CAPE_BONES)
    cb = anim_utils.action_get_channelbag_for_slot(arm.animation_data.action,
                                                   arm.animation_data.action_slot)
    paths = Counter(fc.data_path for fc in cb.fcurves)
    for name in baked:
        assert paths[f'pose.bones["{name}"].rotation_quaternion'] == 4
    fc = next(fc for fc in cb.fcurves if "cape.004" in fc.data_path)
    assert len(fc.keyframe_points) == 40
    # Bezier keys with Blender's own handles: the cape stays smooth between frames.
    assert {kp.interpolation for kp in fc.keyframe_points} == {"BEZIER"}
    handles = [tuple(kp.handle_left) + tuple(kp.handle_right) for kp in fc.keyframe_points]
    fc.update()
    assert [tuple(kp.handle_left) + tuple(kp.handle_right) for kp in fc.keyframe_points] \
        == handles
    character.bake_spring_bones(arm, (1, 40))  # baking again replaces, never duplicates
    assert Counter(fc.data_path for fc in cb.fcurves) == paths

    cape = bpy.data.objects[f"{arm.name}_Cape"]

    def hem_x(frame: int) -> float:
        scene.frame_set(frame)
        ev = cape.evaluated_get(bpy.context.evaluated_depsgraph_get())
        me = ev.to_mesh()
        try:
            p = _positions(me)
            return float(p[p[:, 2] < p[:, 2].min() + 0.05, 0].mean())
        finally:
            ev.to_mesh_clear()

    body_x = 0.4
    assert abs(hem_x(1)) < 1e-3
    assert hem_x(16) < body_x - 0.1  # the hem trails the body while it moves...
    assert abs(hem_x(40) - body_x) < 0.03  # ...and catches up once it stops


def test_save_demo_blend(bpy_clean, tmp_path):
    from painted_skin.demo import character

    bpy = bpy_clean
    out = character.save_demo_blend(tmp_path / "demo.blend")
    assert out.is_file() and sorted(p.name for p in tmp_path.iterdir()) == ["demo.blend"]
    bpy.ops.wm.open_mainfile(filepath=str(out))
    scene = bpy.context.scene
    assert scene.name == "PaintedSkinDemo"
    assert scene.camera is not None
    # The camera is in front of the character (it faces -Y) and frames it.
    from bpy_extras.object_utils import world_to_camera_view

    arm = next(o for o in scene.objects if o.type == "ARMATURE")
    for bone in ("spine", "spine.006", "foot.L"):
        p = world_to_camera_view(scene, scene.camera, arm.matrix_world @ arm.pose.bones[bone].head)
        assert 0.05 < p.x < 0.95 and 0.05 < p.y < 0.95 and p.z > 0, bone
    assert scene.camera.matrix_world.translation.y < -1.0
    kinds = Counter(o.type for o in scene.objects)
    assert kinds["ARMATURE"] == 1 and kinds["MESH"] == 2 and kinds["LIGHT"] == 1


# --------------------------------------------------------------------------- spring (pure)

_HANG = np.array([[0, 0, 0], [0, 0, -0.2], [0, 0, -0.4], [0, 0, -0.6], [0, 0, -0.8]], float)


def _parent(frames: int, x: np.ndarray | None = None) -> np.ndarray:
    m = np.tile(np.eye(4), (frames, 1, 1))
    m[:, 2, 3] = 1.5
    if x is not None:
        m[:, 0, 3] = x
    return m


def _slide(fps: float, seconds: float = 4.0) -> np.ndarray:
    t = np.arange(int(seconds * fps)) / fps
    return _parent(len(t), np.clip((t - 0.5) / 0.4, 0.0, 1.0) * 0.5)


def test_spring_hanging_chain_stays_at_rest():
    chain = spring.SpringChain.from_points(_HANG)
    r = spring.simulate(chain, _parent(50), 24.0)
    np.testing.assert_allclose(r.points, np.broadcast_to(_HANG + [0, 0, 1.5], r.points.shape),
                               atol=1e-9)
    np.testing.assert_allclose(r.matrices[:, :, :3, :3],
                               np.broadcast_to(chain.rest[:, :3, :3], (50, 4, 3, 3)), atol=1e-9)


def test_spring_horizontal_chain_settles():
    chain = spring.SpringChain.from_points(np.array([[0, 0, 0], [0.2, 0, 0], [0.4, 0, 0]]))
    r = spring.simulate(chain, _parent(120), 30.0, spring.SpringParams(prewarm=0.0))
    assert r.points[-1, -1, 2] < 1.5 - 0.05  # it sags under gravity...
    assert spring.tip_velocity(r.points, 30.0)[-10:].max() < 1e-3  # ...and comes to rest
    assert r.points[-1, -1, 0] > 0.2  # the stiffness holds it partly up


@pytest.mark.parametrize("fps", [24.0, 60.0, 120.0])
def test_spring_lags_then_settles_and_keeps_lengths(fps):
    chain = spring.SpringChain.from_points(_HANG)
    parent = _slide(fps)
    r = spring.simulate(chain, parent, fps)
    lengths = np.linalg.norm(np.diff(r.points, axis=1), axis=-1)
    np.testing.assert_allclose(lengths, 0.2, atol=1e-9)
    np.testing.assert_allclose(r.points[:, 0], parent[:, :3, 3], atol=1e-12)  # root pinned
    mid = int(0.8 * fps)
    assert r.points[mid, -1, 0] < parent[mid, 0, 3] - 0.1  # the tip trails
    np.testing.assert_allclose(r.points[-1], _HANG + [0.5, 0, 1.5], atol=5e-3)  # and settles
    assert np.isfinite(r.matrices).all()
    # Matrices: orthonormal, Y along the bone, translation at the head.
    rot = r.matrices[..., :3, :3]
    np.testing.assert_allclose(rot @ rot.swapaxes(-1, -2), np.broadcast_to(np.eye(3), rot.shape),
                               atol=1e-9)
    seg = np.diff(r.points, axis=1)
    np.testing.assert_allclose(rot[..., :, 1], seg / lengths[..., None], atol=1e-9)
    np.testing.assert_allclose(r.matrices[..., :3, 3], r.points[:, :-1], atol=1e-12)


def test_spring_is_deterministic_and_frame_rate_consistent():
    chain = spring.SpringChain.from_points(_HANG)
    a = spring.simulate(chain, _slide(24.0), 24.0)
    b = spring.simulate(chain, _slide(24.0), 24.0)
    np.testing.assert_array_equal(a.points, b.points)
    c = spring.simulate(chain, _slide(120.0), 120.0)
    # The same instants at 24 and 120 fps agree to a few centimetres.
    np.testing.assert_allclose(a.points[::6][:16], c.points[::30][:16], atol=0.05)


def test_spring_follows_parent_rotation_and_colliders():
    chain = spring.SpringChain.from_points(_HANG)
    frames = 96
    parent = _parent(frames)
    ang = np.radians(np.clip(np.arange(frames) / 24.0, 0, 1) * 90.0)  # turn about Z
    c, s = np.cos(ang), np.sin(ang)
    parent[:, 0, 0], parent[:, 0, 1], parent[:, 1, 0], parent[:, 1, 1] = c, -s, s, c
    horiz = spring.SpringChain.from_points(np.array([[0, 0, 0], [0.3, 0, 0], [0.6, 0, 0]]))
    params = spring.SpringParams(stiffness=400.0, gravity=(0.0, 0.0, 0.0))
    r = spring.simulate(horiz, parent, 24.0, params)
    np.testing.assert_allclose(r.points[-1, -1], [0.0, 0.6, 1.5], atol=0.01)
    # A capsule in the way keeps the hanging chain's tips outside it.
    caps = np.broadcast_to(np.array([[0.0, -0.2, 0.9], [0.0, 0.2, 0.9]]), (frames, 1, 2, 3))
    r = spring.simulate(chain, _parent(frames, np.full(frames, 0.05)), 24.0,
                        colliders=caps, collider_radii=np.array([0.1]))
    d = np.hypot(r.points[:, 1:, 0], r.points[:, 1:, 2] - 0.9)
    assert (d >= 0.1 - 1e-3).all()  # pushed out, then the bone length is restored
    np.testing.assert_allclose(np.linalg.norm(np.diff(r.points, axis=1), axis=-1), 0.2, atol=1e-9)
    with pytest.raises(ValueError):
        spring.simulate(chain, np.eye(4), 24.0)
