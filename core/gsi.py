"""Global secondary indexes: projecting base-table changes into index writes, routing them to the
index's partitions, and the order in which a table's change logs may be followed. Pure.

The GSI replicator (`gsi_replicator/`) follows every base partition's change log and keeps each
global index eventually consistent (seed 001 G-16). Everything it decides is here, with no IO:

- `project_change` turns one change (old image, new image) into at most one delete and one put
  per index (DESIGN.md, "GSIs"): an item without the index key attributes has no entry (a sparse
  index, G-08); a changed index key removes the old entry and stores the new one (G-31 case 2); a
  change to a projected attribute rewrites the entry (case 5); a change to anything else, or to an
  item in the index neither before nor after, writes nothing (case 4). Entries are projected by
  `core.indexes.index_entry`, shared with local indexes.
- `route` groups the writes of a run of changes by the index partition holding each entry key,
  as `index_apply` payload changes (`rpc.ops.IndexApplyPayload`), keeping seq order per target.
- `followable` says which of a table's partitions may be followed now: a split's children only once
  their parent's log has been drained to its END, so that the changes to one key, which moved
  from the parent to a child, reach the index in the order they were made.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from core.catalog import IndexDef, PartitionDef, TableDef
from core.indexes import entry_shape, index_entry
from core.keys import KeyShape
from core.placement import PartitionMap
from core.values import Item

# The change-feed consumer under which the GSI replicator follows a partition; CreateTable
# registers it with every partition of a table that has global indexes.
REPLICATOR_CONSUMER = "gsi_replicator"


@dataclass(frozen=True, slots=True)
class IndexWrite:
    """What one base change does to one global index: the entry key to delete and the entry to
    put (at most one of each; never neither)."""

    index: str
    seq: int
    delete: Item | None
    put: Item | None

    @property
    def writes(self) -> int:
        """How many index writes this is: a changed key costs a delete and a put (G-31)."""
        return (self.delete is not None) + (self.put is not None)


def project_change(
    seq: int,
    old: Item | None,
    new: Item | None,
    indexes: Iterable[IndexDef],
    table_shape: KeyShape,
) -> list[IndexWrite]:
    """The index writes of one change of a base item (`old`/`new`: None where there is none),
    one per global index it affects."""
    writes: list[IndexWrite] = []
    for index in indexes:
        if not index.is_global:
            continue
        before = index_entry(old, index, table_shape)
        after = index_entry(new, index, table_shape)
        if before is None and after is None:
            continue
        shape = entry_shape(index, table_shape)
        if before is None:
            writes.append(IndexWrite(index.name, seq, None, after))
        elif after is None:
            writes.append(IndexWrite(index.name, seq, shape.key_of(before), None))
        elif shape.key_of(before) != shape.key_of(after):
            writes.append(IndexWrite(index.name, seq, shape.key_of(before), after))
        elif before != after:
            writes.append(IndexWrite(index.name, seq, None, after))
    return writes


# An index partition as the replicator addresses it: (index id, partition id, epoch, node).
IndexTarget = tuple[str, str, int, str]


def _target(index_id: str, partitions: PartitionMap, shape: KeyShape, key: Item) -> IndexTarget:
    partition = partitions.lookup(shape.storage_key(key))
    return (index_id, partition["id"], int(partition["epoch"]), partition["node"])


def route(writes: Sequence[IndexWrite], table: TableDef) -> dict[IndexTarget, list[dict[str, Any]]]:
    """The `index_apply` changes for each index partition, from writes in seq order.

    A delete and a put of one change whose keys fall in different partitions travel as two
    changes of the same seq, one to each: each partition skips the seqs it has applied.
    """
    indexes = {index.name: index for index in table.indexes if index.is_global}
    shapes = {name: entry_shape(index, table.key_shape) for name, index in indexes.items()}
    maps = {
        name: PartitionMap([partition.to_json() for partition in index.partitions])
        for name, index in indexes.items()
    }
    routed: dict[IndexTarget, list[dict[str, Any]]] = {}
    for write in writes:
        index = indexes.get(write.index)
        if index is None:
            continue  # The index is gone since the change was projected.
        assert index.table_id is not None
        shape, partitions = shapes[write.index], maps[write.index]
        parts: dict[IndexTarget, dict[str, Any]] = {}
        if write.delete is not None:
            target = _target(index.table_id, partitions, shape, write.delete)
            parts.setdefault(target, {"seq": write.seq})["delete"] = write.delete
        if write.put is not None:
            target = _target(index.table_id, partitions, shape, shape.key_of(write.put))
            parts.setdefault(target, {"seq": write.seq})["put"] = write.put
        for target, change in parts.items():
            routed.setdefault(target, []).append(change)
    return routed


def followable(table: TableDef, drained: Collection[str]) -> list[PartitionDef]:
    """The table's partitions whose change logs may be followed now, given the partitions whose
    logs have been drained to their END.

    Retired partitions still in the catalog are followed to their END; a partition (serving or
    retired) waits while its parent is retired, still in the catalog and not drained.
    """
    retired = {partition.id for partition in table.retired}
    ready: list[PartitionDef] = []
    for partition in (*table.retired, *table.partitions):
        if partition.id in drained:
            continue
        parent = partition.parent
        if parent is not None and parent in retired and parent not in drained:
            continue
        ready.append(partition)
    return ready
