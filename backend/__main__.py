"""``python -m painted_skin.backend serve|broker|keys …``: the backend's own commands,
without the rest of the CLI (and without bpy)."""

import sys

from .commands import main

sys.exit(main())
