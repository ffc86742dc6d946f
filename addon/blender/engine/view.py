"""The Rendered viewport's window side: ``view_update`` marks what changed, ``view_draw``
hands the view to the :class:`~.viewport.ViewportJob` (a snapshot, never a wait) and
draws the last finished frame with the ``gpu`` module; a timer redraws the region when
the worker has a new frame, and asks for the region's full size once the view is still.

The job is built in that timer, outside Blender's drawing: reading the character's rest
positions and UVs re-evaluates the depsgraph, which a draw callback must not do. What
cannot paint (no model, no backend, no character) is drawn as a message in the view."""

from __future__ import annotations

import time

import bpy
import numpy as np

from ...core.passes.camera import camera_from_matrices
from ..client.errors import BackendError
from ..passes.geometry import ShotError, ShotGeometry
from ..restyle.loop import pipeline_options
from . import render_result
from .renders import mesh_signature
from .settings import engine_settings, paint_settings
from .viewport import ViewportJob, view_size

POLL_S = 0.03  # how often the timer looks for a finished frame
STILL_S = 0.3  # a view unchanged this long is painted again at the region's full size
RETRY_S = 1.0  # a job that failed to build is tried again after this, on a change

#: The Rendered viewports now open (what a window check inspects).
VIEWS: list[ViewportDraw] = []


class ViewportDraw:
    """One Rendered viewport's state, owned by its :class:`PS_RenderEngine`."""

    def __init__(self, engine: bpy.types.RenderEngine) -> None:
        self.engine = engine
        self.job: ViewportJob | None = None
        self.key: tuple | None = None
        self.message: str | None = "Painted Skin: preparing the character…"
        self.scene_name: str | None = None
        self.dirty = True  # the scene changed since the last snapshot
        self.rebuild = True  # settings or meshes changed: check the job's key
        self.failed_at = 0.0
        self.last_view: tuple | None = None
        self.changed_at = time.monotonic()
        self.refined = False
        self.drawn_serial = -1
        self.drawn_error: str | None = None  # the job's message last drawn
        self.texture = None
        self.texture_serial = -1
        self.timer_on = False
        self.alive = True
        self.draw_s: list[float] = []  # how long each view_draw held the UI (the last 256)
        self.draw_count = 0
        self.parts_s: list[tuple[float, float]] = []  # of which: the snapshot, the drawing
        VIEWS.append(self)

    # -- Blender's callbacks --------------------------------------------------------------

    def update(self, context, depsgraph) -> None:
        """``view_update``: a frame change, an edited pose, mesh or setting."""
        self.scene_name = depsgraph.scene.name
        self.dirty = True
        for u in depsgraph.updates:
            if isinstance(u.id, (bpy.types.Scene, bpy.types.Mesh)):
                self.rebuild = True
        self._ensure_timer()

    def draw(self, context, depsgraph) -> None:
        """``view_draw``: submit the view when it changed, draw what is finished."""
        t0 = time.perf_counter()
        try:
            self._draw(context, depsgraph)
        finally:
            self.draw_s = self.draw_s[-255:] + [time.perf_counter() - t0]
            self.draw_count += 1

    def _draw(self, context, depsgraph) -> None:
        region, rv3d = context.region, context.region_data
        scene = depsgraph.scene
        self.scene_name = scene.name
        job = self.job
        if job is not None:
            t0 = time.perf_counter()
            self._submit(job, region, rv3d, scene, depsgraph)
            t1 = time.perf_counter()
            self._draw_latest(job, region, scene)
            self.parts_s.append((t1 - t0, time.perf_counter() - t1))
            del self.parts_s[:-256]
        text = self.message if job is None else _job_text(job)
        if text:
            _draw_text(region, text)
        self.drawn_error = None if job is None else _job_text(job)
        self._ensure_timer()

    def free(self) -> None:
        self.alive = False
        if self in VIEWS:
            VIEWS.remove(self)
        if self.job is not None:
            self.job.stop(wait=False)
            self.job = None
        self.texture = None

    # -- the view ---------------------------------------------------------------------------

    def _scale(self, scene) -> float:
        s = engine_settings(scene)
        return float(s.viewport_scale) if s is not None else 0.25

    def _submit(self, job: ViewportJob, region, rv3d, scene, depsgraph) -> None:
        view = (tuple(map(tuple, rv3d.view_matrix)), tuple(map(tuple, rv3d.window_matrix)),
                region.width, region.height, scene.frame_current)
        now = time.monotonic()
        moved = view != self.last_view or self.dirty
        s = engine_settings(scene)
        refine = s is None or s.viewport_refine
        full = False
        if moved:
            # A refinement is owed only when on and the view is painted smaller.
            self.refined = not refine or self._scale(scene) >= 1.0
            self.last_view, self.dirty = view, False
            self.changed_at = now
        elif not self.refined and now - self.changed_at >= STILL_S and not job.busy:
            self.refined = full = True
        else:
            return
        scale = 1.0 if full else self._scale(scene)
        w, h = view_size(region.width, region.height, scale)
        camera = camera_from_matrices(np.array(view[0]), np.array(view[1]), w, h)
        job.geometry.depsgraph = depsgraph
        try:
            job.submit(job.snapshot(camera, scene.frame_current, full=full, taken=now))
        except Exception as e:  # a mesh gone between the update and the draw
            job.error = f"Painted Skin: {e}"

    def _draw_latest(self, job: ViewportJob, region, scene) -> None:
        import gpu
        from gpu_extras.presets import draw_texture_2d

        done = job.latest
        if done is None:
            return
        if self.texture_serial != done.serial:
            h, w = done.rgb.shape[:2]
            rgba = render_result.combined(done.rgb, done.mask, transparent=True)
            buf = gpu.types.Buffer("FLOAT", w * h * 4)
            # Filled through the buffer protocol: one copy, where a sequence is read
            # value by value (a full-size frame is millions of values).
            np.frombuffer(buf, np.float32)[:] = rgba.ravel()
            self.texture = gpu.types.GPUTexture((w, h), format="RGBA16F", data=buf)
            self.texture_serial = done.serial
        gpu.state.blend_set("ALPHA_PREMULT")
        self.engine.bind_display_space_shader(scene)
        draw_texture_2d(self.texture, (0, 0), region.width, region.height)
        self.engine.unbind_display_space_shader()
        gpu.state.blend_set("NONE")
        self.drawn_serial = done.serial

    # -- the timer: build the job, redraw when a frame is ready --------------------------

    def _ensure_timer(self) -> None:
        if not self.timer_on and self.alive:
            self.timer_on = True
            bpy.app.timers.register(self._tick, first_interval=0.0)

    def _tick(self) -> float | None:
        if not self.alive:
            self.timer_on = False
            return None
        try:
            # Blender frees the engine when the view leaves Rendered mode: touching it
            # then raises ReferenceError, and the painter stops with it.
            _ = self.engine.is_preview
            if self.rebuild:
                self._check_job()
            job = self.job
            # Redraw for a new frame, a new message, or a refinement now owed: a view with
            # nothing new is not redrawn.
            redraw = job is not None and (
                (job.latest is not None and job.latest.serial != self.drawn_serial)
                or _job_text(job) != self.drawn_error
                or (not self.refined and not job.busy
                    and time.monotonic() - self.changed_at >= STILL_S))
            if redraw:
                self.engine.tag_redraw()
        except ReferenceError:  # the engine was freed: the viewport left Rendered mode
            self.free()
            self.timer_on = False
            return None
        except Exception as e:  # noqa: BLE001 -- shown in the view; the timer goes on
            self.message = f"Painted Skin: {type(e).__name__}: {e}"
            self.failed_at, self.rebuild = time.monotonic(), True  # tried again later
        return POLL_S

    def _check_job(self) -> None:
        """Build the job, or build it again when its meshes or settings changed."""
        scene = bpy.data.scenes.get(self.scene_name or "")
        if scene is None:
            return
        now = time.monotonic()
        if self.job is None and self.message and now - self.failed_at < RETRY_S:
            return
        self.rebuild = False
        try:
            settings = paint_settings(scene, animation=False)
            key = (mesh_signature(scene), settings.key(0, 0))
            if self.job is not None and key == self.key:
                return
            self._stop_job()
            geometry = ShotGeometry(scene, 16, 16, need_camera=False)
            options = pipeline_options(scene, settings.pipeline, dict(settings.options))
            python, models = _local_backend_needs(settings)
            self.job = ViewportJob(geometry, settings, options, python=python, models=models)
            self.job.start()
        except (ShotError, ValueError, BackendError) as e:
            self._stop_job()
            self.message, self.failed_at = f"Painted Skin: {e}", now
            self.engine.tag_redraw()
            return
        self.key, self.message, self.dirty = key, None, True
        self.engine.tag_redraw()

    def _stop_job(self) -> None:
        if self.job is not None:
            self.job.stop(wait=False)
        self.job, self.key = None, None
        self.texture, self.texture_serial, self.drawn_serial = None, -1, -1


def _job_text(job: ViewportJob) -> str | None:
    """What the view says over its painting: the failure, or what the first frame waits
    on (a local backend starting takes seconds)."""
    return job.error or (job.status if job.latest is None else None)


def _local_backend_needs(settings) -> tuple[str | None, dict[str, str] | None]:
    """What a local backend the worker starts needs from Blender, read here on the main
    thread: its Python (the preferences') and the scene's skin models. (None, None) when
    none may be started. Raises ``BackendError`` when no Backend Python is set."""
    if not (settings.start_local and settings.local):
        return None, None
    from ..client.local_backend import backend_python
    from ..preferences import preferences
    from ..skin.ui import scene_models

    prefs = preferences(bpy.context)
    return backend_python(prefs.python if prefs is not None else ""), scene_models()


def _draw_text(region, text: str) -> None:
    """A message across the bottom of the view, wrapped to its width."""
    import textwrap

    import blf

    font = 0
    blf.size(font, 13)
    blf.color(font, 1.0, 0.85, 0.4, 1.0)
    chars = max(20, int(region.width / 7.5))
    lines = textwrap.wrap(text, chars)[:6]
    for k, line in enumerate(reversed(lines)):
        blf.position(font, 12, 12 + 18 * k, 0)
        blf.draw(font, line)
