"""The fast engine's passes of one frame: our rasteriser over the evaluated meshes
(depth, normals, mask, parts, motion, the canonical passes) and the OpenPose skeleton."""

from __future__ import annotations

import numpy as np

from ...core.passes import jit
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
               nxt: FrameGeometry | None, want: set[str]) -> dict[str, np.ndarray]:
    """All passes of one frame from the evaluated meshes (no renderer)."""
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
        out.update(_canonical_passes(geo, g, frag, want))
    return out


def _scatter(mask: np.ndarray, values: np.ndarray) -> np.ndarray:
    """(H, W, C) float32 with ``values`` (N, C) at the covered pixels, 0 elsewhere."""
    img = np.zeros(mask.shape + values.shape[1:], np.float32)
    img[mask] = values
    return img


def shadow_resolution(cam) -> int:
    """Shadow-map side for a frame: two texels per image pixel across, 256..2048."""
    return int(np.clip(2 * max(cam.width, cam.height), 256, 2048))


def _canonical_passes(geo: ShotGeometry, g: FrameGeometry, frag: Fragments,
                      want: set[str]) -> dict[str, np.ndarray]:
    """rest_position, uv, albedo, view_dir, light_visibility, irradiance and specular from
    the frame's fragments."""
    from ...core.passes.irradiance import irradiance, specular
    from ...core.passes.shadow import light_visibility

    out: dict[str, np.ndarray] = {}
    cam, m = g.camera, frag.mask
    t = frag.tri[m]
    b = frag.bary[m].astype(np.float64)[:, :, None]
    vid = geo.tris[t]
    if want & {"rest_position", "uv"}:
        surf = geo.surface_attributes()
        if "rest_position" in want:
            out["rest_position"] = _scatter(m, (b * surf.rest_positions[vid]).sum(axis=1))
        if "uv" in want:
            uv = (b * surf.corner_uvs[t]).sum(axis=1)
            has = surf.has_uv[t]
            out["uv"] = _scatter(m, np.concatenate([uv * has[:, None], has[:, None]], axis=1))
    if "albedo" in want:
        from ...core.passes.albedo import albedo, uv_gradients

        surf = geo.albedo_surface()
        uvs = {k: (b * v[t]).sum(axis=1) for k, v in surf.corner_uvs.items()}
        cam_corners = cam.to_camera(g.positions[vid])
        grads = {k: uv_gradients(cam.project, cam_corners, b[:, :, 0], v[t])
                 for k, v in surf.corner_uvs.items()}
        out["albedo"] = _scatter(m, albedo(surf.sources, surf.tri_source[t], uvs, grads))
    if not want & {"view_dir", "light_visibility", "irradiance", "specular"}:
        return out
    corners = g.positions[vid]  # (N, 3, 3) world
    p = (b * corners).sum(axis=1)
    eye = cam.world[:3, 3]
    if cam.ortho:
        view = np.broadcast_to(cam.world[:3, 2] / np.linalg.norm(cam.world[:3, 2]), p.shape)
    else:
        view = eye - p
        view = view / np.maximum(np.linalg.norm(view, axis=1), 1e-12)[:, None]
    if "view_dir" in want:
        out["view_dir"] = _scatter(m, view)
    if want & {"light_visibility", "irradiance", "specular"}:
        # The triangle's own normal, turned to the side the camera sees.
        ng = np.cross(corners[:, 1] - corners[:, 0], corners[:, 2] - corners[:, 0])
        ng /= np.maximum(np.linalg.norm(ng, axis=1), 1e-30)[:, None]
        ng *= np.where(np.einsum("ij,ij->i", ng, view) < 0, -1.0, 1.0)[:, None]
        lights = [li.emission() for li in g.lights]
        vis = np.zeros((len(p), MAX_LIGHTS), np.float32)
        vis[:, :len(lights)] = light_visibility(p, ng, g.positions, geo.tris, lights,
                                                shadow_resolution(cam))
        if "light_visibility" in want:
            out["light_visibility"] = _scatter(m, vis)
        if want & {"irradiance", "specular"}:
            ns = np.einsum("nk,nkc->nc", b[:, :, 0], g.corner_normals[t])
            ns /= np.maximum(np.linalg.norm(ns, axis=1), 1e-12)[:, None]
            if "irradiance" in want:
                out["irradiance"] = _scatter(m, irradiance(p, ns, vis, lights))
            if "specular" in want:
                out["specular"] = _scatter(m, specular(p, ns, view, vis, lights))
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
