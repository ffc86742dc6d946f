"""The add-on's pure core: Python + numpy, no bpy, tested without Blender, in rooms by
stage: ``rig`` (the humanoid, skeleton arrays, rotations), ``bonemap``, ``bvh``,
``retarget``, ``passes`` (the fast engine's maths), ``openpose``, ``files`` (atomic
writes, aliasing checks, frame lists) and ``backend`` (what the add-on knows of one). It
imports nothing else of the package, so the motion library, the bpy layer, the backend
and the tools can all build on it (ARCHITECTURE.md)."""
