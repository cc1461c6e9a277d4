"""A write group's outcome is a value (`storagenode.writes.Ready`): run a group, inspect what it
would persist, answer and install, as data, before anything of it is persisted or visible."""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson
import pytest

from core.errors import ConditionalCheckFailed, InternalServerError, StaleEpoch
from rpc import ops
from storagenode.layout import Family
from storagenode.memory_store import MemoryStore
from storagenode.node import StorageNode
from storagenode.partition import Partition
from tests import envelope

TABLE = {"id": "a1" * 16, "name": "T", "key_schema": {"hash": ["pk", "S"], "range": None}}
PARTITION = {"id": "p0", "start": "", "end": None, "epoch": 1, "node": "n1"}
REF = (TABLE["id"], "p0")


def put(pk: str, *, epoch: int = 1, condition: str | None = None) -> tuple[str, dict[str, Any]]:
    body = {
        "table_id": TABLE["id"],
        "partition_id": "p0",
        "epoch": epoch,
        "item": {"pk": {"S": pk}, "v": {"N": "1"}},
    }
    if condition is not None:
        body["condition"] = condition
    return ops.PUT, body


@pytest.fixture
def node() -> StorageNode:
    node = StorageNode(MemoryStore())
    envelope.apply(node, [(ops.CREATE_PARTITION, {"table": TABLE, "partition": PARTITION})])
    return node


def items_key(node: StorageNode, pk: str) -> bytes:
    partition = node.partitions[REF]
    return partition.item_prefix + partition.storage_key({"pk": {"S": pk}})


def test_a_groups_outcome_is_inspected_before_anything_is_persisted_or_installed(
    node: StorageNode,
) -> None:
    woken: list[Any] = []
    node.on_commit = woken.append
    before = node.partitions[REF]
    ready = node.run_group(
        [
            envelope.write(*put("a")),
            envelope.write(*put("a", condition="attribute_not_exists(pk)")),
            envelope.write(*put("b", epoch=7)),
            envelope.write(*put("c")),
        ]
    )
    first, failed, stale, last = ready.replies
    assert isinstance(first, dict) and isinstance(last, dict)
    assert first["new_bytes"] > 0
    assert isinstance(failed, ConditionalCheckFailed)  # Decided against the group's first put.
    assert isinstance(stale, StaleEpoch)
    assert ready.consumed[0] == 1.0 and ready.consumed[1] == 1.0 and ready.consumed[2] == 0.0
    # Two change records appended, as the partition's copy counts them.
    staged = ready.partitions[REF]
    assert isinstance(staged, Partition)
    assert [seq for seq, _ in ready.appended[REF]] == [1, 2]
    assert (staged.last_seq, staged.item_count) == (2, 2)
    assert ready.woken == {REF}
    assert ready.splits == () and ready.carried == ()
    # The batch holds both items; the store and the node's view have nothing of the group.
    assert ready.batch.get(Family.ITEMS, items_key(node, "a")) is not None
    assert node.store.get(Family.ITEMS, items_key(node, "a")) is None
    assert node.partitions[REF] is before and before.last_seq == 0
    assert woken == []
    with pytest.raises(dataclasses.FrozenInstanceError):
        ready.replies = ()  # type: ignore[misc]
    # Persisted, then installed: readers see it, and the feed's followers are woken.
    node.store.commit(ready.batch)
    node.install(ready)
    assert node.partitions[REF].last_seq == 2
    assert woken == [ready.woken]
    get = {"table_id": TABLE["id"], "partition_id": "p0", "epoch": 1, "key": {"pk": {"S": "c"}}}
    assert envelope.read(node, ops.GET, get)["item"] == {"pk": {"S": "c"}, "v": {"N": "1"}}


def test_a_lost_persist_fails_what_would_have_been_acknowledged_and_refusals_stand(
    node: StorageNode,
) -> None:
    ready = node.run_group(
        [
            envelope.write(*put("a")),
            envelope.write(*put("a", condition="attribute_not_exists(pk)")),
            envelope.write(*put("b", epoch=7)),
        ]
    )
    replies, consumed = ready.lost(OSError("disk gone"))
    assert isinstance(replies[0], InternalServerError)
    assert isinstance(replies[1], InternalServerError)  # Decided against a lost write.
    assert isinstance(replies[2], StaleEpoch)
    assert consumed == [0.0, 0.0, 0.0]
    assert "disk gone" in replies[0].message


def test_a_failed_commit_installs_nothing(node: StorageNode) -> None:
    def fail(batch: Any) -> None:
        raise OSError("disk gone")

    node.store.commit = fail  # type: ignore[method-assign]
    (reply,) = envelope.apply(node, [put("a")])
    assert isinstance(reply, InternalServerError)
    assert node.partitions[REF].last_seq == 0


def test_a_dropped_table_is_installed_as_gone(node: StorageNode) -> None:
    ready = node.run_group([envelope.write(ops.DROP_TABLE, {"table_id": TABLE["id"]})])
    assert ready.replies == ({"partitions_dropped": 1},)
    assert ready.partitions == {REF: None}
    node.store.commit(ready.batch)
    node.install(ready)
    assert REF not in node.partitions


def test_when_an_incoming_copy_last_heard_from_its_source_is_installed_not_written(
    node: StorageNode,
) -> None:
    """A move's target notes in the group when it heard from the source; the node's record of it
    (read by the check that drops abandoned copies) changes only when the group is installed."""
    meta = orjson.loads(node.partitions[REF].to_meta())
    meta.update(epoch=2, item_count=0, size_bytes=0, last_seq=meta["first_seq"] - 1)
    meta.update(log_bytes=0, index_stats={}, incoming_from="n1")
    target = StorageNode(MemoryStore(), clock=lambda: 1000.0)
    create = ops.MoveReceivePayload(TABLE["id"], "p0", "create", partition=meta)
    ready = target.run_group([envelope.write(ops.MOVE_RECEIVE, create.to_json())])
    assert isinstance(ready.replies[0], dict), ready.replies
    assert ready.heard == {REF: 1000.0}
    assert target.move_heard == {}  # Nothing of the group is visible before it is installed.
    target.store.commit(ready.batch)
    target.install(ready)
    assert target.move_heard == {REF: 1000.0}
    abort = ops.MoveReceivePayload(TABLE["id"], "p0", "abort")
    ready = target.run_group([envelope.write(ops.MOVE_RECEIVE, abort.to_json())])
    assert ready.heard == {REF: None} and target.move_heard == {REF: 1000.0}
    target.store.commit(ready.batch)
    target.install(ready)
    assert target.move_heard == {}
