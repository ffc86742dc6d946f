"""BVH reader/writer: round trips, validation messages, real CMU files, Blender's importer."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from painted_skin.addon.core.bvh import (
    AXIS_CONVERSION,
    BvhError,
    bvh_to_skeleton_motion,
    channel_matrices,
    format_bvh,
    parse_bvh,
    parse_bvh_header_fps,
    validate_bvh,
    write_bvh,
    write_bvh_clip,
)
from painted_skin.addon.core.rig.transforms import axis_angle_to_matrix

SMALL = """HIERARCHY
ROOT Hips
{
\tOFFSET 0 90 0
\tCHANNELS 6 Xposition Yposition Zposition Zrotation Xrotation Yrotation
\tJOINT Spine
\t{
\t\tOFFSET 0 10 0
\t\tCHANNELS 3 Zrotation Yrotation Xrotation
\t\tEnd Site
\t\t{
\t\t\tOFFSET 0 20 0
\t\t}
\t}
\tJOINT Left Leg
\t{
\t\tOFFSET 10 -5 0
\t\tCHANNELS 3 Yrotation Xrotation Zrotation
\t\tEnd Site
\t\t{
\t\t\tOFFSET 0 -40 0
\t\t}
\t}
}
MOTION
Frames: 2
Frame Time: .0333333
1 92 3 10 20 30 5 6 7 8 9 10
2 93 4 11 21 31 6 7 8 9 10 11
"""

CMU_COUNTS = {  # MANIFEST.md: file -> (frames, frame time)
    "cmu_motionbuilder_friendly/02_01.bvh": (343, 0.008333),
    "cmu_motionbuilder_friendly/05_06.bvh": (885, 0.008333),
    "cmu_motionbuilder_friendly/01_01.bvh": (2752, 0.0083333),
    "cmu_3dsmax_friendly/131_01.bvh": (994, 0.0083333),
    "cmu_3dsmax_friendly/131_02.bvh": (1247, 0.0083333),
    "cmu_3dsmax_friendly/131_03.bvh": (1102, 0.0083333),
}


def _rot(axis: int, deg: float) -> np.ndarray:
    e = np.zeros(3)
    e[axis] = 1.0
    return axis_angle_to_matrix(e, np.radians(deg))


def test_parse_small_clip() -> None:
    clip = parse_bvh(SMALL)
    assert clip.names == ["Hips", "Spine", "Left_Leg"]  # spaces joined like Blender
    assert clip.parents.tolist() == [-1, 0, 0]
    assert clip.frames.shape == (2, 12)
    assert clip.frame_time == pytest.approx(0.0333333)
    assert clip.rotation_order(0) == "ZXY" and clip.rotation_order(2) == "YXZ"
    np.testing.assert_allclose(clip.end_sites[1], [0, 20, 0])
    np.testing.assert_allclose(clip.offsets[2], [10, -5, 0])


def test_listed_order_is_intrinsic() -> None:
    """'Zrotation Xrotation Yrotation' = Rz @ Rx @ Ry on column vectors."""
    m = channel_matrices(np.array([10.0, 20.0, 30.0]), "ZXY")
    np.testing.assert_allclose(m, _rot(2, 10) @ _rot(0, 20) @ _rot(1, 30), atol=1e-12)
    clip = parse_bvh(SMALL)
    r = clip.local_rotations()
    np.testing.assert_allclose(r[0, 0], _rot(2, 10) @ _rot(0, 20) @ _rot(1, 30), atol=1e-12)
    np.testing.assert_allclose(r[1, 1], _rot(2, 6) @ _rot(1, 7) @ _rot(0, 8), atol=1e-12)


def test_root_position_is_the_channels_and_children_follow() -> None:
    clip = parse_bvh(SMALL)
    pos = clip.world_positions()
    np.testing.assert_allclose(pos[:, 0], [[1, 92, 3], [2, 93, 4]])  # OFFSET not added
    rot = clip.local_rotations()
    np.testing.assert_allclose(pos[0, 1], pos[0, 0] + rot[0, 0] @ [0, 10, 0], atol=1e-9)
    skel, motion = bvh_to_skeleton_motion(clip, scale=0.01)
    np.testing.assert_allclose(motion.pose[..., :3, 3], pos @ AXIS_CONVERSION.T * 0.01,
                               atol=1e-12)
    np.testing.assert_allclose(skel.heads[0], [0, 0, 0.9])  # rest head: the OFFSET, Z-up
    assert motion.fps == pytest.approx(30.0, rel=1e-5) and motion.frame_start == 1


def test_robust_to_crlf_tabs_and_odd_spacing() -> None:
    text = SMALL.replace("\n", "\r\n").replace("Frame Time: .0333333", "Frame Time:\t.0333333")
    clip = parse_bvh(text.encode())
    np.testing.assert_array_equal(clip.frames, parse_bvh(SMALL).frames)
    dup = SMALL.replace("JOINT Left Leg", "JOINT Spine")
    assert parse_bvh(dup).names == ["Hips", "Spine", "Spine.001"]
    named = SMALL.replace("End Site", "End Site Tip_end", 1)  # some exporters name it
    np.testing.assert_array_equal(parse_bvh(named).end_sites[1], parse_bvh(SMALL).end_sites[1])


def test_write_parse_round_trip(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    frames, n = 7, 4
    q = rng.normal(size=(frames, n, 4))
    from painted_skin.addon.core.rig.transforms import quat_to_matrix

    rots = quat_to_matrix(q)
    offsets = np.array([[0, 95, 0], [0, 10, 0], [8, -4, 0], [0, -40, 0.0]])
    root = rng.normal(size=(frames, 3)) * 20
    path = write_bvh(tmp_path / "rt.bvh", ["A", "B", "C", "D"], [-1, 0, 0, 2], offsets,
                     ["ZYX", "ZXY", "YXZ", "XYZ"], root, rots, 1 / 24, {"B": [0, 5, 0]},
                     precision=9)
    clip = parse_bvh(path)
    assert clip.names == ["A", "B", "C", "D"] and clip.num_frames == frames
    assert clip.channels[0][:3] == ("Xposition", "Yposition", "Zposition")
    assert clip.channels[2] == ("Yrotation", "Xrotation", "Zrotation")
    np.testing.assert_allclose(clip.local_rotations(), rots, atol=1e-7)
    np.testing.assert_allclose(clip.frames[:, :3], root, atol=1e-8)
    np.testing.assert_allclose(clip.end_sites[1], [0, 5, 0])
    assert clip.fps == pytest.approx(24.0)
    # Written clip -> text -> clip is the identity on the numbers.
    again = parse_bvh(format_bvh(clip, precision=9))
    np.testing.assert_allclose(again.frames, clip.frames, atol=1e-9)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rt.bvh"]  # no temp file left


def test_write_is_atomic_and_replaces(tmp_path: Path) -> None:
    clip = parse_bvh(SMALL)
    target = tmp_path / "sub" / "clip.bvh"
    write_bvh_clip(target, clip)
    target.write_text("stale")
    write_bvh_clip(target, clip)
    np.testing.assert_allclose(parse_bvh(target).frames, clip.frames, atol=1e-6)
    assert [p.name for p in target.parent.iterdir()] == ["clip.bvh"]


def _with_motion(lines: str) -> str:
    head = SMALL.split("MOTION")[0]
    return head + "MOTION\n" + lines


BAD_CASES = {
    "empty": (b"", "empty"),
    "blank": (b"  \n\n", "empty"),
    "binary": (b"Kaydara FBX Binary  \x00\x1a\x00", "binary"),
    "latin1": ("HIERARCHY\nROOT H\xe9\n".encode("latin-1"), "not UTF-8"),
    "no_hierarchy": ("ROOT Hips\n{\n}\n", "missing HIERARCHY"),
    "no_motion": (SMALL.split("MOTION")[0], "missing MOTION"),
    "unclosed": (SMALL.replace("\t\t}\n\t}\n\tJOINT Left", "\t\t}\n\tJOINT Left"),
                 "unbalanced braces"),
    "extra_close": (SMALL.replace("}\nMOTION", "}\n}\nMOTION"), "unbalanced braces"),
    "unknown_channel": (SMALL.replace("Yrotation Xrotation Zrotation", "Yrotation Xrotation "
                                      "Wrotation"), "unknown channel 'Wrotation'"),
    "channel_count": (SMALL.replace("CHANNELS 3 Zrotation Yrotation Xrotation",
                                    "CHANNELS 4 Zrotation Yrotation Xrotation"),
                      "declares 4 channels but lists 3"),
    "short_line": (_with_motion("Frames: 2\nFrame Time: 0.03\n" + "1 " * 12 + "\n"
                                + "1 " * 11 + "\n"), "has 11 values, expected 12"),
    "nan": (_with_motion("Frames: 1\nFrame Time: 0.03\n1 2 3 nan 0 0 0 0 0 0 0 0\n"),
            "non-finite"),
    "inf": (_with_motion("Frames: 1\nFrame Time: 0.03\n1 2 3 0 0 0 0 0 0 0 0 inf\n"),
            "non-finite"),
    "word": (_with_motion("Frames: 1\nFrame Time: 0.03\n1 2 3 0 0 x 0 0 0 0 0 0\n"),
             "'x' is not a number"),
    "zero_frames": (_with_motion("Frames: 0\nFrame Time: 0.03\n"), "zero frames"),
    "absurd_frames": (_with_motion("Frames: 5000000\nFrame Time: 0.03\n"), "over the limit"),
    "header_mismatch": (_with_motion("Frames: 3\nFrame Time: 0.03\n" + "0 " * 12 + "\n"),
                        "'Frames: 3' but the file has 1 motion lines"),
    "no_frames_line": (_with_motion("Frame Time: 0.03\n"), "expected 'Frames: N'"),
    "bad_frame_time": (_with_motion("Frames: 1\nFrame Time: -1\n" + "0 " * 12 + "\n"),
                       "Frame Time must be a positive"),
    "no_offset": (SMALL.replace("\t\tOFFSET 0 10 0\n", ""), "has no OFFSET"),
    "bad_offset": (SMALL.replace("OFFSET 0 10 0", "OFFSET 0 ten 0"), "three finite numbers"),
    "partial_rotation": (SMALL.replace("CHANNELS 3 Zrotation Yrotation Xrotation",
                                       "CHANNELS 2 Zrotation Yrotation").replace(
        "5 6 7 8 9 10\n", "5 6 8 9 10\n").replace("6 7 8 9 10 11\n", "6 7 9 10 11\n"),
        "needs all three"),
}


@pytest.mark.parametrize("case", sorted(BAD_CASES))
def test_malformed_files_name_the_problem_and_fix(case: str, tmp_path: Path) -> None:
    data, expected = BAD_CASES[case]
    path = tmp_path / f"{case}.bvh"
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    with pytest.raises(BvhError) as err:
        validate_bvh(path)
    msg = str(err.value)
    assert expected in msg
    assert "Fix:" in msg and str(path) in msg
    assert isinstance(err.value, ValueError)


def test_error_messages_carry_line_numbers() -> None:
    text = _with_motion("Frames: 2\nFrame Time: 0.03\n" + "1 " * 12 + "\n" + "1 " * 13 + "\n")
    with pytest.raises(BvhError, match=r"<text>:29: motion frame 2 has 13 values"):
        parse_bvh(text)
    with pytest.raises(BvhError, match=r":5: unknown channel"):
        parse_bvh(SMALL.replace("Xposition Yposition", "Xpos Yposition"))


def test_parse_accepts_partial_rotation_channels() -> None:
    """parse_bvh reads them (missing axes are 0); only validate_bvh refuses them."""
    text = BAD_CASES["partial_rotation"][0]
    clip = parse_bvh(text)
    assert clip.rotation_order(1) == "ZY"
    np.testing.assert_allclose(clip.local_rotations()[0, 1], _rot(2, 5) @ _rot(1, 6),
                               atol=1e-12)


def test_header_mismatch_allowed_when_not_strict() -> None:
    text = _with_motion("Frames: 3\nFrame Time: 0.03\n" + "0 " * 12 + "\n")
    clip = parse_bvh(text, strict=False)
    assert clip.num_frames == 1 and "motion lines" in clip.warnings[0]


def test_missing_file_is_a_bvh_error(tmp_path: Path) -> None:
    with pytest.raises(BvhError, match="no such file"):
        parse_bvh(tmp_path / "nope.bvh")


# ----------------------------------------------------------------------------- real data


def test_real_cmu_files_parse(shared_data: Path) -> None:
    for rel, (frames, ft) in CMU_COUNTS.items():
        clip = parse_bvh(shared_data / "bvh" / rel)
        assert (clip.num_joints, clip.num_frames, clip.num_channels) == (31, frames, 96), rel
        assert len(clip.end_sites) == 7 and clip.frame_time == pytest.approx(ft)
        assert clip.names[0] == "Hips" and clip.parents[0] == -1
        assert parse_bvh_header_fps(shared_data / "bvh" / rel) == pytest.approx(1 / ft)
    mixed = parse_bvh(shared_data / "bvh/cmu_3dsmax_friendly/131_01.bvh")
    orders = {mixed.names[j]: mixed.rotation_order(j) for j in range(mixed.num_joints)}
    assert orders["LeftElbow"] == "ZXY" and orders["LeftKnee"] == "ZYX"
    assert orders["Hips"] == "ZYX" and mixed.names[2] == "LeftHip"


def test_real_file_round_trips(shared_data: Path, tmp_path: Path) -> None:
    """(Its parse speed is a benchmark matter, not a unit test's.)"""
    path = shared_data / "bvh/cmu_motionbuilder_friendly/01_01.bvh"
    clip = parse_bvh(path)
    again = parse_bvh(write_bvh_clip(tmp_path / "copy.bvh", clip))
    assert again.names == clip.names and again.channels == clip.channels
    np.testing.assert_allclose(again.frames, clip.frames, atol=1e-6)
    np.testing.assert_allclose(again.offsets, clip.offsets, atol=1e-6)
    skel, motion = bvh_to_skeleton_motion(clip)
    np.testing.assert_allclose(motion.pose[..., :3, 3],
                               clip.world_positions() @ AXIS_CONVERSION.T * 0.01, atol=1e-9)
    assert motion.frames == 2752 and len(skel) == 31


def _truncate(src: Path, frames: int, dst: Path) -> Path:
    """The first ``frames`` motion lines of a real file, bytes otherwise unchanged."""
    lines = src.read_bytes().decode().splitlines(keepends=True)
    m = next(i for i, ln in enumerate(lines) if ln.strip() == "MOTION")
    dst.write_text("".join(lines[: m + 1] + [f"Frames: {frames}\n", lines[m + 2]]
                           + lines[m + 3: m + 3 + frames]), newline="")
    return dst


def _blender_heads(bpy, path: Path, frames: list[int]) -> dict[int, dict[str, np.ndarray]]:
    bpy.ops.import_anim.bvh(filepath=str(path), global_scale=0.01, rotate_mode="NATIVE",
                            axis_forward="-Z", axis_up="Y")
    arm = bpy.context.view_layer.objects.active
    out = {}
    for f in frames:
        bpy.context.scene.frame_set(1 + f)
        mw = np.array(arm.matrix_world)
        out[f] = {pb.name: mw[:3, :3] @ np.array(pb.head) + mw[:3, 3] for pb in arm.pose.bones}
    return out


def _assert_matches_blender(bpy, path: Path, frames: list[int]) -> None:
    clip = parse_bvh(path)
    _, motion = bvh_to_skeleton_motion(clip, scale=0.01)
    heads = _blender_heads(bpy, path, frames)
    for f in frames:
        for j, name in enumerate(clip.names):
            np.testing.assert_allclose(motion.pose[f, j, :3, 3], heads[f][name], atol=2e-6,
                                       err_msg=f"{path.name} frame {f} bone {name}")


def test_fk_matches_blender_importer_generated(bpy_clean, tmp_path: Path) -> None:
    """A-pose clip: Y X Z channel order, root OFFSET at hip height, 52 bones."""
    from painted_skin.addon.motion import write_clip

    path = write_clip(tmp_path / "jump.bvh", "jump", frames=40, fps=30, convention="apose")
    _assert_matches_blender(bpy_clean, path, [0, 17, 39])


def test_fk_matches_blender_importer_cmu(bpy_clean, shared_data: Path, tmp_path: Path) -> None:
    """Mixed rotation orders (131_01) and the MotionBuilder naming (01_01)."""
    for rel in ("cmu_3dsmax_friendly/131_01.bvh", "cmu_motionbuilder_friendly/01_01.bvh"):
        path = _truncate(shared_data / "bvh" / rel, 25, tmp_path / Path(rel).name)
        bpy_clean.ops.wm.read_factory_settings(use_empty=True)
        _assert_matches_blender(bpy_clean, path, [0, 12, 24])


def _chain_bvh(joints: int) -> str:
    """A chain of ``joints`` joints, one frame of zeros."""
    lines = ["HIERARCHY", "ROOT j0", "{", "OFFSET 0 0 0",
             "CHANNELS 6 Xposition Yposition Zposition Zrotation Xrotation Yrotation"]
    for j in range(1, joints):
        lines += [f"JOINT j{j}", "{", "OFFSET 0 1 0", "CHANNELS 3 Zrotation Xrotation Yrotation"]
    lines += ["End Site", "{", "OFFSET 0 1 0", "}"] + ["}"] * joints
    lines += ["MOTION", "Frames: 1", "Frame Time: 0.04", " ".join(["0"] * (3 + 3 * joints))]
    return "\n".join(lines) + "\n"


def test_joint_count_is_capped_before_blenders_importer(tmp_path: Path, bpy_clean) -> None:
    from painted_skin.addon.blender.retarget.importers import ImportFailed, imported_clip
    from painted_skin.addon.core.bvh import MAX_JOINTS

    assert parse_bvh(_chain_bvh(MAX_JOINTS)).num_joints == MAX_JOINTS
    with pytest.raises(BvhError, match="more than 1,000 joints"):
        parse_bvh(_chain_bvh(MAX_JOINTS + 1))
    big = tmp_path / "big.bvh"
    big.write_text(_chain_bvh(20_000))  # ~1 MB; Blender's importer: minutes
    before = len(bpy_clean.data.objects)
    with pytest.raises(ImportFailed, match="more than 1,000 joints"):
        with imported_clip(big):
            pass
    assert len(bpy_clean.data.objects) == before  # refused before Blender's importer ran


@pytest.mark.parametrize("old,new,ok", [
    ("OFFSET 0 10 0", "OFFSET 0 999999 0", True),
    ("OFFSET 0 10 0", "OFFSET 0 1e6 0", False),
    ("OFFSET 0 20 0", "OFFSET 0 -1e300 0", False),  # an End Site's
    ("Frame Time: .0333333", "Frame Time: 0.001", True),  # 1000 fps
    ("Frame Time: .0333333", "Frame Time: 1", True),  # 1 fps
    ("Frame Time: .0333333", "Frame Time: 1e-300", False),
    ("Frame Time: .0333333", "Frame Time: 1e300", False),
    ("1 92 3", "1 1e7 3", False),  # a motion value
])
def test_values_out_of_a_bodys_range_are_refused(old: str, new: str, ok: bool,
                                                 tmp_path: Path) -> None:
    text = SMALL.replace(old, new, 1)
    assert text != SMALL
    if ok:
        assert parse_bvh(text).num_frames == 2
        path = tmp_path / "c.bvh"
        path.write_text(text)
        assert 1.0 <= parse_bvh_header_fps(path) <= 1000.0
        return
    with pytest.raises(BvhError, match="Fix:") as e:
        parse_bvh(text)
    assert "\n" not in str(e.value)


def test_a_byte_order_mark_is_read_as_text(tmp_path: Path) -> None:
    path = tmp_path / "bom.bvh"
    path.write_bytes(b"\xef\xbb\xbf" + SMALL.encode())
    assert parse_bvh(path).names == parse_bvh(SMALL).names
    assert parse_bvh("\ufeff" + SMALL).num_frames == 2
    with pytest.raises(BvhError, match="cannot read the file"):
        parse_bvh("a" * 300)  # taken as a path: too long a name is still a BvhError


def test_absurdly_wide_motion_lines_are_refused_before_they_cost_memory(tmp_path) -> None:
    """30 motion lines of 100,000 values each (a corrupt export, 3 MB): one line naming the
    first, and memory near the file's size, not 30x it (each line was split first)."""
    import tracemalloc

    head = SMALL[:SMALL.index("MOTION")]
    wide = " ".join(["1.5"] * 100_000)
    path = tmp_path / "wide.bvh"
    path.write_text(head + "MOTION\nFrames: 30\nFrame Time: 0.0333333\n"
                    + "\n".join([wide] * 30) + "\n")
    size = path.stat().st_size
    tracemalloc.start()
    try:
        with pytest.raises(BvhError, match=r"wide.bvh:\d+: motion frame 1 is 399,999 "
                                           r"characters long") as e:
            parse_bvh(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "\n" not in str(e.value)
    assert peak < 6 * size, f"peak {peak / 1e6:.0f} MB for a {size / 1e6:.0f} MB file"


def test_a_file_over_the_size_cap_is_refused_before_it_is_read(tmp_path, monkeypatch) -> None:
    from painted_skin.addon.core.bvh import read as bvh_read

    path = tmp_path / "big.bvh"
    path.write_text(SMALL)
    monkeypatch.setattr(bvh_read, "MAX_FILE_BYTES", 100)
    monkeypatch.setattr(Path, "read_bytes", lambda self: pytest.fail("read before the cap"))
    with pytest.raises(BvhError, match="over the 100 a clip may be. Fix: split the take"):
        parse_bvh(path)
