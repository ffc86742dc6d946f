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


MOVED_TO_DEMO = ("character", "character_body", "character_skeleton", "character_uv",
                 "motion", "motion_gaits", "motion_pose", "motion_rom", "motion_skeleton",
                 "spring", "spring_bake", "textures", "texture_atlas", "texture_body",
                 "texture_clothes", "texture_design", "texture_noise", "texture_shapes")


def _public(module) -> list[str]:
    """``__all__``, or the public names the module defines itself."""
    return list(getattr(module, "__all__", [
        n for n, v in vars(module).items()
        if not n.startswith("_") and getattr(v, "__module__", None) == module.__name__]))


def test_demo_modules_keep_their_rigs_paths() -> None:
    import importlib

    from painted_skin.demo import character, motion, spring, textures
    from painted_skin.rigs import character as old_character
    from painted_skin.rigs import motion as old_motion
    from painted_skin.rigs import spring as old_spring
    from painted_skin.rigs import textures as old_textures
    from painted_skin.rigs.motion_gaits import idle_body

    assert old_character.build_demo_character is character.build_demo_character
    assert old_character.setup_demo_scene is character.setup_demo_scene
    assert old_character.bake_spring_bones is character.bake_spring_bones
    assert old_character.DEMO_BONE_MAP is character.DEMO_BONE_MAP
    assert old_motion.generate is motion.generate and old_motion.write_clip is motion.write_clip
    assert old_motion.KINDS is motion.KINDS
    assert old_spring.simulate is spring.simulate and old_textures.paint is textures.paint
    assert idle_body is importlib.import_module("painted_skin.demo.motion_gaits").idle_body
    for name in MOVED_TO_DEMO:
        new = importlib.import_module(f"painted_skin.demo.{name}")
        old = importlib.import_module(f"painted_skin.rigs.{name}")
        names = _public(new)
        assert names, name
        assert [n for n in names if getattr(old, n) is not getattr(new, n)] == [], name
        star: dict = {}
        exec(f"from painted_skin.rigs.{name} import *", star)  # noqa: S102
        assert {n for n in star if n != "__builtins__"} >= set(getattr(new, "__all__", ()))


def test_demo_package_is_cheap_and_serves_the_runner() -> None:
    """``import painted_skin.demo.motion`` loads neither bpy nor the runner; the runner's
    ``run_demo`` (what ``painted-skin demo`` calls) is still ``painted_skin.demo.run_demo``."""
    import subprocess
    import sys

    code = ("import sys, painted_skin.demo.motion as m; m.generate('walk', 4); "
            "print(sorted(n for n in ('bpy', 'painted_skin.demo.run') if n in sys.modules)); "
            "from painted_skin.demo import run_demo; from painted_skin.demo.run import run_demo "
            "as r; print(run_demo is r)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True).stdout.split("\n")
    assert out[:2] == ["[]", "True"]
