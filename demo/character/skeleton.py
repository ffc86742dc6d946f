"""The demo character's names and bones: the metarig-named armature in an A-pose.

Kept apart from the mesh so that the bone map and the cape chain can be read
(by the retarget tests, the spring bake) without building any geometry.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...addon.core.rig.humanoid import FINGER_SEGMENTS, FINGERS
from ...addon.core.rig.transforms import normalize

# --------------------------------------------------------------------------- names

_FINGER_BONES = {"Thumb": "thumb", "Index": "f_index", "Middle": "f_middle",
                 "Ring": "f_ring", "Little": "f_pinky"}
_SIDE_SUFFIX = {"left": "L", "right": "R"}


def _demo_bone_map() -> dict[str, str]:
    m = {
        "hips": "spine", "spine": "spine.001", "chest": "spine.002",
        "upperChest": "spine.003", "neck": "spine.004", "head": "spine.006",
    }
    for side, sfx in _SIDE_SUFFIX.items():
        m.update({
            f"{side}Shoulder": f"shoulder.{sfx}", f"{side}UpperArm": f"upper_arm.{sfx}",
            f"{side}LowerArm": f"forearm.{sfx}", f"{side}Hand": f"hand.{sfx}",
            f"{side}UpperLeg": f"thigh.{sfx}", f"{side}LowerLeg": f"shin.{sfx}",
            f"{side}Foot": f"foot.{sfx}", f"{side}Toes": f"toe.{sfx}",
        })
        for finger in FINGERS:
            for i, seg in enumerate(FINGER_SEGMENTS[finger]):
                m[f"{side}{finger}{seg}"] = f"{_FINGER_BONES[finger]}.0{i + 1}.{sfx}"
    return m


DEMO_BONE_MAP: dict[str, str] = _demo_bone_map()
CAPE_BONES: tuple[str, ...] = ("cape.001", "cape.002", "cape.003", "cape.004")
CAPE_PARENT = "spine.003"
MATERIALS: dict[str, tuple[float, float, float]] = {
    "skin": (0.80, 0.58, 0.46),
    "shirt": (0.13, 0.33, 0.62),
    "trousers": (0.16, 0.16, 0.20),
    "shoes": (0.36, 0.20, 0.09),
    "hair": (0.09, 0.05, 0.03),
    "cape": (0.62, 0.07, 0.09),
}
BODY_REGIONS: tuple[str, ...] = ("skin", "shirt", "trousers", "shoes", "hair")
PART_PROP = "painted_skin_part"
SPRING_PROP = "painted_skin_spring"
COLLIDER_PROP = "painted_skin_spring_colliders"

A_POSE_DEG = 42.0  # upper arms below horizontal at rest


# --------------------------------------------------------------------------- skeleton


@dataclass
class BoneSpec:
    name: str
    parent: str | None
    head: np.ndarray
    tail: np.ndarray
    connect: bool
    z_axis: np.ndarray  # roll: the bone's Z axis points this way as far as it can


def vec3(*c: float) -> np.ndarray:
    return np.array(c, dtype=np.float64)


def _rot(axis: np.ndarray, deg: float, v: np.ndarray) -> np.ndarray:
    """Rotate ``v`` about unit ``axis`` by ``deg`` degrees (Rodrigues)."""
    a = normalize(axis)
    t = math.radians(deg)
    return v * math.cos(t) + np.cross(a, v) * math.sin(t) + a * (a @ v) * (1 - math.cos(t))


def skeleton_bones(scale: float, apose: float) -> list[BoneSpec]:
    """Bones of the left side and centre; the right side is their mirror image."""
    fwd, back, up = vec3(0, -1, 0), vec3(0, 1, 0), vec3(0, 0, 1)
    b: list[BoneSpec] = []

    def add(name: str, parent: str | None, head: np.ndarray, tail: np.ndarray,
            connect: bool, z_axis: np.ndarray) -> None:
        b.append(BoneSpec(name, parent, head * scale, tail * scale, connect, z_axis))

    spine = [vec3(0, .015, .96), vec3(0, .01, 1.07), vec3(0, 0, 1.19), vec3(0, .005, 1.31),
             vec3(0, .015, 1.45), vec3(0, -.005, 1.56), vec3(0, -.005, 1.74)]
    names = ["spine", "spine.001", "spine.002", "spine.003", "spine.004", "spine.006"]
    for i, n in enumerate(names):
        add(n, names[i - 1] if i else None, spine[i], spine[i + 1], i > 0, fwd)

    for s in ("L",):
        sh_head, sh_tail = vec3(.025, -.01, 1.415), vec3(.17, .015, 1.425)
        add(f"shoulder.{s}", "spine.003", sh_head, sh_tail, False, up)
        a = math.radians(apose)
        d1 = vec3(math.cos(a), 0, -math.sin(a))
        # A slight elbow bend: the forearm turns 12 degrees forward.
        d2 = normalize(_rot(normalize(np.cross(d1, fwd)), 12.0, d1))
        shoulder = vec3(.185, .015, 1.415)
        elbow = shoulder + d1 * .285
        wrist = elbow + d2 * .255
        knuckle = wrist + d2 * .085
        add(f"upper_arm.{s}", f"shoulder.{s}", shoulder, elbow, False, back)
        add(f"forearm.{s}", f"upper_arm.{s}", elbow, wrist, True, back)
        # Hand frame: palm normal faces the thigh (inward-down), 'across' runs thumb->pinky.
        palm_n = normalize(np.cross(back, d2))
        palm_n = -palm_n if palm_n[0] > 0 else palm_n
        across = normalize(np.cross(palm_n, d2))
        across = across if across[1] > 0 else -across
        add(f"hand.{s}", f"forearm.{s}", wrist, knuckle, True, -palm_n)
        fingers = {  # offset across, offset back along the hand, splay deg, lengths
            "f_index": (-.027, .000, -7.0, (.042, .025, .020)),
            "f_middle": (-.009, -.002, -2.0, (.047, .029, .021)),
            "f_ring": (.009, -.006, 3.0, (.043, .027, .020)),
            "f_pinky": (.026, -.014, 9.0, (.034, .021, .018)),
        }
        for fname, (off, back_off, splay, lens) in fingers.items():
            d = normalize(_rot(palm_n, -splay, d2))
            p = knuckle + across * off + d2 * back_off
            parent = f"hand.{s}"
            for j, ln in enumerate(lens):
                d = normalize(_rot(np.cross(palm_n, d), -8.0, d))  # curl toward the palm
                q = p + d * ln
                add(f"{fname}.0{j + 1}.{s}", parent, p, q, j > 0, -palm_n)
                parent, p = f"{fname}.0{j + 1}.{s}", q
        d = normalize(_rot(palm_n, 38.0, d2))  # thumb: toward the front of the hand...
        d = normalize(_rot(np.cross(palm_n, d), -18.0, d))  # ...and over the palm
        p = wrist + d2 * .018 - across * .02 + palm_n * .008
        parent = f"hand.{s}"
        for j, ln in enumerate((.040, .032, .027)):
            q = p + d * ln
            add(f"thumb.0{j + 1}.{s}", parent, p, q, j > 0, -palm_n)
            parent, p = f"thumb.0{j + 1}.{s}", q
            d = normalize(_rot(np.cross(palm_n, d), -8.0, d))

        hip, knee, ankle = vec3(.095, 0, .93), vec3(.095, -.015, .51), vec3(.095, .02, .09)
        ball, toe = vec3(.1, -.085, .025), vec3(.1, -.15, .025)
        add(f"thigh.{s}", "spine", hip, knee, False, fwd)
        add(f"shin.{s}", f"thigh.{s}", knee, ankle, True, fwd)
        add(f"foot.{s}", f"shin.{s}", ankle, ball, True, up)
        add(f"toe.{s}", f"foot.{s}", ball, toe, True, up)

    mirrored = []
    flip = vec3(-1, 1, 1)
    for bone in b:
        if bone.name.endswith(".L"):
            mirrored.append(BoneSpec(
                bone.name[:-1] + "R",
                bone.parent[:-1] + "R" if bone.parent.endswith(".L") else bone.parent,
                bone.head * flip, bone.tail * flip, bone.connect, bone.z_axis * flip))
    return b + mirrored
