"""Scene settings of the Painted Skin panel."""

from __future__ import annotations

import bpy
from bpy.props import (
    BoolProperty,
    CollectionProperty,
    EnumProperty,
    FloatProperty,
    IntProperty,
    PointerProperty,
    StringProperty,
)

from ..classes import register_classes, unregister_classes


def _is_armature(_self, obj) -> bool:
    return obj.type == "ARMATURE"


def _preset_items(_self, _context):
    from ...core.bonemap.presets import list_presets

    items = [("AUTO", "Auto-detect", "Detect the bone map from names and skeleton shape")]
    items += [(p, p, f"Preset {p}") for p in list_presets()]
    return items


class PS_BoneMapItem(bpy.types.PropertyGroup):
    """One row of an editable bone map: canonical joint -> bone."""

    canonical: StringProperty(name="Joint",
                              description="The humanoid joint this row maps (e.g. leftUpperArm)")
    bone: StringProperty(name="Bone",
                         description="The character's bone that plays this joint; empty: the "
                                     "joint is left unmapped")
    confidence: FloatProperty(name="Confidence", min=0.0, max=1.0,
                              description="How sure detection is of this row (below 0.75: "
                                          "check it)")
    origin: StringProperty(name="From",
                           description="How the row was found: by name, by skeleton shape, "
                                       "from a preset or a map file")


class PS_RetargetSettings(bpy.types.PropertyGroup):
    source_kind: EnumProperty(
        name="Source",
        items=[("FILE", "File", "A BVH, FBX or glTF clip on disk"),
               ("OBJECT", "Armature", "An animated armature in the scene")],
        default="FILE",
        description="Where the motion comes from: a clip file or an armature in this scene",
    )
    source_path: StringProperty(name="Clip", subtype="FILE_PATH",
                                description="The mocap clip to retarget (BVH, FBX or glTF)")
    source_object: PointerProperty(name="Source armature", type=bpy.types.Object,
                                   poll=_is_armature,
                                   description="An animated armature in the scene whose "
                                               "action is the motion to retarget")
    target_object: PointerProperty(name="Character", type=bpy.types.Object, poll=_is_armature,
                                   description="The character's armature that receives the "
                                               "motion as a new Action")
    source_preset: EnumProperty(name="Source map", items=_preset_items,
                                description="How the clip's bones map to humanoid joints: "
                                            "auto-detect, or a named rig preset")
    target_preset: EnumProperty(name="Character map", items=_preset_items,
                                description="How the character's bones map to humanoid "
                                            "joints: auto-detect, or a named rig preset")
    use_edited_map: BoolProperty(
        name="Use edited character map", default=False,
        description="Retarget with the character map shown below instead of detecting it")
    target_map: CollectionProperty(type=PS_BoneMapItem, name="Character map",
                                   description="The character's bone map, one row per joint "
                                               "(Detect fills it; edit, save or load it)")
    target_map_index: IntProperty(name="Active row",
                                  description="The row selected in the bone map list")
    in_place: BoolProperty(name="In place", description="Drop horizontal root motion")
    foot_lock: BoolProperty(name="Foot lock", default=True,
                            description="Pin feet during ground contact (two-bone IK)")
    keep_posture: BoolProperty(
        name="Keep posture",
        description="Keep the character's own rest posture (a stylised hunch) on top of the "
                    "mocap's torso motion; off: the spine, neck and head follow the mocap")
    ground: EnumProperty(
        name="Ground",
        items=[("floor", "Floor", "The clip's lowest foot meets the character's floor"),
               ("keep", "Keep", "Keep the source height, scaled")],
        default="floor",
        description="How the clip's height is placed on the character",
    )
    last_report: StringProperty(name="Last result",
                                description="What the last retarget baked (frames, rate, "
                                            "joints, foot skate)")


CLASSES = (PS_BoneMapItem, PS_RetargetSettings)


def register() -> None:
    register_classes(CLASSES, painted_skin_retarget=PS_RetargetSettings)


def unregister() -> None:
    unregister_classes(CLASSES, "painted_skin_retarget")
