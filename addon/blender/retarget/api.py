"""Retarget a clip onto a character inside Blender: the one function the panel,
the CLI and pipeline scripts all call.

    from painted_skin.addon.blender.retarget.api import retarget_clip
    report = retarget_clip("walk.bvh", armature_object)

Reads arrays from Blender, solves with ``core.retarget`` (pure numpy), and only
then touches the scene: one new Action on the target. Any error before that
leaves the scene as it was.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Generator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import bpy
import numpy as np

from ...core.bonemap import BoneMap, auto_map, resolve_map
from ...core.bvh import BvhError, bvh_to_skeleton_motion, parse_bvh_header_fps, validate_bvh
from ...core.retarget.solve import RetargetOptions, resample_basis, retarget
from ...core.rig import humanoid
from ...core.rig.skeleton import Motion, Skeleton
from .armature_io import read_motion, read_skeleton, write_action_steps
from .importers import CLIP_TYPES, ImportFailed, check_file, imported_clip

Progress = Callable[[float, str], None]


class RetargetError(ValueError):
    """Bad input for a retarget; the message names the problem and the fix."""


@dataclass
class RetargetReport:
    """What a retarget did; written as the report JSON."""

    source: str
    target: str
    action: str
    frames: int  # frames baked into the action
    fps: float  # the rate the action was baked at (the scene's, or the clip's own)
    seconds: float
    frame_start: int  # the action's first frame
    root_scale: float
    source_map: dict
    target_map: dict
    pairs: dict[str, list[str]]
    unmapped_target_core: list[str]
    foot_skate_cm_before: float | None
    foot_skate_cm_after: float | None
    warnings: list[str] = field(default_factory=list)
    timings_s: dict[str, float] = field(default_factory=dict)
    source_fps: float = 0.0  # the clip's own rate; != fps when the clip was resampled
    source_frames: int = 0  # the clip's own frame count
    # "source": the torso follows the clip's posture; "character": the character keeps
    # its own rest posture (keep_posture) as an offset on top of the clip's motion.
    posture: str = "source"
    # torso chains solved as a whole: "hips-neck" / "neck-head" -> source, target bones
    chains: dict[str, dict[str, list[str]]] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class SourceMotion:
    """A clip's skeleton and motion, already out of Blender."""

    name: str
    skeleton: Skeleton
    motion: Motion
    warnings: list[str] = field(default_factory=list)


def _choose_action(arm: bpy.types.Object, new_actions: list, clip_action: str | None,
                   clip_name: str) -> list[str]:
    """Assign the clip action to read when a file holds several (glTF, FBX takes)."""
    from bpy_extras import anim_utils

    candidates = [a for a in new_actions
                  if any(fc.data_path.startswith("pose.bones[")
                         for bag in _channelbags(a) for fc in bag.fcurves)]
    names = [a.name for a in candidates]
    ad = arm.animation_data
    if clip_action:
        chosen = next((a for a in candidates if a.name == clip_action), None)
        if chosen is None:
            raise RetargetError(f"clip {clip_name!r} has no animation {clip_action!r}: "
                                f"choose one of {', '.join(names) or '(none)'}")
        ad.action = chosen
        ad.action_slot = anim_utils.action_get_first_suitable_slot(chosen, "OBJECT")
        return []
    if len(candidates) > 1 and ad.action is not None:
        return [f"clip {clip_name!r} holds {len(candidates)} animations "
                f"({', '.join(names)}); used {ad.action.name!r} — pick another with "
                "--clip-action NAME"]
    return []


def _channelbags(action) -> list:
    return [bag for layer in action.layers for strip in layer.strips
            for bag in strip.channelbags]


def load_source(source: str | Path | bpy.types.Object,
                clip_action: str | None = None, parser: bool = True) -> SourceMotion:
    """Read a clip file (BVH/FBX/glTF) or an animated armature in the scene.

    ``clip_action`` names the animation to use when the file holds several. A BVH file
    is read by :func:`read_bvh_source`, without Blender's importer (``parser=False``:
    straight through the importer, for a file the parser has handed back already).
    """
    if isinstance(source, bpy.types.Object):
        if source.type != "ARMATURE":
            raise RetargetError(f"source {source.name!r} is not an armature: pick the mocap "
                                "skeleton")
        if source.animation_data is None or source.animation_data.action is None:
            raise RetargetError(f"source {source.name!r} has no action: import or assign a clip")
        skel = read_skeleton(source)
        return SourceMotion(source.name, skel, read_motion(source, skel))
    path = Path(source)
    if parser and _pure_read(source, clip_action):
        src = read_bvh_source(path)
        if src is not None:
            return src
    try:
        with imported_clip(path) as (arm, new_actions):
            warnings = _choose_action(arm, new_actions, clip_action, path.name)
            skel = read_skeleton(arm)
            motion = read_motion(arm, skel)
    except ImportFailed as e:
        raise RetargetError(str(e)) from None
    if path.suffix.lower() == ".bvh":
        # The BVH importer keys one frame per sample: the file's own rate is the clip's rate.
        motion.fps = snap_fps(parse_bvh_header_fps(path))
    return SourceMotion(path.stem, skel, motion, warnings)


#: Blender shortens bone names to 63 bytes; a clip with longer ones goes through its
#: importer, so a bone map sees the names Blender would give.
_MAX_BONE_NAME = 63


def read_bvh_source(path: str | Path) -> SourceMotion | None:
    """A BVH clip read by the project's parser into the skeleton and motion Blender's
    importer would make (:mod:`..core.bvh_rest`: the same rest bones, tails and pose
    matrices, checked against the importer on real clips): about six times faster
    (0.14 s against 0.86 s for a 2752-frame CMU take), it adds nothing to the scene and
    touches no ``bpy`` data, so the panel runs it off Blender's main thread.

    None for a file whose bone names Blender would shorten (the importer reads those).
    """
    try:
        clip = validate_bvh(check_file(Path(path), CLIP_TYPES, "clip"))
    except (ImportFailed, BvhError) as e:
        raise RetargetError(str(e)) from None
    if clip.renamed:  # a bone map by name cannot tell the two apart: refuse, say which
        base, read_as, line = clip.renamed[0]
        raise RetargetError(f"{clip.source}:{line}: a second joint is named {base!r} (Blender "
                            f"would call it {read_as!r}), so which one plays which part of "
                            "the body is ambiguous. Fix: give every joint its own name")
    if any(len(name.encode()) > _MAX_BONE_NAME for name in clip.names):
        return None
    skel, motion = bvh_to_skeleton_motion(clip)
    motion.fps = snap_fps(clip.fps)
    return SourceMotion(Path(path).stem, skel, motion, list(clip.warnings))


def _timed(work: Callable[[], object], clock: dict[str, float], key: str
           ) -> Callable[[], object]:
    """``work`` that records its own run time in ``clock[key]`` (on whichever thread
    runs it, so a modal caller's pauses between ticks are not counted)."""
    def run() -> object:
        t0 = time.perf_counter()
        try:
            return work()
        finally:  # added up: a clip the parser hands back is then imported
            clock[key] = clock.get(key, 0.0) + time.perf_counter() - t0
    return run


def _pure_read(source: object, clip_action: str | None) -> bool:
    """Whether :func:`load_source` reads ``source`` without ``bpy`` (so off the main
    thread): a BVH file, unless an animation is named (the importer's name checks it)."""
    return (isinstance(source, str | Path) and Path(source).suffix.lower() == ".bvh"
            and not clip_action)


def _stage(work: Callable[[], object], fraction: float, message: str, background: bool
           ) -> Generator[tuple[float, str], None, object]:
    """Run ``work``: inline, or (``background``) on a worker thread while yielding
    ``(fraction, message)`` every 10 ms, so a modal caller's timer ticks keep Blender's
    window live. Only pure work (no ``bpy``) goes to the thread. An error it raises is
    raised here; closing the generator abandons the result (the thread ends on its own
    and nothing it made reaches the scene)."""
    if not background:
        return work()
    result: dict[str, object] = {}

    def run() -> None:
        try:
            result["value"] = work()
        except BaseException as e:  # re-raised on the caller's thread
            result["error"] = e

    done = threading.Event()
    worker = threading.Thread(target=lambda: (run(), done.set()), daemon=True,
                              name=f"painted-skin {message}")
    worker.start()
    while not done.wait(0.01):
        yield fraction, message
    if "error" in result:
        raise result["error"]
    return result["value"]


def snap_fps(fps: float) -> float:
    """BVH frame times are rounded (0.008333 s): 120.005 fps means 120."""
    for nominal in (round(fps), 23.976, 29.97, 59.94):
        if nominal and abs(fps - nominal) / nominal < 2e-4:
            return float(nominal)
    return float(fps)


_REQUIRED = ("hips", "leftUpperLeg", "rightUpperLeg")


def _is_map_file(spec: object) -> bool:
    """As :func:`resolve_map` tells a map file from a preset name."""
    if not isinstance(spec, str | Path):
        return False
    text = str(spec)
    return Path(text).suffix.lower() in (".toml", ".json") or "/" in text or os.sep in text


def _suggestions(skel: Skeleton, joints: list[str]) -> str:
    """`` (auto-detection finds leftUpperLeg = "thigh_l", ...)``, for the joints it finds."""
    try:
        found = auto_map(skel).bones
    except ValueError:
        return ""
    hits = [f'{c} = "{found[c]}"' for c in joints if c in found]
    return f" (auto-detection finds {', '.join(hits)})" if hits else ""


def _map_for(skel: Skeleton, spec: str | Path | BoneMap | None, what: str,
             option: str) -> BoneMap:
    auto = spec in (None, "auto")
    try:
        bmap = auto_map(skel) if auto else resolve_map(spec, skel)
    except (ValueError, OSError) as e:
        raise RetargetError(f"{what} bone map: {e}") from None
    missing = [c for c in _REQUIRED if c not in bmap.bones]
    if not missing:
        return bmap
    joints = ", ".join(missing)
    if auto:
        raise RetargetError(
            f"the {what} does not look like a humanoid: no bone found for {joints}. "
            f"Give a bone map file ({option} map.toml) naming them")
    if isinstance(spec, BoneMap) or _is_map_file(spec):
        given = ("the given bone map" if isinstance(spec, BoneMap)
                 else f"the bone map {Path(spec).name!r}")
        raise RetargetError(
            f"{given} for the {what} has no {joints}: a map must name at least "
            f"{', '.join(_REQUIRED)}; add a line for each under [bones], e.g. "
            f'{missing[0]} = "<bone name>"' + _suggestions(skel, missing))
    raise RetargetError(
        f"preset {spec!r} finds no bone for {joints} in the {what}: choose another preset "
        f"or auto, or give a bone map file ({option} map.toml) naming them"
        + _suggestions(skel, missing))


def _no_motion_warnings(tmap: BoneMap, pairs: dict) -> list[str]:
    """Core joints of the character that get no motion from the clip, said plainly."""
    out = []
    from_clip = [c for c in humanoid.CORE if c in tmap.bones and c not in pairs]
    if from_clip:
        out.append(
            f"the clip has no {', '.join(from_clip)}: those bones of the character get no "
            f"motion and stay at rest (they follow their parent). If the clip does have "
            f"them, give a source bone map (--map map.toml) naming them")
    on_target = [c for c in humanoid.CORE if c not in tmap.bones]
    if on_target:
        out.append(
            f"no bone of the character is mapped to {', '.join(on_target)}: the clip's "
            f"motion for them is dropped. Map them with a bone map file (--target-map "
            f"map.toml) or in the panel's bone map list")
    return out


def retarget_clip(
    source: str | Path | bpy.types.Object,
    target: bpy.types.Object,
    source_map: str | Path | BoneMap | None = "auto",
    target_map: str | Path | BoneMap | None = "auto",
    options: RetargetOptions | None = None,
    action_name: str | None = None,
    set_scene: bool = True,
    progress: Progress | None = None,
    clip_action: str | None = None,
    fps: float | None = None,
    frame_start: int | None = None,
    keep_posture: bool = False,
) -> RetargetReport:
    """Retarget ``source`` onto the armature ``target`` and bake an Action.

    ``*_map``: "auto", a preset name, a map file path or a BoneMap.

    Timing: by default the action is baked at the clip's own rate, one key per clip
    frame, from the clip's own first frame (1 for files), and ``set_scene`` (default
    True: what the CLI and batch jobs want in the fresh scene they build) makes the
    scene's fps and frame range follow the action. To keep a scene's settings, as
    the Retarget button does, pass ``set_scene=False`` with ``fps`` = the scene's
    rate: the solved motion is then resampled to that rate (same duration in
    seconds; rotations slerped, locations lerped between the two nearest clip
    frames, exact where the times coincide) and ``frame_start`` moves the action's
    first key. The report gives both the baked ``fps`` and the clip's
    ``source_fps``.

    ``keep_posture``: the character keeps its own rest posture (a stylised hunch) on
    top of the clip's torso motion instead of taking the clip's; the report's
    ``posture`` says which was used ("character" or "source").
    """
    report = progress or (lambda f, msg: None)
    steps = retarget_steps(source, target, source_map, target_map, options, action_name,
                           set_scene, clip_action, fps, frame_start, keep_posture)
    while True:
        try:
            fraction, message = next(steps)
        except StopIteration as done:
            return done.value
        report(fraction, message)


def retarget_steps(
    source: str | Path | bpy.types.Object,
    target: bpy.types.Object,
    source_map: str | Path | BoneMap | None = "auto",
    target_map: str | Path | BoneMap | None = "auto",
    options: RetargetOptions | None = None,
    action_name: str | None = None,
    set_scene: bool = True,
    clip_action: str | None = None,
    fps: float | None = None,
    frame_start: int | None = None,
    keep_posture: bool = False,
    background: bool = False,
) -> Generator[tuple[float, str], None, RetargetReport]:
    """:func:`retarget_clip` one stage at a time, for a caller with an event loop.

    Yields ``(fraction, message)`` before each stage (read the clip, map the bones,
    solve, bake) and returns the report. Nothing in the scene changes before the bake,
    which yields every ~20 ms too and assigns its Action only at its end: closing the
    generator at any yield leaves the target as it was (an unfinished Action is
    removed), which is how the panel's Cancel keeps a half-written Action out of the file.

    ``background``: the pure stages — reading a BVH file, the solve — run on a worker
    thread, and the generator yields their message again every 10 ms until they end,
    so a long clip never holds Blender's window for the length of a stage. FBX and
    glTF clips are read by Blender's importers, on the caller's thread, in one piece.
    """
    if keep_posture:
        options = replace(options or RetargetOptions(), keep_posture=True)
    if target is None or target.type != "ARMATURE":
        raise RetargetError("no target armature: choose the character's armature")
    # Stage timings exclude the pauses at each yield (a modal caller's timer ticks).
    yield 0.05, "reading clip"
    clock: dict[str, float] = {}
    src, parsed = None, _pure_read(source, clip_action)
    if parsed:  # no bpy: on the worker thread in the panel
        src = yield from _stage(_timed(lambda: read_bvh_source(source), clock, "read"),
                                0.05, "reading clip", background)
    if src is None:  # Blender's importers, or an armature: on this thread
        src = _timed(lambda: load_source(source, clip_action, parser=not parsed), clock,
                     "read")()
    if src.motion.frames < 1:
        raise RetargetError(f"clip {src.name!r} has no frames")
    yield 0.3, "mapping bones"
    t_map = time.perf_counter()
    smap = _map_for(src.skeleton, source_map, "source clip", "--map")
    tgt_skel = read_skeleton(target)
    tmap = _map_for(tgt_skel, target_map, "target character", "--target-map")
    source_fps = float(src.motion.fps)
    bake_fps = source_fps if fps is None else float(fps)
    if not bake_fps > 0 or not np.isfinite(bake_fps):
        raise RetargetError(f"cannot bake at {fps!r} fps: give a positive frame rate")
    if not source_fps > 0:
        raise RetargetError(f"clip {src.name!r} has no frame rate ({source_fps!r} fps)")
    start = src.motion.frame_start if frame_start is None else int(frame_start)
    warnings = list(src.warnings)
    if not any(c.type == "MESH" for c in target.children_recursive):
        warnings.append(f"target {target.name!r} has no mesh: only the armature will move")
    t_mapped = time.perf_counter()
    yield 0.4, "solving"
    basis_now = np.array([np.array(target.pose.bones[b].matrix_basis)
                          for b in tgt_skel.names])

    def solve() -> tuple:
        try:
            result = retarget(src.skeleton, src.motion, smap.bones, tgt_skel, tmap.bones,
                              options, target_basis=basis_now)
        except ValueError as e:
            raise RetargetError(str(e)) from None
        if not (np.isfinite(result.basis_rot).all() and np.isfinite(result.basis_loc).all()):
            raise RetargetError(f"clip {src.name!r} produced non-finite poses: check the file")
        if abs(bake_fps - source_fps) > 1e-6 * source_fps:
            return result, *resample_basis(result.basis_rot, result.basis_loc, result.keyed,
                                           source_fps, bake_fps)
        return result, result.basis_rot, result.basis_loc

    result, basis_rot, basis_loc = yield from _stage(_timed(solve, clock, "solve"), 0.4,
                                                     "solving", background)
    if abs(bake_fps - source_fps) <= 1e-6 * source_fps:
        bake_fps = source_fps
    frames = int(basis_rot.shape[0])
    yield 0.7, "baking action"
    t_baking, paused = time.perf_counter(), 0.0
    bake = write_action_steps(target, tgt_skel, basis_rot, basis_loc, result.keyed, start,
                              action_name or src.name)
    try:  # in slices of ~20 ms: a long take's bake does not hold the window either
        while True:
            try:
                fraction = next(bake)
            except StopIteration as baked:
                action = baked.value
                break
            t_pause = time.perf_counter()
            yield 0.7 + 0.3 * fraction, "baking action"
            paused += time.perf_counter() - t_pause
    finally:  # closed here (a Cancel): the unfinished Action goes with it, now
        bake.close()
    if set_scene:
        scene = bpy.context.scene
        scene.render.fps = max(1, round(bake_fps))
        scene.render.fps_base = scene.render.fps / bake_fps
        scene.frame_start = start
        scene.frame_end = start + frames - 1
    t_bake = time.perf_counter()
    yield 1.0, "done"
    foot = result.foot
    return RetargetReport(
        source=str(source.name if isinstance(source, bpy.types.Object) else source),
        target=target.name,
        action=action.name,
        frames=frames,
        fps=bake_fps,
        seconds=frames / bake_fps,
        frame_start=start,
        root_scale=result.root_scale,
        source_map=smap.to_dict(),
        target_map=tmap.to_dict(),
        pairs={c: list(p) for c, p in result.pairs.items()},
        unmapped_target_core=[c for c in humanoid.CORE if c not in result.pairs],
        foot_skate_cm_before=foot.skate_before_cm if foot else None,
        foot_skate_cm_after=foot.skate_after_cm if foot else None,
        warnings=warnings + _no_motion_warnings(tmap, result.pairs) + result.warnings,
        timings_s={"read": clock["read"], "solve": (t_mapped - t_map) + clock["solve"],
                   "bake": t_bake - t_baking - paused},
        source_fps=source_fps,
        source_frames=src.motion.frames,
        posture="character" if result.keep_posture else "source",
        chains={name: {"source": s, "target": t} for name, (s, t) in result.chains.items()},
    )
