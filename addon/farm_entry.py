"""The render farm's entry: the ``painted-skin`` commands inside the farm's own Blender.

    blender -b shot.blend --python-exit-code 1 -P <painted_skin>/addon/farm_entry.py -- \\
        passes --out renders/passes --frames 1-24
    blender -b shot.blend --python-exit-code 1 -P .../farm_entry.py -- restyle --out renders/r \\
        --frames 25-48 --pipeline skin --url tcp://backend:5555
    blender -b --python-exit-code 1 -P .../farm_entry.py -- retarget --source clip.bvh \\
        --target hero.blend --out shot.blend

The words after ``--`` are the CLI's (``painted-skin passes|restyle|retarget ...``)
without the shot: ``passes`` and ``restyle`` use the .blend Blender opened. Exit codes
as the CLI's: 0 done, 2 bad input (one line says what and how to fix it), 1 anything
else; each frame written prints ``Saved: '<path>'`` (what Flamenco's worker reads);
frames already on disk are skipped, so a re-queued task resumes.

This file finds its own package: the enabled extension (``bl_ext.<repo>.painted_skin``),
a pip install (``import painted_skin``), or, failing both, the folder it lies in.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import traceback
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]  # the package folder: painted_skin/
SHOT_COMMANDS = ("passes", "restyle")
EXIT_BAD_INPUT = 2


def _is_root(module: ModuleType | None) -> bool:
    paths = getattr(module, "__path__", None) or ()
    return any(Path(p).resolve() == ROOT for p in paths)


def find_package() -> str:
    """The import name of the package this file belongs to (imported on the way)."""
    for name, module in list(sys.modules.items()):  # the enabled extension, or imported
        if _is_root(module):
            return name
    names = [f"bl_ext.{ROOT.parent.name}.{ROOT.name}", "painted_skin"]
    for name in names:  # an installed extension not enabled; a pip install
        try:
            if _is_root(importlib.import_module(name)):
                return name
        except ImportError:
            continue
    name = "painted_skin" if "painted_skin" not in sys.modules else "painted_skin_farm"
    spec = importlib.util.spec_from_file_location(name, ROOT / "__init__.py",
                                                  submodule_search_locations=[str(ROOT)])
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load the painted_skin package from {ROOT}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return name


def script_args(argv: list[str]) -> list[str] | None:
    """What follows Blender's ``--`` (None: no ``--``)."""
    return argv[argv.index("--") + 1:] if "--" in argv else None


def run(argv: list[str]) -> int:
    """The exit code of the command ``argv`` (Blender's whole command line)."""
    args = script_args(argv)
    if not args:
        print("painted-skin: error: no command after '--': run blender -b shot.blend "
              "--python-exit-code 1 -P farm_entry.py -- passes|restyle|retarget ...",
              file=sys.stderr)
        return EXIT_BAD_INPUT
    import bpy

    shot_open = args[0] in SHOT_COMMANDS
    if shot_open:
        if not bpy.data.filepath:
            print(f"painted-skin: error: {args[0]} renders the .blend Blender opened, and "
                  "none is: put the shot before -P, e.g. blender -b shot.blend -P ...",
                  file=sys.stderr)
            return EXIT_BAD_INPUT
        args = [args[0], bpy.data.filepath, *args[1:]]
    cli = importlib.import_module(f"{find_package()}.cli")
    # This file is a front end like the `painted-skin` command: it runs the CLI's own
    # parser and commands, so options, messages and exit codes cannot drift apart.
    return cli.main(args, shot_open=shot_open)


def main() -> None:
    try:
        code = run(sys.argv)
    except SystemExit as e:  # argparse: --help (0) or bad options (2)
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except Exception:  # not the input's fault: the trace, exit 1 (as --python-exit-code 1)
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    sys.exit(code)


if __name__ == "__main__":
    main()
