"""The Retarget step in Blender: reading armatures and writing Actions in bulk
(``armature_io``), Blender's importers without a trace (``importers``), the one retarget
function the CLI, farms and panel share (``api``), its panel, settings and operators
(``panel``, ``props``, ``operators``), the modal run in slices (``modal``) and the batch
browser (``batch_ui``). May import bpy, ``core``, ``wire``, ``motion`` and the rooms
beside it."""
