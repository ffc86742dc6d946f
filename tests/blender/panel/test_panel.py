"""The Retarget panel as an animator uses it, in the real ``bpy`` module:
detect and edit the bone map, retarget, save/load maps, bad input, drawing."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

FRAMES, FPS = 48, 24
CORE = ("hips", "spine", "head", "leftUpperArm", "leftLowerArm", "leftHand", "rightUpperArm",
        "rightLowerArm", "rightHand", "leftUpperLeg", "leftLowerLeg", "leftFoot",
        "rightUpperLeg", "rightLowerLeg", "rightFoot")


@pytest.fixture
def addon(bpy_clean):
    """The add-on registered in the bpy module (as Blender's enable does)."""
    import painted_skin

    painted_skin.register()
    try:
        yield bpy_clean
    finally:
        painted_skin.unregister()


@dataclass
class Shot:
    bpy: object
    arm: object  # the demo character's armature
    clip: Path
    settings: object  # scene.painted_skin_retarget


@pytest.fixture
def shot(addon, tmp_path) -> Shot:
    """Demo character with a hand-made "Idle" action, a 48-frame walk on disk, the panel
    pointed at both, and a scene at 30 fps, frames 1-250 (so changes show)."""
    from painted_skin.addon.motion import write_clip
    from painted_skin.demo.character import build_demo_character

    bpy = addon
    arm = build_demo_character()
    idle = bpy.data.actions.new("Idle")
    idle.use_fake_user = True
    arm.animation_data_create().action = idle
    scene = bpy.context.scene
    scene.render.fps, scene.render.fps_base = 30, 1.0
    scene.frame_start, scene.frame_end = 1, 250
    clip = write_clip(tmp_path / "walk.bvh", "walk", frames=FRAMES, fps=FPS)
    s = scene.painted_skin_retarget
    s.source_kind, s.source_path, s.target_object = "FILE", str(clip), arm
    return Shot(bpy, arm, clip, s)


def _rows(s) -> dict[str, str]:
    return {r.canonical: r.bone for r in s.target_map}


def _curves(action) -> dict[tuple[str, int], np.ndarray]:
    """(data path, index) -> (frames, 2) keyframe co of the action's only slot."""
    bag = action.layers[0].strips[0].channelbag(action.slots[0])
    out = {}
    for fc in bag.fcurves:
        co = np.empty(2 * len(fc.keyframe_points), dtype=np.float32)
        fc.keyframe_points.foreach_get("co", co)
        out[(fc.data_path, fc.array_index)] = co.reshape(-1, 2)
    return out


def _bone_curves(curves: dict, arm, bone: str) -> np.ndarray:
    """(channels, frames) rotation track of a bone; an unkeyed bone stays at rest."""
    keys = sorted(k for k in curves if k[0].startswith(f'pose.bones["{bone}"].rotation'))
    if keys:
        return np.stack([curves[k][:, 1] for k in keys])
    mode = arm.pose.bones[bone].rotation_mode
    rest = {"QUATERNION": (1.0, 0.0, 0.0, 0.0), "AXIS_ANGLE": (0.0, 0.0, 1.0, 0.0)}.get(
        mode, (0.0, 0.0, 0.0))
    frames = len(next(iter(curves.values())))  # the clip resampled to the scene's rate
    return np.repeat(np.array(rest)[:, None], frames, axis=1)


def _joints(report: str) -> int:
    m = re.search(r"(\d+) joints", report)
    assert m, report
    return int(m.group(1))


def _state(bpy, arm) -> dict:
    """What a failed operator must leave as it was."""
    scene = bpy.context.scene
    ad = arm.animation_data
    return {
        **{c: sorted(d.name for d in getattr(bpy.data, c))
           for c in ("objects", "actions", "armatures", "meshes", "materials", "collections")},
        "action": ad.action.name if ad and ad.action else None,
        "fps": (scene.render.fps, scene.render.fps_base),
        "range": (scene.frame_start, scene.frame_end),
        "report": scene.painted_skin_retarget.last_report,
    }


# ----------------------------------------------------------------------------- detect map


def test_detect_map_fills_editable_rows_with_confidences(shot):
    s, arm = shot.settings, shot.arm
    assert len(s.target_map) == 0 and not s.use_edited_map
    assert shot.bpy.ops.painted_skin.detect_map() == {"FINISHED"}
    rows = _rows(s)
    assert set(CORE) <= set(rows), f"core joints not detected: {set(CORE) - set(rows)}"
    assert set(rows.values()) <= set(arm.data.bones.keys()), "rows name bones not in the rig"
    assert len(set(rows.values())) == len(rows), "a bone plays two joints"
    assert rows["leftUpperArm"] != rows["rightUpperArm"]
    for r in s.target_map:
        assert 0.0 < r.confidence <= 1.0 and r.origin, (r.canonical, r.confidence, r.origin)
    # Detecting switches the retarget to the (now editable) list.
    assert s.use_edited_map


# ----------------------------------------------------------------------------- retarget


def test_retarget_bakes_a_new_action_and_scene_follows_the_clip(shot):
    # "Match Scene to Clip": the scene takes the clip's rate and range (by default the
    # scene keeps its own, see test_retarget_scene.py).
    bpy, s, arm = shot.bpy, shot.settings, shot.arm
    bpy.ops.painted_skin.detect_map()
    assert bpy.ops.painted_skin.retarget(match_scene=True) == {"FINISHED"}

    action = arm.animation_data.action
    assert action.name == "walk" and action.name != "Idle"
    assert "Idle" in bpy.data.actions, "the previous action was deleted"
    assert tuple(action.frame_range) == (1.0, float(FRAMES))
    curves = _curves(action)
    frames = {tuple(c[:, 0]) for c in curves.values()}
    assert frames == {tuple(np.arange(1, FRAMES + 1, dtype=np.float32))}
    animated = {re.match(r'pose\.bones\["(.+?)"\]', p).group(1) for p, _ in curves}
    assert {_rows(s)[c] for c in CORE} <= animated
    hips = _rows(s)["hips"]
    loc = np.stack([curves[(f'pose.bones["{hips}"].location', k)][:, 1] for k in range(3)])
    assert np.ptp(loc, axis=1).max() > 0.5, "a 2 s walk carries the hips forward"

    scene = bpy.context.scene
    assert scene.render.fps / scene.render.fps_base == pytest.approx(FPS)
    assert (scene.frame_start, scene.frame_end) == (1, FRAMES)
    assert s.last_report.startswith(f"walk: {FRAMES} frames")
    assert _joints(s.last_report) >= len(CORE)

    # The character really moves: the left thigh swings during the walk.
    thigh = arm.pose.bones[_rows(s)["leftUpperLeg"]]
    angles = []
    for f in (1, 7, 13, 19):
        scene.frame_set(f)
        angles.append(thigh.matrix.to_quaternion().copy())
    assert max(angles[0].rotation_difference(q).angle for q in angles[1:]) > 0.2


def test_retarget_keeps_the_replaced_take(shot):
    bpy = shot.bpy
    bpy.ops.painted_skin.retarget()
    first = shot.arm.animation_data.action
    bpy.ops.painted_skin.retarget()
    assert shot.arm.animation_data.action != first
    assert first.users > 0 or first.use_fake_user


def test_edited_map_drives_the_retarget(shot):
    bpy, s, arm = shot.bpy, shot.settings, shot.arm
    bpy.ops.painted_skin.detect_map()
    rows = _rows(s)
    bpy.ops.painted_skin.retarget()
    base = _curves(arm.animation_data.action)
    base_joints = _joints(s.last_report)

    # Remove the leftUpperArm row: one joint fewer, the left upper arm is interpolated
    # from its neighbours instead of following the clip; the right arm is untouched.
    s.target_map.remove(next(i for i, r in enumerate(s.target_map)
                             if r.canonical == "leftUpperArm"))
    assert bpy.ops.painted_skin.retarget() == {"FINISHED"}
    removed = _curves(arm.animation_data.action)
    assert _joints(s.last_report) == base_joints - 1
    left, right = rows["leftUpperArm"], rows["rightUpperArm"]
    assert np.abs(_bone_curves(removed, arm, left) - _bone_curves(base, arm, left)).max() > 1e-3
    np.testing.assert_allclose(_bone_curves(removed, arm, right), _bone_curves(base, arm, right),
                               atol=1e-6)

    # Point leftUpperArm at a wrong bone (the cape): the cape now swings like an arm.
    cape = next(b for b in arm.data.bones.keys() if b.startswith("cape") and b not in rows)
    row = s.target_map.add()
    row.canonical, row.bone = "leftUpperArm", cape
    assert bpy.ops.painted_skin.retarget() == {"FINISHED"}
    wrong = _curves(arm.animation_data.action)
    assert _joints(s.last_report) == base_joints
    assert np.abs(_bone_curves(wrong, arm, cape) - _bone_curves(base, arm, cape)).max() > 1e-2

    # With "Use edited character map" off the list is ignored: back to the detected map.
    s.use_edited_map = False
    assert bpy.ops.painted_skin.retarget() == {"FINISHED"}
    again = _curves(arm.animation_data.action)
    for bone in (left, right, cape):
        np.testing.assert_allclose(_bone_curves(again, arm, bone), _bone_curves(base, arm, bone),
                                   atol=1e-6)


# ----------------------------------------------------------------------------- bad input

_NON_HUMANOID_BVH = """HIERARCHY
ROOT Base
{
  OFFSET 0 0 0
  CHANNELS 6 Xposition Yposition Zposition Zrotation Yrotation Xrotation
  JOINT Arm
  {
    OFFSET 0 20 0
    CHANNELS 3 Zrotation Yrotation Xrotation
    End Site
    {
      OFFSET 0 20 0
    }
  }
}
MOTION
Frames: 2
Frame Time: 0.041667
0 0 0 0 0 0 0 0 0
0 0 0 0 0 0 10 0 0
"""


def _set_malformed(shot, tmp_path):
    path = tmp_path / "broken.bvh"
    path.write_text(shot.clip.read_text().split("MOTION")[0])  # hierarchy, no motion
    shot.settings.source_path = str(path)
    return "broken.bvh"


def _set_missing(shot, tmp_path):
    shot.settings.source_path = str(tmp_path / "nope.bvh")
    return "does not exist"


def _set_non_humanoid(shot, tmp_path):
    path = tmp_path / "crane.bvh"
    path.write_text(_NON_HUMANOID_BVH)
    shot.settings.source_path = str(path)
    return "does not look like a humanoid"


def _set_no_clip(shot, tmp_path):
    shot.settings.source_path = ""
    return "no clip chosen"


def _set_no_source_armature(shot, tmp_path):
    shot.settings.source_kind = "OBJECT"
    return "no source armature"


def _set_bad_edited_bone(shot, tmp_path):
    shot.bpy.ops.painted_skin.detect_map()
    next(r for r in shot.settings.target_map if r.canonical == "leftHand").bone = "NoSuchBone"
    return "NoSuchBone"


def _set_mesh_target(shot, tmp_path):
    bpy = shot.bpy
    body = next(o for o in bpy.data.objects if o.type == "MESH")
    shot.settings.target_object = body  # the UI's picker refuses it; scripts can still do it
    return "armature"


def _set_no_target(shot, tmp_path):
    shot.settings.target_object = None
    return "poll()"  # the button is greyed out; see test_no_target_message_names_the_problem


@pytest.mark.parametrize("make_bad", [
    _set_malformed, _set_missing, _set_non_humanoid, _set_no_clip, _set_no_source_armature,
    _set_bad_edited_bone, _set_mesh_target, _set_no_target,
], ids=lambda f: f.__name__[5:])
def test_bad_input_cancels_with_a_message_and_leaves_the_scene_alone(shot, tmp_path, make_bad):
    bpy = shot.bpy
    expected = make_bad(shot, tmp_path)
    before = _state(bpy, shot.arm)
    with pytest.raises(RuntimeError) as err:
        bpy.ops.painted_skin.retarget()
    # A report, not a crash: an exception escaping execute() would show a traceback.
    assert expected in str(err.value) and "Traceback" not in str(err.value)
    assert _state(bpy, shot.arm) == before
    assert shot.arm.animation_data.action.name == "Idle"
    # And a good clip still works afterwards.
    s = shot.settings
    s.source_kind, s.source_path, s.target_object = "FILE", str(shot.clip), shot.arm
    s.use_edited_map = False
    assert bpy.ops.painted_skin.retarget() == {"FINISHED"}


def test_no_target_message_names_the_problem(shot):
    bpy = shot.bpy
    body = next(o for o in bpy.data.objects if o.type == "MESH")
    for target in (None, body):
        shot.settings.target_object = target
        for op in (bpy.ops.painted_skin.retarget, bpy.ops.painted_skin.detect_map):
            with pytest.raises(RuntimeError, match="(?i)armature|character") as err:
                op()
            assert "Traceback" not in str(err.value)


# ----------------------------------------------------------------------------- map files


@pytest.mark.parametrize("suffix", [".toml", ".json"])
def test_save_and_load_map_round_trip(shot, tmp_path, suffix):
    bpy, s = shot.bpy, shot.settings
    bpy.ops.painted_skin.detect_map()
    # An edited map: one joint dropped, one pointed elsewhere.
    s.target_map.remove(next(i for i, r in enumerate(s.target_map) if r.canonical == "leftToes"))
    next(r for r in s.target_map if r.canonical == "chest").bone = _rows(s)["upperChest"]
    s.target_map.remove(next(i for i, r in enumerate(s.target_map)
                             if r.canonical == "upperChest"))
    edited = _rows(s)
    path = tmp_path / f"hero_map{suffix}"
    assert bpy.ops.painted_skin.save_map(filepath=str(path)) == {"FINISHED"}
    assert path.is_file()

    s.target_map.clear()
    s.use_edited_map = False
    assert bpy.ops.painted_skin.load_map(filepath=str(path)) == {"FINISHED"}
    assert _rows(s) == edited
    assert s.use_edited_map
    # The loaded map is what the retarget uses.
    assert bpy.ops.painted_skin.retarget() == {"FINISHED"}
    assert _joints(s.last_report) == len(edited)  # every loaded row, and only those

    # A broken file is refused and the list stays as it was.
    bad = tmp_path / f"broken{suffix}"
    bad.write_text("{{{ not a map")
    with pytest.raises(RuntimeError, match="Error"):
        bpy.ops.painted_skin.load_map(filepath=str(bad))
    assert _rows(s) == edited
    with pytest.raises(RuntimeError, match="Error"):
        bpy.ops.painted_skin.load_map(filepath=str(tmp_path / f"absent{suffix}"))
    assert _rows(s) == edited


# ----------------------------------------------------------------------------- drawing

_DRAW_SCRIPT = textwrap.dedent("""
    import json, sys
    import bpy, painted_skin
    from painted_skin.demo.character import build_demo_character

    def draw():
        # The panel's own draw() into a real UILayout (a popover block), with the
        # 3D viewport's sidebar region as context: what Blender does for the N panel.
        win = bpy.context.window_manager.windows[0]
        area = next(a for a in win.screen.areas if a.type == "VIEW_3D")
        region = next(r for r in area.regions if r.type == "UI")
        with bpy.context.temp_override(window=win, area=area, region=region):
            pop = bpy.context.window_manager.popover_begin__internal()
            bpy.types.PS_PT_retarget.draw(pop, bpy.context)
            bpy.types.PS_PT_retarget_options.draw(pop, bpy.context)  # its folded options
            return pop.layout.introspect()

    bpy.ops.wm.read_factory_settings(use_empty=True)
    painted_skin.register()
    out = {"empty": draw()}
    s = bpy.context.scene.painted_skin_retarget
    s.target_object = build_demo_character()
    bpy.ops.painted_skin.detect_map()
    s.last_report = "walk: 48 frames, 51 joints"
    out["filled"] = draw()
    s.source_kind = "OBJECT"
    out["object"] = draw()
    print("LAYOUT" + json.dumps(out), flush=True)
    # The popover blocks are never shown, so never freed: skip Blender's leak report.
    import os
    os._exit(0)
""")


def _flatten(items) -> list[dict]:
    """Every layout item, nested ones included (a list of panels' layouts is one list)."""
    out = []
    for it in items:
        if isinstance(it, list):
            out += _flatten(it)
            continue
        out.append(it)
        out += _flatten(it.get("items", []))
    return out


class Drawn:
    """The layouts a draw script prints (``LAYOUT{json}``), drawn in a subprocess: the
    undisplayed popover block is leaked by design (ending it needs a visible window), and
    a crash in Blender's UI code must not take the suite down. Errors in draw code called
    back from C (draw_item) and unknown property names in layout.prop() are only printed,
    never raised: the output is searched for them."""

    def __init__(self, script: str) -> None:
        proc = subprocess.run([sys.executable, "-c", script], capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        problems = [x for x in (proc.stdout + proc.stderr).splitlines()
                    if "Traceback" in x or "Error:" in x or "not found" in x]
        assert problems == []
        line = next(x for x in proc.stdout.splitlines() if x.startswith("LAYOUT"))
        self.layouts = {k: _flatten(v) for k, v in json.loads(line[len("LAYOUT"):]).items()}

    def ops(self, kind: str) -> set[str]:
        return {it["operator"] for it in self.layouts[kind] if "operator" in it}

    def props(self, kind: str) -> set[str]:
        return {it["rna"].split("[")[0] for it in self.layouts[kind] if "rna" in it}

    def texts(self, kind: str) -> list[str]:
        return [it.get("draw_string", "") for it in self.layouts[kind]]


def test_panel_draws_its_controls_and_the_bone_list():
    """The panel's draw() and the UIList's draw_item() run against a real layout."""
    drawn = Drawn(_DRAW_SCRIPT)
    ops, props, texts = drawn.ops, drawn.props, drawn.texts

    for kind in drawn.layouts:
        assert {"bpy.ops.painted_skin.retarget()", "bpy.ops.painted_skin.detect_map()",
                "bpy.ops.painted_skin.load_map()", "bpy.ops.painted_skin.save_map()"} \
            <= ops(kind)
        assert {"PS_RetargetSettings.source_kind", "PS_RetargetSettings.target_object",
                "PS_RetargetSettings.target_preset", "PS_RetargetSettings.ground",
                "PS_RetargetSettings.in_place", "PS_RetargetSettings.foot_lock"} <= props(kind)

    # Nothing detected yet: a clip field, no bone list, no result line.
    assert "PS_RetargetSettings.source_path" in props("empty")
    assert "PS_RetargetSettings.target_map_index" not in props("empty")
    assert "PS_BoneMapItem.bone" not in props("empty")
    # After detection: the editable list (joint label, bone picker; the confidence only as
    # a warning icon when low, so the names keep the row) and the result.
    filled = texts("filled")
    assert "PS_RetargetSettings.use_edited_map" in props("filled")
    assert "PS_BoneMapItem.bone" in props("filled")
    assert {"hips", "spine"} <= set(filled) and "1.00" not in filled
    assert "walk: 48 frames, 51 joints" in " ".join(filled)  # wrapped to the sidebar
    assert "PaintedSkinDemo" in filled  # the character picker shows the armature
    # Source "Armature": the armature picker replaces the file field.
    assert "PS_RetargetSettings.source_object" in props("object")
    assert "PS_RetargetSettings.source_path" not in props("object")


_DRAW_STEPS_SCRIPT = textwrap.dedent("""
    import json, sys
    import bpy, painted_skin
    from painted_skin.addon.blender.retarget import operators, modal as retarget_modal
    from painted_skin.addon.blender.passes import ui as passes_ui
    from painted_skin.demo.character import build_demo_character

    def draw(panel):
        win = bpy.context.window_manager.windows[0]
        area = next(a for a in win.screen.areas if a.type == "VIEW_3D")
        region = next(r for r in area.regions if r.type == "UI")
        with bpy.context.temp_override(window=win, area=area, region=region):
            pop = bpy.context.window_manager.popover_begin__internal()
            getattr(bpy.types, panel).draw(pop, bpy.context)
            for sub in SUBPANELS.get(panel, ()):  # its folded subpanels, drawn open
                getattr(bpy.types, sub).draw(pop, bpy.context)
            return pop.layout.introspect()

    SUBPANELS = {"PS_PT_passes": ("PS_PT_passes_select",),
                 "PS_PT_retarget": ("PS_PT_retarget_options",)}

    bpy.ops.wm.read_factory_settings(use_empty=True)
    painted_skin.register()
    out = {"passes": draw("PS_PT_passes"), "skin": draw("PS_PT_skin")}
    sk = bpy.context.scene.painted_skin_skin
    sk.model_choice = "folder"
    out["skin_folder"] = draw("PS_PT_skin")
    sk.model_choice = "registry"
    out["skin_registry"] = draw("PS_PT_skin")
    passes_ui.RENDER.update(running=True, text="3/10 (frame 3)")
    out["passes_running"] = draw("PS_PT_passes")
    passes_ui.RENDER.update(running=False, text="")
    arm = build_demo_character()
    bpy.context.scene.painted_skin_retarget.target_object = arm
    job = operators.RUNNING["job"] = retarget_modal.RetargetJob("none.bvh", arm)
    out["retarget_running"] = draw("PS_PT_retarget")
    job.cancel()
    print("LAYOUT" + json.dumps(out), flush=True)
    import os
    os._exit(0)
""")


def test_passes_and_skin_sections_draw_their_controls_and_progress():
    """The Passes and Skin Model sections' draw() against a real layout: the OpenPose
    0-1 checkbox, the model picker's field for each choice, and while a render or a
    retarget runs, its progress with a Cancel button in place of the start button."""
    drawn = Drawn(_DRAW_STEPS_SCRIPT)
    ops, props, texts = drawn.ops, drawn.props, drawn.texts

    assert "PS_PassesSettings.openpose_normalized" in props("passes")
    assert "bpy.ops.painted_skin.render_passes()" in ops("passes")
    assert "bpy.ops.painted_skin.cancel_passes()" not in ops("passes")
    assert "bpy.ops.painted_skin.cancel_passes()" in ops("passes_running")
    assert "bpy.ops.painted_skin.render_passes()" not in ops("passes_running")
    assert "Rendering 3/10 (frame 3)" in texts("passes_running")

    assert "PS_SkinSettings.model_choice" in props("skin")
    assert not {"PS_SkinSettings.model_folder", "PS_SkinSettings.model_name"} & props("skin")
    assert "PS_SkinSettings.model_folder" in props("skin_folder")
    assert "PS_SkinSettings.model_name" in props("skin_registry")

    assert "bpy.ops.painted_skin.cancel_retarget()" in ops("retarget_running")
    assert "bpy.ops.painted_skin.retarget()" not in ops("retarget_running")
    assert "Retargeting 0/4 starting" in texts("retarget_running")
