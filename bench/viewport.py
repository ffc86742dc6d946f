"""``painted-skin bench viewport``: the Rendered viewport's loop without a window.

The demo character waves (motion the embedded model never trained on) while the view
orbits it, 5° a step, as a user navigating: each step is a change the viewport sees (the
frame and the view matrix), then what the engine's viewport does with it: the snapshot on
the main thread (:meth:`ViewportJob.snapshot`: the meshes as evaluated, the view's camera
from its view and window matrices), then the worker's work (:meth:`ViewportJob.step`: the
fast passes, the backend painting them over ZeroMQ), then the frame made into what the
GPU texture is filled from (linear RGBA rows). Latency is from the change to that array;
frames per second are the loop's, one frame in flight, as a viewport that drops stale
views paints. A local backend (the embedded model, onnxruntime on the CPU) serves it.

Beside it, in the same run and at the same sizes: Cycles rendering one sample (no
denoising), the least a Cycles viewport draws before its first sample shows. Last line::

    viewport fps: <fps at 128²> p95_ms: <p95 at 128²> fps_256: <fps> vs_cycles_1spp: <x>
    f12_vs_restyle: <x>

``vs_cycles_1spp`` is Cycles' 1-sample time over the painted frame's latency at 128²;
``f12_vs_restyle`` the engine's Render Animation time per frame (through Blender's render
pipeline, saved as PNG) over ``restyle``'s, 12 frames at 128², the same backend.
"""

from __future__ import annotations

import math
import statistics
import tempfile
import time
from pathlib import Path

import bpy
import numpy as np

from ..addon.blender.client.backend_client import BackendUnavailable
from ..addon.blender.client.local_backend import (
    backend_python,
    start_local_backend,
    stop_local_backend,
)
from ..addon.blender.engine import render_result
from ..addon.blender.engine.settings import PaintSettings
from ..addon.blender.engine.viewport import ViewportJob
from ..addon.blender.passes.geometry import ShotGeometry
from ..addon.blender.restyle.loop import pipeline_options
from ..addon.core.passes.camera import camera_from_matrices

SIZES = (128, 256)
STEPS = 48
WARMUP = 4
TARGETS = {"fps_128": 10.0, "fps_256": 3.0, "p95_ms_128": 150.0}


def free_loopback_url() -> str:
    """A loopback URL on a port free now."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{s.getsockname()[1]}"


def _orbit(view: np.ndarray, centre: np.ndarray, degrees: float) -> np.ndarray:
    """``view`` (world -> view) after the world turns ``degrees`` about Z at ``centre``."""
    a = math.radians(degrees)
    turn = np.eye(4)
    turn[:2, :2] = [[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]]
    to, back = np.eye(4), np.eye(4)
    to[:3, 3], back[:3, 3] = -centre, centre
    return view @ back @ turn @ to


def _view_matrices(scene: bpy.types.Scene, size: int) -> tuple[np.ndarray, np.ndarray]:
    """The scene camera's view and window matrices, as a viewport looking through it."""
    cam = scene.camera
    dg = bpy.context.evaluated_depsgraph_get()
    window = np.array(cam.evaluated_get(dg).calc_matrix_camera(dg, x=size, y=size))
    return np.linalg.inv(np.array(cam.matrix_world)), window


def measure_loop(job: ViewportJob, scene: bpy.types.Scene, size: int,
                 steps: int = STEPS) -> dict:
    """Latency and throughput of ``steps`` view changes at ``size``²."""
    view0, window = _view_matrices(scene, size)
    centre = np.asarray(job.geometry.current().positions.mean(axis=0))
    frames = range(scene.frame_start, scene.frame_end + 1)
    latencies = []
    t_start = None
    for k in range(steps + WARMUP):
        if k == WARMUP:
            t_start = time.perf_counter()
        changed = time.monotonic()
        scene.frame_set(frames[k % len(frames)])
        view = _orbit(view0, centre, 5.0 * k)
        camera = camera_from_matrices(view, window, size, size)
        job.submit(job.snapshot(camera, scene.frame_current, taken=changed))
        done = job.step()
        if done is None:
            raise RuntimeError(f"the viewport loop painted nothing: {job.error}")
        render_result.combined(done.rgb, done.mask, transparent=True)  # the texture's data
        if k >= WARMUP:
            latencies.append(time.monotonic() - changed)
    total = time.perf_counter() - t_start
    lat = sorted(latencies)
    return {"size": size, "median_ms": 1000 * statistics.median(lat),
            "p95_ms": 1000 * lat[min(len(lat) - 1, int(round(0.95 * (len(lat) - 1))))],
            "fps": len(lat) / total}


def cycles_one_sample_ms(scene: bpy.types.Scene, size: int, repeats: int = 5) -> float:
    """Median ms of Cycles rendering one sample at ``size``², no denoising (first render,
    which builds the scene, excluded)."""
    r = scene.render
    saved = (r.engine, r.resolution_x, r.resolution_y, r.resolution_percentage)
    try:
        r.engine = "CYCLES"
        r.resolution_x = r.resolution_y = size
        r.resolution_percentage = 100
        scene.cycles.samples = 1
        scene.cycles.use_denoising = False
        scene.cycles.device = "CPU"
        times = []
        for k in range(repeats + 1):
            scene.frame_set(scene.frame_start + k)
            t = time.perf_counter()
            bpy.ops.render.render()
            if k:
                times.append(1000 * (time.perf_counter() - t))
        return statistics.median(times)
    finally:
        r.engine, r.resolution_x, r.resolution_y, r.resolution_percentage = saved


def f12_against_restyle(scene: bpy.types.Scene, url: str, size: int = 128,
                        frames: int = 12) -> tuple[float, float]:
    """ms/frame of an animation render with the engine (Blender's pipeline, saved as PNG)
    and of ``restyle_shot`` over the same frames, the same backend and size."""
    from ..addon.blender.engine import headless
    from ..addon.blender.restyle.loop import RestyleRequest, restyle_shot

    headless.ensure_registered()
    s = scene.painted_skin_engine
    s.url, s.start_local = url, False
    scene.render.resolution_x = scene.render.resolution_y = size
    scene.render.resolution_percentage = 100
    headless.use_standard_view(scene)
    todo = list(range(scene.frame_start, scene.frame_start + frames))
    with tempfile.TemporaryDirectory() as tmp:
        # One frame first on each path: the backend loads the model, Blender its engine.
        headless.render_frames(scene, todo[:1], str(Path(tmp) / "warm"))
        t = time.perf_counter()
        headless.render_frames(scene, todo, str(Path(tmp) / "f12"))
        f12 = (time.perf_counter() - t) / frames
        restyle_shot(scene, RestyleRequest.make(Path(tmp) / "warm_r", url=url, frames=todo[:1],
                                                size=size, pipeline="skin"))
        t = time.perf_counter()
        restyle_shot(scene, RestyleRequest.make(Path(tmp) / "restyle", url=url, frames=todo,
                                                size=size, pipeline="skin"))
        restyle = (time.perf_counter() - t) / frames
    return 1000 * f12, 1000 * restyle


def main(steps: int | None = None, python: str | None = None) -> int:
    from ..demo.shot import build_demo_shot

    steps = steps or STEPS
    with tempfile.TemporaryDirectory() as tmp:
        build_demo_shot(Path(tmp), frames=48, kind="wave")
    scene = bpy.context.scene
    url = free_loopback_url()
    try:
        start_local_backend(python or backend_python(""), url, timeout_s=120.0)
    except BackendUnavailable as e:
        print(f"bench viewport: no backend: {e}")
        return 1
    rows = []
    try:
        settings = PaintSettings(url=url, options={"model": "demo", "temporal": False,
                                                   "stabilize": 0.8})
        options = pipeline_options(scene, "skin", dict(settings.options))
        geometry = ShotGeometry(scene, 16, 16, need_camera=False)
        job = ViewportJob(geometry, settings, options)
        try:
            for size in SIZES:
                row = measure_loop(job, scene, size, steps)
                row["cycles_ms"] = cycles_one_sample_ms(scene, size)
                rows.append(row)
        finally:
            job.stop()
        f12_ms, restyle_ms = f12_against_restyle(scene, url)
    finally:
        stop_local_backend()
    print(f"{'size':>6} {'median ms':>10} {'p95 ms':>8} {'fps':>6} {'cycles 1spp ms':>15}")
    for r in rows:
        print(f"{r['size']:>5}² {r['median_ms']:>10.1f} {r['p95_ms']:>8.1f} {r['fps']:>6.1f} "
              f"{r['cycles_ms']:>15.1f}")
    r128, r256 = rows
    ratio = r128["cycles_ms"] / r128["median_ms"]
    print(f"F12 (Render Animation, 128²): {f12_ms:.1f} ms/frame; restyle: {restyle_ms:.1f} "
          f"ms/frame (x{f12_ms / restyle_ms:.2f})")
    print(f"targets: fps ≥ {TARGETS['fps_128']:g} at 128², ≥ {TARGETS['fps_256']:g} at 256², "
          f"p95 ≤ {TARGETS['p95_ms_128']:g} ms at 128², F12 within 10% of restyle")
    print(f"viewport fps: {r128['fps']:.1f} p95_ms: {r128['p95_ms']:.0f} "
          f"fps_256: {r256['fps']:.1f} vs_cycles_1spp: {ratio:.2f} "
          f"f12_vs_restyle: {f12_ms / restyle_ms:.2f}")
    return 0
