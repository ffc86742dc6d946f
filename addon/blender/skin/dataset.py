"""A character's training set for its skin model: what self-reconstruction learns from.

The character moves through generated motions (``addon/motion/__init__.py``) and windows
of real mocap files, while a camera orbits it (a new random orbit, distance, height and
focal length per clip), under the scene's lights or, every other clip, a random light rig
(``lights="varied"``); every frame gets a
Cycles render (the world fixed, a few samples + denoising) and the fast engine's
passes of the same frame, saved as one ``.npz`` per frame (the passes by name plus
``beauty``), the format ``backend/skin/train.py`` reads. Frames already on disk are kept,
so a re-run (or a longer training) reuses the renders. Held out: the ``wave`` motion,
which the demo and the benchmark play, never enters training.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import bpy
import numpy as np

from ....wire import VALUES_VERSION
from ...core.files.atomic import output_target, replace_atomic, write_json_atomic
from ..passes.beauty import beauty_settings, render_beauty  # noqa: F401 (the trainer's)
from ..passes.geometry import ShotGeometry
from ..passes.render import PassOptions, iter_frames

DATASET_VERSION = 17  # 3: irradiance, 4: specular, 5: albedo, 6: albedo over the pixel filter,
# 7: albedo, irradiance and specular over the film's filter (its true 3 px window),
# 8: close-ups and steeper cameras in the orbits, 9: the film blends across UV seams,
# 3² sub-pixel samples, 10: specular at the material's roughness, 11: albedo and
# roughness through the nodes' arithmetic (glTF's trees), specular at the material's F0,
# 12: a metal's F0 (its base colour), colour attributes that vary, 13: a mesh on a bone
# takes the bone's part, and rigid parts below an empty frame the cameras, 14: a clear coat's
# lobe in the specular pass, and a metal's F0 in colour, 15: light round a smooth-shaded
# terminator as Cycles' shadow rays take it, 16: specular with height-correlated masking and
# the dielectric Fresnel curve, as Cycles evaluates its GGX, 17: 4² sub-pixel samples. A
# change of what the passes' values mean raises wire's VALUES_VERSION as well (models record
# it; a runtime names an older one); a denser sampling of the same filter does not (a model
# of the 3² passes paints the 4² ones better, and flickers less).
# What the skin model reads (skeleton is not needed: the geometry is all here).
PASSES = ("depth", "normal", "mask", "parts", "motion", "rest_position", "uv",
          "normal_world", "view_dir", "light_visibility", "irradiance", "specular", "albedo")
#: Mocap files a clip may name instead of a generated motion (its seed is then the
#: window's first frame, at the set's fps).
MOTION_SUFFIXES = (".bvh", ".fbx", ".glb", ".gltf")
LIGHT_RIGS = ("scene", "varied")
# (motion kind, seed): the training motions; "wave" is kept out for evaluation. The
# range-of-motion takes ("rom", as a mocap session's calibration clip) show the arms
# raised, lit from above, which no gait shows: without them the demo's wave painted the
# raised forearm in the shirt's shading. Each seed is a new variant and a new camera
# orbit: a model fitted to 15 clips read 3.5 dB better on its training frames than on
# held-out motion under the same cameras, so the set grew in clips, not in steps.
TRAIN_CLIPS = (("walk", 0), ("run", 0), ("jump", 0), ("turn", 0), ("sit", 0),
               ("walk", 1), ("run", 1), ("jump", 1), ("turn", 1), ("sit", 1),
               ("walk", 2), ("turn", 2), ("rom", 0), ("rom", 1), ("rom", 2),
               ("walk", 3), ("walk", 4), ("run", 2), ("run", 3), ("jump", 2), ("sit", 2),
               ("turn", 3), ("rom", 3), ("rom", 4), ("rom", 5), ("rom", 6), ("rom", 7),
               ("rom", 8))
HELD_OUT_CLIPS = (("wave", 0),)
#: Real mocap no training set of ours holds (``bench skin``'s real clip): where the
#: checkout has ../shared/data, train-skin holds out its middle beside the wave, so the
#: report's held-out figure includes real motion as the bench does.
HELD_OUT_REAL = "bvh/cmu_3dsmax_friendly/131_01.bvh"
# Stored at this precision: float16 where 1e-3 is plenty, float32 for UV and rest
# position (a 1024² texture needs better than float16's 5e-4 near 1.0).
_FLOAT32 = ("uv", "rest_position", "depth")
_HALF_MAX = float(np.finfo(np.float16).max)

Progress = Callable[[int, int], None]  # (done, total)


class DatasetError(ValueError):
    """The character cannot be learned as given; the message says why and the fix."""


@dataclass(frozen=True)
class DatasetSpec:
    """Everything that makes the renders: a different spec is a different folder."""

    size: int = 128
    frames_per_clip: int = 48
    clips: tuple[tuple[str, int], ...] = TRAIN_CLIPS
    samples: int = 16
    seed: int = 0
    fps: float = 24.0
    # "scene": every clip under the scene's lights; "varied": every other clip under a
    # random rig instead (1-3 suns and maybe a lamp, any side, tinted), so the model
    # learns to paint by the irradiance pass rather than remember one rig.
    lights: str = "scene"

    def key(self, fingerprint: dict) -> str:
        text = json.dumps({"v": DATASET_VERSION, "spec": asdict(self), "fp": fingerprint},
                          sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


#: The training cameras' range: elevation (degrees, low to high angle) and distance (in
#: character heights: 1 frames the whole body). A share of the orbits are close-ups, and
#: a share look from steeper angles (the rest from near eye level, as most shots do).
ELEVATION_DEG = (-8.0, 32.0)
STEEP_ELEVATION_DEG = ((-22.0, -8.0), (32.0, 50.0))  # from below, from above
DISTANCE = (0.8, 1.7)
CLOSE_UP_DISTANCE = (0.35, 0.7)
CLOSE_UP_SHARE = 0.3
STEEP_SHARE = 0.3


@dataclass
class Orbit:
    """A camera circling the character over one clip."""

    azimuth0: float
    turn: float  # radians over the clip
    elevation: float
    distance: float  # in character heights
    lens: float  # mm
    aim_height: float  # fraction of the height above the feet

    @classmethod
    def random(cls, rng: np.random.Generator) -> Orbit:
        """A random orbit, a close-up (the head and chest, or a hand, filling the
        frame) in :data:`CLOSE_UP_SHARE` of them and from a steep angle in
        :data:`STEEP_SHARE`. A network paints well only at the scales and angles it
        trained on: without close-ups its texture detail blurred on a head-and-shoulders
        shot."""
        close, steep, above = rng.uniform(size=3) < (CLOSE_UP_SHARE, STEEP_SHARE, 0.5)
        elevation = STEEP_ELEVATION_DEG[int(above)] if steep else ELEVATION_DEG
        return cls(azimuth0=float(rng.uniform(0, 2 * math.pi)),
                   turn=float(rng.uniform(-1, 1) * math.radians(150)),
                   elevation=float(math.radians(rng.uniform(*elevation))),
                   distance=float(rng.uniform(*(CLOSE_UP_DISTANCE if close else DISTANCE))),
                   lens=float(rng.uniform(30, 85)),
                   aim_height=float(rng.uniform(0.3, 0.9 if close else 0.75)))


@dataclass(frozen=True)
class RigLight:
    """One light of a random training rig (world space, pointing at the character)."""

    type: str  # SUN or POINT
    azimuth: float  # radians about Z, where the light comes from
    elevation: float  # radians above the horizon
    color: tuple[float, float, float]
    energy: float  # a sun's strength, a lamp's watts
    distance: float = 0.0  # a lamp's, in character heights

    @classmethod
    def random_rig(cls, rng: np.random.Generator) -> list[RigLight]:
        """A key from any side (behind the character as often as in front), maybe a
        fill and a rim, maybe a lamp; tints from warm to cool."""

        def tint(sat: float) -> tuple[float, float, float]:
            hue = rng.uniform(0, 1, 3)
            c = 1.0 - sat * hue
            return tuple(float(x) for x in c / c.max())

        key_az = rng.uniform(0, 2 * math.pi)
        rig = [cls("SUN", key_az, rng.uniform(math.radians(10), math.radians(75)),
                   tint(rng.uniform(0, 0.4)), float(rng.uniform(1.5, 5.0)))]
        if rng.random() < 0.6:
            side = rng.uniform(0.5, 1.5) * rng.choice([-1, 1]) * math.pi / 2
            rig.append(cls("SUN", key_az + side, rng.uniform(0, math.radians(50)),
                           tint(rng.uniform(0, 0.6)), float(rng.uniform(0.3, 1.5))))
        if rng.random() < 0.4:
            rig.append(cls("SUN", key_az + math.pi + rng.uniform(-0.6, 0.6),
                           rng.uniform(math.radians(5), math.radians(45)),
                           tint(rng.uniform(0, 0.5)), float(rng.uniform(0.5, 3.0))))
        if rng.random() < 0.3:
            rig.append(cls("POINT", rng.uniform(0, 2 * math.pi),
                           rng.uniform(math.radians(-10), math.radians(60)),
                           tint(rng.uniform(0, 0.6)), float(rng.uniform(50, 400)),
                           float(rng.uniform(0.8, 2.0))))
        return rig


def is_motion_file(kind: str) -> bool:
    return kind.lower().endswith(MOTION_SUFFIXES)


def motion_windows(paths: list[str] | tuple[str, ...], frames_per_clip: int, fps: float,
                   per_file: int = 3) -> tuple[tuple[str, int], ...]:
    """Clips of real mocap: up to ``per_file`` windows of ``frames_per_clip`` frames
    spread over each file (a BVH's length is read from its header; other formats get
    one window from the start)."""
    out: list[tuple[str, int]] = []
    for p in paths:
        path = str(Path(p).resolve())
        n = 1
        if path.lower().endswith(".bvh"):
            seconds = _bvh_seconds(Path(path))
            n = int(max(1, min(per_file, seconds * fps // max(frames_per_clip, 1))))
            span = max(seconds * fps - frames_per_clip, 0)
            out += [(path, int(span * k / max(n - 1, 1))) for k in range(n)]
        else:
            out.append((path, 0))
    return tuple(out)


def middle_window(path: str | Path, frames: int, fps: float) -> tuple[str, int]:
    """The clip of ``frames`` frames from the middle of a BVH file (the start of a take
    is often a standing pose)."""
    span = max(_bvh_seconds(Path(path)) * fps - frames, 0)
    return str(Path(path).resolve()), int(span / 2)


def _bvh_seconds(path: Path) -> float:
    frames, frame_time = 0, 1.0 / 30.0
    with path.open("r", errors="replace") as fh:
        for line in fh:
            low = line.strip().lower()
            if low.startswith("frames:"):
                frames = int(low.split(":")[1])
            elif low.startswith("frame time:"):
                frame_time = float(low.split(":")[1])
                break
    return frames * frame_time


def _add_rig(scene: bpy.types.Scene, rig: list[RigLight], centre: np.ndarray,
             height: float, made: list[bpy.types.Object]) -> None:
    """Link ``rig``'s lights into ``scene`` (a lamp placed about the character), each
    appended to ``made`` as soon as it exists (the caller removes them, even midway)."""
    from mathutils import Vector

    for k, li in enumerate(rig):
        data = bpy.data.lights.new(f"SkinRig{k}", li.type)
        data.energy, data.color = li.energy, li.color
        if li.type == "SUN":
            data.angle = math.radians(2.0)
        else:
            data.shadow_soft_size = 0.05
        ob = bpy.data.objects.new(f"SkinRig{k}", data)
        towards = np.array([math.cos(li.elevation) * math.sin(li.azimuth),
                            -math.cos(li.elevation) * math.cos(li.azimuth),
                            math.sin(li.elevation)])
        ob.location = Vector((centre + towards * max(li.distance, 1.0) * height).tolist())
        ob.rotation_mode = "QUATERNION"
        ob.rotation_quaternion = Vector((-towards).tolist()).to_track_quat("-Z", "Y")
        made.append(ob)
        scene.collection.objects.link(ob)


def character_meshes(arm: bpy.types.Object) -> list[bpy.types.Object]:
    """The meshes the armature deforms, or that hang below it: parented to it, to one of
    its bones, or to an empty on a bone (glTF's rigid parts: a robot's head and torso)."""
    below = set(arm.children_recursive)
    out = [o for o in bpy.data.objects if o.type == "MESH" and (
        o in below or any(m.type == "ARMATURE" and m.object == arm for m in o.modifiers))]
    return sorted(out, key=lambda o: o.name)


def character_fingerprint(arm: bpy.types.Object) -> dict:
    """What a model is tied to: the character's meshes by name, vertex and face count.
    A model trained on one character refuses another (its texture would be garbage)."""
    meshes = character_meshes(arm)
    if not meshes:
        raise DatasetError(f"armature {arm.name!r} deforms no mesh: a skin model paints a "
                           "mesh; parent the character's meshes to it (Armature modifier)")
    return {"meshes": [[o.name, len(o.data.vertices), len(o.data.polygons)] for o in meshes]}


def uv_report(arm: bpy.types.Object) -> list[str]:
    """Meshes without a UV map (the model falls back to their rest positions)."""
    return [o.name for o in character_meshes(arm) if not o.data.uv_layers]


def albedo_report(arm: bpy.types.Object) -> list[str]:
    """Materials of the character the albedo pass reads only approximately."""
    from ..passes.materials import albedo_source, material_wearers

    meshes = character_meshes(arm)
    wearers = material_wearers(meshes)
    mats = {s.material for o in meshes for s in o.material_slots}
    cache: dict = {}
    return sorted(m.name for m in mats if m is not None
                  and not albedo_source(m, cache, wearers.get(m.name, ())).exact)


def place_camera(cam: bpy.types.Object, orbit: Orbit, t: float, centre: np.ndarray,
                  height: float) -> None:
    az = orbit.azimuth0 + orbit.turn * t
    el = orbit.elevation
    # Distance that frames the whole body at this focal length, times the orbit's factor.
    fov = 2 * math.atan(18.0 / orbit.lens)  # 36 mm sensor width
    dist = orbit.distance * height / (2 * math.tan(fov / 2)) * 1.15
    target = centre + np.array([0.0, 0.0, (orbit.aim_height - 0.5) * height])
    eye = target + dist * np.array([math.cos(el) * math.sin(az), -math.cos(el) * math.cos(az),
                                    math.sin(el)])
    from mathutils import Vector

    cam.location = Vector(eye.tolist())
    cam.rotation_mode = "QUATERNION"
    cam.rotation_quaternion = (Vector(target.tolist()) - cam.location).to_track_quat("-Z", "Y")
    cam.data.lens = orbit.lens


def key_camera(cam: bpy.types.Object, frame: int) -> None:
    cam.keyframe_insert("location", frame=frame)
    cam.keyframe_insert("rotation_quaternion", frame=frame)
    cam.data.keyframe_insert("lens", frame=frame)


#: Frames either side of a frame that the follow camera's aim averages over (at 24 fps,
#: a third of a second): it follows the body, not a raised arm's swing.
FOLLOW_SMOOTHING = 4


def follow_camera(scene: bpy.types.Scene, arm: bpy.types.Object, orbit: Orbit,
                  frames: list[int], name: str) -> bpy.types.Object:
    """A new camera keyed on ``frames`` (and one frame each side, for the motion pass)
    to keep the character framed from ``orbit``'s side as it moves: a shot's view
    from behind or close up, whatever the clip does.

    It moves as a camera operator's would: at one distance, framing the tallest pose
    of the shot, aimed at the body's centre averaged over a few frames. Framed anew
    each frame, a raised arm dollied it back and swung it aside within a frame (0.3 m
    in a 24 fps wave), a jump no shot has and one the temporal metrics read as the
    whole character occluded."""
    data = bpy.data.cameras.new(name)
    data.sensor_width = 36.0
    cam = bpy.data.objects.new(name, data)
    scene.collection.objects.link(cam)
    meshes = character_meshes(arm)
    keyed = [frames[0] - 1] + list(frames) + [frames[-1] + 1]
    centres, heights = [], []
    for f in keyed:
        scene.frame_set(f)
        centre, height = body_centre(meshes)
        centres.append(centre)
        heights.append(height)
    height, k = max(heights), FOLLOW_SMOOTHING
    for i, f in enumerate(keyed):
        aim = np.mean(centres[max(0, i - k):i + k + 1], axis=0)
        place_camera(cam, orbit, 0.0, aim, height)
        key_camera(cam, f)
    return cam


def remove_camera(cam: bpy.types.Object) -> None:
    """Delete a camera :func:`follow_camera` made, its data too."""
    data = cam.data
    bpy.data.objects.remove(cam)
    bpy.data.cameras.remove(data)


def body_centre(meshes: list[bpy.types.Object]) -> tuple[np.ndarray, float]:
    """Centre and height of the evaluated character's bounding box (world)."""
    dg = bpy.context.evaluated_depsgraph_get()
    pts = []
    for ob in meshes:
        ev = ob.evaluated_get(dg)
        mw = np.array(ev.matrix_world)
        box = np.array([list(c) for c in ev.bound_box], np.float64)
        pts.append(box @ mw[:3, :3].T + mw[:3, 3])
    p = np.concatenate(pts)
    lo, hi = p.min(0), p.max(0)
    return (lo + hi) / 2, float(hi[2] - lo[2])


def frame_file(folder: Path, clip: int, frame: int) -> Path:
    return folder / f"{clip:02d}_{frame:04d}.npz"


def _save_frame(path: Path, arrays: dict[str, np.ndarray], beauty: np.ndarray) -> None:
    data = {}
    for name in PASSES:
        a = np.asarray(arrays[name])
        if a.dtype == bool:
            a = a.astype(np.uint8) * np.uint8(255)
        elif a.dtype.kind == "f" and name in _FLOAT32:
            a = a.astype(np.float32)
        elif a.dtype.kind == "f":  # beyond half's range (a motion vector to a point
            # crossing the camera's plane): its largest value, not an overflow
            a = np.clip(a, -_HALF_MAX, _HALF_MAX).astype(np.float16)
        data[name] = a
    data["beauty"] = beauty
    target = output_target(path, "training frame")
    fd, tmp = tempfile.mkstemp(suffix=".npz", dir=target.parent, prefix=".frame-")
    try:
        with os.fdopen(fd, "wb") as fh:
            np.savez_compressed(fh, **data)
        replace_atomic(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@dataclass
class DatasetResult:
    folder: Path
    frames: int
    rendered: int
    fingerprint: dict
    without_uv: list[str] = field(default_factory=list)


def build_dataset(arm: bpy.types.Object, folder: Path, spec: DatasetSpec,
                  progress: Progress | None = None,
                  cancelled: Callable[[], bool] | None = None) -> DatasetResult:
    """Render ``spec``'s clips of the character ``arm`` into ``folder`` (kept frames
    are skipped). The scene keeps its lights and world: they are the training lighting."""
    from ... import motion
    from ..retarget.api import retarget_clip

    scene = bpy.context.scene
    fingerprint = character_fingerprint(arm)
    folder.mkdir(parents=True, exist_ok=True)
    meta = {"version": DATASET_VERSION, "pass_version": VALUES_VERSION, "spec": asdict(spec),
            "fingerprint": fingerprint, "passes": list(PASSES)}
    write_json_atomic(folder / "dataset.json", meta)
    meshes = character_meshes(arm)
    cam_data = bpy.data.cameras.new("SkinDatasetCamera")
    cam_data.sensor_width = 36.0
    cam = bpy.data.objects.new("SkinDatasetCamera", cam_data)
    scene.collection.objects.link(cam)
    old_camera, old_range = scene.camera, (scene.frame_start, scene.frame_end)
    scene.camera = cam
    total, done, rendered = len(spec.clips) * spec.frames_per_clip, 0, 0
    rng = np.random.default_rng(spec.seed)
    orbits = [Orbit.random(rng) for _ in spec.clips]
    rig_rng = np.random.default_rng([spec.seed, 7])
    rigs = [RigLight.random_rig(rig_rng) if spec.lights == "varied" and ci % 2 else None
            for ci in range(len(spec.clips))]
    own_lights = [(o, o.hide_render) for o in scene.objects if o.type == "LIGHT"]
    old_fps = scene.render.fps, scene.render.fps_base
    scene.render.fps, scene.render.fps_base = round(spec.fps), round(spec.fps) / spec.fps
    try:
        with tempfile.TemporaryDirectory(prefix="painted-skin-clips-") as tmp:
            for ci, ((kind, seed), orbit) in enumerate(zip(spec.clips, orbits, strict=True)):
                todo = [f for f in range(1, spec.frames_per_clip + 1)
                        if not frame_file(folder, ci, f).is_file()]
                if not todo:
                    done += spec.frames_per_clip
                    if progress:
                        progress(done, total)
                    continue
                if is_motion_file(kind):  # real mocap from frame ``seed`` on
                    retarget_clip(kind, arm, set_scene=False, fps=spec.fps,
                                  frame_start=1 - seed)
                else:
                    clip = motion.write_clip(Path(tmp) / f"{kind}_{seed}.bvh", kind,
                                             frames=spec.frames_per_clip, fps=spec.fps,
                                             seed=seed)
                    retarget_clip(clip, arm)
                scene.frame_start, scene.frame_end = 1, spec.frames_per_clip
                cam.animation_data_clear()
                cam_data.animation_data_clear()
                for f in range(1, spec.frames_per_clip + 1):
                    scene.frame_set(f)
                    centre, height = body_centre(meshes)
                    place_camera(cam, orbit, (f - 1) / max(spec.frames_per_clip - 1, 1),
                                  centre, height)
                    key_camera(cam, f)
                done += spec.frames_per_clip - len(todo)

                def tick() -> None:
                    nonlocal done
                    done += 1
                    if progress:
                        progress(done, total)

                rig_lights: list[bpy.types.Object] = []
                try:
                    if rigs[ci] is not None:
                        scene.frame_set(1)
                        for o, _ in own_lights:
                            o.hide_render = True
                        _add_rig(scene, rigs[ci], *body_centre(meshes), rig_lights)
                    rendered += _render_clip(scene, folder, ci, spec, todo, cancelled, tick)
                finally:
                    for o in rig_lights:
                        data = o.data
                        bpy.data.objects.remove(o)
                        bpy.data.lights.remove(data)
                    for o, hidden in own_lights:
                        o.hide_render = hidden
    finally:
        scene.camera = old_camera
        scene.frame_start, scene.frame_end = old_range
        scene.render.fps, scene.render.fps_base = old_fps
        bpy.data.objects.remove(cam)
        bpy.data.cameras.remove(cam_data)
    return DatasetResult(folder, total, rendered, fingerprint, uv_report(arm))


def _render_clip(scene: bpy.types.Scene, folder: Path, ci: int, spec: DatasetSpec,
                 todo: list[int], cancelled: Callable[[], bool] | None,
                 tick: Callable[[], None]) -> int:
    """Passes and beauty of one clip's frames ``todo`` (its motion, camera and lights
    set); ``tick`` after each frame saved. Returns the frames rendered."""
    geo = ShotGeometry(scene, spec.size, spec.size)
    opts = PassOptions(frames=range(1, spec.frames_per_clip + 1), width=spec.size,
                       height=spec.size, engine="fast", passes=PASSES)
    passes = {f: arrays for f, _, arrays, _ in iter_frames(scene, geo, opts, todo)}
    with beauty_settings(scene, spec.size, spec.samples):
        for f in todo:
            if cancelled is not None and cancelled():
                raise KeyboardInterrupt
            beauty = _render_unless_stopped(scene, f, folder, cancelled)
            _save_frame(frame_file(folder, ci, f), passes[f], beauty)
            tick()
    return len(todo)


def _render_unless_stopped(scene: bpy.types.Scene, frame: int, folder: Path,
                           cancelled: Callable[[], bool] | None) -> np.ndarray:
    """One beauty frame. Cycles swallows a Ctrl-C raised while it renders (it prints
    the KeyboardInterrupt and goes on), so a stop asked for meanwhile is honoured here:
    the frame, maybe cut short, is dropped and the stop raised again."""
    try:
        beauty = render_beauty(scene, frame, folder)
    except Exception:
        if cancelled is not None and cancelled():
            raise KeyboardInterrupt from None
        raise
    if cancelled is not None and cancelled():
        raise KeyboardInterrupt
    return beauty


def dataset_folder(cache: Path, spec: DatasetSpec, fingerprint: dict) -> Path:
    return cache / spec.key(fingerprint)


def check_character(arm: bpy.types.Object | None, source: str) -> bpy.types.Object:
    if arm is None or arm.type != "ARMATURE":
        raise DatasetError(f"{source} has no armature: a skin model learns a rigged "
                           "character (mesh + armature)")
    character_fingerprint(arm)
    return arm
