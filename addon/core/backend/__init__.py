"""What the add-on knows of a backend without talking to one: the probe behind the
Preferences' *Check* (``probe``), the last STATUS reply parsed for the panel
(``status``), and the skin-model registry file both sides read (``skin_registry``). Pure
Python; may import ``core.files``. The backend process itself is the top-level
``backend`` package."""
