"""Render farms: the entry script in the farm's own Blender, and the exact command
lines the Flamenco job type and the Deadline / OpenCue recipes hand their workers,
run as those workers would.

We have no ``blender`` binary, only Blender as a Python module; run as a script this
file is that binary's stand-in for ``blender [-b] [shot.blend] [--python-exit-code N]
[-P script] [-- args]``: it opens the .blend, then runs the script with Blender's
``sys.argv`` (an uncaught exception exits N; ``sys.exit(code)`` exits code).
"""

from __future__ import annotations

import json
import os
import runpy
import shlex
import shutil
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ENTRY = REPO / "addon" / "farm_entry.py"
JOB_TYPE = REPO / "farm" / "flamenco" / "scripts" / "painted-skin.js"
PREVIEW = REPO / "farm" / "flamenco" / "preview.js"
NODE = shutil.which("node")


def emulate_blender(argv: list[str]) -> int:
    """``blender ARGV`` with the bpy module: Blender's arguments in order, up to ``--``."""
    import bpy

    own = argv[:argv.index("--")] if "--" in argv else argv
    exit_on_error, i = 0, 0
    while i < len(own):
        arg = own[i]
        if arg in ("-b", "--background", "-y", "--enable-autoexec", "-noaudio"):
            i += 1
        elif arg == "--python-exit-code":
            exit_on_error, i = int(own[i + 1]), i + 2
        elif arg in ("-P", "--python"):
            sys.argv = ["blender", *argv]
            try:
                runpy.run_path(own[i + 1], run_name="__main__")
            except SystemExit as e:  # the script's sys.exit: Blender exits with it
                return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            except Exception:
                traceback.print_exc()
                if exit_on_error:
                    return exit_on_error
            i += 2
        elif arg.endswith(".blend") and not arg.startswith("-"):
            bpy.ops.wm.open_mainfile(filepath=arg)
            i += 1
        else:
            print(f"emulated blender: unknown argument {arg!r}", file=sys.stderr)
            return 64
    return 0


def blender(args: list[str], cwd: Path | None = None,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run ``blender ARGS`` (emulated) in a fresh process, as a farm worker would."""
    base = {**os.environ, "BLENDER_USER_RESOURCES": os.environ.get(
        "BLENDER_USER_RESOURCES", tempfile.mkdtemp(prefix="painted-skin-farm-"))}
    return subprocess.run([sys.executable, str(Path(__file__).resolve()), *args],
                          capture_output=True, text=True, timeout=300, cwd=cwd,
                          env={**base, **(env or {})}, stdin=subprocess.DEVNULL)


def saved(proc: subprocess.CompletedProcess) -> list[str]:
    """The ``Saved: '<path>'`` lines (what Flamenco's worker reads), as file names."""
    return [Path(line[len("Saved: '"):-1]).name for line in proc.stdout.splitlines()
            if line.startswith("Saved: '") and line.endswith("'")]


def error_lines(proc: subprocess.CompletedProcess) -> list[str]:
    return [ln for ln in proc.stderr.splitlines() if ln.startswith("painted-skin: error")]


def same_files(a: Path, b: Path, pattern: str) -> list[str]:
    """Names of ``pattern`` files under a and b, after checking them byte for byte."""
    names = sorted(p.relative_to(a).as_posix() for p in a.glob(pattern))
    assert names == sorted(p.relative_to(b).as_posix() for p in b.glob(pattern))
    for name in names:
        assert (a / name).read_bytes() == (b / name).read_bytes(), f"{name} differs"
    return names


@pytest.fixture(scope="module")
def shot(tmp_path_factory) -> Path:
    from conftest import demo_walk_blend

    return demo_walk_blend(tmp_path_factory.mktemp("farm_shot"), frames=6)


PASSES = ["--size", "32x32", "--passes", "mask,depth"]


def test_entry_runs_the_cli_in_the_open_shot_and_resumes(shot, tmp_path):
    out = tmp_path / "passes"
    args = ["-b", str(shot), "--python-exit-code", "1", "-P", str(ENTRY), "--", "passes",
            "--out", str(out), "--frames", "1,3-4", *PASSES]
    first = blender(args)
    assert first.returncode == 0, first.stderr
    assert saved(first) == ["0001.png", "0003.png", "0004.png"]
    assert sorted(p.name for p in (out / "mask").iterdir()) == ["0001.png", "0003.png",
                                                                 "0004.png"]
    again = blender(args)  # a re-queued task: nothing left to do, nothing rewritten
    assert again.returncode == 0 and saved(again) == []
    assert "3/3 frames done (0 written now)" in again.stdout


@pytest.mark.parametrize("tail, code, words", [
    (["passes", "--out", "{out}", "--frames", "5-9"], 2, "outside the scene's range 1-6"),
    (["passes", "--out", "{out}", "--frames", "1-6x0"], 2, "step"),
    (["passes", "--out", "{out}", "--sparkle"], 2, "unrecognized arguments"),
    (["restyle", "--out", "{out}", "--pipeline", "echo", "--url", "tcp://127.0.0.1:9",
      "--timeout", "1", "--frames", "1"], 1, "--start-backend"),
], ids=["outside", "step0", "unknown-option", "no-backend"])
def test_entry_exit_codes_are_the_clis(shot, tmp_path, tail, code, words):
    out = str(tmp_path / "o")
    proc = blender(["-b", str(shot), "--python-exit-code", "1", "-P", str(ENTRY), "--",
                    *(out if t == "{out}" else t for t in tail)])
    assert proc.returncode == code, proc.stderr
    assert words in proc.stderr
    assert not Path(out).exists() or not any(Path(out).rglob("*.png"))


def test_entry_retargets_without_a_shot(shot, tmp_path):
    """``retarget`` makes the shot: Blender opens none, the entry saves one."""
    out = tmp_path / "sh010.blend"
    proc = blender(["-b", "--python-exit-code", "1", "-P", str(ENTRY), "--", "retarget",
                    "--source", str(shot.parent / "walk.bvh"), "--target", str(shot),
                    "--out", str(out)])
    assert proc.returncode == 0, proc.stderr
    assert saved(proc) == ["sh010.blend"] and out.is_file()


def test_entry_refuses_without_a_command_or_a_shot(tmp_path):
    no_command = blender(["-b", "--python-exit-code", "1", "-P", str(ENTRY)])
    assert no_command.returncode == 2 and "no command after '--'" in no_command.stderr
    no_shot = blender(["-b", "--python-exit-code", "1", "-P", str(ENTRY), "--", "passes",
                       "--out", str(tmp_path / "o")])
    assert no_shot.returncode == 2 and "put the shot before -P" in no_shot.stderr
    assert not (tmp_path / "o").exists()


# ---- Flamenco: the job type compiled in node, its tasks run as the worker runs them ----

def flamenco_tasks(settings: dict) -> list[dict]:
    """The tasks the job type makes (the harness implements its author API)."""
    if NODE is None:
        pytest.skip("node is not installed")
    variables = {"blenderArgs": "-b -y", "painted_skin_entry": str(ENTRY)}
    proc = subprocess.run([NODE, str(PREVIEW), str(JOB_TYPE), json.dumps(settings),
                           json.dumps(variables)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def worker_argv(command: dict) -> list[str]:
    """A blender-render command's command line (exe exeArgs argsBefore blendfile args)."""
    assert command["type"] == "blender-render"
    p = command["parameters"]
    assert p["exe"] == "{blender}"  # the Manager's variable for the worker's Blender
    return [*shlex.split(p["exeArgs"]), *p["argsBefore"], p["blendfile"], *p["args"]]


def chunk_frames(task: dict) -> list[int]:
    from painted_skin.addon.core.files.frame_ranges import parse_frames

    args = task["commands"][0]["parameters"]["args"]
    return list(parse_frames(args[args.index("--frames") + 1]))


def run_task(task: dict) -> subprocess.CompletedProcess:
    (command,) = task["commands"]
    return blender(worker_argv(command))


@pytest.fixture(scope="module")
def one_passes(shot, tmp_path_factory) -> Path:
    """Frames 1-5's passes in one uninterrupted run: what every farm split must give."""
    one = tmp_path_factory.mktemp("one_passes")
    proc = blender(["-b", str(shot), "--python-exit-code", "1", "-P", str(ENTRY), "--",
                    "passes", "--out", str(one), "--frames", "1-5", *PASSES])
    assert proc.returncode == 0, proc.stderr
    return one


def test_flamenco_passes_chunks_are_the_one_run(shot, one_passes, tmp_path):
    out = tmp_path / "farm"
    tasks = flamenco_tasks({"command": "passes", "frames": "1-5", "chunk_size": 2,
                            "out": str(out), "blendfile": str(shot), "size": "32x32",
                            "passes": "mask,depth"})
    assert [t["name"] for t in tasks] == ["passes-1-2", "passes-3-4", "passes-5"]
    assert all(t["dependencies"] == [] for t in tasks)  # passes: chunks in any order
    for task in reversed(tasks):  # passes chunks are independent: any order
        proc = run_task(task)
        assert proc.returncode == 0, proc.stderr
        assert saved(proc) == [f"{f:04d}.png" for f in chunk_frames(task)]
    assert len(same_files(out, one_passes, "*/*.png")) == 5 * 3  # mask, depth16, depth8


def test_flamenco_job_type_refuses_bad_options_at_submission(shot, tmp_path):
    if NODE is None:
        pytest.skip("node is not installed")
    proc = subprocess.run([NODE, str(PREVIEW), str(JOB_TYPE), json.dumps(
        {"command": "restyle", "frames": "1-6", "out": str(tmp_path), "blendfile": str(shot),
         "options": "{steps: 2"})], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "is not JSON" in proc.stderr



# ---- a temporal shot in chunks: the skin model warps each frame's predecessor ----------

RESTYLE = ["--size", "64x64", "--pipeline", "skin", "--seed", "3", "--timeout", "120"]


@pytest.fixture(scope="module")
def one_restyle(shot, skin_backend, tmp_path_factory) -> Path:
    """The whole temporal shot (frames 1-6) restyled in one uninterrupted run."""
    one = tmp_path_factory.mktemp("one_restyle")
    proc = blender(["-b", str(shot), "--python-exit-code", "1", "-P", str(ENTRY), "--",
                    "restyle", "--out", str(one), "--url", skin_backend, *RESTYLE])
    assert proc.returncode == 0, proc.stderr
    return one


def test_flamenco_temporal_chunks_run_in_order_and_are_the_one_run(shot, skin_backend,
                                                                   one_restyle, tmp_path):
    out = tmp_path / "farm"
    tasks = flamenco_tasks({"command": "restyle", "frames": "1-6", "chunk_size": 3,
                            "out": str(out), "blendfile": str(shot), "size": "64x64",
                            "pipeline": "skin", "seed": 3, "url": skin_backend})
    assert [t["dependencies"] for t in tasks] == [[], ["restyle-1-3"]]
    early = run_task(tasks[1])  # a worker that picks the second chunk first is refused
    assert early.returncode == 2, early.stderr
    (line,) = error_lines(early)  # one line: what is wrong and how to fix it
    assert "continues the temporal chain from frame 3" in line and "temporal\": false" in line
    assert not list(out.glob("restyled/*.png"))
    for task in tasks:
        proc = run_task(task)
        assert proc.returncode == 0, proc.stderr
        assert saved(proc) == [f"{f:04d}.png" for f in chunk_frames(task)]
    assert len(same_files(out, one_restyle, "restyled/*.png")) == 6


# ---- Deadline and OpenCue: the recipes' command lines, split and expanded as they do ----

def recipe(manager: str) -> dict:
    return runpy.run_path(str(REPO / "farm" / manager / "submit_painted_skin.py"))


def task_ranges(frames: str, chunk: int) -> list[tuple[int, int]]:
    """A manager's contiguous tasks of ``chunk`` frames over FIRST-LAST."""
    first, last = (int(v) for v in frames.split("-"))
    return [(s, min(s + chunk - 1, last)) for s in range(first, last + 1, chunk)]


@pytest.mark.parametrize("options, chained", [
    (["--pipeline", "skin"], True), (["--pipeline", "echo"], False), ([], True),
    (["--pipeline", "skin", "--options", '{"temporal": false}'], False),
    (["--pipeline", "skin", "--options", '{"temporal": false, "cross_frame": "first"}'], True),
])
def test_recipes_tell_a_chained_restyle_as_the_entry_does(options, chained):
    from painted_skin.addon.blender.restyle.loop import is_chained

    pipeline = options[options.index("--pipeline") + 1] if options else "sd15-controlnet"
    opts = json.loads(options[options.index("--options") + 1]) if "--options" in options \
        else {}
    assert is_chained(pipeline, opts) is chained
    for manager in ("deadline", "opencue"):
        assert recipe(manager)["is_chained"]("restyle", options) is chained
        assert recipe(manager)["is_chained"]("passes", options) is False
    settings = {"command": "restyle", "frames": "1-4", "chunk_size": 2, "out": "/o",
                "blendfile": "/s.blend", "pipeline": pipeline,
                "options": json.dumps(opts) if opts else ""}
    tasks = flamenco_tasks(settings)  # the job type: the second chunk waits when chained
    assert tasks[1]["dependencies"] == (["restyle-1-2"] if chained else [])


def test_deadline_temporal_restyle_runs_sequential_and_is_the_one_run(shot, skin_backend,
                                                                      one_restyle, tmp_path):
    dl, out = recipe("deadline"), tmp_path / "farm"
    extra = ["--url", skin_backend, *RESTYLE]
    job = dl["job_info"]("sh010 restyle", "1-6", 3, dl["is_chained"]("restyle", extra))
    plugin = dl["plugin_info"]("blender", dl["task_arguments"]("restyle", str(shot),
                                                               str(ENTRY), str(out), extra))
    assert (job["Plugin"], job["Sequential"], job["MachineLimit"]) == ("CommandLine", "True",
                                                                       "1")
    assert plugin["ShellExecute"] == "True" and plugin["Shell"] == "bash"
    for start, end in task_ranges(job["Frames"], int(job["ChunkSize"])):  # in order
        args = plugin["Arguments"].replace("<STARTFRAME>", str(start)) \
            .replace("<ENDFRAME>", str(end))
        proc = blender(shlex.split(args))  # what bash makes of the Arguments
        assert proc.returncode == 0, proc.stderr
        assert saved(proc) == [f"{f:04d}.png" for f in range(start, end + 1)]
    assert len(same_files(out, one_restyle, "restyled/*.png")) == 6


def test_opencue_passes_chunks_any_order_are_the_one_run(shot, one_passes, tmp_path):
    cue, out = recipe("opencue"), tmp_path / "farm"
    cmd = cue["layer_command"]("passes", str(shot), str(ENTRY), str(out), PASSES)
    assert cue["chunk_size"]("passes", "1-5", 3, PASSES) == 3
    assert cue["chunk_size"]("restyle", "1-5", 3, ["--pipeline", "skin"]) == 5  # one chunk
    for start, end in reversed(task_ranges("1-5", 3)):
        line = shlex.join(cmd).replace("#FRAME_START#", str(start)) \
            .replace("#FRAME_END#", str(end))
        argv = shlex.split(line)
        assert argv[0] == "blender"
        proc = blender(argv[1:])
        assert proc.returncode == 0, proc.stderr
        assert saved(proc) == [f"{f:04d}.png" for f in range(start, end + 1)]
    assert len(same_files(out, one_passes, "*/*.png")) == 5 * 3  # mask, depth16, depth8



# ---- the entry as shipped: from the extension installed in the farm's Blender ----------

INSTALL = """
import sys, bpy
repo = next(r for r in bpy.context.preferences.extensions.repos if r.module == "user_default")
assert bpy.ops.extensions.package_install_files(filepath=sys.argv[1], repo="user_default",
                                                enable_on_install=True) == {"FINISHED"}
bpy.ops.wm.save_userpref()
print(repo.directory)
"""


def test_entry_runs_from_the_installed_extension(shot, tmp_path):
    import importlib.util

    spec = importlib.util.find_spec("bpy")
    tool = Path(spec.origin).parent / "5.0" / "scripts" / "addons_core" / "bl_pkg" / "cli" \
        / "blender_ext.py"
    build = subprocess.run([sys.executable, str(tool), "build", "--source-dir", str(REPO),
                            "--output-dir", str(tmp_path)], capture_output=True, text=True,
                           timeout=120, cwd=REPO)
    assert build.returncode == 0, build.stdout + build.stderr
    (zip_path,) = tmp_path.glob("*.zip")
    env = {"BLENDER_USER_RESOURCES": str(tmp_path / "user")}
    inst = subprocess.run([sys.executable, "-c", INSTALL, str(zip_path)], capture_output=True,
                          text=True, timeout=120, env={**os.environ, **env})
    assert inst.returncode == 0, inst.stderr
    package = Path(inst.stdout.strip().splitlines()[-1]) / "painted_skin"
    entry = package / "addon" / "farm_entry.py"
    assert entry.is_file(), "the extension does not ship the farm entry"
    with open(package / "cli.py", "a") as fh:  # mark the installed copy, not the checkout
        fh.write('\nprint("painted-skin: the installed extension runs")\n')
    out = tmp_path / "passes"
    proc = blender(["-b", str(shot), "--python-exit-code", "1", "-P", str(entry), "--",
                    "passes", "--out", str(out), "--frames", "2", *PASSES], env=env)
    assert proc.returncode == 0, proc.stderr
    assert "the installed extension runs" in proc.stdout
    assert saved(proc) == ["0002.png"]


def test_flamenco_restyle_hands_its_frame_pattern_to_every_chunk(tmp_path):
    tasks = flamenco_tasks({"command": "restyle", "frames": "1-4", "chunk_size": 2,
                            "out": str(tmp_path), "blendfile": "/s.blend",
                            "frame_pattern": "sh010_##"})
    for task in tasks:
        args = task["commands"][0]["parameters"]["args"]
        assert args[args.index("--frame-pattern") + 1] == "sh010_##"
    plain = flamenco_tasks({"command": "restyle", "frames": "1-2", "out": str(tmp_path),
                            "blendfile": "/s.blend"})
    assert "--frame-pattern" not in plain[0]["commands"][0]["parameters"]["args"]


def test_flamenco_passes_hand_their_output_pattern_to_every_chunk(tmp_path):
    """A farm's output pattern reaches each passes chunk as its --out, unchanged."""
    out = f"{tmp_path}/render/passes/sh010_####"
    tasks = flamenco_tasks({"command": "passes", "frames": "1-4", "chunk_size": 2,
                            "out": out, "blendfile": "/s.blend"})
    assert len(tasks) == 2
    for task in tasks:
        args = task["commands"][0]["parameters"]["args"]
        assert args[args.index("--out") + 1] == out and "--frame-pattern" not in args



def test_flamenco_from_scene_renders_the_saved_settings_in_order(tmp_path):
    """``from_scene``: the job sends the shot's own Restyle settings (--from-scene), not
    its defaults; the pipeline is only known on the worker, so the chunks run in order."""
    tasks = flamenco_tasks({"command": "restyle", "frames": "1-4", "chunk_size": 2,
                            "out": str(tmp_path), "blendfile": "/s.blend",
                            "from_scene": True, "pipeline": "echo"})
    args = tasks[0]["commands"][0]["parameters"]["args"]
    assert "--from-scene" in args
    assert not {"--pipeline", "--seed", "--prompt", "--size"} & set(args)
    assert [t["dependencies"] for t in tasks] == [[], ["restyle-1-2"]]


if __name__ == "__main__":
    sys.exit(emulate_blender(sys.argv[1:]))
