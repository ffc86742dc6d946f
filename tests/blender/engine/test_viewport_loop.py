"""The Rendered viewport's loop without a window (:class:`ViewportJob`): a view given by
a viewport's matrices is the camera it shows; a changed view or pose is painted, a view
that moved on replaces the one not yet painted, the worker thread paints while the
caller goes on, and a missing backend is a message kept for the view, never a raise."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest


@pytest.fixture(scope="module")
def shot(tmp_path_factory) -> Path:
    from conftest import demo_walk_blend

    return demo_walk_blend(tmp_path_factory.mktemp("viewport_shot"), frames=8)


def _matrices(bpy, cam, w: int, h: int):
    dg = bpy.context.evaluated_depsgraph_get()
    window = np.array(cam.evaluated_get(dg).calc_matrix_camera(dg, x=w, y=h))
    return np.linalg.inv(np.array(cam.matrix_world)), window


@pytest.mark.parametrize("kind", ["PERSP", "ORTHO"])
def test_a_viewports_matrices_are_the_camera_it_shows(bpy_clean, shot, kind):
    from painted_skin.addon.blender.passes.scene_reader import camera_for
    from painted_skin.addon.core.passes.camera import camera_from_matrices

    bpy = bpy_clean
    bpy.ops.wm.open_mainfile(filepath=str(shot))
    scene = bpy.context.scene
    cam = scene.camera
    cam.data.type = kind
    cam.data.shift_x, cam.data.shift_y = 0.05, -0.03
    w, h = 160, 96
    scene.render.resolution_x, scene.render.resolution_y = w, h
    scene.render.resolution_percentage = 100
    truth = camera_for(scene, width=w, height=h)
    got = camera_from_matrices(*_matrices(bpy, cam, w, h), w, h)
    pts = np.random.default_rng(1).normal([0, 0, 1], 0.5, (50, 3))
    assert got.ortho == (kind == "ORTHO")
    (uv, depth), (uv_t, depth_t) = got.project_world(pts), truth.project_world(pts)
    np.testing.assert_allclose(uv, uv_t, atol=1e-3)  # pixels
    np.testing.assert_allclose(depth, depth_t, rtol=1e-6)
    # The clip planes come back through float32 matrices: to a clip plane's precision.
    assert got.near == pytest.approx(truth.near, rel=1e-2)
    assert got.far == pytest.approx(truth.far, rel=1e-2)


def _job(bpy, shot, url):
    from painted_skin.addon.blender.engine.settings import PaintSettings
    from painted_skin.addon.blender.engine.viewport import ViewportJob
    from painted_skin.addon.blender.passes.geometry import ShotGeometry
    from painted_skin.addon.blender.restyle.loop import pipeline_options

    bpy.ops.wm.open_mainfile(filepath=str(shot))
    scene = bpy.context.scene
    settings = PaintSettings(url=url, options={"model": "demo", "temporal": False},
                             start_local=False)
    options = pipeline_options(scene, "skin", dict(settings.options))
    return scene, ViewportJob(ShotGeometry(scene, 16, 16, need_camera=False), settings, options)


def test_the_loop_paints_the_latest_view_and_follows_the_pose(bpy_clean, shot, skin_backend):
    from painted_skin.addon.core.passes.camera import camera_from_matrices

    bpy = bpy_clean
    scene, job = _job(bpy, shot, skin_backend)
    try:
        view, window = _matrices(bpy, scene.camera, 64, 64)
        cam = camera_from_matrices(view, window, 64, 64)
        scene.frame_set(2)
        stale = job.snapshot(cam, 2)
        job.submit(stale)
        wide = camera_from_matrices(view, window, 96, 64)
        newer = job.snapshot(wide, 2)
        job.submit(newer)  # the view moved on before the worker took the first
        done = job.step()
        assert done is not None and done.serial == newer.serial
        assert done.rgb.shape == (64, 96, 3) and done.mask.any()
        assert done.rgb[done.mask].std() > 5 and not done.rgb[~done.mask].any()
        assert job.step() is None  # nothing left: the stale view is never painted

        scene.frame_set(6)  # a new pose, the same view
        job.submit(job.snapshot(wide, 6))
        moved = job.step()
        assert moved is not None and not np.array_equal(moved.mask, done.mask)
    finally:
        job.stop()


def test_the_worker_paints_while_the_caller_goes_on(bpy_clean, shot, skin_backend):
    from painted_skin.addon.core.passes.camera import camera_from_matrices

    bpy = bpy_clean
    scene, job = _job(bpy, shot, skin_backend)
    ready = []
    job.on_ready = lambda: ready.append(1)
    try:
        job.start()
        cam = camera_from_matrices(*_matrices(bpy, scene.camera, 48, 48), 48, 48)
        snap = job.snapshot(cam, scene.frame_current)
        job.submit(snap)  # returns at once: the worker paints
        deadline = time.monotonic() + 120  # a bound for a busy machine, not a speed check
        while job.latest is None and job.error is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert job.error is None and job.latest is not None
        assert job.latest.serial == snap.serial and ready
    finally:
        job.stop()
    assert job._thread is None


def test_a_moving_view_takes_the_passes_centre_samples_and_a_still_one_filters_them(
        bpy_clean, shot, skin_backend, monkeypatch):
    """Filtering the light passes over the pixel costs as much as the rest of the frame:
    while the view moves the preview takes each pixel's centre sample, and the still
    view's refinement (at the region's full size) the filtered passes a render has."""
    from painted_skin.addon.blender.engine import viewport
    from painted_skin.addon.blender.passes import fast
    from painted_skin.addon.core.passes.camera import camera_from_matrices

    bpy = bpy_clean
    scene, job = _job(bpy, shot, skin_backend)
    seen = []

    def recorded(*args, **kwargs):
        out = fast.fast_frame(*args, **kwargs)
        seen.append(out)
        return out

    monkeypatch.setattr(viewport, "fast_frame", recorded)
    try:
        cam = camera_from_matrices(*_matrices(bpy, scene.camera, 64, 64), 64, 64)
        scene.frame_set(3)
        job.submit(job.snapshot(cam, 3))
        moving = job.step()
        job.submit(job.snapshot(cam, 3, full=True))
        still = job.step()
        assert moving is not None and still is not None and len(seen) == 2
        m = seen[0]["mask"] > 0
        from painted_skin.addon.blender.engine.viewport import VIEW_FILM_SAMPLES

        # The view's refinement at its own sub-pixel count (renders take more).
        filtered = fast.fast_frame(job.geometry, job.snapshot(cam, 3).geometry, None, None,
                                   job.want, film_samples=VIEW_FILM_SAMPLES)
        np.testing.assert_array_equal(seen[1]["irradiance"], filtered["irradiance"])
        monkeypatch.setattr(fast, "FILM_SAMPLES", 1)
        centre = fast.fast_frame(job.geometry, job.snapshot(cam, 3).geometry, None, None,
                                 job.want)
        np.testing.assert_array_equal(seen[0]["irradiance"], centre["irradiance"])
        assert not np.array_equal(seen[0]["irradiance"][m], seen[1]["irradiance"][m])
    finally:
        job.stop()


def test_a_missing_backend_is_a_message_for_the_view(bpy_clean, shot):
    from painted_skin.addon.core.passes.camera import camera_from_matrices
    from test_client import free_url

    bpy = bpy_clean
    scene, job = _job(bpy, shot, free_url())
    try:
        cam = camera_from_matrices(*_matrices(bpy, scene.camera, 32, 32), 32, 32)
        job.submit(job.snapshot(cam, scene.frame_current))
        assert job.step() is None
        assert "no backend answers" in job.error and "\n" not in job.error
        assert job.latest is None and not job.busy
    finally:
        job.stop()


@pytest.mark.parametrize("region, scale", [((1310, 878), 1.0), ((1310, 878), 0.25),
                                           ((40, 30), 0.05), ((292, 1000), 0.33)])
def test_the_painted_size_suits_every_skin_network(region, scale):
    """A region of any size paints at sides the networks take (multiples of 16; a
    1310x878 region once asked the backend for a size it refused)."""
    from painted_skin.addon.blender.engine.viewport import SIDE_MULTIPLE, view_size

    w, h = view_size(*region, scale)
    assert w % SIDE_MULTIPLE == 0 and h % SIDE_MULTIPLE == 0
    assert SIDE_MULTIPLE <= w <= max(SIDE_MULTIPLE, region[0] * scale)
    assert SIDE_MULTIPLE <= h <= max(SIDE_MULTIPLE, region[1] * scale)
