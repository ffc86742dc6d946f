"""Build the extension with numba bundled: one zip per platform (``make extension-fast``).

Blender's Python has no numba, so the ``fast`` pass engine falls back to numpy inside
Blender unless the extension ships the wheels. This script

1. stages the files ``make extension`` would pack (the manifest's own
   ``paths_exclude_pattern``) into ``build/stage/``;
2. fetches the numba and llvmlite wheels for CPython 3.11 (Blender 4.2-5.0) per platform
   with ``pip download --only-binary=:all: --no-deps`` (llvmlite at the version the
   chosen numba wheel requires), or takes them from ``--wheels-dir``;
3. writes the staged manifest with ``platforms`` and ``wheels``;
4. runs Blender's ``blender_ext.py build --split-platforms``: one
   ``painted_skin-<version>-<platform>.zip`` per platform, each with only its wheels.

The repository's manifest stays wheel-free, so ``make extension`` needs no downloads.
Offline farms: download the wheels elsewhere (same ``pip download`` flags, printed with
``--help``), copy them into a folder and pass ``--wheels-dir``.
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]
MANIFEST = "blender_manifest.toml"
STAGE_MARKER = ".painted-skin-stage"
PYTHON_VERSION = "3.11"  # Blender 4.2-5.0; its bundled numpy is 1.26.
ABI = "cp311"
# numba releases that support Python 3.11 and numpy 1.26 (0.68 still allows numpy>=1.22).
NUMBA_SPEC = "numba>=0.59,<0.69"
PACKAGES = ("numba", "llvmlite")
# Blender platform -> pip ``--platform`` tags (the oldest OS each Blender build runs on;
# pip adds the older macOS tags itself).
PLATFORM_TAGS: dict[str, tuple[str, ...]] = {
    "linux-x64": ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64"),
    "linux-arm64": ("manylinux_2_28_aarch64", "manylinux_2_17_aarch64",
                    "manylinux2014_aarch64"),
    "windows-x64": ("win_amd64",),
    "windows-arm64": ("win_arm64",),
    "macos-arm64": ("macosx_11_0_arm64",),
    "macos-x64": ("macosx_11_0_x86_64",),
}
DEFAULT_PLATFORMS = ("linux-x64", "windows-x64", "macos-arm64", "macos-x64")


class BuildError(RuntimeError):
    """A build step failed; the message says what and how to fix it."""


@dataclass(frozen=True)
class Wheel:
    """A wheel file and the parts of its name that matter here."""

    path: Path
    name: str  # normalised distribution name
    version: str
    python_tag: str
    platform_tag: str

    @classmethod
    def parse(cls, path: Path) -> Wheel | None:
        """The wheel named ``path`` (``None`` when the name does not follow the spec)."""
        parts = path.name[: -len(".whl")].split("-") if path.name.endswith(".whl") else []
        if not 5 <= len(parts) <= 6:
            return None
        return cls(path, parts[0].lower().replace("_", "-"), parts[1], parts[-3], parts[-1])


def blender_ext_path(override: str | None = None) -> Path:
    """Blender's ``blender_ext.py``: ``override``, or the one inside the ``bpy`` module."""
    if override:
        path = Path(override)
    else:
        spec = importlib.util.find_spec("bpy")
        if spec is None or not spec.origin:
            raise BuildError("the bpy module is not installed: pip install -e '.[blender]', or "
                             "pass --blender-ext <Blender>/<version>/scripts/addons_core/bl_pkg/"
                             "cli/blender_ext.py")
        path = (Path(spec.origin).parent / "5.0" / "scripts" / "addons_core" / "bl_pkg"
                / "cli" / "blender_ext.py")
    if not path.is_file():
        raise BuildError(f"Blender's extension tool is missing: {path}")
    return path


def load_blender_ext(path: Path) -> ModuleType:
    """Import ``blender_ext.py`` (its helpers: path patterns, wheel platform tags)."""
    spec = importlib.util.spec_from_file_location("_painted_skin_blender_ext", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def stage_sources(source: Path, stage: Path, ext: ModuleType, skip: tuple[Path, ...]) -> int:
    """Copy what the manifest's ``paths_exclude_pattern`` lets through into an emptied
    ``stage``; returns the number of files. ``skip`` folders are never entered."""
    manifest = tomllib.loads((source / MANIFEST).read_text())
    for key in ("wheels", "platforms"):
        if key in manifest:
            raise BuildError(f"{source / MANIFEST} declares {key!r}: the repository manifest "
                             "stays wheel-free; this script adds both to the staged copy")
    if stage.exists():
        if any(stage.iterdir()) and not (stage / STAGE_MARKER).is_file():
            raise BuildError(f"refusing to empty {stage}: it is not a stage folder made by "
                             "this script")
        shutil.rmtree(stage)
    stage.mkdir(parents=True)
    (stage / STAGE_MARKER).write_text("made by tools/build_extension.py; emptied on each run\n")
    patterns = manifest.get("build", {}).get("paths_exclude_pattern", [])
    matcher = ext.PathPatternMatch(patterns)
    skipped = {p.resolve() for p in skip}

    def keep(rel: str, is_dir: bool) -> bool:
        rel = rel.replace("\\", "/")
        if is_dir and (source / rel).resolve() in skipped:
            return False
        return not matcher.test_path(rel + "/" if is_dir else rel)

    count = 0
    for abs_path, rel in ext.scandir_recursive(str(source), filter_fn=keep):
        target = stage / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(abs_path, target)
        count += 1
    return count


def _packaging() -> tuple[type, type, type] | None:
    """(Version, SpecifierSet, Requirement) from ``packaging`` (or pip's copy)."""
    try:
        from packaging.requirements import Requirement
        from packaging.specifiers import SpecifierSet
        from packaging.version import Version
    except ImportError:
        try:
            from pip._vendor.packaging.requirements import Requirement
            from pip._vendor.packaging.specifiers import SpecifierSet
            from pip._vendor.packaging.version import Version
        except ImportError:
            return None
    return Version, SpecifierSet, Requirement


def llvmlite_requirement(numba_wheel: Path) -> str | None:
    """The ``llvmlite`` requirement in a numba wheel's METADATA (``None`` if it has none)."""
    with zipfile.ZipFile(numba_wheel) as zf:
        meta = next((n for n in zf.namelist()
                     if n.count("/") == 1 and n.endswith(".dist-info/METADATA")), None)
        text = zf.read(meta).decode("utf-8", "replace") if meta else ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip().lower() == "requires-dist" and re.match(r"\s*llvmlite\b", value, re.I):
            return value.split(";")[0].strip()
    return None


def _platform_ok(ext: ModuleType, wheel: Wheel, platform: str) -> bool:
    """Whether Blender puts ``wheel`` into ``platform``'s zip and Python 3.11 can load it."""
    versions = ext.python_versions_from_wheel_python_tag(wheel.python_tag)
    py = tuple(int(v) for v in PYTHON_VERSION.split("."))
    if isinstance(versions, str) or not ({py, py[:1]} & versions):
        return False
    return bool(ext.blender_platform_compatible_with_wheel_platform(platform,
                                                                    wheel.platform_tag))


def pick_local(wheels_dir: Path, platform: str, ext: ModuleType) -> dict[str, Wheel]:
    """numba and llvmlite for ``platform`` from ``wheels_dir`` (newest when several)."""
    found = [w for p in sorted(wheels_dir.glob("*.whl")) if (w := Wheel.parse(p))]
    tools = _packaging()
    picked: dict[str, Wheel] = {}
    for name in PACKAGES:
        fits = [w for w in found if w.name == name and _platform_ok(ext, w, platform)]
        if not fits:
            raise BuildError(
                f"no {name} wheel for {platform} (CPython {PYTHON_VERSION}) in {wheels_dir}; "
                f"download one with: {pip_command(name, platform, Path(wheels_dir))}")
        if len(fits) > 1 and tools is None:
            raise BuildError(f"several {name} wheels for {platform} in {wheels_dir}: "
                             f"{', '.join(w.path.name for w in fits)}; keep one")
        picked[name] = max(fits, key=lambda w: tools[0](w.version)) if tools else fits[0]
    return picked


def pip_command(spec: str, platform: str, dest: Path) -> str:
    """The ``pip download`` line that fetches ``spec`` for ``platform`` into ``dest``."""
    return shlex.join(_pip_args(spec, platform, dest))


def _pip_args(spec: str, platform: str, dest: Path) -> list[str]:
    tags = [a for t in PLATFORM_TAGS[platform] for a in ("--platform", t)]
    return [sys.executable, "-m", "pip", "download", "--only-binary=:all:", "--no-deps",
            "--python-version", PYTHON_VERSION, "--implementation", "cp", "--abi", ABI,
            *tags, "--dest", str(dest), "--disable-pip-version-check", spec]


def pip_download(spec: str, platform: str, dest: Path) -> Wheel:
    """Download the newest wheel matching ``spec`` for ``platform`` into an empty ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    try:
        proc = subprocess.run(_pip_args(spec, platform, dest), capture_output=True, text=True,
                              timeout=900)
    except subprocess.TimeoutExpired as exc:
        raise BuildError(f"pip download {spec} for {platform} took over 15 minutes") from exc
    name = re.split(r"[<>=!~ ;\[]", spec, maxsplit=1)[0].lower()
    wheels = [w for p in dest.glob("*.whl") if (w := Wheel.parse(p)) and w.name == name]
    if proc.returncode != 0 or len(wheels) != 1:
        tail = "\n  ".join((proc.stdout + proc.stderr).strip().splitlines()[-6:])
        raise BuildError(
            f"could not download {spec} for {platform} "
            f"(pip tags {', '.join(PLATFORM_TAGS[platform])}):\n  {tail}\n"
            "Fix: check the connection to PyPI (behind a proxy set HTTPS_PROXY or PIP_PROXY; "
            "a mirror: PIP_INDEX_URL), or leave the platform out with --platform, or download "
            "the wheels on another machine and pass --wheels-dir DIR, e.g.:\n  "
            + pip_command(spec, platform, Path("WHEELS_DIR")))
    return wheels[0]


def fetch_wheels(platform: str, numba_spec: str, tmp: Path) -> dict[str, Wheel]:
    """numba (newest matching ``numba_spec``) and the llvmlite it requires, for ``platform``."""
    numba = pip_download(numba_spec, platform, tmp / platform / "numba")
    llvmlite_spec = llvmlite_requirement(numba.path) or "llvmlite"
    llvmlite = pip_download(llvmlite_spec, platform, tmp / platform / "llvmlite")
    return {"numba": numba, "llvmlite": llvmlite}


def check_pair(platform: str, picked: dict[str, Wheel]) -> None:
    """Fail when the llvmlite wheel is not the version the numba wheel requires."""
    need = llvmlite_requirement(picked["numba"].path)
    tools = _packaging()
    if not need or tools is None:
        return
    _, specifier_set, requirement = tools
    spec = specifier_set(str(requirement(need).specifier))
    if not spec.contains(picked["llvmlite"].version, prereleases=True):
        raise BuildError(f"{platform}: {picked['numba'].path.name} needs {need}, but the "
                         f"llvmlite wheel is {picked['llvmlite'].path.name}")


def check_split(ext: ModuleType, platforms: list[str], wheels: list[Wheel]) -> None:
    """Each platform's zip must get exactly one numba and one llvmlite (a macOS
    ``universal2`` wheel lands in both macOS zips and can clash with another version)."""
    for platform in platforms:
        for name in PACKAGES:
            got = sorted(w.path.name for w in wheels
                         if w.name == name and _platform_ok(ext, w, platform))
            if len(got) != 1:
                raise BuildError(
                    f"the {platform} zip would get {len(got)} {name} wheels ({', '.join(got)}); "
                    "pin one numba version for all platforms with --numba 'numba==X.Y.Z' or "
                    "build that platform on its own with --platform")


def write_manifest(stage: Path, platforms: list[str], wheel_names: list[str]) -> None:
    """Add ``platforms`` and ``wheels`` (top-level keys: before the first table)."""
    path = stage / MANIFEST
    text = path.read_text()
    block = (f"platforms = [{', '.join(repr_str(p) for p in platforms)}]\n"
             "wheels = [\n" + "".join(f"  {repr_str('./wheels/' + n)},\n" for n in wheel_names)
             + "]\n\n")
    table = re.search(r"^\[", text, re.M)
    at = table.start() if table else len(text)
    text = text[:at] + block + text[at:]
    tomllib.loads(text)
    path.write_text(text)


def repr_str(value: str) -> str:
    """A TOML basic string (names and paths here hold no quotes or backslashes)."""
    if '"' in value or "\\" in value:
        raise BuildError(f"unexpected character in {value!r}")
    return f'"{value}"'


def build(args: argparse.Namespace) -> list[Path]:
    """Stage, collect wheels, write the manifest, run ``blender_ext.py build``."""
    ext_path = blender_ext_path(args.blender_ext)
    ext = load_blender_ext(ext_path)
    platforms = list(dict.fromkeys(args.platform or DEFAULT_PLATFORMS))
    source, stage, out = Path(args.source_dir), Path(args.stage_dir), Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    count = stage_sources(source, stage, ext, skip=(stage, out))
    print(f"staged {count} files in {stage}")

    chosen: dict[Path, Wheel] = {}
    with tempfile.TemporaryDirectory(prefix="painted-skin-wheels-") as tmp:
        for platform in platforms:
            if args.wheels_dir:
                picked = pick_local(Path(args.wheels_dir), platform, ext)
            else:
                print(f"downloading {args.numba} and its llvmlite for {platform} ...")
                picked = fetch_wheels(platform, args.numba, Path(tmp))
            check_pair(platform, picked)
            print(f"  {platform}: " + ", ".join(w.path.name for w in picked.values()))
            for wheel in picked.values():
                chosen.setdefault(Path(wheel.path.name), wheel)
        wheels = list(chosen.values())
        check_split(ext, platforms, wheels)
        (stage / "wheels").mkdir()
        for wheel in wheels:
            shutil.copy2(wheel.path, stage / "wheels" / wheel.path.name)
    write_manifest(stage, platforms, sorted(w.path.name for w in wheels))

    proc = subprocess.run([sys.executable, str(ext_path), "build", "--split-platforms",
                           "--source-dir", str(stage), "--output-dir", str(out)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise BuildError(f"blender_ext.py build failed:\n{proc.stdout}\n{proc.stderr}")
    manifest = tomllib.loads((stage / MANIFEST).read_text())
    zips = [out / f"{manifest['id']}-{manifest['version']}-{p.replace('-', '_')}.zip"
            for p in platforms]
    missing = [z.name for z in zips if not z.is_file()]
    if missing:
        raise BuildError(f"blender_ext.py did not write {', '.join(missing)}:\n{proc.stdout}")
    for z in zips:
        print(f"built {z} ({z.stat().st_size / 2**20:.1f} MiB)")
    return zips


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Pre-download for --wheels-dir (per platform, then the llvmlite that the numba "
               "wheel requires):\n  " + pip_command(NUMBA_SPEC, "linux-x64", Path("WHEELS_DIR")),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--platform", action="append", choices=sorted(PLATFORM_TAGS),
                        help=f"a Blender platform; repeat for several (default: "
                             f"{', '.join(DEFAULT_PLATFORMS)})")
    parser.add_argument("--wheels-dir", help="take the numba and llvmlite wheels from this "
                        "folder instead of downloading them (offline machines)")
    parser.add_argument("--numba", default=NUMBA_SPEC,
                        help=f"numba requirement to download (default: {NUMBA_SPEC!r})")
    parser.add_argument("--source-dir", default=str(REPO), help="the extension source")
    parser.add_argument("--stage-dir", default=str(REPO / "build" / "stage"),
                        help="the staged copy (emptied on each run)")
    parser.add_argument("--output-dir", default=str(REPO / "build"), help="where zips go")
    parser.add_argument("--blender-ext", help="path to Blender's blender_ext.py (default: "
                        "the one in the installed bpy module)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Entry point: 0 on success, 1 with a message on stderr otherwise."""
    try:
        build(parse_args(argv))
    except BuildError as exc:
        print(f"build_extension: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
