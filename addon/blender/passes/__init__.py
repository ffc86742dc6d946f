"""The Passes step in Blender: the shot's deforming meshes read in bulk (``geometry``,
``scene_reader``), the fast engine's frame (``fast``) and Cycles' reference passes
(``cycles``), images through bpy's OpenImageIO (``image_io``), a camera for a shot
without one (``auto_camera``), the folder a passes run writes (``output``), the headless
function (``render``) and the panel (``ui``). May import bpy, ``core``, ``wire`` and the
rooms beside it."""
