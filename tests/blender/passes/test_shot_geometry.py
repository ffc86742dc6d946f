"""Per-frame geometry read from Blender: normals must equal Blender's own corner
normals whichever domain Blender keeps them in (smooth, flat, mixed)."""

from __future__ import annotations

import numpy as np
import pytest


def _sphere(bpy, name: str, x: float, scale=(1.0, 1.0, 1.0)):
    import bmesh

    me = bpy.data.meshes.new(name)
    bm = bmesh.new()
    bmesh.ops.create_uvsphere(bm, u_segments=16, v_segments=8, radius=0.5)
    bm.to_mesh(me)
    bm.free()
    ob = bpy.data.objects.new(name, me)
    ob.location = (x, 0.0, 0.0)
    ob.rotation_euler = (0.3, 0.2, 0.7)
    ob.scale = scale
    bpy.context.scene.collection.objects.link(ob)
    return ob


def _reference_corner_normals(bpy, geo) -> np.ndarray:
    """Blender's corner normals in world space, per triangle corner of ``geo.tris``."""
    dg = bpy.context.evaluated_depsgraph_get()
    out = []
    for ob, index in zip(geo.objects, geo._normal_index, strict=True):
        ev = ob.evaluated_get(dg)
        me = ev.to_mesh()
        cn = np.empty(len(me.loops) * 3, np.float32)
        me.corner_normals.foreach_get("vector", cn)
        ev.to_mesh_clear()
        mw = np.array(ev.matrix_world)
        w = cn.reshape(-1, 3) @ np.linalg.inv(mw[:3, :3])  # inverse transpose, row vectors
        w /= np.linalg.norm(w, axis=1, keepdims=True)
        out.append(w[index["CORNER"]])
    return np.concatenate(out)


def test_normals_match_blender_corner_normals_in_every_domain(bpy_clean):
    from painted_skin.addon.blender.passes.geometry import ShotGeometry

    bpy = bpy_clean
    smooth = _sphere(bpy, "smooth", -1.5, scale=(1.0, 2.0, 0.5))  # non-uniform scale
    smooth.data.shade_smooth()
    _sphere(bpy, "flat", 0.0).data.shade_flat()
    mixed = _sphere(bpy, "mixed", 1.5)
    mixed.data.shade_smooth()
    sharp = np.zeros(len(mixed.data.edges), bool)
    sharp[::5] = True
    mixed.data.attributes.new("sharp_edge", "BOOLEAN", "EDGE").data.foreach_set("value", sharp)
    cam = bpy.data.objects.new("cam", bpy.data.cameras.new("cam"))
    cam.location = (0.0, -8.0, 0.0)
    cam.rotation_euler = (np.pi / 2, 0.0, 0.0)
    bpy.context.scene.collection.objects.link(cam)
    bpy.context.scene.camera = cam
    bpy.context.view_layer.update()

    dg = bpy.context.evaluated_depsgraph_get()
    domains = {ob.name: ob.evaluated_get(dg).data.normals_domain
               for ob in bpy.context.scene.objects if ob.type == "MESH"}
    assert domains == {"smooth": "POINT", "flat": "FACE", "mixed": "CORNER"}

    geo = ShotGeometry(bpy.context.scene, 64, 64)
    g = geo.frame(1)
    assert g.corner_normals.shape == (len(geo.tris), 3, 3)
    ref = _reference_corner_normals(bpy, geo)
    assert np.abs(g.corner_normals - ref).max() == pytest.approx(0.0, abs=1e-5)


def test_changing_topology_is_refused_with_a_clear_error(bpy_clean):
    from painted_skin.addon.blender.passes.geometry import ShotError, ShotGeometry

    bpy = bpy_clean
    ob = _sphere(bpy, "growing", 0.0)
    build = ob.modifiers.new("build", "BUILD")  # faces appear frame by frame
    build.frame_start, build.frame_duration = 1, 10
    cam = bpy.data.objects.new("cam", bpy.data.cameras.new("cam"))
    cam.location = (0.0, -8.0, 0.0)
    cam.rotation_euler = (np.pi / 2, 0.0, 0.0)
    bpy.context.scene.collection.objects.link(cam)
    bpy.context.scene.camera = cam
    bpy.context.scene.frame_set(5)
    geo = ShotGeometry(bpy.context.scene, 32, 32)
    geo.frame(5)
    with pytest.raises(ShotError, match="changes its topology"):
        geo.frame(8)
