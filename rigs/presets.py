"""Bone-map presets, kept importable here: the loader lives in :mod:`addon.core.presets`
(the TOML files stay in ``rigs/presets``). Patch ``PRESET_DIR`` on the core module."""

from __future__ import annotations

from ..addon.core.presets import (
    PRESET_DIR,
    Preset,
    all_presets,
    get_preset,
    list_presets,
    load_preset,
)

__all__ = ["PRESET_DIR", "Preset", "all_presets", "get_preset", "list_presets", "load_preset"]
