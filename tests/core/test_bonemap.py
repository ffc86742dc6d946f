"""Bone maps: presets, auto-detection (presets, names, topology), save/load. No bpy."""

from __future__ import annotations

import json
import random
import re
import struct
from pathlib import Path

import numpy as np
import pytest
from painted_skin.addon.core.bonemap import (
    BoneMap,
    BoneMapError,
    auto_map,
    normalize_name,
    resolve_map,
)
from painted_skin.addon.core.bonemap.presets import get_preset, list_presets, load_preset
from painted_skin.addon.core.rig.humanoid import CORE, JOINT_BY_NAME, NAMES
from painted_skin.addon.core.rig.skeleton import Skeleton
from painted_skin.addon.core.rig.transforms import quat_to_matrix

# ---------------------------------------------------------------- synthetic humanoids

# T-pose, metres, facing -Y, character's left +X (addon/core/rig/humanoid.py conventions).
_BASE = {
    "hips": (0, 0, 1.0), "spine": (0, 0, 1.1), "chest": (0, 0, 1.24),
    "upperChest": (0, 0, 1.36), "neck": (0, 0, 1.5), "head": (0, 0, 1.6),
    "Shoulder": (0.03, 0, 1.45), "UpperArm": (0.17, 0, 1.45), "LowerArm": (0.45, 0, 1.45),
    "Hand": (0.72, 0, 1.45), "UpperLeg": (0.09, 0, 0.95), "LowerLeg": (0.09, 0, 0.5),
    "Foot": (0.09, 0, 0.08), "Toes": (0.09, -0.14, 0.02),
}
_FINGER_Y = {"Thumb": -0.04, "Index": -0.025, "Middle": -0.005, "Ring": 0.015, "Little": 0.035}


def canonical_position(canon: str) -> np.ndarray:
    """Rest head of a canonical joint in the reference T-pose."""
    if canon in _BASE:
        return np.array(_BASE[canon], float)
    joint = JOINT_BY_NAME[canon]
    sign = 1.0 if joint.side == "left" else -1.0
    part = canon[len(joint.side):]
    if part.endswith("Twist"):
        a = canonical_position(f"{joint.side}{part[:-5]}")
        b = canonical_position(JOINT_BY_NAME[joint.parent].name)  # noqa: F841 (same bone)
        child = {"UpperArm": "LowerArm", "LowerArm": "Hand", "UpperLeg": "LowerLeg",
                 "LowerLeg": "Foot"}[part[:-5]]
        return (a + canonical_position(f"{joint.side}{child}")) / 2
    if part in _BASE:
        x, y, z = _BASE[part]
        return np.array((sign * x, y, z), float)
    finger = next(f for f in _FINGER_Y if part.startswith(f))
    seg = ["Metacarpal", "Proximal", "Intermediate", "Distal"].index(part[len(finger):])
    x = 0.74 + 0.035 * seg if finger == "Thumb" else 0.76 + 0.035 * seg
    z = 1.42 if finger == "Thumb" else 1.45
    return np.array((sign * x, _FINGER_Y[finger] - (0.01 * seg if finger == "Thumb" else 0), z))


def build_skeleton(bones: list[tuple[str, str | None, np.ndarray]],
                   world: np.ndarray | None = None) -> Skeleton:
    """Skeleton from (name, parent name, head); tails point at the (first) child."""
    by_name = {n: (p, np.asarray(h, float)) for n, p, h in bones}
    kids: dict[str | None, list[str]] = {}
    for n, p, _ in bones:
        kids.setdefault(p, []).append(n)
    order: list[str] = []
    stack = list(reversed(kids.get(None, [])))
    while stack:
        n = stack.pop()
        order.append(n)
        stack.extend(reversed(kids.get(n, [])))
    assert len(order) == len(bones), "bones unreachable from a root"
    idx = {n: i for i, n in enumerate(order)}
    rest = np.tile(np.eye(4), (len(order), 1, 1))
    tails = np.zeros((len(order), 3))
    for i, n in enumerate(order):
        p, h = by_name[n]
        rest[i, :3, 3] = h
        ch = kids.get(n, [])
        if ch:
            tails[i] = by_name[ch[0]][1]
        elif p is not None:
            d = h - by_name[p][1]
            tails[i] = h + 0.3 * d if np.linalg.norm(d) > 1e-9 else h + (0, 0, 0.05)
        else:
            tails[i] = h + (0, 0, 0.1)
        if np.linalg.norm(tails[i] - h) < 1e-6:
            tails[i] = h + (0, 0, 0.02)
    parents = [idx[by_name[n][0]] if by_name[n][0] is not None else -1 for n in order]
    return Skeleton(order, np.array(parents), rest, tails,
                    np.eye(4) if world is None else world)


def humanoid_bones(mapping: dict[str, str],
                   extras: tuple[tuple[str, str | None, tuple, tuple[str, ...]], ...] = ()
                   ) -> list[tuple[str, str | None, np.ndarray]]:
    """Bones of a humanoid whose canonical joints carry ``mapping``'s names.

    ``extras``: (name, parent bone, head, bones it adopts) for helpers between joints.
    """
    present = set(mapping)
    parent_of: dict[str, str | None] = {}
    head: dict[str, np.ndarray] = {}
    for canon in NAMES:
        if canon not in present:
            continue
        p = JOINT_BY_NAME[canon].parent
        while p is not None and p not in present:
            p = JOINT_BY_NAME[p].parent
        parent_of[mapping[canon]] = mapping[p] if p else None
        head[mapping[canon]] = canonical_position(canon)
    for name, parent, pos, adopt in extras:
        parent_of[name] = parent
        head[name] = np.asarray(pos, float)
        for a in adopt:
            parent_of[a] = name
    return [(n, parent_of[n], head[n]) for n in parent_of]


def preset_mapping(name: str) -> dict[str, str]:
    return {c: alts[0] for c, alts in get_preset(name).bones.items()}


# helper bones each convention really has; they must stay unmapped
EXTRAS: dict[str, tuple] = {
    "cmu_motionbuilder": (
        ("LHipJoint", "Hips", (0.05, 0, 0.98), ("LeftUpLeg",)),
        ("RHipJoint", "Hips", (-0.05, 0, 0.98), ("RightUpLeg",)),
        ("Neck1", "Neck", (0, 0, 1.55), ("Head",)),
        ("LeftFingerBase", "LeftHand", (0.74, 0, 1.45), ("LeftHandIndex1",)),
    ),
    "cmu_3dsmax": (
        ("LHipJoint", "Hips", (0.05, 0, 0.98), ("LeftHip",)),
        ("Neck", "lowerneck", (0, 0, 1.55), ("Head",)),
        ("lhand", "LeftWrist", (0.74, 0, 1.45), ("LFingers",)),
    ),
    "mixamo": (
        ("mixamorig:HeadTop_End", "mixamorig:Head", (0, 0, 1.8), ()),
        ("mixamorig:LeftToe_End", "mixamorig:LeftToeBase", (0.09, -0.2, 0.02), ()),
        ("mixamorig:LeftHandIndex4", "mixamorig:LeftHandIndex3", (0.9, -0.025, 1.45), ()),
    ),
    "ue_mannequin": (
        ("root", None, (0, 0, 0), ("pelvis",)),
        ("ik_foot_root", "root", (0, 0, 0), ()),
        ("ik_foot_l", "ik_foot_root", (0.09, 0, 0.08), ()),
        ("ik_hand_root", "root", (0, 0, 0), ()),
        ("ik_hand_gun", "ik_hand_root", (-0.72, 0, 1.45), ()),
    ),
    "ue5_mannequin": (
        ("root", None, (0, 0, 0), ("pelvis",)),
        ("spine_02", "spine_01", (0, 0, 1.17), ("spine_03",)),
        ("spine_04", "spine_03", (0, 0, 1.3), ("spine_05",)),
        ("neck_02", "neck_01", (0, 0, 1.55), ("head",)),
        ("index_metacarpal_l", "hand_l", (0.74, -0.02, 1.45), ("index_01_l",)),
    ),
    "ue_style": (
        ("root", None, (0, 0, 0), ("pelvis",)),
        ("head_leaf", "head", (0, 0, 1.8), ()),
        ("index_04_leaf_l", "index_03_l", (0.9, -0.025, 1.45), ()),
        ("ball_leaf_r", "ball_r", (-0.09, -0.2, 0.02), ()),
    ),
    "rokoko": (
        ("Root", None, (0, 0, 0), ("Hips",)),
        ("Spine2", "Spine1", (0, 0, 1.17), ("Spine3",)),
        ("LeftFinger2Metacarpal", "LeftHand", (0.74, -0.025, 1.45), ("LeftFinger2Proximal",)),
    ),
    "xsens": (("L3", "L5", (0, 0, 1.17), ("T12",)),),
    "daz_genesis": (
        ("pelvis", "hip", (0, 0, 0.98), ("lThighBend", "rThighBend")),
        ("abdomenUpper", "abdomenLower", (0, 0, 1.17), ("chestLower",)),
        ("neckUpper", "neckLower", (0, 0, 1.55), ("head",)),
    ),
    "daz_poser": (("lButtock", "hip", (0.05, 0, 0.98), ("lThigh",)),),
    "blender_metarig": (
        ("spine.005", "spine.004", (0, 0, 1.55), ("spine.006",)),
        ("palm.01.L", "hand.L", (0.74, -0.025, 1.45), ("f_index.01.L",)),
        ("heel.02.L", "foot.L", (0.09, 0.05, 0.0), ()),
    ),
    "rigify_def": (("DEF-spine.005", "DEF-spine.004", (0, 0, 1.55), ("DEF-spine.006",)),),
    "rigify_org": (("ORG-spine.005", "ORG-spine.004", (0, 0, 1.55), ("ORG-spine.006",)),),
    "smpl": (("left_hand", "left_wrist", (0.8, 0, 1.45), ()),),
    "smpl_addon": (("L_Hand", "L_Wrist", (0.8, 0, 1.45), ()),),
    "bandai": (("joint_Root", None, (0, 0, 0), ("Hips",)),),
    "biped": (("Bip01", None, (0, 0, 1.0), ("Bip01 Pelvis",)),),
    "kaykit": (
        ("root", None, (0, 0, 0), ("hips",)),
        ("hand.l", "wrist.l", (0.8, 0, 1.45), ()),
        ("hand.r", "wrist.r", (-0.8, 0, 1.45), ()),
    ),
}
PRESETS = list_presets()


def preset_skeleton(name: str, rename=lambda n: n) -> tuple[Skeleton, dict[str, str]]:
    mapping = preset_mapping(name)
    bones = humanoid_bones(mapping, EXTRAS.get(name, ()))
    bones = [(rename(n), None if p is None else rename(p), h) for n, p, h in bones]
    return build_skeleton(bones), {c: rename(b) for c, b in mapping.items()}


# ---------------------------------------------------------------- presets


def test_preset_files_are_valid():
    assert len(PRESETS) >= 18
    for name in ("cmu_motionbuilder", "cmu_3dsmax", "mixamo", "rokoko", "ue_mannequin",
                 "ue_style", "rigify_def", "rigify_org", "blender_metarig", "smpl", "smplx",
                 "vrm", "daz_poser", "xsens", "bandai", "kaykit"):
        assert name in PRESETS
    for name in PRESETS:
        preset = get_preset(name)
        assert preset.description
        assert all(c in JOINT_BY_NAME for c in preset.bones)
        assert all(c in preset.bones for c in CORE), f"{name} lacks core joints"
        firsts = [a[0] for a in preset.bones.values()]
        assert len(set(firsts)) == len(firsts), f"{name} maps one bone twice"
        bm = load_preset(name)
        assert bm.preset == name and bm.source["hips"] == f"preset:{name}"


def test_preset_cache_sees_new_changed_and_removed_files(tmp_path, monkeypatch):
    """Parsed presets are kept between calls, but a file added to, changed in or
    removed from the folder is seen on the next call (its mtime/size changed)."""
    import os
    import shutil

    from painted_skin.addon.core.bonemap import presets

    folder = tmp_path / "presets"
    shutil.copytree(presets.PRESET_DIR, folder)
    monkeypatch.setattr(presets, "PRESET_DIR", folder)
    assert "mixamo" in list_presets() and "mine" not in list_presets()
    before = get_preset("mixamo")
    assert get_preset("mixamo") is before  # not parsed again

    text = (folder / "mixamo.toml").read_text(encoding="utf-8")
    (folder / "mine.toml").write_text(
        text.replace('name = "mixamo"', 'name = "mine"'), encoding="utf-8")
    assert "mine" in list_presets()
    assert get_preset("mine").bones == before.bones

    changed = folder / "mixamo.toml"
    changed.write_text(text.replace('hips = "mixamorig:Hips"', 'hips = "mixamorig:Pelvis"'),
                       encoding="utf-8")
    st = changed.stat()
    os.utime(changed, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # coarse clocks
    assert get_preset("mixamo").bones["hips"] == ("mixamorig:Pelvis",)
    assert get_preset("mixamo") is not before

    (folder / "mine.toml").unlink()
    assert "mine" not in list_presets()
    with pytest.raises(BoneMapError, match="unknown preset 'mine'"):
        get_preset("mine")
    (folder / "broken.toml").write_text("[meta\nname = ", encoding="utf-8")
    with pytest.raises(BoneMapError, match="broken.toml: not valid TOML"):
        list_presets()


def test_unknown_preset_lists_the_valid_ones():
    with pytest.raises(BoneMapError, match="available: .*mixamo"):
        get_preset("mixamoo")


@pytest.mark.parametrize("name", PRESETS)
def test_auto_map_identifies_each_preset(name):
    skel, mapping = preset_skeleton(name)
    bm = auto_map(skel)
    assert bm.preset == name
    assert bm.bones == mapping
    assert not bm.missing_core
    for extra, *_ in EXTRAS.get(name, ()):
        assert extra in bm.unmapped
    assert set(bm.unmapped) == set(skel.names) - set(mapping.values())


@pytest.mark.parametrize("name", PRESETS)
@pytest.mark.parametrize("ns", ["Armature|", "rig_01:"])
def test_auto_map_sees_through_namespaces(name, ns):
    def rename(n: str) -> str:
        return ns + n.removeprefix("mixamorig:")

    skel, mapping = preset_skeleton(name, rename)
    bm = auto_map(skel)
    assert bm.preset == name
    assert bm.bones == mapping


def test_mixamo_numbered_namespace_and_bare_names():
    for rename in (lambda n: n.replace("mixamorig:", "mixamorig1:"),
                   lambda n: n.replace("mixamorig:", "")):
        skel, mapping = preset_skeleton("mixamo", rename)
        bm = auto_map(skel)
        assert bm.preset == "mixamo" and bm.bones == mapping


# presets the name stage alone (no preset table) must also map correctly
NAME_ONLY = ["cmu_motionbuilder", "cmu_3dsmax", "mixamo", "rokoko", "ue_mannequin",
             "ue5_mannequin", "ue_style", "smpl", "smplx", "smpl_addon", "vrm", "daz_poser",
             "daz_genesis", "bandai", "kaykit", "rigify_org"]


@pytest.mark.parametrize("name", NAME_ONLY)
def test_name_stage_without_presets(name):
    skel, mapping = preset_skeleton(name)
    bm = auto_map(skel, presets=[])
    assert bm.preset is None
    wrong = {c: (bm.bones.get(c), b) for c, b in mapping.items() if bm.bones.get(c) != b}
    assert not wrong
    assert not bm.missing_core


@pytest.mark.parametrize("name", PRESETS)
def test_name_and_topology_stages_find_the_core_of_every_preset(name):
    skel, mapping = preset_skeleton(name)
    bm = auto_map(skel, presets=[])
    assert {c: bm.bones.get(c) for c in CORE} == {c: mapping[c] for c in CORE}


def test_shoulder_is_clavicle_or_upper_arm_by_hierarchy():
    # 3dsMax: LeftShoulder under LeftCollar is the upper arm; Mixamo: it is the clavicle
    bm = auto_map(preset_skeleton("cmu_3dsmax")[0], presets=[])
    assert bm["leftShoulder"] == "LeftCollar" and bm["leftUpperArm"] == "LeftShoulder"
    bm = auto_map(preset_skeleton("cmu_motionbuilder")[0], presets=[])
    assert bm["leftShoulder"] == "LeftShoulder" and bm["leftUpperArm"] == "LeftArm"


def test_suffix_side_without_separator_and_ik_helpers():
    mapping = {"hips": "Hips", "spine": "Abdomen", "chest": "Torso", "neck": "Neck",
               "head": "Head"}
    for s, c in (("left", "L"), ("right", "R")):
        mapping.update({f"{s}Shoulder": f"Shoulder{c}", f"{s}UpperArm": f"UpperArm{c}",
                        f"{s}LowerArm": f"LowerArm{c}", f"{s}Hand": f"Hand{c}",
                        f"{s}UpperLeg": f"UpperLeg{c}", f"{s}LowerLeg": f"LowerLeg{c}",
                        f"{s}Foot": f"Foot{c}"})
    extras = (("Root", None, (0, 0, 0), ("Hips",)),
              ("PoleTargetL", "Root", (0.1, -0.5, 0.5), ()),
              ("IK_FootR", "Root", (-0.09, 0, 0.08), ()))
    skel = build_skeleton(humanoid_bones(mapping, extras))
    bm = auto_map(skel)
    assert bm.preset is None
    assert bm.bones == mapping
    assert {"Root", "PoleTargetL", "IK_FootR"} <= set(bm.unmapped)


# ---------------------------------------------------------------- topology fallback


def _scrambled(name: str, seed: int, world: np.ndarray | None = None):
    skel, mapping = preset_skeleton(name)
    rng = random.Random(seed)
    ids = rng.sample(range(100, 999), len(skel))
    new = {n: f"bone_{i:03d}" for n, i in zip(skel.names, ids, strict=True)}
    bones = [(new[n], None if p < 0 else new[skel.names[p]], skel.heads[i])
             for i, (n, p) in enumerate(zip(skel.names, skel.parents, strict=True))]
    rng.shuffle(bones)  # build_skeleton re-sorts parents first
    return build_skeleton(bones, world), {c: new[b] for c, b in mapping.items()}


@pytest.mark.parametrize("name", ["ue_mannequin", "cmu_motionbuilder", "mixamo", "kaykit"])
@pytest.mark.parametrize("turn", [0.0, 180.0, 90.0])
def test_topology_maps_unknown_names(name, turn):
    a = np.radians(turn)
    world = np.eye(4)
    world[:2, :2] = [[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]]
    skel, mapping = _scrambled(name, seed=int(turn) + len(name), world=world)
    bm = auto_map(skel)
    assert bm.preset is None
    assert not bm.missing_core
    for canon in CORE:
        assert bm[canon] == mapping[canon], canon
        assert bm.source[canon] in ("topology", "name")
        assert bm.confidence[canon] <= 0.7


def test_non_humanoids_do_not_crash():
    snake = build_skeleton([(f"seg{i}", f"seg{i - 1}" if i else None, (0, -0.3 * i, 0.1))
                            for i in range(5)])
    bm = auto_map(snake)
    assert set(bm.missing_core) == set(CORE) - set(bm.bones)
    assert "hips" in bm.missing_core and "leftUpperArm" in bm.missing_core
    assert any("core joint" in a for a in bm.ambiguous)

    # quadruped: spine along -Y, four legs, neck and head up front, a tail
    bones = [("pelvis", None, (0, 0.4, 0.8)), ("back", "pelvis", (0, 0, 0.82)),
             ("withers", "back", (0, -0.4, 0.85)), ("neckA", "withers", (0, -0.5, 1.0)),
             ("skull", "neckA", (0, -0.6, 1.2)), ("tail1", "pelvis", (0, 0.5, 0.8)),
             ("tail2", "tail1", (0, 0.7, 0.7))]
    for name, root, (x, y) in (("fl", "withers", (0.15, -0.4)), ("fr", "withers", (-0.15, -0.4)),
                               ("bl", "pelvis", (0.15, 0.4)), ("br", "pelvis", (-0.15, 0.4))):
        bones += [(f"{name}1", root, (x, y, 0.7)), (f"{name}2", f"{name}1", (x, y, 0.4)),
                  (f"{name}3", f"{name}2", (x, y, 0.05))]
    bm = auto_map(build_skeleton(bones))
    assert all(0.0 <= c <= 1.0 for c in bm.confidence.values())
    assert set(bm.unmapped) | set(bm.bones.values()) == {b[0] for b in bones}

    assert auto_map(build_skeleton([("a", None, (0, 0, 0))])).missing_core


# ---------------------------------------------------------------- save / load


def test_save_load_round_trip(tmp_path):
    skel, mapping = preset_skeleton("mixamo")
    bm = auto_map(skel)
    bm.set("leftUpperArmTwist", 'we"ird\\name ñ\t', 0.25, "user")
    for ext in ("toml", "json"):
        path = tmp_path / f"map.{ext}"
        bm.save(path)
        back = BoneMap.load(path)
        assert back.to_dict() == bm.to_dict()
        assert back.preset == "mixamo"
        assert back.confidence["leftUpperArmTwist"] == 0.25
        assert not list(tmp_path.glob(".*tmp"))  # atomic write leaves no temp file
    (tmp_path / "map.toml").unlink()
    bm.remove("leftUpperArmTwist")
    bm.save(tmp_path / "ok.toml")
    assert BoneMap.load(tmp_path / "ok.toml", skel).bones == mapping


def test_preset_files_load_as_maps():
    path = get_preset("ue_style").path
    bm = BoneMap.load(path)
    assert bm["leftToes"] == "ball_l"


def _write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def test_bad_map_files_give_clear_errors(tmp_path):
    skel, _ = preset_skeleton("mixamo")
    cases = [
        ("a.toml", '[bones]\nleftUperArm = "mixamorig:LeftArm"\n',
         r"unknown canonical joint 'leftUperArm' \(did you mean 'leftUpperArm'\?\)"),
        ("b.toml", '[bones]\nhips = "mixamorig:Hipz"\n',
         r"hips = 'mixamorig:Hipz' \(closest bone: 'mixamorig:Hips'\).*Fix the names"),
        ("c.toml", '[bones]\nhips = "mixamorig:Hips"\nspine = "mixamorig:Hips"\n',
         r"mapped to both hips and spine"),
        ("d.toml", '[bones\nhips = "x"\n', r"d.toml: not valid TOML"),
        ("e.toml", 'hips = "mixamorig:Hips"\n', r"no \[bones\] table"),
        ("f.toml", '[bones]\nhips = ["a", "b"]\n', r"hips must be one bone name"),
        ("g.json", '{"bones": {"hips": "mixamorig:Hips",}}', r"g.json: not valid JSON"),
        ("h.yaml", "bones: {}", r"\.toml or \.json"),
        ("i.toml", '[bones]\nhips = "mixamorig:Hips"\n[confidence]\nhips = 3\n', r"0\.\.1"),
    ]
    for fname, text, pattern in cases:
        path = _write(tmp_path, fname, text)
        with pytest.raises(BoneMapError, match=pattern):
            BoneMap.load(path, skel)
    with pytest.raises(BoneMapError, match="cannot read"):
        BoneMap.load(tmp_path / "missing.toml")
    with pytest.raises(BoneMapError, match=".toml or .json"):
        BoneMap().save(tmp_path / "x.txt")


def test_normalize_name():
    assert normalize_name("mixamorig1:Left_Arm") == "leftarm"
    assert normalize_name("Armature|DEF-upper_arm.L") == "upperarml"
    assert normalize_name("Bip001 L UpperArm") == "lupperarm"


# ---------------------------------------------------------------- real files


def _bvh_skeleton(path: Path) -> Skeleton:
    """Joint names, hierarchy and offsets of a BVH (Y-up -> Blender Z-up)."""
    bones: list[tuple[str, str | None, np.ndarray]] = []
    stack: list[tuple[str | None, np.ndarray]] = []
    pending: str | None = None
    end_site = False
    for line in path.read_text(errors="replace").splitlines():
        tok = line.split()
        if not tok:
            continue
        if tok[0] == "MOTION":
            break
        if tok[0] in ("ROOT", "JOINT"):
            pending, end_site = tok[1], False
        elif tok[0] == "End":
            pending, end_site = None, True
        elif tok[0] == "{":
            stack.append((pending, np.zeros(3)))
        elif tok[0] == "OFFSET":
            x, y, z = map(float, tok[1:4])
            name, _ = stack[-1]
            parent_pos = next((p for n, p in reversed(stack[:-1]) if n), np.zeros(3))
            pos = parent_pos + (x, -z, y)
            stack[-1] = (name, pos)
            if name is not None:
                parent = next((n for n, _ in reversed(stack[:-1]) if n), None)
                bones.append((name, parent, pos))
            elif end_site:
                pass
        elif tok[0] == "}":
            stack.pop()
    return build_skeleton(bones)


def _gltf_skeleton(path: Path) -> Skeleton:
    """Skin joints of a .gltf/.glb with their rest positions (Y-up -> Z-up)."""
    raw = path.read_bytes()
    if raw[:4] == b"glTF":
        (length,) = struct.unpack_from("<I", raw, 12)
        doc = json.loads(raw[20:20 + length])
    else:
        doc = json.loads(raw)
    nodes = doc["nodes"]
    parent = {c: i for i, n in enumerate(nodes) for c in n.get("children", [])}
    joints = {j for skin in doc.get("skins", []) for j in skin["joints"]}

    def local(n: dict) -> np.ndarray:
        if "matrix" in n:
            return np.array(n["matrix"], float).reshape(4, 4).T
        m = np.eye(4)
        x, y, z, w = n.get("rotation", (0, 0, 0, 1))
        m[:3, :3] = quat_to_matrix(np.array([w, x, y, z])) * np.array(n.get("scale", (1, 1, 1)))
        m[:3, 3] = n.get("translation", (0, 0, 0))
        return m

    cache: dict[int, np.ndarray] = {}

    def glob(i: int) -> np.ndarray:
        if i not in cache:
            cache[i] = (glob(parent[i]) if i in parent else np.eye(4)) @ local(nodes[i])
        return cache[i]

    bones = []
    for j in sorted(joints):
        p = parent.get(j)
        while p is not None and p not in joints:
            p = parent.get(p)
        x, y, z = glob(j)[:3, 3]
        bones.append((nodes[j]["name"], None if p is None else nodes[p]["name"],
                      np.array((x, -z, y))))
    return build_skeleton(bones)


def _sided(center: dict[str, str], side: dict[str, str]) -> dict[str, str]:
    out = dict(center)
    for s, tag in (("left", "L"), ("right", "R")):
        for k, v in side.items():
            out[f"{s}{k}"] = v.format(L=tag, l=tag.lower(), Side=s.capitalize(), S=tag)
    return out


UE = _sided({"hips": "pelvis", "spine": "spine_01", "chest": "spine_02",
             "upperChest": "spine_03", "neck": "neck_01", "head": "head"},
            {"Shoulder": "clavicle_{l}", "UpperArm": "upperarm_{l}", "LowerArm": "lowerarm_{l}",
             "Hand": "hand_{l}", "UpperLeg": "thigh_{l}", "LowerLeg": "calf_{l}",
             "Foot": "foot_{l}", "Toes": "ball_{l}", "IndexProximal": "index_01_{l}",
             "ThumbMetacarpal": "thumb_01_{l}"})
CMU_MB = _sided({"hips": "Hips", "spine": "LowerBack", "chest": "Spine", "upperChest": "Spine1",
                 "neck": "Neck", "head": "Head"},
                {"Shoulder": "{Side}Shoulder", "UpperArm": "{Side}Arm",
                 "LowerArm": "{Side}ForeArm", "Hand": "{Side}Hand",
                 "UpperLeg": "{Side}UpLeg", "LowerLeg": "{Side}Leg", "Foot": "{Side}Foot",
                 "Toes": "{Side}ToeBase", "ThumbMetacarpal": "{S}Thumb"})
CMU_MAX = _sided({"hips": "Hips", "spine": "lowerback", "chest": "Chest", "upperChest": "Chest2",
                  "neck": "lowerneck", "head": "Head"},
                 {"Shoulder": "{Side}Collar", "UpperArm": "{Side}Shoulder",
                  "LowerArm": "{Side}Elbow", "Hand": "{Side}Wrist", "UpperLeg": "{Side}Hip",
                  "LowerLeg": "{Side}Knee", "Foot": "{Side}Ankle", "Toes": "{Side}Toe",
                  "IndexProximal": "{S}Fingers", "ThumbMetacarpal": "{S}Thumb"})
KAYKIT = _sided({"hips": "hips", "spine": "spine", "chest": "chest", "head": "head"},
                {"UpperArm": "upperarm.{l}", "LowerArm": "lowerarm.{l}", "Hand": "wrist.{l}",
                 "UpperLeg": "upperleg.{l}", "LowerLeg": "lowerleg.{l}", "Foot": "foot.{l}",
                 "Toes": "toes.{l}"})
ROBOT = _sided({"hips": "Body", "spine": "Hips", "chest": "Abdomen", "upperChest": "Torso_1",
                "neck": "Neck", "head": "Head"},
               {"Shoulder": "Shoulder{L}", "UpperArm": "UpperArm{L}", "LowerArm": "LowerArm{L}",
                "Hand": "Palm2{L}", "UpperLeg": "UpperLeg{L}", "LowerLeg": "LowerLeg{L}",
                "Foot": "Foot{L}", "IndexProximal": "Index{L}", "IndexIntermediate": "Index2{L}",
                "ThumbMetacarpal": "Thumb{L}", "MiddleProximal": "Middle1{L}"})

REAL = [
    ("bvh/cmu_motionbuilder_friendly/02_01.bvh", "cmu_motionbuilder",
     {**CMU_MB, "leftIndexProximal": "LeftHandIndex1", "rightIndexProximal": "RightHandIndex1"},
     ("LHipJoint", "Neck1", "LeftFingerBase")),
    ("bvh/cmu_motionbuilder_friendly/01_01.bvh", "cmu_motionbuilder",
     {**CMU_MB, "leftIndexProximal": "LFingers", "rightIndexProximal": "RFingers"},
     ("LHipJoint",)),
    ("bvh/cmu_3dsmax_friendly/131_01.bvh", "cmu_3dsmax", CMU_MAX, ("LHipJoint", "Neck", "lhand")),
    ("characters/human-male.glb", "ue_style", UE, ("root", "head_leaf", "index_04_leaf_l")),
    ("characters/human-female.glb", "ue_style", UE, ("root", "ball_leaf_r")),
    ("characters/human-zombie.glb", "ue_style", UE, ("root", "thumb_04_leaf_r")),
    ("characters/kaykit_mannequin/manny_med_mod.gltf", "kaykit", KAYKIT,
     ("root", "hand.l", "hand.r")),
    ("characters/RobotExpressive.glb", None, ROBOT,
     ("Bone", "PoleTargetL", "PoleTargetR", "Palm1L", "Palm3R")),
]


def _real_skeleton(path: Path) -> Skeleton:
    return _bvh_skeleton(path) if path.suffix == ".bvh" else _gltf_skeleton(path)


@pytest.mark.shared_data
@pytest.mark.parametrize("rel,preset,expected,helpers", REAL, ids=[r[0] for r in REAL])
def test_real_rigs(shared_data, rel, preset, expected, helpers):
    skel = _real_skeleton(shared_data / rel)
    bm = auto_map(skel)
    assert bm.preset == preset
    assert not bm.missing_core
    wrong = {c: (bm.bones.get(c), b) for c, b in expected.items() if bm.bones.get(c) != b}
    assert not wrong
    for h in helpers:
        assert h in bm.unmapped


@pytest.mark.shared_data
@pytest.mark.parametrize("rel", ["bvh/cmu_motionbuilder_friendly/05_06.bvh",
                                 "bvh/cmu_3dsmax_friendly/131_02.bvh"])
def test_real_bvh_topology_only(shared_data, rel):
    """The CMU skeletons with every name replaced still map their core joints."""
    skel = _real_skeleton(shared_data / rel)
    truth = auto_map(skel)
    new = {n: f"j{i:02d}" for i, n in enumerate(skel.names)}
    anon = Skeleton([new[n] for n in skel.names], skel.parents, skel.rest, skel.tails)
    bm = auto_map(anon)
    assert bm.preset is None
    for canon in CORE:
        assert bm[canon] == new[truth[canon]], canon


def test_names_regex_sanity():
    # every preset name survives normalisation distinctly within its preset
    for name in PRESETS:
        firsts = [a[0] for a in get_preset(name).bones.values()]
        keys = [normalize_name(f) for f in firsts]
        assert len(set(keys)) == len(keys), name
        assert all(re.fullmatch(r"[a-z0-9]+", k) for k in keys)


def test_resolve_map(tmp_path):
    skel, mapping = preset_skeleton("ue_style")
    # a preset name resolves against the armature; absent joints are left out
    bm = resolve_map("ue_mannequin", skel)
    assert bm.preset == "ue_mannequin" and bm.bones == mapping
    assert "leftUpperArmTwist" not in bm and not bm.missing_core
    bm.save(tmp_path / "m.json")
    assert resolve_map(tmp_path / "m.json", skel).bones == mapping
    assert resolve_map(str(tmp_path / "m.json"), skel).bones == mapping
    assert resolve_map(bm, skel) is bm
    vrm = resolve_map("vrm", skel)
    assert not vrm.bones and "leftUpperArm" in vrm.missing_core and vrm.ambiguous
    with pytest.raises(BoneMapError, match="unknown preset"):
        resolve_map("nope", skel)
    bad = BoneMap()
    bad.set("hips", "Hips")
    with pytest.raises(BoneMapError, match="not in the armature"):
        resolve_map(bad, skel)
