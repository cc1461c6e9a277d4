"""A seeded sweep over the table machine's crash points: the router dies between every pair of
effects of each table flow (CreateTable with a global index and a stream, DeleteTable, an index
added and deleted by UpdateTable, a stream enabled and disabled), a new router starts, and its
`TableReconciler` recovers what the row shows unfinished (`core.machines.table.recovered`); in
some cases that router dies too at a point of its recovery, and a third one finishes.

Each seed picks one case (the flow, the points its routers die at) and the network's delays
(`tests.sim.sweep`: every case runs from several seeds); a failing seed replays with
`python -m tests.sim.sweep table SEED`. After every case: the partitions on the nodes are exactly
those the catalog row names (no orphaned partition, no table or index without its partitions), and
DescribeTable answers as DynamoDB would once the flow is finished or undone: the table ACTIVE or
not found, the index there or not, the stream enabled or not, as the point it died at decides.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from core import catalog, limits
from core.catalog import TableDef
from core.errors import ResourceNotFound
from core.machines import STARTED, Event
from core.machines import table as table_machine
from core.machines.table import NAME as TABLE
from core.machines.table import TableRecord, TableState
from dynalab.sim.cluster import SimCluster, run
from router import tables
from router.context import RouterContext
from router.table_lifecycle import TableReconciler
from tests.sim.crash import Died
from tests.sim.sweep import SWEEP_FAULTS, Sweep

NAME = "Swept"
INDEX = "byG"
# The points between two effects of each flow that succeeds (the state recorded before each
# effect), and what the table shows once a new router has recovered a death there: "before"
# (as if the request never came) or "after" (as if it had finished).
FLOWS: dict[str, dict[TableState, str]] = {
    "create": {
        TableState.RECORDING: "before",
        TableState.CREATING: "after",
        TableState.CREATED: "after",
    },
    "delete": {
        TableState.MARKING: "before",
        TableState.DELETING: "after",
        TableState.DROPPED: "after",
    },
    "add_index": {TableState.INDEX_ADDING: "before", TableState.INDEX_CREATING: "after"},
    "delete_index": {
        TableState.INDEX_MARKING: "before",
        TableState.INDEX_DELETING: "after",
        TableState.INDEX_DROPPED: "after",
    },
    "stream_on": {TableState.REGISTERING: "before", TableState.REGISTERED: "before"},
    "stream_off": {TableState.DISABLING: "before"},
}
# The states a recovery passes, by flow, once the row shows it unfinished: a new router may die
# there too, and a third one finishes.
RECOVERY: dict[str, tuple[TableState, ...]] = {
    "create": (TableState.CREATING, TableState.CREATED),
    "delete": (TableState.DELETING, TableState.DROPPED),
    "add_index": (TableState.INDEX_CREATING,),
    "delete_index": (TableState.INDEX_DELETING, TableState.INDEX_DROPPED),
}
# (flow, the point its router dies at, the point the recovering router dies at, or None).
CASES: list[tuple[str, TableState, TableState | None]] = [
    *((flow, point, None) for flow, points in FLOWS.items() for point in points),
    *(
        (flow, point, second)
        for flow, points in FLOWS.items()
        for point, outcome in points.items()
        if outcome == "after"
        for second in RECOVERY[flow]
    ),
]

KEY_SCHEMA = [{"AttributeName": "pk", "KeyType": "HASH"}]
INDEX_DEFINITION = {
    "IndexName": INDEX,
    "KeySchema": [{"AttributeName": "g", "KeyType": "HASH"}],
    "Projection": {"ProjectionType": "ALL"},
}
DEFINITIONS = [
    {"AttributeName": "pk", "AttributeType": "S"},
    {"AttributeName": "g", "AttributeType": "S"},
]
STREAM_ON = {"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"}


class DieAt:
    """The router's crash points: it dies (Died) the first time it reaches `point`."""

    def __init__(self, point: TableState) -> None:
        self.point = point.value.lower()
        self.died = False

    async def reached(self, machine: str, point: str) -> None:
        if machine == TABLE and point == self.point and not self.died:
            self.died = True
            raise Died(point)


def create_body(*, index: bool, stream: bool) -> dict[str, Any]:
    body: dict[str, Any] = {
        "TableName": NAME,
        "KeySchema": KEY_SCHEMA,
        "AttributeDefinitions": DEFINITIONS if index else DEFINITIONS[:1],
        "BillingMode": "PAY_PER_REQUEST",
    }
    if index:
        body["GlobalSecondaryIndexes"] = [INDEX_DEFINITION]
    if stream:
        body["StreamSpecification"] = STREAM_ON
    return body


async def set_up(cluster: SimCluster, flow: str) -> None:
    """The table a flow starts from (none for a creation), made by a router that lives."""
    ctx = cluster.routers[1]
    if flow == "create":
        return
    index = flow in ("delete", "delete_index")
    stream = flow in ("delete", "stream_off")
    await tables.create_table(ctx, create_body(index=index, stream=stream))


async def request(ctx: RouterContext, flow: str) -> None:
    """The request of `flow`, sent to the router that dies."""
    if flow == "create":
        await tables.create_table(ctx, create_body(index=True, stream=True))
    elif flow == "delete":
        await tables.delete_table(ctx, {"TableName": NAME})
    elif flow == "add_index":
        await tables.update_table(
            ctx,
            {
                "TableName": NAME,
                "AttributeDefinitions": DEFINITIONS,
                "GlobalSecondaryIndexUpdates": [{"Create": INDEX_DEFINITION}],
            },
        )
    elif flow == "delete_index":
        await tables.update_table(
            ctx,
            {"TableName": NAME, "GlobalSecondaryIndexUpdates": [{"Delete": {"IndexName": INDEX}}]},
        )
    elif flow == "stream_on":
        await tables.update_table(ctx, {"TableName": NAME, "StreamSpecification": STREAM_ON})
    else:
        await tables.update_table(
            ctx, {"TableName": NAME, "StreamSpecification": {"StreamEnabled": False}}
        )


async def recover(ctx: RouterContext) -> None:
    """What a new router's reconciler does: it sees the unfinished row, waits out the stall
    bound, and drives the recovered record."""
    reconciler = TableReconciler(ctx)
    await ctx.refresh()
    await reconciler.reconcile()
    clock: Any = ctx.sources.clock
    clock.advance(limits.TABLE_TRANSITION_STALL_SECONDS)
    await asyncio.sleep(limits.TABLE_RECONCILE_SECONDS)
    await ctx.refresh()
    await reconciler.reconcile()
    await ctx.refresh()


def stored(cluster: SimCluster) -> dict[tuple[str, str], list[str]]:
    """Every partition of a table or an index on the nodes: the nodes holding it."""
    held: dict[tuple[str, str], list[str]] = {}
    for node_id, node in sorted(cluster.nodes.items()):
        for table_id, partition_id in node.partitions:
            if table_id not in catalog.SYSTEM_TABLE_IDS:
                held.setdefault((table_id, partition_id), []).append(node_id)
    return held


def named(table: TableDef | None) -> dict[tuple[str, str], list[str]]:
    """The partitions the row names, each on its node."""
    if table is None:
        return {}
    expected = {(table.id, p.id): [p.node] for p in table.partitions}
    for index in catalog.global_indexes(table):
        assert index.table_id is not None
        expected.update({(index.table_id, p.id): [p.node] for p in index.partitions})
    return expected


async def described(ctx: RouterContext) -> dict[str, Any] | None:
    try:
        reply = await tables.describe_table(ctx, {"TableName": NAME})
    except ResourceNotFound:
        return None
    table: dict[str, Any] = reply["Table"]
    return table


def check_described(label: str, flow: str, outcome: str, table: dict[str, Any] | None) -> None:
    case = f"{label} ({outcome})"
    gone = (flow == "create" and outcome == "before") or (flow == "delete" and outcome == "after")
    if gone:
        assert table is None, f"{case}: {table}"
        return
    assert table is not None, f"{case}: the table is not found"
    assert table["TableStatus"] == "ACTIVE", f"{case}: {table['TableStatus']}"
    indexes = {
        index["IndexName"]: index["IndexStatus"]
        for index in table.get("GlobalSecondaryIndexes", [])
    }
    has_index = {
        "create": True,
        "delete": True,
        "add_index": outcome == "after",
        "delete_index": outcome == "before",
    }.get(flow, False)
    if has_index:
        # An index added online stays CREATING until a replicator backfills it (none runs here).
        wanted = "CREATING" if flow == "add_index" else "ACTIVE"
        assert indexes == {INDEX: wanted}, f"{case}: {indexes}"
    else:
        assert indexes == {}, f"{case}: {indexes}"
    enabled = table.get("StreamSpecification", {}).get("StreamEnabled", False)
    assert enabled == (flow in ("create", "delete", "stream_off")), f"{case}: stream {enabled}"


async def scenario(
    cluster: SimCluster, case: tuple[str, TableState, TableState | None], label: str
) -> None:
    flow, point, second = case
    await set_up(cluster, flow)
    cluster.faults(SWEEP_FAULTS)
    doomed = cluster.routers[0]
    dying = DieAt(point)
    doomed.crash_points = dying
    with pytest.raises(Died):
        await request(doomed, flow)
    assert dying.died, f"{label}: ({flow}, {point}) was never reached"
    # The dead router's partly done work is what the catalog and the nodes hold; a new router
    # finds it.
    fresh = cluster.add_router()
    if second is not None:
        dying_again = DieAt(second)
        fresh.crash_points = dying_again
        with pytest.raises(Died):
            await recover(fresh)
        assert dying_again.died, f"{label}: recovery never reached {second}"
        fresh = cluster.add_router()
    await recover(fresh)
    cluster.faults(None)
    row = await fresh.read_table(NAME)
    assert stored(cluster) == named(row), (
        f"{label}: the nodes hold {sorted(stored(cluster))}, the row names {sorted(named(row))}"
    )
    check_described(label, flow, FLOWS[flow][point], await described(fresh))
    if row is not None:
        # What is left works: the table takes a write and reads it back.
        await cluster.put(
            NAME, {"pk": {"S": "after"}, "g": {"S": "x"}}, router=len(cluster.routers) - 1
        )


SWEEP = Sweep("table", CASES, scenario)


@pytest.mark.parametrize("seed", SWEEP.seeds())
def test_a_table_flow_killed_between_any_two_effects(seed: int) -> None:
    SWEEP.run(seed)


def test_the_sweep_covers_every_state_of_every_flow_that_succeeds() -> None:
    """Every state a flow passes with an effect still to carry out, when every effect succeeds,
    is a point some case dies at."""
    passed = set()
    for first in table_machine.FIRST.values():
        record = TableRecord(table_machine.Flow.CREATE, NAME, first)
        event = Event(STARTED)
        while True:
            record, effects = table_machine.MACHINE.step(record, event, 0.0)
            if not effects:
                break
            passed.add(record.state)
            event = Event(effects[0].done)
    assert passed == {point for points in FLOWS.values() for point in points}


def test_an_index_whose_partitions_a_reconciler_created_is_left_to_its_backfill() -> None:
    """The row shows an online index CREATING until the GSI replicator starts its backfill (none
    runs here): a reconciler that created its partitions once does not create them again."""

    async def scenario(cluster: SimCluster) -> None:
        await set_up(cluster, "add_index")
        doomed = cluster.routers[0]
        doomed.crash_points = DieAt(TableState.INDEX_CREATING)
        with pytest.raises(Died):
            await request(doomed, "add_index")
        fresh = cluster.add_router()
        reconciler = TableReconciler(fresh)
        recovered: list[TableState] = []
        recover = reconciler.recover

        async def counted(record: TableRecord) -> None:
            recovered.append(record.state)
            await recover(record)

        reconciler.recover = counted  # type: ignore[method-assign]
        clock: Any = fresh.sources.clock
        for _ in range(4):
            await fresh.refresh()
            await reconciler.reconcile()
            clock.advance(limits.TABLE_TRANSITION_STALL_SECONDS)
        assert recovered == [TableState.INDEX_CREATING]
        row = await fresh.read_table(NAME)
        assert stored(cluster) == named(row)

    run(0, scenario)
