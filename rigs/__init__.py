"""The project's skeleton data: the bone-map preset TOML files (``presets/``) and the
skin models (``skin_models/``); ``humanoid`` and ``presets`` re-export what moved to
``addon/core``, and ``character*``, ``motion*``, ``spring*`` and ``texture*`` what moved
to the ``demo`` package, each for one release. It may import ``addon/core`` and ``demo``;
nothing in ``addon/core``, ``wire`` or ``backend`` imports it (ARCHITECTURE.md)."""
