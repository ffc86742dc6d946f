"""A BVH clip read by the project's parser is the clip Blender's importer makes: the same
rest bones (matrices and tails, zero-length bones included), the same pose matrices on
every frame, and so the same retarget — while nothing is added to the scene and the read
runs off Blender's main thread in the panel."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
from painted_skin.addon import motion as gen

# A hierarchy of the kinds the importer treats specially: a root whose children all sit
# at its head, a zero-length joint under a zero-length one, a joint with three children,
# a leaf without an End Site, and a joint whose End Site is (almost) at its head.
EDGES = """HIERARCHY
ROOT Hips
{
\tOFFSET 0 0 0
\tCHANNELS 6 Xposition Yposition Zposition Zrotation Xrotation Yrotation
\tJOINT HipJoint
\t{
\t\tOFFSET 0 0 0
\t\tCHANNELS 3 Zrotation Xrotation Yrotation
\t\tJOINT Twist
\t\t{
\t\t\tOFFSET 0 0 0
\t\t\tCHANNELS 3 Zrotation Xrotation Yrotation
\t\t\tJOINT Leg
\t\t\t{
\t\t\t\tOFFSET 9 -40 1
\t\t\t\tCHANNELS 3 Zrotation Xrotation Yrotation
\t\t\t\tEnd Site
\t\t\t\t{
\t\t\t\t\tOFFSET 0 -40 0
\t\t\t\t}
\t\t\t}
\t\t}
\t}
\tJOINT Chest
\t{
\t\tOFFSET 0 20 0
\t\tCHANNELS 3 Zrotation Xrotation Yrotation
\t\tJOINT ArmL
\t\t{
\t\t\tOFFSET 10 5 0
\t\t\tCHANNELS 3 Zrotation Xrotation Yrotation
\t\t}
\t\tJOINT ArmR
\t\t{
\t\t\tOFFSET -10 5 0
\t\t\tCHANNELS 3 Zrotation Xrotation Yrotation
\t\t\tEnd Site
\t\t\t{
\t\t\t\tOFFSET -0.0001 0 0
\t\t\t}
\t\t}
\t\tJOINT Neck
\t\t{
\t\t\tOFFSET 0 12 0
\t\t\tCHANNELS 3 Zrotation Xrotation Yrotation
\t\t\tEnd Site
\t\t\t{
\t\t\t\tOFFSET 0 8 0
\t\t\t}
\t\t}
\t}
}
MOTION
Frames: 3
Frame Time: 0.04
"""


# Bones the importer moves or tilts: a joint whose OFFSET equals its parent's OFFSET plus
# the parent's End Site (the importer connects it: its head jumps to the parent's tail),
# and an almost straight leg (its bone within 2.5e-4 rad of -Y: Blender's singular case).
CONNECTED = """HIERARCHY
ROOT Hips
{
\tOFFSET 0 90 0
\tCHANNELS 6 Xposition Yposition Zposition Zrotation Xrotation Yrotation
\tJOINT Neck
\t{
\t\tOFFSET 0 50 0
\t\tCHANNELS 3 Zrotation Xrotation Yrotation
\t\tJOINT Head
\t\t{
\t\t\tOFFSET 0 60 0
\t\t\tCHANNELS 3 Zrotation Xrotation Yrotation
\t\t\tEnd Site
\t\t\t{
\t\t\t\tOFFSET 0 10 0
\t\t\t}
\t\t}
\t\tEnd Site
\t\t{
\t\t\tOFFSET 0 10 0
\t\t}
\t}
\tJOINT UpLeg
\t{
\t\tOFFSET 9 -2 0
\t\tCHANNELS 3 Zrotation Xrotation Yrotation
\t\tJOINT Leg
\t\t{
\t\t\tOFFSET 0.005 -40 0.002
\t\t\tCHANNELS 3 Zrotation Xrotation Yrotation
\t\t\tEnd Site
\t\t\t{
\t\t\t\tOFFSET 0 -40 0
\t\t\t}
\t\t}
\t}
}
MOTION
Frames: 3
Frame Time: 0.04
"""


def _with_motion(path: Path, text: str, joints: int) -> Path:
    rng = np.random.default_rng(5)
    rows = rng.uniform(-60, 60, size=(3, 6 + 3 * (joints - 1)))
    rows[:, :3] = rng.normal(size=(3, 3)) * 10
    path.write_text(text + "".join(" ".join(f"{v:.5f}" for v in r) + "\n" for r in rows))
    return path


def _edges(tmp_path: Path) -> Path:
    return _with_motion(tmp_path / "edges.bvh", EDGES, 8)


def _clips(tmp_path: Path) -> list[Path]:
    """The edge cases, each generated convention, and the real takes when present."""
    from conftest import SHARED_DATA

    clips = [_edges(tmp_path), _with_motion(tmp_path / "connected.bvh", CONNECTED, 5)]
    clips += [gen.write_clip(tmp_path / f"{c}.bvh", "wave", frames=20, fps=30, convention=c)
              for c in ("cmu", "mixamo", "apose")]
    return clips + sorted((SHARED_DATA / "bvh").glob("*/*.bvh"))


def _through_importer(path: Path):
    from painted_skin.addon.blender.retarget.api import snap_fps
    from painted_skin.addon.blender.retarget.armature_io import read_motion, read_skeleton
    from painted_skin.addon.blender.retarget.importers import imported_clip
    from painted_skin.addon.core.bvh import parse_bvh_header_fps

    with imported_clip(path) as (arm, _):
        skel = read_skeleton(arm)
        motion = read_motion(arm, skel)
    motion.fps = snap_fps(parse_bvh_header_fps(path))  # one key per file frame
    return skel, motion


def test_the_parser_reads_what_blenders_importer_makes(bpy_clean, tmp_path):
    from painted_skin.addon.blender.retarget.api import read_bvh_source

    for path in _clips(tmp_path):
        objects = set(bpy_clean.data.objects)
        ours = read_bvh_source(path)
        assert set(bpy_clean.data.objects) == objects  # read without touching the scene
        skel, motion = _through_importer(path)
        assert sorted(ours.skeleton.names) == sorted(skel.names), path.name
        order = [skel.index(n) for n in ours.skeleton.names]
        where = f"{path.name}"
        np.testing.assert_allclose(ours.skeleton.world @ ours.skeleton.rest,
                                   (skel.world @ skel.rest)[order], atol=1e-5, err_msg=where)
        np.testing.assert_allclose(ours.skeleton.world_tails(), skel.world_tails()[order],
                                   atol=1e-5, err_msg=where)
        assert ours.motion.frames == motion.frames and ours.motion.fps == motion.fps
        assert ours.motion.frame_start == motion.frame_start
        a, b = ours.motion.world(ours.skeleton), motion.world(skel)[:, order]
        np.testing.assert_allclose(a[..., :3, 3], b[..., :3, 3], atol=1e-5, err_msg=where)
        # The importer keys float32 Euler curves: its rotations carry that rounding.
        np.testing.assert_allclose(a[..., :3, :3], b[..., :3, :3], atol=2e-3, err_msg=where)


def test_a_retarget_from_the_file_equals_one_from_the_imported_armature(bpy_clean, tmp_path):
    from painted_skin.addon.blender.retarget.api import retarget_clip
    from painted_skin.demo.character import build_demo_character

    bpy = bpy_clean
    path = gen.write_clip(tmp_path / "wave.bvh", "wave", frames=30, fps=30, convention="cmu")
    bpy.ops.import_anim.bvh(filepath=str(path), global_scale=0.01, rotate_mode="NATIVE",
                            axis_forward="-Z", axis_up="Y")
    imported = bpy.context.object
    target = build_demo_character()
    curves = {}
    for source, name in ((path, "file"), (imported, "armature")):
        report = retarget_clip(source, target, action_name=name)
        bag = bpy.data.actions[report.action].layers[0].strips[0].channelbags[0]
        curves[name] = {(fc.data_path, fc.array_index):
                        np.array([k.co[1] for k in fc.keyframe_points]) for fc in bag.fcurves}
    assert curves["file"].keys() == curves["armature"].keys()
    for key, values in curves["file"].items():
        np.testing.assert_allclose(values, curves["armature"][key], atol=2e-3, err_msg=str(key))


@pytest.fixture
def gated_read(monkeypatch):
    """The clip's read, held on a gate the test opens; records the thread it ran on."""
    from painted_skin.addon.blender.retarget import api as retarget_api

    gate, ran_on = threading.Event(), []
    real = retarget_api.read_bvh_source

    def held(*args, **kwargs):
        ran_on.append(threading.current_thread())
        assert gate.wait(30)
        return real(*args, **kwargs)

    monkeypatch.setattr(retarget_api, "read_bvh_source", held)
    yield gate, ran_on
    gate.set()


@pytest.mark.parametrize("cancel", [False, True])
def test_the_panel_reads_a_bvh_clip_off_the_main_thread(bpy_clean, tmp_path, gated_read,
                                                        cancel):
    """While the read runs, each tick returns to Blender; a cancel drops the read."""
    from painted_skin.addon.blender.retarget.modal import RetargetJob
    from painted_skin.demo.character import build_demo_character

    bpy, (gate, ran_on) = bpy_clean, gated_read
    target = build_demo_character()
    path = gen.write_clip(tmp_path / "walk.bvh", "walk", frames=60, fps=30, convention="cmu")
    objects, actions = set(bpy.data.objects), set(bpy.data.actions)
    job = RetargetJob(str(path), target)
    for _ in range(3):  # the read is held: every tick comes back, still reading
        assert not job.step() and job.progress_text == "0/4 reading clip"
    assert ran_on and ran_on[0] is not threading.main_thread() and ran_on[0].is_alive()
    if cancel:
        job.cancel()
        assert job.step() and job.cancelled and job.report is None
    gate.set()
    ran_on[0].join(30)
    if not cancel:
        job.run()
        assert job.report is not None and job.report.frames == 60
        assert target.animation_data.action.name == "walk"
    else:
        assert set(bpy.data.actions) == actions
    assert set(bpy.data.objects) == objects


@pytest.mark.parametrize("name", ["x" * 64, "Ä" * 32])
def test_names_blender_would_shorten_go_through_its_importer(bpy_clean, tmp_path, name):
    from painted_skin.addon.blender.retarget.api import load_source, read_bvh_source

    path = tmp_path / "long.bvh"
    path.write_text(EDGES.replace("Neck", name) + "0 " * 27 + "\n" + "1 " * 27 + "\n"
                    + "2 " * 27 + "\n", encoding="utf-8")
    assert read_bvh_source(path) is None
    src = load_source(path)
    assert name not in src.skeleton.names and src.motion.frames == 3


def test_the_panel_runs_blenders_importer_on_blenders_thread(bpy_clean, tmp_path,
                                                             monkeypatch):
    """A clip the parser hands back (its names too long) is imported on the main thread,
    even in the panel, where a BVH file's read is otherwise on a worker."""
    from painted_skin.addon.blender.retarget import api as retarget_api
    from painted_skin.addon.blender.retarget.api import RetargetError
    from painted_skin.addon.blender.retarget.modal import RetargetJob
    from painted_skin.demo.character import build_demo_character

    path = tmp_path / "long.bvh"
    path.write_text(EDGES.replace("Neck", "n" * 70) + "0 " * 27 + "\n" + "1 " * 27 + "\n"
                    + "2 " * 27 + "\n")
    ran_on, parsed_on = [], []
    real_import, real_parse = retarget_api.imported_clip, retarget_api.read_bvh_source

    def recorded(*args):
        ran_on.append(threading.current_thread())
        return real_import(*args)

    def parsed(*args):
        parsed_on.append(threading.current_thread())
        return real_parse(*args)

    monkeypatch.setattr(retarget_api, "imported_clip", recorded)
    monkeypatch.setattr(retarget_api, "read_bvh_source", parsed)
    job = RetargetJob(str(path), build_demo_character())
    with pytest.raises(RetargetError, match="hips|map"):  # not a humanoid: read, then refused
        job.run()
    assert ran_on == [threading.main_thread()]
    # Parsed once, off the main thread; handed back, it is not parsed there again.
    assert len(parsed_on) == 1 and parsed_on[0] is not threading.main_thread()
