"""Build the extension zips with their run-time wheels bundled (``make extension``).

A real Blender's Python has numpy but not pyzmq (nor numba), so the extension must ship
every other package the add-on imports as wheels in its manifest. This script

1. stages the files the manifest's ``paths_exclude_pattern`` lets through into
   ``build/stage/<family>/``;
2. collects the wheels per platform: pyzmq always, numba + llvmlite with ``--fast`` (the
   compiled kernels of the fast pass engine) — from ``--wheels-dir`` (offline farms), from
   the cache folder, or with ``pip download --only-binary=:all: --no-deps``;
3. writes the staged manifest with ``platforms``, ``wheels`` and the Blender range;
4. runs Blender's ``blender_ext.py build --split-platforms``: one zip per platform, each
   with only its wheels.

Two Blender families, because Blender decides from the wheels' Python tags whether an
extension may load at all (a zip holding a cp311 wheel is refused by a Python 3.13
Blender, even beside an abi3 wheel):

- ``painted_skin-<v>-<platform>.zip``: Blender 5.0 (CPython 3.11; cp311 wheels);
- ``painted_skin-<v>-blender5.1-<platform>.zip``: Blender 5.1+ (CPython 3.13; pyzmq's
  cp312-abi3 wheel, numba's cp313).

The repository's manifest stays wheel-free. Offline: download the wheels elsewhere (the
``pip download`` lines are printed with ``--help``), put them in one folder, pass
``--wheels-dir``.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
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
PYZMQ_SPEC = "pyzmq>=26,<28"
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


@dataclass(frozen=True)
class Family:
    """Blender releases that share one CPython: the wheels their zips bundle."""

    key: str  # the --blender value
    suffix: str  # inserted into the zip name ("" for the tested family)
    python: str
    blender_min: str
    blender_max: str | None
    # package -> (requirement, pip --abi values): abi3 wheels built for an older CPython
    # load in a newer one (Blender's own rule), so pyzmq's cp312-abi3 serves 3.13.
    packages: dict[str, tuple[str, tuple[str, ...]]]


FAMILIES: dict[str, Family] = {
    # Blender 5.0 (tested: bpy 5.0.1); its bundled numpy is 1.26, which numba<0.69 supports.
    "5.0": Family("5.0", "", "3.11", "5.0.0", "5.1.0", {
        "pyzmq": (PYZMQ_SPEC, ("cp311",)),
        "numba": ("numba>=0.59,<0.69", ("cp311",)),
        "llvmlite": ("llvmlite", ("cp311",))}),
    # Blender 5.1+ (CPython 3.13, numpy 2): built from the same sources, not tested here.
    "5.1": Family("5.1", "blender5.1-", "3.13", "5.1.0", None, {
        "pyzmq": (PYZMQ_SPEC, ("abi3",)),
        "numba": ("numba>=0.61,<0.69", ("cp313",)),
        "llvmlite": ("llvmlite", ("cp313",))}),
}
DEFAULT_FAMILIES = ("5.0", "5.1")
NETWORK = ("pyzmq",)  # always bundled: the Restyle section talks to the backend over ZeroMQ
FAST = ("numba", "llvmlite")  # --fast: compiled kernels for the fast pass engine


class BuildError(RuntimeError):
    """A build step failed; the message says what and how to fix it."""


@dataclass(frozen=True)
class Wheel:
    """A wheel file and the parts of its name that matter here."""

    path: Path
    name: str  # normalised distribution name
    version: str
    python_tag: str
    abi_tag: str
    platform_tag: str

    @classmethod
    def parse(cls, path: Path) -> Wheel | None:
        """The wheel named ``path`` (``None`` when the name does not follow the spec)."""
        parts = path.name[: -len(".whl")].split("-") if path.name.endswith(".whl") else []
        if not 5 <= len(parts) <= 6:
            return None
        return cls(path, parts[0].lower().replace("_", "-"), parts[1], parts[-3], parts[-2],
                   parts[-1])


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


def python_ok(wheel: Wheel, python: str) -> bool:
    """Whether Blender's CPython ``python`` ("3.11") loads ``wheel`` (Blender's own rule:
    the exact version, or an abi3 wheel built for the same or an older 3.x)."""
    want = tuple(int(v) for v in python.split("."))
    for tag in wheel.python_tag.split("."):
        m = re.fullmatch(r"(?:cp|py)(\d)(\d*)", tag)
        if not m:
            continue
        have = (int(m[1]), int(m[2])) if m[2] else (int(m[1]),)
        if have in (want, want[:1]):
            return True
        if "abi3" in wheel.abi_tag.split(".") and len(have) == 2 and have[0] == want[0] \
                and have <= want:
            return True
    return False


def _platform_ok(ext: ModuleType, wheel: Wheel, platform: str, python: str) -> bool:
    """Whether Blender puts ``wheel`` into ``platform``'s zip and ``python`` can load it."""
    return python_ok(wheel, python) and bool(
        ext.blender_platform_compatible_with_wheel_platform(platform, wheel.platform_tag))


def _newest(fits: list[Wheel], what: str) -> Wheel:
    tools = _packaging()
    if len(fits) > 1 and tools is None:
        raise BuildError(f"several {what} wheels: {', '.join(w.path.name for w in fits)}; "
                         "keep one")
    return max(fits, key=lambda w: tools[0](w.version)) if tools else fits[0]


def _matching(folder: Path, name: str, spec: str, platform: str, family: Family,
              ext: ModuleType) -> list[Wheel]:
    """Wheels of ``name`` in ``folder`` that fit ``platform``, the family's Python and
    ``spec``'s version range."""
    tools = _packaging()
    found = [w for p in sorted(folder.glob("*.whl")) if (w := Wheel.parse(p))]
    fits = [w for w in found if w.name == name and _platform_ok(ext, w, platform, family.python)]
    if tools is not None:
        wanted = tools[2](spec).specifier
        fits = [w for w in fits if wanted.contains(w.version, prereleases=True)]
    return fits


def pip_command(spec: str, platform: str, family: Family, abis: tuple[str, ...],
                dest: Path) -> str:
    """The ``pip download`` line that fetches ``spec`` for ``platform`` into ``dest``."""
    return shlex.join(_pip_args(spec, platform, family, abis, dest))


def _pip_args(spec: str, platform: str, family: Family, abis: tuple[str, ...],
              dest: Path) -> list[str]:
    tags = [a for t in PLATFORM_TAGS[platform] for a in ("--platform", t)]
    return [sys.executable, "-m", "pip", "download", "--only-binary=:all:", "--no-deps",
            "--python-version", family.python, "--implementation", "cp",
            *(a for abi in abis for a in ("--abi", abi)), *tags, "--dest", str(dest),
            "--disable-pip-version-check", spec]


def pip_download(spec: str, platform: str, family: Family, abis: tuple[str, ...],
                 dest: Path) -> Wheel:
    """Download the newest wheel matching ``spec`` for ``platform`` into ``dest`` (a
    fresh folder, then moved into the cache by the caller)."""
    dest.mkdir(parents=True, exist_ok=True)
    args = _pip_args(spec, platform, family, abis, dest)
    try:
        proc = subprocess.run(args, capture_output=True, text=True, timeout=900)
    except subprocess.TimeoutExpired as exc:
        raise BuildError(f"pip download {spec} for {platform} took over 15 minutes") from exc
    name = re.split(r"[<>=!~ ;\[]", spec, maxsplit=1)[0].lower()
    wheels = [w for p in dest.glob("*.whl") if (w := Wheel.parse(p)) and w.name == name]
    if proc.returncode != 0 or len(wheels) != 1:
        tail = "\n  ".join((proc.stdout + proc.stderr).strip().splitlines()[-6:])
        raise BuildError(
            f"could not download {spec} for {platform}, Blender {family.key} "
            f"(CPython {family.python}; pip tags {', '.join(PLATFORM_TAGS[platform])}):\n"
            f"  {tail}\n"
            "Fix: check the connection to PyPI (behind a proxy set HTTPS_PROXY or PIP_PROXY; "
            "a mirror: PIP_INDEX_URL), or leave the platform out with --platform, or download "
            "the wheels on another machine and pass --wheels-dir DIR, e.g.:\n  "
            + pip_command(spec, platform, family, abis, Path("WHEELS_DIR")))
    return wheels[0]


def collect(package: str, platform: str, family: Family, ext: ModuleType,
            wheels_dir: Path | None, cache: Path, spec: str | None = None) -> Wheel:
    """One wheel of ``package`` for ``platform``: from ``wheels_dir`` when given (offline,
    nothing downloaded), else from the cache folder, else downloaded into it."""
    spec = spec or family.packages[package][0]
    abis = family.packages[package][1]
    what = f"{package} ({spec}) for {platform}, Blender {family.key} (CPython {family.python})"
    if wheels_dir is not None:
        fits = _matching(wheels_dir, package, spec, platform, family, ext)
        if not fits:
            other = [w.path.name for w in _matching(wheels_dir, package, package, platform,
                                                    family, ext)]
            found = (f"{wheels_dir} has {', '.join(other)}, but {spec} is needed"
                     if other else f"no {package} wheel for {platform} (CPython "
                                   f"{family.python}) in {wheels_dir}")
            raise BuildError(f"{found}; download one with: "
                             f"{pip_command(spec, platform, family, abis, wheels_dir)}")
        return _newest(fits, what)
    fits = _matching(cache, package, spec, platform, family, ext)
    if fits:
        return _newest(fits, what)
    with tempfile.TemporaryDirectory(prefix="painted-skin-wheel-", dir=cache) as tmp:
        got = pip_download(spec, platform, family, abis, Path(tmp))
        target = cache / got.path.name
        os.replace(got.path, target)
    return Wheel.parse(target)


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


def wheels_for(platform: str, family: Family, fast: bool, ext: ModuleType,
               wheels_dir: Path | None, cache: Path) -> dict[str, Wheel]:
    """Every wheel ``platform``'s zip of ``family`` bundles."""
    picked = {name: collect(name, platform, family, ext, wheels_dir, cache) for name in NETWORK}
    if fast:
        picked["numba"] = collect("numba", platform, family, ext, wheels_dir, cache)
        need = llvmlite_requirement(picked["numba"].path) or "llvmlite"
        picked["llvmlite"] = collect("llvmlite", platform, family, ext, wheels_dir, cache,
                                     spec=need)
        check_pair(platform, picked)
    return picked


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


def check_split(ext: ModuleType, platforms: list[str], family: Family, names: tuple[str, ...],
                wheels: list[Wheel]) -> None:
    """Each platform's zip must get exactly one wheel of each package (a macOS
    ``universal2`` wheel lands in both macOS zips and can clash with another version)."""
    for platform in platforms:
        for name in names:
            got = sorted(w.path.name for w in wheels
                         if w.name == name and _platform_ok(ext, w, platform, family.python))
            if len(got) != 1:
                raise BuildError(
                    f"the {platform} zip would get {len(got)} {name} wheels ({', '.join(got)}); "
                    "keep one version for all platforms in --wheels-dir, or build that "
                    "platform on its own with --platform")


def write_manifest(stage: Path, platforms: list[str], wheel_names: list[str],
                   family: Family) -> None:
    """Add ``platforms``, ``wheels`` and the family's Blender range (top-level keys:
    before the first table)."""
    path = stage / MANIFEST
    text = re.sub(r'^blender_version_min\s*=.*$', f'blender_version_min = '
                  f'{repr_str(family.blender_min)}', path.read_text(), count=1, flags=re.M)
    block = (f"platforms = [{', '.join(repr_str(p) for p in platforms)}]\n"
             "wheels = [\n" + "".join(f"  {repr_str('./wheels/' + n)},\n" for n in wheel_names)
             + "]\n")
    if family.blender_max:
        block += f"blender_version_max = {repr_str(family.blender_max)}\n"
    table = re.search(r"^\[", text, re.M)
    at = table.start() if table else len(text)
    text = text[:at] + block + "\n" + text[at:]
    tomllib.loads(text)
    path.write_text(text)


def repr_str(value: str) -> str:
    """A TOML basic string (names and paths here hold no quotes or backslashes)."""
    if '"' in value or "\\" in value:
        raise BuildError(f"unexpected character in {value!r}")
    return f'"{value}"'


def zip_name(manifest: dict, family: Family, platform: str) -> str:
    return (f"{manifest['id']}-{manifest['version']}-{family.suffix}"
            f"{platform.replace('-', '_')}.zip")


def build_family(args: argparse.Namespace, family: Family, ext_path: Path, ext: ModuleType,
                 cache: Path) -> list[Path]:
    """Stage, collect wheels, write the manifest, run ``blender_ext.py build`` for one
    family; returns its zips."""
    platforms = list(dict.fromkeys(args.platform or DEFAULT_PLATFORMS))
    source, out = Path(args.source_dir), Path(args.output_dir)
    stage = Path(args.stage_dir) / family.key
    count = stage_sources(source, stage, ext, skip=(Path(args.stage_dir), out, cache))
    print(f"Blender {family.key}: staged {count} files in {stage}")
    wheels_dir = Path(args.wheels_dir) if args.wheels_dir else None
    chosen: dict[str, Wheel] = {}
    for platform in platforms:
        picked = wheels_for(platform, family, args.fast, ext, wheels_dir, cache)
        print(f"  {platform}: " + ", ".join(w.path.name for w in picked.values()))
        for wheel in picked.values():
            chosen.setdefault(wheel.path.name, wheel)
    wheels = list(chosen.values())
    check_split(ext, platforms, family, NETWORK + (FAST if args.fast else ()), wheels)
    (stage / "wheels").mkdir()
    for wheel in wheels:
        shutil.copy2(wheel.path, stage / "wheels" / wheel.path.name)
    write_manifest(stage, platforms, sorted(chosen), family)

    built = stage.parent / f"{family.key}-out"
    shutil.rmtree(built, ignore_errors=True)
    built.mkdir()
    proc = subprocess.run([sys.executable, str(ext_path), "build", "--split-platforms",
                           "--source-dir", str(stage), "--output-dir", str(built)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise BuildError(f"blender_ext.py build failed:\n{proc.stdout}\n{proc.stderr}")
    manifest = tomllib.loads((stage / MANIFEST).read_text())
    zips = []
    for p in platforms:
        made = built / f"{manifest['id']}-{manifest['version']}-{p.replace('-', '_')}.zip"
        if not made.is_file():
            raise BuildError(f"blender_ext.py did not write {made.name}:\n{proc.stdout}")
        target = out / zip_name(manifest, family, p)
        if target.is_symlink() or (target.exists() and not target.is_file()):
            raise BuildError(f"{target} is not a regular file: remove it or choose another "
                             "--output-dir (it would be replaced, not written)")
        os.replace(made, target)
        zips.append(target)
        print(f"built {target} ({target.stat().st_size / 2**20:.1f} MiB)")
    shutil.rmtree(built, ignore_errors=True)
    return zips


def build(args: argparse.Namespace) -> list[Path]:
    """Every requested family's zips."""
    ext_path = blender_ext_path(args.blender_ext)
    ext = load_blender_ext(ext_path)
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    cache = Path(args.cache_dir)
    cache.mkdir(parents=True, exist_ok=True)
    zips: list[Path] = []
    for key in dict.fromkeys(args.blender or DEFAULT_FAMILIES):
        zips += build_family(args, FAMILIES[key], ext_path, ext, cache)
    return zips


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    lines = [pip_command(FAMILIES[k].packages[n][0], "linux-x64", FAMILIES[k],
                         FAMILIES[k].packages[n][1], Path("WHEELS_DIR"))
             for k in DEFAULT_FAMILIES for n in NETWORK + FAST[:1]]
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Pre-download for --wheels-dir (per platform and Blender family; with --fast "
               "also the llvmlite that the numba wheel requires):\n  " + "\n  ".join(lines),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--platform", action="append", choices=sorted(PLATFORM_TAGS),
                        help=f"a Blender platform; repeat for several (default: "
                             f"{', '.join(DEFAULT_PLATFORMS)})")
    parser.add_argument("--blender", action="append", choices=sorted(FAMILIES),
                        help="a Blender family: 5.0 (CPython 3.11, tested) or 5.1 (5.1 and "
                             "later, CPython 3.13); repeat for several (default: both)")
    parser.add_argument("--fast", action="store_true",
                        help="also bundle numba and llvmlite (compiled fast-pass kernels)")
    parser.add_argument("--wheels-dir", help="take every wheel from this folder instead of "
                        "downloading (offline machines)")
    parser.add_argument("--cache-dir", default=str(REPO / "build" / "wheels"),
                        help="downloaded wheels are kept here and reused (default: "
                             "build/wheels)")
    parser.add_argument("--source-dir", default=str(REPO), help="the extension source")
    parser.add_argument("--stage-dir", default=str(REPO / "build" / "stage"),
                        help="the staged copies (emptied on each run)")
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
