"""The canonical humanoid: the joint names every bone map targets.

Names follow the VRM 1.0 humanoid (hips, spine, chest, upperChest, neck, head,
leftUpperArm, ...), extended with optional twist bones. Conventions of the
canonical reference pose (see :mod:`..retarget.reference_pose`): the character
faces -Y, up is +Z and the character's left is +X (Blender's front view).

No bpy, no numpy: this module is data.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["AIM_CHILD", "CORE", "FINGERS", "FINGER_SEGMENTS", "JOINTS", "JOINT_BY_NAME", "NAMES",
           "REFERENCE_DIRECTIONS", "SIDES", "Joint", "canonical_parent", "mirror"]

SIDES = ("left", "right")
FINGERS = ("Thumb", "Index", "Middle", "Ring", "Little")
# VRM 1.0 finger segments; the thumb's first segment is its metacarpal.
FINGER_SEGMENTS = {
    "Thumb": ("Metacarpal", "Proximal", "Distal"),
    "Index": ("Proximal", "Intermediate", "Distal"),
    "Middle": ("Proximal", "Intermediate", "Distal"),
    "Ring": ("Proximal", "Intermediate", "Distal"),
    "Little": ("Proximal", "Intermediate", "Distal"),
}


@dataclass(frozen=True)
class Joint:
    """One canonical joint: its parent, group and the role it plays."""

    name: str
    parent: str | None
    group: str  # "core", "spine", "neck", "shoulder", "toes", "finger", "twist"
    side: str | None = None  # "left", "right" or None


def _side_joints(side: str) -> list[Joint]:
    s = side
    j = [
        Joint(f"{s}Shoulder", "upperChest", "shoulder", s),
        Joint(f"{s}UpperArm", f"{s}Shoulder", "core", s),
        Joint(f"{s}LowerArm", f"{s}UpperArm", "core", s),
        Joint(f"{s}Hand", f"{s}LowerArm", "core", s),
        Joint(f"{s}UpperLeg", "hips", "core", s),
        Joint(f"{s}LowerLeg", f"{s}UpperLeg", "core", s),
        Joint(f"{s}Foot", f"{s}LowerLeg", "core", s),
        Joint(f"{s}Toes", f"{s}Foot", "toes", s),
        Joint(f"{s}UpperArmTwist", f"{s}UpperArm", "twist", s),
        Joint(f"{s}LowerArmTwist", f"{s}LowerArm", "twist", s),
        Joint(f"{s}UpperLegTwist", f"{s}UpperLeg", "twist", s),
        Joint(f"{s}LowerLegTwist", f"{s}LowerLeg", "twist", s),
    ]
    for finger in FINGERS:
        parent = f"{s}Hand"
        for seg in FINGER_SEGMENTS[finger]:
            name = f"{s}{finger}{seg}"
            j.append(Joint(name, parent, "finger", s))
            parent = name
    return j


JOINTS: tuple[Joint, ...] = tuple(
    [
        Joint("hips", None, "core"),
        Joint("spine", "hips", "core"),
        Joint("chest", "spine", "spine"),
        Joint("upperChest", "chest", "spine"),
        Joint("neck", "upperChest", "neck"),
        Joint("head", "neck", "core"),
    ]
    + _side_joints("left")
    + _side_joints("right")
)
JOINT_BY_NAME: dict[str, Joint] = {j.name: j for j in JOINTS}
NAMES: tuple[str, ...] = tuple(j.name for j in JOINTS)

# A humanoid must have these to be retargeted at all.
CORE: tuple[str, ...] = tuple(j.name for j in JOINTS if j.group == "core")

# Bones whose direction is forced onto a fixed axis in the reference pose. All
# others keep their rest relation to the nearest such ancestor (fingers follow
# the hand, feet follow the shin), which is what makes T-pose, A-pose and
# arms-down rests agree without asking anyone to pose anything.
REFERENCE_DIRECTIONS: dict[str, tuple[float, float, float]] = {
    "leftUpperArm": (1.0, 0.0, 0.0),
    "leftLowerArm": (1.0, 0.0, 0.0),
    "leftHand": (1.0, 0.0, 0.0),
    "rightUpperArm": (-1.0, 0.0, 0.0),
    "rightLowerArm": (-1.0, 0.0, 0.0),
    "rightHand": (-1.0, 0.0, 0.0),
    "leftUpperLeg": (0.0, 0.0, -1.0),
    "leftLowerLeg": (0.0, 0.0, -1.0),
    "rightUpperLeg": (0.0, 0.0, -1.0),
    "rightLowerLeg": (0.0, 0.0, -1.0),
}

# The joint a canonical bone points at, used to measure its direction from
# geometry rather than from the bone's own axis (which varies between rigs).
AIM_CHILD: dict[str, str] = {
    "leftUpperArm": "leftLowerArm",
    "leftLowerArm": "leftHand",
    "leftHand": "leftMiddleProximal",
    "rightUpperArm": "rightLowerArm",
    "rightLowerArm": "rightHand",
    "rightHand": "rightMiddleProximal",
    "leftUpperLeg": "leftLowerLeg",
    "leftLowerLeg": "leftFoot",
    "rightUpperLeg": "rightLowerLeg",
    "rightLowerLeg": "rightFoot",
    "leftFoot": "leftToes",
    "rightFoot": "rightToes",
    "spine": "chest",
    "chest": "upperChest",
    "upperChest": "neck",
    "neck": "head",
}


def canonical_parent(name: str, present: set[str] | frozenset[str]) -> str | None:
    """The nearest canonical ancestor of ``name`` that is in ``present``."""
    parent = JOINT_BY_NAME[name].parent
    while parent is not None and parent not in present:
        parent = JOINT_BY_NAME[parent].parent
    return parent


def mirror(name: str) -> str:
    """leftX <-> rightX; names without a side come back unchanged."""
    if name.startswith("left"):
        return "right" + name[4:]
    if name.startswith("right"):
        return "left" + name[5:]
    return name
