"""router.streams._located: a shard's partition that moved since the catalog was read (a split's
child moved to the node the ring places it on) is followed to its new node, instead of being
taken for a retired shard whose records are gone (a CI run of ad593f1: DescribeStream left out
a child moved between two calls); a retired one, or one the catalog still places where it is
refused past the attempts, is not."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest

from core.catalog import PartitionDef, TableDef
from core.errors import ServiceUnavailable, StaleEpoch
from router.streams import _located
from tests.unit.test_catalog import new_table


class Catalog:
    """What `_located` reads of a router: the table's record, as the catalog has it now."""

    def __init__(self, table: TableDef | None) -> None:
        self.table = table
        self.reads = 0

    async def read_table(self, name: str) -> TableDef | None:
        self.reads += 1
        return self.table


def moved(table: TableDef, node: str) -> TableDef:
    first = dataclasses.replace(table.partitions[0], node=node, epoch=2)
    return dataclasses.replace(table, partitions=(first, *table.partitions[1:]))


def at(nodes: dict[str, Any]) -> Any:
    """A call answering by the partition's node: a value, or StaleEpoch where absent."""

    async def call(partition: PartitionDef) -> Any:
        if partition.node not in nodes:
            raise StaleEpoch(f"{partition.id} is not on {partition.node}")
        return nodes[partition.node]

    return call


def test_a_moved_partition_is_followed_to_its_new_node() -> None:
    table = new_table()
    now = moved(table, "node-9")
    catalog = Catalog(now)
    call = at({"node-9": "read"})
    result = asyncio.run(_located(catalog, table, table.partitions[0], call))  # type: ignore[arg-type]
    assert result == "read" and catalog.reads == 1


def test_a_retired_or_gone_partition_is_still_refused() -> None:
    table = new_table()
    retired = dataclasses.replace(table, partitions=table.partitions[1:])
    for current in (retired, None):
        with pytest.raises(StaleEpoch):
            asyncio.run(_located(Catalog(current), table, table.partitions[0], at({})))  # type: ignore[arg-type]


def test_one_refused_where_the_catalog_keeps_placing_it_is_retried_then_unavailable() -> None:
    table = new_table()
    catalog = Catalog(table)
    with pytest.raises(ServiceUnavailable):
        asyncio.run(_located(catalog, table, table.partitions[0], at({})))  # type: ignore[arg-type]
    assert catalog.reads > 1
