"""Building replies: what a server or broker sends back, with echoed fields made safe.

One error builder for both services and for refused messages, so an ``error``
reply is capped the same way wherever it is made.
"""

from __future__ import annotations

import importlib.metadata
from typing import Any

import numpy as np

from .codec import encode
from .limits import MAX_NAME, MAX_TEXT
from .messages import ERROR, ProtocolError


def backend_version() -> str:
    try:
        return importlib.metadata.version("painted-skin")
    except importlib.metadata.PackageNotFoundError:
        return "0"


SERVER_NAME = f"painted-skin {backend_version()}"  # PONG's and STATUS's "server"


def reply(mtype: str, arrays: dict[str, np.ndarray] | None = None, **fields: Any
          ) -> list[Any]:
    return encode(mtype, arrays, **fields)


def clean(value: Any) -> Any:
    """A client-sent id or session name, safe to echo in a reply (or None)."""
    return value if isinstance(value, str) and len(value) <= MAX_NAME else None


def is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def error(code: str, message: str, ref: Any = None, session: Any = None,
          frame: Any = None) -> list[Any]:
    """An ``error`` reply; echoed fields are dropped when not small and well-typed."""
    fields: dict[str, Any] = {"code": code, "message": str(message)[:MAX_TEXT],
                              "ref": clean(ref), "session": clean(session)}
    if is_int(frame):
        fields["frame"] = frame
    return encode(ERROR, **fields)


def error_frames(err: ProtocolError, session: str | None = None) -> list[bytes | memoryview]:
    """The ``error`` reply for a rejected message (long texts cut so the reply
    header always fits under the cap)."""
    ref = err.ref[:128] if isinstance(err.ref, str) else None
    sess = session[:128] if isinstance(session, str) else None
    return error(err.code, str(err)[:2000], ref=ref, session=sess)
