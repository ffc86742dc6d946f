"""Test set-up shared by every group: Blender writes its user files into a temp folder
(never ~/.config), the fixtures most groups use, and the import path of the groups.

The tests are grouped by the layer they check (ARCHITECTURE.md): ``core/`` (pure Python
+ numpy), ``demo/`` (the generated character and motions), ``wire/`` (the protocol,
shared memory), ``server/`` (the backend process, run from the bpy venv: no torch),
``blender/`` (the bpy layer against the real bpy module), ``system/`` (the CLI, the
extension zip, farms, docs, real data) and ``backend/`` (torch, diffusers, onnxruntime:
run with the backend's own venv). Test modules import helpers from one another by module
name (``from test_backend_server import Client``), so every folder of tests is on the path;
the big groups hold rooms that mirror the code's (``blender/passes/``, ``backend/onnx/``).
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import pytest

_RES = tempfile.mkdtemp(prefix="painted-skin-blender-")
os.environ.setdefault("BLENDER_USER_RESOURCES", _RES)

REPO = Path(__file__).resolve().parents[1]
# Every folder of test modules, rooms inside a group included (tests/blender/passes/…).
for _folder in sorted({str(p.parent) for p in Path(__file__).resolve().parent.rglob("test_*.py")}):
    if _folder not in sys.path:
        sys.path.insert(0, _folder)
SHARED_DATA = Path(os.environ.get("PAINTED_SKIN_SHARED", REPO.parent / "shared")) / "data"


@pytest.fixture
def bpy_clean():
    """The real Blender module, reset to an empty factory scene."""
    import bpy

    bpy.ops.wm.read_factory_settings(use_empty=True)
    yield bpy


@pytest.fixture
def shared_data() -> Path:
    """../shared/data when present; the test is skipped otherwise."""
    if not SHARED_DATA.is_dir():
        pytest.skip("../shared/data is absent")
    return SHARED_DATA


sys.dont_write_bytecode = True


def demo_walk_blend(folder: Path, frames: int) -> Path:
    """Save a real shot: the demo character walking ``frames`` frames at 24 fps,
    with the demo camera following it. Used by the passes and restyle tests."""
    import bpy
    from painted_skin.addon import motion as gen
    from painted_skin.addon.blender.blend_files import save_blend_atomic
    from painted_skin.addon.blender.retarget.api import retarget_clip
    from painted_skin.demo.character import build_demo_character, setup_demo_scene

    bpy.ops.wm.read_factory_settings(use_empty=True)
    arm = build_demo_character()
    setup_demo_scene(arm)
    retarget_clip(gen.write_clip(folder / "walk.bvh", "walk", frames=frames, fps=24), arm)
    path = folder / "shot.blend"
    save_blend_atomic(path)
    return path


# ---- backend fixtures shared by the server, hardening and shared-memory tests -----------


@pytest.fixture
def serve():
    """serve(**config) -> (server, endpoint): an in-process backend on a free port."""
    from painted_skin.backend.server import ServeConfig, Server

    started = []

    def make(**kw):
        server = Server(ServeConfig(bind="tcp://127.0.0.1:*", **kw))
        endpoint = server.bind()
        started.append((server, server.start()))
        return server, endpoint

    yield make
    for server, thread in started:
        server.stop()
        thread.join(5)


@pytest.fixture
def client():
    """client(endpoint, **kw) -> a bare protocol client (closed after the test)."""
    from test_backend_server import Client

    made = []

    def make(endpoint: str, **kw):
        made.append(Client(endpoint, **kw))
        return made[-1]

    yield make
    for c in made:
        c.close()


@pytest.fixture(scope="module")
def skin_backend():
    """A ``painted-skin serve`` process (its default pipelines, the embedded skin model
    among them) that a module's restyles talk to; its URL."""
    import subprocess

    from test_client import free_url, serve_command, stop

    url = free_url()
    proc = subprocess.Popen(serve_command(url), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    yield url
    stop(proc)
