"""What a passes folder holds: the pass names, :class:`PassOptions`, each frame's
files, and ``manifest.json`` (the shot-level settings a re-run must agree with)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import bpy
import numpy as np

from ...core.files.atomic import read_json, write_json_atomic
from ...core.files.frame_patterns import (
    IMAGE_EXTENSIONS,
    FramePattern,
    FramePatternError,
    has_frame_run,
    parse_frame_pattern,
)
from ...core.files.frame_ranges import describe
from ...core.passes import encodings
from .geometry import (
    ShotError,
    ShotGeometry,
    light_at,
    scene_lights,
    training_sun,
)

PASSES = ("depth", "normal", "skeleton", "mask", "parts", "motion", "beauty",
          "rest_position", "uv", "normal_world", "view_dir", "light_visibility", "irradiance",
          "specular", "world_light", "albedo")
#: Passes for a per-character neural renderer: the fast engine makes them from the
#: fragments (triangle + barycentrics) of the one rasterisation all passes share.
CANONICAL_PASSES = ("rest_position", "uv", "normal_world", "view_dir", "light_visibility",
                    "irradiance", "specular", "world_light", "albedo")
DEFAULT_PASSES = ("depth", "normal", "skeleton", "mask", "parts", "motion")
MIN_SIZE, MAX_SIZE = 16, 8192
MANIFEST_VERSION = 1

# Files each pass writes per frame: (sub-folder, extension).
FILES = {
    "depth": [("depth", "exr"), ("depth16", "png"), ("depth8", "png")],
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
    "irradiance": [("irradiance", "exr")],
    "specular": [("specular", "exr")],
    "world_light": [("world_light", "exr")],
    "albedo": [("albedo", "exr")],
}

#: With ``PassOptions.openpose_normalized``: the skeleton's COCO-18 JSON in 0-1 coordinates.
SKELETON_NORMALIZED = ("skeleton_normalized", "json")
#: The motion EXR's channels, in the file's (alphabetical) order: Nuke's names for the
#: vectors to the previous (backward) and next (forward) frame. Folders from before
#: hold the same values as R, G, B, A.
MOTION_CHANNELS = ("backward.u", "backward.v", "forward.u", "forward.v")
MOTION_CHANNELS_OLD = ("R", "G", "B", "A")

Progress = Callable[[int, int, int], None]  # (done, total, frame)

#: How a plain output folder names each frame's files: ``depth/0007.exr``.
DEFAULT_NAMES = FramePattern("", "", 4, "")
PATTERN_KEY = "frame_pattern"  # in the manifest, when not the default: one folder, one naming
# A pass file's name may not end in these: each pass adds its own extension.
_FILE_EXTENSIONS = (*IMAGE_EXTENSIONS, ".json", ".npy")


def split_passes_out(path: str) -> tuple[str, FramePattern]:
    """``--out`` of ``passes`` as (output folder, names of each frame's files).

    A path with one ``#`` run is a farm's output pattern: its folder holds the passes
    folders and the manifest, its file name names every pass file of a frame, the pass
    file's extension appended (``render/passes/shot_####`` -> ``render/passes/depth/
    shot_0007.exr``, ``.../normal_color/shot_0007.png``, ``.../camera/shot_0007.json``,
    ``render/passes/manifest.json``), as compositors expect one folder per pass. A path
    without ``#`` is a folder, laid out as before (``depth/0007.exr``). Raises
    :class:`FramePatternError` for a pattern naming a file type (``shot_####.exr``: the
    passes write several) or with two ``#`` runs, and for a plain path naming a file.
    """
    path = str(path)
    if not has_frame_run(path):
        name = path.replace("\\", "/").rstrip("/").rpartition("/")[2]
        ext = Path(name).suffix.lower()
        if ext in _FILE_EXTENSIONS:
            raise FramePatternError(f"--out {path!r} names a {ext} file, but the passes "
                                    "write a folder of several file types: give a folder, "
                                    "or a pattern without extension such as shot_####")
        return path, DEFAULT_NAMES
    pattern = parse_frame_pattern(path, "", "--out")
    ext = Path(f"x{pattern.suffix}").suffix.lower()
    if ext in _FILE_EXTENSIONS:
        raise FramePatternError(f"--out {path!r} ends in {ext}, but each pass writes its own "
                                f"file type (.exr, .png, .json): drop the extension, e.g. "
                                f"{pattern.prefix}{'#' * pattern.digits}")
    folder = pattern.folder or "."
    if folder == "/" and path.startswith("//"):  # Blender's "beside the .blend" itself
        folder = "//"
    return folder, FramePattern("", pattern.prefix, pattern.digits, pattern.suffix)


def pass_file(out: Path, sub: str, ext: str, f: int, names: FramePattern = DEFAULT_NAMES
              ) -> Path:
    """The file of frame ``f`` in the pass folder ``sub`` (``depth/0007.exr``)."""
    return Path(out) / sub / f"{names.name(f)}.{ext}"


MAX_BEAUTY_SAMPLES = 4096


@dataclass
class PassOptions:
    """What to make. ``frames``: non-empty and increasing (a range, or a farm's list
    such as 3,5-10)."""

    frames: Sequence[int]
    width: int = 512
    height: int = 512
    engine: str = "fast"
    passes: tuple[str, ...] = DEFAULT_PASSES
    #: the beauty pass's Cycles render (the skin model's training target by default)
    beauty_samples: int = 16
    beauty_denoise: bool = True
    near: float | None = None  # shot depth range of depth16/8; None: measured over the scene
    far: float | None = None
    #: also write skeleton_normalized/####.json (COCO-18, x / width and y / height)
    openpose_normalized: bool = False

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
        if not 1 <= int(self.beauty_samples) <= MAX_BEAUTY_SAMPLES:
            raise ShotError(f"beauty samples {self.beauty_samples} are outside "
                            f"1..{MAX_BEAUTY_SAMPLES}: give e.g. 16 (the skin model's "
                            "training target)")


def pass_files(passes: tuple[str, ...], openpose_normalized: bool = False
               ) -> dict[str, list[tuple[str, str]]]:
    """(sub-folder, extension) of every file each of ``passes`` writes per frame."""
    files = {p: list(FILES[p]) for p in passes}
    if openpose_normalized and "skeleton" in files:
        files["skeleton"].append(SKELETON_NORMALIZED)
    return files


def frame_paths(out: Path, passes: tuple[str, ...], f: int,
                openpose_normalized: bool = False, names: FramePattern = DEFAULT_NAMES
                ) -> list[Path]:
    paths = [pass_file(out, "camera", "json", f, names)]
    for files in pass_files(passes, openpose_normalized).values():
        paths += [pass_file(out, sub, ext, f, names) for sub, ext in files]
    return paths


def frame_done(out: Path, passes: tuple[str, ...], f: int,
               openpose_normalized: bool = False, names: FramePattern = DEFAULT_NAMES) -> bool:
    return all(p.exists() for p in frame_paths(out, passes, f, openpose_normalized, names))


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


def build_manifest(opts: PassOptions, near: float, far: float, geo: ShotGeometry,
                   names: FramePattern = DEFAULT_NAMES) -> dict:
    files = names.text()  # (no folder: each pass has its own)
    return {
        "version": MANIFEST_VERSION,
        "engine": opts.engine,
        "width": opts.width,
        "height": opts.height,
        "passes": list(opts.passes),
        "near": near,
        "far": far,
        "files": {p: [f"{sub}/{files}.{ext}" for sub, ext in subs] for p, subs in
                  pass_files(opts.passes, opts.openpose_normalized).items()},
        **({PATTERN_KEY: files} if names != DEFAULT_NAMES else {}),
        **({"beauty": {"renderer": "CYCLES", "samples": int(opts.beauty_samples),
                       "denoise": bool(opts.beauty_denoise)}}
           if "beauty" in opts.passes else {}),
        "parts": list(encodings.PARTS),
        "conventions": encodings.CONVENTIONS,
        "armature": geo.armature.name if geo.armature else None,
        "bone_map": geo.bone_map,
        "lights": _shot_lights(geo),
        **({"world": {"color": [float(x) for x in geo.world[0]]}}
           if "world_light" in opts.passes else {}),
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
        return [light_at(o).to_dict() for o in scene_lights(scene)] or \
            [training_sun().to_dict()]  # a shot without lights: the training rig's sun
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


def check_manifest(out: Path, manifest: dict) -> None:
    """Refuse to mix outputs made with other settings in one folder."""
    path = out / "manifest.json"
    if not path.exists():
        write_json_atomic(path, manifest)
        return
    old = read_json(path, "passes manifest")
    default = DEFAULT_NAMES.text()
    if old.get(PATTERN_KEY, default) != manifest.get(PATTERN_KEY, default):
        raise ShotError(f"{out} holds passes named {old.get(PATTERN_KEY, default)} (this run: "
                        f"{manifest.get(PATTERN_KEY, default)}): give --out as before, or "
                        "use another output folder")
    shot, new_shot = old.get("shot"), manifest["shot"]
    if shot is not None and shot != new_shot:
        diff = [k for k in new_shot if shot.get(k) != new_shot[k]]
        raise ShotError(f"{out} holds the passes of another shot ({', '.join(diff)} differ: "
                        f"{', '.join(f'{k} {shot.get(k)!r}' for k in diff[:2])}): render "
                        "into another --out folder, or delete it to start over")
    if "beauty" in old and "beauty" in manifest and old["beauty"] != manifest["beauty"]:
        raise ShotError(f"{out} holds a beauty pass rendered with {old['beauty']} (now "
                        f"{manifest['beauty']}): give the same --beauty-samples, or use "
                        "another --out folder")
    for key in ("width", "height", "engine", "near", "far"):
        if old.get(key) != manifest[key] and not (
                isinstance(old.get(key), float) and np.isclose(old[key], manifest[key])):
            raise ShotError(f"{out} holds passes made with {key}={old.get(key)} (now "
                            f"{manifest[key]}): use another --out folder or delete it")
    passes = sorted(set(old.get("passes", [])) | set(manifest["passes"]))
    old_files = old.get("files", {})
    files = {p: list(dict.fromkeys(old_files.get(p, []) + manifest["files"].get(p, [])))
             for p in dict.fromkeys([*old_files, *manifest["files"]])}
    if passes != sorted(old.get("passes", [])) or shot is None or files != old_files:
        old["passes"], old["shot"] = passes, new_shot  # a manifest from before "shot": adopt
        old["files"] = files  # files a newer version adds (depth8) are listed too
        old["conventions"] = {**manifest["conventions"], **old.get("conventions", {})}
        for key in ("lights", "world", "rest_box", "beauty"):  # what passes added to a folder need
            if key in manifest and key not in old:
                old[key] = manifest[key]
        write_json_atomic(path, old)
