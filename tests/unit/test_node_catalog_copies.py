"""core.catalog_copy: the nodes' copies of the catalog, and how a router takes one."""

from __future__ import annotations

import re

from core import catalog
from core.catalog import TableDef, Throughput
from core.catalog_copy import (
    MARKER_NAME,
    CatalogCopy,
    catalog_row,
    copy_writes,
    marker_item,
    merged,
    newest,
    record_of_row,
)
from core.keys import KeyShape
from core.token_bucket import BillingMode
from router.requests import NAME_PATTERN

NOW = 1_700_000_000.0
PARTITION = catalog.CATALOG_PARTITION_ID


def table(name: str, table_id: str, version: int = 1) -> TableDef:
    created = catalog.created(
        name=name,
        table_id=table_id,
        key_shape=KeyShape.table(("pk", "S"), None),
        attribute_definitions=[("pk", "S")],
        billing_mode=BillingMode.PAY_PER_REQUEST,
        throughput=Throughput(),
        now=NOW,
        owner=lambda _: "node-2",
    )
    return catalog.versioned(catalog.activated(created), version)


def copy(seq: int, *records: TableDef) -> CatalogCopy:
    return CatalogCopy(PARTITION, seq, {record.name: record for record in records})


def test_a_row_round_trips_and_a_copy_reads_back_from_its_items() -> None:
    music, books = table("Music", "a" * 32, 3), table("Books", "b" * 32)
    assert record_of_row(catalog_row(music)) == music
    items = [marker_item(PARTITION, 17), catalog_row(books), catalog_row(music)]
    assert CatalogCopy.of_items(items) == copy(17, music, books)


def test_a_copy_without_its_marker_is_no_copy() -> None:
    # A node that died before writing its first marker holds rows of an unfinished copy.
    assert CatalogCopy.of_items([catalog_row(table("Music", "a" * 32))]) is None
    assert CatalogCopy.of_items([]) is None


def test_the_marker_name_is_no_table_name() -> None:
    # A table named like the marker would be read as the marker.
    assert re.fullmatch(NAME_PATTERN, MARKER_NAME) is None


def test_copy_writes_put_what_changed_and_delete_what_is_gone() -> None:
    music, books, films = (
        table("Music", "a" * 32),
        table("Books", "b" * 32),
        table("Films", "c" * 32),
    )
    held = {"Music": music, "Books": books, "Films": films}
    newer_music = catalog.versioned(music, 2)
    recreated_books = table("Books", "d" * 32)  # Dropped and created again: version 1 again.
    current = {"Music": newer_music, "Books": recreated_books, "Games": table("Games", "e" * 32)}
    puts, deletes = copy_writes(held, current)
    assert [record.name for record in puts] == ["Books", "Games", "Music"]
    assert deletes == ["Films"]
    assert copy_writes(current, current) == ([], [])


def test_the_newest_copy_is_the_one_of_the_highest_seq() -> None:
    music = table("Music", "a" * 32)
    assert newest([]) is None
    assert newest([copy(4, music), copy(9), copy(7, music)]) == copy(9)


def test_a_copy_never_takes_a_router_back() -> None:
    music, books = table("Music", "a" * 32, 5), table("Books", "b" * 32, 2)
    cached = {"Music": music, "Books": books}
    films = table("Films", "c" * 32)
    taken = merged(cached, copy(10, catalog.versioned(music, 4), table("Books", "d" * 32), films))
    # An older version of Music, and Books under another id, leave the router's records alone;
    # a table the copy lacks stays, and one the router lacks is added.
    assert taken == {"Music": music, "Books": books, "Films": films}
    newer = catalog.versioned(music, 6)
    assert merged(cached, copy(11, newer))["Music"] == newer
