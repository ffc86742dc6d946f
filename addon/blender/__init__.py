"""The add-on's thin bpy layer, one room per workflow step: ``retarget``, ``passes``,
``restyle``, ``client`` (the backend client) and ``skin`` (the skin model's training),
with registration, preferences, saving and opening shots (``blend_files``) and headless
jobs (``session``) beside them. Only this layer imports bpy; the maths stays in
:mod:`..core`. It may import ``addon/core``, ``addon/motion`` and ``wire``; never
``backend`` (it starts one by module name in another process), never ``demo`` and never
the CLI (ARCHITECTURE.md)."""
