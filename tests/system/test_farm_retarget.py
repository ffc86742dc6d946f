"""The Flamenco retarget job type: a batch of clips compiled into tasks by the
preview harness, each task's command line run as a worker runs it (Blender started
without a shot, the entry saving the one it makes)."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import pytest
from test_farm import ENTRY, NODE, PREVIEW, REPO, blender, error_lines, saved

RETARGET_JOB = REPO / "farm" / "flamenco" / "scripts" / "painted-skin-retarget.js"


def compile_job(settings: dict) -> subprocess.CompletedProcess:
    if NODE is None:
        pytest.skip("node is not installed")
    variables = {"blenderArgs": "-b -y", "painted_skin_entry": str(ENTRY)}
    return subprocess.run([NODE, str(PREVIEW), str(RETARGET_JOB), json.dumps(settings),
                           json.dumps(variables)], capture_output=True, text=True, timeout=60)


def tasks_of(settings: dict) -> list[dict]:
    proc = compile_job(settings)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def worker_argv(task: dict) -> list[str]:
    """The worker's ``blender-render`` command line; Flamenco adds a blendfile only
    when the command names one (retarget names none: Blender starts empty)."""
    (command,) = task["commands"]
    assert command["type"] == "blender-render"
    p = command["parameters"]
    assert p["exe"] == "{blender}" and not p.get("blendfile")
    return [*shlex.split(p["exeArgs"]), *p["argsBefore"], *p["args"]]


@pytest.fixture(scope="module")
def clips(tmp_path_factory) -> dict[str, Path]:
    """Two clips of different lengths, so a task that read the wrong one shows."""
    from painted_skin.addon import motion as gen

    folder = tmp_path_factory.mktemp("clips")
    return {"walk": gen.write_clip(folder / "walk.bvh", "walk", frames=6, fps=24),
            "jump": gen.write_clip(folder / "jump.bvh", "jump", frames=9, fps=24)}


@pytest.fixture(scope="module")
def character(tmp_path_factory) -> Path:
    from conftest import demo_walk_blend

    return demo_walk_blend(tmp_path_factory.mktemp("farm_character"), frames=4)


def test_one_task_per_clip_each_saves_its_clips_shot(clips, character, tmp_path):
    out = tmp_path / "shots"
    tasks = tasks_of({"source": f"{clips['walk']}, {clips['jump']}",
                      "target": str(character), "out": str(out), "in_place": True})
    assert [t["name"] for t in tasks] == ["retarget-walk", "retarget-jump"]
    assert all(t["dependencies"] == [] for t in tasks)  # clips are independent
    for task, (name, frames) in zip(reversed(tasks), (("jump", 9), ("walk", 6)),
                                    strict=True):
        proc = blender(worker_argv(task))
        assert proc.returncode == 0, proc.stderr
        assert saved(proc) == [f"{name}.blend"] and (out / f"{name}.blend").is_file()
        report = json.loads((out / f"{name}.json").read_text())
        assert report["frames"] == frames  # this task retargeted its own clip


def test_a_folder_is_one_task_with_every_clip(clips, character, tmp_path):
    out = tmp_path / "shots"
    (task,) = tasks_of({"source": str(clips["walk"].parent), "target": str(character),
                        "out": str(out)})
    folder = clips["walk"].parent.name
    assert task["name"] == f"retarget-{folder}"
    proc = blender(worker_argv(task))
    assert proc.returncode == 0, proc.stderr
    assert saved(proc) == [f"{folder}.blend"]
    reports = json.loads((out / f"{folder}.json").read_text())
    assert sorted(r["frames"] for r in reports) == [6, 9]


@pytest.mark.parametrize("settings, words", [
    ({"source": "/c/walk.bvh, /d/walk.fbx"}, "would both write walk.blend"),
    ({"source": "/c/walk.bvh, /c/notes.txt"}, "is not a clip"),
    ({"source": " , "}, "names no clip"),
    ({"source": "/c/walk.bvh", "ground": "moon"}, "ground \"moon\" is unknown"),
], ids=["same-name", "not-a-clip", "empty", "ground"])
def test_bad_batches_are_refused_at_submission(settings, words):
    proc = compile_job({"target": "/c/hero.blend", "out": "/o", **settings})
    assert proc.returncode == 2 and words in proc.stderr


def test_a_task_with_a_missing_clip_exits_2_with_one_line(character, tmp_path):
    (task,) = tasks_of({"source": str(tmp_path / "gone.bvh"), "target": str(character),
                        "out": str(tmp_path / "shots")})
    proc = blender(worker_argv(task))
    assert proc.returncode == 2, proc.stderr  # bad input: a manager does not retry it
    (line,) = error_lines(proc)
    assert "gone.bvh" in line and "does not exist" in line
    assert not (tmp_path / "shots").exists()
