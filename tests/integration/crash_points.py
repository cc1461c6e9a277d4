"""Crash points of real processes (`rpc.machines.HoldPoints`): a process started with
DYNALAB_HOLD_AT holds at a named point of a machine and announces it in DYNALAB_HOLD_DIR; the
test then kills it there with SIGKILL (`KillAt`), or acts and lets it go (`held_at`, `let_go`).
Nothing in the process kills itself."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from types import TracebackType

from dynalab.cluster import ServiceProcess
from rpc.machines import HOLD_AT_ENV, HOLD_DIR_ENV

HOLD_ENV = (HOLD_AT_ENV, HOLD_DIR_ENV)
HELD_WAIT_SECONDS = 60.0  # For a process to reach the point it is held at.
_POLL_SECONDS = 0.02


def hold_environment(directory: Path, *points: str, machine: str = "move") -> dict[str, str]:
    """The environment that holds a process at each of `points` of `machine`."""
    return {
        HOLD_AT_ENV: ",".join(f"{machine}:{point}" for point in points),
        HOLD_DIR_ENV: str(directory),
    }


def held_file(directory: Path, point: str, machine: str = "move") -> Path:
    return directory / f"{machine}-{point}.held"


def held_at(directory: Path, point: str, machine: str = "move") -> None:
    """Wait until a process holds at `point`."""
    held = held_file(directory, point, machine)
    deadline = time.monotonic() + HELD_WAIT_SECONDS
    while not held.exists():
        assert time.monotonic() < deadline, f"no process reached {machine}:{point}"
        time.sleep(_POLL_SECONDS)


def let_go(directory: Path, point: str, machine: str = "move") -> None:
    (directory / f"{machine}-{point}.go").touch()


class KillAt:
    """Kill `process` with SIGKILL as soon as it holds at `point` (from a thread, while the
    test waits on the call that leads it there); `killed` says whether it did."""

    def __init__(
        self, process: ServiceProcess, directory: Path, point: str, machine: str = "move"
    ) -> None:
        self.process = process
        self.held = held_file(directory, point, machine)
        self.killed = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        deadline = time.monotonic() + HELD_WAIT_SECONDS
        while not self._stop.is_set() and time.monotonic() < deadline:
            if self.held.exists():
                self.process.kill()
                self.killed = True
                return
            time.sleep(_POLL_SECONDS)

    def __enter__(self) -> KillAt:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join(timeout=HELD_WAIT_SECONDS)
