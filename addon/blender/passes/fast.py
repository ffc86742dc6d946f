"""The fast engine's passes of one frame: our rasteriser over the evaluated meshes
(depth, normals, mask, parts, motion, the canonical passes) and the OpenPose skeleton."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ...core.passes import jit
from ...core.passes.camera import Camera
from ...core.passes.raster import Fragments, motion_vectors_many, rasterize
from .geometry import (
    MAX_LIGHTS,
    FrameGeometry,
    ShotGeometry,
)
from .output import CANONICAL_PASSES


def rasterize_culled(verts_cam: np.ndarray, tris: np.ndarray, cullable: np.ndarray,
                     cam) -> Fragments:
    """:func:`rasterize` without the back faces of closed meshes (see
    ``ShotGeometry.cullable``); triangle ids in the result are the original ones."""
    if jit.enabled():  # the compiled rasteriser culls as it goes (same test, same arrays)
        from ...core.passes import raster_jit

        try:
            return Fragments(*raster_jit.rasterize(verts_cam, tris, cam, cullable))
        except jit.KERNEL_ERRORS as e:
            jit.disable(e)
    v = verts_cam[tris]
    normal = np.cross(v[:, 1] - v[:, 0], v[:, 2] - v[:, 0])
    # Front-facing: the normal points towards the eye (camera at the origin looking
    # down -Z; for an orthographic camera every ray runs along -Z).
    facing = normal[:, 2] if cam.ortho else -np.einsum("ij,ij->i", normal, v[:, 0])
    keep = np.flatnonzero(~cullable | (facing >= 0))
    frag = rasterize(verts_cam, tris[keep], cam)
    frag.tri = np.where(frag.tri >= 0, keep[np.maximum(frag.tri, 0)], -1).astype(np.int32)
    return frag


def fast_frame(geo: ShotGeometry, g: FrameGeometry, prev: FrameGeometry | None,
               nxt: FrameGeometry | None, want: set[str], film: bool = True,
               film_samples: int | None = None) -> dict[str, np.ndarray]:
    """All passes of one frame from the evaluated meshes (no renderer). ``film`` False:
    the :data:`FILM_FILTERED` passes take each pixel's centre sample alone, at about
    half the canonical passes' cost (a moving viewport's preview; the refinement of a
    still view and every render filter them, from ``film_samples``² sub-pixel samples,
    default :data:`FILM_SAMPLES`)."""
    cam = g.camera
    verts_cam = cam.to_camera(g.positions)
    canonical = bool(want & set(CANONICAL_PASSES))
    if jit.enabled() and not canonical:  # every pass in two compiled sweeps, to rounding
        from ...core.passes import raster_jit

        others = None
        if "motion" in want:
            others = [None if o is None else (o.positions, o.camera) for o in (prev, nxt)]
        try:
            return raster_jit.frame_passes(
                verts_cam, geo.tris, geo.cullable, cam,
                corner_normals=g.corner_normals if "normal" in want else None,
                vertex_parts=geo.vertex_parts if "parts" in want else None, others=others)
        except jit.KERNEL_ERRORS as e:
            jit.disable(e)
    frag = rasterize_culled(verts_cam, geo.tris, geo.cullable, cam)
    out: dict[str, np.ndarray] = {"depth": frag.depth, "mask": frag.mask}
    m = frag.mask
    if want & {"normal", "normal_world"}:
        # Only the covered pixels (a fraction of the image) are interpolated and turned.
        b = frag.bary[m].astype(np.float64)
        nw = np.einsum("nk,nkc->nc", b, g.corner_normals[frag.tri[m]])
        n = nw @ cam.view[:3, :3].T
        n /= np.maximum(np.linalg.norm(n, axis=-1, keepdims=True), 1e-12)
        if "normal" in want:
            out["normal"] = _scatter(m, n)
        if "normal_world" in want:
            nw /= np.maximum(np.linalg.norm(nw, axis=-1, keepdims=True), 1e-12)
            out["normal_world"] = _scatter(m, nw)
    if "parts" in want:
        corner = np.argmax(frag.bary, axis=-1)
        vid = geo.tris[np.maximum(frag.tri, 0), corner]
        out["parts"] = np.where(frag.mask, geo.vertex_parts[vid], 0).astype(np.uint8)
    if "motion" in want:
        mv = np.zeros(frag.depth.shape + (4,), np.float32)
        slots = [(k, o) for k, o in ((0, prev), (2, nxt)) if o is not None]
        flows = motion_vectors_many(frag, geo.tris, [(o.camera.to_camera(o.positions), o.camera)
                                                     for _, o in slots])
        for (k, _), flow in zip(slots, flows, strict=True):
            mv[..., k:k + 2] = flow
        out["motion"] = mv
    if canonical:
        n = FILM_SAMPLES if film_samples is None else film_samples
        out.update(_canonical_passes(geo, g, frag, want, n if film else 1))
    return out


def _scatter(mask: np.ndarray, values: np.ndarray) -> np.ndarray:
    """(H, W, C) float32 with ``values`` (N, C) at the covered pixels, 0 elsewhere."""
    img = np.zeros(mask.shape + values.shape[1:], np.float32)
    img[mask] = values
    return img


def shadow_resolution(cam) -> int:
    """Shadow-map side for a frame: two texels per image pixel across, 256..2048."""
    return int(np.clip(2 * max(cam.width, cam.height), 256, 2048))


#: Passes averaged over the pixel as Cycles' film averages a render (the skin model
#: multiplies them into its painting, so they must agree with the render where a pixel
#: holds a silhouette, a rim highlight or a shadow's edge): sub-pixel samples on a
#: FILM_SAMPLES² grid per pixel, weighted by Cycles' pixel filter (Blackman-Harris,
#: ±1.5 px) over the surface they hit (the film's colour where the surface covers part
#: of the window). A KayKit mannequin's albedo against Cycles' Diffuse Color (128²,
#: SSIM) reads 0.993 at 2², 0.996 at 3², 0.9965 at 4², for 0.18, 0.20 and 0.27 s a frame
#: of every training pass. 4² rather than 3² for the light: a rim lit from behind is
#: thinner than a pixel, and 3² catches more or less of it as the body moves a fraction
#: of a pixel (6.8 % of the rim's light off a 16² grid's, 3.6 % at 4², 3.7 % at 5²,
#: 1.9 % at 6²), so the painting flickered there: the embedded model's wave with the key
#: turned read a warp ratio of 1.16 on 3² passes, 1.07 on 4² (``bench skin``: higher PSNR
#: in 32 of 36 cells, the worst +0.19 dB), for 17 % more time a frame of passes at 128²
#: (0.26 → 0.31 s) and 44 % at 512² (1.33 → 1.92 s).
FILM_FILTERED = frozenset({"albedo", "irradiance", "specular"})
FILM_SAMPLES = 4


@dataclass
class _Surface:
    """The surface at each covered pixel of one raster."""

    cam: Camera
    frag: Fragments
    t: np.ndarray  # (N,) triangle ids
    b: np.ndarray  # (N, 3, 1) barycentrics
    p: np.ndarray  # (N, 3) world points
    view: np.ndarray  # (N, 3) unit, surface -> camera
    ng: np.ndarray  # (N, 3) the triangle's unit normal on the side the camera sees
    pix: np.ndarray  # (N,) flat index of each sample's pixel in the raster


def _surface(geo: ShotGeometry, g: FrameGeometry, cam: Camera, frag: Fragments) -> _Surface:
    m = frag.mask
    t = frag.tri[m]
    b = frag.bary[m].astype(np.float64)[:, :, None]
    corners = g.positions[geo.tris[t]]  # (N, 3, 3) world
    p = (b * corners).sum(axis=1)
    if cam.ortho:
        view = np.broadcast_to(cam.world[:3, 2] / np.linalg.norm(cam.world[:3, 2]), p.shape)
    else:
        view = cam.world[:3, 3] - p
        view = view / np.maximum(np.linalg.norm(view, axis=1), 1e-12)[:, None]
    ng = np.cross(corners[:, 1] - corners[:, 0], corners[:, 2] - corners[:, 0])
    ng /= np.maximum(np.linalg.norm(ng, axis=1), 1e-30)[:, None]
    ng *= np.where(np.einsum("ij,ij->i", ng, view) < 0, -1.0, 1.0)[:, None]
    return _Surface(cam, frag, t, b, p, view, ng, np.flatnonzero(m))


def _subpixel_surface(geo: ShotGeometry, g: FrameGeometry, n: int) -> _Surface:
    """The frame rasterised at ``n`` times its resolution: pixel (i, j) of the frame
    holds the samples (n i + a, n j + b), a, b < n, centred on it."""
    cam = g.camera
    fine = replace(cam, width=cam.width * n, height=cam.height * n, fx=cam.fx * n,
                   fy=cam.fy * n, cx=cam.cx * n, cy=cam.cy * n)
    frag = rasterize_culled(fine.to_camera(g.positions), geo.tris, geo.cullable, fine)
    return _surface(geo, g, fine, frag)


def _edge_pixels(mask: np.ndarray, sub: _Surface, island: np.ndarray) -> np.ndarray:
    """(H, W): covered pixels holding or bordering a change of surface among the
    sub-pixel samples: a silhouette, a step in depth (one part in front of another) or a
    change of texture island (``island``, per triangle: a material or a UV seam).
    Elsewhere the centre's footprint-filtered albedo already is what
    the film holds, so only near these do the samples count (the albedo is the costly
    pass)."""
    h, w = mask.shape
    n = sub.cam.width // w
    tri = sub.frag.tri
    covered = tri >= 0
    depth = np.where(covered, sub.frag.depth, 0.0)
    src = np.where(covered, island[np.maximum(tri, 0)], -1)
    flag = np.zeros_like(covered)
    for axis in (0, 1):
        a = [slice(None)] * 2
        b = [slice(None)] * 2
        a[axis], b[axis] = slice(None, -1), slice(1, None)
        a, b = tuple(a), tuple(b)
        both = covered[a] & covered[b]
        da, db = depth[a], depth[b]
        step = both & (np.abs(da - db) > 0.02 * np.minimum(da, db))
        change = (covered[a] != covered[b]) | step | (both & (src[a] != src[b]))
        flag[a] |= change
        flag[b] |= change
    return mask & flag.reshape(h, n, w, n).any(axis=(1, 3))


def _only(s: _Surface, pixels: np.ndarray) -> _Surface:
    """``s`` with only the samples of ``pixels`` (H, W) kept."""
    h, w = pixels.shape
    n = s.cam.width // w
    fine = np.repeat(np.repeat(pixels, n, axis=0), n, axis=1)
    keep = fine[s.frag.mask]
    frag = replace(s.frag, tri=np.where(fine, s.frag.tri, -1).astype(np.int32))
    return _Surface(s.cam, frag, s.t[keep], s.b[keep], s.p[keep], s.view[keep], s.ng[keep],
                    s.pix[keep])


def film_kernel(n: int) -> np.ndarray:
    """(3 n,) weights of the sub-pixel rows (or columns) of a pixel and its two
    neighbours, at offsets (k + 1/2) / n - 3/2 px: Cycles' pixel filter (separable)."""
    from ...core.passes.albedo import FILTER_WINDOW, blackman_harris

    offset = (np.arange(3 * n) + 0.5) / n - 1.5
    return blackman_harris(np.clip(offset / FILTER_WINDOW + 0.5, 0.0, 1.0))


def _film(mask: np.ndarray, values: np.ndarray, sub: _Surface | None,
          sub_values: np.ndarray | None, pixels: np.ndarray | None = None) -> np.ndarray:
    """(H, W, C): ``values`` (the pixel centres') filtered as Cycles' film filters:
    the sub-pixel samples ``sub_values`` of ``sub`` within the filter's window, weighted
    and averaged over those that hit the surface. Only ``pixels`` (default: every
    covered pixel) are filtered, the rest keep their centre's value; ``sub`` must
    then hold every sample within a pixel of them."""
    img = _scatter(mask, values)
    if sub is None:
        return img
    h, w = mask.shape
    n = sub.cam.width // w
    k = film_kernel(n)
    # Premultiplied by coverage, one separable pass per axis with a stride of n: each
    # pixel gathers the 3n rows and columns of samples of itself and its neighbours.
    c = sub_values.shape[1]
    fine = np.zeros((h * n + 2 * n, w * n + 2 * n, c + 1), np.float32)
    rows, cols = sub.pix // sub.cam.width + n, sub.pix % sub.cam.width + n
    fine[rows, cols, :c] = sub_values
    fine[rows, cols, c] = 1.0
    ys = sum(k[t] * fine[t:t + h * n:n] for t in range(3 * n))  # (h, W n + 2n, c + 1)
    acc = sum(k[t] * ys[:, t:t + w * n:n] for t in range(3 * n))  # (h, w, c + 1)
    use = mask & (acc[..., c] > 0)
    if pixels is not None:
        use &= pixels
    img[use] = acc[use][:, :c] / acc[use][:, c:]
    return img


def _dilate(pixels: np.ndarray) -> np.ndarray:
    """``pixels`` grown by one pixel (3x3)."""
    out = pixels.copy()
    out[1:] |= pixels[:-1]
    out[:-1] |= pixels[1:]
    grown = out.copy()
    grown[:, 1:] |= out[:, :-1]
    grown[:, :-1] |= out[:, 1:]
    return grown


def _surface_uvs(geo: ShotGeometry, s: _Surface) -> dict[str | None, np.ndarray]:
    """Every UV map the materials read, at the samples."""
    return {k: (s.b * v[s.t]).sum(axis=1) for k, v in geo.albedo_surface().corner_uvs.items()}


def _surface_colors(geo: ShotGeometry, s: _Surface) -> dict[str, np.ndarray]:
    """Every colour attribute the materials multiply by, at the samples."""
    return {k: (s.b * v[s.t]).sum(axis=1)
            for k, v in geo.albedo_surface().corner_colors.items()}


def surface_gloss(geo: ShotGeometry, s: _Surface
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(N,) the materials' roughness, (N, 3) their F0 and (N, 3) their coat (weight,
    roughness, F0) at the samples (their images read at the point)."""
    from ...core.passes.albedo import albedo

    surf = geo.albedo_surface()
    uvs, src, cols = _surface_uvs(geo, s), surf.tri_source[s.t], _surface_colors(geo, s)
    return (albedo(surf.roughness, src, uvs, attributes=cols)[:, 0],
            albedo(surf.f0, src, uvs, attributes=cols),
            albedo(surf.coat, src, uvs, attributes=cols))


def gloss_images(geo: ShotGeometry, g: FrameGeometry
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(H, W) the materials' roughness, (H, W, 3) F0 and (H, W, 3) coat at each pixel's
    centre (NaN where uncovered), for an engine whose passes come from elsewhere (Cycles
    has no such pass)."""
    cam = g.camera
    frag = rasterize_culled(cam.to_camera(g.positions), geo.tris, geo.cullable, cam)
    rough = np.full(frag.mask.shape, np.nan, np.float32)
    f0 = np.full(frag.mask.shape + (3,), np.nan, np.float32)
    coat = f0.copy()
    rough[frag.mask], f0[frag.mask], coat[frag.mask] = surface_gloss(
        geo, _surface(geo, g, cam, frag))
    return rough, f0, coat


def terminator_images(geo: ShotGeometry, g: FrameGeometry
                      ) -> tuple[np.ndarray, np.ndarray]:
    """(H, W, 3) each pixel's smooth-surface lift and (H, W, 3) its smooth normal on the
    camera's side, at the pixel's centre (0 where uncovered): the shadow terminator for
    an engine whose visibility is traced elsewhere (``shadow.smooth_surface_lift``)."""
    cam = g.camera
    frag = rasterize_culled(cam.to_camera(g.positions), geo.tris, geo.cullable, cam)
    lift = np.zeros(frag.mask.shape + (3,), np.float32)
    smooth = lift.copy()
    lift[frag.mask], smooth[frag.mask] = _terminator(geo, g, _surface(geo, g, cam, frag))
    return lift, smooth


def _albedo(geo: ShotGeometry, g: FrameGeometry, s: _Surface, one_tap: bool = False
            ) -> np.ndarray:
    from ...core.passes.albedo import albedo, uv_gradients

    surf = geo.albedo_surface()
    uvs = _surface_uvs(geo, s)
    cam_corners = s.cam.to_camera(g.positions[geo.tris[s.t]])
    grads = {k: uv_gradients(s.cam.project, cam_corners, s.b[:, :, 0], v[s.t])
             for k, v in surf.corner_uvs.items()}
    return albedo(surf.sources, surf.tri_source[s.t], uvs, grads, one_tap,
                  _surface_colors(geo, s))


def _shading_normals(g: FrameGeometry, s: _Surface) -> np.ndarray:
    """(N, 3) unit smooth normals at the samples (the corner normals interpolated)."""
    ns = np.einsum("nk,nkc->nc", s.b[:, :, 0], g.corner_normals[s.t])
    return ns / np.maximum(np.linalg.norm(ns, axis=1), 1e-12)[:, None]


def _terminator(geo: ShotGeometry, g: FrameGeometry, s: _Surface
                ) -> tuple[np.ndarray, np.ndarray]:
    """The samples' smooth-surface lift and smooth normals on the camera's side: the
    shadow rays' start near the terminator, as Cycles takes it (``shadow`` module)."""
    from ...core.passes.shadow import smooth_surface_lift

    ns = _shading_normals(g, s)
    ns *= np.where(np.einsum("ij,ij->i", ns, s.ng) < 0, -1.0, 1.0)[:, None]
    lift = smooth_surface_lift(g.positions[geo.tris[s.t]], g.corner_normals[s.t],
                               s.b[:, :, 0], s.ng)
    return lift, ns


def _canonical_passes(geo: ShotGeometry, g: FrameGeometry, frag: Fragments,
                      want: set[str], film_samples: int) -> dict[str, np.ndarray]:
    """rest_position, uv, albedo, view_dir, light_visibility, irradiance and specular from
    the frame's fragments (albedo, irradiance and specular averaged over the pixel:
    :data:`FILM_FILTERED`, from ``film_samples``² samples; 1: at the pixel's centre)."""
    from ...core.passes.irradiance import coated_specular, irradiance
    from ...core.passes.shadow import light_visibility
    from ...core.passes.world_light import world_light

    out: dict[str, np.ndarray] = {}
    m = frag.mask
    s1 = _surface(geo, g, g.camera, frag)
    if want & {"rest_position", "uv"}:
        surf = geo.surface_attributes()
        vid = geo.tris[s1.t]
        if "rest_position" in want:
            out["rest_position"] = _scatter(m, (s1.b * surf.rest_positions[vid]).sum(axis=1))
        if "uv" in want:
            uv = (s1.b * surf.corner_uvs[s1.t]).sum(axis=1)
            has = surf.has_uv[s1.t]
            out["uv"] = _scatter(m, np.concatenate([uv * has[:, None], has[:, None]], axis=1))
    sub = (_subpixel_surface(geo, g, film_samples)
           if film_samples > 1 and want & FILM_FILTERED else None)
    if "albedo" in want:
        # The texture is footprint-filtered at each pixel already; only where the
        # window spans more than one surface do the samples (the costly reads) count.
        edges = None if sub is None else _dilate(
            _edge_pixels(m, sub, geo.texture_islands))
        near = None if edges is None else _only(sub, _dilate(edges))
        out["albedo"] = _film(m, _albedo(geo, g, s1), near,
                              None if near is None else _albedo(geo, g, near, one_tap=True),
                              edges)
    if "view_dir" in want:
        out["view_dir"] = _scatter(m, s1.view)
    if "world_light" in want:
        # At the pixel's centre: the sky's occlusion is soft, unlike a lamp's shadow edge.
        # The smooth normal on the side the camera sees (a cape's back shows the sky too).
        lift, ns = _terminator(geo, g, s1)
        out["world_light"] = _scatter(m, world_light(s1.p, s1.ng, ns, g.positions, geo.tris,
                                                     geo.world[0], lift=lift))
    if not want & {"light_visibility", "irradiance", "specular"}:
        return out
    lights = [li.emission() for li in g.lights]
    shading = want & {"irradiance", "specular"}
    rasters = [s1] + ([sub] if sub is not None and shading else [])
    # One call over every sample: each light's shadow map is drawn once.
    vis_all = np.zeros((sum(len(s.p) for s in rasters), MAX_LIGHTS), np.float32)
    lift, ns = (np.concatenate(a) for a in zip(*(_terminator(geo, g, s) for s in rasters),
                                              strict=True))
    vis_all[:, :len(lights)] = light_visibility(
        np.concatenate([s.p for s in rasters]), np.concatenate([s.ng for s in rasters]),
        g.positions, geo.tris, lights, shadow_resolution(g.camera), lift, ns)
    vis = np.split(vis_all, [len(s1.p)])
    if "light_visibility" in want:
        out["light_visibility"] = _scatter(m, vis[0])
    if not shading:
        return out

    def shade(s: _Surface, v: np.ndarray) -> dict[str, np.ndarray]:
        ns = _shading_normals(g, s)
        res = {}
        if "irradiance" in want:
            res["irradiance"] = irradiance(s.p, ns, v, lights)
        if "specular" in want:
            res["specular"] = coated_specular(s.p, ns, s.view, v, lights,
                                              *surface_gloss(geo, s))
        return res

    centre = shade(s1, vis[0])
    fine = shade(sub, vis[1]) if len(rasters) > 1 else None
    for name, values in centre.items():
        out[name] = _film(m, values, None if fine is None else sub,
                          None if fine is None else fine[name])
    return out


def box_of(rest: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return rest.reshape(-1, 3).min(axis=0), rest.reshape(-1, 3).max(axis=0)


def skeleton_pass(g: FrameGeometry, depth: np.ndarray,
                  head_rest: np.ndarray | None) -> tuple[np.ndarray, dict, dict] | None:
    """OpenPose drawing + BODY_25 JSON + COCO-18 JSON of one frame, or None
    without a humanoid map."""
    if not g.joints:
        return None
    from ...core import openpose

    pose = {c: openpose.JointPose(head=h, tail=t, matrix=m) for c, (h, t, m) in g.joints.items()}
    points = openpose.joints_3d(pose, head_rest=head_rest)
    kp = openpose.project_skeleton(points, g.camera, depth)
    hands = (kp["hand_left"], kp["hand_right"])
    cam = g.camera
    image = openpose.draw_openpose(kp["body25"], hands, cam.width, cam.height, face=kp["face"])
    data = openpose.openpose_json(kp["body25"], hands, kp["face"], cam.width, cam.height)
    coco = openpose.openpose_json(kp["body25"], hands, kp["face"], cam.width, cam.height,
                                  coco18=True)
    return image, data, coco
