"""Submit a Painted Skin shot to AWS Thinkbox Deadline as a command-line job.

    python submit_painted_skin.py restyle shot.blend --frames 1-48 --chunk 12 \\
        --out /farm/shots/sh010/restyled --entry /farm/painted_skin/addon/farm_entry.py \\
        --blender /opt/blender/blender -- --pipeline skin --url tcp://backend:5555

It writes the job info and plugin info files of Deadline's CommandLine plugin and runs
``deadlinecommand`` on them (``--dry-run``: prints them instead). Each task runs

    blender -b shot.blend --python-exit-code 1 -P farm_entry.py -- restyle \\
        --frames <STARTFRAME>-<ENDFRAME> --out ... [the CLI options after --]

Deadline replaces ``<STARTFRAME>``/``<ENDFRAME>`` with the task's chunk. Blender's own
``-s``/``-e`` are not used: they would narrow the scene range, which the entry takes as
the shot (a temporal chain starts at its first frame). A temporal restyle is submitted
``Sequential`` on one machine at a time, so its chunks run in order; a chunk that runs
before the one it continues exits 2 (Deadline requeues it) rather than paint another shot.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path


def task_arguments(command: str, shot: str, entry: str, out: str, extra: list[str]) -> str:
    """The CommandLine plugin's ``Arguments``: Blender's command line, with Deadline's
    ``<STARTFRAME>``/``<ENDFRAME>`` tokens for the task's frames."""
    args = ["-b", shot, "--python-exit-code", "1", "-P", entry, "--", command,
            "--frames", "<STARTFRAME>-<ENDFRAME>", "--out", out, *extra]
    return shlex.join(args).replace("'<STARTFRAME>-<ENDFRAME>'", "<STARTFRAME>-<ENDFRAME>")


def job_info(name: str, frames: str, chunk: int, sequential: bool) -> dict[str, str]:
    info = {"Plugin": "CommandLine", "Name": name, "Frames": frames, "ChunkSize": str(chunk)}
    if sequential:  # a temporal chain: chunks in order, one at a time
        info.update(Sequential="True", MachineLimit="1")
    return info


def plugin_info(blender: str, arguments: str) -> dict[str, str]:
    """Run through bash, so the Arguments' POSIX quoting (a JSON --options) holds."""
    return {"Executable": blender, "Arguments": arguments, "Shell": "bash",
            "ShellExecute": "True"}


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


def write_info(info: dict[str, str], path: Path) -> Path:
    path.write_text("".join(f"{k}={v}\n" for k, v in info.items()))
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("command", choices=("passes", "restyle"))
    p.add_argument("shot", help="the .blend on the shared storage")
    p.add_argument("--frames", required=True, help="e.g. 1-48")
    p.add_argument("--chunk", type=int, default=12, help="frames per task")
    p.add_argument("--out", required=True,
                   help="output folder on the shared storage (passes: or a pattern such "
                        "as /farm/sh010/passes/shot_####)")
    p.add_argument("--entry", required=True, help="farm_entry.py of the installed extension")
    p.add_argument("--blender", default="blender", help="the workers' Blender")
    p.add_argument("--name", help="job name (default: the shot and command)")
    p.add_argument("--dry-run", action="store_true", help="print the two files only")
    own = list(argv if argv is not None else sys.argv[1:])
    extra: list[str] = []
    if "--" in own:  # the CLI's own options, passed to every task as they are
        own, extra = own[:own.index("--")], own[own.index("--") + 1:]
    a = p.parse_args(own)
    job = job_info(a.name or f"{Path(a.shot).stem} {a.command}", a.frames, a.chunk,
                   is_chained(a.command, extra))
    plugin = plugin_info(a.blender, task_arguments(a.command, a.shot, a.entry, a.out, extra))
    with tempfile.TemporaryDirectory() as tmp:
        files = [write_info(job, Path(tmp) / "job_info.job"),
                 write_info(plugin, Path(tmp) / "plugin_info.job")]
        if a.dry_run:
            for f in files:
                print(f"# {f.name}\n{f.read_text()}")
            return 0
        return subprocess.call(["deadlinecommand", *map(str, files)])


if __name__ == "__main__":
    sys.exit(main())
