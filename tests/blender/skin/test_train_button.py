"""The Train Skin Model button's child process as the panel follows it: the progress it
shows moves from 0 to done and the model folder appears; Cancel (Ctrl-C to the child)
stops it with a checkpoint and no model folder, half-written or whole; Resume continues
from the checkpoint. The real trainer (backend Python, torch), on generated frames."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

BACKEND_PYTHON = Path(__file__).resolve().parents[3] / ".venv-backend" / "bin" / "python"
STEPS = 40  # Cancel lands mid-run: a step takes ~0.1-0.3 s here (a 2.5M-parameter net)


@pytest.fixture
def registered(bpy_clean):
    from painted_skin.addon.blender.skin import ui as skin_ui

    skin_ui.register()
    yield bpy_clean
    job = skin_ui._RUN["job"]
    skin_ui.cancel_training()
    if job is not None and job.proc.poll() is None:  # a failed test: leave no trainer
        try:
            job.proc.wait(30)
        except Exception:
            job.proc.kill()
    skin_ui.unregister()


def _trainer(out: Path, *extra: str) -> list[str]:
    if not BACKEND_PYTHON.is_file():
        pytest.skip("no .venv-backend (torch) to train in")
    return [str(BACKEND_PYTHON), "-m", "painted_skin.backend.skin.train", "--synthetic", "4",
            "--out", str(out), "--steps", str(STEPS), "--batch", "2", "--crop", "32",
            "--device", "cpu", *extra]


def _follow(job, until, timeout_s: float = 90.0) -> list[float]:
    """Step ``job`` as the panel's timer does until ``until(job)``; the progress seen."""
    seen = [job.progress]
    deadline = time.monotonic() + timeout_s
    while not until(job):
        assert time.monotonic() < deadline, f"training did not get there: {job.status}"
        job.step()
        seen.append(job.progress)
        time.sleep(0.05)
    return seen


def _steps_shown(job) -> list[int]:
    return [int(ln.split("|")[-1].split("/")[0]) for ln in job.lines
            if ln.startswith("skin:") and "/" in ln and "|" in ln]


def test_cancel_leaves_a_checkpoint_and_resume_trains_to_the_model_folder(registered,
                                                                          tmp_path):
    from painted_skin.addon.blender.skin import ui as skin_ui

    bpy = registered
    out = tmp_path / "model"
    job = skin_ui.start_training(_trainer(out))
    assert skin_ui.training_running() and job.progress == 0.0
    seen = _follow(job, lambda j: j.progress > 0)  # a step trained
    assert 0 < seen[-1] < 1 and job.status.startswith("3/3 training: step ")

    assert bpy.ops.painted_skin.cancel_training() == {"FINISHED"}  # the panel's button
    assert job.status == "stopping after this frame or step…"
    seen += _follow(job, lambda j: not j.running)
    assert job.code == 130, job.lines
    assert job.status.startswith("stopped (checkpoint saved")
    assert not skin_ui.training_running()
    assert (tmp_path / "model.ckpt").is_file()
    assert not out.exists()  # no model folder, and no half-written one beside it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.ckpt"]
    stopped_at = max(_steps_shown(job))
    assert 0 < stopped_at < STEPS

    assert seen == sorted(seen)  # the bar never goes back

    job = skin_ui.start_training(_trainer(out, "--resume"))
    seen = _follow(job, lambda j: not j.running)
    assert job.code == 0, job.lines
    assert seen == sorted(seen) and seen[0] == 0.0
    assert job.progress == 1.0 and job.status.startswith("trained: model folder written")
    assert min(_steps_shown(job)) >= stopped_at  # continued, not started again
    report = json.loads((out / "report.json").read_text())
    assert report["steps"] == STEPS
    assert (out / "config.json").is_file() and (out / "model.onnx").is_file()


def test_a_failed_training_says_why_in_the_panel(registered, tmp_path):
    """A resume without a checkpoint ends at once; the panel shows the trainer's error."""
    from painted_skin.addon.blender.skin import ui as skin_ui

    job = skin_ui.start_training(_trainer(tmp_path / "model", "--resume"))
    assert job.wait(60) == 2
    assert job.status.startswith("training failed (exit 2): skin-train: error: nothing to "
                                 "resume")
    assert job.progress == 0.0 and not (tmp_path / "model").exists()


def test_the_status_names_the_phase_and_its_count_not_blenders_banner(registered):
    """The panel's line follows the run: the child Blender's banner says nothing, each
    rendered frame says which set and how far, the trainer's bar which step."""
    from painted_skin.addon.blender.skin import ui as skin_ui

    job = skin_ui.TrainingRun([sys.executable, "-c", "pass"])
    job.wait(60)
    job.code, job.progress, job.status = None, 0.0, "training: starting…"
    seen = _statuses(job, ("Blender 5.2.2 LTS (hash abc built 2026-01-01)",
                           "train-skin: rendering the training set: 3/12 frames",
                           "train-skin: rendering the training set: 12/12 frames",
                           "train-skin: rendering the held-out set: 6/6 frames",
                           "skin: 40%|####      | 40/100 [00:10<00:15]"))
    assert seen == [("training: starting…", 0.0),
                    ("1/3 rendering the training set: 3/12 frames", 0.1),
                    ("1/3 rendering the training set: 12/12 frames", 0.4),
                    ("2/3 rendering the held-out set: 6/6 frames", 0.5),
                    ("3/3 training: step 40/100", 0.7)]

    # With --detail-size, the larger set is a phase of its own, between them.
    job.phases = skin_ui.TrainingRun.phases_of(["train-skin", "--detail-size", "256"])
    job.progress = 0.0
    seen = _statuses(job, ("train-skin: rendering the training set: 12/12 frames",
                           "train-skin: rendering the held-out set: 6/6 frames",
                           "train-skin: rendering the 256² detail set: 4/8 frames",
                           "skin: 40%|####      | 40/100 [00:10<00:15]"))
    assert seen == [("1/4 rendering the training set: 12/12 frames", 0.333),
                    ("2/4 rendering the held-out set: 6/6 frames", 0.417),
                    ("3/4 rendering the 256² detail set: 4/8 frames", 0.5),
                    ("4/4 training: step 40/100", 0.75)]


def _statuses(job, lines) -> list[tuple[str, float]]:
    """The panel's status and progress after each of the trainer's ``lines``."""
    seen = []
    for line in lines:
        job._take(line)
        seen.append((job.status, round(job.progress, 3)))
    return seen
