"""The panel's workflow steps as an animator meets them, in the real ``bpy`` module:
buttons greyed out with the reason while their inputs are missing, the sections in
workflow order, a retarget that runs in slices and can be cancelled without leaving a
half-written Action, Preview opening an Image Editor, the OpenPose 0-1 JSON checkbox."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def addon(bpy_clean):
    """The steps that need no network layer (Retarget, Passes, Skin Model) registered."""
    from painted_skin.addon.blender.classes import register_classes, unregister_classes
    from painted_skin.addon.blender.passes import ui as passes_ui
    from painted_skin.addon.blender.registration import BASE_CLASSES, BASE_SETTINGS
    from painted_skin.addon.blender.retarget import operators

    register_classes(BASE_CLASSES, **BASE_SETTINGS)
    try:
        yield bpy_clean
    finally:
        operators.RUNNING["job"] = None
        passes_ui.RENDER.update(running=False, cancel=False, text="")
        unregister_classes(BASE_CLASSES, *BASE_SETTINGS)


@pytest.fixture
def character(addon, tmp_path):
    """The demo character with an "Idle" action, a walk clip on disk, the panel on both."""
    from painted_skin.addon.motion import write_clip
    from painted_skin.demo.character import build_demo_character

    bpy = addon
    arm = build_demo_character()
    arm.animation_data_create().action = bpy.data.actions.new("Idle")
    arm.animation_data.action.use_fake_user = True
    clip = write_clip(tmp_path / "walk.bvh", "walk", frames=12, fps=24)
    s = bpy.context.scene.painted_skin_retarget
    s.source_kind, s.source_path, s.target_object = "FILE", str(clip), arm
    return arm


def _refused(op, match: str) -> None:
    """The button is greyed out and calling it says why."""
    assert not op.poll()
    with pytest.raises(RuntimeError, match=match):
        op()


def _scene_state(bpy) -> dict:
    return {c: sorted(d.name for d in getattr(bpy.data, c))
            for c in ("objects", "actions", "armatures", "meshes", "collections")}


# ----------------------------------------------------------------------------- retarget


def test_retarget_is_greyed_out_until_it_has_a_clip_and_a_character(character, addon):
    bpy, s = addon, addon.context.scene.painted_skin_retarget
    op = bpy.ops.painted_skin.retarget
    assert op.poll()
    s.source_path = ""
    _refused(op, "no clip chosen")
    s.source_kind = "OBJECT"
    _refused(op, "no source armature chosen")
    s.source_object = character  # any armature is a source as far as the button goes
    assert op.poll()
    s.target_object = None
    _refused(op, "character's armature")


def _job(character, bpy):
    from painted_skin.addon.blender.retarget.modal import RetargetJob

    s = bpy.context.scene.painted_skin_retarget
    return RetargetJob(bpy.path.abspath(s.source_path), character, set_scene=False, fps=24.0)


@pytest.mark.parametrize("slice_s", [None, 0.0])  # 0: the bake spans slices (a busy machine)
def test_retarget_runs_in_slices_and_touches_the_scene_only_in_the_last(character, addon,
                                                                        monkeypatch, slice_s):
    import functools

    from painted_skin.addon.blender.retarget import api as retarget_api
    from painted_skin.addon.blender.retarget import armature_io
    from painted_skin.addon.blender.retarget.modal import STAGES

    bpy = addon
    if slice_s is not None:
        monkeypatch.setattr(retarget_api, "write_action_steps",
                            functools.partial(armature_io.write_action_steps, slice_s=slice_s))
    before = _scene_state(bpy)
    job = _job(character, bpy)
    seen = []
    while not job.step():
        seen.append(job.progress_text)
        # Nothing baked or left imported before the bake stage; the bake itself may span
        # slices (a busy machine, a long take) and assigns its Action only at the end.
        if job.done < STAGES - 1:
            assert _scene_state(bpy) == before
        assert character.animation_data.action.name == "Idle"
    # A stage on the worker thread shows again on each tick until it ends.
    assert list(dict.fromkeys(seen)) == ["0/4 reading clip", "1/4 mapping bones",
                                         "2/4 solving", "3/4 baking action"]
    assert job.report is not None and job.progress_text == "4/4 done"
    assert character.animation_data.action.name == job.report.action == "walk"
    assert job.report.frames == 12


@pytest.mark.parametrize("slices", [1, 2, 3, 4])
def test_cancelling_between_slices_keeps_the_previous_action(character, addon, slices):
    bpy = addon
    before = _scene_state(bpy)
    job = _job(character, bpy)
    for _ in range(slices):
        assert not job.step()
    job.cancel()
    assert job.step() and job.report is None and job.cancelled
    assert character.animation_data.action.name == "Idle"
    assert _scene_state(bpy) == before  # no half-written Action, no imported clip left


def test_closing_a_bake_whose_action_is_gone_raises_nothing(character, addon):
    """File > New (or a reload) while a bake is half-way frees its Action; closing the
    bake afterwards (the panel's Cancel, or the generator collected) is no error."""
    import numpy as np
    from painted_skin.addon.blender.retarget import armature_io

    bpy = addon
    skel = armature_io.read_skeleton(character)
    n = len(skel.names)
    rot = np.broadcast_to(np.eye(3), (4, n, 3, 3)).copy()
    steps = armature_io.write_action_steps(character, skel, rot, np.zeros((4, n, 3)),
                                           np.ones(n, bool), 1, "gone", slice_s=0.0)
    next(steps)
    next(steps)
    bpy.data.actions.remove(bpy.data.actions["gone"])
    steps.close()  # before the fix: ReferenceError (StructRNA ... has been removed)
    assert "gone" not in bpy.data.actions and character.animation_data.action.name == "Idle"


def test_cancelling_in_the_middle_of_the_bake_removes_the_unfinished_action(
        character, addon, monkeypatch):
    import functools

    from painted_skin.addon.blender.retarget import api as retarget_api
    from painted_skin.addon.blender.retarget import armature_io

    bpy = addon
    before = _scene_state(bpy)
    # A slice per bone, so a 12-frame clip's bake is cut like a long take's.
    monkeypatch.setattr(retarget_api, "write_action_steps",
                        functools.partial(armature_io.write_action_steps, slice_s=0.0))
    job = _job(character, bpy)
    baking = 0
    while baking < 3:
        assert not job.step()
        baking += job.message == "baking action"
    assert "walk" in {a.name for a in bpy.data.actions}  # written in part, not assigned
    assert character.animation_data.action.name == "Idle"
    job.cancel()
    assert job.step() and job.cancelled and job.report is None
    assert character.animation_data.action.name == "Idle"
    assert _scene_state(bpy) == before


def test_the_cancel_button_stops_the_running_retarget(character, addon):
    from painted_skin.addon.blender.retarget import operators

    bpy = addon
    _refused(bpy.ops.painted_skin.cancel_retarget, "no retarget is running")
    job = operators.RUNNING["job"] = _job(character, bpy)
    job.step()
    # While it runs, Retarget is greyed out and Cancel is not.
    _refused(bpy.ops.painted_skin.retarget, "a retarget is running")
    assert bpy.ops.painted_skin.cancel_retarget() == {"FINISHED"}
    assert job.step() and job.cancelled
    assert character.animation_data.action.name == "Idle"
    assert bpy.ops.painted_skin.retarget.poll()


def test_a_bad_clip_in_a_slice_raises_and_leaves_the_scene(character, addon, tmp_path):
    from painted_skin.addon.blender.retarget.api import RetargetError
    from painted_skin.addon.blender.retarget.modal import RetargetJob

    bpy = addon
    bad = tmp_path / "bad.bvh"
    bad.write_text("HIERARCHY\nROOT\n")
    before = _scene_state(bpy)
    job = RetargetJob(str(bad), character)
    with pytest.raises(RetargetError):
        job.run()
    assert job.finished and job.report is None
    assert _scene_state(bpy) == before


# ----------------------------------------------------------------------------- passes


def test_passes_buttons_are_greyed_out_until_the_shot_has_what_they_need(addon, tmp_path):
    from painted_skin.demo.character import build_demo_character, setup_demo_scene

    bpy = addon
    ops = bpy.ops.painted_skin
    s = bpy.context.scene.painted_skin_passes
    _refused(ops.render_passes, "not saved yet")  # "//passes/" in a file never saved
    s.out_dir = str(tmp_path / "passes")
    for op in (ops.render_passes, ops.preview_pass):
        _refused(op, "no visible mesh")
    _refused(ops.add_camera, "no character to frame")
    _refused(ops.cancel_passes, "no passes are being rendered")
    arm = build_demo_character()
    assert ops.add_camera.poll()
    for op in (ops.render_passes, ops.preview_pass):
        _refused(op, "no camera")
    setup_demo_scene(arm)
    assert ops.render_passes.poll() and ops.preview_pass.poll()
    for p in s.chosen():
        setattr(s, f"use_{p}", False)
    _refused(ops.render_passes, "no pass is ticked")
    assert ops.preview_pass.poll()  # the preview computes its own pass


def test_a_stopped_render_keeps_whole_frames_and_the_next_run_resumes(addon, tmp_path):
    from painted_skin.addon.blender.passes.render import make_passes
    from painted_skin.addon.blender.passes.ui import PassesRun
    from painted_skin.demo.character import build_demo_character, setup_demo_scene

    bpy = addon
    setup_demo_scene(build_demo_character())
    scene = bpy.context.scene
    scene.frame_start, scene.frame_end = 1, 3
    s = scene.painted_skin_passes
    s.width = s.height = 24
    for p in s.chosen():
        setattr(s, f"use_{p}", p == "mask")
    out = tmp_path / "p"
    run = PassesRun(scene, s.options(scene), out)
    assert not run.step() and run.progress_text == "1/3 (frame 1)"
    # Stopped here (Esc / Cancel): frame 1 is whole, nothing of frames 2-3 exists.
    assert sorted(f.name for f in (out / "mask").iterdir()) == ["0001.png"]
    first = (out / "mask" / "0001.png").stat().st_mtime_ns
    summary = make_passes(scene, s.options(scene), out)  # Render Passes again
    assert (summary["written"], summary["done"]) == (2, 3)
    assert (out / "mask" / "0001.png").stat().st_mtime_ns == first
    assert not list(out.rglob("*.tmp*"))


def test_openpose_normalized_checkbox_writes_the_0_1_json(addon, tmp_path):
    import json

    from painted_skin.demo.character import build_demo_character, setup_demo_scene

    bpy = addon
    setup_demo_scene(build_demo_character())
    scene = bpy.context.scene
    scene.frame_start = scene.frame_end = 1
    s = scene.painted_skin_passes
    s.width = s.height = 32
    s.out_dir = str(tmp_path / "p")
    for p in s.chosen():
        setattr(s, f"use_{p}", p == "skeleton")
    assert bpy.ops.painted_skin.render_passes() == {"FINISHED"}
    assert not (tmp_path / "p" / "skeleton_normalized").exists()
    s.openpose_normalized = True
    s.out_dir = str(tmp_path / "q")
    assert bpy.ops.painted_skin.render_passes() == {"FINISHED"}
    doc = json.loads((tmp_path / "q" / "skeleton_normalized" / "0001.json").read_text())
    xy = [v for person in doc["people"] for i, v in enumerate(person["pose_keypoints_2d"])
          if i % 3 != 2]
    assert xy and all(0.0 <= v <= 1.0 for v in xy) and max(xy) > 0.1


def test_preview_opens_an_image_editor_when_the_screen_has_none(addon):
    from painted_skin.demo.character import build_demo_character, setup_demo_scene

    bpy = addon
    setup_demo_scene(build_demo_character())
    s = bpy.context.scene.painted_skin_passes
    s.width = s.height = 32
    win = bpy.context.window_manager.windows[0]
    assert not [a for a in win.screen.areas if a.type == "IMAGE_EDITOR"]
    view3d = next(a for a in win.screen.areas if a.type == "VIEW_3D")
    with bpy.context.temp_override(window=win, area=view3d):
        assert bpy.ops.painted_skin.preview_pass() == {"FINISHED"}
    editors = [a for a in win.screen.areas if a.type == "IMAGE_EDITOR"]
    assert len(editors) == 1 and editors[0].spaces.active.image.name == "Painted Skin Preview"
    assert [a.type for a in win.screen.areas].count("VIEW_3D") == 1  # the viewport stays
    with bpy.context.temp_override(window=win, area=view3d):  # again: the same editor
        assert bpy.ops.painted_skin.preview_pass() == {"FINISHED"}
    assert [a for a in win.screen.areas if a.type == "IMAGE_EDITOR"] == editors


# ----------------------------------------------------------------------------- layout


def test_sections_follow_the_workflow(bpy_clean):
    """Retarget, Passes, Backend, Skin Model, Restyle, Results: the panels of the
    Painted Skin tab, as the add-on registers them, sort in that order (bl_order)."""
    import painted_skin

    bpy = bpy_clean
    painted_skin.register()
    try:
        _assert_workflow_order(bpy)
    finally:
        painted_skin.unregister()


def _assert_workflow_order(bpy) -> None:
    workflow = ["Retarget", "Passes", "Backend", "Skin Model", "Restyle", "Results"]
    panels = [p for p in bpy.types.Panel.__subclasses__()
              if getattr(p, "bl_category", "") == "Painted Skin"
              and getattr(p, "bl_parent_id", "") == "" and p.is_registered]
    order = {p: getattr(p, "bl_order", 0) for p in panels}  # Blender's default: 0
    labels = [p.bl_label for p in sorted(panels, key=order.get)]
    assert {"Retarget", "Passes", "Skin Model"} <= set(labels)
    assert labels == [w for w in workflow if w in labels]
    orders = list(order.values())
    assert len(set(orders)) == len(orders), "two sections share a place"


def test_train_is_greyed_out_without_a_character_mesh(addon, tmp_path):
    bpy = addon
    bpy.ops.wm.save_as_mainfile(filepath=str(Path(tmp_path) / "empty.blend"))
    _refused(bpy.ops.painted_skin.train_skin, "no character mesh")


def test_backend_and_restyle_buttons_say_why_they_are_greyed_out(bpy_clean) -> None:
    import painted_skin
    from painted_skin.addon.blender.restyle import ui as restyle_ui

    bpy = bpy_clean
    painted_skin.register()
    try:
        assert not bpy.ops.painted_skin.backend_stop.poll()  # nothing started here
        restyle_ui._STATUS["busy"] = True
        try:
            assert not bpy.ops.painted_skin.backend_start.poll()
        finally:
            restyle_ui._STATUS["busy"] = False
        assert bpy.ops.painted_skin.backend_start.poll()
        scene = bpy.context.scene
        scene.painted_skin_restyle.out_dir = "/tmp/painted-skin-poll-test"
        scene.camera = None
        assert not bpy.ops.painted_skin.restyle.poll()  # no camera to render through
        cam = bpy.data.objects.new("cam", bpy.data.cameras.new("cam"))
        scene.collection.objects.link(cam)
        scene.camera = cam
        assert bpy.ops.painted_skin.restyle.poll()
    finally:
        painted_skin.unregister()
