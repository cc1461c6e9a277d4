"""Splitting a partition in place: where it splits, and how the catalog and a node agree on it.

Pure, no IO; the node's `storagenode/split.py` does the reading and the calls, running the split
machine (`core.machines.split`: its record, states and transition table) on these rules.

The catalog row is the decision: once it names the children (`recorded`, a compare-and-set), the
split has happened, and the owner's only way forward is to install them (`recovery` says which,
read back). Before it, nothing was changed anywhere, so a split that stops there is forgotten.
The node installs the children and retires the parent in one write batch, so no request is ever
served by both, and one naming the parent's epoch is refused with StaleEpoch, upon which the
router refreshes its map and retries.

The same rules split a global index's partitions: `lineage` finds the partitions stored under
an id, the table's own or one of its global indexes', in the table's catalog row, and the record
and recovery work on either.

Where (`halving_key`): at the key that halves the partition's bytes, measured as DynamoDB item
sizes. The key is a collection boundary (the first key of a partition key value) when the
partition holds more than one item collection, so no collection is cut in two; when one
collection fills the partition, the split falls between two sort keys of it, unless the table has
a local secondary index, whose collections never split (DynamoDB caps them at 10 GB instead).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from core import catalog
from core.catalog import IndexDef, IndexStatus, PartitionDef, PartitionState, TableDef
from core.errors import ValidationError
from core.indexes import entry_size_bytes, index_entry
from core.keys import KeyShape
from core.size import item_size_bytes


class SplitRefused(ValidationError):
    """A split that cannot be made: no key halves the partition, or the key asked for is not
    one the partition can split at."""


class SplitConflict(ValidationError):
    """The catalog no longer has the partition as the owner planned it (dropped, or changed)."""


def child_ids(parent_id: str, parent_epoch: int) -> tuple[str, str]:
    """The ids of the low and the high child of `parent_id` split at `parent_epoch`.

    Derived from the parent alone, so a split retried after a crash records the same children.
    """
    epoch = parent_epoch + 1
    return f"{parent_id}.{epoch}a", f"{parent_id}.{epoch}b"


@dataclass(frozen=True, slots=True)
class SplitPoint:
    """Where a partition splits, and the items and item bytes below that key (the low child's)."""

    key: bytes
    items: int
    bytes: int


def halving_key(
    rows: Iterable[tuple[bytes, int]],
    total_bytes: int,
    collection_of: Callable[[bytes], bytes],
    *,
    inside_collection: bool,
) -> SplitPoint:
    """The storage key at which a partition's bytes split in two halves as nearly as it can,
    with the items and bytes below it.

    `rows` are the partition's (storage key, item bytes) in key order; `collection_of` gives the
    key prefix of a storage key's item collection. The answer is the collection boundary nearest
    to half of `total_bytes`; with a single collection, the key of the item at which half is
    reached if `inside_collection` allows it. Reads `rows` only until no later key can do
    better. Raises SplitRefused when there is no such key.
    """
    half = total_bytes / 2
    below = 0  # Bytes of the rows before the current one.
    current: bytes | None = None
    best: tuple[float, SplitPoint] | None = None  # (distance from half, boundary)
    inside: SplitPoint | None = None  # The first item at or past half, after at least one item.
    for count, (key, size) in enumerate(rows):  # `count`: the rows before this one.
        collection = collection_of(key)
        if current is not None and collection != current:
            distance = abs(below - half)
            if best is None or distance < best[0]:
                best = (distance, SplitPoint(collection, count, below))
        if current is not None and inside is None and below >= half:
            inside = SplitPoint(key, count, below)
        if best is not None and below - half >= best[0]:
            break  # Every later boundary has at least this many bytes below it: none is nearer.
        current = collection
        below += size
    if best is not None:
        return best[1]
    if inside is not None and inside_collection:
        return inside
    if inside is not None:
        raise SplitRefused(
            "The partition is one item collection and the table has a local secondary index: "
            "its item collections never split"
        )
    raise SplitRefused("The partition has too few items to split")


def check_split_key(
    split_key: bytes,
    start: bytes,
    end: bytes | None,
    collection_of: Callable[[bytes], bytes],
    *,
    inside_collection: bool,
) -> None:
    """Refuse a split key asked for by an operator that the partition [start, end) cannot take:
    outside it or at its start, or inside an item collection of a table with a local index.

    Without a local index any key inside the range will do, a prefix of an item's key too.
    """
    if split_key <= start or (end is not None and split_key >= end):
        raise SplitRefused(
            f"Split key {split_key.hex()} is not inside the partition "
            f"[{start.hex()}, {'end' if end is None else end.hex()})"
        )
    if not inside_collection and collection_of(split_key) != split_key:
        raise SplitRefused(
            "The table has a local secondary index, so a split key must be the first key of an "
            "item collection (a partition key value with no sort key)"
        )


def lineage(
    table: TableDef | None, storage_id: str
) -> tuple[tuple[PartitionDef, ...], tuple[PartitionDef, ...]] | None:
    """The (serving, retired) partitions stored under `storage_id`: the table's own (its id) or
    one of its global indexes' (the index's id); None when the table holds neither (gone, or
    dropped and created again under another id, or the index deleted)."""
    if table is None:
        return None
    if table.id == storage_id:
        return table.partitions, table.retired
    for index in table.indexes:
        if index.table_id == storage_id:
            return index.partitions, index.retired
    return None


def recorded(
    table: TableDef | None, table_id: str, parent: PartitionDef, split_key: bytes, now: float
) -> TableDef:
    """The catalog change that records the split of `parent`, stored under `table_id` (the
    table's id, or one of its global indexes'), at `split_key` (for a compare-and-set): the
    table with the children, made at `now`, or the table unchanged if they are there already.

    Raises SplitConflict when the table or index is gone (or dropped and created again: another
    id) or its partition is no longer `parent` as the owner holds it (another epoch, node or
    range), so nothing is recorded.
    """
    low_id, high_id = child_ids(parent.id, parent.epoch)
    found = lineage(table, table_id)
    if table is None or found is None or not any(p.id == parent.id for p in (*found[0], *found[1])):
        raise SplitConflict(f"Partition {parent.id} is no longer in the catalog")
    children = children_of(table, parent.id, table_id)
    if children is not None:
        if (children[0].id, children[1].id) == (low_id, high_id):
            return table  # Recorded already: a retry after a lost reply or a restart.
        raise SplitConflict(f"Partition {parent.id} was split otherwise meanwhile")
    current = next((p for p in found[0] if p.id == parent.id), None)
    if current is None or (current.epoch, current.start, current.end, current.node) != (
        parent.epoch,
        parent.start,
        parent.end,
        parent.node,
    ):
        raise SplitConflict(
            f"Partition {parent.id} is at epoch "
            f"{'none' if current is None else current.epoch} in the catalog, "
            f"not {parent.epoch} as on its node"
        )
    if table_id == table.id:
        return catalog.split(table, parent.id, split_key, low_id, high_id, now=now)[0]
    if not table.serving:
        raise SplitConflict(f"Table {table.name} is {table.status}: its index does not split")
    index = next(i for i in table.indexes if i.table_id == table_id)
    if index.status is IndexStatus.DELETING:
        raise SplitConflict(f"Index {index.name} is being deleted: it does not split")
    return catalog.index_split(table, table_id, parent.id, split_key, low_id, high_id, now=now)[0]


def children_of(
    table: TableDef, parent_id: str, storage_id: str | None = None
) -> tuple[PartitionDef, PartitionDef] | None:
    """The (low, high) children the catalog records for `parent_id`, a partition of the table
    or (`storage_id`) of the global index stored under that id; None if it has none."""
    found = lineage(table, table.id if storage_id is None else storage_id)
    if found is None:
        return None
    children = sorted(
        (p for p in (*found[0], *found[1]) if p.parent == parent_id), key=lambda p: p.start
    )
    if len(children) != 2:
        return None
    return children[0], children[1]


def recovery(
    table: TableDef | None, table_id: str, partition_id: str, epoch: int
) -> tuple[PartitionDef, ...]:
    """What the owner of partition `partition_id` (stored under `table_id`: the table's id or one
    of its global indexes') at `epoch` must install after a restart: the children the catalog
    recorded for it (the split is RECORDED), or nothing (not split, or the table or index is
    gone: the catalog decides, and a plan it never recorded is forgotten)."""
    found = lineage(table, table_id)
    if table is None or found is None:
        return ()
    parent = next((p for p in found[1] if p.id == partition_id), None)
    if parent is None or parent.state is not PartitionState.RETIRED or parent.epoch != epoch:
        return ()
    children = children_of(table, partition_id, table_id)
    return () if children is None else children


def child_throughput(document: dict[str, Any] | None, share: Fraction) -> dict[str, Any] | None:
    """A child's throughput settings from its parent's: the same table settings, its rate the
    table's divided by the partition count its share stands for (a half of the parent's), so the
    per-partition ceilings still apply to each child."""
    if document is None:
        return None
    return {**document, "partition_count": max(1, round(1 / share))}


@dataclass(frozen=True, slots=True)
class RangeCounts:
    """A key range's counters as of a partition's change-log seq: items, item bytes, and per
    local index [entries, bytes] (overhead included), as a partition's metadata counts them."""

    seq: int
    items: int
    bytes: int
    indexes: Mapping[str, tuple[int, int]]

    def to_json(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "items": self.items,
            "bytes": self.bytes,
            "indexes": {name: list(counts) for name, counts in self.indexes.items()},
        }

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> RangeCounts:
        return cls(
            int(body["seq"]),
            int(body["items"]),
            int(body["bytes"]),
            {name: (int(c[0]), int(c[1])) for name, c in body["indexes"].items()},
        )


class GapInLog(Exception):
    """The change-log records given do not follow on from the counts (some were trimmed)."""


# What one item adds to a range's counts: (items, bytes, per local index (entries, bytes)).
Footprint = tuple[int, int, tuple[tuple[int, int], ...]]


class LogSince:
    """The net effect of a partition's change-log records after `seq` on the counts of any key
    range: per storage key written, what its item added to the counts before the first of those
    records and after the last (`Footprint`s; images are not kept).

    A split reads the records as they commit, while it still walks the partition to choose its
    key (so a log trimmed meanwhile has been read already), and applies the net effect to the
    low child's counts once the key is known (`counts`): folding every record's old and new
    image gives the same sums, since each record's new image is the next one's old image.
    """

    def __init__(self, seq: int, shape: KeyShape, local_indexes: Iterable[IndexDef]) -> None:
        self.seq = seq
        self.shape = shape
        self.local = tuple(local_indexes)
        self._net: dict[bytes, tuple[Footprint, Footprint]] = {}

    def absorb(self, records: Iterable[Mapping[str, Any]]) -> None:
        """Take the records that follow `seq`, in seq order; GapInLog when one is missing."""
        for record in records:
            if int(record["seq"]) != self.seq + 1:
                raise GapInLog(
                    f"Change-log record {self.seq + 1} is missing (found {record['seq']})"
                )
            self.seq += 1
            keys = record.get("keys")
            if keys is None:
                continue  # An END record.
            key = self.shape.storage_key(keys)
            old, new = record.get("old"), record.get("new")
            before = self._net.get(key)
            first = self._footprint(old) if before is None else before[0]
            self._net[key] = (first, self._footprint(new))

    def counts(self, counts: RangeCounts, below: bytes) -> RangeCounts:
        """`counts` of the keys below `below`, taken at this log's first seq, carried to `seq`."""
        items, size = counts.items, counts.bytes
        names = [index.name for index in self.local]
        entries = {name: list(counts.indexes.get(name, (0, 0))) for name in names}
        for name, pair in counts.indexes.items():
            entries.setdefault(name, list(pair))
        for key, (first, last) in self._net.items():
            if key >= below:
                continue
            items += last[0] - first[0]
            size += last[1] - first[1]
            for name, old, new in zip(names, first[2], last[2], strict=True):
                entries[name][0] += new[0] - old[0]
                entries[name][1] += new[1] - old[1]
        return RangeCounts(self.seq, items, size, {n: (c[0], c[1]) for n, c in entries.items()})

    def _footprint(self, image: Mapping[str, Any] | None) -> Footprint:
        if image is None:
            return (0, 0, tuple((0, 0) for _ in self.local))
        item = dict(image)
        projected = (index_entry(item, index, self.shape) for index in self.local)
        return (
            1,
            item_size_bytes(item),
            tuple((0, 0) if e is None else (1, entry_size_bytes(e)) for e in projected),
        )
