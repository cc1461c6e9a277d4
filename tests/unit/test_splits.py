"""The pure rules of a split (`core.splits`): where a partition splits, and the catalog record."""

from __future__ import annotations

import dataclasses
from fractions import Fraction
from typing import Any

import pytest

from core import catalog, indexes, splits
from core.catalog import (
    BillingMode,
    IndexDef,
    IndexStatus,
    PartitionState,
    TableDef,
    Throughput,
)
from core.keycodec import encode_storage_key
from core.keys import KeyShape
from core.size import item_size_bytes

TABLE_ID = "ab" * 16


def collection(pk: str) -> bytes:
    return encode_storage_key({"S": pk}, None)


def key(pk: str, sk: int) -> bytes:
    return encode_storage_key({"S": pk}, {"N": str(sk)})


def collection_of(storage_key: bytes) -> bytes:
    """The collection prefix of the keys these tests make (their partition keys are 'c...')."""
    for pk in ("a", "b", "c", "d", "e", "f", "g"):
        prefix = collection(pk)
        if storage_key.startswith(prefix):
            return prefix
    return storage_key


def rows(*entries: tuple[str, int, int]) -> list[tuple[bytes, int]]:
    return sorted((key(pk, sk), size) for pk, sk, size in entries)


def table() -> TableDef:
    created = catalog.created(
        name="T",
        table_id=TABLE_ID,
        key_shape=KeyShape.table(("pk", "S"), ("sk", "N")),
        attribute_definitions=[("pk", "S"), ("sk", "N")],
        billing_mode=BillingMode.PROVISIONED,
        throughput=Throughput(10, 10),
        now=0.0,
        owner=lambda _: "node-1",
    )
    return catalog.activated(created)


def test_the_split_falls_on_the_collection_boundary_nearest_half_the_bytes() -> None:
    found = rows(("a", 1, 100), ("b", 1, 100), ("c", 1, 100), ("d", 1, 100))
    ordered = [collection_of(k) for k, _ in found]
    total = sum(size for _, size in found)
    at = splits.halving_key(found, total, collection_of, inside_collection=True).key
    assert at == ordered[2], "two collections on each side"


def test_a_boundary_past_half_wins_when_it_is_nearer() -> None:
    # Collections in key order of 10, 45 and 45 bytes: the boundary after 55 bytes is nearer
    # to half (50) than the one after 10.
    ordered = sorted(["a", "b", "c"], key=collection)
    sizes = dict(zip(ordered, [10, 45, 45], strict=True))
    found = rows(*((pk, 1, sizes[pk]) for pk in ordered))
    at = splits.halving_key(found, 100, collection_of, inside_collection=True).key
    assert at == collection(ordered[2])


def test_one_collection_splits_between_sort_keys_without_a_local_index() -> None:
    found = rows(*(("a", sk, 10) for sk in range(10)))
    at = splits.halving_key(found, 100, collection_of, inside_collection=True).key
    assert at == key("a", 5)


def test_one_collection_of_a_table_with_a_local_index_refuses_to_split() -> None:
    found = rows(*(("a", sk, 10) for sk in range(10)))
    with pytest.raises(splits.SplitRefused, match="local secondary index"):
        splits.halving_key(found, 100, collection_of, inside_collection=False)


def test_a_single_item_cannot_split() -> None:
    with pytest.raises(splits.SplitRefused, match="too few items"):
        splits.halving_key(rows(("a", 1, 500)), 500, collection_of, inside_collection=True)


def test_the_walk_stops_once_no_later_key_can_do_better() -> None:
    read: list[bytes] = []

    def counted() -> object:
        for entry in rows(*((pk, 1, 10) for pk in "abcdefg")):
            read.append(entry[0])
            yield entry

    splits.halving_key(counted(), 70, collection_of, inside_collection=True)  # type: ignore[arg-type]
    assert len(read) < 7


def test_an_operator_split_key_must_be_inside_the_partition() -> None:
    start, inside, end, after = sorted(key(pk, 1) for pk in "abcd")
    for outside in (start, end, after, b""):
        with pytest.raises(splits.SplitRefused, match="not inside"):
            splits.check_split_key(outside, start, end, collection_of, inside_collection=True)
    splits.check_split_key(inside, start, end, collection_of, inside_collection=True)


def test_a_table_with_a_local_index_splits_only_at_a_collection_start() -> None:
    with pytest.raises(splits.SplitRefused, match="first key of an item collection"):
        splits.check_split_key(key("b", 3), b"", None, collection_of, inside_collection=False)
    splits.check_split_key(collection("b"), b"", None, collection_of, inside_collection=False)


def test_the_record_names_both_children_and_is_idempotent() -> None:
    before = table()
    parent = before.partitions[0]
    after = splits.recorded(before, TABLE_ID, parent, key("b", 1), now=1_700_000_000.0)
    low, high = splits.children_of(after, parent.id) or pytest.fail("no children")
    assert (low.id, high.id) == splits.child_ids(parent.id, parent.epoch)
    assert low.epoch == high.epoch == parent.epoch + 1
    assert low.share == high.share == parent.share / 2
    assert (low.end, high.start) == (key("b", 1).hex(), key("b", 1).hex())
    assert [p.state for p in after.retired] == [PartitionState.RETIRED]
    # A retry after the record (the reply was lost) finds it there and changes nothing.
    assert splits.recorded(after, TABLE_ID, parent, key("b", 1), now=1_700_000_000.0) is after


def test_the_record_refuses_a_partition_the_catalog_no_longer_has_as_planned() -> None:
    before = table()
    parent = before.partitions[0]
    with pytest.raises(splits.SplitConflict):
        splits.recorded(None, TABLE_ID, parent, key("b", 1), now=1_700_000_000.0)
    with pytest.raises(splits.SplitConflict):
        splits.recorded(
            before, "cd" * 16, parent, key("b", 1), now=1_700_000_000.0
        )  # Dropped and created again.
    at = bytes.fromhex("8000")
    older = splits.recorded(before, TABLE_ID, parent, at, now=1_700_000_000.0)
    children = splits.children_of(older, parent.id)
    assert children is not None
    low = children[0]
    # The catalog has split the low child again while its owner plans with the old epoch.
    newer = catalog.split(older, low.id, bytes.fromhex("40"), "x", "y", now=1_700_000_000.0)[0]
    with pytest.raises(splits.SplitConflict):
        splits.recorded(newer, TABLE_ID, low, bytes.fromhex("20"), now=1_700_000_000.0)
    moved = dataclasses.replace(low, epoch=low.epoch + 1)
    with pytest.raises(splits.SplitConflict, match="epoch"):
        splits.recorded(older, TABLE_ID, moved, bytes.fromhex("20"), now=1_700_000_000.0)


def test_recovery_installs_what_the_catalog_recorded_and_nothing_else() -> None:
    before = table()
    parent = before.partitions[0]
    assert splits.recovery(before, TABLE_ID, parent.id, parent.epoch) == ()
    after = splits.recorded(before, TABLE_ID, parent, key("b", 1), now=1_700_000_000.0)
    children = splits.recovery(after, TABLE_ID, parent.id, parent.epoch)
    assert [c.id for c in children] == list(splits.child_ids(parent.id, parent.epoch))
    assert splits.recovery(after, TABLE_ID, parent.id, parent.epoch + 1) == ()
    assert splits.recovery(after, "cd" * 16, parent.id, parent.epoch) == ()
    assert splits.recovery(None, TABLE_ID, parent.id, parent.epoch) == ()


def test_a_child_gets_the_rate_of_its_share() -> None:
    document = {"billing_mode": "PROVISIONED", "read": 100, "write": 40, "partition_count": 1}
    child = splits.child_throughput(document, Fraction(1, 2))
    assert child == {**document, "partition_count": 2}
    assert splits.child_throughput(None, Fraction(1, 2)) is None


def test_the_halving_point_counts_the_items_and_bytes_below_it() -> None:
    found = rows(("a", 1, 100), ("a", 2, 30), ("b", 1, 100), ("c", 1, 70), ("d", 1, 100))
    total = sum(size for _, size in found)
    point = splits.halving_key(found, total, collection_of, inside_collection=True)
    below = [(k, size) for k, size in found if k < point.key]
    assert (point.items, point.bytes) == (len(below), sum(size for _, size in below))
    inside = rows(*(("a", sk, 10) for sk in range(10)))
    point = splits.halving_key(inside, 100, collection_of, inside_collection=True)
    assert (point.key, point.items, point.bytes) == (key("a", 5), 5, 50)


SHAPE = KeyShape.table(("pk", "S"), ("sk", "N"))
BY_OTHER = IndexDef(
    name="byOther",
    key_shape=KeyShape.table(("pk", "S"), ("other", "S")),
    projection="ALL",
    status=IndexStatus.ACTIVE,
    local=True,
)


def change(seq: int, old: dict[str, Any] | None, new: dict[str, Any] | None) -> dict[str, Any]:
    image = new if new is not None else old
    assert image is not None
    return {"seq": seq, "keys": {"pk": image["pk"], "sk": image["sk"]}, "old": old, "new": new}


def song(pk: str, sk: int, **more: str) -> dict[str, Any]:
    return {"pk": {"S": pk}, "sk": {"N": str(sk)}} | {k: {"S": v} for k, v in more.items()}


def test_counts_follow_each_write_below_the_split_and_ignore_those_above() -> None:
    low, high = sorted(["a", "b"], key=collection)
    below = collection(high)
    start = splits.RangeCounts(7, 2, 50, {"byOther": (1, 120)})
    records = [
        change(8, None, song(low, 1, other="x")),  # Insert below, with an index entry.
        change(9, song(low, 1, other="x"), song(low, 1, other="longer")),  # Modify below.
        change(10, None, song(high, 1, other="y")),  # Insert above: not counted.
        {"seq": 11, "kind": "END", "keys": None},
        change(12, song(low, 2), None),  # Remove below.
    ]
    since = splits.LogSince(start.seq, SHAPE, [BY_OTHER])
    since.absorb(records[:2])
    since.absorb(records[2:])  # Read in two goes, as a split reads the log while it plans.
    after = since.counts(start, below)
    entry = indexes.entry_size_bytes(
        indexes.index_entry(song(low, 1, other="longer"), BY_OTHER, SHAPE) or {}
    )
    assert after.seq == 12
    assert after.items == 2 + 1 - 1
    assert after.bytes == 50 + item_size_bytes(song(low, 1, other="longer")) - item_size_bytes(
        song(low, 2)
    )
    assert after.indexes == {"byOther": (2, 120 + entry)}
    assert splits.RangeCounts.from_json(after.to_json()) == after


def test_a_key_written_many_times_counts_once_by_its_first_and_last_image() -> None:
    since = splits.LogSince(0, SHAPE, [BY_OTHER])
    since.absorb(
        [
            change(1, None, song("a", 1, other="x")),
            change(2, song("a", 1, other="x"), song("a", 1, other="y" * 50)),
            change(3, song("a", 1, other="y" * 50), None),
            change(4, None, song("a", 2)),
            change(5, song("a", 2), song("a", 2, pad="p" * 10)),
        ]
    )
    after = since.counts(splits.RangeCounts(0, 0, 0, {}), b"\xff" * 9)
    assert (after.seq, after.items) == (5, 1)  # a/1 came and went; a/2 stays.
    assert after.bytes == item_size_bytes(song("a", 2, pad="p" * 10))
    assert after.indexes == {"byOther": (0, 0)}  # a/2 has no `other`: no entry.


def test_counts_refuse_records_that_do_not_follow_on() -> None:
    start = splits.RangeCounts(7, 0, 0, {})
    since = splits.LogSince(start.seq, SHAPE, [])
    with pytest.raises(splits.GapInLog):
        since.absorb([change(9, None, song("a", 1))])
    assert since.counts(start, b"").seq == 7


INDEX_ID = "cd" * 16


def table_with_index(status: IndexStatus = IndexStatus.ACTIVE) -> TableDef:
    index = catalog.global_index(
        name="byG",
        key_shape=KeyShape.table(("g", "S"), None),
        projection="ALL",
        non_key_attributes=(),
        index_id=INDEX_ID,
        billing_mode=BillingMode.PROVISIONED,
        throughput=Throughput(5, 5),
        owner=lambda _: "node-2",
    )
    added = catalog.index_added(table(), index)
    return dataclasses.replace(
        added, indexes=(dataclasses.replace(added.indexes[0], status=status),), _json=None
    )


def test_an_index_partition_split_is_recorded_in_its_index_with_lineage() -> None:
    before = table_with_index()
    [parent] = before.indexes[0].partitions
    after = splits.recorded(before, INDEX_ID, parent, key("b", 1), now=1_700_000_000.0)
    index = after.indexes[0]
    low, high = splits.children_of(after, parent.id, INDEX_ID) or pytest.fail("no children")
    assert index.partitions == (low, high)
    assert (low.id, high.id) == splits.child_ids(parent.id, parent.epoch)
    assert low.epoch == high.epoch == parent.epoch + 1 and low.node == high.node == "node-2"
    assert low.share == high.share == parent.share / 2
    assert [(p.id, p.state) for p in index.retired] == [(parent.id, PartitionState.RETIRED)]
    # The table's own partitions are untouched, and the record survives its JSON.
    assert after.partitions == before.partitions and after.retired == ()
    assert TableDef.from_json(after.to_json()).indexes[0] == index
    assert splits.children_of(after, parent.id) is None  # Not a partition of the table.
    assert splits.recorded(after, INDEX_ID, parent, key("b", 1), now=1_700_000_000.0) is after
    # A restarted owner finds it; the table's id does not name the index's partitions.
    assert splits.recovery(after, INDEX_ID, parent.id, parent.epoch) == (low, high)
    assert splits.recovery(after, TABLE_ID, parent.id, parent.epoch) == ()
    # Splitting a child again drops the grandparent from the lineage once no child names it.
    again = splits.recorded(after, INDEX_ID, low, bytes.fromhex("40"), now=1_700_000_000.0)
    assert [p.id for p in again.indexes[0].retired] == [parent.id, low.id]
    assert len(again.indexes[0].partitions) == 3


def test_an_index_partition_split_during_a_backfill_is_recorded_but_not_while_deleting() -> None:
    parent = table_with_index().indexes[0].partitions[0]
    backfilling = table_with_index(IndexStatus.BACKFILLING)
    after = splits.recorded(backfilling, INDEX_ID, parent, key("b", 1), now=1_700_000_000.0)
    assert len(after.indexes[0].partitions) == 2
    deleting = table_with_index(IndexStatus.DELETING)
    with pytest.raises(splits.SplitConflict, match="deleted"):
        splits.recorded(deleting, INDEX_ID, parent, key("b", 1), now=1_700_000_000.0)
    gone = catalog.index_moved(deleting, "byG", None)
    with pytest.raises(splits.SplitConflict):
        splits.recorded(gone, INDEX_ID, parent, key("b", 1), now=1_700_000_000.0)
    assert splits.recovery(gone, INDEX_ID, parent.id, parent.epoch) == ()


def test_the_index_storage_name_gives_back_its_table() -> None:
    name = catalog.index_storage_name("Orders", "byCustomer")
    assert catalog.base_table_name(name) == "Orders" != name
    assert catalog.base_table_name("Orders") == "Orders"
