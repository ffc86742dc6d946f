"""The wire protocol's old home, kept for one release: everything lives in ``wire``.

Import from :mod:`painted_skin.wire` instead (the add-on ships it without the backend).
"""

from __future__ import annotations

from ..wire import *  # noqa: F403
from ..wire import __all__  # noqa: F401
