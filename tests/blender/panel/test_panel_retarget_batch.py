"""The Retarget panel's batch: several clip files onto one character, each its own
Action named after its file, stepped like the one-clip retarget (module-mode bpy has no
event loop, so the job is stepped here as the operator's timer would), with Cancel and
a bad file named in the report while the others go on."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

CLIPS = (("walk", 8), ("run", 10), ("jump", 12))


@pytest.fixture
def addon(bpy_clean):
    from painted_skin.addon.blender.classes import register_classes, unregister_classes
    from painted_skin.addon.blender.registration import BASE_CLASSES, BASE_SETTINGS
    from painted_skin.addon.blender.retarget import operators

    register_classes(BASE_CLASSES, **BASE_SETTINGS)
    try:
        yield bpy_clean
    finally:
        operators.RUNNING["job"] = None
        unregister_classes(BASE_CLASSES, *BASE_SETTINGS)


@pytest.fixture
def character(addon):
    """The demo character with an "Idle" action, chosen in the panel."""
    from painted_skin.demo.character import build_demo_character

    arm = build_demo_character()
    arm.animation_data_create().action = addon.data.actions.new("Idle")
    arm.animation_data.action.use_fake_user = True
    addon.context.scene.painted_skin_retarget.target_object = arm
    return arm


@pytest.fixture
def clips(tmp_path) -> list[Path]:
    from painted_skin.addon.motion import write_clip

    return [write_clip(tmp_path / f"{kind}.bvh", kind, frames=n, fps=24) for kind, n in CLIPS]


def _batch(clips, character):
    from painted_skin.addon.blender.retarget.modal import BatchRetargetJob

    return BatchRetargetJob(clips, character, set_scene=False, fps=24.0)


def _actions(bpy) -> set[str]:
    return {a.name for a in bpy.data.actions}


def _length(action) -> int:
    first, last = action.frame_range
    return round(last - first) + 1


def test_a_batch_makes_one_action_per_clip_with_its_frames(character, addon, clips):
    bpy = addon
    job = _batch(clips, character)
    seen = []
    while not job.step():
        seen.append(job.progress_text)
    assert seen[0] == "clip 1/3 (walk.bvh): 0/4 reading clip"
    assert "clip 3/3 (jump.bvh): 3/4 baking action" in seen
    assert [r.action for r in job.reports] == ["walk", "run", "jump"] and not job.failures
    assert _actions(bpy) == {"Idle", "walk", "run", "jump"}
    for name, n in CLIPS:
        assert _length(bpy.data.actions[name]) == n
        assert bpy.data.actions[name].users >= 1  # kept in the file, not only in memory
    assert character.animation_data.action.name == "jump"
    assert job.summary == "3/3 clips retargeted (walk, run, jump)"


def test_cancel_after_the_first_clip_leaves_exactly_it(character, addon, clips):
    bpy = addon
    objects = {o.name for o in bpy.data.objects}
    job = _batch(clips, character)
    while not job.reports:
        assert not job.step()
    job.step()  # the second clip has begun: reading it
    job.cancel()
    assert job.step() and job.cancelled
    assert _actions(bpy) == {"Idle", "walk"}
    assert character.animation_data.action.name == "walk"
    assert {o.name for o in bpy.data.objects} == objects  # no imported clip left behind
    assert "cancelled at clip 2 (run.bvh)" in job.summary


def test_a_broken_file_is_named_and_the_batch_goes_on(character, addon, clips, tmp_path):
    bpy = addon
    bad = tmp_path / "broken.bvh"
    bad.write_text("HIERARCHY\nROOT\n")
    job = _batch([clips[0], bad, clips[2]], character)
    job.run()
    assert [name for name, _ in job.failures] == ["broken.bvh"]
    assert _actions(bpy) == {"Idle", "walk", "jump"}
    assert job.summary.endswith("failed: broken.bvh") and "2/3 clips" in job.summary


def test_the_operator_retargets_the_chosen_files(character, addon, clips, tmp_path):
    bpy = addon
    bad = tmp_path / "broken.bvh"
    bad.write_text("HIERARCHY\nROOT\n")
    files = [{"name": n} for n in ("walk.bvh", "broken.bvh", "run.bvh")]
    assert bpy.ops.painted_skin.retarget_batch(directory=str(tmp_path), files=files) \
        == {"FINISHED"}
    assert _actions(bpy) == {"Idle", "walk", "run"}
    report = bpy.context.scene.painted_skin_retarget.last_report
    assert report == "2/3 clips retargeted (walk, run); failed: broken.bvh"
    assert bpy.context.scene.frame_end >= bpy.context.scene.frame_start + 10 - 1
    # The one-clip path still works beside it.
    s = bpy.context.scene.painted_skin_retarget
    s.source_kind, s.source_path = "FILE", str(clips[2])
    assert bpy.ops.painted_skin.retarget() == {"FINISHED"}
    assert character.animation_data.action.name == "jump"


def test_no_files_chosen_is_one_clear_error(character, addon, tmp_path):
    with pytest.raises(RuntimeError, match="no clip files chosen"):
        addon.ops.painted_skin.retarget_batch(directory=str(tmp_path), files=[])


def test_the_cancel_button_stops_the_running_batch(character, addon, clips):
    from painted_skin.addon.blender.retarget import operators

    bpy = addon
    job = operators.RUNNING["job"] = _batch(clips, character)
    job.step()
    assert not bpy.ops.painted_skin.retarget_batch.poll()  # greyed out while it runs
    assert bpy.ops.painted_skin.cancel_retarget() == {"FINISHED"}
    assert job.step() and job.cancelled and not job.reports
    assert _actions(bpy) == {"Idle"} and character.animation_data.action.name == "Idle"
    assert bpy.ops.painted_skin.retarget_batch.poll()


_DRAW_BATCH_SCRIPT = textwrap.dedent("""
    import json
    import bpy, painted_skin
    from painted_skin.addon.blender.retarget import operators, modal as retarget_modal
    from painted_skin.demo.character import build_demo_character

    def draw():
        win = bpy.context.window_manager.windows[0]
        area = next(a for a in win.screen.areas if a.type == "VIEW_3D")
        region = next(r for r in area.regions if r.type == "UI")
        with bpy.context.temp_override(window=win, area=area, region=region):
            pop = bpy.context.window_manager.popover_begin__internal()
            bpy.types.PS_PT_retarget.draw(pop, bpy.context)
            return pop.layout.introspect()

    bpy.ops.wm.read_factory_settings(use_empty=True)
    painted_skin.register()
    arm = build_demo_character()
    bpy.context.scene.painted_skin_retarget.target_object = arm
    out = {"idle": draw()}
    job = operators.RUNNING["job"] = retarget_modal.BatchRetargetJob(
        ["a/walk.bvh", "a/run.bvh"], arm)
    out["running"] = draw()
    job.cancel()
    print("LAYOUT" + json.dumps(out), flush=True)
    import os
    os._exit(0)
""")


def test_the_panel_offers_the_batch_and_shows_its_progress():
    from test_panel import Drawn

    drawn = Drawn(_DRAW_BATCH_SCRIPT)
    assert {"bpy.ops.painted_skin.retarget()", "bpy.ops.painted_skin.retarget_batch()"} \
        <= drawn.ops("idle")
    assert "bpy.ops.painted_skin.retarget_batch()" not in drawn.ops("running")
    assert "bpy.ops.painted_skin.cancel_retarget()" in drawn.ops("running")
    assert "Retargeting clip 1/2 (walk.bvh): 0/4 starting" in drawn.texts("running")
