"""Moving a serving partition to another node: its states, the catalog change, and what a
restarted source or target must do. Pure, no IO; the node's `storagenode/move.py` does the
reading, the copying and the calls.

The source (the partition's owner) drives a move, as it drives a split: its states, its
transitions and the effect each state has are the move machine's (`core.machines.move`), run by
the driver (`rpc.machines`), its record kept in the source partition's metadata.

The catalog row is the decision: once it names the target at the next epoch the move has
happened and only going forward is left (`source_recovery`, `target_recovery`); before it,
nothing a client can see has changed, and a move rolls back by clearing the fence on the source
and dropping the target's copy. A move is tried again from the start (a fresh INCOMING copy), never
resumed half-way: a copy made from an older pin could hold items deleted since.

The fence refuses a client request before it is planned, with StaleEpoch: the one refusal a router
retries, since it proves nothing was applied (an UpdateItem ADD refused so is applied once, by the
retry). A global index's partition moves by the same rules: it is looked up among its index's
partitions (`serving_partition`, by the id it is stored under) and the switch is recorded in the
index's entry of the table's row. The target's log continues the source's: the same seqs and
the same records, so every change-feed consumer (the GSI replicator, Streams) reads on from its
checkpoint on the new node.
"""

from __future__ import annotations

import enum
from collections.abc import Callable

from core import catalog, splits
from core.catalog import PartitionDef, TableDef
from core.errors import ValidationError


class MoveRefused(ValidationError):
    """A move that cannot be made now: to the node that holds the partition, of a system table,
    or of a partition holding transaction locks (it waits for them to be decided)."""


class MoveConflict(ValidationError):
    """The catalog no longer has the partition as the source holds it (split, moved or dropped)."""


class SourceAction(enum.StrEnum):
    FINISH = "FINISH"  # Switched: drop the local copy (the target serves).
    ROLL_BACK = "ROLL_BACK"  # Not switched: clear the fence, drop the target's copy.


class TargetAction(enum.StrEnum):
    ACTIVATE = "ACTIVATE"  # Switched to this node: serve.
    WAIT = "WAIT"  # The source still serves it: its move goes on, or it will drop this copy.
    DROP = "DROP"  # The catalog went elsewhere (split, moved to a third node, table gone).


def switched(table: TableDef | None, table_id: str, source: PartitionDef, target: str) -> TableDef:
    """The catalog change that switches `source` (the partition as its owner holds it) to node
    `target` at its next epoch, for a compare-and-set: the table changed, or unchanged if it is
    switched already (a retry after a lost reply or a restart).

    `table_id` is the id the partition is stored under: the table's, or one of its global
    indexes' (an index partition's move is recorded in the index's entry).

    Raises MoveConflict when the table is gone or the partition is no longer `source` (split,
    moved otherwise, another epoch), so nothing is recorded.
    """
    if table is None or splits.lineage(table, table_id) is None:
        raise MoveConflict(f"The table of partition {source.id} is no longer in the catalog")
    current = serving_partition(table, table_id, source.id)
    if current is None:
        raise MoveConflict(f"Partition {source.id} is no longer serving in the catalog")
    if (current.node, current.epoch) == (target, source.epoch + 1):
        return table
    if (current.node, current.epoch) != (source.node, source.epoch):
        raise MoveConflict(
            f"Partition {source.id} is at epoch {current.epoch} on node {current.node} in the "
            f"catalog, not {source.epoch} on {source.node} as its node holds it"
        )
    if table.id == table_id:
        return catalog.moved(table, source.id, target)
    return catalog.index_partition_moved(table, table_id, source.id, target)


def serving_partition(
    table: TableDef | None, table_id: str, partition_id: str
) -> PartitionDef | None:
    """Serving partition `partition_id` of what is stored under `table_id` (the table, or one
    of its global indexes: `core.splits.lineage`), as the catalog records it; None if gone."""
    found = splits.lineage(table, table_id)
    if found is None:
        return None
    return next((p for p in found[0] if p.id == partition_id), None)


def source_recovery(
    table: TableDef | None, table_id: str, partition_id: str, epoch: int, moving_to: str
) -> SourceAction:
    """What a source holding partition `partition_id` at `epoch`, fenced for a move to node
    `moving_to` (or with the move's consumer still registered), must do after a restart or a
    failed step: finish if the catalog switched it, else roll back."""
    if splits.lineage(table, table_id) is None:
        return SourceAction.ROLL_BACK  # The table is gone: dropping it drops this copy too.
    current = serving_partition(table, table_id, partition_id)
    if current is not None and (current.node, current.epoch) == (moving_to, epoch + 1):
        return SourceAction.FINISH
    return SourceAction.ROLL_BACK


def target_recovery(
    table: TableDef | None, table_id: str, partition_id: str, epoch: int, node: str
) -> TargetAction:
    """What node `node`, holding an INCOMING copy of partition `partition_id` at `epoch`, must do
    with it given the catalog: serve it once the catalog names this node at that epoch, drop it
    once the catalog has gone past it, else wait for its source."""
    if splits.lineage(table, table_id) is None:
        return TargetAction.DROP
    current = serving_partition(table, table_id, partition_id)
    if current is None or current.epoch > epoch:
        return TargetAction.DROP
    if current.epoch == epoch:
        return TargetAction.ACTIVATE if current.node == node else TargetAction.DROP
    return TargetAction.WAIT


def misplaced(table: TableDef, owner: Callable[[str], str]) -> list[tuple[PartitionDef, str]]:
    """The split children of `table` that are not on the node the ring places them on
    (`owner` of a partition id), with that node, if they have not moved since their split (an
    epoch one past their parent's): each child is moved once, so routers whose rings differ
    (other node lists) cannot pass a partition back and forth."""
    return _misplaced(table.partitions, table.retired, owner)


def misplaced_index_partitions(
    table: TableDef, owner: Callable[[str], str]
) -> list[tuple[str, PartitionDef, str]]:
    """The split children of `table`'s global indexes that are off their ring owner and have not
    moved since their split, as `misplaced` finds a table's: (index id, child, node)."""
    return [
        (index.table_id, partition, node)
        for index in catalog.global_indexes(table)
        if index.table_id is not None and index.status is not catalog.IndexStatus.DELETING
        for partition, node in _misplaced(index.partitions, index.retired, owner)
    ]


def _misplaced(
    serving: tuple[PartitionDef, ...],
    retired: tuple[PartitionDef, ...],
    owner: Callable[[str], str],
) -> list[tuple[PartitionDef, str]]:
    parents = {partition.id: partition for partition in retired}
    found: list[tuple[PartitionDef, str]] = []
    for partition in serving:
        if partition.replicas:
            # A replicated child stays on its parent's replicas, which hold it from the split:
            # where its replicas go is a change of its group's membership, not a move.
            continue
        parent = None if partition.parent is None else parents.get(partition.parent)
        if parent is None or partition.epoch != parent.epoch + 1:
            continue
        node = owner(partition.id)
        if node != partition.node:
            found.append((partition, node))
    return found
