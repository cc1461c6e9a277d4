"""Global indexes in the typed catalog: placement, throughput, activation with the table, JSON."""

from __future__ import annotations

from fractions import Fraction

from core import catalog
from core.catalog import IndexDef, IndexStatus, TableDef, TableStatus, Throughput
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
