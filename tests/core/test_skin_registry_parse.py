"""The skin-model registry file means the same to the backend that serves it and to the
add-on that copies it for the backend it starts: a name resolves to one folder."""

from __future__ import annotations

from pathlib import Path

import pytest
from painted_skin.addon.core.backend import skin_registry as R


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_relative_absolute_and_home_paths(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "cfg").mkdir()
    reg = _write(tmp_path / "cfg" / "models.toml", '[models.rel]\npath = "../m/rel"\n\n'
                 f'[models.abs]\npath = "{tmp_path / "abs"}"\n\n'
                 '[models."odd name.x"]\npath = "~/mine"\n')
    assert R.read_registry(reg) == {"rel": (tmp_path / "m" / "rel").resolve(),
                                    "abs": (tmp_path / "abs").resolve(),
                                    "odd name.x": (tmp_path / "home" / "mine").resolve()}


def test_written_registry_reads_back(tmp_path) -> None:
    models = [("demo", str(tmp_path / "a")), ('quo"te \\ é', str(tmp_path / "b é"))]
    reg = _write(tmp_path / "r.toml", R.registry_text(models))
    assert [(n, str(f)) for n, f in R.registry_entries(reg)] == models


def test_written_registry_takes_any_folder_and_one_entry_a_name(tmp_path) -> None:
    """The add-on adds its scene's models to the backend's registry: a name both give is
    one entry (the scene's), and a folder name outside the basic plane stays valid TOML."""
    emoji = str(tmp_path / "skin \U0001f3a8")
    text = R.registry_text([("scene", str(tmp_path / "old")), ("scene", emoji)])
    reg = _write(tmp_path / "r.toml", text)
    assert [(n, str(f)) for n, f in R.registry_entries(reg)] == [("scene", emoji)]


@pytest.mark.parametrize("text, what", [
    ("[models.x]\npath = 3\n", "model 'x' needs a path"),
    ("[models.x]\nfolder = \"a\"\n", "model 'x' needs a path"),
    ("models = [1]\n", "'models' must be a table"),
    ("[models.x\n", "unreadable"),
])
def test_a_bad_registry_names_the_problem(tmp_path, text, what) -> None:
    reg = _write(tmp_path / "r.toml", text)
    with pytest.raises(R.RegistryError, match=what):
        R.read_registry(reg)


def test_a_missing_registry_names_the_variable(tmp_path) -> None:
    with pytest.raises(R.RegistryError, match=R.REGISTRY_ENV):
        R.read_registry(tmp_path / "absent.toml")


def test_backend_and_add_on_resolve_alike(tmp_path, monkeypatch) -> None:
    """The backend's registry and the add-on's copy of it give the same folders; the
    add-on keeps the entries before a bad one, the backend refuses the file."""
    from painted_skin.addon.blender.client import local_backend
    from painted_skin.backend.skin import registry

    good = _write(tmp_path / "good.toml", '[models.a]\npath = "a"\n[models.b]\npath = "/b"\n')
    monkeypatch.setenv(registry.ENV, str(good))
    backend = registry.load_registry()
    assert backend == {"a": (tmp_path / "a").resolve(), "b": Path("/b").resolve()}
    assert local_backend._registry_models(str(good)) == [(n, str(f)) for n, f in
                                                          backend.items()]
    bad = _write(tmp_path / "bad.toml", '[models.a]\npath = "a"\n[models.b]\npath = 1\n')
    assert local_backend._registry_models(str(bad)) == [("a", str((tmp_path / "a").resolve()))]
    with pytest.raises(registry.RegistryError, match="model 'b'"):
        registry.load_registry(bad)
    assert local_backend._registry_models(str(tmp_path / "absent.toml")) == []
