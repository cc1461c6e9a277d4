"""A seeded sweep over the backfill machine's crash points: the GSI replicator copying a table into
an index added online dies between every pair of effects of the copy (`rpc.machines` crash
points, the states the backfill's record reaches), on the first page or a later one, and in some
cases the replicator that takes its leases over dies too; a third one finishes. Clients write
all along.

Each seed picks one case (where the first replicator dies, on which page, where the next one
dies) and the clients' writes (`tests.sim.sweep`: every case runs from several seeds); a failing
seed prints the one command that replays it (`python -m tests.sim.sweep backfill SEED`). After
every case: the index converges to exactly the projection of the table (nothing missing, nothing
stale), a copy resumed from its cursor never starts its partition again (no page is read twice
beyond the one in flight at each death), OnlineIndexPercentageProgress only rises, to 100, and
the row keeps no progress once the index is ACTIVE.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from typing import Any

import orjson
import pytest

from core.catalog import IndexStatus
from core.machines.backfill import NAME as BACKFILL
from core.machines.backfill import BackfillRecord, BackfillState
from dynalab.sim.cluster import SimCluster
from gsi_replicator.replicator import Replicator
from router import items, tables
from tests.sim.sweep import Sweep as SeededSweep
from tests.sim.test_gsi import KEYS, index_converges, random_item, retried, write

NAME = "Filled"
INDEX = "byG"
PAGE_BYTES = 1  # One item a page: each partition takes several pages.
ACTIVE_SECONDS = 120.0  # Virtual: each takeover waits out the dead replicator's leases.
# The points between two effects of a copy (its states before each effect); those of a page are
# reached once per page of every partition being copied, and a replicator dies at the first or
# at the LATER-th of them (past the first page of each of the table's few partitions).
ONCE = ("registering", "marking")
LATER = 8
PER_PAGE = ("copying", "read", "applied")
CASES: list[tuple[str, int, str | None]] = [
    *((point, 1, second) for point in ONCE for second in (None, "read")),
    *(
        (point, nth, second)
        for point in PER_PAGE
        for nth in (1, LATER)
        for second in (None, "applied")
    ),
]


class DieAt:
    """The backfill driver's crash points for one replicator: it dies (killed as by kill -9, its
    leases left to expire) the `nth` time any of its copies reaches `point`."""

    def __init__(self, cluster: SimCluster, replicator: Replicator, point: str, nth: int) -> None:
        self.cluster = cluster
        self.name = replicator.owner
        self.point = point
        self.nth = nth
        self.reached_count: Counter[str] = Counter()
        self.died = False
        self.kill: asyncio.Future[None] | None = None
        replicator.backfills.crash_points = self

    async def reached(self, machine: str, point: str) -> None:
        if machine != BACKFILL or self.died:
            return
        self.reached_count[point] += 1
        if point == self.point and self.reached_count[point] == self.nth:
            self.died = True
            self.kill = asyncio.ensure_future(self.cluster.kill_replicator(self.name))
            await asyncio.sleep(ACTIVE_SECONDS)  # The kill cancels this copy here.
            raise AssertionError(f"{self.name} outlived its death at {point}")


def log_reads(replicator: Replicator, reads: list[tuple[str, str, bytes]]) -> None:
    """Note every page `replicator` reads: (replicator, partition, the cursor read after)."""
    handlers = dict(replicator.backfills.handlers)
    read = handlers["read"]

    async def logged(record: BackfillRecord, effect: Any) -> Any:
        cursor = orjson.dumps(record.cursor, option=orjson.OPT_SORT_KEYS)
        reads.append((replicator.owner, record.partition_id, cursor))
        return await read(record, effect)

    handlers["read"] = logged
    replicator.backfills.handlers = handlers


def start(cluster: SimCluster, reads: list[tuple[str, str, bytes]]) -> Replicator:
    replicator = cluster.start_replicator()
    replicator.backfill_page_bytes = PAGE_BYTES
    log_reads(replicator, reads)
    return replicator


async def writes(cluster: SimCluster, rng: random.Random, seed: int, stop: asyncio.Event) -> int:
    """Clients' puts and deletes until `stop`; how many."""
    count = 0
    while not stop.is_set():
        await write(cluster, NAME, rng, seed)
        count += 1
        await asyncio.sleep(rng.uniform(0, 0.1))
    return count


async def scenario(cluster: SimCluster, case: tuple[str, int, str | None], label: str) -> None:
    point, nth, second = case
    seed = cluster.seed
    rng = random.Random(f"backfill/{seed}")
    ctx = cluster.routers[0]
    await tables.create_table(
        ctx,
        {
            "TableName": NAME,
            "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}],
            "AttributeDefinitions": [{"AttributeName": "pk", "AttributeType": "S"}],
            "BillingMode": "PAY_PER_REQUEST",
        },
    )
    for key in range(KEYS):
        body = {"TableName": NAME, "Item": random_item(rng, key)}
        await retried(seed, lambda body=body: items.put_item(ctx, dict(body)))
    await tables.update_table(
        ctx,
        {
            "TableName": NAME,
            "AttributeDefinitions": [
                {"AttributeName": "g", "AttributeType": "S"},
                {"AttributeName": "n", "AttributeType": "N"},
            ],
            "GlobalSecondaryIndexUpdates": [
                {
                    "Create": {
                        "IndexName": INDEX,
                        "KeySchema": [
                            {"AttributeName": "g", "KeyType": "HASH"},
                            {"AttributeName": "n", "KeyType": "RANGE"},
                        ],
                        "Projection": {"ProjectionType": "ALL"},
                    }
                }
            ],
        },
    )
    stop = asyncio.Event()
    writer = asyncio.ensure_future(writes(cluster, random.Random(rng.random()), seed, stop))
    reads: list[tuple[str, str, bytes]] = []
    deaths = [(point, nth), *([] if second is None else [(second, 1)])]
    sweeps = [DieAt(cluster, start(cluster, reads), *deaths.pop(0))]
    running = sweeps[0].name
    percentages: list[int] = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + ACTIVE_SECONDS
    while True:
        table = await retried(seed, lambda: ctx.read_table(NAME))
        assert table is not None
        index = next(i for i in table.indexes if i.name == INDEX)
        assert index.percentage_progress is not None
        percentages.append(index.percentage_progress)
        if index.status == IndexStatus.ACTIVE:
            break
        assert loop.time() < deadline, f"{label}: the index is still {index.status}"
        if running not in cluster.replicators:
            replicator = start(cluster, reads)
            running = replicator.owner
            if deaths:
                sweeps.append(DieAt(cluster, replicator, *deaths.pop(0)))
        await asyncio.sleep(0.1)
    stop.set()
    written = await writer
    await index_converges(cluster, NAME, seed)

    died = [sweep.point for sweep in sweeps if sweep.died]
    assert len(died) == 1 + (second is not None), f"{label}: died at {died}"
    assert percentages == sorted(percentages), f"{label}: {percentages}"
    assert percentages[-1] == 100 and index.progress == ()
    # Each page is read once, but the one each copy had in hand when its replicator died
    # (read, not yet recorded): a copy resumes from the cursor the row records.
    again: Counter[str] = Counter()
    for (partition, _), times in Counter((p, c) for _, p, c in reads).items():
        again[partition] += times - 1
    assert max(again.values()) <= len(died), f"{label}: read again {again}, {died}"
    # Once a page was read from a cursor, the row holds one: no copy of that partition,
    # whichever replicator runs it, starts from the beginning again.
    from_cursor: set[str] = set()
    for owner, partition, cursor in reads:
        if cursor == b"null":
            assert partition not in from_cursor, f"{label}: {owner} restarted {partition}"
        else:
            from_cursor.add(partition)
    if point in PER_PAGE and nth == LATER:
        resumed = [c for owner, _, c in reads if owner != sweeps[0].name and c != b"null"]
        assert resumed, f"{label}: no copy resumed from a cursor: {reads[:20]}"
    assert written > 0


SWEEP = SeededSweep("backfill", CASES, scenario)


@pytest.mark.parametrize("seed", SWEEP.seeds())
def test_a_backfill_killed_between_any_two_effects(seed: int) -> None:
    SWEEP.run(seed)


def test_the_cases_cover_every_state_with_an_effect() -> None:
    with_effect = {
        state.value.lower()
        for state in BackfillState
        if state not in (BackfillState.RECORDED, BackfillState.ABANDONED)
    }
    assert {case[0] for case in CASES} == with_effect
