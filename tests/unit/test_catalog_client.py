"""`rpc.catalog_client.CatalogClient` against one storage node on the in-process network.

The catalog partition lives on a real `StorageNode` (memory store) reached through
`rpc.local.LocalNetwork`, whose faults are put in force around one kind of call at a time: a
compare-and-set whose request or reply is lost is resolved by reading the row back, never applied
twice and never reported failed when it was applied; a duplicated write is applied once; a cut node
is one ServiceUnavailable naming the catalog; a lost race is computed again after a pause drawn
from the client's own seeded source. A seeded sweep runs racing writers under every fault at once
and checks that what they were told matches what the row holds.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from core import catalog, limits
from core.catalog import CatalogLocation, TableDef, Throughput
from core.catalog_copy import record_of_row
from core.errors import OutcomeUnknown, ServiceUnavailable
from core.keys import KeyShape
from core.retry import RetryPolicy
from core.token_bucket import BillingMode
from rpc import ops
from rpc.catalog_client import (
    CATALOG_BUSY,
    CatalogClient,
    bootstrap_record,
    locate,
    resolution,
    system_target,
)
from rpc.local import NO_FAULTS, Faults, LocalNetwork
from rpc.ops import Target
from storagenode.memory_store import MemoryStore
from storagenode.node import WRITE_OPS, StorageNode
from storagenode.throughput import NodeThroughput

NOW = 1_700_000_000.0
ADDRESS = "local-node1"
LOCATION = CatalogLocation("node1", ADDRESS)
LOST_REPLY = Faults(drop_reply=1.0)
LOST_REQUEST = Faults(drop_request=1.0)


def record(name: str, table_id: str = "a" * 32) -> TableDef:
    created = catalog.created(
        name=name,
        table_id=table_id,
        key_shape=KeyShape.table(("pk", "S"), None),
        attribute_definitions=[("pk", "S")],
        billing_mode=BillingMode.PAY_PER_REQUEST,
        throughput=Throughput(),
        now=NOW,
        owner=lambda _: "node1",
    )
    return catalog.activated(created)


def tagged(marker: str) -> Callable[[TableDef | None], TableDef | None]:
    """A change that adds tag `marker` to an existing table (a table's changes accumulate)."""

    def change(current: TableDef | None) -> TableDef | None:
        assert current is not None
        tags = (*current.tags, (marker, ""))
        return dataclasses.replace(current, tags=tags, _json=None)

    return change


class Cluster:
    """One node holding the catalog partition, on a network whose faults a test switches per op."""

    def __init__(self, seed: int = 1) -> None:
        self.network = LocalNetwork(random.Random(seed))
        self.node = StorageNode(MemoryStore(), throughput=NodeThroughput(enforced=False))
        self.network.register(ADDRESS, self.node, WRITE_OPS)
        for table_id, name, partition in (
            (catalog.CATALOG_TABLE_ID, catalog.CATALOG_TABLE_NAME, LOCATION.partition),
            (
                catalog.BOOTSTRAP_TABLE_ID,
                catalog.BOOTSTRAP_TABLE_NAME,
                catalog.BOOTSTRAP_PARTITION_ID,
            ),
        ):
            payload = ops.CreatePartitionPayload(
                {"id": table_id, "name": name, "key_schema": catalog.SYSTEM_KEY_SCHEMA},
                {"id": partition, "start": "", "end": None, "epoch": 1, "node": "node1"},
            )
            [result] = self.node.apply_writes([(ops.CREATE_PARTITION, None, payload.to_json())])
            assert result == {}, result
        # Faults in force for the next calls of an op (then none): op -> remaining faults.
        self.faulty: dict[str, list[Faults]] = {}
        # Called once, after the next call of an op has ended (however it ended).
        self.after: dict[str, Callable[[], Awaitable[None]]] = {}
        self.calls: list[str] = []

    def client(self, seed: int = 1, **options: Any) -> CatalogClient:
        transport = FaultyTransport(self)

        async def located() -> CatalogLocation:
            return LOCATION

        return CatalogClient(
            located,
            lambda _location, _node: transport,
            rng=random.Random(seed),
            clock=lambda: 0.0,
            **options,
        )

    def row(self, name: str) -> TableDef | None:
        target = system_target(catalog.CATALOG_TABLE_ID, LOCATION.partition, True)
        item = self.node.read(ops.GET, target, {"key": {"name": {"S": name}}})["item"]
        return None if item is None else record_of_row(item)


class FaultyTransport:
    """A transport to the node that puts a cluster's per-op faults in force around each call."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.address = ADDRESS

    async def call(
        self, op: str, target: Target, payload: dict[str, Any], timeout: float
    ) -> dict[str, Any]:
        cluster = self.cluster
        cluster.calls.append(op)
        pending = cluster.faulty.get(op)
        cluster.network.faults = pending.pop(0) if pending else NO_FAULTS
        try:
            return await cluster.network.deliver(ADDRESS, op, target, payload, timeout)
        finally:
            cluster.network.faults = NO_FAULTS
            after = cluster.after.pop(op, None)
            if after is not None:
                await after()

    async def control(self, op: str, payload: dict[str, Any], timeout: float) -> dict[str, Any]:
        return await self.cluster.network.deliver(ADDRESS, op, None, payload, timeout)

    async def close(self) -> None:
        return None


async def created(cluster: Cluster, name: str = "Music") -> TableDef:
    made = await cluster.client().change_table(name, lambda current: record(name))
    assert made is not None and made.version == 1
    return made


# Reading, scanning and changing ------------------------------------------------------------------


async def test_a_table_is_created_changed_read_scanned_and_removed() -> None:
    cluster = Cluster()
    client = cluster.client()
    assert await client.read_table("Music") is None
    made = await created(cluster)
    changed = await client.change_table("Music", tagged("one"))
    assert changed is not None and changed.version == 2 and changed.tags == (("one", ""),)
    assert await client.read_table("Music") == changed == cluster.row("Music")
    await created(cluster, "Books")
    assert set(await client.scan()) == {"Music", "Books"}
    # A change returning the record it was given writes nothing.
    writes = cluster.calls.count(ops.PUT)
    assert await client.change_table("Music", lambda current: current) == changed
    assert cluster.calls.count(ops.PUT) == writes
    assert await client.change_table("Music", lambda current: None) is None
    assert cluster.row("Music") is None and made.version == 1


async def test_every_row_read_or_written_is_observed() -> None:
    cluster = Cluster()
    seen: list[tuple[str, int | None]] = []
    client = cluster.client(
        observe=lambda name, row: seen.append((name, None if row is None else row.version))
    )
    await client.change_table("Music", lambda current: record("Music"))
    await client.read_table("Music")
    assert seen == [("Music", None), ("Music", 1), ("Music", 1)]


async def test_the_location_comes_from_the_bootstrap_records() -> None:
    cluster = Cluster()
    transport = FaultyTransport(cluster)
    assert await bootstrap_record(transport) is None
    assert await locate({"node1": transport}) is None
    target = system_target(catalog.BOOTSTRAP_TABLE_ID, catalog.BOOTSTRAP_PARTITION_ID)
    await transport.call(
        ops.PUT, target, ops.PutPayload(LOCATION.to_item()).to_json(), limits.NODE_CALL_SECONDS_MAX
    )
    assert await locate({"node1": transport}) == LOCATION
    cluster.network.cut(ADDRESS)
    with pytest.raises(ServiceUnavailable):
        await locate({"node1": transport})


# Lost races --------------------------------------------------------------------------------------


async def test_a_lost_race_is_computed_again_after_a_seeded_pause() -> None:
    cluster = Cluster()
    await created(cluster)
    rival = cluster.client(seed=99)

    async def race() -> None:
        await rival.change_table("Music", tagged("rival"))

    pauses: list[float] = []

    async def sleep(seconds: float) -> None:
        pauses.append(seconds)

    client = cluster.client(seed=7, sleep=sleep)
    # The rival writes between this client's read and its write: the write fails its condition.
    cluster.after[ops.GET] = race
    changed = await client.change_table("Music", tagged("mine"))
    assert changed is not None and changed.version == 3
    assert changed.tags == (("rival", ""), ("mine", ""))
    assert pauses == [random.Random(7).uniform(0, limits.CATALOG_CAS_BACKOFF_SECONDS_MAX)]


async def test_a_row_that_keeps_changing_is_busy_after_the_policys_attempts() -> None:
    cluster = Cluster()
    await created(cluster)
    rival = cluster.client(seed=99)
    policy = RetryPolicy(attempts_max=3, base_seconds=0.0, cap_seconds=0.0, deadline_seconds=1.0)
    pauses: list[float] = []

    async def sleep(seconds: float) -> None:
        pauses.append(seconds)
        cluster.after[ops.GET] = race

    async def race() -> None:
        await rival.change_table("Music", tagged("rival"))

    client = cluster.client(sleep=sleep, policy=policy)
    cluster.after[ops.GET] = race
    with pytest.raises(ServiceUnavailable, match=CATALOG_BUSY):
        await client.change_table("Music", tagged("mine"))
    assert len(pauses) == policy.attempts_max - 1
    row = cluster.row("Music")
    assert row is not None and ("mine", "") not in row.tags


async def test_no_attempt_starts_past_the_deadline() -> None:
    cluster = Cluster()
    await created(cluster)
    rival = cluster.client(seed=99)
    now = [0.0]

    async def race() -> None:
        await rival.change_table("Music", tagged("rival"))
        now[0] += 2.0  # The race took two seconds.

    policy = RetryPolicy(attempts_max=10, base_seconds=0.01, cap_seconds=0.01, deadline_seconds=1.0)
    transport = FaultyTransport(cluster)

    async def located() -> CatalogLocation:
        return LOCATION

    client = CatalogClient(
        located,
        lambda _location, _node: transport,
        rng=random.Random(1),
        clock=lambda: now[0],
        policy=policy,
    )
    cluster.after[ops.GET] = race
    with pytest.raises(ServiceUnavailable, match=CATALOG_BUSY):
        await client.change_table("Music", tagged("mine"))
    assert cluster.calls.count(ops.PUT) == 3  # The creation, the rival's, one of ours.


async def test_a_wall_clock_stepping_back_counts_as_no_time_spent() -> None:
    cluster = Cluster()
    await created(cluster)
    rival = cluster.client(seed=99)
    readings = iter([100.0, 40.0])  # A router's wall clock, set back by a minute meanwhile.

    async def race() -> None:
        await rival.change_table("Music", tagged("rival"))

    transport = FaultyTransport(cluster)

    async def located() -> CatalogLocation:
        return LOCATION

    async def sleep(seconds: float) -> None:
        return None

    client = CatalogClient(
        located,
        lambda _location, _node: transport,
        rng=random.Random(1),
        clock=lambda: next(readings, 40.0),
        sleep=sleep,
    )
    cluster.after[ops.GET] = race
    changed = await client.change_table("Music", tagged("mine"))
    assert changed is not None and changed.tags == (("rival", ""), ("mine", ""))


# Unknown outcomes --------------------------------------------------------------------------------


async def test_a_write_whose_reply_is_lost_is_found_applied_by_reading_back() -> None:
    cluster = Cluster()
    await created(cluster)
    cluster.faulty[ops.PUT] = [LOST_REPLY]
    changed = await cluster.client().change_table("Music", tagged("mine"))
    assert changed is not None and changed.version == 2
    assert cluster.row("Music") == changed
    assert cluster.calls.count(ops.PUT) == 2  # The creation and one change: never written again.


async def test_a_creation_whose_reply_is_lost_is_found_applied() -> None:
    cluster = Cluster()
    cluster.faulty[ops.PUT] = [LOST_REPLY]
    made = await cluster.client().change_table("Music", lambda current: record("Music"))
    assert made is not None and made.version == 1 and cluster.row("Music") == made


async def test_a_removal_whose_reply_is_lost_is_found_applied() -> None:
    cluster = Cluster()
    await created(cluster)
    cluster.faulty[ops.DELETE] = [LOST_REPLY]
    assert await cluster.client().change_table("Music", lambda current: None) is None
    assert cluster.row("Music") is None


async def test_a_write_whose_request_is_lost_is_found_not_applied_and_made_again() -> None:
    cluster = Cluster()
    await created(cluster)
    cluster.faulty[ops.PUT] = [LOST_REQUEST]
    changed = await cluster.client().change_table("Music", tagged("mine"))
    assert changed is not None and changed.version == 2 and changed.tags == (("mine", ""),)
    assert cluster.row("Music") == changed


async def test_a_lost_write_that_lost_a_race_is_computed_again_on_the_winner() -> None:
    cluster = Cluster()
    await created(cluster)
    rival = cluster.client(seed=99)

    async def race() -> None:
        await rival.change_table("Music", tagged("rival"))

    # Our write is lost on its way; the rival takes the next version before we read back.
    cluster.faulty[ops.PUT] = [LOST_REQUEST]
    cluster.after[ops.PUT] = race
    changed = await cluster.client().change_table("Music", tagged("mine"))
    assert changed is not None and changed.tags == (("rival", ""), ("mine", ""))
    assert changed.version == 3


async def test_an_applied_write_changed_again_before_the_read_back_stays_unknown() -> None:
    cluster = Cluster()
    await created(cluster)
    rival = cluster.client(seed=99)

    async def race() -> None:
        await rival.change_table("Music", tagged("rival"))

    cluster.faulty[ops.PUT] = [LOST_REPLY]
    cluster.after[ops.PUT] = race
    with pytest.raises(OutcomeUnknown):
        await cluster.client().change_table("Music", tagged("mine"))
    row = cluster.row("Music")
    # Applied once, and not again on top of the rival's change.
    assert row is not None and row.tags == (("mine", ""), ("rival", ""))


async def test_a_read_back_waits_out_a_cut_within_the_policy() -> None:
    cluster = Cluster()
    await created(cluster)

    async def cut() -> None:
        cluster.network.cut(ADDRESS)

    async def heal(seconds: float) -> None:
        cluster.network.heal(ADDRESS)

    cluster.faulty[ops.PUT] = [LOST_REPLY]
    cluster.after[ops.PUT] = cut
    changed = await cluster.client(sleep=heal).change_table("Music", tagged("mine"))
    assert changed is not None and cluster.row("Music") == changed


async def test_a_read_back_that_never_answers_leaves_the_outcome_unknown() -> None:
    cluster = Cluster()
    await created(cluster)

    async def cut() -> None:
        cluster.network.cut(ADDRESS)

    async def sleep(seconds: float) -> None:
        return None

    cluster.faulty[ops.PUT] = [LOST_REPLY]
    cluster.after[ops.PUT] = cut
    with pytest.raises(OutcomeUnknown):
        await cluster.client(sleep=sleep).change_table("Music", tagged("mine"))
    # It was applied: not reported as failed (ServiceUnavailable would say nothing was).
    row = cluster.row("Music")
    assert row is not None and row.tags == (("mine", ""),)


async def test_a_duplicated_write_is_applied_once() -> None:
    cluster = Cluster()
    await created(cluster)
    cluster.faulty[ops.PUT] = [Faults(duplicate=1.0)]
    changed = await cluster.client().change_table("Music", tagged("mine"))
    assert changed is not None and changed.version == 2 and cluster.row("Music") == changed


async def test_a_cut_catalog_node_is_one_unavailable_naming_the_catalog() -> None:
    cluster = Cluster()
    await created(cluster)
    cluster.network.cut(ADDRESS)
    client = cluster.client()
    for call in (
        client.read_table("Music"),
        client.scan(),
        client.change_table("Music", tagged("mine")),
    ):
        with pytest.raises(ServiceUnavailable, match="table catalog is unavailable"):
            await call
    cluster.network.heal(ADDRESS)
    row = cluster.row("Music")
    assert row is not None and row.tags == ()


def test_the_row_tells_whether_a_lost_write_was_applied() -> None:
    v1 = catalog.versioned(record("Music"), 1)
    v2 = catalog.versioned(tagged("mine")(v1) or v1, 2)
    rival2 = catalog.versioned(tagged("rival")(v1) or v1, 2)
    rival3 = catalog.versioned(tagged("more")(rival2) or v1, 3)
    other = catalog.versioned(record("Music", "b" * 32), 1)
    assert resolution(v1, v2, v2) is True
    assert resolution(v1, v2, v1) is False  # Still at the version read.
    assert resolution(v1, v2, rival2) is False  # Another writer took the next version.
    assert resolution(v1, v2, rival3) is None  # Ours, then another? Or two others?
    assert resolution(v1, v2, None) is None  # Removed since.
    assert resolution(v1, v2, other) is None  # Removed and created again.
    assert resolution(v1, None, None) is True
    assert resolution(v1, None, rival3) is False  # A removal applied never leaves the id.
    assert resolution(None, v1, None) is False
    assert resolution(None, v1, other) is False  # Another creation won.
    assert resolution(None, v1, catalog.versioned(v1, 3)) is True  # Our fresh id, changed since.


# A seeded sweep: racing writers under every fault at once ---------------------------------------


@pytest.mark.parametrize("seed", range(12))
async def test_racing_writers_under_faults_are_told_the_truth(seed: int) -> None:
    cluster = Cluster(seed)
    await created(cluster)
    faults = Faults(
        drop_request=0.15,
        drop_reply=0.15,
        delay=0.3,
        duplicate=0.2,
        delay_seconds_max=0.002,
        timeout_seconds=0.002,
    )
    for op in (ops.GET, ops.PUT):
        cluster.faulty[op] = [faults] * 1000
    outcomes: dict[str, str] = {}

    async def writer(number: int) -> None:
        client = cluster.client(seed * 100 + number)
        for change in range(4):
            marker = f"w{number}c{change}"
            try:
                await client.change_table("Music", tagged(marker))
                outcomes[marker] = "applied"
            except OutcomeUnknown:
                outcomes[marker] = "unknown"
            except ServiceUnavailable:
                outcomes[marker] = "failed"

    await asyncio.gather(*(writer(number) for number in range(3)))
    row = cluster.row("Music")
    assert row is not None
    markers = [marker for marker, _ in row.tags]
    assert len(markers) == len(set(markers)), f"seed {seed}: a change applied twice: {markers}"
    for marker, outcome in outcomes.items():
        if outcome == "applied":
            assert marker in markers, f"seed {seed}: {marker} reported applied, not in the row"
        if outcome == "failed":
            assert marker not in markers, f"seed {seed}: {marker} reported failed, applied"
    assert row.version == 1 + len(markers), f"seed {seed}"
