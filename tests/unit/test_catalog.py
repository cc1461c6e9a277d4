"""core.catalog: typed table records, their JSON descriptors and every allowed transition.

Every transition of the tables in `core.catalog` is taken once through its function, and every
move the tables do not list is refused with `IllegalTransition` (or DynamoDB's own error where
DynamoDB refuses it). Time is always passed in, so nothing here reads a clock.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from fractions import Fraction
from typing import Any

import pytest

from core import catalog, limits
from core.catalog import (
    CatalogLocation,
    IllegalTransition,
    IndexDef,
    IndexStatus,
    PartitionState,
    TableDef,
    TableStatus,
    Throughput,
    TtlDef,
)
from core.errors import LimitExceeded, ResourceInUse, ValidationError
from core.keys import KeyShape
from core.placement import initial_ranges
from core.token_bucket import BillingMode

NOW = datetime(2024, 3, 1, 22, 0, tzinfo=UTC).timestamp()
HOUR = 3600.0
TABLE_ID = "0123456789abcdef0123456789abcdef"
SHAPE = KeyShape.table(("pk", "S"), ("sk", "N"))
UNITS = {"ReadCapacityUnits": 10, "WriteCapacityUnits": 10}


def owner(partition_id: str) -> str:
    return f"node-{int(partition_id.rsplit('-', 1)[1]) % 3 + 1}"


TEN = Throughput(10, 10)


def new_table(
    billing_mode: BillingMode = BillingMode.PROVISIONED,
    throughput: Throughput = TEN,
    now: float = NOW,
    **settings: Any,
) -> TableDef:
    return catalog.created(
        name="Music",
        table_id=TABLE_ID,
        key_shape=SHAPE,
        attribute_definitions=[("pk", "S"), ("sk", "N")],
        billing_mode=billing_mode,
        throughput=throughput,
        now=now,
        owner=owner,
        **settings,
    )


def with_status(table: TableDef, status: TableStatus) -> TableDef:
    return TableDef.from_json({**table.to_json(), "status": status.value})


def units(read: int, write: int) -> dict[str, int]:
    return {"ReadCapacityUnits": read, "WriteCapacityUnits": write}


# Creation --------------------------------------------------------------------------------------


def test_a_new_table_is_creating_with_even_partitions_placed_by_the_owner() -> None:
    table = new_table(BillingMode.PAY_PER_REQUEST, Throughput())
    assert table.status == TableStatus.CREATING
    assert table.created == NOW
    assert table.version == 0
    assert table.indexes == () and table.ttl is None
    assert [(p.start, p.end) for p in table.partitions] == initial_ranges(
        limits.ON_DEMAND_INITIAL_PARTITIONS
    )
    for index, partition in enumerate(table.partitions):
        assert partition.id == f"{TABLE_ID}-{index}"
        assert partition.node == owner(partition.id)
        assert (partition.epoch, partition.state, partition.parent) == (
            1,
            PartitionState.SERVING,
            None,
        )
        assert partition.share == Fraction(1, limits.ON_DEMAND_INITIAL_PARTITIONS)


def test_a_provisioned_table_gets_as_many_partitions_as_its_throughput_needs() -> None:
    assert len(new_table(throughput=Throughput(10, 10)).partitions) == 1
    big = new_table(throughput=Throughput(3000, 30_000))
    assert len(big.partitions) == 31
    assert sum(partition.share for partition in big.partitions) == 1


def test_creation_takes_its_time_from_the_caller() -> None:
    assert new_table(now=NOW + 5).created == NOW + 5
    assert new_table() == new_table()


# JSON ------------------------------------------------------------------------------------------


def test_the_descriptor_keeps_the_fields_the_router_reads() -> None:
    table = new_table()
    document = table.to_json()
    assert document["name"] == "Music"
    assert document["id"] == TABLE_ID
    assert document["status"] == "CREATING"
    assert document["key_schema"] == {"hash": ["pk", "S"], "range": ["sk", "N"]}
    assert document["attribute_definitions"] == [
        {"AttributeName": "pk", "AttributeType": "S"},
        {"AttributeName": "sk", "AttributeType": "N"},
    ]
    assert document["billing_mode"] == "PROVISIONED"
    assert document["throughput"] == {"read": 10, "write": 10}
    assert document["throughput_version"] == 0
    assert document["created"] == NOW
    [partition] = document["partitions"]
    assert {k: partition[k] for k in ("id", "start", "end", "epoch", "node")} == {
        "id": f"{TABLE_ID}-0",
        "start": "",
        "end": None,
        "epoch": 1,
        "node": owner(f"{TABLE_ID}-0"),
    }
    assert table.to_json() is document  # Cached: a record never changes.


def test_a_descriptor_from_before_the_typed_catalog_reads_with_defaults() -> None:
    old: dict[str, Any] = {
        "name": "Music",
        "id": TABLE_ID,
        "status": "ACTIVE",
        "key_schema": {"hash": ["pk", "S"], "range": None},
        "attribute_definitions": [{"AttributeName": "pk", "AttributeType": "S"}],
        "billing_mode": "PAY_PER_REQUEST",
        "throughput": {"read": 0, "write": 0},
        "created": NOW,
        "partitions": [
            {"id": f"p{i}", "start": start, "end": end, "epoch": 1, "node": "node-1"}
            for i, (start, end) in enumerate(initial_ranges(4))
        ],
    }
    table = TableDef.from_json(old)
    assert table.throughput_version == 0
    assert table.throughput_changes == catalog.ThroughputChanges()
    assert [p.share for p in table.partitions] == [Fraction(1, 4)] * 4
    assert all(p.state == PartitionState.SERVING and p.parent is None for p in table.partitions)
    document = table.to_json()
    for field, value in old.items():
        if field != "partitions":
            assert document[field] == value, field
    for before, after in zip(old["partitions"], document["partitions"], strict=True):
        assert {k: after[k] for k in before} == before


def test_every_record_round_trips_through_json() -> None:
    table = catalog.activated(new_table(BillingMode.PAY_PER_REQUEST, Throughput()))
    table, _, _ = catalog.split(
        table, f"{TABLE_ID}-1", bytes.fromhex("6000000000000000"), "a", "b", now=NOW
    )
    updated = catalog.throughput_updated(table, BillingMode.PROVISIONED, UNITS, NOW, "r")
    assert updated is not None
    index = IndexDef(
        "ByAlbum", KeyShape.table(("album", "S")), "INCLUDE", IndexStatus.CREATING, ("year",)
    )
    with_index = catalog.index_added(updated, index)
    full = catalog.versioned(replace(with_index, ttl=TtlDef("expires", True), _json=None), 7)
    document = full.to_json()
    assert TableDef.from_json(document) == full
    assert TableDef.from_json(document).to_json() == document
    assert document["version"] == 7
    assert document["ttl"] == {
        "attribute": "expires",
        "enabled": True,
        "settled": True,
        "changed": None,
        "version": 0,
    }
    assert IndexDef.from_json(index.to_json()) == index
    assert TtlDef.from_json(TtlDef("ttl", False).to_json()) == TtlDef("ttl", False)


# Table statuses --------------------------------------------------------------------------------


def test_every_allowed_table_transition_has_its_function() -> None:
    creating = new_table()
    active = catalog.activated(creating)
    assert active.status == TableStatus.ACTIVE
    updating = catalog.throughput_updated(active, None, units(20, 20), NOW, "r")
    assert updating is not None and updating.status == TableStatus.UPDATING
    assert catalog.activated(updating).status == TableStatus.ACTIVE
    assert catalog.deleting(active, NOW).status == TableStatus.DELETING
    assert catalog.deleting(updating, NOW).status == TableStatus.DELETING
    overdue = NOW + limits.TABLE_CREATION_SECONDS_MAX + 1
    deleting = catalog.deleting(creating, overdue)
    assert deleting.status == TableStatus.DELETING
    catalog.check_removal(deleting)
    catalog.check_removal(creating)
    taken = {
        (None, TableStatus.CREATING),
        (TableStatus.CREATING, TableStatus.ACTIVE),
        (TableStatus.ACTIVE, TableStatus.UPDATING),
        (TableStatus.UPDATING, TableStatus.ACTIVE),
        (TableStatus.ACTIVE, TableStatus.DELETING),
        (TableStatus.UPDATING, TableStatus.DELETING),
        (TableStatus.CREATING, TableStatus.DELETING),
        (TableStatus.DELETING, None),
        (TableStatus.CREATING, None),
    }
    assert taken == catalog.TABLE_TRANSITIONS


@pytest.mark.parametrize("status", list(TableStatus))
def test_moves_the_table_does_not_list_are_refused(status: TableStatus) -> None:
    table = with_status(new_table(), status)
    allowed = catalog.TABLE_TRANSITIONS
    if (status, TableStatus.ACTIVE) in allowed:
        assert catalog.may_activate(table)
        catalog.activated(table)
    else:
        assert not catalog.may_activate(table)
        with pytest.raises(IllegalTransition):
            catalog.activated(table)
    if (status, None) in allowed:
        assert catalog.may_remove(table)
        catalog.check_removal(table)
    else:
        assert not catalog.may_remove(table)
        with pytest.raises(IllegalTransition):
            catalog.check_removal(table)
    overdue = NOW + limits.TABLE_CREATION_SECONDS_MAX + 1
    if (status, TableStatus.DELETING) in allowed:
        catalog.deleting(table, overdue)
    else:
        with pytest.raises(IllegalTransition):
            catalog.deleting(table, overdue)
    if status != TableStatus.ACTIVE:
        with pytest.raises(ResourceInUse):
            catalog.throughput_updated(table, None, units(20, 20), NOW, "r")


def test_a_table_being_created_cannot_be_deleted_until_its_creation_is_overdue() -> None:
    creating = new_table()
    with pytest.raises(ResourceInUse) as raised:
        catalog.deleting(creating, NOW + limits.TABLE_CREATION_SECONDS_MAX)
    assert raised.value.message == (
        "Attempt to change a resource which is still in use: Table is being created: Music"
    )
    assert catalog.deleting(creating, NOW + limits.TABLE_CREATION_SECONDS_MAX + 0.001)


def test_a_protected_table_cannot_be_deleted_in_any_status() -> None:
    for status in (TableStatus.ACTIVE, TableStatus.UPDATING, TableStatus.CREATING):
        table = with_status(new_table(), status)
        protected = catalog.settings_updated(
            table, deletion_protection=True, table_class=None, now=NOW
        )
        with pytest.raises(ValidationError) as raised:
            catalog.deleting(protected, NOW + limits.TABLE_CREATION_SECONDS_MAX + 1)
        assert raised.value.message == catalog.DELETION_PROTECTED
        lifted = catalog.settings_updated(
            protected, deletion_protection=False, table_class=None, now=NOW
        )
        deleting = catalog.deleting(lifted, NOW + limits.TABLE_CREATION_SECONDS_MAX + 1)
        assert deleting.status == TableStatus.DELETING


def test_table_class_and_protection_survive_the_descriptor() -> None:
    table = catalog.activated(new_table())
    assert (table.deletion_protection, table.table_class) == (False, None)
    named = catalog.settings_updated(
        table, deletion_protection=None, table_class=catalog.TableClass.STANDARD, now=NOW
    )
    # STANDARD is every table's class until named otherwise: naming it is not a change.
    assert (named.table_class, named.table_class_updated) == (catalog.TableClass.STANDARD, None)
    changed = catalog.settings_updated(
        named,
        deletion_protection=True,
        table_class=catalog.TableClass.STANDARD_INFREQUENT_ACCESS,
        now=NOW + 5,
    )
    assert changed.table_class_updated == NOW + 5
    assert changed.status == TableStatus.ACTIVE
    assert TableDef.from_json(changed.to_json()) == changed
    assert TableDef.from_json(table.to_json()) == table


def test_changes_return_new_records_and_leave_the_old_ones() -> None:
    creating = new_table()
    document = creating.to_json()
    active = catalog.activated(creating)
    assert creating.status == TableStatus.CREATING
    assert creating.to_json() is document and document["status"] == "CREATING"
    assert active.to_json()["status"] == "ACTIVE"


# UpdateTable -----------------------------------------------------------------------------------


def test_update_table_records_increases_and_decreases_per_utc_day() -> None:
    table = catalog.activated(new_table())
    first = catalog.throughput_updated(table, None, units(5, 5), NOW + HOUR, "r")  # 23:00 UTC
    assert first is not None
    assert first.throughput == Throughput(5, 5)
    assert first.throughput_version == 1
    assert first.throughput_changes.decreases == 1
    assert first.throughput_changes.decreases_day == "2024-03-01"
    assert first.throughput_changes.last_decrease == NOW + HOUR
    second = catalog.throughput_updated(
        catalog.activated(first), None, units(4, 4), NOW + 1.5 * HOUR, "r"
    )
    assert second is not None
    assert second.throughput_changes.decreases == 2
    assert catalog.decreases_today(second.throughput_changes, NOW + 1.5 * HOUR) == 2
    increased = catalog.throughput_updated(
        catalog.activated(second), None, units(8, 8), NOW + 1.6 * HOUR, "r"
    )
    assert increased is not None
    assert increased.throughput_changes.decreases == 2
    assert increased.throughput_changes.last_increase == NOW + 1.6 * HOUR
    next_day = NOW + 2.5 * HOUR  # 00:30 UTC on 2 March.
    assert catalog.decreases_today(increased.throughput_changes, next_day) == 0
    third = catalog.throughput_updated(
        catalog.activated(increased), None, units(2, 2), next_day, "r"
    )
    assert third is not None
    assert third.throughput_changes.decreases == 1
    assert third.throughput_changes.decreases_day == "2024-03-02"
    assert third.throughput_version == 4


def test_switching_to_pay_per_request_and_back() -> None:
    table = catalog.activated(new_table())
    on_demand = catalog.throughput_updated(table, BillingMode.PAY_PER_REQUEST, None, NOW + 1, "r")
    assert on_demand is not None
    assert on_demand.billing_mode == BillingMode.PAY_PER_REQUEST
    assert on_demand.throughput == Throughput(0, 0)
    assert on_demand.throughput_changes.pay_per_request_since == NOW + 1
    on_demand = catalog.activated(on_demand)
    # Asking again for on-demand changes nothing and is no error.
    assert (
        catalog.throughput_updated(on_demand, BillingMode.PAY_PER_REQUEST, None, NOW, "r") is None
    )
    with pytest.raises(ValidationError, match="Neither ReadCapacityUnits nor WriteCapacityUnits"):
        catalog.throughput_updated(on_demand, BillingMode.PAY_PER_REQUEST, UNITS, NOW, "r")
    with pytest.raises(ValidationError, match="ProvisionedThroughput must be specified"):
        catalog.throughput_updated(on_demand, BillingMode.PROVISIONED, None, NOW, "r")
    back = catalog.throughput_updated(on_demand, BillingMode.PROVISIONED, UNITS, NOW + 2, "r")
    assert back is not None and back.throughput == Throughput(10, 10)
    # Leaving on-demand is neither an increase nor a decrease.
    assert back.throughput_changes.last_increase is None
    assert back.throughput_changes.decreases == 0


def test_update_table_refuses_no_change_and_too_much() -> None:
    table = catalog.activated(new_table())
    with pytest.raises(ValidationError, match="will not change"):
        catalog.throughput_updated(table, None, UNITS, NOW, "r")
    too_much = limits.PROVISIONED_UNITS_PER_TABLE_MAX + 1
    with pytest.raises(LimitExceeded) as raised:
        catalog.throughput_updated(table, None, units(too_much, 1), NOW, "eu-west-1")
    assert "for the account in eu-west-1" in raised.value.message


def test_the_throughput_document_is_what_the_nodes_need() -> None:
    table = new_table(BillingMode.PAY_PER_REQUEST, Throughput())
    assert catalog.throughput_document(table) == {
        "billing_mode": "PAY_PER_REQUEST",
        "read": 0,
        "write": 0,
        "partition_count": 4,
        "version": 0,
    }


def maximums(read: int | None = None, write: int | None = None) -> dict[str, int]:
    given = {"MaxReadRequestUnits": read, "MaxWriteRequestUnits": write}
    return {member: value for member, value in given.items() if value is not None}


GATE = (
    "One or more parameter values were invalid: {} for OnDemandThroughput cannot be specified "
    "when {}"
)
OUT_OF_RANGE = (
    "One or more parameter values were invalid: Requested {} for OnDemandThroughput for table is "
    "outside of valid range"
)


def test_create_table_takes_on_demand_maximums_on_an_on_demand_table_only() -> None:
    on_demand = BillingMode.PAY_PER_REQUEST
    assert catalog.on_demand_created(on_demand, maximums(40, 30)) == catalog.OnDemandThroughput(
        40, 30
    )
    assert catalog.on_demand_created(on_demand, None).empty
    assert catalog.on_demand_created(BillingMode.PROVISIONED, {}).empty  # {} is no maximum.
    # A provisioned table: refused naming the first member given, before its range.
    for given, member in (
        (maximums(0, 5), "MaxReadRequestUnits"),
        (maximums(None, 5), "MaxWriteRequestUnits"),
    ):
        with pytest.raises(ValidationError) as refused:
            catalog.on_demand_created(BillingMode.PROVISIONED, given)
        assert refused.value.message == GATE.format(member, "table BillingMode is PROVISIONED.")
    for bad in (0, -1, -5):
        with pytest.raises(ValidationError) as refused:
            catalog.on_demand_created(on_demand, maximums(10, bad))
        assert refused.value.message == OUT_OF_RANGE.format("MaxWriteRequestUnits")


def test_update_table_merges_maximums_and_a_provisioned_table_has_none() -> None:
    table = catalog.activated(
        new_table(
            BillingMode.PAY_PER_REQUEST, Throughput(), on_demand=catalog.OnDemandThroughput(20, 15)
        )
    )
    updated = catalog.throughput_updated(table, None, None, NOW, "r", maximums(40))
    assert updated is not None and updated.status == TableStatus.UPDATING
    assert updated.on_demand == catalog.OnDemandThroughput(40, 15)
    assert updated.throughput_version == table.throughput_version + 1
    # LastUpdateToPayPerRequestDateTime stays when the table was on demand already.
    assert updated.throughput_changes == table.throughput_changes
    removed = catalog.throughput_updated(table, None, None, NOW, "r", maximums(-1))
    assert removed is not None and removed.on_demand == catalog.OnDemandThroughput(None, 15)
    assert removed.on_demand.described() == {"MaxWriteRequestUnits": 15}
    # The maximums it has already: nothing to do.
    assert catalog.throughput_updated(table, None, None, NOW, "r", maximums(20, 15)) is None
    for bad in (0, -2):
        with pytest.raises(ValidationError) as refused:
            catalog.throughput_updated(table, None, None, NOW, "r", maximums(bad))
        assert refused.value.message == OUT_OF_RANGE.format("MaxReadRequestUnits")
    # Switching to PROVISIONED clears them; giving one with the switch is refused.
    provisioned = catalog.throughput_updated(table, BillingMode.PROVISIONED, UNITS, NOW, "r")
    assert provisioned is not None and provisioned.on_demand.empty
    with pytest.raises(ValidationError) as refused:
        catalog.throughput_updated(
            table, BillingMode.PROVISIONED, UNITS, NOW, "r", maximums(None, 0)
        )
    assert refused.value.message == GATE.format(
        "MaxWriteRequestUnits", "the table BillingMode is PROVISIONED"
    )
    # A provisioned table given one alone: the billing mode is refused before the range.
    with pytest.raises(ValidationError) as refused:
        catalog.throughput_updated(
            catalog.activated(new_table()), None, None, NOW, "r", maximums(0)
        )
    assert refused.value.message == GATE.format(
        "MaxReadRequestUnits", "the table BillingMode is PROVISIONED"
    )
    # Switching to on demand with maximums sets them.
    switched = catalog.throughput_updated(
        catalog.activated(new_table()), BillingMode.PAY_PER_REQUEST, None, NOW, "r", maximums(10)
    )
    assert switched is not None and switched.on_demand == catalog.OnDemandThroughput(10, None)
    assert switched.throughput_changes.pay_per_request_since == NOW
    # The record keeps them across its descriptor, and the nodes get them.
    back = TableDef.from_json(updated.to_json())
    assert back.on_demand == updated.on_demand
    assert catalog.throughput_document(updated) == {
        "billing_mode": "PAY_PER_REQUEST",
        "read": 0,
        "write": 0,
        "partition_count": 4,
        "version": updated.throughput_version,
        "max_read": 40,
        "max_write": 15,
    }


def warm(read: int | None = None, write: int | None = None) -> dict[str, int]:
    given = {"ReadUnitsPerSecond": read, "WriteUnitsPerSecond": write}
    return {member: value for member, value in given.items() if value is not None}


def test_a_table_is_created_with_the_partitions_its_warm_throughput_needs() -> None:
    # A member not given starts at the minimum every table has.
    asked = catalog.warm_created(warm(None, 10_000), "r")
    assert asked == catalog.WarmThroughput(12_000, 10_000)
    table = new_table(BillingMode.PAY_PER_REQUEST, Throughput(), warm=asked)
    assert len(table.partitions) == 10
    assert catalog.warm_throughput(table) == asked and catalog.warm_settled(table)
    # Without one, the table's warm throughput is what its partitions serve.
    plain = new_table(BillingMode.PAY_PER_REQUEST, Throughput())
    assert catalog.warm_throughput(plain) == catalog.WarmThroughput(12_000, 4_000)
    assert catalog.warm_throughput(new_table()) == catalog.WarmThroughput(3_000, 1_000)
    assert catalog.warm_created({}, "r") is None
    # The minimum in DynamoDB's words as captured (ack-api-quirks DDB-TABLE-457; its message
    # goes on with a link the capture cuts short), and the per-table quota (dynalab's words).
    with pytest.raises(ValidationError) as refused:
        catalog.warm_created(warm(11_999), "r")
    assert refused.value.message == (
        "One or more parameter values were invalid: Requested ReadUnitsPerSecond for "
        "WarmThroughput for table is lower than initial throughput for OnDemand"
    )
    with pytest.raises(LimitExceeded, match="WriteUnitsPerSecond, 40001, is above"):
        catalog.warm_created(warm(None, 40_001), "r")


def test_update_table_raises_a_warm_throughput_never_lowers_it() -> None:
    table = catalog.activated(new_table(BillingMode.PAY_PER_REQUEST, Throughput()))
    raised = catalog.warm_updated(table, warm(None, 8_160), "r")
    assert raised is not None and raised.warm == catalog.WarmThroughput(12_000, 8_160)
    # UPDATING until its partitions serve it: nine of them, split at the widest each time.
    assert not catalog.warm_settled(raised) and raised.status == TableStatus.ACTIVE
    assert catalog.warm_updated(raised, warm(12_000, 8_160), "r") is None  # Nothing to do.
    # Lower than the current one, before the minimum: a 0 is refused so too (DDB-TABLE-457).
    for lower in (warm(None, 8_000), warm(0, 0)):
        with pytest.raises(ValidationError) as refused:
            catalog.warm_updated(raised, lower, "r")
        unit = (
            "WriteUnitsPerSecond"
            if lower.get("ReadUnitsPerSecond") is None
            else "ReadUnitsPerSecond"
        )
        assert refused.value.message == (
            f"One or more parameter values were invalid: Requested {unit} for WarmThroughput "
            "for table is lower than current WarmThroughput, decreasing WarmThroughput is not "
            "supported"
        )
    grown = raised
    while not catalog.warm_settled(grown):
        partition, key = catalog.widest_partition(grown)
        grown, _, _ = catalog.split(
            grown, partition.id, key, f"{partition.id}.l", f"{partition.id}.h", now=NOW
        )
    assert len(grown.partitions) == 9
    assert catalog.warm_throughput(grown) == catalog.WarmThroughput(12_000, 8_160)
    widths = {int(p.end or "1" + "0" * 16, 16) - int(p.start or "0", 16) for p in grown.partitions}
    assert len(widths) <= 2  # Halves and quarters of the hash space: as even as nine can be.
    # A split past what it asked for (for heat, for size) widens it to what the table serves.
    partition, key = catalog.widest_partition(grown)
    more, _, _ = catalog.split(grown, partition.id, key, "x.l", "x.h", now=NOW)
    assert catalog.warm_throughput(more) == catalog.partitions_warm(10)
    assert TableDef.from_json(more.to_json()).warm == more.warm
    with pytest.raises(ResourceInUse):
        catalog.warm_updated(new_table(), warm(20_000), "r")  # CREATING


# Partitions ------------------------------------------------------------------------------------


def test_a_split_makes_two_children_at_the_next_epoch_sharing_the_parents_share() -> None:
    table = catalog.activated(new_table(BillingMode.PAY_PER_REQUEST, Throughput()))
    parent = table.partitions[1]
    key = bytes.fromhex("5000000000000000")
    split, low, high = catalog.split(table, parent.id, key, "low", "high", now=NOW)
    assert (low.start, low.end, high.start, high.end) == (
        parent.start,
        key.hex(),
        key.hex(),
        parent.end,
    )
    assert low.epoch == high.epoch == parent.epoch + 1
    assert low.parent == high.parent == parent.id
    assert low.node == high.node == parent.node
    assert low.share == high.share == parent.share / 2
    assert [p.id for p in split.partitions] == [table.partitions[0].id, "low", "high"] + [
        p.id for p in table.partitions[2:]
    ]
    assert sum(p.share for p in split.partitions) == 1
    [retired] = split.retired
    assert (retired.id, retired.state) == (parent.id, PartitionState.RETIRED)
    # Split the low child again: both retired partitions are still some serving one's parent.
    again, _, _ = catalog.split(
        split, "low", bytes.fromhex("4800000000000000"), "l2", "h2", now=NOW
    )
    assert [p.id for p in again.retired] == [parent.id, "low"]
    assert sum(p.share for p in again.partitions) == 1
    # Once neither child of the first split serves, the first parent is no longer kept.
    last, _, _ = catalog.split(
        again, "high", bytes.fromhex("6000000000000000"), "l3", "h3", now=NOW
    )
    assert [p.id for p in last.retired] == ["low", "high"]


def test_illegal_splits_are_refused() -> None:
    creating = new_table(BillingMode.PAY_PER_REQUEST, Throughput())
    partition = creating.partitions[1]
    inside = bytes.fromhex("5000000000000000")
    with pytest.raises(IllegalTransition):
        catalog.split(creating, partition.id, inside, "a", "b", now=NOW)
    active = catalog.activated(creating)
    with pytest.raises(IllegalTransition):
        catalog.split(active, "nope", inside, "a", "b", now=NOW)
    with pytest.raises(IllegalTransition):
        catalog.split(active, partition.id, bytes.fromhex(partition.start), "a", "b", now=NOW)
    with pytest.raises(IllegalTransition):
        catalog.split(active, partition.id, bytes.fromhex("9000000000000000"), "a", "b", now=NOW)
    assert {
        (PartitionState.SERVING, PartitionState.RETIRED),
        (PartitionState.SERVING, PartitionState.SERVING),  # A move (`core.moves`).
    } == catalog.PARTITION_TRANSITIONS


# Indexes ---------------------------------------------------------------------------------------


def test_an_index_moves_through_its_statuses() -> None:
    table = catalog.activated(new_table())
    index = IndexDef("ByAlbum", KeyShape.table(("album", "S")), "ALL", IndexStatus.CREATING)
    table = catalog.index_added(table, index)
    with pytest.raises(IllegalTransition):
        catalog.index_added(table, index)
    for status in (IndexStatus.BACKFILLING, IndexStatus.ACTIVE, IndexStatus.DELETING):
        table = catalog.index_moved(table, "ByAlbum", status)
        assert table.indexes[0].status == status
    with pytest.raises(IllegalTransition):
        catalog.index_moved(table, "ByAlbum", IndexStatus.ACTIVE)
    table = catalog.index_moved(table, "ByAlbum", None)
    assert table.indexes == ()
    with pytest.raises(IllegalTransition):
        catalog.index_moved(table, "ByAlbum", IndexStatus.ACTIVE)


# The bootstrap record --------------------------------------------------------------------------


def test_the_bootstrap_record_is_an_item_of_the_bootstrap_table() -> None:
    location = CatalogLocation("node-2", "10.0.0.2:7000")
    item = location.to_item()
    assert item["name"] == {"S": catalog.BOOTSTRAP_RECORD_NAME}
    assert CatalogLocation.from_item(item) == location
    assert location.partition == catalog.CATALOG_PARTITION_ID


def test_a_replicated_catalogs_record_names_every_replica_and_its_address() -> None:
    replicas = (("node-2", "h:2"), ("node-3", "h:3"), ("node-1", "h:1"))
    location = CatalogLocation("node-2", "h:2", replicas=replicas)
    assert CatalogLocation.from_item(location.to_item()) == location
    assert location.nodes == ("node-2", "node-3", "node-1")
    assert location.address_of("node-1") == "h:1"
    partition = location.partition_of(catalog.CATALOG_PARTITION_ID)
    assert (partition.node, partition.replicas) == ("node-2", ("node-2", "node-3", "node-1"))
    # A record written before replicas were kept reads as a catalog of one copy.
    one = CatalogLocation("node-2", "h:2")
    assert "catalog_replicas" not in one.to_item()
    assert one.nodes == ("node-2",) and one.partition_of("p").replicas == ()
    # Two records naming different replica sets disagree.
    with pytest.raises(catalog.CatalogDisagreement):
        catalog.agreed_location({"node-1": location, "node-2": one})


def test_the_agreed_location_is_the_one_every_node_holding_a_record_holds() -> None:
    one, two = CatalogLocation("node-1", "a:1"), CatalogLocation("node-2", "a:2")
    assert catalog.agreed_location({}) is None
    assert catalog.agreed_location({"node-1": None, "node-2": None}) is None
    assert catalog.agreed_location({"node-1": None, "node-2": two, "node-3": two}) == two
    with pytest.raises(catalog.CatalogDisagreement):
        catalog.agreed_location({"node-1": one, "node-2": two, "node-3": two})


# Tags -------------------------------------------------------------------------------------------


def test_tags_are_added_replaced_and_removed_in_the_record() -> None:
    table = catalog.activated(new_table())
    tagged = catalog.tagged(table, [("team", "a"), ("cost", "1")])
    assert tagged.tags == (("team", "a"), ("cost", "1"))
    assert table.tags == ()  # A change makes a new record.
    # A key is unique per table: adding it again takes the new value and keeps its place.
    again = catalog.tagged(tagged, [("team", "b"), ("env", "prod")])
    assert again.tags == (("team", "b"), ("cost", "1"), ("env", "prod"))
    # Removing keys the table does not have changes nothing else.
    assert catalog.untagged(again, ["cost", "absent"]).tags == (("team", "b"), ("env", "prod"))
    assert TableDef.from_json(again.to_json()) == again
    # A descriptor written before tags were kept reads as a table without tags.
    older = {k: v for k, v in again.to_json().items() if k != "tags"}
    assert TableDef.from_json(older).tags == ()


def test_create_table_keeps_its_tags() -> None:
    table = new_table(
        BillingMode.PAY_PER_REQUEST, Throughput(), tags=[("team", "a"), ("team", "b")]
    )
    assert table.tags == (("team", "b"),)


def test_a_table_holds_at_most_50_tags() -> None:
    table = catalog.activated(new_table())
    full = catalog.tagged(table, [(f"k{n}", "v") for n in range(limits.TAGS_PER_TABLE_MAX)])
    assert len(full.tags) == limits.TAGS_PER_TABLE_MAX
    assert catalog.tagged(full, [("k0", "new")]).tags[0] == ("k0", "new")  # Replacing is no add.
    # DynamoDB's ValidationException, not a LimitExceededException (as captured against the
    # service: ack-api-quirks DDB-TABLE-107).
    with pytest.raises(ValidationError, match=f"^{catalog.TOO_MANY_TAGS}$"):
        catalog.tagged(full, [("one-more", "v")])
    with pytest.raises(ValidationError, match=f"^{catalog.TOO_MANY_TAGS}$"):
        catalog.tagged(table, [(f"k{n}", "v") for n in range(limits.TAGS_PER_TABLE_MAX + 1)])


@pytest.mark.parametrize("status", [TableStatus.CREATING, TableStatus.DELETING])
def test_a_table_being_created_or_deleted_cannot_be_tagged(status: TableStatus) -> None:
    table = with_status(new_table(), status)
    with pytest.raises(ResourceInUse):
        catalog.tagged(table, [("k", "v")])
    with pytest.raises(ResourceInUse):
        catalog.untagged(table, ["k"])
