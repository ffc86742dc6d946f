"""End to end: the Blender client streams a real shot's passes over ZeroMQ to a
backend process running the diffusion pipeline (tiny random components, in
the backend's own environment) and writes the restyled frames."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import numpy as np
import pytest
from painted_skin.addon import motion as gen

REPO = Path(__file__).resolve().parents[3]
BACKEND_PY = REPO / ".venv-backend" / "bin" / "python"


def _backend_has_torch() -> bool:
    if not BACKEND_PY.exists():
        return False
    probe = subprocess.run([str(BACKEND_PY), "-c", "import torch, diffusers"],
                           capture_output=True, timeout=120)
    return probe.returncode == 0


pytestmark = pytest.mark.skipif(not _backend_has_torch(),
                                reason="no backend environment with torch (make backend)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def backend():
    from painted_skin.addon.blender.restyle.loop import start_local_backend, stop_local_backend

    url = f"tcp://127.0.0.1:{_free_port()}"
    pong = start_local_backend(str(BACKEND_PY), url, timeout_s=120)
    yield url, pong
    stop_local_backend()


def test_demo_shot_restyled_by_the_tiny_diffusion_pipeline(backend, bpy_clean, tmp_path):
    from painted_skin.addon.blender.client.backend_client import BackendClient
    from painted_skin.addon.blender.passes.image_io import read_image
    from painted_skin.addon.blender.restyle.loop import RestyleRequest, restyle_shot
    from painted_skin.addon.blender.retarget.api import retarget_clip
    from painted_skin.demo.character import build_demo_character, setup_demo_scene

    url, _ = backend
    with BackendClient(url) as c:
        assert "sd15-controlnet" in c.status()["pipelines"]
    arm = build_demo_character()
    setup_demo_scene(arm)
    retarget_clip(gen.write_clip(tmp_path / "walk.bvh", "walk", frames=8, fps=24), arm)
    scene = bpy_clean.context.scene
    options = {"tiny": True, "steps": 2, "scheduler": "lcm", "temporal": True}
    out = tmp_path / "shot"
    summary = restyle_shot(scene, RestyleRequest.make(out, url=url, frames=range(2, 5), size=64,
                                                      pipeline="sd15-controlnet",
                                                      prompt="a painted knight", seed=3,
                                                      options=options, timeout_s=120))
    assert summary["written"] == 3
    frames = [read_image(out / "restyled" / f"{f:04d}.png") for f in range(2, 5)]
    assert all(f.shape == (64, 64, 3) and f.dtype == np.uint8 for f in frames)
    assert np.std(frames[0]) > 1  # a picture, not a flat fill
    # Re-running resumes: nothing left to compute.
    again = restyle_shot(scene, RestyleRequest.make(out, url=url, frames=range(2, 5), size=64,
                                                    pipeline="sd15-controlnet",
                                                    prompt="a painted knight", seed=3,
                                                    options=options, timeout_s=120))
    assert again["written"] == 0 and again["skipped"] == 3


@pytest.mark.parametrize("extra", [{}, {"cross_frame": "first"}], ids=["temporal", "anchored"])
def test_a_resumed_temporal_shot_is_the_uninterrupted_one(backend, bpy_clean, tmp_path, extra):
    """Each temporal frame warps the previous one: a resumed run (here on a freshly
    started backend, whose session state is empty) continues the chain from the
    carried previous frame, bit for bit; with cross-frame attention the run's first
    frame is run again first, to record the same anchor."""
    from painted_skin.addon.blender.passes.image_io import read_image
    from painted_skin.addon.blender.restyle.loop import (
        RestyleRequest,
        carry_path,
        restyle_shot,
        start_local_backend,
    )
    from painted_skin.addon.blender.retarget.api import retarget_clip
    from painted_skin.demo.character import build_demo_character, setup_demo_scene

    url, _ = backend
    arm = build_demo_character()
    setup_demo_scene(arm)
    retarget_clip(gen.write_clip(tmp_path / "walk.bvh", "walk", frames=10, fps=24), arm)
    scene = bpy_clean.context.scene
    kw = dict(size=64, pipeline="sd15-controlnet", prompt="a painted knight", seed=5,
              options={"tiny": True, "steps": 2, "scheduler": "lcm", "temporal": True, **extra},
              timeout_s=120)
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    restyle_shot(scene, RestyleRequest.make(whole, url=url, frames=range(2, 8), **kw))
    restyle_shot(scene, RestyleRequest.make(parts, url=url, frames=range(2, 5), **kw))
    assert carry_path(parts, 4).exists()
    start_local_backend(str(BACKEND_PY), url, timeout_s=120)  # a new process: no state
    resumed = restyle_shot(scene, RestyleRequest.make(parts, url=url, frames=range(2, 8), **kw))
    assert (resumed["skipped"], resumed["written"]) == (3, 3)
    for f in range(2, 8):
        a = read_image(whole / "restyled" / f"{f:04d}.png")
        b = read_image(parts / "restyled" / f"{f:04d}.png")
        assert np.array_equal(a, b), f"frame {f} differs after the resume"
