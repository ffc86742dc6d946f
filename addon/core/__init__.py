"""The add-on's pure core: Python + numpy, no bpy, tested without Blender. The humanoid
skeleton and its presets, bone maps, the common reference pose, retargeting, BVH and
OpenPose, the fast pass engine (rasteriser, shadows), atomic writes, output paths and
frame ranges. It imports nothing else of the package, so the bpy layer, the backend and
the tools can all build on it (ARCHITECTURE.md)."""
