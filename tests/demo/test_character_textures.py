"""The demo character's UV atlas and packed procedural textures (real bpy, Cycles)."""

from __future__ import annotations

import numpy as np
import pytest
from painted_skin.demo import textures

# --------------------------------------------------------------------------- helpers


def _meshes(arm) -> dict[str, object]:
    return {c["painted_skin_part"]: c for c in arm.children if c.type == "MESH"}


def _uvs(me) -> np.ndarray:
    uv = np.empty(len(me.loops) * 2, dtype=np.float32)
    layer = next(layer for layer in me.uv_layers if layer.active_render)
    layer.data.foreach_get("uv", uv)
    return uv.reshape(-1, 2)


def _image_node(mat):
    return next(n for n in mat.node_tree.nodes if n.type == "TEX_IMAGE")


def _pixels(img) -> np.ndarray:
    px = np.empty(len(img.pixels), dtype=np.float32)
    img.pixels.foreach_get(px)
    return px.reshape(img.size[1], img.size[0], 4)


def _snapshot(arm) -> dict:
    out = {"uv": {}, "faces": {}, "mat_index": {}, "pixels": {}, "links": {}, "uv_node": {}}
    for part, obj in _meshes(arm).items():
        me = obj.data
        out["uv"][part] = _uvs(me)
        co = np.empty(len(me.vertices) * 3, dtype=np.float32)
        me.vertices.foreach_get("co", co)
        lv = np.empty(len(me.loops), dtype=np.int64)
        me.loops.foreach_get("vertex_index", lv)
        out.setdefault("loop_co", {})[part] = co.reshape(-1, 3)[lv].astype(np.float64)
        total = np.empty(len(me.polygons), dtype=np.int64)
        me.polygons.foreach_get("loop_total", total)
        out["faces"][part] = total
        mi = np.empty(len(me.polygons), dtype=np.int64)
        me.polygons.foreach_get("material_index", mi)
        out["mat_index"][part] = [me.materials[i]["painted_skin_part"] for i in mi]
        out["active_render"] = out.get("active_render", {})
        out["active_render"][part] = next(la.name for la in me.uv_layers if la.active_render)
        for mat in me.materials:
            region = mat["painted_skin_part"]
            node = _image_node(mat)
            cache = out.setdefault("images", {})
            if node.image.name not in cache:
                cache[node.image.name] = _pixels(node.image)
            out["pixels"][region] = cache[node.image.name]
            links = {(lk.from_node.type, lk.from_socket.name, lk.to_socket.name)
                     for lk in mat.node_tree.links}
            out["links"][region] = links
            uvn = next(n for n in mat.node_tree.nodes if n.type == "UVMAP")
            out["uv_node"][region] = uvn.uv_map
    return out


@pytest.fixture(scope="module")
def built():
    """Seed 0 twice and seed 1, read into plain arrays."""
    import bpy
    from painted_skin.demo import character

    bpy.ops.wm.read_factory_settings(use_empty=True)
    a = _snapshot(character.build_demo_character())
    b = _snapshot(character.build_demo_character())
    c = _snapshot(character.build_demo_character(seed=1))
    return a, b, c


def _triangles(uv: np.ndarray, total: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Fan-triangulate faces (loops in order): (T, 3, 2) UV triangles and their faces."""
    start = np.cumsum(total) - total
    tris, faces = [], []
    for k in range(3, int(total.max()) + 1):
        f = np.nonzero(total == k)[0]
        s = start[f]
        for j in range(1, k - 1):
            tris.append(np.stack([uv[s], uv[s + j], uv[s + j + 1]], axis=1))
            faces.append(f)
    return np.concatenate(tris), np.concatenate(faces)


def _coverage(tris: np.ndarray, px: int) -> np.ndarray:
    """How many triangles cover each texel centre of a px x px image."""
    t = tris * px
    lo = np.floor(t.min(axis=1) - 0.5).astype(np.int64) + 1
    hi = np.floor(t.max(axis=1) - 0.5).astype(np.int64)
    nx, ny = np.maximum(hi[:, 0] - lo[:, 0] + 1, 0), np.maximum(hi[:, 1] - lo[:, 1] + 1, 0)
    n = nx * ny
    tri = np.repeat(np.arange(len(t)), n)
    k = np.arange(n.sum()) - np.repeat(np.cumsum(n) - n, n)
    x = lo[tri, 0] + k % nx[tri]
    y = lo[tri, 1] + k // nx[tri]
    p = np.stack([x + 0.5, y + 0.5], axis=1)
    a, b, c = t[tri, 0], t[tri, 1], t[tri, 2]

    def cross(o, u, v):
        return (u[:, 0] - o[:, 0]) * (v[:, 1] - o[:, 1]) - (u[:, 1] - o[:, 1]) * (v[:, 0] - o[:, 0])

    d1, d2, d3 = cross(a, b, p), cross(b, c, p), cross(c, a, p)
    inside = ((d1 >= 0) & (d2 >= 0) & (d3 >= 0)) | ((d1 <= 0) & (d2 <= 0) & (d3 <= 0))
    inside &= (x >= 0) & (x < px) & (y >= 0) & (y < px)
    count = np.zeros((px, px), dtype=np.int64)
    np.add.at(count, (y[inside], x[inside]), 1)
    return count


# --------------------------------------------------------------------------- UVs


def test_every_mesh_has_the_render_uv_map_inside_the_unit_square(built):
    from painted_skin.demo.character import UV_MAP

    a, _, _ = built
    assert set(a["uv"]) == {"body", "cape"}
    for part, uv in a["uv"].items():
        assert a["active_render"][part] == UV_MAP
        assert np.isfinite(uv).all()
        assert uv.min() >= 0.0 and uv.max() <= 1.0, part
    # Every textured material reads its image through that same map.
    assert set(a["uv_node"].values()) == {UV_MAP}


def test_one_atlas_without_overlaps_at_a_sensible_texel_density(built):
    """Body and cape share one image in which a texel is covered by two faces only
    rarely (a few fold-overs at poles): a UV names one point of the character. Every
    material gets 1-3.5 mm texels (a 512² full-body render has ~3.7 mm per pixel)."""
    from painted_skin.demo.character import ATLAS_PX

    a, _, _ = built
    first = next(iter(a["pixels"].values()))
    assert all(px is first for px in a["pixels"].values())  # one shared image
    all_tris, area_uv, area_3d = [], {}, {}
    for part, uv in a["uv"].items():
        t, owner = _triangles(uv, a["faces"][part])
        p, _ = _triangles(a["loop_co"][part], a["faces"][part])
        regions = np.array(a["mat_index"][part])[owner]
        e1, e2 = t[:, 1] - t[:, 0], t[:, 2] - t[:, 0]
        uv_area = np.abs(e1[:, 0] * e2[:, 1] - e1[:, 1] * e2[:, 0]) / 2 * ATLAS_PX**2
        m_area = np.linalg.norm(np.cross(p[:, 1] - p[:, 0], p[:, 2] - p[:, 0]), axis=1) / 2
        all_tris.append(t)
        for region in np.unique(regions):
            r, sel = str(region), regions == region
            area_uv[r] = area_uv.get(r, 0.0) + float(uv_area[sel].sum())
            area_3d[r] = area_3d.get(r, 0.0) + float(m_area[sel].sum())
    cover = _coverage(np.concatenate(all_tris), ATLAS_PX)
    assert (cover > 1).sum() / (cover > 0).sum() < 0.005
    assert set(area_uv) == {"skin", "shirt", "trousers", "shoes", "hair", "cape"}
    for region in area_uv:
        mm_per_texel = 1000 / np.sqrt(area_uv[region] / area_3d[region])
        assert 1.0 < mm_per_texel < 3.5, (region, mm_per_texel)


# --------------------------------------------------------------------------- images


def test_materials_read_colour_and_roughness_from_their_image(built):
    a, _, _ = built
    for region, links in a["links"].items():
        assert ("TEX_IMAGE", "Color", "Base Color") in links, region
        assert ("TEX_IMAGE", "Alpha", "Roughness") in links, region
        assert ("UVMAP", "UV", "Vector") in links, region


def test_roughness_follows_the_material(built):
    """Skin ~0.5, cloth ~0.8, boot leather ~0.35: sampled where each material's faces are."""
    a, _, _ = built
    uv, total = a["uv"]["body"], a["faces"]["body"]
    start = np.cumsum(total) - total
    centre = np.add.reduceat(uv, start) / total[:, None]
    regions = np.array(a["mat_index"]["body"])
    median = {}
    for region in ("skin", "shirt", "trousers", "shoes"):
        img = a["pixels"][region]
        c = centre[regions == region]
        h, w = img.shape[:2]
        rough = img[(c[:, 1] * h).astype(int).clip(0, h - 1), (c[:, 0] * w).astype(int)
                    .clip(0, w - 1), 3]
        median[region] = float(np.median(rough))
        assert rough.std() > 0.01, region  # a roughness map, not a constant
    assert 0.4 < median["skin"] < 0.6
    assert 0.7 < median["shirt"] < 0.9 and 0.7 < median["trousers"] < 0.95
    assert 0.25 < median["shoes"] < 0.45


def test_textures_are_deterministic_from_the_seed(built):
    a, b, c = built
    assert set(a["pixels"]) == {"skin", "shirt", "trousers", "shoes", "hair", "cape"}
    for region in a["pixels"]:
        np.testing.assert_array_equal(a["pixels"][region], b["pixels"][region])
        assert np.abs(a["pixels"][region] - c["pixels"][region]).mean() > 1e-3, region
    for part in a["uv"]:
        np.testing.assert_array_equal(a["uv"][part], b["uv"][part])


def test_images_are_packed_and_survive_a_reload(bpy_clean, tmp_path):
    from painted_skin.addon.blender.blend_files import save_blend_atomic
    from painted_skin.demo import character

    bpy = bpy_clean
    arm = character.build_demo_character()
    before = {m["painted_skin_part"]: _pixels(_image_node(m).image)
              for o in _meshes(arm).values() for m in o.data.materials}
    path = tmp_path / "textured.blend"
    save_blend_atomic(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["textured.blend"]  # self-contained
    bpy.ops.wm.open_mainfile(filepath=str(path))
    mats = {m["painted_skin_part"]: m for m in bpy.data.materials if "painted_skin_part" in m}
    assert set(mats) == set(before)
    for region, mat in mats.items():
        img = _image_node(mat).image
        assert img.packed_file is not None, region
        np.testing.assert_allclose(_pixels(img), before[region], atol=1 / 255 + 1e-6)


def test_flat_build_keeps_plain_materials(bpy_clean):
    from painted_skin.demo import character

    arm = character.build_demo_character(textured=False)
    for obj in _meshes(arm).values():
        assert len(obj.data.uv_layers) == 0
        for mat in obj.data.materials:
            assert not any(n.type == "TEX_IMAGE" for n in mat.node_tree.nodes)
    assert not bpy_clean.data.images


# --------------------------------------------------------------------------- render


def _render_chest(textured: bool, tmp_path) -> np.ndarray:
    """A 96² Cycles render of the chest, as float RGB."""
    import bpy
    from mathutils import Vector
    from painted_skin.demo import character

    bpy.ops.wm.read_factory_settings(use_empty=True)
    arm = character.build_demo_character(textured=textured)
    character.setup_demo_scene(arm)
    scene = bpy.context.scene
    cam = scene.camera
    cam.constraints.clear()
    cam.location = (0.0, -0.85, 1.25)
    cam.rotation_euler = (Vector((0, 0, 1.25)) - cam.location).to_track_quat("-Z", "Y").to_euler()
    cam.data.lens = 50.0
    scene.render.engine = "CYCLES"
    scene.cycles.device = "CPU"
    scene.cycles.samples = 32
    scene.cycles.use_denoising = False
    scene.cycles.use_adaptive_sampling = False
    scene.render.resolution_x = scene.render.resolution_y = 96
    scene.render.image_settings.file_format = "PNG"
    scene.render.filepath = str(tmp_path / f"chest_{int(textured)}.png")
    bpy.ops.render.render(write_still=True)
    img = bpy.data.images.load(scene.render.filepath)
    return _pixels(img)[..., :3].astype(np.float64)


@pytest.mark.slow
def test_render_shows_the_texture(tmp_path):
    """High-frequency detail on the shirt is far above the flat build's sampling noise."""

    def detail(rgb: np.ndarray) -> float:
        g = rgb.mean(axis=2)
        blur = sum(np.roll(np.roll(g, dy, 0), dx, 1) for dy in (-1, 0, 1) for dx in (-1, 0, 1))
        hf = (g - blur / 9)[30:66, 30:66]  # the chest, framed in the middle
        return float(hf.var())

    flat, tex = _render_chest(False, tmp_path), _render_chest(True, tmp_path)
    assert tex[30:66, 30:66].mean() > 0.05  # the chest is in frame and lit
    assert detail(tex) > 20 * detail(flat)


# --------------------------------------------------------------------------- packing (pure)


def test_pack_charts_keeps_boxes_apart_and_inside():
    rng = np.random.default_rng(3)
    sizes = rng.uniform(0.02, 0.4, (25, 2))
    pk = textures.pack_charts(sizes, 512, 4)
    lo, hi = pk.origin - 4, pk.origin + pk.size + 4
    assert (lo >= 0).all() and (hi <= 512).all()
    for i in range(len(sizes)):
        for j in range(i):
            apart = (hi[i] <= lo[j]).any() or (hi[j] <= lo[i]).any()
            assert apart, (i, j)
    np.testing.assert_array_equal(pk.size, np.ceil(sizes * pk.scale))
    assert pk.size.prod(axis=1).sum() > 0.4 * 512 * 512  # it uses the image
    with pytest.raises(ValueError, match="positive size"):
        textures.pack_charts(np.zeros((1, 2)), 512)


def test_painters_are_deterministic_and_follow_the_seed():
    base = {"skin": (0.8, 0.58, 0.46), "shirt": (0.13, 0.33, 0.62), "trousers": (0.16, 0.16, 0.2),
            "shoes": (0.36, 0.2, 0.09), "hair": (0.09, 0.05, 0.03), "cape": (0.62, 0.07, 0.09)}
    theta, along = np.meshgrid(np.linspace(-np.pi, np.pi, 64), np.linspace(0, 0.4, 32))
    tx = textures.Texels("torso", theta.astype(np.float32), along.astype(np.float32), 0.12, 0.4)

    def paint(seed: int) -> np.ndarray:
        return textures.paint("shirt", tx, textures.Palette.from_seed(base, seed),
                              textures.Noise(seed), seed)

    a, b, c = paint(0), paint(0), paint(7)
    np.testing.assert_array_equal(a, b)
    assert np.abs(a - c).mean() > 1e-3
    assert a.dtype == np.float32 and a.shape == (32, 64, 4)
    assert 0.0 <= a.min() and a.max() <= 1.0
