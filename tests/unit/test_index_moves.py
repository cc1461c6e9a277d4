"""The pure rules of moving a global index's partition (`core.moves` over the index's entry)."""

from __future__ import annotations

import pytest

from core import catalog, moves, splits
from core.catalog import IllegalTransition, IndexStatus, PartitionDef, TableDef
from core.moves import SourceAction, TargetAction
from tests.unit.test_splits import INDEX_ID, TABLE_ID, key, table_with_index


def split_index() -> tuple[TableDef, PartitionDef, PartitionDef]:
    before = table_with_index()
    [parent] = before.indexes[0].partitions
    after = splits.recorded(before, INDEX_ID, parent, key("b", 1), now=1_700_000_000.0)
    low, high = splits.children_of(after, parent.id, INDEX_ID) or pytest.fail("no children")
    return after, low, high


def test_an_index_partition_switch_is_recorded_in_its_index_at_the_next_epoch() -> None:
    current, low, high = split_index()
    after = moves.switched(current, INDEX_ID, high, "node-3")
    moved = moves.serving_partition(after, INDEX_ID, high.id)
    assert moved is not None and (moved.node, moved.epoch) == ("node-3", high.epoch + 1)
    assert (moved.start, moved.end, moved.share, moved.parent) == (
        high.start,
        high.end,
        high.share,
        high.parent,
    )
    assert moves.serving_partition(after, INDEX_ID, low.id) == low
    assert after.indexes[0].retired == current.indexes[0].retired
    assert after.partitions == current.partitions  # The table's own are untouched.
    assert TableDef.from_json(after.to_json()).indexes[0] == after.indexes[0]
    # A retry finds it switched and changes nothing.
    assert moves.switched(after, INDEX_ID, high, "node-3") is after
    # The table's id does not name the index's partitions.
    with pytest.raises(moves.MoveConflict):
        moves.switched(current, TABLE_ID, high, "node-3")
    with pytest.raises(moves.MoveConflict):
        moves.switched(after, INDEX_ID, high, "node-1")  # Moved already, elsewhere.


def test_an_index_being_deleted_does_not_move_its_partitions() -> None:
    before = table_with_index(IndexStatus.DELETING)
    [partition] = before.indexes[0].partitions
    with pytest.raises(IllegalTransition, match="DELETING"):
        moves.switched(before, INDEX_ID, partition, "node-3")
    with pytest.raises(IllegalTransition, match="already"):
        catalog.index_partition_moved(table_with_index(), INDEX_ID, partition.id, partition.node)
    gone = catalog.index_moved(before, "byG", None)
    with pytest.raises(moves.MoveConflict):
        moves.switched(gone, INDEX_ID, partition, "node-3")


def test_a_source_and_a_target_of_an_index_partition_settle_by_the_index_entry() -> None:
    current, _, high = split_index()
    epoch = high.epoch
    action = moves.source_recovery(current, INDEX_ID, high.id, epoch, "node-3")
    assert action is SourceAction.ROLL_BACK
    after = moves.switched(current, INDEX_ID, high, "node-3")
    assert moves.source_recovery(after, INDEX_ID, high.id, epoch, "node-3") is SourceAction.FINISH
    assert moves.source_recovery(None, INDEX_ID, high.id, epoch, "node-3") is SourceAction.ROLL_BACK
    at = epoch + 1
    assert moves.target_recovery(current, INDEX_ID, high.id, at, "node-3") is TargetAction.WAIT
    assert moves.target_recovery(after, INDEX_ID, high.id, at, "node-3") is TargetAction.ACTIVATE
    elsewhere = moves.switched(current, INDEX_ID, high, "node-1")
    assert moves.target_recovery(elsewhere, INDEX_ID, high.id, at, "node-3") is TargetAction.DROP
    gone = catalog.index_moved(current, "byG", IndexStatus.DELETING)
    gone = catalog.index_moved(gone, "byG", None)
    assert moves.target_recovery(gone, INDEX_ID, high.id, at, "node-3") is TargetAction.DROP


def test_misplaced_index_partitions_names_index_split_children_off_their_owner_once() -> None:
    current, low, high = split_index()
    owner = {low.id: "node-2", high.id: "node-3"}
    assert moves.misplaced_index_partitions(current, owner.__getitem__) == [
        (INDEX_ID, high, "node-3")
    ]
    assert moves.misplaced(current, owner.get) == []  # Not the table's partitions.
    assert moves.misplaced_index_partitions(table_with_index(), lambda _: "node-3") == []
    moved = moves.switched(current, INDEX_ID, high, "node-3")
    assert moves.misplaced_index_partitions(moved, owner.__getitem__) == []
    # Moved once: another ring does not move it again.
    assert moves.misplaced_index_partitions(moved, lambda _: "node-1") == [
        (INDEX_ID, low, "node-1")
    ]
    deleting = catalog.index_moved(current, "byG", IndexStatus.DELETING)
    assert moves.misplaced_index_partitions(deleting, owner.__getitem__) == []
