"""The one driver of every lifecycle machine (`core.machines`), and its crash points.

`Driver.drive` steps a machine with an event, persists the record it returns, then carries out
its effect through the flow's handler and steps the machine with the result, until the record
has ended. A record is persisted before its effect is carried out, so a process that dies
anywhere leaves a record whose next effect has not happened or is idempotent to repeat, and
recovery is "load the record, drive it with RESTARTED". Each state of a machine has at most one
effect: the crash points between two effects are exactly its recorded states.

Crash points are the driver's: after each record is persisted and before its effect, it awaits
`CrashPoints.reached(machine, state)`. The simulator implements it from its seed (a process
dies there); real processes use `HoldPoints`, read from one setting, which holds the process at
the named point and tells the test, which kills it with SIGKILL or lets it go. Nothing in
production code kills its own process.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
from collections.abc import Awaitable, Callable, Mapping
from typing import Generic, Protocol, TypeVar

from core import limits
from core.errors import DynamoError
from core.machines import FAILED, Effect, Event, Machine

logger = logging.getLogger(__name__)

R = TypeVar("R")

# One setting for every machine's crash points in real-process tests: DYNALAB_HOLD_AT names
# points as `<machine>:<point>` (comma-separated), and a process reaching one creates
# `<machine>-<point>.held` in DYNALAB_HOLD_DIR and waits until `<machine>-<point>.go` is there
# (at most MACHINE_HOLD_SECONDS_MAX): the test acts at that exact point (kills the process, or
# another one) and lets it go.
HOLD_AT_ENV = "DYNALAB_HOLD_AT"
HOLD_DIR_ENV = "DYNALAB_HOLD_DIR"
_HOLD_POLL_SECONDS = 0.02

Handler = Callable[[R, Effect], Awaitable[Event]]


class CrashPoints(Protocol):
    async def reached(self, machine: str, point: str) -> None:
        """Called at each point where the process may die: between two effects of `machine`
        (`point` the state just recorded), or at a point a flow names (a move's target)."""
        ...


class NoCrashPoints:
    async def reached(self, machine: str, point: str) -> None:
        return None


class HoldPoints:
    """Crash points for real-process tests: hold the process at the points DYNALAB_HOLD_AT
    names, announced in DYNALAB_HOLD_DIR, until the test lets it go (or kills it)."""

    def __init__(self, points: frozenset[str], directory: str | None) -> None:
        self.points = points
        self.directory = directory

    @classmethod
    def from_env(cls) -> CrashPoints:
        named = os.environ.get(HOLD_AT_ENV, "")
        points = frozenset(point.strip() for point in named.split(",") if point.strip())
        directory = os.environ.get(HOLD_DIR_ENV)
        if not points or directory is None:
            return NoCrashPoints()
        return cls(points, directory)

    async def reached(self, machine: str, point: str) -> None:
        if f"{machine}:{point}" not in self.points or self.directory is None:
            return
        name = f"{machine}-{point}"
        held = os.path.join(self.directory, f"{name}.held")
        go = os.path.join(self.directory, f"{name}.go")
        with open(held, "w") as marker:
            marker.write(str(os.getpid()))
        logger.warning("%s: %s holds until %s", HOLD_AT_ENV, name, go)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + limits.MACHINE_HOLD_SECONDS_MAX
        while not os.path.exists(go) and loop.time() < deadline:
            await asyncio.sleep(_HOLD_POLL_SECONDS)


class Driver(Generic[R]):
    """Runs records of one machine: `handlers` carry out its effects (by the effect's step),
    `persist` stores a record (and clears it once it has ended), `crash_points` are told each
    point between two effects, `clock` gives the `now` each step takes (and measures an effect's
    retries against its policy's deadline), `rng` draws the retries' jittered pauses (default:
    fresh entropy; a simulation passes a seeded one)."""

    def __init__(
        self,
        machine: Machine[R],
        handlers: Mapping[str, Handler[R]],
        persist: Callable[[R], Awaitable[None]],
        crash_points: CrashPoints,
        clock: Callable[[], float],
        rng: random.Random | None = None,
    ) -> None:
        self.machine = machine
        self.handlers = handlers
        self.persist = persist
        self.crash_points = crash_points
        self.clock = clock
        self.rng = random.Random() if rng is None else rng

    async def drive(self, record: R, event: Event) -> tuple[R, Exception | None]:
        """Step `record` with `event` and carry out effects until it has ended or a step keeps it
        without an effect; that record and the first failure met on the way (the caller reports
        it). A failure of `persist`,
        of a step (a bug, or a machine giving up), or a cancellation ends the run with the
        last persisted record kept, for a later RESTARTED."""
        failure: Exception | None = None
        while True:
            record, effects = self.machine.step(record, event, self.clock())
            assert len(effects) <= 1, "one effect per state: a crash point between every two"
            await self.persist(record)
            if self.machine.finished(record) or not effects:
                # Ended, or kept as it is for a later RESTARTED (`core.machines`).
                return record, failure
            await self.crash_points.reached(self.machine.name, self.machine.label(record))
            event, error = await self._carry_out(record, effects[0])
            if failure is None:
                failure = error

    async def _carry_out(self, record: R, effect: Effect) -> tuple[Event, Exception | None]:
        """The event of `effect`'s result, and its error if it failed."""
        if effect.wait_seconds > 0:
            await asyncio.sleep(effect.wait_seconds)
        handler = self.handlers[effect.step]
        started = self.clock()
        attempt = 0
        while True:
            try:
                return await handler(record, effect), None
            except Exception as error:
                pause = None
                if effect.retry is not None and isinstance(error, effect.retry_on):
                    elapsed = max(0.0, self.clock() - started)
                    # A fixed pause draws nothing: the source's draws stay those of the jitters.
                    draw = self.rng.random() if effect.retry.jitter > 0 else 0.0
                    pause = effect.retry.pause(attempt, elapsed, draw)
                if pause is not None:
                    if attempt == 0:
                        logger.info("%s %s waits: %s", self.machine.name, effect.step, error)
                    attempt += 1
                    await asyncio.sleep(pause)
                    continue
                described = _describe(error)
                if effect.best_effort:
                    logger.warning("%s %s: %s", self.machine.name, effect.step, described)
                    return Event(effect.done), None
                if not isinstance(error, DynamoError | OSError):
                    logger.exception("%s %s failed on a bug", self.machine.name, effect.step)
                return Event(FAILED, error=described), error


def _describe(error: Exception) -> str:
    message = error.message if isinstance(error, DynamoError) else str(error)
    return f"{type(error).__name__}: {message}"
