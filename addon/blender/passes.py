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

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import bpy
import numpy as np

from ..core import encodings, jit
from ..core.atomic import read_json, remove_stale_temps, write_json_atomic
from ..core.raster import Fragments, inside_closed_mesh, motion_vectors_many, rasterize
from .shot_geometry import FrameGeometry, ShotError, ShotGeometry

PASSES = ("depth", "normal", "skeleton", "mask", "parts", "motion", "beauty")
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
}

Progress = Callable[[int, int, int], None]  # (done, total, frame)


@dataclass
class PassOptions:
    """What to make. ``frames`` must be a non-empty increasing range."""

    frames: range
    width: int = 512
    height: int = 512
    engine: str = "fast"
    passes: tuple[str, ...] = DEFAULT_PASSES
    near: float | None = None  # shot depth range for depth16; None: measured over the scene
    far: float | None = None

    def validate(self) -> None:
        if len(self.frames) == 0 or self.frames.step <= 0:
            raise ShotError(f"frame range {self.frames.start}-{self.frames.stop - 1} is empty or "
                            "reversed: give FIRST-LAST with FIRST <= LAST")
        for v, name in ((self.width, "width"), (self.height, "height")):
            if not MIN_SIZE <= v <= MAX_SIZE:
                raise ShotError(f"{name} {v} is outside {MIN_SIZE}..{MAX_SIZE} pixels")
        if self.engine not in ("fast", "cycles"):
            raise ShotError(f"engine {self.engine!r} is unknown: use fast or cycles")
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
        "shot": shot_identity(geo),
        "versions": {"blender": bpy.app.version_string, "numpy": np.__version__,
                     "painted_skin": _package_version()},
    }


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
    if jit.enabled():  # every pass in two compiled sweeps: the arrays below, to rounding
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
    if "normal" in want:
        # Only the covered pixels (a fraction of the image) are interpolated and turned.
        m = frag.mask
        b = frag.bary[m].astype(np.float64)
        n = np.einsum("nk,nkc->nc", b, g.corner_normals[frag.tri[m]]) @ cam.view[:3, :3].T
        n /= np.maximum(np.linalg.norm(n, axis=-1, keepdims=True), 1e-12)
        normal = np.zeros(frag.depth.shape + (3,), np.float32)
        normal[m] = n
        out["normal"] = normal
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
    return out


def _cycles_frames(scene, frames: list[int], opts: PassOptions) -> Iterator[tuple[int, dict]]:
    from .cycles_passes import render_cycles_frames

    for f, p in render_cycles_frames(scene, frames, opts.width, opts.height,
                                     want_beauty="beauty" in opts.passes):
        out = {"depth": p["depth"], "mask": p["mask"] > 0.5, "normal": p["normal_camera"],
               "motion": np.concatenate([p["flow_prev"], p["flow_next"]], axis=-1)}
        if "beauty" in p:
            out["beauty"] = p["beauty"]
        yield f, out


def _write_frame(out: Path, f: int, arrays: dict, opts: PassOptions, near: float, far: float,
                 g: FrameGeometry, skeleton: tuple[np.ndarray, dict] | None) -> None:
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
    if "skeleton" in want:
        image, data, coco = skeleton if skeleton is not None else (
            np.zeros((opts.height, opts.width, 3), np.uint8), {"people": []}, {"people": []})
        write_png(out / "skeleton" / f"{name}.png", image)
        write_json_atomic(out / "skeleton" / f"{name}.json", data)
        write_json_atomic(out / "skeleton_coco18" / f"{name}.json", coco)
    # The camera file goes last: it marks the frame complete (see frame_done).
    write_json_atomic(out / "camera" / f"{name}.json", {"frame": f, "camera": g.camera.to_dict()})


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
    first, last = opts.frames.start, opts.frames[-1]
    if first < scene.frame_start or last > scene.frame_end:
        raise ShotError(f"frames {first}-{last} lie outside the scene's range "
                        f"{scene.frame_start}-{scene.frame_end}: render frames within it, "
                        "or set the scene's frame range first")
    out = Path(out)
    geo = ShotGeometry(scene, opts.width, opts.height)
    want = set(opts.passes)
    warnings = list(geo.warnings) if "skeleton" in want else []
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
        _check_manifest(out, _manifest(opts, near, far, geo))
        if clean_temps:  # what a killed run left half-written, in our own folders
            remove_stale_temps([out / sub for sub in {"camera"} | {
                sub for p in PASSES for sub, _ in FILES[p]}])
        todo = [f for f in opts.frames if not frame_done(out, opts.passes, f)]
        done = skipped = len(opts.frames) - len(todo)
        if progress:
            progress(done, len(opts.frames), opts.frames.start)
        for f, g, arrays, skel in iter_frames(scene, geo, opts, todo):
            if cancelled and cancelled():
                break
            _write_frame(out, f, arrays, opts, near, far, g, skel)
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
