"""Restyle a shot through a backend: passes computed in memory, streamed over
ZeroMQ, each returned frame written as ``OUT/restyled/####.png``.

    from painted_skin.addon.blender.restyle.loop import RestyleRequest, restyle_shot
    restyle_shot(bpy.context.scene, RestyleRequest.make(
        "/tmp/shot", url="tcp://127.0.0.1:5555", frames=range(1, 49), size=512,
        pipeline="echo", seed=7))

The files on disk are the source of truth: a frame whose PNG exists is not
computed or sent again, so a re-run (or a farm chunk) resumes. This is the headless
loop, blocking on the client's ``zmq.Poller`` (in the bpy module timers never fire);
the folder's layout and rules are in :mod:`.output`, the local backend in
:mod:`.local_backend`, the operators and panel in :mod:`.ui`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import bpy
import numpy as np

from ....wire import CANONICAL_PASSES, CONTROL_PASSES, WIRE_PASSES, to_wire
from ...core.files.atomic import check_writable, write_npy_atomic
from ...core.files.frame_ranges import check_in_scene
from ..client.backend_client import BackendClient, BackendError, Result
from ..client.local_backend import (  # noqa: F401 (re-exported: the CLI, the demo)
    backend_python,
    launch_local_backend,
    restart_local_if_dead,
    start_local_backend,
    stop_local_backend,
)
from ..passes.geometry import ShotError, ShotGeometry, find_armature, render_meshes
from ..passes.render import DEFAULT_PASSES, PassOptions, iter_frames, shot_depth_range
from ..preferences import PS_AddonPreferences, addon_package, preferences  # noqa: F401 (API)
from .output import (  # noqa: F401 (re-exported: the CLI, farm recipes, tests)
    CARRY,
    MODEL_KEY,
    RESTYLED,
    SETTINGS_FILE,
    SHOT_KEYS,
    STATELESS_PIPELINES,
    ChainBroken,
    ModelChanged,
    carry_path,
    check_chain,
    check_model,
    check_settings,
    cross_frame_mode,
    frame_done,
    is_chained,
    is_temporal,
    result_path,
    shot_settings,
)
from .request import RequestError, RestyleRequest  # noqa: F401 (re-exported: the API)

Progress = Callable[[int, int, int], None]  # (done, total, frame)


class CarrySource:
    """``carry_for`` of a shot (see :meth:`BackendClient.start_shot`): frame f - 1's
    restyled RGB (its PNG), final latents (its ``carry`` file) and depth (kept from
    the passes sent, or computed again: the same arrays), so a resumed run or a
    restarted backend continues a temporal chain exactly. None where f - 1 has no
    carry (not temporal, not done, or a fresh start)."""

    KEEP = 8  # depths of the most recent frames sent

    def __init__(self, scene: bpy.types.Scene, out: Path, width: int, height: int,
                 engine: str = "fast", options: dict | None = None,
                 first: int | None = None, pipeline: str | None = None) -> None:
        self.scene, self.out, self.size, self.engine = scene, Path(out), (width, height), engine
        self.depths: dict[int, np.ndarray] = {}
        self.cross_frame = cross_frame_mode(options)
        self.first = first  # the chain's first frame: the "first" anchor
        # A temporal pipeline without latents (the skin model) carries RGB and depth only.
        self.temporal = pipeline is not None and is_temporal(pipeline, options)

    def _passes(self, f: int) -> dict[str, np.ndarray]:
        """Frame f's wire passes, computed again (the same arrays as when first sent)."""
        frame_now = self.scene.frame_current
        try:
            _, arrays = next(shot_frames(self.scene, [f], *self.size, self.engine))
        finally:
            self.scene.frame_set(frame_now)
        self.depths[f] = arrays["depth"]
        return arrays

    def primers(self, f: int) -> list[tuple[int, dict[str, np.ndarray]]]:
        """``primers_for``: with cross-frame attention a new backend session must see
        the anchor again before frame f: the run's first frame ("first"; then exact),
        or frame f - 1 with its own carry ("previous"; its own anchor is not re-run, so
        f attends to a close, not identical, copy of it)."""
        anchor = {"first": self.first, "previous": f - 1}.get(self.cross_frame or "")
        if anchor is None or anchor >= f or not frame_done(self.out, anchor):
            return []
        return [(anchor, {**self._passes(anchor), **(self(anchor) or {})})]

    def remembering(self, frames: Iterator[tuple[int, dict]]) -> Iterator[tuple[int, dict]]:
        """Pass ``frames`` on, keeping the last few frames' depth."""
        for f, arrays in frames:
            self.depths[f] = arrays["depth"]
            while len(self.depths) > self.KEEP:
                del self.depths[min(self.depths)]
            yield f, arrays

    def __call__(self, f: int) -> dict[str, np.ndarray] | None:
        from ..passes.image_io import read_image

        prev = f - 1
        lat = carry_path(self.out, prev)
        if not (frame_done(self.out, prev) and (lat.exists() or self.temporal)):
            return None
        try:
            latents = np.load(lat, allow_pickle=False) if lat.exists() else None
            rgb = read_image(result_path(self.out, prev))[..., :3]
        except (OSError, ValueError):
            return None  # damaged: the chain starts afresh here, as before carries existed
        depth = self.depths.get(prev)
        if depth is None:
            depth = self._passes(prev)["depth"]
        carry = {"carry_rgb": np.ascontiguousarray(rgb, np.uint8), "carry_depth": depth}
        if latents is not None:
            carry["carry_latents"] = latents
        return carry


# -- passes on the wire ------------------------------------------------------------------------

def wire_arrays(arrays: dict[str, np.ndarray], skeleton: tuple | None,
                width: int, height: int) -> dict[str, np.ndarray]:
    """The passes of one frame in their wire dtypes, in wire order (``wire.passes``:
    depth +inf where empty, normals in camera space, motion prev (u, v), next (u, v)
    in pixels, mask and light visibility 0/255); the skeleton is the OpenPose drawing,
    black when the shot has none."""
    out = {}
    for name, p in WIRE_PASSES.items():
        if name == "skeleton":
            out[name] = (to_wire(name, skeleton[0]) if skeleton is not None
                         else np.zeros(p.shape(height, width), p.dtype))
        elif name in arrays:
            out[name] = to_wire(name, arrays[name])
    return out


# Pipelines that paint from the canonical surface passes get them too (they cost ~130 ms
# a 512² frame, so the others do not).
PIPELINE_PASSES = {"skin": CANONICAL_PASSES}


def wire_passes(pipeline: str) -> tuple[str, ...]:
    """The passes a frame of ``pipeline`` carries."""
    return CONTROL_PASSES + PIPELINE_PASSES.get(pipeline, ())


def shot_frames(scene: bpy.types.Scene, frames: list[int], width: int, height: int,
                engine: str = "fast", passes: tuple[str, ...] = DEFAULT_PASSES,
                geometry: ShotGeometry | None = None
                ) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
    """(frame, wire arrays) for ``frames``, computed lazily one frame at a time;
    ``geometry``: the shot's reader to use (a render engine's, on its depsgraph)."""
    if not frames:
        return
    geo = geometry or ShotGeometry(scene, width, height)
    opts = PassOptions(frames=range(min(frames), max(frames) + 1), width=width, height=height,
                       engine=engine, passes=passes)
    opts.validate()
    for f, _, arrays, skel in iter_frames(scene, geo, opts, frames):
        yield f, wire_arrays(arrays, skel, width, height)


def pipeline_options(scene: bpy.types.Scene, pipeline: str, options: dict) -> dict:
    """What a pipeline needs from the scene besides the passes: the skin model is tied
    to one character, so its OPEN carries the scene character's fingerprint (a model
    trained for another character is refused before any frame)."""
    if pipeline != "skin" or "character" in options:
        return options
    from ..skin.dataset import character_fingerprint

    arm = find_armature(render_meshes(scene))
    if arm is None:
        raise ShotError("the skin pipeline paints a rigged character: the scene's meshes are "
                        "deformed by no armature")
    return {**options, "character": character_fingerprint(arm)}


def lighting_note(scene: bpy.types.Scene) -> str | None:
    """What to tell a user whose shot has no light of its own (a retargeted file): it is
    painted under the skin training's sun, as the model learnt; None when it has one."""
    from ..passes.geometry import scene_lights

    if scene_lights(scene):
        return None
    return ("the shot has no light: it is painted under the skin training's sun (add a "
            "light to the scene to light it yourself)")


def shot_options(scene: bpy.types.Scene, out: Path, width: int, height: int,
                 options: dict | None) -> dict:
    """``options`` plus the shot's depth range (``depth_near``/``depth_far``).

    The backend turns depth into its control image with these; without them it
    would fix them from the first frame *it* sees, so a resumed, reconnected or
    failed-over shot would be quantised differently and jump. The range comes
    from the whole scene range (like the passes' depth16), or from this
    folder's settings file when a run already fixed it.
    """
    options = dict(options or {})
    if "depth_near" in options and "depth_far" in options:
        return options
    path = out / SETTINGS_FILE
    try:
        old = json.loads(path.read_text()) if path.exists() else {}
    except (OSError, json.JSONDecodeError):
        old = {}  # a damaged file is told by the settings check that follows
    old = old.get("options") if isinstance(old, dict) else None
    old = old if isinstance(old, dict) else {}
    if "depth_near" in old and "depth_far" in old:
        near, far = old["depth_near"], old["depth_far"]
    else:
        frame_now = scene.frame_current
        try:
            geo = ShotGeometry(scene, width, height)
            near, far = shot_depth_range(geo, range(scene.frame_start, scene.frame_end + 1))
        finally:
            scene.frame_set(frame_now)
    options.setdefault("depth_near", float(near))
    options.setdefault("depth_far", float(far))
    return options


def restyle_shot(scene: bpy.types.Scene, request: RestyleRequest, *,
                 client: BackendClient | None = None, progress: Progress | None = None,
                 cancelled: Callable[[], bool] | None = None,
                 on_dead: Callable[[], None] | None = None) -> dict:
    """Restyle ``request``'s frames (default: the scene range) into
    ``request.out/restyled``; blocking. Frames already on disk are skipped. A temporal
    shot's chain begins at ``request.chain_start`` (default: its first frame); a run that
    would begin it elsewhere is refused (:func:`check_chain`), so farm chunks given the
    shot's first frame paint what one run would. ``client``: a connected client to reuse
    (else one for ``request.url``). Returns a summary (frames, written, skipped, dropped,
    reconnects, seconds, and the backend's ``notice`` on the model where it has one)."""
    r = request.checked()
    out = check_writable(r.out, "restyle output folder")
    width, height = r.size
    frames = list(r.frames if r.frames is not None else range(scene.frame_start,
                                                               scene.frame_end + 1))
    if frames:  # the same check as the passes': frames within the scene's range
        check_in_scene(range(min(frames), max(frames) + 1), scene.frame_start, scene.frame_end)
    options = pipeline_options(scene, r.pipeline, shot_options(scene, out, width, height,
                                                               dict(r.options)))
    settings = shot_settings(r.pipeline, r.prompt, r.negative_prompt, r.seed, width, height,
                             options, r.refs)
    start = frames[0] if r.chain_start is None or not frames else r.chain_start
    check_chain(out, frames, start, r.pipeline, options)  # before anything is written
    with check_settings(out, settings) as run_lock:  # held while this run writes it
        todo = [f for f in frames if not frame_done(out, f)]
        done = len(frames) - len(todo)
        summary = {"frames": len(frames), "skipped": done, "written": 0, "dropped": 0,
                   "reconnects": 0, "seconds": 0.0,
                   "out": str(result_path(out, frames[0]).parent if frames else out / RESTYLED)}
        if progress:
            progress(done, len(frames), frames[0] if frames else 0)
        if not todo:
            return summary
        result_path(out, todo[0]).parent.mkdir(parents=True, exist_ok=True)
        own = client is None
        if client is None:
            client = BackendClient(r.url, keys=r.keys, timeout_s=r.timeout_s, on_dead=on_dead)
        frame_now = scene.frame_current
        t0 = time.monotonic()
        carry = CarrySource(scene, out, width, height, r.engine, options, start, r.pipeline)

        def on_result(r: Result) -> None:
            nonlocal done
            write_result(out, r, width, height)
            done += 1
            summary["written"] += 1
            if progress:
                progress(done, len(frames), r.frame)

        try:
            client.open(r.pipeline, width, height, prompt=r.prompt,
                        negative_prompt=r.negative_prompt, seed=r.seed, options=options,
                        refs=list(r.refs))
            check_model(out, client.model_id, str(options.get("model") or r.pipeline),
                        run_lock)
            if client.notice:
                summary["notice"] = client.notice
            passes = shot_frames(scene, todo, width, height, r.engine, wire_passes(r.pipeline))
            run = client.run_shot(carry.remembering(passes), on_result, cancelled=cancelled,
                                  carry_for=carry, primers_for=carry.primers)
            summary["dropped"] = run["dropped"]
            summary["reconnects"] = run["reconnects"]
        finally:
            scene.frame_set(frame_now)
            if own:
                client.close()
        summary["seconds"] = time.monotonic() - t0
        return summary


def write_result(out: Path, r: Result, width: int, height: int) -> Path:
    """Write one returned frame atomically (PNG, top row first); a temporal frame's
    latents first (the PNG marks the frame done)."""
    from ..passes.image_io import write_png

    rgb = np.asarray(r.rgb)
    if rgb.dtype != np.uint8 or rgb.shape != (height, width, 3):
        raise BackendError("bad_array", f"frame {r.frame}: expected uint8 ({height}, {width}, "
                                        f"3), got {rgb.dtype} {rgb.shape}", frame=r.frame)
    latents = r.extra.get("carry_latents")
    if latents is not None:
        write_npy_atomic(carry_path(out, r.frame), latents)
    return write_png(result_path(out, r.frame), rgb)


