"""Submit a Painted Skin shot to OpenCue (pyoutline) as one Shell layer.

    python submit_painted_skin.py passes shot.blend --frames 1-48 --chunk 12 \\
        --out /farm/shots/sh010/passes --entry /farm/painted_skin/addon/farm_entry.py \\
        --blender /opt/blender/blender -- --size 512x512

Each frame chunk runs

    blender -b shot.blend --python-exit-code 1 -P farm_entry.py -- passes \\
        --frames #FRAME_START#-#FRAME_END# --out ... [the CLI options after --]

RQD replaces ``#FRAME_START#``/``#FRAME_END#`` with the chunk's first and last frame.
A layer's chunks run in any order and OpenCue has no in-layer ordering, so a temporal
restyle (each frame warps the one before) is submitted as one chunk over the whole
range: painted in order, it is the shot one run makes (its frames are serial anyway).
``--dry-run`` prints the layer's command instead of submitting.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

FRAME_TOKENS = "#FRAME_START#-#FRAME_END#"


def layer_command(command: str, shot: str, entry: str, out: str, extra: list[str],
                  blender: str = "blender") -> list[str]:
    """The Shell layer's command, with RQD's frame tokens for the chunk."""
    return [blender, "-b", shot, "--python-exit-code", "1", "-P", entry, "--", command,
            "--frames", FRAME_TOKENS, "--out", out, *extra]


def frame_count(frames: str) -> int:
    """Frames in ``FIRST-LAST`` (the layer range OpenCue takes)."""
    first, _, last = frames.partition("-")
    return int(last or first) - int(first) + 1


def is_chained(command: str, extra: list[str]) -> bool:
    """A restyle whose frames depend on the ones before (as ``is_chained`` in
    addon/blender/restyle/output.py): every pipeline but echo, unless temporal is false."""
    if command != "restyle":
        return False

    def value(option: str, default: str) -> str:
        return extra[extra.index(option) + 1] if option in extra[:-1] else default

    text = value("--options", "{}")
    try:
        options = json.loads(Path(text).read_text() if Path(text).is_file() else text)
    except (OSError, ValueError):
        options = {}  # the entry refuses it, with the reason
    if not isinstance(options, dict) or value("--pipeline", "sd15-controlnet") == "echo":
        return False
    cross_frame = options.get("cross_frame")
    return options.get("temporal", True) is not False or \
        cross_frame not in (None, False, "", "off", "none")


def chunk_size(command: str, frames: str, chunk: int, extra: list[str]) -> int:
    """``chunk``, or the whole range for a chained restyle (see the module's docstring)."""
    return frame_count(frames) if is_chained(command, extra) else chunk


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("command", choices=("passes", "restyle"))
    p.add_argument("shot", help="the .blend on the shared storage")
    p.add_argument("--frames", required=True, help="FIRST-LAST, e.g. 1-48")
    p.add_argument("--chunk", type=int, default=12, help="frames per task")
    p.add_argument("--out", required=True,
                   help="output folder on the shared storage (passes: or a pattern such "
                        "as /farm/sh010/passes/shot_####)")
    p.add_argument("--entry", required=True, help="farm_entry.py of the installed extension")
    p.add_argument("--blender", default="blender", help="the hosts' Blender")
    p.add_argument("--name", help="job name (default: the shot and command)")
    p.add_argument("--dry-run", action="store_true", help="print the layer only")
    own = list(argv if argv is not None else sys.argv[1:])
    extra: list[str] = []
    if "--" in own:  # the CLI's own options, passed to every chunk as they are
        own, extra = own[:own.index("--")], own[own.index("--") + 1:]
    a = p.parse_args(own)
    cmd = layer_command(a.command, a.shot, a.entry, a.out, extra, a.blender)
    chunk = chunk_size(a.command, a.frames, a.chunk, extra)
    if a.dry_run:
        print(f"range {a.frames} chunk {chunk}: {shlex.join(cmd)}")
        return 0
    from outline import Outline, cuerun  # pyoutline, where OpenCue is installed
    from outline.modules.shell import Shell

    job = Outline(a.name or f"{Path(a.shot).stem}_{a.command}")
    job.add_layer(Shell(a.command, command=cmd, range=a.frames, chunk=chunk))
    cuerun.launch(job, use_pycuerun=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
