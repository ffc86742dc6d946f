"""The project's rig data, no code: the bone-map preset TOML files (``presets/``, read by
:mod:`painted_skin.addon.core.bonemap.presets`) and the embedded skin models
(``skin_models/``, listed in the backend's ``skin/registry.toml``)."""
