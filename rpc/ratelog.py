"""Log expected failures as one line each, at most once per interval per kind of failure.

When a storage node is down, every request routed to it fails the same way (connection refused,
ServiceUnavailable). Those are expected, and a traceback for each would bury the log: a router with
a node down for 90 s used to write about 1,100 lines. `RateLimitedLog` writes the first such line
for a key (say, the node's address) and then at most one line per interval for that key, saying how
many it held back since the last one. Full tracebacks stay for what is not expected: bugs.

The clock is passed in (a `time.monotonic`-like callable), so tests need not wait.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from core import limits


class RateLimitedLog:
    """Warnings through `logger`, at most one per `interval_s` for each key."""

    def __init__(
        self,
        logger: logging.Logger,
        interval_s: float = limits.LOG_REPEAT_SECONDS_MIN,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger = logger
        self.interval_s = interval_s
        self.clock = clock
        self._last: dict[str, float] = {}  # When the key's last line was written.
        self._held: dict[str, int] = {}  # Lines held back for the key since then.

    def warning(self, key: str, message: str) -> bool:
        """Log `message` unless a line for `key` was logged less than the interval ago; return
        whether it was logged. A logged line says how many were held back before it."""
        now = self.clock()
        last = self._last.get(key)
        if last is not None and now - last < self.interval_s:
            self._held[key] = self._held.get(key, 0) + 1
            return False
        if len(self._last) >= limits.LOG_REPEAT_KEYS_MAX and key not in self._last:
            # Keys are node addresses and the like, a bounded set; should they not be, forget the
            # oldest rather than grow without bound.
            oldest = min(self._last, key=self._last.__getitem__)
            del self._last[oldest]
            self._held.pop(oldest, None)
        held = self._held.pop(key, 0)
        suffix = ""
        if held and last is not None:
            suffix = f" ({held} more like it in the last {now - last:.0f} s)"
        self.logger.warning("%s%s", message, suffix)
        self._last[key] = now
        return True
