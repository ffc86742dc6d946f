"""The extension zip as users get it: built and validated with Blender's own
``blender_ext.py``, installed into the real ``bpy`` (user resources in a temp
folder, see conftest), enabled, used, disabled and removed."""

from __future__ import annotations

import ast
import importlib.util
import os
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path, PurePosixPath

import pytest

REPO = Path(__file__).resolve().parents[1]
MANIFEST = tomllib.loads((REPO / "blender_manifest.toml").read_text())
PKG = f"bl_ext.user_default.{MANIFEST['id']}"
# Folders and files that are development-only and must never ship.
FORBIDDEN = ("tests/", ".venv/", ".git/", "bench/", "build/", "out/", ".ci/", "__pycache__/")
FORBIDDEN_FILES = ("Makefile", "pyproject.toml")
# Lazy imports that only the command line reaches (``painted-skin bench``), never Blender.
CLI_ONLY_IMPORTS = {("cli.py", "bench.retarget"), ("cli.py", "bench.passes"),
                    ("cli.py", "bench.diffusion"),
                    ("cli.py", "bench.transport")}


def _blender_ext() -> Path:
    spec = importlib.util.find_spec("bpy")
    assert spec is not None and spec.origin, "the bpy module is not installed"
    path = (Path(spec.origin).parent / "5.0" / "scripts" / "addons_core" / "bl_pkg" / "cli"
            / "blender_ext.py")
    assert path.is_file(), f"Blender's extension tool is missing: {path}"
    return path


def _run_ext(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(_blender_ext()), *args], capture_output=True,
                          text=True, timeout=60, cwd=REPO)


@pytest.fixture(scope="module")
def extension_zip(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("extension")
    proc = _run_ext("build", "--source-dir", str(REPO), "--output-dir", str(out))
    assert proc.returncode == 0, f"blender_ext.py build failed:\n{proc.stdout}\n{proc.stderr}"
    zips = list(out.glob("*.zip"))
    assert [z.name for z in zips] == [f"{MANIFEST['id']}-{MANIFEST['version']}.zip"]
    return zips[0]


def _names(zip_path: Path) -> list[str]:
    with zipfile.ZipFile(zip_path) as zf:
        return zf.namelist()


def test_manifest_validates():
    proc = _run_ext("validate", str(REPO))
    assert proc.returncode == 0, f"blender_ext.py validate failed:\n{proc.stdout}\n{proc.stderr}"


def test_zip_holds_the_addon_and_presets_but_no_dev_files(extension_zip):
    names = set(_names(extension_zip))
    assert {"blender_manifest.toml", "__init__.py"} <= names
    code = {p.relative_to(REPO).as_posix() for sub in ("addon", "rigs")
            for p in (REPO / sub).rglob("*.py") if "__pycache__" not in p.parts}
    assert code, "no add-on code found in the source tree"
    assert sorted(code - names) == []
    presets = {p.relative_to(REPO).as_posix() for p in (REPO / "rigs" / "presets").glob("*.toml")}
    assert presets and sorted(presets - names) == []
    shipped_dev = sorted(n for n in names
                         if n.startswith(FORBIDDEN) or n in FORBIDDEN_FILES
                         or any(part.startswith(".") or part.endswith(".egg-info")
                                for part in PurePosixPath(n).parts))
    assert shipped_dev == []
    # The zip's manifest is the source manifest: same id and version Blender installs.
    with zipfile.ZipFile(extension_zip) as zf:
        shipped = tomllib.loads(zf.read("blender_manifest.toml").decode())
    assert (shipped["id"], shipped["version"]) == (MANIFEST["id"], MANIFEST["version"])


def _module_of(name: str) -> PurePosixPath:
    return PurePosixPath(name[: -len(".py")]) if not name.endswith("__init__.py") \
        else PurePosixPath(name).parent


def _import_problems(zip_path: Path) -> tuple[list[str], list[str]]:
    """(absolute imports of the package, relative imports of modules not in the zip)."""
    with zipfile.ZipFile(zip_path) as zf:
        sources = {n: zf.read(n).decode() for n in zf.namelist() if n.endswith(".py")}
    modules = {_module_of(n).as_posix() for n in sources}
    absolute, unresolved = [], []
    for name, text in sources.items():
        for node in ast.walk(ast.parse(text, filename=name)):
            if isinstance(node, ast.Import):
                absolute += [f"{name}: import {a.name}" for a in node.names
                             if a.name.split(".")[0] == MANIFEST["id"]]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                if (node.module or "").split(".")[0] == MANIFEST["id"]:
                    absolute.append(f"{name}: from {node.module} import ...")
            elif isinstance(node, ast.ImportFrom) and (name, node.module) not in CLI_ONLY_IMPORTS:
                base = _module_of(name) if name.endswith("__init__.py") \
                    else _module_of(name).parent
                for _ in range(node.level - 1):
                    base = base.parent
                if node.module:  # from .a.b import x: a/b.py or a/b/__init__.py
                    candidates = {base.joinpath(*node.module.split(".")).as_posix()}
                else:  # from . import x: x is a module of the package (or a name in it)
                    candidates = {base.joinpath(a.name).as_posix() for a in node.names}
                    candidates.add(base.as_posix())
                if not candidates & modules:
                    unresolved.append(f"{name}: from {'.' * node.level}{node.module or ''}")
    return absolute, unresolved


def test_shipped_code_imports_only_itself_relatively(extension_zip):
    """Blender imports the zip as ``bl_ext.<repo>.painted_skin``: an absolute
    ``painted_skin.`` import would silently load the developer's editable copy
    (or fail for users), and a relative import of an unshipped module fails."""
    absolute, unresolved = _import_problems(extension_zip)
    assert absolute == []
    assert unresolved == []


@pytest.fixture
def installed(extension_zip, bpy_clean):
    """The zip installed into the user_default repository and enabled."""
    bpy = bpy_clean
    res = os.environ.get("BLENDER_USER_RESOURCES")
    repo = next(r for r in bpy.context.preferences.extensions.repos if r.module == "user_default")
    assert res and Path(repo.directory).is_relative_to(res), \
        f"refusing to install outside the test's user resources: {repo.directory}"
    assert not hasattr(bpy.types, "PAINTED_SKIN_OT_retarget"), \
        "the add-on is still registered by an earlier test"
    before = {m for m in sys.modules if m.split(".")[0] == MANIFEST["id"]}
    result = bpy.ops.extensions.package_install_files(
        filepath=str(extension_zip), repo="user_default", enable_on_install=True)
    assert result == {"FINISHED"}
    repo_index = list(bpy.context.preferences.extensions.repos).index(repo)
    try:
        yield bpy, Path(repo.directory) / MANIFEST["id"], before
    finally:
        if (Path(repo.directory) / MANIFEST["id"]).exists():
            bpy.ops.extensions.package_uninstall(repo_index=repo_index, pkg_id=MANIFEST["id"])


def test_installed_extension_registers_and_uninstalls_cleanly(installed, tmp_path):
    import addon_utils

    bpy, install_dir, editable_before = installed
    assert (install_dir / "blender_manifest.toml").is_file()
    assert addon_utils.check(PKG) == (True, True)
    assert PKG in bpy.context.preferences.addons
    # The operators and the panel come from the installed copy, not the editable checkout.
    for cls_name in ("PAINTED_SKIN_OT_retarget", "PAINTED_SKIN_OT_detect_map",
                     "PAINTED_SKIN_OT_save_map", "PAINTED_SKIN_OT_load_map",
                     "PS_PT_retarget", "PS_UL_bone_map"):
        cls = getattr(bpy.types, cls_name, None)
        assert cls is not None, f"{cls_name} is not registered"
        assert cls.__module__.startswith(PKG + "."), cls.__module__
    assert bpy.types.PS_PT_retarget.is_registered
    assert bpy.ops.painted_skin.retarget.get_rna_type().identifier == "PAINTED_SKIN_OT_retarget"
    assert bpy.ops.painted_skin.detect_map.get_rna_type().identifier \
        == "PAINTED_SKIN_OT_detect_map"
    assert hasattr(bpy.types.Scene, "painted_skin_retarget")

    # It works from the zip alone: its own demo builders, presets and operators.
    ext = sys.modules[PKG]
    assert Path(ext.__file__).parent == install_dir
    character = importlib.import_module(f"{PKG}.rigs.character")
    motion = importlib.import_module(f"{PKG}.rigs.motion")
    arm = character.build_demo_character()
    clip = motion.write_clip(tmp_path / "walk.bvh", "walk", frames=12, fps=24)
    s = bpy.context.scene.painted_skin_retarget
    s.source_kind, s.source_path, s.target_object = "FILE", str(clip), arm
    assert bpy.ops.painted_skin.detect_map() == {"FINISHED"}
    assert len(s.target_map) > 20
    assert bpy.ops.painted_skin.retarget() == {"FINISHED"}
    assert arm.animation_data.action.name == "walk"
    assert s.last_report.startswith("walk: 12 frames")
    new_editable = {m for m in sys.modules if m.split(".")[0] == MANIFEST["id"]} \
        - editable_before
    assert new_editable == set(), "the extension imported the editable checkout"

    # Uninstall: disabled, unregistered, files and modules gone.
    repos = list(bpy.context.preferences.extensions.repos)
    repo_index = next(i for i, r in enumerate(repos) if r.module == "user_default")
    assert bpy.ops.extensions.package_uninstall(repo_index=repo_index,
                                                pkg_id=MANIFEST["id"]) == {"FINISHED"}
    assert PKG not in bpy.context.preferences.addons
    for cls_name in ("PAINTED_SKIN_OT_retarget", "PAINTED_SKIN_OT_detect_map", "PS_PT_retarget",
                     "PS_UL_bone_map"):
        assert not hasattr(bpy.types, cls_name), f"{cls_name} is still registered"
    assert not hasattr(bpy.types.Scene, "painted_skin_retarget")
    assert not install_dir.exists()
    assert [m for m in sys.modules if m.startswith(PKG)] == []
