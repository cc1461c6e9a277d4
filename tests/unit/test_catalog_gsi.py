"""Global indexes in the typed catalog: placement, throughput, activation with the table, JSON."""

from __future__ import annotations

from fractions import Fraction

import pytest

from core import catalog
from core.catalog import IndexDef, IndexStatus, TableDef, TableStatus, Throughput
from core.errors import LimitExceeded, ResourceInUse, ResourceNotFound, ValidationError
from core.keys import KeyAttribute, KeyShape
from core.token_bucket import BillingMode

INDEX_KEY = KeyShape(
    (KeyAttribute("GameTitle", "S", "partition"), KeyAttribute("TopScore", "N", "sort"))
)


def owner(partition_id: str) -> str:
    return f"node-{int(partition_id[-1]) % 2}"


def gsi(billing: BillingMode, throughput: Throughput) -> IndexDef:
    return catalog.global_index(
        name="GameTitleIndex",
        key_shape=INDEX_KEY,
        projection="INCLUDE",
        non_key_attributes=["Wins"],
        index_id="ab" * 16,
        billing_mode=billing,
        throughput=throughput,
        owner=owner,
    )


def table_with(index: IndexDef) -> TableDef:
    table = catalog.created(
        name="GameScores",
        table_id="cd" * 16,
        key_shape=KeyShape.table(("UserId", "S"), ("GameTitle", "S")),
        attribute_definitions=[("UserId", "S"), ("GameTitle", "S"), ("TopScore", "N")],
        billing_mode=BillingMode.PROVISIONED,
        throughput=Throughput(5, 5),
        now=1.0,
        owner=owner,
    )
    return catalog.index_added(table, index)


def test_a_global_index_gets_partitions_of_its_own_sized_by_its_throughput() -> None:
    small = gsi(BillingMode.PROVISIONED, Throughput(5, 5))
    assert [(p.id, p.start, p.end, p.epoch) for p in small.partitions] == [
        ("ab" * 16 + "-0", "", None, 1)
    ]
    big = gsi(BillingMode.PROVISIONED, Throughput(3000, 2000))  # 1 + 2 = 3 partitions.
    assert len(big.partitions) == 3
    assert [p.node for p in big.partitions] == ["node-0", "node-1", "node-0"]
    assert all(p.share == Fraction(1, 3) for p in big.partitions)
    on_demand = gsi(BillingMode.PAY_PER_REQUEST, Throughput())
    assert len(on_demand.partitions) == 4
    assert on_demand.status == IndexStatus.CREATING and on_demand.is_global


def test_indexes_created_with_the_table_become_active_with_it() -> None:
    table = table_with(gsi(BillingMode.PROVISIONED, Throughput(5, 5)))
    active = catalog.activated(table)
    assert active.status == TableStatus.ACTIVE
    assert [index.status for index in active.indexes] == [IndexStatus.ACTIVE]
    # An UpdateTable's activation leaves index statuses alone.
    updating = catalog.throughput_updated(
        active, None, {"ReadCapacityUnits": 6, "WriteCapacityUnits": 6}, 2.0, "r"
    )
    assert updating is not None
    assert catalog.activated(updating).indexes == active.indexes


def test_a_global_index_round_trips_through_the_catalog_json() -> None:
    table = catalog.activated(table_with(gsi(BillingMode.PROVISIONED, Throughput(3000, 2000))))
    again = TableDef.from_json(table.to_json())
    assert again.indexes == table.indexes
    assert catalog.global_indexes(again) == again.indexes
    assert set(again.nodes()) == {"node-0", "node-1"}
    document = catalog.index_throughput_document(again, again.indexes[0])
    assert document == {
        "billing_mode": "PROVISIONED",
        "read": 3000,
        "write": 2000,
        "partition_count": 3,
        "version": 0,
    }


def online(table: TableDef, name: str = "Online") -> TableDef:
    index = catalog.global_index(
        name=name,
        key_shape=KeyShape((KeyAttribute("Wins", "N", "partition"),)),
        projection="KEYS_ONLY",
        non_key_attributes=[],
        index_id="ef" * 16,
        billing_mode=BillingMode.PROVISIONED,
        throughput=Throughput(5, 5),
        owner=owner,
    )
    return catalog.online_index_added(table, index, [("Wins", "N")])


def active_table() -> TableDef:
    return catalog.activated(table_with(gsi(BillingMode.PROVISIONED, Throughput(5, 5))))


def test_an_online_index_is_created_backfilled_per_partition_then_active() -> None:
    table = online(active_table())
    index = table.indexes[-1]
    assert (index.status, index.online, index.backfilling) == (IndexStatus.CREATING, True, False)
    assert ("Wins", "N") in table.attribute_definitions
    assert IndexDef.from_json(index.to_json()) == index
    started = catalog.index_backfill_started(table, "ef" * 16)
    assert started.indexes[-1].backfilling
    assert catalog.index_backfill_started(started, "ef" * 16) is started
    done = started
    partitions = [partition.id for partition in table.partitions]
    for number, partition_id in enumerate(partitions, start=1):
        done = catalog.partition_backfilled(done, "ef" * 16, partition_id)
        finished = number == len(partitions)
        assert done.indexes[-1].status == (
            IndexStatus.ACTIVE if finished else IndexStatus.BACKFILLING
        )
    assert catalog.partition_backfilled(done, "ef" * 16, partitions[0]) is done


def test_one_index_at_a_time_is_created_or_deleted_as_dynamodb_allows() -> None:
    table = online(active_table())
    with pytest.raises(ValidationError, match="Attempting to create an index which already"):
        online(table)
    with pytest.raises(LimitExceeded, match="Only 1 online index"):
        online(table, "Another")
    # Before its backfill began, the index cannot be deleted (seed 004 O-16); during it, it can.
    with pytest.raises(LimitExceeded):
        catalog.index_deleting(table, "Online")
    backfilling = catalog.index_backfill_started(table, "ef" * 16)
    deleting = catalog.index_deleting(backfilling, "Online")
    assert deleting.indexes[-1].status == IndexStatus.DELETING
    assert catalog.index_deleting(deleting, "Online") is deleting  # Finishing a deletion.
    with pytest.raises(LimitExceeded):
        catalog.index_deleting(deleting, "GameTitleIndex")
    with pytest.raises(ResourceNotFound):
        catalog.index_deleting(active_table(), "Missing")
    gone = catalog.index_moved(deleting, "Online", None)
    assert [index.name for index in gone.indexes] == ["GameTitleIndex"]


def test_an_index_throughput_update_is_checked_and_leaves_the_table_updating() -> None:
    table = active_table()
    units = {"ReadCapacityUnits": 10, "WriteCapacityUnits": 20}
    updating = catalog.index_throughput_updated(table, {"GameTitleIndex": units}, "r")
    assert updating.status == TableStatus.UPDATING
    assert updating.throughput_version == table.throughput_version + 1
    assert updating.indexes[0].throughput == Throughput(10, 20)
    assert updating.indexes[0].status == IndexStatus.ACTIVE  # Still readable.
    assert catalog.index_throughput_document(updating, updating.indexes[0])["write"] == 20
    assert catalog.activated(updating).indexes == updating.indexes
    with pytest.raises(ResourceInUse, match="Table is being updated: GameScores"):
        catalog.index_throughput_updated(updating, {"GameTitleIndex": units}, "r")
    with pytest.raises(ResourceNotFound, match="index: Missing not found"):
        catalog.index_throughput_updated(table, {"Missing": units}, "r")
    with pytest.raises(ValidationError, match="will not change"):
        same = {"ReadCapacityUnits": 5, "WriteCapacityUnits": 5}
        catalog.index_throughput_updated(table, {"GameTitleIndex": same}, "r")
    with pytest.raises(ValidationError, match="ProvisionedThroughput is not specified"):
        catalog.index_throughput_updated(table, {"GameTitleIndex": None}, "r")
    with pytest.raises(LimitExceeded, match="per table maximum"):
        huge = {"ReadCapacityUnits": 10**6, "WriteCapacityUnits": 1}
        catalog.index_throughput_updated(table, {"GameTitleIndex": huge}, "r")
    # Seed 004 O-16, O-18: not while the index is created before its backfill began; while it
    # backfills, yes; not while it is deleted.
    creating = online(table)
    with pytest.raises(ResourceInUse, match="Index is being created: Online"):
        catalog.index_throughput_updated(creating, {"Online": units}, "r")
    other = catalog.index_throughput_updated(creating, {"GameTitleIndex": units}, "r")
    assert other.indexes[0].throughput == Throughput(10, 20)
    backfilling = catalog.index_backfill_started(creating, "ef" * 16)
    updated = catalog.index_throughput_updated(backfilling, {"Online": units}, "r")
    assert updated.indexes[-1].throughput == Throughput(10, 20)
    deleting = catalog.index_deleting(table, "GameTitleIndex")
    with pytest.raises(ResourceInUse, match="Index is being deleted"):
        catalog.index_throughput_updated(deleting, {"GameTitleIndex": units}, "r")


def test_a_table_with_a_global_index_keeps_its_retired_partitions_for_the_replicator() -> None:
    """The replicator reads a parent's log to its END before its children's, and learns the
    lineage from the catalog: a grandparent stays after its children split in turn, until
    `retired_dropped` (the router's, once no follower holds its log)."""
    table = catalog.activated(table_with(gsi(BillingMode.PROVISIONED, Throughput(5, 5))))
    first = table.partitions[0]
    once, low, high = catalog.split(
        table, first.id, bytes.fromhex("20" * 8), "a", "b", now=1_700_000_000.0
    )
    twice = catalog.split(once, low.id, bytes.fromhex("10" * 8), "c", "d", now=1_700_000_000.0)[0]
    twice = catalog.split(twice, high.id, bytes.fromhex("30" * 8), "e", "f", now=1_700_000_000.0)[0]
    assert catalog.keeps_lineage(twice)
    assert [p.id for p in twice.retired] == [first.id, "a", "b"]
    assert [p.id for p in catalog.lineage_only(twice)] == [first.id]
    assert [p.id for p in catalog.retired_dropped(twice, [first.id]).retired] == ["a", "b"]
    # An index being deleted has no follower left to wait for.
    assert not catalog.keeps_lineage(catalog.index_deleting(table, "GameTitleIndex"))


def on_demand_table(index: IndexDef) -> TableDef:
    table = catalog.created(
        name="GameScores",
        table_id="cd" * 16,
        key_shape=KeyShape.table(("UserId", "S"), ("GameTitle", "S")),
        attribute_definitions=[("UserId", "S"), ("GameTitle", "S"), ("TopScore", "N")],
        billing_mode=BillingMode.PAY_PER_REQUEST,
        throughput=Throughput(),
        now=1.0,
        owner=owner,
    )
    return catalog.activated(catalog.index_added(table, index))


def test_a_global_index_takes_on_demand_maximums_with_dynamodbs_rules_and_words() -> None:
    """As captured against DynamoDB (ack-api-quirks DDB-TABLE-128, 135, 456): none on a
    provisioned table, each at least 1 ('for index : name', a space before the colon), an empty
    one taken as none; they reach the index's partitions, not the table's."""
    on_demand = BillingMode.PAY_PER_REQUEST
    assert catalog.index_on_demand_created(on_demand, "G", {}) == catalog.OnDemandThroughput()
    assert catalog.index_on_demand_created(
        on_demand, "G", {"MaxWriteRequestUnits": 8}
    ) == catalog.OnDemandThroughput(None, 8)
    with pytest.raises(ValidationError) as refused:
        catalog.index_on_demand_created(BillingMode.PROVISIONED, "G", {"MaxReadRequestUnits": 0})
    assert refused.value.message == (
        "One or more parameter values were invalid: MaxReadRequestUnits for OnDemandThroughput "
        "for index: G cannot be specified when table BillingMode is PROVISIONED."
    )
    with pytest.raises(ValidationError) as refused:
        catalog.index_on_demand_created(on_demand, "G", {"MaxWriteRequestUnits": -1})
    assert refused.value.message == (
        "One or more parameter values were invalid: Requested MaxWriteRequestUnits for "
        "OnDemandThroughput for index : G is outside of valid range"
    )
    index = catalog.global_index(
        name="GameTitleIndex",
        key_shape=INDEX_KEY,
        projection="ALL",
        non_key_attributes=(),
        index_id="ab" * 16,
        billing_mode=on_demand,
        throughput=Throughput(),
        owner=owner,
        on_demand=catalog.OnDemandThroughput(40, 8),
    )
    table = on_demand_table(index)
    again = TableDef.from_json(table.to_json())
    assert again.indexes[0].on_demand == catalog.OnDemandThroughput(40, 8)
    document = catalog.index_throughput_document(table, table.indexes[0])
    assert (document["max_read"], document["max_write"]) == (40, 8)
    assert "max_read" not in catalog.throughput_document(table)
    # A switch to provisioned drops them, as the table's.
    switched = catalog.throughput_updated(
        table,
        BillingMode.PROVISIONED,
        {"ReadCapacityUnits": 5, "WriteCapacityUnits": 5},
        2.0,
        "r",
    )
    assert switched is not None and switched.indexes[0].on_demand.empty


def test_an_index_update_merges_maximums_and_raises_warm_throughput() -> None:
    table = on_demand_table(gsi(BillingMode.PAY_PER_REQUEST, Throughput()))
    name = "GameTitleIndex"
    # On demand an Update must carry maximums or a warm throughput (DDB-TABLE-456's words).
    for empty in ({name: None}, {}):
        with pytest.raises(ValidationError, match="The only Updates for index: GameTitleIndex "):
            catalog.index_throughput_updated(table, {name: None}, "r", on_demand=empty)
    updated = catalog.index_throughput_updated(
        table, {name: None}, "r", on_demand={name: {"MaxWriteRequestUnits": 8}}
    )
    assert updated.status == TableStatus.UPDATING
    assert updated.throughput_version == table.throughput_version + 1
    assert updated.indexes[0].on_demand == catalog.OnDemandThroughput(None, 8)
    active = catalog.activated(updated)
    # The same maximums again change nothing, and are no error (DDB-TABLE-135); -1 removes one.
    same = {name: {"MaxWriteRequestUnits": 8}}
    assert catalog.index_throughput_updated(active, {name: None}, "r", on_demand=same) is active
    removed = catalog.index_throughput_updated(
        active, {name: None}, "r", on_demand={name: {"MaxWriteRequestUnits": -1}}
    )
    assert removed.indexes[0].on_demand.empty
    with pytest.raises(ValidationError, match="for index : GameTitleIndex is outside"):
        catalog.index_throughput_updated(
            active, {name: None}, "r", on_demand={name: {"MaxReadRequestUnits": 0}}
        )
    # A higher warm throughput is recorded with the table ACTIVE: the partitions split to it.
    assert catalog.index_warm_throughput(active.indexes[0]) == catalog.WarmThroughput(12_000, 4_000)
    warmer = catalog.index_throughput_updated(
        active, {name: None}, "r", warm={name: {"WriteUnitsPerSecond": 6_000}}
    )
    assert warmer.status == TableStatus.ACTIVE
    assert warmer.throughput_version == active.throughput_version
    assert warmer.indexes[0].warm == catalog.WarmThroughput(12_000, 6_000)
    assert not catalog.index_warm_settled(warmer.indexes[0])
    assert catalog.prewarm_pending(warmer) and not catalog.prewarm_pending(active)
    with pytest.raises(ValidationError) as refused:
        catalog.index_throughput_updated(
            warmer, {name: None}, "r", warm={name: {"WriteUnitsPerSecond": 5_000}}
        )
    assert refused.value.message == (
        "One or more parameter values were invalid: Requested WriteUnitsPerSecond for "
        "WarmThroughput for index GameTitleIndex is lower than current WarmThroughput, "
        "decreasing WarmThroughput is not supported"
    )
    with pytest.raises(LimitExceeded, match="exceeds TableMaxReadCapacityUnits of the account"):
        catalog.index_throughput_updated(
            warmer, {name: None}, "r", warm={name: {"ReadUnitsPerSecond": 10**6}}
        )
    # Provisioned: no maximums, and ProvisionedThroughput or a warm throughput.
    provisioned = active_table()
    with pytest.raises(ValidationError, match="for index: GameTitleIndex cannot be specified"):
        catalog.index_throughput_updated(
            provisioned, {name: None}, "r", on_demand={name: {"MaxReadRequestUnits": 5}}
        )


def test_a_global_index_created_warm_has_the_partitions_that_serve_it() -> None:
    warm = catalog.index_warm_created("G", {"WriteUnitsPerSecond": 6_500}, "r")
    assert warm == catalog.WarmThroughput(12_000, 6_500)
    assert catalog.index_warm_created("G", None, "r") is None
    with pytest.raises(ValidationError) as refused:
        catalog.index_warm_created("G", {"ReadUnitsPerSecond": 11_999}, "r")
    assert refused.value.message == (
        "One or more parameter values were invalid: Requested ReadUnitsPerSecond for "
        "WarmThroughput for index G is lower than initial throughput for OnDemand"
    )
    index = catalog.global_index(
        name="G",
        key_shape=INDEX_KEY,
        projection="ALL",
        non_key_attributes=(),
        index_id="ab" * 16,
        billing_mode=BillingMode.PAY_PER_REQUEST,
        throughput=Throughput(),
        owner=owner,
        warm=warm,
    )
    assert len(index.partitions) == 7  # 6,500 write units at 1,000 a partition.
    assert catalog.index_warm_settled(index)
    assert IndexDef.from_json(index.to_json()).warm == warm


def test_an_index_split_past_its_warm_throughput_widens_it() -> None:
    warm = catalog.WarmThroughput(12_000, 4_000)
    index = catalog.global_index(
        name="G",
        key_shape=INDEX_KEY,
        projection="ALL",
        non_key_attributes=(),
        index_id="ab" * 16,
        billing_mode=BillingMode.PAY_PER_REQUEST,
        throughput=Throughput(),
        owner=owner,
        warm=warm,
    )
    table = on_demand_table(index)
    first = table.indexes[0].partitions[0]
    split = catalog.index_split(
        table, "ab" * 16, first.id, bytes.fromhex("10" * 8), "x", "y", now=1_700_000_000.0
    )[0]
    assert split.indexes[0].warm == catalog.WarmThroughput(15_000, 5_000)  # Five partitions.
