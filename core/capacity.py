"""Capacity units: what each request costs, and the `ConsumedCapacity` a client may ask to see.

DynamoDB meters every request in read and write units (Developer Guide, "DynamoDB read and write
operations"). A read unit covers 4 KB read strongly consistently; an eventually consistent read
costs half of that and a transactional read twice. A write unit covers 1 KB; a transactional write
costs twice. Sizes are rounded up to the next unit boundary, and a request that touches nothing
still pays the minimum. What is rounded differs by operation: GetItem rounds its one item;
BatchGetItem and BatchWriteItem round every item separately ("DynamoDB processes each item in the
batch as an individual GetItem request"); Query and Scan add up the sizes of all the items they
read, before any filter, and round that total once. Writes pay for the larger of the item before and
after the write, and secondary indexes pay for their own entries (see `index_write_units`).

Units are floats because eventually consistent reads come in halves; every value here is a multiple
of 0.5, which binary floating point represents exactly, so sums never drift.

`ConsumedCapacity` gathers the units a request consumed per table and per index and renders them in
the API Reference's `ConsumedCapacity` shape for ReturnConsumedCapacity TOTAL or INDEXES.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import Any

from core import limits
from core.size import item_size_bytes
from core.values import Item, equal


class ReadConsistency(enum.Enum):
    """How a read is served; each member's value is the read units it costs per started 4 KB.

    From "Capacity unit consumption for read operations": an item up to 4 KB "requires one-half read
    unit" read eventually consistently, "one read unit" strongly consistently and "two read units"
    in a transaction.
    """

    EVENTUAL = 0.5
    STRONG = 1.0
    TRANSACTIONAL = 2.0


def read_consistency(consistent: bool) -> ReadConsistency:
    """A read's consistency from its ConsistentRead (false, the default, is eventual)."""
    return ReadConsistency.STRONG if consistent else ReadConsistency.EVENTUAL


# "A transactional write request of an item up to 1 KB requires two write units."
TRANSACTIONAL_WRITE_FACTOR = 2.0


def _units_started(size_bytes: int, unit_bytes: int) -> int:
    """Unit boundaries a size reaches, rounding up, and never fewer than one.

    The minimum of one is DynamoDB's: "If you perform a read operation on an item that doesn't
    exist, DynamoDB will still consume read throughput", and a write of a missing item (a DeleteItem
    of nothing, a failed condition on a new key) consumes one write unit.
    """
    if size_bytes < 0:
        raise ValueError(f"a size cannot be negative: {size_bytes}")
    return max(1, -(-size_bytes // unit_bytes))


# Reads --------------------------------------------------------------------------------------------


def read_units(size_bytes: int, consistency: ReadConsistency) -> float:
    """Read units for reading `size_bytes` as one rounded amount (0 for an item that is absent).

    This is GetItem's cost for one item, and Query's or Scan's for one request given the total size
    of the items it read.
    """
    return _units_started(size_bytes, limits.READ_UNIT_BYTES) * consistency.value


def query_read_units(read_bytes: int, consistency: ReadConsistency) -> float:
    """Query or Scan: `read_bytes`, the sizes of every item read before filtering, rounded once.

    "All items returned are treated as a single read operation, where DynamoDB computes the total
    size of all items and then rounds up to the next 4 KB boundary", and a Scan "considers the size
    of the items that are evaluated, not the size of the items returned". A request that finds
    nothing still pays the minimum ("Queries that do not return results consume the minimum number
    of read capacity units for that type of read operation"). One call covers the items read from
    one partition: DynamoDB charges a request spread over partitions per partition searched.
    """
    return read_units(read_bytes, consistency)


def batch_get_read_units(item_sizes: Iterable[int], consistency: ReadConsistency) -> float:
    """BatchGetItem: each item rounded up on its own, then added (0 for a key that found no item).

    "DynamoDB first rounds up the size of each individual item to the next 4 KB boundary, and then
    calculates the total size": a 1.5 KB and a 6.5 KB item cost 12 KB, not 8 KB.
    """
    return sum(read_units(size, consistency) for size in item_sizes)


# Writes -------------------------------------------------------------------------------------------


def write_units(size_bytes: int, *, transactional: bool = False) -> float:
    """Write units for writing `size_bytes` (0 for an absent item): 1 KB each, at least 1."""
    units = float(_units_started(size_bytes, limits.WRITE_UNIT_BYTES))
    return units * TRANSACTIONAL_WRITE_FACTOR if transactional else units


def item_write_units(
    old_size: int | None, new_size: int | None, *, transactional: bool = False
) -> float:
    """Write units of one PutItem, UpdateItem or DeleteItem on the base table.

    `old_size` is the size of the item before the write and `new_size` after it; None where there is
    no item (a put of a new key, a delete). DynamoDB charges the larger of the two: PutItem "the
    larger of the two" when it replaces an item, UpdateItem "the larger of these item sizes" even
    when it changes one attribute, DeleteItem "the size of the deleted item".

    A write whose ConditionExpression fails still consumes units, sized by the existing item only
    ("The amount consumed is dependent on the size of the existing item (or a minimum of 1)"): pass
    `new_size=None` for it. Each request of a BatchWriteItem is charged this way on its own.
    """
    larger = max(old_size or 0, new_size or 0)
    return write_units(larger, transactional=transactional)


def batch_write_units(changes: Iterable[tuple[int | None, int | None]]) -> float:
    """BatchWriteItem: each (old size, new size) request charged as its own PutItem or DeleteItem.

    "DynamoDB first rounds up the size of each individual item to the next 1 KB boundary, and then
    calculates the total size": a 500-byte and a 3.5 KB item cost 5 KB, not 4 KB.
    """
    return sum(item_write_units(old, new) for old, new in changes)


def index_write_units(
    old_entry: Item | None, new_entry: Item | None, key_attributes: Collection[str]
) -> float:
    """Write units one base-table write costs in one secondary index (LSI or GSI alike).

    `old_entry` and `new_entry` are the item as projected into the index before and after the write
    (its key attributes plus the projected ones), or None where the item is not in the index: it
    does not exist, or it lacks an index key attribute (a sparse index). `key_attributes` names the
    index's partition and sort key attributes. The Developer Guide ("Provisioned throughput
    considerations for Global Secondary Indexes"; LSIs follow the same rules) charges:

    - an item entering the index: one write to put it;
    - an item leaving the index: one write to delete it;
    - a changed index key value: two writes, "one to delete the previous item from the index and
      another write to put the new item into the index";
    - the same key with changed projected attributes: one write to update the entry;
    - an entry that is not there before or after, or does not change: nothing ("If a write to a
      table does not require a global secondary index update, no write capacity is consumed").

    Each write is metered by the size of the projected entry, not the base item, in 1 KB units
    ("Larger index entries require additional write capacity units"); an update in place pays for
    the larger of the old and new entry, as UpdateItem does on the table.
    """
    if new_entry is None:
        return 0.0 if old_entry is None else write_units(item_size_bytes(old_entry))
    if old_entry is None:
        return write_units(item_size_bytes(new_entry))
    if not all(_same_value(old_entry, new_entry, name) for name in key_attributes):
        return write_units(item_size_bytes(old_entry)) + write_units(item_size_bytes(new_entry))
    if old_entry.keys() == new_entry.keys() and all(
        _same_value(old_entry, new_entry, name) for name in old_entry
    ):
        return 0.0
    return item_write_units(item_size_bytes(old_entry), item_size_bytes(new_entry))


def _same_value(old: Item, new: Item, name: str) -> bool:
    before, after = old.get(name), new.get(name)
    if before is None or after is None:
        return before is after
    return equal(before, after)


# ConsumedCapacity ---------------------------------------------------------------------------------


class ReturnConsumedCapacity(enum.StrEnum):
    """The request parameter: how much of ConsumedCapacity the response carries."""

    NONE = "NONE"
    TOTAL = "TOTAL"
    INDEXES = "INDEXES"


class UnitKind(enum.Enum):
    READ = "READ"
    WRITE = "WRITE"


@dataclass
class _Tally:
    """Units charged to one table or one index, kept apart by kind for transactions' fields."""

    read: float = 0.0
    write: float = 0.0
    kinds: set[UnitKind] = field(default_factory=set)

    def add(self, units: float, kind: UnitKind) -> None:
        if units < 0:
            raise ValueError(f"consumed units cannot be negative: {units}")
        if kind is UnitKind.READ:
            self.read += units
        else:
            self.write += units
        self.kinds.add(kind)

    def merge(self, other: _Tally) -> None:
        self.read += other.read
        self.write += other.write
        self.kinds |= other.kinds

    def render(self, granular: bool) -> dict[str, float]:
        # The API Reference's `Capacity` object. DynamoDB fills ReadCapacityUnits and
        # WriteCapacityUnits only for TransactGetItems and TransactWriteItems; every other operation
        # returns CapacityUnits alone (observed against the service; the reference marks all three
        # optional).
        shape = {"CapacityUnits": self.read + self.write}
        if granular and UnitKind.READ in self.kinds:
            shape["ReadCapacityUnits"] = self.read
        if granular and UnitKind.WRITE in self.kinds:
            shape["WriteCapacityUnits"] = self.write
        return shape


@dataclass
class _TableTally:
    table: _Tally = field(default_factory=_Tally)
    local_indexes: dict[str, _Tally] = field(default_factory=dict)
    global_indexes: dict[str, _Tally] = field(default_factory=dict)

    def all_tallies(self) -> list[_Tally]:
        return [self.table, *self.local_indexes.values(), *self.global_indexes.values()]


class ConsumedCapacity:
    """The units one request consumed, per table and per index, rendered in DynamoDB's shape.

    Add units as the request charges them (a BatchGetItem adds each item, a write adds the table
    and every index it touched); units for one table are summed, so a batch yields one entry per
    table. `transactional` selects the transactions' shape, which also carries ReadCapacityUnits /
    WriteCapacityUnits.
    """

    def __init__(self, *, transactional: bool = False) -> None:
        self.transactional = transactional
        self._tables: dict[str, _TableTally] = {}

    def add_table(self, table_name: str, units: float, kind: UnitKind) -> None:
        self._table(table_name).table.add(units, kind)

    def add_local_index(
        self, table_name: str, index_name: str, units: float, kind: UnitKind
    ) -> None:
        # An LSI's units come out of the base table's throughput, but ConsumedCapacity still lists
        # them under LocalSecondaryIndexes rather than Table.
        self._table(table_name).local_indexes.setdefault(index_name, _Tally()).add(units, kind)

    def add_global_index(
        self, table_name: str, index_name: str, units: float, kind: UnitKind
    ) -> None:
        self._table(table_name).global_indexes.setdefault(index_name, _Tally()).add(units, kind)

    def merge(self, other: ConsumedCapacity) -> None:
        """Add another part of the same request, such as the share a batch sent to another node."""
        for name, theirs in other._tables.items():
            ours = self._table(name)
            ours.table.merge(theirs.table)
            for index_name, tally in theirs.local_indexes.items():
                ours.local_indexes.setdefault(index_name, _Tally()).merge(tally)
            for index_name, tally in theirs.global_indexes.items():
                ours.global_indexes.setdefault(index_name, _Tally()).merge(tally)

    def total_units(self, table_name: str) -> float:
        """Everything the request consumed for one table: the table and all its indexes."""
        tally = self._tables.get(table_name)
        if tally is None:
            return 0.0
        return sum(t.read + t.write for t in tally.all_tallies())

    def render(self, table_name: str, mode: ReturnConsumedCapacity) -> dict[str, Any] | None:
        """The `ConsumedCapacity` of a single-table request; None when the client asked for NONE.

        A request that consumed nothing for the table still reports it, with zero units.
        """
        if mode == ReturnConsumedCapacity.NONE:
            return None
        return self._render_table(table_name, self._tables.get(table_name, _TableTally()), mode)

    def render_all(self, mode: ReturnConsumedCapacity) -> list[dict[str, Any]] | None:
        """The list that BatchGetItem, BatchWriteItem and transactions return: one per table."""
        if mode == ReturnConsumedCapacity.NONE:
            return None
        return [self._render_table(name, tally, mode) for name, tally in self._tables.items()]

    def _table(self, table_name: str) -> _TableTally:
        return self._tables.setdefault(table_name, _TableTally())

    def _render_table(
        self, table_name: str, tally: _TableTally, mode: ReturnConsumedCapacity
    ) -> dict[str, Any]:
        whole = _Tally()
        for part in tally.all_tallies():
            whole.merge(part)
        shape: dict[str, Any] = {"TableName": table_name, **whole.render(self.transactional)}
        if mode == ReturnConsumedCapacity.INDEXES:
            # INDEXES breaks the total down. `Table` is always present, with zero units when an
            # index served the whole request, which is how DynamoDB reports a query on a GSI.
            shape["Table"] = tally.table.render(self.transactional)
            if tally.local_indexes:
                shape["LocalSecondaryIndexes"] = {
                    name: t.render(self.transactional) for name, t in tally.local_indexes.items()
                }
            if tally.global_indexes:
                shape["GlobalSecondaryIndexes"] = {
                    name: t.render(self.transactional) for name, t in tally.global_indexes.items()
                }
        return shape
