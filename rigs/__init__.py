"""Demo assets in Blender: the demo character, generated motions, spring bones and
textures, the bone-map preset TOML files (``presets/``) and the skin models;
``humanoid`` and ``presets`` re-export what moved to ``addon/core``. It needs bpy and may
import ``addon/core`` and the add-on's bpy layer; nothing in ``addon/core``, ``wire`` or
``backend`` imports it (ARCHITECTURE.md)."""
