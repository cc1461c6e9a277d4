"""A Raft group's log on RocksDB (`storagenode.raft_storage`): the `Storage` contract, run as one
suite over it and `MemoryStorage`, then the same operations in random sequences against
`MemoryStorage` as the model, with reopening the store in between; and many groups in one batch.
"""

from __future__ import annotations

import itertools
import random
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.raft import (
    Compacted,
    Config,
    ConfState,
    Entry,
    EntryKind,
    HardState,
    MemoryStorage,
    RaftNode,
    Snapshot,
)
from storagenode.layout import Family
from storagenode.raft_storage import RaftLogStorage, decode_entry, encode_entry, stored_groups
from storagenode.store import DataCorruption, Store

CONF = ConfState(frozenset({1, 2, 3}))


class Memory:
    """MemoryStorage behind the harness's methods (its writes need no batch)."""

    def __init__(self) -> None:
        self.storage = MemoryStorage(CONF)

    def append(self, entries: list[Entry]) -> None:
        self.storage.append(entries)

    def set_hard_state(self, hard_state: HardState) -> None:
        self.storage.set_hard_state(hard_state)

    def apply_snapshot(self, snapshot: Snapshot) -> None:
        self.storage.apply_snapshot(snapshot)

    def create_snapshot(self, index: int, data: bytes) -> None:
        self.storage.create_snapshot(index, CONF, data)

    def compact(self, index: int) -> None:
        self.storage.compact(index)

    def reopen(self) -> None:
        pass  # memory is its own disk


class Rocks:
    """RaftLogStorage on a real RocksDB: each write is a batch committed synced, as a round's."""

    def __init__(self, path: Path, group: str = "t/p", store: Store | None = None) -> None:
        self.path = path
        self.group = group
        self.store = store or Store(path)
        # A shared store is not closed to reopen: the group's storage is rebuilt from it.
        self.shared = store is not None
        batch = self.store.batch()
        self.storage = RaftLogStorage.create(self.store, batch, group, CONF)
        self._commit(batch)

    def _commit(self, batch: object) -> None:
        assert isinstance(batch, type(self.store.batch()))
        self.store.commit(batch)
        self.storage.persisted()

    def _write(self, method: str, *args: object) -> None:
        batch = self.store.batch()
        getattr(self.storage, method)(batch, *args)
        self._commit(batch)

    def append(self, entries: list[Entry]) -> None:
        self._write("append", entries)

    def set_hard_state(self, hard_state: HardState) -> None:
        self._write("set_hard_state", hard_state)

    def apply_snapshot(self, snapshot: Snapshot) -> None:
        self._write("apply_snapshot", snapshot)

    def create_snapshot(self, index: int, data: bytes) -> None:
        self._write("create_snapshot", index, CONF, data)

    def compact(self, index: int) -> None:
        self._write("compact", index)

    def reopen(self) -> None:
        if not self.shared:
            self.store.close()
            self.store = Store(self.path)
        self.storage = RaftLogStorage.load(self.store, self.group)

    def close(self) -> None:
        self.store.close()


Harness = Memory | Rocks


@pytest.fixture(params=["memory", "rocksdb"])
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Harness]:
    if request.param == "memory":
        yield Memory()
        return
    rocks = Rocks(tmp_path / "node")
    yield rocks
    rocks.close()


def entries(first: int, terms: list[int], tag: str = "") -> list[Entry]:
    return [
        Entry(first + i, term, data=f"{tag}{first + i}".encode()) for i, term in enumerate(terms)
    ]


def test_an_empty_log_starts_after_the_empty_snapshot(harness: Harness) -> None:
    storage = harness.storage
    assert storage.initial_state() == (HardState(), Snapshot(0, 0, CONF))
    assert (storage.first_index(), storage.last_index(), storage.term(0)) == (1, 0, 0)
    assert storage.entries(1, 1) == []


def test_appended_entries_are_read_back_and_survive_reopening(harness: Harness) -> None:
    harness.append(entries(1, [1, 1, 2]))
    harness.set_hard_state(HardState(term=2, vote=3, commit=2))
    harness.reopen()
    storage = harness.storage
    assert storage.last_index() == 3
    assert [storage.term(i) for i in range(0, 4)] == [0, 1, 1, 2]
    assert storage.entries(2, 4) == entries(2, [1, 2])
    assert storage.initial_state()[0] == HardState(term=2, vote=3, commit=2)


def test_entries_at_an_earlier_index_replace_the_conflicting_tail(harness: Harness) -> None:
    harness.append(entries(1, [1, 1, 1, 1, 1]))
    harness.append(entries(3, [2], tag="new"))
    harness.reopen()
    storage = harness.storage
    assert storage.last_index() == 3
    assert storage.entries(1, 4) == entries(1, [1, 1]) + entries(3, [2], tag="new")


def test_compaction_drops_entries_up_to_the_snapshot(harness: Harness) -> None:
    harness.append(entries(1, [1, 1, 2, 2, 3]))
    harness.create_snapshot(3, b"state at 3")
    harness.compact(2)
    harness.reopen()
    storage = harness.storage
    assert (storage.first_index(), storage.last_index()) == (3, 5)
    assert storage.term(2) == 1  # the dummy position before the first kept entry
    with pytest.raises(Compacted):
        storage.term(1)
    with pytest.raises(Compacted):
        storage.entries(2, 4)
    assert storage.entries(3, 6) == entries(3, [2, 2, 3])
    assert storage.snapshot() == Snapshot(3, 2, CONF, b"state at 3")


def test_appending_below_the_compaction_point_keeps_only_what_follows_it(
    harness: Harness,
) -> None:
    harness.append(entries(1, [1, 1, 1]))
    harness.create_snapshot(2, b"")
    harness.compact(2)
    harness.append(entries(1, [1, 1, 1, 2]))
    assert harness.storage.entries(3, 5) == entries(3, [1, 2])


def test_a_received_snapshot_replaces_the_whole_log(harness: Harness) -> None:
    harness.append(entries(1, [1, 1, 1]))
    snapshot = Snapshot(10, 4, ConfState(frozenset({1, 2}), frozenset({3})), b"leader's")
    harness.apply_snapshot(snapshot)
    harness.reopen()
    storage = harness.storage
    assert (storage.first_index(), storage.last_index(), storage.term(10)) == (11, 10, 4)
    assert storage.snapshot() == snapshot
    assert storage.initial_state()[1] == snapshot
    harness.append(entries(11, [4]))
    assert storage.entries(11, 12) == entries(11, [4])


def test_membership_entries_round_trip() -> None:
    conf = ConfState(frozenset({1, 5}), frozenset({7}))
    entry = Entry(9, 3, EntryKind.CONF, conf=conf)
    assert decode_entry(9, encode_entry(entry)) == entry
    plain = Entry(4, 2, data=b"\x00\xffcommand")
    assert decode_entry(4, encode_entry(plain)) == plain


def test_many_groups_share_one_batch_and_read_only_their_own(tmp_path: Path) -> None:
    store = Store(tmp_path / "node")
    groups = ["catalog", "a" * 32 + "/p1", "a" * 32 + "/p10", "b"]
    batch = store.batch()
    logs = {group: RaftLogStorage.create(store, batch, group, CONF) for group in groups}
    for number, (group, log) in enumerate(logs.items()):
        log.append(batch, entries(1, [1] * (number + 1), tag=group))
        log.set_hard_state(batch, HardState(term=1, commit=number))
    store.commit(batch)
    store.close()
    store = Store(tmp_path / "node")
    assert stored_groups(store) == sorted(groups, key=lambda g: (len(g.encode()), g))
    for number, group in enumerate(groups):
        log = RaftLogStorage.load(store, group)
        assert log.last_index() == number + 1
        assert log.entries(1, number + 2) == entries(1, [1] * (number + 1), tag=group)
        assert log.initial_state()[0].commit == number
    store.close()


def test_reads_past_the_cache_come_from_the_store(tmp_path: Path) -> None:
    rocks = Rocks(tmp_path / "node")
    count = 700  # more than limits.RAFT_LOG_CACHE_ENTRIES
    for first in range(1, count + 1, 100):
        rocks.append(entries(first, [1] * 100))
    assert rocks.storage.entries(1, count + 1) == entries(1, [1] * count)
    assert rocks.storage.term(5) == 1
    rocks.close()


def test_a_hole_in_the_stored_log_is_corruption_not_a_short_read(tmp_path: Path) -> None:
    rocks = Rocks(tmp_path / "node")
    rocks.append(entries(1, [1, 1, 1]))
    batch = rocks.store.batch()
    batch.delete(Family.RAFT_LOG, rocks.storage._log_key(2))
    rocks.store.commit(batch)
    rocks.reopen()
    with pytest.raises(DataCorruption):
        rocks.storage.entries(1, 4)
    with pytest.raises(DataCorruption):
        rocks.storage.term(2)
    rocks.close()


def test_the_applied_membership_is_kept_so_a_restart_reads_no_log_before_it(
    tmp_path: Path,
) -> None:
    store = Store(tmp_path / "node")
    batch = store.batch()
    storage = RaftLogStorage.create(store, batch, "g", CONF)
    grown = ConfState(frozenset({1, 2, 3}), frozenset({4}))
    storage.append(batch, [Entry(1, 1), Entry(2, 1, EntryKind.CONF, conf=grown), Entry(3, 1)])
    storage.set_hard_state(batch, HardState(1, 1, 3))
    assert storage.membership() == (0, CONF)
    storage.set_membership(batch, 2, grown)
    store.commit(batch)
    reopened = RaftLogStorage.load(store, "g")
    assert reopened.membership() == (2, grown)
    # The node starts from it: the log before index 2 is not read (it could be compacted away).
    node = RaftNode(Config(node_id=1), reopened, random.Random(0))
    assert node.conf == grown
    # A later snapshot is as of its own index, with its own membership.
    batch = store.batch()
    reopened.create_snapshot(batch, 3, grown, b"")
    store.commit(batch)
    assert RaftLogStorage.load(store, "g").membership() == (3, grown)
    store.close()


def test_a_group_is_created_once(tmp_path: Path) -> None:
    rocks = Rocks(tmp_path / "node")
    with pytest.raises(ValueError, match="already exists"):
        RaftLogStorage.create(rocks.store, rocks.store.batch(), rocks.group, CONF)
    rocks.close()


# Random sequences against MemoryStorage as the model.

operations = st.lists(
    st.one_of(
        # append: (where, relative to first and last; terms)
        st.tuples(
            st.just("append"),
            st.integers(0, 100),
            st.lists(st.integers(0, 2), min_size=1, max_size=6),
        ),
        st.tuples(st.just("snapshot_and_compact"), st.integers(0, 100), st.integers(0, 100)),
        st.tuples(st.just("install"), st.integers(0, 5), st.integers(0, 2)),
        st.tuples(st.just("reopen"), st.just(0), st.just(0)),
    ),
    max_size=25,
)


def test_random_sequences_agree_with_memory_storage() -> None:
    # One database for every example (opening one per example is most of the time): each
    # example is a group of its own, and "reopen" rebuilds the group's storage from the store.
    with tempfile.TemporaryDirectory() as directory:
        store = Store(Path(directory) / "node")
        examples = itertools.count()
        try:

            @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
            @given(operations)
            def agree(ops: list[tuple[str, int, object]]) -> None:
                model = Memory()
                real = Rocks(store.path, group=f"example/{next(examples)}", store=store)
                for kind, a, b in ops:
                    apply_operation(model, kind, a, b)
                    apply_operation(real, kind, a, b)
                    assert_same(model.storage, real.storage)

            agree()
        finally:
            store.close()


def apply_operation(harness: Harness, kind: str, a: int, b: object) -> None:
    storage = harness.storage
    first, last = storage.first_index(), storage.last_index()
    if kind == "append":
        assert isinstance(b, list)
        at = first + a % (last - first + 2)  # from the first kept index to just after the last
        base = storage.term(at - 1)
        # Terms never go down along a log: each entry's term is the previous one's plus 0 to 2.
        terms, term = [], base
        for step in b:
            term += step
            terms.append(max(term, 1))
        harness.append(entries(at, terms, tag=f"{at}:{terms}"))
    elif kind == "snapshot_and_compact":
        snapshot_index = storage.snapshot().index
        if last <= snapshot_index:
            return
        index = snapshot_index + 1 + a % (last - snapshot_index)
        harness.create_snapshot(index, f"state {index}".encode())
        assert isinstance(b, int)
        harness.compact(first - 1 + b % (index - first + 2))
    elif kind == "install":
        assert isinstance(b, int)
        index = max(last, storage.snapshot().index) + a
        term = storage.term(last) + b if index == last else storage.term(last) + 1 + b
        harness.apply_snapshot(Snapshot(index, max(term, 1), CONF, f"sent {index}".encode()))
    else:
        harness.reopen()


def assert_same(model: MemoryStorage, real: RaftLogStorage) -> None:
    assert real.first_index() == model.first_index()
    assert real.last_index() == model.last_index()
    assert real.snapshot() == model.snapshot()
    for index in range(model.first_index() - 1, model.last_index() + 1):
        assert real.term(index) == model.term(index)
    assert real.entries(real.first_index(), real.last_index() + 1) == model.entries(
        model.first_index(), model.last_index() + 1
    )
