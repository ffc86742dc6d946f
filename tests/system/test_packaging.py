"""The wheel ships every package of the tree: pyproject's hand-kept ``packages`` list
(setuptools' ``packages.find`` cannot prefix ``painted_skin.`` onto a root mapped to
``.``) must name each folder holding an ``__init__.py``, and nothing else."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SKIP = {"tests", "build", "out"}


def _packages_on_disk() -> set[str]:
    found = {"painted_skin"}
    for init in ROOT.rglob("__init__.py"):
        rel = init.parent.relative_to(ROOT)
        if rel.parts and (rel.parts[0] in SKIP or any(p.startswith(".") for p in rel.parts)):
            continue
        if rel.parts:
            found.add(".".join(("painted_skin", *rel.parts)))
    return found


def test_pyproject_lists_every_package() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    on_disk = _packages_on_disk()
    assert sorted(on_disk - listed) == [], "add these to [tool.setuptools] packages"
    assert sorted(listed - on_disk) == [], "these are listed but hold no __init__.py"
