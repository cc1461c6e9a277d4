"""Write groups through Raft logs (`storagenode.replication`): every partition a group of one
member, each partition's share of a write group's effect one entry of its log, entries and effect
persisted by one synced commit, and the logs carrying exactly what the node stored."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.errors import InternalServerError, StaleEpoch
from core.raft import ConfState, EntryKind
from rpc import ops
from storagenode.layout import Family, raft_group_prefix
from storagenode.memory_store import MemoryStore
from storagenode.raft_host import group_id
from storagenode.raft_storage import RaftLogStorage, stored_groups
from storagenode.replication import (
    NODE_GROUP,
    EffectError,
    decode_effect,
    encode_effect,
    replay,
)
from storagenode.store import DELETE, DELETE_RANGE, PUT, BatchOp, Store
from tests import envelope
from tests.unit.test_storage_node import HALF, TABLE, Harness, n, s, song

P0 = group_id(TABLE["id"], "p0")
P1 = group_id(TABLE["id"], "p1")
DATA_FAMILIES = [family for family in Family if family not in (Family.RAFT_LOG, Family.RAFT_STATE)]

keys = st.binary(min_size=1, max_size=40)
writes = st.lists(
    st.one_of(
        st.tuples(st.just(PUT), st.sampled_from(DATA_FAMILIES), keys, st.binary(max_size=300)),
        st.tuples(st.just(DELETE), st.sampled_from(DATA_FAMILIES), keys, st.none()),
        st.tuples(st.just(DELETE_RANGE), st.sampled_from(DATA_FAMILIES), keys, keys),
    ),
    max_size=20,
)


@given(writes)
def test_an_effect_round_trips_through_its_entry(effect: list[BatchOp]) -> None:
    assert decode_effect(encode_effect(effect)) == effect


def test_an_entry_that_is_no_effect_is_refused_not_misread() -> None:
    data = encode_effect([(PUT, Family.ITEMS, b"key", b"value")])
    with pytest.raises(EffectError, match="format"):
        decode_effect(b"\x09" + data[1:])
    with pytest.raises(EffectError, match="damaged"):
        decode_effect(data[:-1] + b"")  # One byte short of its value.
    with pytest.raises(EffectError, match="damaged"):
        decode_effect(data[:7])  # Cut inside a write's header.
    with pytest.raises(EffectError, match="damaged"):
        decode_effect(data + b"\x00")


@pytest.fixture
def h(tmp_path: Path) -> Any:
    harness = Harness(tmp_path / "node")
    harness.create(partition_id="p0", end=HALF)
    harness.create(partition_id="p1", start=HALF)
    yield harness
    harness.store.close()


def keys_in(h: Harness, partition_id: str, count: int) -> list[str]:
    """Partition keys whose items the partition holds."""
    partition = h.node.partitions[TABLE["id"], partition_id]
    found = []
    for i in range(1000):
        try:
            partition.storage_key(song(f"k{i}", 0))
        except StaleEpoch:
            continue
        found.append(f"k{i}")
        if len(found) == count:
            return found
    raise AssertionError(f"fewer than {count} keys in {partition_id}")


def entries(store: Any, group: str) -> list[Any]:
    storage = RaftLogStorage.load(store, group)
    return storage.entries(storage.first_index(), storage.last_index() + 1)


def data_of(store: Any) -> dict[Family, list[tuple[bytes, bytes]]]:
    return {family: list(store.walk(family, b"", None, forward=True)) for family in DATA_FAMILIES}


def test_every_partition_is_a_group_and_its_writes_are_entries_of_its_log(h: Harness) -> None:
    assert set(stored_groups(h.store)) == {NODE_GROUP, P0, P1}
    before = len(entries(h.store, P0))
    [a] = keys_in(h, "p0", 1)
    h.put(song(a, 1))
    results = envelope.apply(
        h.node, [(ops.PUT, h.data(item=song(a, 2))), (ops.PUT, h.data(item=song(a, 3)))]
    )
    assert all(isinstance(result, dict) for result in results)
    logged = entries(h.store, P0)
    # One entry per write group that wrote to the partition, whatever the writes in it.
    assert len(logged) == before + 2
    # The last one carries both puts' items and change records, and the partition's metadata.
    written = [family for _kind, family, _key, _value in decode_effect(logged[-1].data)]
    assert sorted(written) == sorted(
        [Family.ITEMS, Family.CHANGE_LOG, Family.ITEMS, Family.CHANGE_LOG, Family.PARTITIONS]
    )
    # The other partition's log and the node's own did not move.
    # Its election's empty entry alone: a partition's creation is the node's own write (an
    # entry of the node's log), as every write addressed to no one partition is.
    assert len(entries(h.store, P1)) == 1


def test_one_synced_commit_persists_every_partitions_entry_and_the_effect(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    commits: list[int] = []
    commit = h.store.commit

    def counted(batch: Any) -> None:
        commits.append(len(batch))
        commit(batch)

    monkeypatch.setattr(h.store, "commit", counted)
    before = {group: len(entries(h.store, group)) for group in (P0, P1)}
    pks = [f"k{i}" for i in range(40)]
    results = envelope.apply(
        h.node,
        [
            (ops.PUT, h.data(partition_id=pid, item=song(pk, 1)))
            for pk in pks
            for pid in ("p0", "p1")
        ],
    )
    assert len(commits) == 1
    assert sum(isinstance(result, dict) for result in results) == len(pks)  # Half are stale.
    assert {group: len(entries(h.store, group)) - before[group] for group in (P0, P1)} == {
        P0: 1,
        P1: 1,
    }


def test_the_logs_carry_exactly_what_the_node_stored(h: Harness) -> None:
    """Replaying every entry of every log into an empty store gives the node's data, byte for
    byte: items, change records, the partitions' metadata, trims and deletes included."""
    pks = keys_in(h, "p0", 7)
    for i in range(30):
        h.put(song(pks[i % 7], i, v=s("x" * (i * 3))))
        if i % 5 == 0:
            h.write(ops.DELETE, h.data(key=song(pks[(i + 3) % 7], i - 1)))
        if i % 4 == 0:
            h.write(
                ops.UPDATE,
                h.data(key=song(pks[i % 7], i), update="SET c = :c", values={":c": n(i)}),
            )
    envelope.apply(
        h.node,
        [(ops.PUT, h.data(partition_id="p1", item=song(pk, 1))) for pk in keys_in(h, "p1", 9)],
    )
    rebuilt = MemoryStore()
    for group in (NODE_GROUP, P0, P1):
        batch = rebuilt.batch()
        for entry in entries(h.store, group):
            if entry.kind is EntryKind.NORMAL and entry.data:
                replay(batch, decode_effect(entry.data))
        rebuilt.commit(batch)
    assert data_of(rebuilt) == data_of(h.store)


def test_groups_follow_the_partitions_across_drops_and_restarts(h: Harness) -> None:
    a, b = keys_in(h, "p0", 2)
    h.put(song(a, 1))
    h.reopen()
    # Reopened: every group leads again at once and takes writes.
    h.put(song(a, 2))
    assert h.get(song(a, 2)) == song(a, 2)
    h.write(ops.DROP_TABLE, {"table_id": TABLE["id"]})
    assert set(stored_groups(h.store)) == {NODE_GROUP}
    prefix = raft_group_prefix(P0)
    assert list(h.store.walk(Family.RAFT_LOG, prefix, prefix + b"\xff" * 9, forward=True)) == []
    h.create(partition_id="p0", end=HALF)
    h.put(song(b, 1))
    assert h.get(song(b, 1)) == song(b, 1)
    assert len(entries(h.store, P0)) == 2  # A new log: its election, the put.


def test_recovery_removes_a_dead_partitions_group_and_gives_one_to_a_partition_without(
    tmp_path: Path,
) -> None:
    h = Harness(tmp_path / "node")
    h.create(partition_id="p0", end=HALF)
    a = keys_in(h, "p0", 1)[0]
    h.put(song(a, 1))
    # As a node that stopped between a partition's last entry and its group's removal, or one
    # whose partitions were written before there were logs.
    batch = h.store.batch()
    RaftLogStorage.create(h.store, batch, P1, ConfState(frozenset({1})))
    RaftLogStorage.load(h.store, P0).destroy(batch)
    h.store.commit(batch)
    h.reopen()
    assert set(stored_groups(h.store)) == {NODE_GROUP, P0}
    h.put(song(a, 2))
    assert h.get(song(a, 1)) == song(a, 1) and h.get(song(a, 2)) == song(a, 2)
    h.store.close()


def test_after_a_failed_commit_the_logs_are_read_again_and_go_on_without_a_gap(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = keys_in(h, "p0", 1)[0]
    h.put(song(a, 1))
    first = entries(h.store, P0)

    def fail(batch: Any) -> None:
        raise OSError("No space left on device")

    monkeypatch.setattr(h.store, "commit", fail)
    (result,) = envelope.apply(h.node, [(ops.PUT, h.data(item=song(a, 2)))])
    assert isinstance(result, InternalServerError)
    monkeypatch.undo()
    h.put(song(a, 3))
    logged = entries(h.store, P0)
    assert [entry.index for entry in logged] == list(range(1, len(logged) + 1))
    assert logged[: len(first)] == first
    effects = [decode_effect(entry.data) for entry in logged[len(first) :] if entry.data]
    assert len(effects) == 1  # The put that failed left nothing in the log.
    assert h.get(song(a, 2)) is None and h.get(song(a, 3)) == song(a, 3)


def test_an_entry_committed_but_not_applied_is_applied_when_the_node_opens(
    tmp_path: Path,
) -> None:
    """Entries and effects commit together, so a node never stops between them; but a log that
    holds a committed entry its state machine has not applied (as one applying later would)
    hands it over at the next start, before the node reads its partitions."""
    h = Harness(tmp_path / "node")
    h.create(partition_id="p0", end=HALF)
    a = keys_in(h, "p0", 1)[0]
    h.put(song(a, 1))
    logged = entries(h.store, P0)
    storage = RaftLogStorage.load(h.store, P0)
    # Take the last entry's effect out of the store, and the applied index back before it.
    batch = h.store.batch()
    for _kind, family, key, _value in decode_effect(logged[-1].data):
        batch.delete(family, key)
    storage.set_applied(batch, logged[-2].index)
    h.store.commit(batch)
    h.store.close()
    store = Store(tmp_path / "node")
    h.store = store
    h.node = type(h.node)(store)
    assert h.get(song(a, 1)) == song(a, 1)
    assert h.node.partitions[TABLE["id"], "p0"].item_count == 1
    store.close()
