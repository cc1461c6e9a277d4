"""The copies of the catalog that every storage node keeps, and how a router reads them. Pure.

The catalog is one partition on one node (`core.catalog`). A router that is already running
serves item operations from its cache while that node is down, and one restarted on its state
directory from its own copy (`router.catalog_copy`); a router starting with neither would know no
table at all, and answer 503 to everything, even for partitions on healthy nodes. So every other
node keeps a copy of the catalog in a system table of its own (`CATALOG_COPY_TABLE_ID`, one
partition on each node), which it refreshes from the catalog's node (`storagenode.catalog_copy`):
the catalog's rows as they are, and one marker row naming the catalog partition copied and the
seq its change log had reached then. That seq grows with every change of the catalog, deletions
included, so it orders copies: a router that cannot reach the catalog reads the copy of every node
it reaches and takes the one with the highest seq (`newest`).

A copy is read-only and only a cache, like the router's own: a node refuses a request for a
partition epoch not its own (StaleEpoch), and table operations still need the catalog itself. A
router never goes back: it takes a copy only if its seq is at least that of the last copy it took,
and from it only the records newer than those it holds (`merged`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from core.catalog import CATALOG_COPY_TABLE_ID, TableDef

CATALOG_COPY_TABLE_NAME = "__dynalab_catalog_copy"
CATALOG_COPY_PARTITION_ID = f"{CATALOG_COPY_TABLE_ID}-0"
# The copy's marker row. '#' is in no table name (`[a-zA-Z0-9_.-]`), so no table's row is named so.
MARKER_NAME = "#copied"


def catalog_row(table: TableDef) -> dict[str, Any]:
    """The catalog system table's item for a table record (a copy holds the same items)."""
    return {
        "name": {"S": table.name},
        "version": {"N": str(table.version)},
        "table": {"S": orjson.dumps(table.to_json()).decode()},
    }


def record_of_row(item: Mapping[str, Any]) -> TableDef:
    """The table record of a catalog row."""
    record = TableDef.from_json(orjson.loads(item["table"]["S"]))
    assert record.version == int(item["version"]["N"]), f"catalog row {record.name} disagrees"
    return record


def marker_item(partition: str, seq: int) -> dict[str, Any]:
    """The marker row of a copy of catalog partition `partition` whose log had reached `seq`."""
    return {
        "name": {"S": MARKER_NAME},
        "catalog_partition": {"S": partition},
        "seq": {"N": str(seq)},
    }


@dataclass(frozen=True, slots=True)
class CatalogCopy:
    """One node's copy: the catalog's records when its partition's change log had reached `seq`."""

    partition: str
    seq: int
    records: Mapping[str, TableDef]

    @classmethod
    def of_items(cls, items: Iterable[Mapping[str, Any]]) -> CatalogCopy | None:
        """The copy a node's copy partition holds (its items, marker included); None when it
        holds no marker: the node never finished a copy."""
        marker: Mapping[str, Any] | None = None
        records: dict[str, TableDef] = {}
        for item in items:
            if item["name"]["S"] == MARKER_NAME:
                marker = item
            else:
                record = record_of_row(item)
                records[record.name] = record
        if marker is None:
            return None
        return cls(marker["catalog_partition"]["S"], int(marker["seq"]["N"]), records)


def copy_writes(
    held: Mapping[str, TableDef], catalog: Mapping[str, TableDef]
) -> tuple[list[TableDef], list[str]]:
    """What turns the rows a copy holds into the catalog's: the records to write (new, or of
    another id or version) and the names of the rows to delete, each in name order."""
    puts = [
        catalog[name]
        for name in sorted(catalog)
        if (held_record := held.get(name)) is None
        or (held_record.id, held_record.version) != (catalog[name].id, catalog[name].version)
    ]
    deletes = sorted(held.keys() - catalog.keys())
    return puts, deletes


def newest(copies: Iterable[CatalogCopy]) -> CatalogCopy | None:
    """The copy with the highest seq (None: there is none); of equal ones, the first."""
    best: CatalogCopy | None = None
    for copy in copies:
        if best is None or copy.seq > best.seq:
            best = copy
    return best


def merged(cached: Mapping[str, TableDef], copy: CatalogCopy) -> dict[str, TableDef]:
    """The records a router holds after taking `copy`, never older than those it held.

    A table the router holds is replaced only by a newer version of the same table (same id). A
    table it holds under another id (dropped and created again on one side or the other) is kept,
    since nothing tells which is newer; were it the older, its partitions are gone and their nodes
    refuse it as stale, which the router answers with a 503 until the catalog is back. A table the
    copy lacks is kept for the same reason: it may have been created after the copy was taken.
    """
    records = dict(cached)
    for name, record in copy.records.items():
        held = records.get(name)
        if held is None or (held.id == record.id and held.version < record.version):
            records[name] = record
    return records
