"""Which global index partitions have no write capacity, as a base partition's node knows it. Pure.

DynamoDB throttles a base table write whose global index has no write capacity for it (Developer
Guide, "Provisioned throughput considerations for global secondary indexes": "for a table write
to succeed, the provisioned throughput settings for the table and all of its global secondary
indexes must have enough write capacity"), with a ThrottlingReason naming the index, and leaves
writes that do not touch that index alone. Here an index partition's write capacity lives in its
own token bucket, on the node holding it, and the base write runs on another node; the one that
learns of an empty bucket is the GSI replicator, whose `index_apply` the index partition refuses
with ProvisionedThroughputExceededException. The replicator tells the base partition's node
(`index_pressure`), naming the index partition's storage-key range and the reason its node gave
(`IndexWriteProvisionedThroughputExceeded` for a provisioned index's units,
`IndexWriteKeyRangeThroughputExceeded` for a partition at its ceiling), and this table remembers
it until the replicator says the partition took its writes again or the note expires
(`limits.GSI_INDEX_PRESSURE_SECONDS`: the replicator renews it while it is refused, so a
replicator that dies stops holding writes back within that time).

A base write is refused when an entry it would delete or put falls in a pressed range of that
index (`refusals`). The state is soft: a node that restarts forgets it and learns it again at the
replicator's next refusal; it is kept per table, for every partition of the table on the node.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from core.errors import ThrottlingReason
from core.indexes import EntryChange, entry_shape
from core.keys import KeyShape

PressureKey = tuple[str, str]  # (index name, index partition id)


@dataclass(frozen=True, slots=True)
class PressedRange:
    """One index partition without write capacity: its storage keys [start, end) (end None:
    unbounded), the reason its node refused the replicator's writes, and until when (the base
    node's clock) the note holds unless renewed."""

    start: bytes
    end: bytes | None
    reason: ThrottlingReason
    until: float

    def holds(self, storage_key: bytes) -> bool:
        return self.start <= storage_key and (self.end is None or storage_key < self.end)


class IndexPressure:
    """The pressed index partitions of every table on one node, by table id.

    `press` and `release` come from the replicator's notes, `refusals` from the write group; the
    table is replaced whole on each change (copy on write), so a write group on its thread reads
    a consistent state without a lock.
    """

    def __init__(self) -> None:
        self._tables: dict[str, dict[PressureKey, PressedRange]] = {}

    def press(
        self, table_id: str, index_name: str, partition_id: str, pressed: PressedRange, now: float
    ) -> None:
        """Note (or renew) a partition of table `table_id`'s index `index_name` as without write
        capacity; the notes expired at `now` are forgotten on the way, so the table holds no more
        than the partitions under pressure."""
        tables = self._unexpired(now)
        tables[table_id] = {**tables.get(table_id, {}), (index_name, partition_id): pressed}
        self._tables = tables

    def release(self, table_id: str, index_name: str, partition_id: str, now: float) -> None:
        """The index partition took the replicator's writes again: stop holding writes back."""
        tables = self._unexpired(now)
        ranges = tables.pop(table_id, {})
        ranges.pop((index_name, partition_id), None)
        if ranges:
            tables[table_id] = ranges
        self._tables = tables

    def _unexpired(self, now: float) -> dict[str, dict[PressureKey, PressedRange]]:
        """A copy of the notes that still hold at `now`."""
        tables: dict[str, dict[PressureKey, PressedRange]] = {}
        for table_id, ranges in self._tables.items():
            kept = {key: pressed for key, pressed in ranges.items() if pressed.until > now}
            if kept:
                tables[table_id] = kept
        return tables

    def __len__(self) -> int:
        """How many notes are kept (expired ones included, until the next change)."""
        return sum(len(ranges) for ranges in self._tables.values())

    def refusals(
        self,
        table_id: str,
        changes: Iterable[EntryChange],
        table_shape: KeyShape,
        now: float,
    ) -> tuple[ThrottlingReason, ...]:
        """The reasons to refuse a base write of table `table_id` whose global index entries
        change as `changes` say: one per index with an entry to delete or put in a pressed
        partition, in the order of `changes`; empty when the write may go on.

        A change that leaves an index's entry as it was (no units) writes nothing to it.
        """
        ranges = self._tables.get(table_id)
        if not ranges:
            return ()
        reasons: list[ThrottlingReason] = []
        for change in changes:
            if not change.units:
                continue
            pressed = [
                p for (name, _), p in ranges.items() if name == change.index.name and p.until > now
            ]
            if not pressed:
                continue
            shape = entry_shape(change.index, table_shape)
            keys = [shape.storage_key(entry) for entry in (change.old, change.new) if entry]
            hit = next((p for p in pressed if any(p.holds(key) for key in keys)), None)
            if hit is not None and hit.reason not in reasons:
                reasons.append(hit.reason)
        return tuple(reasons)
