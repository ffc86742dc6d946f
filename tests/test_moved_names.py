"""Names that moved keep working from their old paths for one release: scripts and
presets written against ``rigs.humanoid``, ``rigs.presets``, ``session.open_shot`` or
``backend.protocol`` still run."""

from __future__ import annotations


def test_old_paths_are_the_same_objects() -> None:
    from painted_skin import wire
    from painted_skin.addon.core import humanoid, presets
    from painted_skin.backend import protocol
    from painted_skin.rigs import humanoid as old_humanoid
    from painted_skin.rigs import presets as old_presets

    assert old_humanoid.NAMES is humanoid.NAMES
    assert old_humanoid.REFERENCE_DIRECTIONS is humanoid.REFERENCE_DIRECTIONS
    assert old_presets.get_preset is presets.get_preset
    assert protocol.encode is wire.encode and protocol.ShmSegment is wire.ShmSegment


def test_blend_helpers_moved_out_of_the_cli(bpy_clean) -> None:
    from painted_skin.addon.blender import blend_files, session

    assert session.open_shot is blend_files.open_shot
    assert session.ShotFileError is blend_files.ShotFileError
