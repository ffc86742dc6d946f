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
    "blender": {"core", "wire", "rigs"},  # addon/: the bpy layer (+ USES_DEMO below)
    "demo": {"core", "blender"},        # demo/: the demo character, motions, springs, textures
    "rigs": {"core", "demo"},           # rigs/: presets, skin models, old paths (one release)
    "backend": {"core", "wire"},        # a separate process: never bpy, never the add-on
    "entry": {"core", "wire", "blender", "demo", "rigs", "backend", "bench"},  # cli, demo.run
    "bench": {"core", "wire", "blender", "demo", "rigs", "backend"},
    "tools": {"core", "wire", "blender", "demo", "rigs", "backend", "bench"},
    "package": {"blender"},             # the extension's register()
}
# The add-on modules that may use the demo: skin training renders the generated motions
# (and the demo character when asked for it), and the session builds the demo shot.
USES_DEMO = {"addon.blender.session", "addon.blender.skin_dataset", "addon.blender.train_skin"}
# Modules whose layer is not their folder's: the demo package's face and its runner are
# `painted-skin demo`'s entry point (the face serves the runner's names lazily).
EXACT = {"demo": "entry", "demo.run": "entry"}
PREFIXES = (("addon.core", "core"), ("wire", "wire"), ("addon", "blender"),
            ("demo", "demo"), ("rigs", "rigs"), ("backend", "backend"), ("bench", "bench"),
            ("tools", "tools"), ("farm", "tools"), ("cli", "entry"), ("cli_commands", "entry"),
            ("api", "blender"))


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
    return (dep_layer == layer or dep_layer in ALLOWED[layer]
            or (dep_layer == "demo" and module in USES_DEMO))


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
    assert "addon.blender.client" in GRAPH["cli_commands"]  # imported inside a function
    graph = {k: set(v) for k, v in GRAPH.items()}
    graph["addon.core.atomic"].add("backend.server")
    assert wrong_way(graph) == ["addon.core.atomic (core) imports backend.server (backend)"]
    graph = {k: set(v) for k, v in GRAPH.items()}
    graph["backend.pipelines.base"].add("backend.pipelines.echo")
    assert circles(graph) == [["backend.pipelines.base", "backend.pipelines.echo"]]


def test_the_demo_is_used_only_where_the_table_says() -> None:
    """The add-on's skin training and demo shot may use the demo; no other add-on module,
    and nothing of the demo's modules is the runner's (that is the entry point's)."""
    assert "demo.motion" in GRAPH["addon.blender.skin_dataset"]
    assert "demo.character" in GRAPH["addon.blender.session"]
    graph = {k: set(v) for k, v in GRAPH.items()}
    graph["addon.blender.passes"].add("demo.character")
    graph["demo.motion"].add("demo.run")
    graph["rigs.presets"].add("demo.run")
    assert wrong_way(graph) == [
        "addon.blender.passes (blender) imports demo.character (demo)",
        "demo.motion (demo) imports demo.run (entry)",
        "rigs.presets (rigs) imports demo.run (entry)",
    ]
