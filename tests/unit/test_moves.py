"""The pure rules of a move (`core.moves`): the catalog switch, and recovery (its states are the
move machine's: `test_move_machine.py`)."""

from __future__ import annotations

import pytest

from core import catalog, moves, splits
from core.catalog import BillingMode, IllegalTransition, PartitionDef, TableDef, Throughput
from core.keycodec import encode_storage_key
from core.keys import KeyShape
from core.moves import SourceAction, TargetAction

TABLE_ID = "cd" * 16


def table() -> TableDef:
    created = catalog.created(
        name="T",
        table_id=TABLE_ID,
        key_shape=KeyShape.table(("pk", "S"), ("sk", "N")),
        attribute_definitions=[("pk", "S"), ("sk", "N")],
        billing_mode=BillingMode.PROVISIONED,
        throughput=Throughput(10, 10),
        now=0.0,
        owner=lambda _: "n1",
    )
    return catalog.activated(created)


def split_table() -> tuple[TableDef, PartitionDef, PartitionDef]:
    start = table()
    parent = start.partitions[0]
    low_id, high_id = splits.child_ids(parent.id, parent.epoch)
    key = encode_storage_key({"S": "m"}, None)
    return catalog.split(start, parent.id, key, low_id, high_id, now=1_700_000_000.0)


def test_switch_moves_the_partition_at_the_next_epoch_keeping_range_share_and_lineage() -> None:
    current, low, high = split_table()
    after = moves.switched(current, TABLE_ID, high, "n2")
    moved = after.partition(high.id)
    assert (moved.node, moved.epoch) == ("n2", high.epoch + 1)
    assert (moved.start, moved.end, moved.share, moved.parent) == (
        high.start,
        high.end,
        high.share,
        high.parent,
    )
    assert after.partition(low.id) == low
    assert after.retired == current.retired
    # A retry (a lost reply, a restart) finds it switched and changes nothing.
    assert moves.switched(after, TABLE_ID, high, "n2") is after


def test_switch_refuses_when_the_catalog_moved_on() -> None:
    current, low, high = split_table()
    with pytest.raises(moves.MoveConflict):
        moves.switched(None, TABLE_ID, high, "n2")
    with pytest.raises(moves.MoveConflict):
        moves.switched(current, "ef" * 16, high, "n2")  # Dropped and created again.
    elsewhere = moves.switched(current, TABLE_ID, high, "n3")
    with pytest.raises(moves.MoveConflict):
        moves.switched(elsewhere, TABLE_ID, high, "n2")  # Moved to another node meanwhile.
    parent = current.retired[0]
    with pytest.raises(moves.MoveConflict):
        moves.switched(current, TABLE_ID, parent, "n2")  # Split meanwhile.
    with pytest.raises(IllegalTransition):
        catalog.moved(current, low.id, low.node)  # Not a move.


def test_a_restarted_source_finishes_only_what_the_catalog_switched() -> None:
    current, _, high = split_table()
    after = moves.switched(current, TABLE_ID, high, "n2")
    assert moves.source_recovery(after, TABLE_ID, high.id, high.epoch, "n2") is SourceAction.FINISH
    assert (
        moves.source_recovery(current, TABLE_ID, high.id, high.epoch, "n2")
        is SourceAction.ROLL_BACK
    )
    # Switched to another node than the one this source fenced for: not its move.
    other = moves.switched(current, TABLE_ID, high, "n3")
    assert (
        moves.source_recovery(other, TABLE_ID, high.id, high.epoch, "n2") is SourceAction.ROLL_BACK
    )
    gone = moves.source_recovery(None, TABLE_ID, high.id, high.epoch, "n2")
    assert gone is SourceAction.ROLL_BACK


def test_a_target_serves_what_the_catalog_names_it_for_and_drops_what_went_elsewhere() -> None:
    current, _, high = split_table()
    epoch = high.epoch + 1
    assert moves.target_recovery(current, TABLE_ID, high.id, epoch, "n2") is TargetAction.WAIT
    after = moves.switched(current, TABLE_ID, high, "n2")
    assert moves.target_recovery(after, TABLE_ID, high.id, epoch, "n2") is TargetAction.ACTIVATE
    elsewhere = moves.switched(current, TABLE_ID, high, "n3")
    assert moves.target_recovery(elsewhere, TABLE_ID, high.id, epoch, "n2") is TargetAction.DROP
    low_id, high_id = splits.child_ids(high.id, high.epoch)
    key = bytes.fromhex(high.start) + b"\x80"
    split_again = catalog.split(current, high.id, key, low_id, high_id, now=1_700_000_000.0)[0]
    assert moves.target_recovery(split_again, TABLE_ID, high.id, epoch, "n2") is TargetAction.DROP
    assert moves.target_recovery(None, TABLE_ID, high.id, epoch, "n2") is TargetAction.DROP


def test_misplaced_names_split_children_off_their_ring_owner_once() -> None:
    current, low, high = split_table()
    owner = {low.id: "n1", high.id: "n2"}
    assert moves.misplaced(current, owner.__getitem__) == [(high, "n2")]
    unsplit = table()
    assert moves.misplaced(unsplit, lambda _: "n2") == []
    moved = moves.switched(current, TABLE_ID, high, "n2")
    assert moves.misplaced(moved, owner.__getitem__) == []
    # Moved once: another ring (a router with other nodes) does not move it again.
    assert moves.misplaced(moved, lambda _: "n3") == [(low, "n3")]
