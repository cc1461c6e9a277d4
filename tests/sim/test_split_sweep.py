"""A seeded sweep over the split machine's crash points: the splitting node dies between every
pair of effects of a split (`rpc.machines` crash points, the states the split's record reaches),
and once more while its restart drives the record on, under writes, for a table partition and a
global index partition; one case more dies after the catalog recorded the split and before the
node recorded that it had (the record's outcome, read back).

Each seed picks one case (which partition, where the node dies, where a second death lands) and the
network's faults (`tests.sim.sweep`: every case runs from several seeds); a failing seed replays
with `python -m tests.sim.sweep split SEED`. After every case: every acknowledged write is there
once and nothing nobody wrote (a table's counters equal their acknowledged increments, give or take
those whose outcome the client never learnt; an index holds exactly the entries applied), every key
is served by exactly one partition, the nodes hold exactly the partitions the catalog names as
serving, at its epochs, the parent split or not as the point it died at says, every counter matches
a walk of the store, and no split record is left.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest

from core import splits
from core.catalog import PartitionDef, TableDef
from core.errors import StaleEpoch
from core.machines.split import NAME as SPLIT
from core.machines.split import SplitState
from dynalab.sim.cluster import SimCluster
from storagenode.split import Splitter
from tests.sim.crash import Died
from tests.sim.sweep import SWEEP_FAULTS, Sweep, Writes, check, filled_table, through_deaths
from tests.sim.test_index_splits import apply, entry, hot_partition, index_query, walked
from tests.sim.test_moves import counted

# The points between two effects of a split that succeeds (its states before each effect).
FORWARD = [
    state.value.lower()
    for state in (
        SplitState.PLANNED,
        SplitState.PINNED,
        SplitState.CHOSEN,
        SplitState.RECORDED,
        SplitState.COUNTED,
    )
]
BEFORE_RECORD = FORWARD[:3]
# Dies once the catalog's compare-and-set returned, before the record says RECORDED.
APPLIED = "record-applied"
# Where a restarted node's record passes, from each point it died at (a second death).
RECOVERY: dict[str, tuple[str, ...]] = {
    "planned": (),
    "pinned": (),
    "chosen": ("deciding",),
    APPLIED: ("deciding", "recorded", "counted"),
    "recorded": ("recorded", "counted"),
    "counted": ("counted",),
}
KINDS = ("table", "index")
CASES: list[tuple[str, str, str | None]] = [
    (kind, point, second)
    for kind in KINDS
    for point in (*FORWARD, APPLIED)
    for second in (None, *RECOVERY[point])
]


class Deaths:
    """The driver's crash points for one case: each death of the splitting node in turn."""

    def __init__(self, cluster: SimCluster, node: str, case: tuple[str, str, str | None]) -> None:
        _, first, second = case
        self.cluster = cluster
        self.node = node
        self.deaths = [first] + ([] if second is None else [second])
        self.died: list[str] = []

    def install(self) -> Splitter:
        splitter = self.cluster.splitters[self.node]
        splitter.driver.crash_points = self
        if self.deaths and self.deaths[0] == APPLIED:
            change = splitter.change_table

            async def applied_then_die(name: str, changed: Any) -> TableDef:
                after = await change(name, changed)
                self._die(APPLIED)
                return after

            splitter.change_table = applied_then_die  # type: ignore[method-assign]
        return splitter

    async def reached(self, machine: str, point: str) -> None:
        if machine == SPLIT and self.deaths and self.deaths[0] == point:
            self._die(point)

    def _die(self, point: str) -> None:
        self.died.append(self.deaths.pop(0))
        raise Died(point)


async def recover(cluster: SimCluster, sweep: Deaths) -> None:
    """Drive what the splitting node left, restarting it each time it dies while it does."""

    async def drive() -> None:
        for splitter in list(cluster.splitters.values()):
            await splitter.recover()

    await through_deaths(cluster, sweep.node, drive, sweep.install, len(sweep.deaths) + 1)


def lineage(table: TableDef, storage_id: str) -> tuple[tuple[PartitionDef, ...], ...]:
    found = splits.lineage(table, storage_id)
    assert found is not None
    return found


def check_partitions(
    cluster: SimCluster,
    table: TableDef,
    storage_id: str,
    parent: PartitionDef,
    split: bool,
    label: str,
) -> None:
    """The nodes hold exactly the partitions the catalog serves, at its epochs, tiling the key
    space once; the parent split or not; no split record left; counters match the store."""
    serving, _ = lineage(table, storage_id)
    held = {
        partition_id: (node_id, partition)
        for node_id, node in cluster.nodes.items()
        for (held_id, partition_id), partition in node.partitions.items()
        if held_id == storage_id
    }
    assert sorted(held) == sorted(p.id for p in serving), f"{label}: held {sorted(held)}"
    for definition in serving:
        node_id, partition = held[definition.id]
        assert (node_id, partition.epoch) == (definition.node, definition.epoch), label
        assert partition.serving and partition.split is None, f"{label}: {definition.id}"
    ranges = sorted((held[p.id][1].start, held[p.id][1].end) for p in serving)
    assert ranges[0][0] == b"" and ranges[-1][1] is None, f"{label}: {ranges}"
    for (_, end), (start, _) in itertools.pairwise(ranges):
        assert end == start, f"{label}: a key served twice or by none: {ranges}"
    children = splits.children_of(table, parent.id, storage_id)
    assert (children is not None) == split, f"{label}: split {children is not None}"
    assert (parent.id in held) != split, label
    for node in cluster.nodes.values():
        for partition in node.partitions.values():
            assert partition.split is None, f"{label}: a split record was left"


async def table_case(cluster: SimCluster, case: tuple[str, str, str | None], label: str) -> None:
    _, first, second = case
    table, log = await filled_table(cluster, "Swept", 60, routers=2)
    parent = max(
        table.partitions,
        key=lambda p: cluster.nodes[p.node].partitions[table.id, p.id].item_count,
    )
    async with Writes(cluster, "Swept", log, label):
        sweep = Deaths(cluster, parent.node, case)
        await split_and_recover(cluster, sweep, table.id, parent)
    assert sweep.died == [first] + ([] if second is None else [second]), label
    after = await cluster.routers[0].read_table("Swept")
    assert after is not None
    # The split happened once the catalog recorded it; before, it is forgotten.
    check_partitions(cluster, after, table.id, parent, first not in BEFORE_RECORD, label)
    for definition in after.partitions:
        partition = cluster.nodes[definition.node].partitions[table.id, definition.id]
        assert counted(cluster, definition.node, table.id, definition.id) == (
            partition.item_count,
            partition.size_bytes,
        ), f"{label}: {definition.id}'s counters match its items"
    await check(cluster, "Swept", log, label)


async def index_case(cluster: SimCluster, case: tuple[str, str, str | None], label: str) -> None:
    _, first, second = case
    table = await cluster.create_indexed("Swept")
    await apply(cluster, "Swept", [(n + 1, None, entry(n)) for n in range(40)])
    index_id = table.indexes[0].table_id
    assert index_id is not None
    parent = hot_partition(table)
    applied: list[int] = list(range(40))
    stop = asyncio.Event()

    async def index_writes() -> None:
        """The replicator's part: each change applied once routed to the partition that holds
        its key now, sent again (same seq: a replay is skipped) while refused."""
        number = 40
        while not stop.is_set():
            for _ in range(100):
                try:
                    await apply(cluster, "Swept", [(number + 1, None, entry(number))])
                    break
                except StaleEpoch:
                    await asyncio.sleep(0.005)  # Routed on a parent: read the catalog again.
            else:
                raise AssertionError(f"{label}: change {number} was refused 100 times")
            applied.append(number)
            number += 1
            await asyncio.sleep(0.002)

    cluster.faults(SWEEP_FAULTS)
    writes = asyncio.create_task(index_writes())
    await asyncio.sleep(0.03)
    sweep = Deaths(cluster, parent.node, case)
    await split_and_recover(cluster, sweep, index_id, parent)
    stop.set()
    await writes
    assert sweep.died == [first] + ([] if second is None else [second]), label
    after = await cluster.routers[0].read_table("Swept")
    assert after is not None
    check_partitions(cluster, after, index_id, parent, first not in BEFORE_RECORD, label)
    for definition in lineage(after, index_id)[0]:
        partition = cluster.nodes[definition.node].partitions[index_id, definition.id]
        assert walked(cluster, definition.node, index_id, definition.id) == (
            partition.item_count,
            partition.size_bytes,
        ), f"{label}: {definition.id}'s counters match its entries"
    expected = [str(number) for number in sorted(applied)]
    assert await index_query(cluster, "Swept", 0) == expected, label
    assert await index_query(cluster, "Swept", 1) == expected, label


async def scenario(cluster: SimCluster, case: tuple[str, str, str | None], label: str) -> None:
    await (table_case if case[0] == "table" else index_case)(cluster, case, label)


SWEEP = Sweep("split", CASES, scenario)


@pytest.mark.parametrize("seed", SWEEP.seeds())
def test_a_split_killed_between_any_two_effects(seed: int) -> None:
    SWEEP.run(seed)


async def split_and_recover(
    cluster: SimCluster, sweep: Deaths, storage_id: str, parent: PartitionDef
) -> None:
    """Split `parent` on its node, which dies where the case says, is restarted, and drives its
    record on (dying again where the case says)."""
    splitter = sweep.install()
    try:
        await splitter.split(storage_id, parent.id)
        raise AssertionError(f"the split of {parent.id} ended without its node dying")
    except Died:
        await cluster.restart_node(sweep.node)
        sweep.install()
    await asyncio.sleep(0.05)  # Writes meet the restarted node before its recovery.
    await recover(cluster, sweep)
    await asyncio.sleep(0.05)


def test_the_sweep_covers_every_state_with_an_effect() -> None:
    """Every state of the split machine that has an effect is a point some case dies at, for a
    table partition and an index partition."""
    with_effects = {
        state.value.lower() for state in SplitState if state.name not in ("INSTALLED", "ABANDONED")
    }
    for kind in KINDS:
        named = {p for k, first, second in CASES if k == kind for p in (first, second) if p}
        assert with_effects <= named, (kind, with_effects - named)
