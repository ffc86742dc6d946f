"""Rate-limited, one-line logging for what peers can repeat at will.

A client can send thousands of malformed messages a second; logging each (let
alone with a traceback) would fill the disk and bury everything else. A
:class:`LogLimiter` writes at most ``burst`` lines per kind of event per
``interval`` seconds, then one line saying how many it left out.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

MAX_LINE = 500  # characters of one logged message


def one_line(text: str, limit: int = MAX_LINE) -> str:
    """``text`` on one line (newlines escaped), cut to ``limit`` characters."""
    flat = text.replace("\r", "\\r").replace("\n", "\\n")
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


class LogLimiter:
    """At most ``burst`` records per key per ``interval`` seconds (thread-safe)."""

    def __init__(self, logger: logging.Logger, interval: float = 10.0, burst: int = 5,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.logger, self.interval, self.burst, self.clock = logger, interval, burst, clock
        self._lock = threading.Lock()
        self._windows: dict[str, list[float | int]] = {}  # key -> [start, logged, dropped]
        self.suppressed = 0  # records left out so far, all keys

    def _admit(self, key: str) -> bool:
        now = self.clock()
        with self._lock:
            w = self._windows.get(key)
            if w is None or now - w[0] >= self.interval:
                if w is not None and w[2]:
                    self.logger.warning("%d more %r messages in the last %.0f s not logged",
                                        w[2], key, now - w[0])
                if len(self._windows) > 1000:  # keys are codes, but stay bounded anyway
                    self._windows.clear()
                w = self._windows[key] = [now, 0, 0]
            if w[1] < self.burst:
                w[1] += 1
                return True
            w[2] += 1
            self.suppressed += 1
            return False

    def log(self, level: int, key: str, fmt: str, *args: object,
            exc_info: bool = False) -> bool:
        """Log ``fmt % args`` on one line if ``key`` is under its rate; True if logged.
        ``exc_info`` adds the traceback (for bugs, not for peers' mistakes)."""
        if not self.logger.isEnabledFor(level) or not self._admit(key):
            return False
        self.logger.log(level, "%s", one_line(fmt % args if args else fmt), exc_info=exc_info)
        return True

    def warn(self, key: str, fmt: str, *args: object) -> bool:
        return self.log(logging.WARNING, key, fmt, *args)

    def info(self, key: str, fmt: str, *args: object) -> bool:
        return self.log(logging.INFO, key, fmt, *args)

    def exception(self, key: str, fmt: str, *args: object) -> bool:
        return self.log(logging.ERROR, key, fmt, *args, exc_info=True)
