"""The seeded sweeps' one helper: a sweep is a list of crash points of a machine and a scenario.

A machine's sweep (`tests/sim/test_*_sweep.py`) declares its cases (where a process dies, and
where a second death lands) and a scenario that plays one case on a fresh `SimCluster`; `Sweep`
gives it its seeds, runs a seed, names the one command that replays it, and runs a wider range
from the command line:

    python -m tests.sim.sweep split 17          # one seed, as CI ran it
    python -m tests.sim.sweep move 0-999        # a wider sweep: prints every failing seed

A seed picks its case (`seed % len(cases)`) and the network's and routers' randomness, so CI runs
every case `seeds_per_case` times with different interleavings, and one number replays a run.

The rest is what several sweeps share: a client workload of puts and counter increments beside a
scanner (`Writes`), the log of what the clients were told (`WriteLog`), and the check that the
table holds every acknowledged write once, nothing nobody wrote, and counters within their
acknowledged and unknown increments (`check`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import sys
import traceback
from collections.abc import Awaitable, Callable, Sequence
from types import TracebackType
from typing import Any, Generic, TypeVar

from core.catalog import TableDef
from core.errors import DynamoError
from dynalab.lab.sweep import seeds_of
from dynalab.sim.cluster import SimCluster, run, storage_key
from router import items
from rpc.local import Faults
from tests.sim.crash import Died

C = TypeVar("C")
COUNTERS = 4
# The network's delays under a sweep's writes: calls interleave, none is lost.
SWEEP_FAULTS = Faults(delay=0.5, delay_seconds_max=0.003)
# How many times CI runs each case, each time from another seed (`Sweep.seeds_per_case`).
SEEDS_PER_CASE = 2


def item(n: int) -> dict[str, Any]:
    """Item `n` of a table keyed by pk (S) and sk (N): seven item collections, sizes varied."""
    return {"pk": {"S": f"k{n % 7}"}, "sk": {"N": str(n)}, "v": {"S": "x" * (1 + n % 50)}}


@dataclasses.dataclass
class WriteLog:
    """What the clients were told: the items there before, each put acknowledged or failed
    (its outcome unknown), each counter's acknowledged and unknown increments, and how many
    scans finished."""

    base: list[dict[str, Any]]
    acked: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    failed: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    increments: list[int] = dataclasses.field(default_factory=lambda: [0] * COUNTERS)
    unknown: list[int] = dataclasses.field(default_factory=lambda: [0] * COUNTERS)
    scans: int = 0


async def filled_table(
    cluster: SimCluster, name: str, count: int, *, routers: int = 1
) -> tuple[TableDef, WriteLog]:
    """Table `name` (`SimCluster.create_table`) holding items 0 to `count` - 1, put through the
    first `routers` routers in turn: its record, and a write log with those items as its base."""
    await cluster.create_table(name)
    base = [item(n) for n in range(count)]
    for number, entry in enumerate(base):
        await cluster.put(name, entry, router=number % routers)
    table = await cluster.routers[0].read_table(name)
    assert table is not None, f"seed {cluster.seed}: {name} was not created"
    return table, WriteLog(base)


async def workload(cluster: SimCluster, name: str, stop: asyncio.Event, log: WriteLog) -> None:
    """Puts of new items and conditional ADDs of counters through router 0 until `stop`."""
    n = 0
    while not stop.is_set():
        n += 1
        entry = item(10_000 + n)
        try:
            await items.put_item(cluster.routers[0], {"TableName": name, "Item": entry})
            log.acked.append(entry)
        except DynamoError:
            log.failed.append(entry)
        counter = n % COUNTERS
        try:
            await items.update_item(
                cluster.routers[0],
                {
                    "TableName": name,
                    "Key": {"pk": {"S": "counter"}, "sk": {"N": str(counter)}},
                    "UpdateExpression": "ADD c :one",
                    "ConditionExpression": "attribute_not_exists(c) OR c < :max",
                    "ExpressionAttributeValues": {":one": {"N": "1"}, ":max": {"N": "1000000"}},
                },
            )
            log.increments[counter] += 1
        except DynamoError:
            log.unknown[counter] += 1
        await asyncio.sleep(0.001)


async def scanner(
    cluster: SimCluster, name: str, stop: asyncio.Event, log: WriteLog, label: str
) -> None:
    """Scans through router 1 until `stop`: each sees every item acknowledged before it began,
    and none twice."""
    while not stop.is_set():
        before = {storage_key(e) for e in (*log.base, *log.acked)}
        try:
            found = await cluster.scan_all(name, router=1, Limit=11)
        except DynamoError:
            # A page refused past the routers' retries: the client retries it, after a pause
            # (a node cut off refuses at once, and virtual time only passes while tasks wait).
            await asyncio.sleep(0.001)
            continue
        keys = [storage_key(e) for e in found]
        assert len(keys) == len(set(keys)), f"{label}: a scan saw an item twice"
        assert before <= set(keys), f"{label}: a scan missed an acknowledged item"
        log.scans += 1


@dataclasses.dataclass
class Writes:
    """The sweep's clients, under `faults`, while the block it enters lasts: `workload` through
    router 0 and `scanner` through router 1, running `lead_seconds` before the block's body (so
    writes are in flight when something dies); the exit stops both and raises what either
    raised, and checks that scans finished."""

    cluster: SimCluster
    name: str
    log: WriteLog
    label: str
    faults: Faults = SWEEP_FAULTS
    lead_seconds: float = 0.03
    _stop: asyncio.Event = dataclasses.field(init=False, default_factory=asyncio.Event)
    _tasks: list[asyncio.Task[None]] = dataclasses.field(init=False, default_factory=list)

    async def __aenter__(self) -> Writes:
        self.cluster.faults(self.faults)
        self._tasks = [
            asyncio.create_task(workload(self.cluster, self.name, self._stop, self.log)),
            asyncio.create_task(scanner(self.cluster, self.name, self._stop, self.log, self.label)),
        ]
        await asyncio.sleep(self.lead_seconds)
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if kind is None:
            self._stop.set()
            for task in self._tasks:
                await task
            assert self.log.scans > 0, f"{self.label}: no scan finished"
        else:
            # The case failed already: end the clients without hiding its error.
            self._stop.set()
            await asyncio.gather(*self._tasks, return_exceptions=True)


async def through_deaths(
    cluster: SimCluster,
    node: str,
    drive: Callable[[], Awaitable[None]],
    restarted: Callable[[], None],
    deaths: int,
) -> None:
    """Run `drive` (what a node runs to recover its records) until it ends, restarting `node`
    each time it dies meanwhile (`Died`; then `restarted`, which gives the new process its crash
    points), at most `deaths` times."""
    for _ in range(deaths + 1):
        try:
            await drive()
            return
        except Died:
            await cluster.restart_node(node)
            restarted()
    raise AssertionError(f"seed {cluster.seed}: {node} died more often than its case says")


async def check(cluster: SimCluster, name: str, log: WriteLog, label: str) -> None:
    """Every acknowledged put is there once, nothing nobody wrote, and each counter holds its
    acknowledged increments, give or take those whose outcome the client never learnt."""
    found = await cluster.scan_all(name, Limit=9)
    keys = [storage_key(e) for e in found]
    assert len(keys) == len(set(keys)), f"{label}: an item was scanned twice"
    present = set(keys)
    for entry in log.acked:
        assert storage_key(entry) in present, f"{label}: an acknowledged put was lost"
    allowed = {storage_key(e) for e in (*log.acked, *log.failed, *log.base)}
    counters = {storage_key(e) for e in found if e["pk"] == {"S": "counter"}}
    assert present - counters <= allowed, f"{label}: an item nobody wrote"
    for counter in range(COUNTERS):
        key = {"pk": {"S": "counter"}, "sk": {"N": str(counter)}}
        reply = await items.get_item(
            cluster.routers[0], {"TableName": name, "Key": key, "ConsistentRead": True}
        )
        value = int(reply.get("Item", {}).get("c", {"N": "0"})["N"])
        acked, unknown = log.increments[counter], log.unknown[counter]
        assert acked <= value <= acked + unknown, (
            f"{label}: counter {counter} is {value}, acknowledged {acked} (+{unknown} unknown)"
        )


@dataclasses.dataclass(frozen=True)
class Sweep(Generic[C]):
    """A machine's sweep: `scenario(cluster, case, label)` plays one case on a fresh cluster;
    seed `s` plays case `s % len(cases)`. `options` are the cluster's (`SimCluster`)."""

    name: str  # As `python -m tests.sim.sweep NAME` finds it: tests/sim/test_NAME_sweep.py.
    cases: Sequence[C]
    scenario: Callable[[SimCluster, C, str], Awaitable[None]]
    seeds_per_case: int = SEEDS_PER_CASE
    options: dict[str, Any] = dataclasses.field(default_factory=dict)

    def seeds(self) -> list[int]:
        """The seeds CI runs: every case, `seeds_per_case` times."""
        return list(range(len(self.cases) * self.seeds_per_case))

    def case(self, seed: int) -> C:
        return self.cases[seed % len(self.cases)]

    def replay(self, seed: int) -> str:
        return f"python -m tests.sim.sweep {self.name} {seed}"

    def run(self, seed: int) -> None:
        """Play seed `seed`'s case; if it fails, print the one command that replays it."""
        case = self.case(seed)
        label = f"{self.name} seed {seed} {case}"
        run(
            seed,
            lambda cluster: self.scenario(cluster, case, label),
            replay=self.replay(seed),
            **self.options,
        )


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m tests.sim.sweep NAME SEEDS`: run those seeds of tests/sim/test_NAME_sweep.py
    (SEEDS as 17, 0-999 or 3,17), print each failing one with its error, then the list."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2:
        print("usage: python -m tests.sim.sweep NAME SEEDS   (e.g. split 0-299)", file=sys.stderr)
        return 2
    name, seeds = args
    sweep: Sweep[Any] = importlib.import_module(f"tests.sim.test_{name}_sweep").SWEEP
    failing = []
    for seed in seeds_of(seeds):
        try:
            sweep.run(seed)
        except Exception:
            traceback.print_exc()
            failing.append(seed)
    print(f"{name}: {len(failing)} failing seeds {failing}" if failing else f"{name}: all passed")
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main())
