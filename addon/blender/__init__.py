"""The add-on's thin bpy layer: reading armatures and writing Actions, importers,
retargeting, the fast and Cycles passes, the restyle loop, the backend client, saving
and opening shots, the skin model's dataset and training, operators, panels and
registration. Only this layer imports bpy; the maths stays in :mod:`..core`. It may
import ``addon/core``, ``wire`` and ``rigs`` — never ``backend`` (it starts a backend by
module name in another process) and never the CLI (ARCHITECTURE.md)."""
