"""Control passes for every frame of a shot: the function behind the CLI,
the panel and the Python API.

    from painted_skin.addon.blender.passes.render import PassOptions, make_passes
    make_passes(bpy.context.scene, PassOptions(frames=range(1, 49)), out_dir)

Two engines give the same arrays: ``fast`` (our rasteriser over the evaluated
meshes) and ``cycles`` (Blender's renderer, the reference). Each frame's files
are written atomically; a frame whose files all exist is skipped, so a farm
chunk or a re-run resumes. Shot-level settings (size, near/far, conventions)
live in ``manifest.json``; per-frame cameras in ``camera/####.json``.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import bpy
import numpy as np

from ...core.files.atomic import read_json, remove_stale_temps, write_json_atomic
from ...core.files.frame_patterns import FramePattern
from ...core.files.frame_ranges import describe
from ...core.openpose.keypoints_json import normalized_openpose
from ...core.passes import encodings
from ...core.passes.raster import inside_closed_mesh

# Split by job; every name stays importable from here.
from .fast import (  # noqa: F401
    box_of,
    fast_frame,
    gloss_images,
    rasterize_culled,
    shadow_resolution,
    skeleton_pass,
    terminator_images,
)
from .geometry import (
    MAX_LIGHTS,
    FrameGeometry,
    ShotError,
    ShotGeometry,
)
from .output import (  # noqa: F401
    CANONICAL_PASSES,
    DEFAULT_NAMES,
    DEFAULT_PASSES,
    FILES,
    MANIFEST_VERSION,
    MAX_SIZE,
    MIN_SIZE,
    MOTION_CHANNELS,
    MOTION_CHANNELS_OLD,
    PASSES,
    SKELETON_NORMALIZED,
    PassOptions,
    Progress,
    build_manifest,
    check_manifest,
    frame_done,
    frame_paths,
    pass_file,
    pass_files,
    rest_box,
    shot_depth_range,
    shot_identity,
    split_passes_out,
)


def _cycles_frames(scene, frames: list[int], opts: PassOptions) -> Iterator[tuple[int, dict]]:
    from .cycles import render_cycles_frames

    want = set(opts.passes)
    extras = set()
    if want & {"view_dir", "light_visibility", "irradiance", "specular", "world_light"}:
        extras.add("position")
    if want & {"rest_position", "uv"}:
        extras.add("canonical")
    if "albedo" in want:
        extras.add("albedo")
    for f in frames:
        # One frame's pass settings at a time, restored before the frame is yielded: the
        # beauty rendered between frames gets the scene's own filter, bounces and film.
        ((f, p),) = list(render_cycles_frames(scene, [f], opts.width, opts.height,
                                              extras=extras))
        out = {"depth": p["depth"], "mask": p["mask"] > 0.5, "normal": p["normal_camera"],
               "motion": np.concatenate([p["flow_prev"], p["flow_next"]], axis=-1),
               "normal_world": p["normal_world"]}
        for key in ("beauty", "position", "rest_position", "uv", "albedo"):
            if key in p:
                out[key] = p[key]
        yield f, out


def _cycles_canonical(scene: bpy.types.Scene, geo: ShotGeometry, g: FrameGeometry,
                      arrays: dict, want: set[str]) -> None:
    """view_dir, light_visibility, irradiance, specular and world_light of a Cycles frame,
    from its Position pass (the light visibility ray-traced: see
    ``cycles_passes.ray_light_visibility``; the world's by the fast engine's shadow maps,
    so the two engines' world_light agree)."""
    from .cycles import ray_light_visibility

    cam, m = g.camera, arrays["mask"]
    pos = arrays.pop("position", None)
    if pos is None:
        return
    if cam.ortho:
        view = np.broadcast_to(cam.world[:3, 2] / np.linalg.norm(cam.world[:3, 2]), pos.shape)
    else:
        view = cam.world[:3, 3] - pos.astype(np.float64)
        view = view / np.maximum(np.linalg.norm(view, axis=-1, keepdims=True), 1e-12)
    if "view_dir" in want:
        arrays["view_dir"] = np.where(m[..., None], view, 0.0).astype(np.float32)
    # the shadow rays' start near a smooth terminator, for the lamps and the sky alike
    lights_wanted = want & {"world_light", "light_visibility", "irradiance", "specular"}
    lift, smooth = terminator_images(geo, g) if lights_wanted else (None, None)
    if "world_light" in want:
        from ...core.passes.world_light import world_light

        n = arrays["normal_world"][m].astype(np.float64)
        n /= np.maximum(np.linalg.norm(n, axis=1), 1e-12)[:, None]
        n = np.where((np.einsum("ij,ij->i", n, view[m]) < 0)[:, None], -n, n)  # seen side
        arrays["world_light"] = np.zeros(m.shape + (3,), np.float32)
        arrays["world_light"][m] = world_light(pos[m], n, n, g.positions, geo.tris,
                                               geo.world[0], lift=lift[m])
    if want & {"light_visibility", "irradiance", "specular"}:
        from ...core.passes.irradiance import coated_specular, irradiance

        vis = np.zeros(m.shape + (MAX_LIGHTS,), np.float32)
        vis[..., :len(g.lights)] = ray_light_visibility(scene, pos, m, cam, g.lights,
                                                        lift, smooth)
        if "light_visibility" in want:
            arrays["light_visibility"] = vis
        emissions = [li.emission() for li in g.lights]
        if "specular" in want:
            from ...core.passes.irradiance import SPECULAR_F0, SPECULAR_ROUGHNESS
            from .materials import NO_COAT

            rough, f0, coat = gloss_images(geo, g)
            # A pixel Cycles covers and the raster does not (a silhouette's edge).
            rough = np.where(np.isnan(rough), SPECULAR_ROUGHNESS, rough)[m]
            f0 = np.where(np.isnan(f0), SPECULAR_F0, f0)[m]
            coat = np.where(np.isnan(coat), np.float32(NO_COAT), coat)[m]
        for name in ("irradiance", "specular"):
            if name not in want:
                continue
            light = np.zeros(m.shape + (3,), np.float32)
            if name == "irradiance":
                light[m] = irradiance(pos[m], arrays["normal_world"][m], vis[m], emissions)
            else:
                light[m] = coated_specular(pos[m], arrays["normal_world"][m], view[m],
                                           vis[m], emissions, rough, f0, coat)
            arrays[name] = light


def _write_frame(out: Path, f: int, arrays: dict, opts: PassOptions, near: float, far: float,
                 g: FrameGeometry, skeleton: tuple[np.ndarray, dict] | None,
                 shot_box: tuple[list, list] | None = None,
                 names: FramePattern = DEFAULT_NAMES) -> None:
    from .image_io import write_exr, write_png

    def path(sub: str, ext: str) -> Path:
        return pass_file(out, sub, ext, f, names)

    want = set(opts.passes)
    files = pass_files(opts.passes, opts.openpose_normalized)
    for sub in {sub for p in want for sub, _ in files[p]} | {"camera"}:
        (out / sub).mkdir(parents=True, exist_ok=True)
    if "depth" in want:
        write_exr(path("depth", "exr"), arrays["depth"], ["Z"])
        write_png(path("depth16", "png"),
                  encodings.depth_to_u16(arrays["depth"], near, far))
        write_png(path("depth8", "png"), encodings.depth_to_u8(arrays["depth"], near, far))
    if "normal" in want:
        write_exr(path("normal", "exr"), arrays["normal"], ["X", "Y", "Z"])
        write_png(path("normal_color", "png"),
                  encodings.normal_to_color(arrays["normal"], arrays["mask"]))
    if "mask" in want:
        write_png(path("mask", "png"), (arrays["mask"] * 255).astype(np.uint8))
    if "parts" in want:
        write_png(path("parts", "png"), arrays["parts"])
        write_png(path("parts_color", "png"), encodings.parts_to_color(arrays["parts"]))
    if "motion" in want:
        # Nuke's names: EXR stores channels alphabetically, and "backward" (to the
        # previous frame) sorts before "forward", so positional readers keep the order.
        write_exr(path("motion", "exr"), arrays["motion"], MOTION_CHANNELS)
    if "beauty" in want and arrays["beauty"].dtype == np.uint8:  # Blender wrote it so
        write_png(path("beauty", "png"), arrays["beauty"])
    elif "beauty" in want:
        # Cycles' Combined is linear and premultiplied; PNG wants straight alpha. The
        # colours get the plain sRGB curve (Blender's "Standard" view), not the
        # scene's view transform (AgX by default): see CONVENTIONS["beauty"].
        rgba = np.clip(arrays["beauty"], 0, None)
        alpha = np.clip(rgba[..., 3:], 0, 1)
        lin = np.clip(np.where(alpha > 0, rgba[..., :3] / np.maximum(alpha, 1e-8), 0), 0, 1)
        srgb = np.where(lin <= 0.0031308, lin * 12.92, 1.055 * np.power(lin, 1 / 2.4) - 0.055)
        img = np.concatenate([srgb, alpha], axis=-1)
        write_png(path("beauty", "png"), np.round(img * 255).astype(np.uint8))
    if "rest_position" in want:
        write_exr(path("rest_position", "exr"), arrays["rest_position"],
                  ["X", "Y", "Z"])
        write_png(path("rest_position16", "png"),
                  encodings.rest_to_u16(arrays["rest_position"], arrays["mask"],
                                        *(shot_box or box_of(arrays["rest_position"]))))
    if "uv" in want:
        # R, G, B = u, v, has_uv (readers sort X/Y/Z-like names: R, G, B keep the order)
        write_exr(path("uv", "exr"), arrays["uv"], ["R", "G", "B"])
        write_png(path("uv16", "png"), encodings.uv_to_u16(arrays["uv"]))
    if "normal_world" in want:
        write_exr(path("normal_world", "exr"), arrays["normal_world"], ["X", "Y", "Z"])
    if "view_dir" in want:
        write_exr(path("view_dir", "exr"), arrays["view_dir"], ["X", "Y", "Z"])
    for name in ("irradiance", "specular", "world_light", "albedo"):
        if name in want:
            write_exr(path(name, "exr"), arrays[name], ["R", "G", "B"])
    if "light_visibility" in want:
        write_exr(path("light_visibility", "exr"), arrays["light_visibility"],
                  ["R", "G", "B", "A"])
    if "skeleton" in want:
        image, data, coco = skeleton if skeleton is not None else (
            np.zeros((opts.height, opts.width, 3), np.uint8), {"people": []}, {"people": []})
        write_png(path("skeleton", "png"), image)
        write_json_atomic(path("skeleton", "json"), data)
        write_json_atomic(path("skeleton_coco18", "json"), coco)
        if opts.openpose_normalized:
            sub, ext = SKELETON_NORMALIZED
            write_json_atomic(path(sub, ext), normalized_openpose(coco))
    # The camera file goes last: it marks the frame complete (see frame_done).
    write_json_atomic(path("camera", "json"),
                      {"frame": f, "camera": g.camera.to_dict(),
                       "lights": [li.to_dict() for li in g.lights]})




def iter_frames(scene: bpy.types.Scene, geo: ShotGeometry, opts: PassOptions,
                frames: list[int]) -> Iterator[tuple[int, FrameGeometry, dict, tuple | None]]:
    """The engine: yields (frame, geometry, pass arrays, skeleton image+JSONs or None)."""
    if "world_light" in opts.passes:
        _ = geo.world  # read here, on the main thread, not by the fast engine's worker
    it = (_cycles_iter(scene, geo, opts, frames) if opts.engine == "cycles"
          else _fast_iter(geo, opts, frames))
    if "beauty" not in opts.passes:
        yield from it
        return
    from .beauty import beauty_settings, render_beauty

    # The beauty is a render of its own, at the training target's settings, between the
    # engine's frames (Cycles' pass settings are not in force then: see _cycles_frames).
    with tempfile.TemporaryDirectory(prefix="painted-skin-beauty-") as tmp:
        for f, g, arrays, skel in it:
            with beauty_settings(scene, (opts.width, opts.height), opts.beauty_samples,
                                 opts.beauty_denoise):
                arrays["beauty"] = render_beauty(scene, f, Path(tmp))
            yield f, g, arrays, skel


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
    if "albedo" in want:
        geo.albedo_surface()  # the materials and images too
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
        _cycles_canonical(scene, geo, g, arrays, want)
        skel = skeleton_pass(g, arrays["depth"], geo.head_rest) if joints else None
        yield f, g, arrays, skel


def make_passes(scene: bpy.types.Scene, opts: PassOptions, out: Path,
                progress: Progress | None = None,
                cancelled: Callable[[], bool] | None = None, clean_temps: bool = True,
                names: FramePattern = DEFAULT_NAMES) -> dict:
    """Write the passes of ``opts.frames`` into ``out``; returns a summary.

    ``names``: how each frame's files are named (a farm's pattern, see
    :func:`split_passes_out`); a folder keeps the names of frames already there.
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
    if "world_light" in want and geo.world[1]:
        warnings.append(geo.world[1])
    approximated = geo.albedo_surface().approximated \
        if "albedo" in want and opts.engine == "fast" else []
    if approximated:
        warnings.append("albedo: the viewport colour stands for material(s) "
                        f"{', '.join(approximated)} (a node tree the fast engine does not "
                        "read); the cycles engine renders them exactly")
    rough = geo.albedo_surface().rough_approximated if "specular" in want else []
    if rough:
        warnings.append("specular: the viewport roughness stands for material(s) "
                        f"{', '.join(rough)} (a Roughness or IOR input behind a node the "
                        "passes do not follow: a procedural texture or a node group)")
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
        manifest = build_manifest(opts, near, far, geo, names)
        check_manifest(out, manifest)
        if clean_temps:  # what a killed run left half-written, in our own folders
            remove_stale_temps([out / sub for sub in {"camera"} | {
                sub for files in pass_files(PASSES, True).values() for sub, _ in files}],
                prefix=names.prefix)
        todo = [f for f in opts.frames
                if not frame_done(out, opts.passes, f, opts.openpose_normalized, names)]
        done = skipped = len(opts.frames) - len(todo)
        if progress:
            progress(done, len(opts.frames), opts.frames[0])
        for f, g, arrays, skel in iter_frames(scene, geo, opts, todo):
            if cancelled and cancelled():
                break
            _write_frame(out, f, arrays, opts, near, far, g, skel, manifest.get("rest_box"),
                         names)
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
