"""Control passes for every frame of a shot: the function behind the CLI,
the panel and the Python API.

    from painted_skin.addon.blender.passes import PassOptions, make_passes
    make_passes(bpy.context.scene, PassOptions(frames=range(1, 49)), out_dir)

Two engines give the same arrays: ``fast`` (our rasteriser over the evaluated
meshes) and ``cycles`` (Blender's renderer, the reference). Each frame's files
are written atomically; a frame whose files all exist is skipped, so a farm
chunk or a re-run resumes. Shot-level settings (size, near/far, conventions)
live in ``manifest.json``; per-frame cameras in ``camera/####.json``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import bpy
import numpy as np

from ..core import encodings, jit
from ..core.atomic import read_json, remove_stale_temps, write_json_atomic
from ..core.frame_ranges import describe
from ..core.raster import Fragments, inside_closed_mesh, motion_vectors_many, rasterize
from .shot_geometry import (
    MAX_LIGHTS,
    FrameGeometry,
    ShotError,
    ShotGeometry,
    light_at,
    scene_lights,
)

PASSES = ("depth", "normal", "skeleton", "mask", "parts", "motion", "beauty",
          "rest_position", "uv", "normal_world", "view_dir", "light_visibility")
#: Passes for a per-character neural renderer: the fast engine makes them from the
#: fragments (triangle + barycentrics) of the one rasterisation all passes share.
CANONICAL_PASSES = ("rest_position", "uv", "normal_world", "view_dir", "light_visibility")
DEFAULT_PASSES = ("depth", "normal", "skeleton", "mask", "parts", "motion")
MIN_SIZE, MAX_SIZE = 16, 8192
MANIFEST_VERSION = 1

# Files each pass writes per frame: (sub-folder, extension).
FILES = {
    "depth": [("depth", "exr"), ("depth16", "png")],
    "normal": [("normal", "exr"), ("normal_color", "png")],
    "skeleton": [("skeleton", "png"), ("skeleton", "json"), ("skeleton_coco18", "json")],
    "mask": [("mask", "png")],
    "parts": [("parts", "png"), ("parts_color", "png")],
    "motion": [("motion", "exr")],
    "beauty": [("beauty", "png")],
    "rest_position": [("rest_position", "exr"), ("rest_position16", "png")],
    "uv": [("uv", "exr"), ("uv16", "png")],
    "normal_world": [("normal_world", "exr")],
    "view_dir": [("view_dir", "exr")],
    "light_visibility": [("light_visibility", "exr")],
}

Progress = Callable[[int, int, int], None]  # (done, total, frame)


@dataclass
class PassOptions:
    """What to make. ``frames``: non-empty and increasing (a range, or a farm's list
    such as 3,5-10)."""

    frames: Sequence[int]
    width: int = 512
    height: int = 512
    engine: str = "fast"
    passes: tuple[str, ...] = DEFAULT_PASSES
    near: float | None = None  # shot depth range for depth16; None: measured over the scene
    far: float | None = None

    def validate(self) -> None:
        fs = self.frames
        if len(fs) == 0 or (fs.step <= 0 if isinstance(fs, range) else
                            any(b <= a for a, b in zip(fs, fs[1:], strict=False))):
            raise ShotError(f"frames {describe(fs) or 'given'} are empty or reversed: give "
                            "FIRST-LAST with FIRST <= LAST, in increasing order")
        for v, name in ((self.width, "width"), (self.height, "height")):
            if not MIN_SIZE <= v <= MAX_SIZE:
                raise ShotError(f"{name} {v} is outside {MIN_SIZE}..{MAX_SIZE} pixels")
        if self.engine not in ("fast", "cycles"):
            raise ShotError(f"engine {self.engine!r} is unknown: use fast or cycles")
        if not self.passes:
            raise ShotError(f"no passes named: choose from {', '.join(PASSES)}")
        bad = [p for p in self.passes if p not in PASSES]
        if bad:
            raise ShotError(f"unknown pass(es) {', '.join(bad)}: choose from {', '.join(PASSES)}")
        if "beauty" in self.passes and self.engine != "cycles":
            raise ShotError("the beauty pass needs --engine cycles")


def frame_paths(out: Path, passes: tuple[str, ...], f: int) -> list[Path]:
    paths = [out / "camera" / f"{f:04d}.json"]
    for p in passes:
        paths += [out / sub / f"{f:04d}.{ext}" for sub, ext in FILES[p]]
    return paths


def frame_done(out: Path, passes: tuple[str, ...], f: int) -> bool:
    return all(p.exists() for p in frame_paths(out, passes, f))


def shot_depth_range(geo: ShotGeometry, frames: range) -> tuple[float, float]:
    """Near/far over the whole scene range (not a farm chunk), padded 5%: every
    chunk of a shot must quantise depth identically, or the 16-bit depth flickers."""
    lo, hi = np.inf, -np.inf
    for f in frames:
        g = geo.frame(f)
        _, d = g.camera.project_world(g.positions)
        d = d[(d > g.camera.near) & (d < g.camera.far)]
        if len(d):
            lo, hi = min(lo, float(d.min())), max(hi, float(d.max()))
    if not np.isfinite(lo):
        raise ShotError("the character is never in front of the camera: check the camera")
    pad = 0.05 * max(hi - lo, 1e-3)
    return max(lo - pad, 1e-4), hi + pad


def _manifest(opts: PassOptions, near: float, far: float, geo: ShotGeometry) -> dict:
    return {
        "version": MANIFEST_VERSION,
        "engine": opts.engine,
        "width": opts.width,
        "height": opts.height,
        "passes": list(opts.passes),
        "near": near,
        "far": far,
        "files": {p: [f"{sub}/####.{ext}" for sub, ext in FILES[p]] for p in opts.passes},
        "parts": list(encodings.PARTS),
        "conventions": encodings.CONVENTIONS,
        "armature": geo.armature.name if geo.armature else None,
        "bone_map": geo.bone_map,
        "lights": _shot_lights(geo),
        **({"rest_box": rest_box(geo)} if "rest_position" in opts.passes else {}),
        "shot": shot_identity(geo),
        "versions": {"blender": bpy.app.version_string, "numpy": np.__version__,
                     "painted_skin": _package_version()},
    }


def _shot_lights(geo: ShotGeometry) -> list[dict]:
    """The lights light_visibility's channels follow, at the scene's first frame (the
    same for every farm chunk of the shot)."""
    scene = geo.scene
    now = scene.frame_current
    scene.frame_set(scene.frame_start)
    try:
        return [light_at(o).to_dict() for o in scene_lights(scene)]
    finally:
        scene.frame_set(now)


def rest_box(geo: ShotGeometry) -> tuple[list, list]:
    """The shot-fixed box of every rest position: the rest_position16 preview's range."""
    r = geo.surface_attributes().rest_positions
    return [float(x) for x in r.min(axis=0)], [float(x) for x in r.max(axis=0)]


def shot_identity(geo: ShotGeometry) -> dict:
    """What tells this shot from another rendered into the same folder: scene,
    camera, armature and its action, the meshes with their sizes, the frame range.
    Only names and counts, so every farm worker opening the .blend agrees."""
    scene, arm = geo.scene, geo.armature
    action = arm.animation_data.action if arm and arm.animation_data else None
    return {
        "scene": scene.name,
        # Markers may switch the scene camera per frame (scene.camera then depends on
        # the last frame_set): the shot's cameras are the marker-bound ones, if any.
        "camera": sorted({m.camera.name for m in scene.timeline_markers if m.camera})
        or (scene.camera.name if scene.camera else None),
        "armature": arm.name if arm else None,
        "action": action.name if action else None,
        "meshes": {ob.name: [int(c) for c in n]  # vertices, faces, corners
                   for ob, n in zip(geo.objects, geo.counts, strict=True)},
        "frame_range": [scene.frame_start, scene.frame_end],
    }


def _package_version() -> str:
    try:
        from importlib.metadata import version

        return version("painted-skin")
    except Exception:  # inside Blender the extension is not a pip distribution
        return "extension"


def _check_manifest(out: Path, manifest: dict) -> None:
    """Refuse to mix outputs made with other settings in one folder."""
    path = out / "manifest.json"
    if not path.exists():
        write_json_atomic(path, manifest)
        return
    old = read_json(path, "passes manifest")
    shot, new_shot = old.get("shot"), manifest["shot"]
    if shot is not None and shot != new_shot:
        diff = [k for k in new_shot if shot.get(k) != new_shot[k]]
        raise ShotError(f"{out} holds the passes of another shot ({', '.join(diff)} differ: "
                        f"{', '.join(f'{k} {shot.get(k)!r}' for k in diff[:2])}): render "
                        "into another --out folder, or delete it to start over")
    for key in ("width", "height", "engine", "near", "far"):
        if old.get(key) != manifest[key] and not (
                isinstance(old.get(key), float) and np.isclose(old[key], manifest[key])):
            raise ShotError(f"{out} holds passes made with {key}={old.get(key)} (now "
                            f"{manifest[key]}): use another --out folder or delete it")
    passes = sorted(set(old.get("passes", [])) | set(manifest["passes"]))
    if passes != sorted(old.get("passes", [])) or shot is None:
        old["passes"], old["shot"] = passes, new_shot  # a manifest from before "shot": adopt
        old["files"] = {**old.get("files", {}), **manifest["files"]}
        for key in ("lights", "rest_box"):  # what passes added to an older folder need
            if key in manifest and key not in old:
                old[key] = manifest[key]
        write_json_atomic(path, old)


def rasterize_culled(verts_cam: np.ndarray, tris: np.ndarray, cullable: np.ndarray,
                     cam) -> Fragments:
    """:func:`rasterize` without the back faces of closed meshes (see
    ``ShotGeometry.cullable``); triangle ids in the result are the original ones."""
    if jit.enabled():  # the compiled rasteriser culls as it goes (same test, same arrays)
        from ..core import raster_jit

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
        from ..core import raster_jit

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
    """rest_position, uv, view_dir and light_visibility from the frame's fragments."""
    from ..core.shadow import Light, light_visibility

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
    if not want & {"view_dir", "light_visibility"}:
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
    if "light_visibility" in want:
        # The triangle's own normal, turned to the side the camera sees.
        ng = np.cross(corners[:, 1] - corners[:, 0], corners[:, 2] - corners[:, 0])
        ng /= np.maximum(np.linalg.norm(ng, axis=1), 1e-30)[:, None]
        ng *= np.where(np.einsum("ij,ij->i", ng, view) < 0, -1.0, 1.0)[:, None]
        lights = [Light(li.type, li.position, li.direction) for li in g.lights]
        vis = np.zeros((len(p), MAX_LIGHTS), np.float32)
        vis[:, :len(lights)] = light_visibility(p, ng, g.positions, geo.tris, lights,
                                                shadow_resolution(cam))
        out["light_visibility"] = _scatter(m, vis)
    return out


def _cycles_frames(scene, frames: list[int], opts: PassOptions) -> Iterator[tuple[int, dict]]:
    from .cycles_passes import render_cycles_frames

    want = set(opts.passes)
    extras = set()
    if want & {"view_dir", "light_visibility"}:
        extras.add("position")
    if want & {"rest_position", "uv"}:
        extras.add("canonical")
    for f, p in render_cycles_frames(scene, frames, opts.width, opts.height,
                                     want_beauty="beauty" in opts.passes, extras=extras):
        out = {"depth": p["depth"], "mask": p["mask"] > 0.5, "normal": p["normal_camera"],
               "motion": np.concatenate([p["flow_prev"], p["flow_next"]], axis=-1),
               "normal_world": p["normal_world"]}
        for key in ("beauty", "position", "rest_position", "uv"):
            if key in p:
                out[key] = p[key]
        yield f, out


def _cycles_canonical(scene: bpy.types.Scene, g: FrameGeometry, arrays: dict,
                      want: set[str]) -> None:
    """view_dir and light_visibility of a Cycles frame, from its Position pass (the
    light visibility ray-traced: see ``cycles_passes.ray_light_visibility``)."""
    from .cycles_passes import ray_light_visibility

    cam, m = g.camera, arrays["mask"]
    pos = arrays.pop("position", None)
    if pos is None:
        return
    if "view_dir" in want:
        if cam.ortho:
            view = np.broadcast_to(cam.world[:3, 2] / np.linalg.norm(cam.world[:3, 2]),
                                   pos.shape)
        else:
            view = cam.world[:3, 3] - pos.astype(np.float64)
            view = view / np.maximum(np.linalg.norm(view, axis=-1, keepdims=True), 1e-12)
        arrays["view_dir"] = np.where(m[..., None], view, 0.0).astype(np.float32)
    if "light_visibility" in want:
        vis = np.zeros(m.shape + (MAX_LIGHTS,), np.float32)
        vis[..., :len(g.lights)] = ray_light_visibility(scene, pos, m, cam, g.lights)
        arrays["light_visibility"] = vis


def _write_frame(out: Path, f: int, arrays: dict, opts: PassOptions, near: float, far: float,
                 g: FrameGeometry, skeleton: tuple[np.ndarray, dict] | None,
                 rest_box: tuple[list, list] | None = None) -> None:
    from .image_io import write_exr, write_png

    name = f"{f:04d}"
    want = set(opts.passes)
    for sub in {sub for p in want for sub, _ in FILES[p]} | {"camera"}:
        (out / sub).mkdir(parents=True, exist_ok=True)
    if "depth" in want:
        write_exr(out / "depth" / f"{name}.exr", arrays["depth"], ["Z"])
        write_png(out / "depth16" / f"{name}.png",
                  encodings.depth_to_u16(arrays["depth"], near, far))
    if "normal" in want:
        write_exr(out / "normal" / f"{name}.exr", arrays["normal"], ["X", "Y", "Z"])
        write_png(out / "normal_color" / f"{name}.png",
                  encodings.normal_to_color(arrays["normal"], arrays["mask"]))
    if "mask" in want:
        write_png(out / "mask" / f"{name}.png", (arrays["mask"] * 255).astype(np.uint8))
    if "parts" in want:
        write_png(out / "parts" / f"{name}.png", arrays["parts"])
        write_png(out / "parts_color" / f"{name}.png", encodings.parts_to_color(arrays["parts"]))
    if "motion" in want:
        # R,G = previous (u, v), B,A = next (u, v): EXR readers sort other channel
        # names alphabetically, which would put "next" before "prev".
        write_exr(out / "motion" / f"{name}.exr", arrays["motion"], ["R", "G", "B", "A"])
    if "beauty" in want:
        # Cycles' Combined is linear and premultiplied; PNG wants straight alpha. The
        # colours get the plain sRGB curve (Blender's "Standard" view), not the
        # scene's view transform (AgX by default): see CONVENTIONS["beauty"].
        rgba = np.clip(arrays["beauty"], 0, None)
        alpha = np.clip(rgba[..., 3:], 0, 1)
        lin = np.clip(np.where(alpha > 0, rgba[..., :3] / np.maximum(alpha, 1e-8), 0), 0, 1)
        srgb = np.where(lin <= 0.0031308, lin * 12.92, 1.055 * np.power(lin, 1 / 2.4) - 0.055)
        img = np.concatenate([srgb, alpha], axis=-1)
        write_png(out / "beauty" / f"{name}.png", np.round(img * 255).astype(np.uint8))
    if "rest_position" in want:
        write_exr(out / "rest_position" / f"{name}.exr", arrays["rest_position"],
                  ["X", "Y", "Z"])
        write_png(out / "rest_position16" / f"{name}.png",
                  encodings.rest_to_u16(arrays["rest_position"], arrays["mask"],
                                        *(rest_box or _box_of(arrays["rest_position"]))))
    if "uv" in want:
        # R, G, B = u, v, has_uv (readers sort X/Y/Z-like names: R, G, B keep the order)
        write_exr(out / "uv" / f"{name}.exr", arrays["uv"], ["R", "G", "B"])
        write_png(out / "uv16" / f"{name}.png", encodings.uv_to_u16(arrays["uv"]))
    if "normal_world" in want:
        write_exr(out / "normal_world" / f"{name}.exr", arrays["normal_world"], ["X", "Y", "Z"])
    if "view_dir" in want:
        write_exr(out / "view_dir" / f"{name}.exr", arrays["view_dir"], ["X", "Y", "Z"])
    if "light_visibility" in want:
        write_exr(out / "light_visibility" / f"{name}.exr", arrays["light_visibility"],
                  ["R", "G", "B", "A"])
    if "skeleton" in want:
        image, data, coco = skeleton if skeleton is not None else (
            np.zeros((opts.height, opts.width, 3), np.uint8), {"people": []}, {"people": []})
        write_png(out / "skeleton" / f"{name}.png", image)
        write_json_atomic(out / "skeleton" / f"{name}.json", data)
        write_json_atomic(out / "skeleton_coco18" / f"{name}.json", coco)
    # The camera file goes last: it marks the frame complete (see frame_done).
    write_json_atomic(out / "camera" / f"{name}.json",
                      {"frame": f, "camera": g.camera.to_dict(),
                       "lights": [li.to_dict() for li in g.lights]})


def _box_of(rest: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return rest.reshape(-1, 3).min(axis=0), rest.reshape(-1, 3).max(axis=0)


def skeleton_pass(g: FrameGeometry, depth: np.ndarray,
                  head_rest: np.ndarray | None) -> tuple[np.ndarray, dict, dict] | None:
    """OpenPose drawing + BODY_25 JSON + COCO-18 JSON of one frame, or None
    without a humanoid map."""
    if not g.joints:
        return None
    from ..core import openpose

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


def iter_frames(scene: bpy.types.Scene, geo: ShotGeometry, opts: PassOptions,
                frames: list[int]) -> Iterator[tuple[int, FrameGeometry, dict, tuple | None]]:
    """The engine: yields (frame, geometry, pass arrays, skeleton image+JSONs or None)."""
    if opts.engine == "cycles":
        yield from _cycles_iter(scene, geo, opts, frames)
    else:
        yield from _fast_iter(geo, opts, frames)


def _fast_iter(geo: ShotGeometry, opts: PassOptions, frames: list[int]
               ) -> Iterator[tuple[int, FrameGeometry, dict, tuple | None]]:
    """Fast engine as a two-stage pipeline: this (main) thread evaluates frames in
    Blender, which only it may do, while one worker thread rasterises the frame
    before (numpy releases the GIL in its heavy loops) and the caller writes the
    one before that. At most two frames are in flight."""
    from concurrent.futures import ThreadPoolExecutor

    want = set(opts.passes)
    joints = "skeleton" in want

    def compute(g: FrameGeometry, prev, nxt) -> tuple[dict, tuple | None]:
        arrays = fast_frame(geo, g, prev, nxt, want)
        return arrays, (skeleton_pass(g, arrays["depth"], geo.head_rest) if joints else None)

    if want & {"rest_position", "uv"}:
        geo.surface_attributes()  # read here: the worker thread may not call Blender
    cache: dict[int, FrameGeometry] = {}
    pending = None
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="painted-skin-passes") as pool:
        try:
            for f in frames:
                # Each frame is evaluated once: the next frame's geometry (needed for
                # its motion vectors) is kept for the following iteration.
                g = cache.get(f) or geo.frame(f, with_joints=joints)
                _check_camera_outside(geo, g)
                prev = nxt = None
                if "motion" in want:
                    prev = cache.get(f - 1) or geo.frame(f - 1)
                    nxt = geo.frame(f + 1, with_joints=joints)
                cache = {f: g} if nxt is None else {f: g, f + 1: nxt}
                job = (f, g, pool.submit(compute, g, prev, nxt))
                if pending is not None:
                    pf, pg, fut = pending
                    yield (pf, pg, *fut.result())
                pending = job
            if pending is not None:
                pf, pg, fut = pending
                pending = None
                yield (pf, pg, *fut.result())
        finally:
            if pending is not None:  # the caller stopped early: let the worker finish
                pending[2].cancel()


def _cycles_iter(scene: bpy.types.Scene, geo: ShotGeometry, opts: PassOptions,
                 frames: list[int]) -> Iterator[tuple[int, FrameGeometry, dict, tuple | None]]:
    want = set(opts.passes)
    joints = "skeleton" in want
    for f, arrays in _cycles_frames(scene, frames, opts):
        g = geo.frame(f, with_joints=joints)
        _check_camera_outside(geo, g)
        if "parts" in want:
            arrays["parts"] = fast_frame(geo, g, None, None, {"parts"})["parts"]
        _cycles_canonical(scene, g, arrays, want)
        skel = skeleton_pass(g, arrays["depth"], geo.head_rest) if joints else None
        yield f, g, arrays, skel


def make_passes(scene: bpy.types.Scene, opts: PassOptions, out: Path,
                progress: Progress | None = None,
                cancelled: Callable[[], bool] | None = None, clean_temps: bool = True) -> dict:
    """Write the passes of ``opts.frames`` into ``out``; returns a summary.

    Frames already complete are skipped. ``cancelled`` is polled between frames.
    ``clean_temps``: first delete the temp files killed runs left (once per run: a
    caller making one frame per call passes it on the first call only).
    """
    opts.validate()
    first, last = opts.frames[0], opts.frames[-1]
    if first < scene.frame_start or last > scene.frame_end:
        raise ShotError(f"frames {describe(opts.frames)} lie outside the scene's range "
                        f"{scene.frame_start}-{scene.frame_end}: render frames within it, "
                        "or set the scene's frame range first")
    out = Path(out)
    geo = ShotGeometry(scene, opts.width, opts.height)
    want = set(opts.passes)
    warnings = list(geo.warnings) if "skeleton" in want else []
    if "light_visibility" in want and geo.light_warning:
        warnings.append(geo.light_warning)
    frame_now = scene.frame_current
    try:
        if opts.near is not None and opts.far is not None:
            near, far = opts.near, opts.far
        else:
            manifest_path = out / "manifest.json"
            if manifest_path.exists():
                old = read_json(manifest_path, "passes manifest")
                near, far = old["near"], old["far"]
            else:
                near, far = shot_depth_range(geo, range(scene.frame_start, scene.frame_end + 1))
        out.mkdir(parents=True, exist_ok=True)
        manifest = _manifest(opts, near, far, geo)
        _check_manifest(out, manifest)
        if clean_temps:  # what a killed run left half-written, in our own folders
            remove_stale_temps([out / sub for sub in {"camera"} | {
                sub for p in PASSES for sub, _ in FILES[p]}])
        todo = [f for f in opts.frames if not frame_done(out, opts.passes, f)]
        done = skipped = len(opts.frames) - len(todo)
        if progress:
            progress(done, len(opts.frames), opts.frames[0])
        for f, g, arrays, skel in iter_frames(scene, geo, opts, todo):
            if cancelled and cancelled():
                break
            _write_frame(out, f, arrays, opts, near, far, g, skel, manifest.get("rest_box"))
            done += 1
            if progress:
                progress(done, len(opts.frames), f)
    finally:
        scene.frame_set(frame_now)
    return {"frames": len(opts.frames), "written": done - skipped, "done": done,
            "near": near, "far": far,
            "warnings": warnings, "out": str(out)}


def _check_camera_outside(geo: ShotGeometry, g: FrameGeometry) -> None:
    """A camera inside the character sees its inside: refuse and say so."""
    view = g.camera.view
    if (g.positions @ view[2, :3] + view[2, 3]).max() < 0:
        return  # the whole mesh is in front of the camera: its eye cannot be inside
    eye = g.camera.world[:3, 3]
    # Column-wise min/max of a (V, 3) array is slow in numpy; one pass over the
    # transposed copy is several times faster.
    cols = np.ascontiguousarray(g.positions.T)
    if np.any(eye < cols.min(axis=1)) or np.any(eye > cols.max(axis=1)):
        return  # outside the bounding box: no need for the ray test
    if inside_closed_mesh(eye, g.positions, geo.tris):
        raise ShotError("the camera is inside the character's mesh: move it out "
                        f"(camera at {eye.round(3).tolist()})")
