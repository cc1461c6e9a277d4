"""A seeded sweep over the move machine's crash points: the source or the target dies between
every pair of effects of a move (`rpc.machines` crash points, the states the move's record
reaches), under writes, and the source dies again while its restart drives the record on.

Each seed picks one case (who dies at which point, and where a second death lands) and the
network's faults (`tests.sim.sweep`: every case runs from several seeds); a failing seed replays
with `python -m tests.sim.sweep move SEED`. After every case: every acknowledged write is there
once and nothing nobody wrote, every counter equals its acknowledged increments (give or take those
whose outcome the client never learnt), exactly one node holds the partition and serves it, the
catalog names that node, its counters match its items, and no move record nor move consumer is
left.
"""

from __future__ import annotations

import asyncio

import pytest

from core import limits
from core.errors import DynamoError
from core.machines.move import NAME as MOVE
from core.machines.move import MoveState
from dynalab.sim.cluster import SimCluster
from storagenode.move import MOVE_CONSUMER
from tests.sim.crash import Died
from tests.sim.sweep import Sweep, Writes, check, filled_table, through_deaths
from tests.sim.test_moves import counted, holders, moved_partition

# The points between two effects of a move that succeeds (its states before each effect).
FORWARD = [
    state.value.lower()
    for state in (
        MoveState.PLANNED,
        MoveState.INCOMING,
        MoveState.PINNED,
        MoveState.COPIED,
        MoveState.FENCED,
        MoveState.DRAINED,
        MoveState.SWITCHED,
        MoveState.ACTIVE,
    )
]
BEFORE_SWITCH = FORWARD[:6]
# What a restarted source's record reaches first, and then, from each point it died at.
RECOVERY = {
    **{point: ("rolling_back", "unfenced") for point in BEFORE_SWITCH},
    # Drained, not switched: its restart reads the catalog back, and rolls back.
    "drained": ("switching", "rolling_back", "unfenced"),
    "switched": ("switched", "active"),
    "active": ("active",),
}
# The points before an effect that calls the target: a target that died there fails it.
TARGET_CALLED = ["planned", "incoming", "pinned", "copied", "fenced"]
# (who dies first, where; where the source dies next, or None). A target killed makes the
# source's next call to it fail, and its rollback passes "rolling_back" and "unfenced".
CASES: list[tuple[str, str, str | None]] = [
    *(("source", point, None) for point in FORWARD),
    *(("source", point, second) for point in FORWARD for second in RECOVERY[point]),
    *(("target", point, None) for point in FORWARD),
    *(
        ("target", point, second)
        for point in TARGET_CALLED
        for second in ("rolling_back", "unfenced")
    ),
]


class Deaths:
    """The driver's crash points for one case: each death in turn, at its point of the move."""

    def __init__(
        self, cluster: SimCluster, source: str, target: str, case: tuple[str, str, str | None]
    ) -> None:
        who, first, second = case
        self.cluster = cluster
        self.target = target
        self.deaths = [(who, first)] + ([] if second is None else [("source", second)])
        self.died: list[tuple[str, str]] = []
        self.source = source

    def install(self) -> None:
        self.cluster.movers[self.source].driver.crash_points = self

    async def reached(self, machine: str, point: str) -> None:
        if machine != MOVE or not self.deaths or self.deaths[0][1] != point:
            return
        who, _ = death = self.deaths.pop(0)
        self.died.append(death)
        if who == "source":
            raise Died(point)
        # The target restarts between two steps: the source's next call meets it anew (its
        # copy kept, what it held in memory gone) or is cut while it restarts.
        self.cluster.network.cut(self.cluster.addresses[self.target])
        await self.cluster.restart_node(self.target)
        asyncio.get_running_loop().call_later(
            0.05, self.cluster.network.heal, self.cluster.addresses[self.target]
        )


async def settle_source(cluster: SimCluster, sweep: Deaths) -> None:
    """Drive what every node left (the source's record first), restarting a source that dies
    while it does."""

    async def drive() -> None:
        for mover in list(cluster.movers.values()):
            await mover.settle()

    await through_deaths(cluster, sweep.source, drive, sweep.install, len(sweep.deaths) + 1)


async def scenario(cluster: SimCluster, case: tuple[str, str, str | None], label: str) -> None:
    table, log = await filled_table(cluster, "Swept", 40)
    partition_id, source, target = await moved_partition(cluster, "Swept")
    async with Writes(cluster, "Swept", log, label):
        sweep = Deaths(cluster, source, target, case)
        sweep.install()
        try:
            await cluster.move("Swept", partition_id, target)
        except Died:
            await cluster.restart_node(source)
            sweep.install()
        except DynamoError:
            pass  # The move failed and rolled back (its target died).
        await asyncio.sleep(0.1)
        await settle_source(cluster, sweep)
    who, first, second = case
    deaths = [(who, first)] + ([] if second is None else [("source", second)])
    assert sweep.died == deaths, f"{label}: died {sweep.died}"
    # A copy its source could not reach is dropped once abandoned.
    await asyncio.sleep(limits.MOVE_ABANDONED_SECONDS + 1)
    await settle_source(cluster, sweep)
    current = await cluster.routers[0].read_table("Swept")
    assert current is not None
    owner = current.partition(partition_id).node
    held = holders(cluster, table.id, partition_id)
    assert list(held) == [owner], f"{label}: held by {sorted(held)}, owner {owner}"
    assert held[owner].serving and held[owner].move is None, label
    if who == "source":
        # The record decides: before the switch the move rolls back, after it it finishes.
        expected = source if first in BEFORE_SWITCH else target
        assert owner == expected, f"{label}: owner {owner}"
    assert counted(cluster, owner, table.id, partition_id) == (
        held[owner].item_count,
        held[owner].size_bytes,
    ), f"{label}: the counters match the items"
    consumers = cluster.nodes[owner].feeds.consumers((table.id, partition_id))
    assert MOVE_CONSUMER not in consumers, label
    assert all(
        partition.move is None
        for node in cluster.nodes.values()
        for partition in node.partitions.values()
    ), f"{label}: a move record was left"
    await check(cluster, "Swept", log, label)


SWEEP = Sweep("move", CASES, scenario)


@pytest.mark.parametrize("seed", SWEEP.seeds())
def test_a_move_killed_between_any_two_effects(seed: int) -> None:
    SWEEP.run(seed)


def test_the_sweep_covers_every_state_with_an_effect() -> None:
    """Every state of the move machine that has an effect is a point some case dies at."""
    named = {point for _, first, second in CASES for point in (first, second) if point}
    with_effects = {
        state.value.lower()
        for state in MoveState
        if state not in (MoveState.DONE, MoveState.ROLLED_BACK, MoveState.REGISTERED)
    }
    # REGISTERED is an index partition's (tests/sim/test_index_moves.py kills at its points).
    assert with_effects <= named, with_effects - named
