"""The driver's crash points (`rpc.machines.CrashPoints`) as a simulation sets them: a process
"dies" at one named point of one machine, and may be held at others (a test's hand)."""

from __future__ import annotations

from collections.abc import Callable

from rpc.machines import CrashPoints, NoCrashPoints


class Died(BaseException):
    """The process died here (a BaseException: nothing of its driver runs after it)."""


class DieAt:
    """Call `die` with the point when `machine` reaches `point`; hold at others through `hold`."""

    def __init__(
        self,
        machine: str,
        point: str | None,
        die: Callable[[str], None],
        hold: CrashPoints | None = None,
    ) -> None:
        self.machine = machine
        self.point = point
        self.die = die
        self.hold = NoCrashPoints() if hold is None else hold
        self.reached_points: list[str] = []

    async def reached(self, machine: str, point: str) -> None:
        if machine == self.machine:
            self.reached_points.append(point)
            if point == self.point:
                self.die(point)
        await self.hold.reached(machine, point)
