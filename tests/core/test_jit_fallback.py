"""Numba must never cost a user their passes: a kernel that fails (compile error, a
cache entry that cannot load) switches the process to the numpy paths with the same
results; a file numba cannot cache still compiles; PAINTED_SKIN_JIT=0 never compiles."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

numba = pytest.importorskip("numba")

from painted_skin.addon.core.passes import jit  # noqa: E402


@pytest.fixture
def restore_jit():
    yield
    jit._disabled = None


def _scene():
    from painted_skin.addon.core.passes.camera import Camera

    rng = np.random.default_rng(3)
    verts = rng.uniform(-1, 1, (60, 3)) + (0.0, 0.0, -4.0)
    tris = rng.integers(0, 60, (80, 3))
    cam = Camera(width=48, height=40, fx=50.0, fy=50.0, cx=24.0, cy=20.0, near=0.1, far=100.0)
    return verts, tris, cam


def test_a_failing_kernel_falls_back_to_numpy_with_the_same_result(monkeypatch, restore_jit,
                                                                    caplog):
    from painted_skin.addon.core.passes import raster, raster_jit

    verts, tris, cam = _scene()
    monkeypatch.setenv("PAINTED_SKIN_JIT", "0")
    want = raster.rasterize(verts, tris, cam)
    monkeypatch.setenv("PAINTED_SKIN_JIT", "1")
    assert jit.enabled()

    def broken(*a, **k):
        raise numba.core.errors.TypingError("no implementation of function")

    monkeypatch.setattr(raster_jit, "rasterize", broken)
    got = raster.rasterize(verts, tris, cam)
    assert not jit.enabled() and "numpy paths" in caplog.text
    np.testing.assert_array_equal(got.tri, want.tri)
    np.testing.assert_array_equal(got.depth, want.depth)


def test_a_cache_entry_that_cannot_load_falls_back(monkeypatch, restore_jit):
    from painted_skin.addon.core.openpose import draw as D

    kind = np.array([D.DISC, D.LINE])
    params = np.array([[10.0, 12, 4, 0, 0, 0], [2.0, 3, 30, 20, 2, 0]])
    colors = np.array([[255, 0, 0], [0, 255, 0]], np.uint8)
    want = D.paint(np.zeros((32, 40, 3), np.uint8), kind, params, colors, jit=False)

    def broken(*a):
        raise ModuleNotFoundError("No module named 'ps'")  # what a foreign cache entry gives

    monkeypatch.setattr(D, "_paint_jit", broken)
    got = D.paint(np.zeros((32, 40, 3), np.uint8), kind, params, colors)
    assert not jit.enabled()
    np.testing.assert_array_equal(got, want)
    assert want.any()


def test_a_function_numba_cannot_cache_still_compiles(monkeypatch):
    real = numba.njit

    def no_locator(**options):
        if options.get("cache"):
            raise RuntimeError("cannot cache function 'f': no locator available for file")
        return real(**options)

    from types import SimpleNamespace

    monkeypatch.setattr(jit, "_numba", SimpleNamespace(njit=no_locator))

    @jit.njit
    def f(x):
        return x * 2.0

    assert f(3.0) == 6.0 and hasattr(f, "signatures")


def test_switched_off_never_compiles():
    code = ("import numpy as np\n"
            "from painted_skin.addon.core.openpose import draw as D\n"
            "D.paint(np.zeros((8, 8, 3), np.uint8), np.array([0]), "
            "np.array([[4.0, 4, 2, 0, 0, 0]]), np.array([[9, 9, 9]], np.uint8))\n"
            "print(len(D._bounds.signatures), len(D._paint_jit.signatures))\n")
    env = {**os.environ, "PAINTED_SKIN_JIT": "0"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=120, check=True).stdout
    assert out.split() == ["0", "0"]
