"""Capacity units are charged as the Developer Guide's "DynamoDB read and write operations" says."""

from __future__ import annotations

import pytest

from core import limits
from core.capacity import (
    ConsumedCapacity,
    ReadConsistency,
    ReturnConsumedCapacity,
    UnitKind,
    batch_get_read_units,
    batch_write_units,
    index_write_units,
    item_write_units,
    query_read_units,
    read_consistency,
    read_units,
    write_units,
)
from core.size import item_size_bytes
from core.values import Item

KB = limits.KIB
EVENTUAL, STRONG, TRANSACTIONAL = (
    ReadConsistency.EVENTUAL,
    ReadConsistency.STRONG,
    ReadConsistency.TRANSACTIONAL,
)


def sized_item(size: int, **attributes: str) -> Item:
    """An item of exactly `size` bytes: the given string attributes padded by a "pad" attribute."""
    item: Item = {name: {"S": value} for name, value in attributes.items()}
    padding = size - item_size_bytes(item) - len("pad")
    assert padding >= 0
    item["pad"] = {"S": "x" * padding}
    assert item_size_bytes(item) == size
    return item


# Reads --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("size", "strong"),
    [
        (0, 1),  # An item that does not exist still costs the minimum.
        (1, 1),
        (1023, 1),
        (1024, 1),
        (1025, 1),
        (3500, 1),  # The guide's example: 3,500 bytes cost as much as 4 KB.
        (4095, 1),
        (4096, 1),
        (4097, 2),
        (8191, 2),
        (8192, 2),
        (8193, 3),
        (10 * KB, 3),  # "If you read a 10 KB item, DynamoDB rounds the item size to 12 KB."
        (limits.ITEM_SIZE_BYTES_MAX, 100),
    ],
)
def test_read_units_round_up_to_4_kb(size: int, strong: int) -> None:
    assert read_units(size, STRONG) == strong
    assert read_units(size, EVENTUAL) == strong / 2
    assert read_units(size, TRANSACTIONAL) == strong * 2


def test_an_8_kb_item_costs_two_one_or_four_units() -> None:
    # "if your item size is 8 KB, you require 2 read units to sustain one strongly consistent read.
    # You'll require 1 read unit if you choose eventually consistent reads or 4 read units for a
    # transactional read request."
    assert read_units(8 * KB, STRONG) == 2
    assert read_units(8 * KB, EVENTUAL) == 1
    assert read_units(8 * KB, TRANSACTIONAL) == 4


def test_a_missing_item_costs_half_or_one_unit() -> None:
    assert read_units(0, EVENTUAL) == 0.5
    assert read_units(0, STRONG) == 1


def test_consistent_read_is_strong_and_the_default_eventual() -> None:
    assert read_consistency(True) is STRONG
    assert read_consistency(False) is EVENTUAL


def test_query_sums_the_sizes_then_rounds_once() -> None:
    # "suppose your query returns 10 items whose combined size is 40.8 KB. DynamoDB rounds the item
    # size for the operation to 44 KB."
    sizes = [4178] * 10  # 41,780 bytes: 40.8 KB.
    assert query_read_units(sum(sizes), STRONG) == 11
    # "If a query returns 1500 items of 64 bytes each, the cumulative size is 96 KB."
    assert query_read_units(64 * 1500, STRONG) == 24
    assert query_read_units(64 * 1500, EVENTUAL) == 12


@pytest.mark.parametrize(
    ("sizes", "strong"),
    [
        ([4096], 1),
        ([4095, 1], 1),
        ([4096, 1], 2),
        ([2048, 2048], 1),  # Two items that would each cost 1 unit alone cost 1 together.
        ([1] * 4097, 2),
    ],
)
def test_query_rounds_the_total_at_4_kb(sizes: list[int], strong: int) -> None:
    assert query_read_units(sum(sizes), STRONG) == strong


def test_query_or_scan_that_reads_nothing_pays_the_minimum() -> None:
    assert query_read_units(0, EVENTUAL) == 0.5
    assert query_read_units(0, STRONG) == 1


def test_a_full_eventually_consistent_scan_page_costs_128_5_units() -> None:
    # A Scan reads items until it passes 1 MB, so a page is a little over 1 MB: 257 blocks of 4 KB,
    # which is the 128.5 units the AWS CLI famously reports for eventually consistent scans.
    page = [1042] * 1007
    assert limits.QUERY_PAGE_BYTES_MAX < sum(page) <= limits.QUERY_PAGE_BYTES_MAX + 4 * KB
    assert query_read_units(sum(page), EVENTUAL) == 128.5


def test_batch_get_rounds_each_item_on_its_own() -> None:
    # "if BatchGetItem reads a 1.5 KB item and a 6.5 KB item, DynamoDB calculates the size as 12 KB
    # (4 KB + 8 KB). DynamoDB doesn't calculate the size as 8 KB (1.5 KB + 6.5 KB)."
    sizes = [1536, 6656]
    assert batch_get_read_units(sizes, STRONG) == 3
    assert query_read_units(sum(sizes), STRONG) == 2
    assert batch_get_read_units(sizes, EVENTUAL) == 1.5


def test_batch_get_charges_keys_that_found_nothing() -> None:
    assert batch_get_read_units([0, 0, 100], EVENTUAL) == 1.5
    assert batch_get_read_units([], STRONG) == 0


def test_a_negative_size_is_a_bug() -> None:
    with pytest.raises(ValueError):
        read_units(-1, STRONG)


# Writes -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("size", "units"),
    [
        (0, 1),
        (1, 1),
        (500, 1),
        (1023, 1),
        (1024, 1),
        (1025, 2),
        (
            1638,
            2,
        ),  # "if you put or delete an item of 1.6 KB, DynamoDB rounds the item size up to 2 KB"
        (2047, 2),
        (2048, 2),
        (2049, 3),
        (4095, 4),
        (4096, 4),
        (4097, 5),
        (limits.ITEM_SIZE_BYTES_MAX, 400),
    ],
)
def test_write_units_round_up_to_1_kb(size: int, units: int) -> None:
    assert write_units(size) == units
    assert write_units(size, transactional=True) == 2 * units


def test_put_of_a_new_item_pays_for_the_new_item() -> None:
    assert item_write_units(None, 1025) == 2


def test_put_that_replaces_pays_for_the_larger_item() -> None:
    assert item_write_units(3000, 500) == 3
    assert item_write_units(500, 3000) == 3


def test_update_pays_for_the_larger_image_even_for_one_attribute() -> None:
    # "Even if you update just a subset of the item's attributes, UpdateItem will still consume the
    # full amount of provisioned throughput (the larger of the 'before' and 'after' item sizes)."
    assert item_write_units(10 * KB, 10 * KB + 1) == 11
    assert item_write_units(10 * KB + 1, 10) == 11


def test_delete_pays_for_the_deleted_item_and_a_missing_one_costs_one() -> None:
    assert item_write_units(4097, None) == 5
    assert item_write_units(None, None) == 1


def test_a_failed_condition_pays_for_the_existing_item_only() -> None:
    # "if an existing item is 300kb and the new item you are trying to create or update is 310kb,
    # the write capacity units consumed will be the 300 if the condition fails, and 310 if the
    # condition succeeds. If this is a new item, the write capacity units consumed will be 1 if the
    # condition fails, and 310 if the condition succeeds."
    assert item_write_units(300 * KB, None) == 300
    assert item_write_units(300 * KB, 310 * KB) == 310
    assert item_write_units(None, None) == 1
    assert item_write_units(None, 310 * KB) == 310


def test_batch_write_rounds_each_item_on_its_own() -> None:
    # "if BatchWriteItem writes a 500-byte item and a 3.5 KB item, DynamoDB calculates the size as
    # 5 KB (1 KB + 4 KB), not 4 KB (500 bytes + 3.5 KB)."
    assert batch_write_units([(None, 500), (None, 3584)]) == 5
    # A put that replaces pays for the larger item; a delete for the deleted one.
    assert batch_write_units([(3000, 100), (1025, None), (None, None)]) == 3 + 2 + 1


# Index writes -------------------------------------------------------------------------------------

GSI_KEYS = ("status", "created")


def test_an_item_entering_the_index_costs_one_put() -> None:
    entry = sized_item(1500, status="open", created="1")
    assert index_write_units(None, entry, GSI_KEYS) == 2


def test_an_item_leaving_the_index_costs_one_delete() -> None:
    entry = sized_item(900, status="open", created="1")
    assert index_write_units(entry, None, GSI_KEYS) == 1


def test_a_changed_index_key_costs_a_delete_and_a_put() -> None:
    old = sized_item(1024, status="open", created="1")
    new = sized_item(1025, status="done", created="1")
    assert index_write_units(old, new, GSI_KEYS) == 1 + 2


def test_a_changed_sort_key_of_the_index_also_moves_the_entry() -> None:
    old = sized_item(100, status="open", created="1")
    new = sized_item(100, status="open", created="2")
    assert index_write_units(old, new, GSI_KEYS) == 2


def test_changed_projected_attributes_cost_one_write_of_the_larger_entry() -> None:
    old = sized_item(2049, status="open", created="1")
    new = sized_item(100, status="open", created="1")
    assert index_write_units(old, new, GSI_KEYS) == 3
    assert index_write_units(new, old, GSI_KEYS) == 3


def test_an_unchanged_entry_costs_nothing() -> None:
    entry = sized_item(5000, status="open", created="1")
    assert index_write_units(entry, dict(entry), GSI_KEYS) == 0


def test_an_item_outside_the_index_before_and_after_costs_nothing() -> None:
    # A sparse index: the item never had the index key attributes.
    assert index_write_units(None, None, GSI_KEYS) == 0


def test_index_entries_compare_values_not_their_text() -> None:
    old: Item = {"status": {"S": "a"}, "created": {"N": "1"}, "tags": {"SS": ["x", "y"]}}
    new: Item = {"status": {"S": "a"}, "created": {"N": "1"}, "tags": {"SS": ["y", "x"]}}
    assert index_write_units(old, new, GSI_KEYS) == 0


def test_an_index_pays_for_its_entry_not_the_base_item() -> None:
    # A KEYS_ONLY projection of a 300 KB item is a few bytes: one write unit.
    entry: Item = {"status": {"S": "open"}, "created": {"N": "1"}, "pk": {"S": "item-1"}}
    assert index_write_units(None, entry, GSI_KEYS) == 1


def test_a_projected_attribute_that_appears_is_an_update_in_place() -> None:
    old: Item = {"status": {"S": "open"}, "created": {"N": "1"}}
    new: Item = {"status": {"S": "open"}, "created": {"N": "1"}, "note": {"S": "hi"}}
    assert index_write_units(old, new, GSI_KEYS) == 1


# ConsumedCapacity ---------------------------------------------------------------------------------


def test_none_renders_nothing() -> None:
    consumed = ConsumedCapacity()
    consumed.add_table("Music", 1, UnitKind.WRITE)
    assert consumed.render("Music", ReturnConsumedCapacity.NONE) is None
    assert consumed.render_all(ReturnConsumedCapacity.NONE) is None


def test_total_is_table_name_and_capacity_units() -> None:
    consumed = ConsumedCapacity()
    consumed.add_table("Music", 0.5, UnitKind.READ)
    assert consumed.render("Music", ReturnConsumedCapacity.TOTAL) == {
        "TableName": "Music",
        "CapacityUnits": 0.5,
    }


def test_total_adds_the_indexes_into_one_number() -> None:
    consumed = ConsumedCapacity()
    consumed.add_table("Music", 1, UnitKind.WRITE)
    consumed.add_global_index("Music", "ByGenre", 2, UnitKind.WRITE)
    consumed.add_local_index("Music", "ByYear", 1, UnitKind.WRITE)
    assert consumed.render("Music", ReturnConsumedCapacity.TOTAL) == {
        "TableName": "Music",
        "CapacityUnits": 4.0,
    }
    assert consumed.total_units("Music") == 4


def test_indexes_breaks_the_total_down_by_table_lsi_and_gsi() -> None:
    consumed = ConsumedCapacity()
    consumed.add_table("Music", 1, UnitKind.WRITE)
    consumed.add_global_index("Music", "ByGenre", 2, UnitKind.WRITE)
    consumed.add_global_index("Music", "ByArtist", 1, UnitKind.WRITE)
    consumed.add_local_index("Music", "ByYear", 1, UnitKind.WRITE)
    assert consumed.render("Music", ReturnConsumedCapacity.INDEXES) == {
        "TableName": "Music",
        "CapacityUnits": 5.0,
        "Table": {"CapacityUnits": 1.0},
        "LocalSecondaryIndexes": {"ByYear": {"CapacityUnits": 1.0}},
        "GlobalSecondaryIndexes": {
            "ByGenre": {"CapacityUnits": 2.0},
            "ByArtist": {"CapacityUnits": 1.0},
        },
    }


def test_indexes_without_index_activity_has_only_the_table() -> None:
    consumed = ConsumedCapacity()
    consumed.add_table("Music", 0.5, UnitKind.READ)
    assert consumed.render("Music", ReturnConsumedCapacity.INDEXES) == {
        "TableName": "Music",
        "CapacityUnits": 0.5,
        "Table": {"CapacityUnits": 0.5},
    }


def test_a_gsi_query_reports_the_table_at_zero() -> None:
    consumed = ConsumedCapacity()
    consumed.add_global_index("Music", "ByGenre", 0.5, UnitKind.READ)
    assert consumed.render("Music", ReturnConsumedCapacity.INDEXES) == {
        "TableName": "Music",
        "CapacityUnits": 0.5,
        "Table": {"CapacityUnits": 0.0},
        "GlobalSecondaryIndexes": {"ByGenre": {"CapacityUnits": 0.5}},
    }


def test_a_table_with_nothing_recorded_renders_zero() -> None:
    assert ConsumedCapacity().render("Music", ReturnConsumedCapacity.TOTAL) == {
        "TableName": "Music",
        "CapacityUnits": 0.0,
    }


def test_a_batch_merges_per_table_in_first_seen_order() -> None:
    consumed = ConsumedCapacity()
    for size in (1536, 6656):
        consumed.add_table("Music", read_units(size, STRONG), UnitKind.READ)
    consumed.add_table("Books", read_units(0, STRONG), UnitKind.READ)
    consumed.add_table("Music", read_units(100, EVENTUAL), UnitKind.READ)
    assert consumed.render_all(ReturnConsumedCapacity.TOTAL) == [
        {"TableName": "Music", "CapacityUnits": 3.5},
        {"TableName": "Books", "CapacityUnits": 1.0},
    ]


def test_parts_of_a_request_from_several_nodes_merge() -> None:
    first, second = ConsumedCapacity(), ConsumedCapacity()
    first.add_table("Music", 1, UnitKind.WRITE)
    first.add_global_index("Music", "ByGenre", 1, UnitKind.WRITE)
    second.add_table("Music", 2, UnitKind.WRITE)
    second.add_global_index("Music", "ByGenre", 2, UnitKind.WRITE)
    second.add_local_index("Music", "ByYear", 1, UnitKind.WRITE)
    second.add_table("Books", 1, UnitKind.WRITE)
    first.merge(second)
    assert first.render_all(ReturnConsumedCapacity.INDEXES) == [
        {
            "TableName": "Music",
            "CapacityUnits": 7.0,
            "Table": {"CapacityUnits": 3.0},
            "LocalSecondaryIndexes": {"ByYear": {"CapacityUnits": 1.0}},
            "GlobalSecondaryIndexes": {"ByGenre": {"CapacityUnits": 3.0}},
        },
        {"TableName": "Books", "CapacityUnits": 1.0, "Table": {"CapacityUnits": 1.0}},
    ]


def test_transactions_also_report_read_or_write_units() -> None:
    # TransactGetItems of one present and one missing item costs 2 + 2 read units and, unlike the
    # other operations, names them ReadCapacityUnits too.
    reads = ConsumedCapacity(transactional=True)
    for size in (100, 0):
        reads.add_table("Music", read_units(size, TRANSACTIONAL), UnitKind.READ)
    assert reads.render("Music", ReturnConsumedCapacity.TOTAL) == {
        "TableName": "Music",
        "CapacityUnits": 4.0,
        "ReadCapacityUnits": 4.0,
    }
    assert reads.render("Music", ReturnConsumedCapacity.INDEXES) == {
        "TableName": "Music",
        "CapacityUnits": 4.0,
        "ReadCapacityUnits": 4.0,
        "Table": {"CapacityUnits": 4.0, "ReadCapacityUnits": 4.0},
    }
    writes = ConsumedCapacity(transactional=True)
    writes.add_table("Music", item_write_units(None, 1500, transactional=True), UnitKind.WRITE)
    writes.add_global_index("Music", "ByGenre", 2, UnitKind.WRITE)
    assert writes.render("Music", ReturnConsumedCapacity.INDEXES) == {
        "TableName": "Music",
        "CapacityUnits": 6.0,
        "WriteCapacityUnits": 6.0,
        "Table": {"CapacityUnits": 4.0, "WriteCapacityUnits": 4.0},
        "GlobalSecondaryIndexes": {"ByGenre": {"CapacityUnits": 2.0, "WriteCapacityUnits": 2.0}},
    }


def test_negative_units_are_a_bug() -> None:
    with pytest.raises(ValueError):
        ConsumedCapacity().add_table("Music", -1, UnitKind.READ)
