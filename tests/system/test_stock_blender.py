"""The extension as a new user gets it, in a Python that is a stock Blender's: only
``bpy==5.0.1`` (numpy comes with it; pyzmq does not). The zip built by ``make extension``
is installed with ``package_install_files``, enabled, and used end to end: retarget,
passes, and a restyle through an echo backend started from the panel's operator with
the project's environment as Backend Python.

The bpy-only venv is cached between runs (``PAINTED_SKIN_TEST_CACHE``, default
``~/.cache/painted-skin-tests``); without the package index the test is skipped."""

from __future__ import annotations

import json
import os
import platform
import socket
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# Python modules of the package (tests and build output aside): the zip ships a part of them.
TREE_MODULES = sum(1 for p in REPO.rglob("*.py") if not {"tests", "build", "out", ".venv",
                                                          ".venv-backend", ".git"}
                   & set(p.relative_to(REPO).parts))
MANIFEST = tomllib.loads((REPO / "blender_manifest.toml").read_text())
PKG = f"bl_ext.user_default.{MANIFEST['id']}"
CACHE = Path(os.environ.get("PAINTED_SKIN_TEST_CACHE",
                            Path.home() / ".cache" / "painted-skin-tests"))
BPY = "bpy==5.0.1"


def build_zips(out: Path, *args: str) -> subprocess.CompletedProcess:
    """``tools/build_extension.py`` with the tests' shared wheel cache."""
    return subprocess.run([sys.executable, str(REPO / "tools" / "build_extension.py"),
                           "--output-dir", str(out), "--stage-dir", str(out / "stage"),
                           "--cache-dir", str(CACHE / "wheels"), *args],
                          capture_output=True, text=True, timeout=900, cwd=REPO)


def built_or_skip(out: Path, *args: str) -> None:
    proc = build_zips(out, *args)
    if proc.returncode != 0 and "could not download" in proc.stderr:
        pytest.skip(f"the package index cannot be reached: {proc.stderr.splitlines()[0]}")
    assert proc.returncode == 0, f"build_extension.py failed:\n{proc.stdout}\n{proc.stderr}"


@pytest.fixture(scope="module")
def linux_zip(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("stock-zip")
    built_or_skip(out, "--platform", "linux-x64", "--blender", "5.0")
    zips = list(out.glob("*.zip"))
    assert [z.name for z in zips] == [f"{MANIFEST['id']}-{MANIFEST['version']}-linux_x64.zip"]
    return zips[0]


def _bpy_only_python() -> Path:
    """A venv with nothing but bpy (and what bpy itself pulls in), made once and reused."""
    venv = CACHE / "venv-bpy-5.0.1"
    python = venv / "bin" / "python"
    stamp = venv / ".complete"
    if not stamp.is_file():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True,
                       timeout=300)
        proc = subprocess.run([str(python), "-m", "pip", "install", "-q",
                               "--disable-pip-version-check", BPY],
                              capture_output=True, text=True, timeout=1200)
        if proc.returncode != 0:
            pytest.skip(f"cannot install {BPY} into a fresh venv (package index "
                        f"unreachable?): {proc.stderr.strip().splitlines()[-1:]}")
        stamp.write_text(BPY + "\n")
    return python


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_PROBE = r'''
import importlib, json, os, sys
from pathlib import Path
zip_path, pkg, work, backend_python, url = sys.argv[1:6]
work = Path(work)
out = {}
try:
    import zmq  # noqa: F401
    out["zmq_before"] = True
except ImportError:
    out["zmq_before"] = False
import bpy

out["install"] = sorted(bpy.ops.extensions.package_install_files(
    filepath=zip_path, repo="user_default", enable_on_install=True))
out["ops"] = sorted(dir(bpy.ops.painted_skin))
out["panels"] = sorted(n for n in ("PS_PT_retarget", "PS_PT_passes", "PS_PT_restyle")
                       if getattr(bpy.types, n, None) is not None)
out["restyle_module"] = bpy.types.PS_PT_restyle.__module__
import zmq
out["zmq_file"] = zmq.__file__
cli = importlib.import_module(pkg + ".cli")
out["cli"] = sorted(cli.build_parser()._subparsers._group_actions[0].choices)
api = importlib.import_module(pkg + ".api")
out["api"] = {n: getattr(api, n).__module__ for n in api.__all__}
character = importlib.import_module(pkg + ".demo.character")
motion = importlib.import_module(pkg + ".addon.motion")
arm = character.build_demo_character()
character.setup_demo_scene(arm)
clip = motion.write_clip(work / "walk.bvh", "walk", frames=6, fps=24)
s = bpy.context.scene.painted_skin_retarget
s.source_kind, s.source_path, s.target_object = "FILE", str(clip), arm
out["detect"] = sorted(bpy.ops.painted_skin.detect_map())
out["retarget"] = sorted(bpy.ops.painted_skin.retarget())
out["action"] = arm.animation_data.action.name
scene = bpy.context.scene
scene.frame_start, scene.frame_end = 1, 2
p = scene.painted_skin_passes
p.width = p.height = 64
p.out_dir = str(work / "passes")
out["passes"] = sorted(bpy.ops.painted_skin.render_passes())
out["pass_files"] = sorted(str(f.relative_to(work / "passes")) for f in
                           (work / "passes").rglob("*.png"))
prefs = bpy.context.preferences.addons[pkg].preferences
restyle_ui = sys.modules[pkg + ".addon.blender.restyle.ui"]
# The stock Python itself as Backend Python: Check says what it lacks, and Start fails
# with the backend log's last lines in the panel.
prefs.python = sys.executable
try:
    bpy.ops.painted_skin.backend_check()
except RuntimeError as e:
    out["check_bare"] = str(e)
try:
    bpy.ops.painted_skin.backend_start(timeout=30)
except RuntimeError as e:
    out["start_bare"] = str(e)
out["log_tail"] = restyle_ui._STATUS["log_tail"]
prefs.python = backend_python
r = scene.painted_skin_restyle
r.url, r.pipeline, r.width, r.height = url, "echo", 64, 64
r.out_dir = str(work / "restyle")
out["check"] = sorted(bpy.ops.painted_skin.backend_check())
out["start"] = sorted(bpy.ops.painted_skin.backend_start(timeout=60))
out["restyle"] = sorted(bpy.ops.painted_skin.restyle())
out["restyled"] = sorted(f.name for f in (work / "restyle" / "restyled").glob("*.png"))
# F12 with the Painted Skin render engine, through the same backend (its skin pipeline
# paints the demo character with the embedded model; the startup file's cube goes).
for ob in [o for o in scene.objects if o.type == "MESH" and o.find_armature() is None]:
    bpy.data.objects.remove(ob)
scene.render.engine = "PAINTED_SKIN"
scene.render.resolution_x = scene.render.resolution_y = 64
scene.render.resolution_percentage = 100
scene.render.filepath = str(work / "f12.png")
try:
    out["f12"] = sorted(bpy.ops.render.render(write_still=True))
except RuntimeError as e:
    out["f12"] = str(e)
out["f12_file"] = (work / "f12.png").is_file()
out["stop"] = sorted(bpy.ops.painted_skin.backend_stop())
repos = list(bpy.context.preferences.extensions.repos)
index = next(i for i, r in enumerate(repos) if r.module == "user_default")
out["uninstall"] = sorted(bpy.ops.extensions.package_uninstall(
    repo_index=index, pkg_id=pkg.rsplit(".", 1)[1]))
print("RESULT " + json.dumps(out))
'''


@pytest.mark.skipif((sys.platform, platform.machine()) != ("linux", "x86_64"),
                    reason="the test zip's wheels are for linux-x64")
def test_zip_installs_and_runs_end_to_end_in_a_bpy_only_python(linux_zip, tmp_path):
    python = _bpy_only_python()
    bare = subprocess.run([str(python), "-c", "import zmq"], capture_output=True, timeout=60)
    assert bare.returncode != 0, "the bpy-only venv has pyzmq: the test would prove nothing"
    probe = tmp_path / "probe.py"
    probe.write_text(_PROBE)
    work = tmp_path / "work"
    work.mkdir()
    res = tmp_path / "blender-user"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["BLENDER_USER_RESOURCES"] = str(res)
    url = f"tcp://127.0.0.1:{_free_port()}"
    run = subprocess.run([str(python), str(probe), str(linux_zip), PKG, str(work),
                          sys.executable, url], capture_output=True, text=True, timeout=600,
                         env=env, cwd=tmp_path)
    line = next((ln for ln in run.stdout.splitlines() if ln.startswith("RESULT ")), None)
    assert run.returncode == 0 and line, \
        f"probe failed:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    out = json.loads(line.split(" ", 1)[1])
    assert out["zmq_before"] is False
    assert out["install"] == ["FINISHED"]
    for op in ("retarget", "detect_map", "render_passes", "preview_pass", "add_camera",
               "restyle", "backend_start", "backend_check", "backend_connect"):
        assert op in out["ops"], f"painted_skin.{op} is not registered: {out['ops']}"
    assert out["panels"] == ["PS_PT_passes", "PS_PT_restyle", "PS_PT_retarget"]
    assert out["restyle_module"] == f"{PKG}.addon.blender.restyle.panel"
    assert Path(out["zmq_file"]).is_relative_to(res), out["zmq_file"]  # the bundled wheel
    assert {"retarget_clip", "make_passes", "restyle_shot"} <= set(out["api"])
    assert {"retarget", "passes", "restyle", "serve", "broker"} <= set(out["cli"])
    assert all(m.startswith(PKG + ".") for m in out["api"].values()), out["api"]
    assert out["detect"] == out["retarget"] == ["FINISHED"] and out["action"] == "walk"
    assert out["passes"] == ["FINISHED"]
    assert {"mask/0001.png", "mask/0002.png", "depth16/0002.png"} <= set(out["pass_files"])
    assert "lacks pyzmq" in out["check_bare"] and "pip install" in out["check_bare"]
    assert "exited with code" in out["start_bare"]
    assert "No module named 'zmq'" in out["log_tail"]
    assert out["check"] == ["FINISHED"]
    assert out["start"] == ["FINISHED"] and out["restyle"] == ["FINISHED"]
    assert out["restyled"] == ["0001.png", "0002.png"]
    assert out["f12"] == ["FINISHED"] and out["f12_file"], out["f12"]  # the render engine
    assert out["stop"] == out["uninstall"] == ["FINISHED"]


def _blender_ext():
    import importlib.util

    spec = importlib.util.find_spec("bpy")
    path = (Path(spec.origin).parent / "5.0" / "scripts" / "addons_core" / "bl_pkg" / "cli"
            / "blender_ext.py")
    mod_spec = importlib.util.spec_from_file_location("_ps_blender_ext", path)
    module = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(module)
    return module


PLATFORM_WHEEL = {"linux-x64": "manylinux", "windows-x64": "win_amd64",
                  "macos-arm64": "macosx", "macos-x64": "macosx"}


def test_each_platform_zip_holds_its_pyzmq_and_loads_in_its_blender(tmp_path):
    """``make extension``'s zips: one per platform and Blender family, each with exactly
    the pyzmq wheel its Blender loads, and a manifest that Blender's own compatibility
    check accepts for that family's CPython (a cp311 wheel in a 5.1 zip would make a
    Python 3.13 Blender refuse the extension)."""
    built_or_skip(tmp_path)
    ext = _blender_ext()
    stem = f"{MANIFEST['id']}-{MANIFEST['version']}"
    families = {"": ((3, 11, 0), "cp311-cp311", (5, 0, 1), (5, 1, 0)),
                "blender5.1-": ((3, 13, 0), "cp312-abi3", (5, 1, 0), None)}
    expected = {f"{stem}-{fam}{p.replace('-', '_')}.zip" for fam in families
                for p in PLATFORM_WHEEL}
    assert {z.name for z in tmp_path.glob("*.zip")} == expected
    for fam, (py, tag, blender, too_new) in families.items():
        for plat, wheel_os in PLATFORM_WHEEL.items():
            zip_path = tmp_path / f"{stem}-{fam}{plat.replace('-', '_')}.zip"
            with zipfile.ZipFile(zip_path) as zf:
                names = zf.namelist()
                manifest = tomllib.loads(zf.read("blender_manifest.toml").decode())
            wheels = [n for n in names if n.startswith("wheels/")]
            assert len(wheels) == 1 and wheels[0].startswith("wheels/pyzmq-"), wheels
            assert f"-{tag}-" in wheels[0] and wheel_os in wheels[0], wheels
            assert manifest["build"]["generated"]["platforms"] == [plat]
            assert not [n for n in names if n.startswith(("backend/diffusion/onnx", "tests/"))]
            # the add-on, wire, the echo backend and the CLI; an exclude pattern gone missing
            # (the diffusion, skin-model, evaluation code, tools) would ship them all
            shipped = sum(1 for n in names if n.endswith(".py"))
            assert shipped < 0.8 * TREE_MODULES, (shipped, TREE_MODULES)
            versions = sorted(".".join(map(str, v)) for v in
                              ext.python_versions_from_wheels(manifest["wheels"]))
            skip = ext.repository_filter_skip(
                item={"blender_version_min": manifest["blender_version_min"],
                      **({"blender_version_max": manifest["blender_version_max"]}
                         if "blender_version_max" in manifest else {}),
                      "python_versions": versions, "platforms": [plat]},
                filter_blender_version=blender, filter_python_version=py,
                filter_platform=plat, skip_message_fn=None, error_fn=print)
            assert skip is False, f"{zip_path.name} would be refused by Blender {blender}"
            if too_new:
                assert ext.repository_filter_skip(
                    item={"blender_version_min": manifest["blender_version_min"],
                          "blender_version_max": manifest["blender_version_max"],
                          "python_versions": versions, "platforms": [plat]},
                    filter_blender_version=too_new, filter_python_version=(3, 13, 0),
                    filter_platform=plat, skip_message_fn=None, error_fn=print) is True


_HIDDEN_REGISTER = r'''
import importlib, json, pkgutil, sys
hidden = sys.argv[1]


class Hide:
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name == hidden or name.startswith(hidden + "."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, Hide)
import bpy
import painted_skin

out = {"imported": [], "failed": {}}
painted_skin.register()
out["ops"] = sorted(dir(bpy.ops.painted_skin))
out["restyle_module"] = bpy.types.PS_PT_restyle.__module__
for info in pkgutil.walk_packages([str(p) for p in painted_skin.addon.__path__],
                                  "painted_skin.addon."):
    try:
        importlib.import_module(info.name)
        out["imported"].append(info.name)
    except ImportError as e:
        out["failed"][info.name] = str(e)
from painted_skin import wire
out["shm"] = wire.shm_supported()
painted_skin.unregister()
out["after"] = sorted(dir(bpy.ops.painted_skin))
print("RESULT " + json.dumps(out))
'''


def _register_hiding(module: str, tmp_path: Path) -> dict:
    script = tmp_path / "hidden.py"
    script.write_text(_HIDDEN_REGISTER)
    env = {**os.environ, "BLENDER_USER_RESOURCES": str(tmp_path / "res")}
    run = subprocess.run([sys.executable, str(script), module], capture_output=True,
                         text=True, timeout=300, env=env, cwd=tmp_path)
    line = next((ln for ln in run.stdout.splitlines() if ln.startswith("RESULT ")), None)
    assert run.returncode == 0 and line, f"{run.stdout[-2000:]}\n{run.stderr[-3000:]}"
    return json.loads(line.split(" ", 1)[1])


def test_without_fcntl_every_addon_module_imports_and_all_registers(tmp_path):
    """Windows has no fcntl: the add-on registers whole, shared memory is off (the
    socket carries the arrays)."""
    out = _register_hiding("fcntl", tmp_path)
    assert out["failed"] == {}
    assert "painted_skin.addon.blender.client.backend_client" in out["imported"]
    assert {"retarget", "render_passes", "restyle", "backend_start"} <= set(out["ops"])
    assert out["restyle_module"] == "painted_skin.addon.blender.restyle.panel"
    assert out["shm"] is False
    assert out["after"] == []


def test_without_pyzmq_retarget_and_passes_register_and_restyle_says_why(tmp_path):
    out = _register_hiding("zmq", tmp_path)
    assert {"retarget", "detect_map", "render_passes", "add_camera", "backend_check"} \
        <= set(out["ops"])
    assert "restyle" not in out["ops"]
    assert out["restyle_module"] == "painted_skin.addon.blender.restyle.unavailable"
    assert "zmq" in out["failed"].get("painted_skin.addon.blender.restyle.loop", "")
    assert out["after"] == []
