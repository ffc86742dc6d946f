"""What the backend client raises: the backend's error replies, silence, and URLs
that cannot work.

No bpy import (the backend tests and the bench use the client without Blender).
:func:`check_url` runs before any socket exists, so a URL the client could only
wait on in silence fails in one line instead of after ``timeout_s``.
"""

from __future__ import annotations

import re

from .... import wire as P

E_CANCELLED = P.E_CANCELLED
E_UNAVAILABLE = "unavailable"


class BackendError(RuntimeError):
    """An ``error`` reply (``code`` is the backend's) or a client-side failure."""

    def __init__(self, code: str, message: str, ref: str | None = None,
                 session: str | None = None, frame: int | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code, self.message, self.ref, self.session, self.frame = (
            code, message, ref, session, frame)


class BadBackendURL(ValueError):
    """A backend URL that cannot work: not a ZeroMQ endpoint, or off this machine
    without CurveZMQ keys (the backend refuses unencrypted remote clients)."""


class BackendUnavailable(BackendError):
    """No answer at all within the time allowed."""

    def __init__(self, url: str, seconds: float) -> None:
        super().__init__(E_UNAVAILABLE, f"no answer from the backend at {url} for "
                                        f"{seconds:.1f} s: is it running (painted-skin serve)?")


_ENDPOINT = re.compile(r"tcp://(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+):([0-9]{1,5})"
                       r"|ipc://[^\s]+|inproc://[^\s]+")


def check_url(url: object, keys: object = None) -> None:
    """Refuse, with one line saying how to fix it, a URL the client could only wait
    on in silence: not ``tcp://HOST:PORT`` / ``ipc://PATH`` / ``inproc://NAME``, or
    not on this machine while ``keys`` is None. Raises :class:`BadBackendURL`."""
    m = _ENDPOINT.fullmatch(url) if isinstance(url, str) else None
    if m is None or (m.group(1) is not None and not 0 < int(m.group(1)) < 65536):
        raise BadBackendURL(f"backend URL {str(url)[:200]!r} is not a ZeroMQ endpoint; give "
                            "tcp://HOST:PORT (e.g. tcp://127.0.0.1:5555) or ipc://PATH")
    if keys is None and not P.is_local_endpoint(url):
        raise BadBackendURL(f"backend URL {url} is not on this machine and no keys were "
                            "given: a remote backend takes only encrypted clients; pass the "
                            "folder made by `painted-skin keys DIR` (--keys DIR), or reach "
                            "it through tcp://127.0.0.1:PORT (e.g. an ssh tunnel)")


def error_from_reply(msg: P.Message) -> BackendError:
    """The :class:`BackendError` an ERROR message stands for."""
    h = msg.header
    return BackendError(str(h.get("code", "error")), str(h.get("message", "")),
                        h.get("ref"), h.get("session"), h.get("frame"))
