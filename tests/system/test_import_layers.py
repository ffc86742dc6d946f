"""The dependency rule of ARCHITECTURE.md, enforced: imports run one way between the
layers, no module is imported back by what it imports (no circle, lazy imports
inside functions included), and nothing imports the CLI.

Read from the source (an AST walk), so a wrong-way import fails here even when it
sits in a function no test calls.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SKIP = {"tests", "build", "out", "node_modules"}

# layer -> the layers it may import (besides itself)
ALLOWED = {
    "core": set(),                      # addon/core: pure Python + numpy
    "wire": set(),                      # the protocol both sides speak
    "motion": {"core"},                 # addon/motion: the library of generated motions
    "blender": {"core", "wire", "motion"},  # addon/: the bpy layer
    "demo": {"core", "blender", "motion"},  # demo/: the demo character, springs, textures
    "rigs": set(),                      # rigs/: data (presets, skin models), no code
    "backend": {"core", "wire"},        # a separate process: never bpy, never the add-on
    "entry": {"core", "wire", "motion", "blender", "demo", "rigs", "backend", "bench"},
    "bench": {"core", "wire", "motion", "blender", "demo", "rigs", "backend"},
    "tools": {"core", "wire", "motion", "blender", "demo", "rigs", "backend", "bench"},
    "package": {"blender"},             # the extension's register()
}
# Modules whose layer is not their folder's: the demo package's face and its runner are
# `painted-skin demo`'s entry point (the face serves the runner's names lazily).
EXACT = {"demo": "entry", "demo.run": "entry"}
PREFIXES = (("addon.core", "core"), ("addon.motion", "motion"), ("wire", "wire"),
            ("addon", "blender"), ("demo", "demo"), ("rigs", "rigs"), ("backend", "backend"),
            ("bench", "bench"), ("tools", "tools"), ("farm", "tools"), ("cli", "entry"),
            ("cli_commands", "entry"), ("api", "blender"))
MAX_MODULES = 15  # a folder of ours that holds more is a room that wants splitting


def _modules() -> dict[str, Path]:
    out = {}
    for p in ROOT.rglob("*.py"):
        rel = p.relative_to(ROOT)
        if rel.parts[0] in SKIP or any(part.startswith(".") for part in rel.parts):
            continue
        parts = list(rel.with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = p
    return out


MODULES = _modules()


def _target(module: str, node: ast.ImportFrom, package: bool) -> list[str]:
    """The modules of ours an ``import from`` names ("" is the root package)."""
    if node.level == 0:
        name = node.module or ""
        if name != "painted_skin" and not name.startswith("painted_skin."):
            return []
        base = name[len("painted_skin"):].lstrip(".")
    else:
        parts = module.split(".") if module else []
        parts = parts if package else parts[:-1]
        parts = parts[:len(parts) - (node.level - 1)]
        base = ".".join(parts + ([node.module] if node.module else []))
    if node.module is None or (node.level == 0 and node.module == "painted_skin"):
        return [".".join(filter(None, (base, a.name))) for a in node.names]
    # ``from pkg import submodule`` imports the submodule, not only the package
    return [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]


def _owner(name: str) -> str:
    """The module of ours that ``name`` (a module or a name in one) lives in."""
    while name and name not in MODULES:
        name = name.rsplit(".", 1)[0] if "." in name else ""
    return name


def _graph() -> dict[str, set[str]]:
    graph = {}
    for module, path in MODULES.items():
        package = path.name == "__init__.py"
        deps = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                deps |= {_owner(t) for t in _target(module, node, package)}
        graph[module] = {d for d in deps if d != module}
    return graph


def _layer(module: str) -> str:
    if module == "":
        return "package"
    if module in EXACT:
        return EXACT[module]
    for prefix, layer in PREFIXES:
        if module == prefix or module.startswith(prefix + "."):
            return layer
    raise AssertionError(f"{module!r} is in no layer: add it to PREFIXES")


GRAPH = _graph()


def test_every_module_is_in_a_layer() -> None:
    for module in MODULES:
        _layer(module)


def _may_import(module: str, dep: str) -> bool:
    layer, dep_layer = _layer(module), _layer(dep)
    return dep_layer == layer or dep_layer in ALLOWED[layer]


def wrong_way(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{m} ({_layer(m)}) imports {d} ({_layer(d)})"
                  for m, deps in graph.items() for d in deps if not _may_import(m, d))


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles: strongly connected components of more than one module
    (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in list(graph):
        if v not in index:
            visit(v)
    return found


def test_imports_run_one_way_between_the_layers() -> None:
    wrong = wrong_way(GRAPH)
    assert not wrong, "wrong-way imports:\n" + "\n".join(wrong)


def test_nothing_imports_the_cli() -> None:
    assert not sorted(m for m, deps in GRAPH.items() if "cli" in deps)


def test_no_import_circles() -> None:
    assert not circles(GRAPH), f"import circles: {circles(GRAPH)}"


def test_the_checks_see_a_planted_violation() -> None:
    """The walk reads real imports (lazy ones too), and each check finds what it guards
    against when it is planted."""
    assert "backend.pipelines.base" in GRAPH["backend.pipelines.echo"]
    assert "addon.blender.client.backend_client" in GRAPH["cli_commands"]  # inside a function
    graph = {k: set(v) for k, v in GRAPH.items()}
    graph["addon.core.files.atomic"].add("backend.server")
    assert wrong_way(graph) == [
        "addon.core.files.atomic (core) imports backend.server (backend)"]
    graph = {k: set(v) for k, v in GRAPH.items()}
    graph["backend.pipelines.base"].add("backend.pipelines.echo")
    assert circles(graph) == [["backend.pipelines.base", "backend.pipelines.echo"]]


def test_only_the_entry_points_use_the_demo() -> None:
    """Nothing of the add-on or the backend imports the demo: the CLI hands the skin
    training the demo character's builder, and the demo shot is the demo's own."""
    users = sorted(m for m, deps in GRAPH.items()
                   if any(_layer(d) == "demo" or d.startswith("demo.") for d in deps)
                   and _layer(m) != "demo")
    assert users and all(_layer(m) in ("entry", "bench", "tools") for m in users), users
    assert "addon.motion" in GRAPH["addon.blender.skin.dataset"]
    graph = {k: set(v) for k, v in GRAPH.items()}
    graph["addon.blender.passes.render"].add("demo.character")
    graph["addon.motion"].add("addon.blender.session")
    graph["addon.motion.gaits"].add("demo.run")
    assert wrong_way(graph) == [
        "addon.blender.passes.render (blender) imports demo.character (demo)",
        "addon.motion (motion) imports addon.blender.session (blender)",
        "addon.motion.gaits (motion) imports demo.run (entry)",
    ]


def test_rooms_are_small_and_rigs_holds_no_code() -> None:
    """No folder of ours holds more than MAX_MODULES modules (tests included), and
    ``rigs/`` is data: no module besides its ``__init__``."""
    folders: dict[Path, int] = {}
    for p in ROOT.rglob("*.py"):
        rel = p.relative_to(ROOT)
        if rel.parts[0] in (SKIP - {"tests"}) or any(x.startswith(".") for x in rel.parts):
            continue
        if p.name != "__init__.py":
            folders[p.parent] = folders.get(p.parent, 0) + 1
    big = {str(f.relative_to(ROOT)): n for f, n in folders.items() if n > MAX_MODULES}
    assert not big, f"folders over {MAX_MODULES} modules: {big}"
    assert sorted(p.name for p in (ROOT / "rigs").rglob("*.py")) == ["__init__.py"]
