"""`BackgroundTask`: one coroutine a service runs beside its requests, from `start` to `close`.

The services' timers (the router's catalog refresh, the dashboard's sampler, a node's splitter)
share this lifecycle; each loop's own body says what it does each round.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from typing import Any


class BackgroundTask:
    """Runs `run()` as a task named `name` once started, until closed.

    Starting a running task and closing a stopped one change nothing, so a service may start and
    close it from its own idempotent lifecycle.
    """

    def __init__(self, name: str, run: Callable[[], Coroutine[Any, Any, None]]) -> None:
        self.name = name
        self._run = run
        self._task: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        return self._task is not None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=self.name)

    async def close(self) -> None:
        """Cancel the task and wait for it to end."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
