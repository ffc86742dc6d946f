"""The skin model in Blender: a character's training set by self-reconstruction
(``dataset``), ``painted-skin train-skin`` (``train``: the set rendered here, the
trainer run in the backend's Python), and the Skin Model panel that steps it (``ui``).
May import bpy, ``core``, ``motion`` and the rooms beside it; never ``demo``."""
