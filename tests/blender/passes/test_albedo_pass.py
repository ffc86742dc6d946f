"""The albedo pass is the colour the materials give the surface, as Cycles' Diffuse
Color pass holds it: the skin model multiplies its light by this pass, so it must be the
character's own colours (image textures at their UV map, constants, metallic's share
taken out), in both engines, and say so when a material is more than it reads."""

from __future__ import annotations

import numpy as np
from test_canonical_passes import _camera, _plane, run_engines
from test_irradiance import cycles_pass


def _principled(bpy, name: str):
    mat = bpy.data.materials.new(name)  # Blender 5: a Principled BSDF to the output
    return mat, mat.node_tree.nodes["Principled BSDF"]


def _checker_image(bpy) -> None:
    img = bpy.data.images.new("checker", 4, 4)  # a byte image: sRGB-encoded values
    px = np.zeros((4, 4, 4), np.float32)
    px[..., 3] = 1.0
    colours = np.array([[0.9, 0.2, 0.1], [0.1, 0.5, 0.9]], np.float32)
    for y in range(4):
        for x in range(4):
            px[y, x, :3] = colours[(x + y) % 2]
    img.pixels.foreach_set(px.ravel())
    return img


def _scene(bpy):
    """Three planes: a checker image read at a second UV map, a half-metallic constant,
    and a procedural texture (the fast engine's viewport-colour fallback)."""
    textured = _plane(bpy, "textured", 1.8)
    me = textured.data
    second = me.uv_layers.new(name="Second")
    uv = np.empty(len(me.loops) * 2, np.float32)
    me.uv_layers["UVMap"].data.foreach_get("uv", uv)
    second.data.foreach_set("uv", (uv * 0.5 + 0.25).astype(np.float32))
    me.uv_layers["UVMap"].active_render = True
    mat, bsdf = _principled(bpy, "image")
    nodes, links = mat.node_tree.nodes, mat.node_tree.links
    tex = nodes.new("ShaderNodeTexImage")
    tex.image = _checker_image(bpy)
    tex.interpolation = "Closest"
    uvmap = nodes.new("ShaderNodeUVMap")
    uvmap.uv_map = "Second"
    links.new(uvmap.outputs["UV"], tex.inputs["Vector"])
    links.new(tex.outputs["Color"], bsdf.inputs["Base Color"])
    textured.data.materials.append(mat)

    plain = _plane(bpy, "plain", 1.8)
    plain.location.x = 2.0
    mat, bsdf = _principled(bpy, "half_metal")
    bsdf.inputs["Base Color"].default_value = (0.2, 0.6, 0.4, 1.0)
    bsdf.inputs["Metallic"].default_value = 0.5
    plain.data.materials.append(mat)

    noisy = _plane(bpy, "noisy", 1.8)
    noisy.location.x = -2.0
    mat, bsdf = _principled(bpy, "procedural")
    noise = mat.node_tree.nodes.new("ShaderNodeTexNoise")
    mat.node_tree.links.new(noise.outputs["Color"], bsdf.inputs["Base Color"])
    mat.diffuse_color = (0.3, 0.2, 0.7, 1.0)
    noisy.data.materials.append(mat)
    _camera(bpy, (0.0, -0.01, 6.0), target=(0.0, 0.0, 0.0), lens=25.0)


def test_albedo_is_cycles_diffuse_color_and_names_what_it_approximates(bpy_clean):
    bpy = bpy_clean
    from painted_skin.addon.blender.passes.geometry import ShotGeometry

    _scene(bpy)
    scene = bpy.context.scene
    f = scene.frame_current
    out = run_engines(scene, [f], (96, 48), passes=("mask", "albedo"))
    fast, cyc = out["fast"][f][1], out["cycles"][f][1]
    m = (fast["mask"] > 0) & (cyc["mask"] > 0.5)
    assert m.sum() > 1000
    x = np.broadcast_to(np.arange(96)[None, :], m.shape)
    textured, plain = m & (np.abs(x - 48) < 12), m & (x > 72)
    for region in (textured, plain):
        a, b = fast["albedo"][region], cyc["albedo"][region]
        close = (np.abs(a - b) <= np.maximum(0.1 * b, 0.02)).all(axis=1)
        assert close.mean() > 0.9, (a.mean(0), b.mean(0))
    # the half-metallic constant: half its base colour
    np.testing.assert_allclose(np.median(fast["albedo"][plain], axis=0), [0.1, 0.3, 0.2],
                               atol=1e-3)
    # the checker's two linear colours, read at the second UV map (its middle quarter)
    reds = fast["albedo"][textured][:, 0] > 0.3
    assert 0.3 < reds.mean() < 0.7
    from painted_skin.addon.core.passes.albedo import srgb_to_linear

    stored = np.round(np.array([0.9, 0.2, 0.1]) * 255) / 255  # what a byte image holds
    np.testing.assert_allclose(np.median(fast["albedo"][textured][reds], axis=0),
                               srgb_to_linear(stored), atol=1e-3)
    # the procedural texture: the viewport colour, and named
    noisy = m & (x < 24)
    np.testing.assert_allclose(np.median(fast["albedo"][noisy], axis=0), [0.3, 0.2, 0.7],
                               atol=1e-3)
    assert ShotGeometry(scene, 96, 48).albedo_surface().approximated == ["procedural"]


def test_make_passes_warns_of_an_approximated_material(bpy_clean, tmp_path):
    bpy = bpy_clean
    from painted_skin.addon.blender.passes.image_io import read_image
    from painted_skin.addon.blender.passes.render import PassOptions, make_passes

    _scene(bpy)
    scene = bpy.context.scene
    f = scene.frame_current
    opts = PassOptions(frames=range(f, f + 1), width=64, height=32, engine="fast",
                       passes=("mask", "albedo"))
    summary = make_passes(scene, opts, tmp_path)
    assert any("procedural" in w and "albedo" in w for w in summary["warnings"])
    img = read_image(next((tmp_path / "albedo").glob("*.exr")))
    assert img.shape[:2] == (32, 64) and img[..., :3].max() > 0.5


def test_a_texture_finer_than_the_pixels_reads_its_average_as_a_render_does(bpy_clean):
    """A far camera sees a 256² checker of single texels over ~13 texels a pixel: each
    pixel holds their average (a many-sample render's), not the one texel at its centre,
    which would shimmer as the character moves."""
    bpy = bpy_clean
    from test_canonical_passes import _camera, _plane

    ob = _plane(bpy, "fine", 1.8)
    mat, bsdf = _principled(bpy, "fine")
    img = bpy.data.images.new("fine", 256, 256, float_buffer=True)
    y, x = np.mgrid[0:256, 0:256]
    px = np.ones((256, 256, 4), np.float32)
    px[..., :3] = ((x + y) % 2)[..., None] * np.array([0.8, 0.4, 0.1], np.float32)
    img.pixels.foreach_set(px.ravel())
    tex = mat.node_tree.nodes.new("ShaderNodeTexImage")
    tex.image = img
    mat.node_tree.links.new(tex.outputs["Color"], bsdf.inputs["Base Color"])
    ob.data.materials.append(mat)
    _camera(bpy, (0.0, -0.01, 6.0), lens=25.0)
    scene = bpy.context.scene
    f = scene.frame_current
    fast = run_engines(scene, [f], (96, 48), passes=("mask", "albedo"),
                       engines=("fast",))["fast"][f][1]
    import scipy.ndimage as nd

    inner = nd.binary_erosion(fast["mask"] > 0, iterations=2)
    assert inner.sum() > 150
    a = fast["albedo"][inner]
    np.testing.assert_allclose(a.mean(0), [0.4, 0.2, 0.05], atol=0.02)
    assert a[:, 0].std() < 0.03, a[:, 0].std()


def test_a_uv_seam_between_flat_colours_is_blended_as_the_film_blends_it(bpy_clean, tmp_path):
    """Two faces of one mesh meet at an edge where their UVs jump from a red texel to a
    blue one (a palette texture: each face group its own colour). Cycles' film blends
    the two over its 1.5 px filter; the pass must too, not step from one to the other
    at the pixel holding the seam."""
    bpy = bpy_clean
    me = bpy.data.meshes.new("seam")
    me.from_pydata([(-1, -0.5, 0), (0, -0.5, 0), (1, -0.5, 0), (-1, 0.5, 0), (0, 0.5, 0),
                    (1, 0.5, 0)], [], [(0, 1, 4, 3), (1, 2, 5, 4)])
    uv = me.uv_layers.new(name="UVMap")
    # Left face inside the red texel (u < 0.5), right face inside the blue one.
    uvs = {0: (0.1, 0.2), 1: (0.4, 0.2), 4: (0.4, 0.8), 3: (0.1, 0.8)}
    for poly, shift in zip(me.polygons, (0.0, 0.5), strict=True):
        for li in poly.loop_indices:
            v = me.loops[li].vertex_index
            u, w = uvs[v] if v in uvs else uvs[v - 1]
            uv.data[li].uv = (u + shift if v in uvs else 0.4 + shift, w)
    ob = bpy.data.objects.new("seam", me)
    bpy.context.scene.collection.objects.link(ob)
    mat, bsdf = _principled(bpy, "palette")
    img = bpy.data.images.new("palette", 2, 1, float_buffer=True)
    img.pixels.foreach_set([0.8, 0.1, 0.05, 1.0, 0.05, 0.2, 0.9, 1.0])
    tex = mat.node_tree.nodes.new("ShaderNodeTexImage")
    tex.image, tex.interpolation = img, "Closest"
    mat.node_tree.links.new(tex.outputs["Color"], bsdf.inputs["Base Color"])
    me.materials.append(mat)
    _camera(bpy, (0.037, 0.0, 3.0), target=(0.037, 0.0, 0.0), lens=50.0)
    scene = bpy.context.scene
    f = scene.frame_current
    size = (64, 32)
    fast = run_engines(scene, [f], size, passes=("mask", "albedo"),
                       engines=("fast",))["fast"][f][1]
    # 1024 samples: a pixel astride two colours is a coin flip per sample (64 would leave
    # 0.03 of noise there).
    ref = cycles_pass(bpy, tmp_path, size, "Diffuse Color", samples=1024)
    import scipy.ndimage as nd

    inner = nd.binary_erosion(fast["mask"] > 0, iterations=2)
    assert inner.sum() > 300
    ours = fast["albedo"][..., :3]
    # Cycles' Principled diffuse colour is a shade under the base colour (its specular
    # layer's share); the comparison is of the shape across the seam.
    gain = np.median(ref[inner] / np.maximum(ours[inner], 1e-3))
    err = np.abs(gain * ours - ref).max(axis=-1)
    seam = inner & (np.abs(ours[..., 0] - ours[..., 0].max()) > 0.05) \
        & (np.abs(ours[..., 0] - ours[..., 0][inner].min()) > 0.02)
    assert seam.any(), "no pixel mixes the two colours: the seam is a step"
    # Samples a third of a pixel apart place the seam to within 1/6 px: here 0.06 off
    # Cycles at the seam's pixels, where the step was 0.12 off.
    assert err[inner].max() < 0.08, (err[inner].max(), ours[16, 28:34, 0], ref[16, 28:34, 0])


def _by_id(sockets, identifier: str):
    """A socket by identifier (the Mix node's inputs share their names)."""
    return next(s for s in sockets if s.identifier == identifier)


def _gltf_shaped(bpy, name: str, vertex_rgba=(1.0, 1.0, 1.0, 1.0)):
    """A plane with the tree glTF's importer builds: the base colour image times its
    factor times the mesh's colour attribute (Mix, Multiply), and a metallic-roughness
    image of another size split into channels (Separate Color): Blue the metallic."""
    ob = _plane(bpy, name, 1.8)
    attr = ob.data.color_attributes.new("Col", "BYTE_COLOR", "CORNER")
    n = len(ob.data.loops)
    rgba = np.tile(np.asarray(vertex_rgba, np.float32), (n, 1))
    if vertex_rgba is None:  # a colour per corner
        rgba = np.random.default_rng(0).uniform(0.2, 1.0, (n, 4)).astype(np.float32)
    attr.data.foreach_set("color", rgba.ravel())
    mat, bsdf = _principled(bpy, name)
    nodes, links = mat.node_tree.nodes, mat.node_tree.links
    base = nodes.new("ShaderNodeTexImage")
    base.image = _checker_image(bpy)
    base.interpolation = "Closest"
    factor = nodes.new("ShaderNodeMix")
    factor.data_type, factor.blend_type = "RGBA", "MULTIPLY"
    _by_id(factor.inputs, "Factor_Float").default_value = 1.0
    _by_id(factor.inputs, "B_Color").default_value = (0.5, 1.0, 0.8, 1.0)
    links.new(base.outputs["Color"], _by_id(factor.inputs, "A_Color"))
    col = nodes.new("ShaderNodeVertexColor")
    col.layer_name = "Col"
    times_col = nodes.new("ShaderNodeMix")
    times_col.data_type, times_col.blend_type = "RGBA", "MULTIPLY"
    _by_id(times_col.inputs, "Factor_Float").default_value = 1.0
    links.new(_by_id(factor.outputs, "Result_Color"), _by_id(times_col.inputs, "A_Color"))
    links.new(col.outputs["Color"], _by_id(times_col.inputs, "B_Color"))
    links.new(_by_id(times_col.outputs, "Result_Color"), bsdf.inputs["Base Color"])
    mr = bpy.data.images.new("metal_rough", 2, 2)
    mr.colorspace_settings.name = "Non-Color"
    mr.pixels.foreach_set(np.tile([0.0, 0.7, 0.5, 1.0], 4).astype(np.float32))
    mr_tex = nodes.new("ShaderNodeTexImage")
    mr_tex.image = mr
    split = nodes.new("ShaderNodeSeparateColor")
    links.new(mr_tex.outputs["Color"], split.inputs["Color"])
    links.new(split.outputs["Blue"], bsdf.inputs["Metallic"])
    ob.data.materials.append(mat)
    return ob


def test_the_tree_gltf_imports_is_followed_to_cycles_diffuse_color(bpy_clean):
    """A glTF character's base colour is an image times its factor times the vertex
    colours, its metallic a channel of another image (the zombie of ../shared/data is
    one): the pass follows that arithmetic, as Cycles' Diffuse Color pass holds it, with
    vertex colours that are one colour or a colour per corner (interpolated across each
    face as Cycles does)."""
    bpy = bpy_clean
    from painted_skin.addon.blender.passes.geometry import ShotGeometry
    from painted_skin.addon.core.passes.albedo import srgb_to_linear

    _gltf_shaped(bpy, "gltf", (0.5, 0.5, 1.0, 1.0))
    varying = _gltf_shaped(bpy, "painted", None)
    varying.location.x = 2.0
    _camera(bpy, (1.0, -0.01, 4.0), target=(1.0, 0.0, 0.0), lens=25.0)
    scene = bpy.context.scene
    f = scene.frame_current
    out = run_engines(scene, [f], (96, 48), passes=("mask", "albedo"))
    fast, cyc = out["fast"][f][1], out["cycles"][f][1]
    m = (fast["mask"] > 0) & (cyc["mask"] > 0.5)
    x = np.broadcast_to(np.arange(96)[None, :], m.shape)
    for centre in (31, 65):  # the planes 1 m left and right of the camera
        plane = m & (np.abs(x - centre) < 12)
        assert plane.sum() > 500
        a, b = fast["albedo"][plane], cyc["albedo"][plane]
        close = (np.abs(a - b) <= np.maximum(0.1 * b, 0.02)).all(axis=1)
        assert close.mean() > 0.9, (centre, close.mean(), a.mean(0), b.mean(0))
    a = fast["albedo"][m & (np.abs(x - 31) < 12)]
    # the checker's red: stored byte, linear, times the factor, the colours, 1 - metallic
    stored = np.round(np.array([0.9, 0.2, 0.1]) * 255) / 255
    want = srgb_to_linear(stored) * [0.5, 1.0, 0.8] * [0.5, 0.5, 1.0] * 0.5
    reds = a[:, 0] > 0.05
    np.testing.assert_allclose(np.median(a[reds], axis=0), want, atol=2e-3)
    assert ShotGeometry(scene, 96, 48).albedo_surface().approximated == []
