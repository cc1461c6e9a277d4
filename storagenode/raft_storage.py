"""A Raft group's durable log in the node's RocksDB: `core.raft.storage.Storage`, one per group.

Every group of a node keeps its log and state in two column families of the node's one database
(`layout.py`): `raft_log` (group prefix ‖ big-endian index -> entry) and `raft_state` (group
prefix ‖ tag -> hard state, snapshot, compaction point, applied index). Writes never commit on
their own: each takes the `WriteBatchView` of the host's handling round, so the entries and hard
states of many groups, and what their state machines applied, are persisted by one synced commit
(`raft_host.py`).

What `RaftNode` reads comes from memory where that is cheap and from the store otherwise: the
hard state, snapshot, compaction point and last index are kept in memory; so are the newest
entries (`limits.RAFT_LOG_CACHE_ENTRIES`, more until the round that wrote them has committed, so
that a read between writing a batch and committing it never misses an entry only the batch has).
Older entries are read from RocksDB.

The log keeps, like etcd's, a "dummy" position before its first entry: the index and term it was
compacted to (`t`), so the term of the entry before any kept one is known. A snapshot (`s`) may
be newer than that point (the application snapshots, then the host compacts) but never older.

Entries are encoded with `struct`: an 8-byte term, a kind byte, then the command as it is (a
membership entry: orjson `[voters, learners]`); the index is the key's. Nine bytes of overhead,
and no parsing of the command, which is the application's.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Iterator, Sequence
from typing import Protocol

import orjson

from core import limits
from core.raft import Compacted, ConfState, Entry, EntryKind, HardState, Snapshot
from storagenode.layout import RAFT_INDEX_BYTES, Family, raft_group_of, raft_group_prefix
from storagenode.store import DataCorruption, WriteBatchView

_HARD_STATE = b"h"
_SNAPSHOT = b"s"
_TRUNCATED = b"t"
_APPLIED = b"a"
_MEMBERSHIP = b"m"
# A member's copy of the state being replaced from another member's (`storagenode/snapshots.py`):
# the application's record of the transfer, while it runs; then the index before which reads
# are not served, until the group has applied that far.
_INSTALLING = b"i"
_SERVE_FROM = b"u"

_ENTRY_HEADER = struct.Struct(">QB")  # term, kind
_HARD_STATE_VALUE = struct.Struct(">QQQ")  # term, vote, commit
_POSITION = struct.Struct(">QQ")  # index, term
_SNAPSHOT_HEADER = struct.Struct(">QQI")  # index, term, length of the membership's JSON
_MEMBERSHIP_HEADER = struct.Struct(">Q")  # the index it is as of, then its JSON
_INDEX = struct.Struct(">Q")
_ZERO = _INDEX.pack(0)

_KINDS = {EntryKind.NORMAL: 0, EntryKind.CONF: 1}
_KIND_OF = {number: kind for kind, number in _KINDS.items()}


class RaftStore(Protocol):
    """What a group's storage reads of the node's store (`Store`, or `MemoryStore` in tests)."""

    def get(self, family: Family, key: bytes) -> bytes | None: ...

    def walk(
        self, family: Family, lo: bytes, hi: bytes | None, *, forward: bool
    ) -> Iterator[tuple[bytes, bytes]]: ...


def encode_conf(conf: ConfState) -> bytes:
    return orjson.dumps([sorted(conf.voters), sorted(conf.learners)])


def decode_conf(data: bytes) -> ConfState:
    voters, learners = orjson.loads(data)
    return ConfState(frozenset(voters), frozenset(learners))


def encode_entry(entry: Entry) -> bytes:
    header = _ENTRY_HEADER.pack(entry.term, _KINDS[entry.kind])
    if entry.conf is not None:
        return header + encode_conf(entry.conf)
    return header + entry.data


def decode_entry(index: int, value: bytes) -> Entry:
    term, kind_number = _ENTRY_HEADER.unpack_from(value)
    kind = _KIND_OF[kind_number]
    body = value[_ENTRY_HEADER.size :]
    if kind is EntryKind.CONF:
        return Entry(index, term, kind, conf=decode_conf(body))
    return Entry(index, term, kind, data=body)


def _encode_snapshot(snapshot: Snapshot) -> bytes:
    conf = encode_conf(snapshot.conf)
    return _SNAPSHOT_HEADER.pack(snapshot.index, snapshot.term, len(conf)) + conf + snapshot.data


def _decode_snapshot(value: bytes) -> Snapshot:
    index, term, conf_length = _SNAPSHOT_HEADER.unpack_from(value)
    start = _SNAPSHOT_HEADER.size
    conf = decode_conf(value[start : start + conf_length])
    return Snapshot(index, term, conf, value[start + conf_length :])


def _decode_membership(value: bytes | None) -> tuple[int, ConfState] | None:
    if value is None:
        return None
    (index,) = _MEMBERSHIP_HEADER.unpack_from(value)
    return index, decode_conf(value[_MEMBERSHIP_HEADER.size :])


def stored_groups(store: RaftStore) -> list[str]:
    """The ids of every group with state in the store, in key order."""
    groups: list[str] = []
    for key, _value in store.walk(Family.RAFT_STATE, b"", None, forward=True):
        group = raft_group_of(key)
        if not groups or groups[-1] != group:
            groups.append(group)
    return groups


@dataclasses.dataclass(frozen=True, slots=True)
class StoredProgress:
    applied: int
    installing: bool
    serve_from: int


def stored_progress(store: RaftStore, group: str) -> StoredProgress | None:
    """How far a group's member has applied, as the store holds it (None: no such group here),
    whether its state is being copied, and from which index it is whole again."""
    prefix = raft_group_prefix(group)
    applied = store.get(Family.RAFT_STATE, prefix + _APPLIED)
    if applied is None:
        return None
    serve_from = store.get(Family.RAFT_STATE, prefix + _SERVE_FROM)
    return StoredProgress(
        _INDEX.unpack(applied)[0],
        store.get(Family.RAFT_STATE, prefix + _INSTALLING) is not None,
        0 if serve_from is None else _INDEX.unpack(serve_from)[0],
    )


class RaftLogStorage:
    """One group's log and state on the node's store; see the module docstring.

    `create` starts a new group's state in a batch, `load` reads an existing one's. The `Storage`
    methods read; `append`, `set_hard_state`, `apply_snapshot`, `create_snapshot`, `compact` and
    `set_applied` write into a batch; `persisted` is told when that batch has committed.
    """

    def __init__(
        self,
        store: RaftStore,
        group: str,
        *,
        hard_state: HardState,
        snapshot: Snapshot,
        truncated: tuple[int, int],
        last_index: int,
        applied: int,
        membership: tuple[int, ConfState] | None = None,
        installing: bytes | None = None,
        serve_from: int = 0,
    ) -> None:
        self.store = store
        self.group = group
        self._prefix = raft_group_prefix(group)
        self._hard_state = hard_state
        self._snapshot = snapshot
        self._offset, self._offset_term = truncated
        self._last = last_index
        self.applied = applied
        # Bytes of the entries appended since this storage was opened or last compacted (a
        # count kept in memory only: after a restart it starts again at 0, so compaction by
        # bytes comes later, never sooner, and the count of entries still bounds the log).
        self.appended_bytes = 0
        # The last membership entry applied, and its index (None: none since the snapshot).
        self._membership = membership
        # The newest entries, contiguous, ending at the last index (or empty).
        self._tail: list[Entry] = []
        # While the member's state is being copied from another's: the application's record of
        # the copy (the group does not run meanwhile); and the applied index from which the
        # state it copied is whole again (`set_serve_from`).
        self.installing = installing
        self.serve_from = serve_from

    @classmethod
    def create(
        cls,
        store: RaftStore,
        batch: WriteBatchView,
        group: str,
        conf: ConfState,
        *,
        start: int = 0,
    ) -> RaftLogStorage:
        """A new group member with an empty log and membership `conf`, written into `batch`.

        With `start` > 0 the log begins after a snapshot at that index (term 1), committed and
        applied: the state the application already holds when every member creates the group
        alike (a split's child, from its parent's applied state). A member created without it
        (index 0) is behind that snapshot, so its leader sends it the snapshot and it copies the
        state from a member (`storagenode.snapshots`)."""
        term = 1 if start else 0
        hard_state = HardState(term, 0, start)
        storage = cls(
            store,
            group,
            hard_state=hard_state,
            snapshot=Snapshot(start, term, conf),
            truncated=(start, term),
            last_index=start,
            applied=start,
        )
        if store.get(Family.RAFT_STATE, storage._state_key(_HARD_STATE)) is not None:
            raise ValueError(f"Raft group {group!r} already exists on this node")
        storage.set_hard_state(batch, hard_state)
        storage._set_snapshot(batch, storage._snapshot)
        storage._set_truncated(batch, start, term)
        storage.set_applied(batch, start)
        return storage

    @classmethod
    def load(cls, store: RaftStore, group: str) -> RaftLogStorage:
        """A group's storage as the store holds it (after a restart)."""
        prefix = raft_group_prefix(group)

        def state(tag: bytes) -> bytes:
            value = store.get(Family.RAFT_STATE, prefix + tag)
            if value is None:
                raise DataCorruption(f"Raft group {group!r} lacks its state {tag.decode()!r}")
            return value

        term, vote, commit = _HARD_STATE_VALUE.unpack(state(_HARD_STATE))
        offset, offset_term = _POSITION.unpack(state(_TRUNCATED))
        last = offset
        for key, _value in store.walk(
            Family.RAFT_LOG, prefix, prefix + b"\xff" * (RAFT_INDEX_BYTES + 1), forward=False
        ):
            last = _INDEX.unpack(key[len(prefix) :])[0]
            break
        return cls(
            store,
            group,
            hard_state=HardState(term, vote, commit),
            snapshot=_decode_snapshot(state(_SNAPSHOT)),
            truncated=(offset, offset_term),
            last_index=max(last, offset),
            applied=_INDEX.unpack(state(_APPLIED))[0],
            membership=_decode_membership(store.get(Family.RAFT_STATE, prefix + _MEMBERSHIP)),
            installing=store.get(Family.RAFT_STATE, prefix + _INSTALLING),
            serve_from=_INDEX.unpack(store.get(Family.RAFT_STATE, prefix + _SERVE_FROM) or _ZERO)[
                0
            ],
        )

    def _state_key(self, tag: bytes) -> bytes:
        return self._prefix + tag

    def _log_key(self, index: int) -> bytes:
        return self._prefix + _INDEX.pack(index)

    # The Storage protocol (core.raft.storage).

    def initial_state(self) -> tuple[HardState, Snapshot]:
        return self._hard_state, self._snapshot

    @property
    def hard_state(self) -> HardState:
        return self._hard_state

    def first_index(self) -> int:
        return self._offset + 1

    def last_index(self) -> int:
        return self._last

    def term(self, index: int) -> int:
        if index == self._offset:
            return self._offset_term
        if index < self._offset:
            raise Compacted(index)
        assert index <= self._last, f"term of {index} beyond the last index {self._last}"
        if self._tail and index >= self._tail[0].index:
            return self._tail[index - self._tail[0].index].term
        value = self.store.get(Family.RAFT_LOG, self._log_key(index))
        if value is None:
            raise DataCorruption(f"Raft group {self.group!r} lacks log entry {index}")
        term: int = _ENTRY_HEADER.unpack_from(value)[0]
        return term

    def entries(self, low: int, high: int) -> list[Entry]:
        if low < self.first_index():
            raise Compacted(low)
        assert low <= high <= self._last + 1, f"entries [{low}, {high}) beyond {self._last}"
        found: list[Entry] = []
        tail_first = self._tail[0].index if self._tail else self._last + 1
        if low < tail_first:
            found = self._read(low, min(high, tail_first))
        if high > tail_first:
            found.extend(self._tail[max(low, tail_first) - tail_first : high - tail_first])
        return found

    def _read(self, low: int, high: int) -> list[Entry]:
        found: list[Entry] = []
        for key, value in self.store.walk(
            Family.RAFT_LOG, self._log_key(low), self._log_key(high), forward=True
        ):
            index = _INDEX.unpack(key[len(self._prefix) :])[0]
            if index != low + len(found):
                break
            found.append(decode_entry(index, value))
        if len(found) != high - low:
            raise DataCorruption(
                f"Raft group {self.group!r} lacks log entry {low + len(found)} of [{low}, {high})"
            )
        return found

    def snapshot(self) -> Snapshot:
        return self._snapshot

    def membership(self) -> tuple[int, ConfState]:
        if self._membership is None or self._membership[0] < self._snapshot.index:
            return self._snapshot.index, self._snapshot.conf
        return self._membership

    # Writes, into the round's batch.

    def set_membership(self, batch: WriteBatchView, index: int, conf: ConfState) -> None:
        """The membership entry at `index` is applied (its effect is in this batch): a restart
        adopts it without reading the log before it."""
        value = _MEMBERSHIP_HEADER.pack(index) + encode_conf(conf)
        batch.put(Family.RAFT_STATE, self._state_key(_MEMBERSHIP), value)
        self._membership = (index, conf)

    def set_hard_state(self, batch: WriteBatchView, hard_state: HardState) -> None:
        batch.put(
            Family.RAFT_STATE,
            self._state_key(_HARD_STATE),
            _HARD_STATE_VALUE.pack(hard_state.term, hard_state.vote, hard_state.commit),
        )
        self._hard_state = hard_state

    def append(self, batch: WriteBatchView, entries: Sequence[Entry]) -> None:
        """Persist entries; those from the first one's index on replace what was stored there."""
        if not entries:
            return
        first = entries[0].index
        assert first <= self._last + 1, f"a gap in the log: {first} after {self._last}"
        # Entries the compaction point already covers were applied and are dropped.
        skip = max(0, self.first_index() - first)
        if skip >= len(entries):
            return
        kept = entries[skip:]
        first = kept[0].index
        new_last = kept[-1].index
        for entry in kept:
            encoded = encode_entry(entry)
            batch.put(Family.RAFT_LOG, self._log_key(entry.index), encoded)
            self.appended_bytes += len(encoded)
        if new_last < self._last:
            # A conflicting tail longer than the new entries: what is after them goes too.
            batch.delete_range(
                Family.RAFT_LOG, self._log_key(new_last + 1), self._log_key(self._last + 1)
            )
        tail_first = self._tail[0].index if self._tail else self._last + 1
        if first >= tail_first:
            self._tail = self._tail[: first - tail_first] + list(kept)
        else:
            self._tail = list(kept)
        self._last = new_last

    def apply_snapshot(self, batch: WriteBatchView, snapshot: Snapshot) -> None:
        """Replace the whole log by a snapshot received from the leader."""
        assert snapshot.index >= self._snapshot.index, "an older snapshot"
        if self._last > self._offset:
            batch.delete_range(
                Family.RAFT_LOG, self._log_key(self._offset + 1), self._log_key(self._last + 1)
            )
        self._set_snapshot(batch, snapshot)
        self._set_truncated(batch, snapshot.index, snapshot.term)
        self._last = snapshot.index
        self._tail = []

    def set_installing(self, batch: WriteBatchView, record: bytes | None) -> None:
        """Record (or, None, end) a copy of the member's state from another member's."""
        key = self._state_key(_INSTALLING)
        if record is None:
            batch.delete(Family.RAFT_STATE, key)
        else:
            batch.put(Family.RAFT_STATE, key, record)
        self.installing = record

    def set_serve_from(self, batch: WriteBatchView, index: int) -> None:
        """The state is whole once applied to `index`: before, it is a copy being caught up."""
        batch.put(Family.RAFT_STATE, self._state_key(_SERVE_FROM), _INDEX.pack(index))
        self.serve_from = index

    def restore(self, batch: WriteBatchView, snapshot: Snapshot, hard_state: HardState) -> None:
        """Start the log again after `snapshot`, whose state the application has installed
        (the entries kept go; the state machine is applied to the snapshot's index)."""
        self.apply_snapshot(batch, snapshot)
        self.set_hard_state(batch, hard_state)
        self.set_applied(batch, snapshot.index)
        self.set_membership(batch, snapshot.index, snapshot.conf)

    def create_snapshot(
        self, batch: WriteBatchView, index: int, conf: ConfState, data: bytes
    ) -> Snapshot:
        """Record the application's snapshot at `index` (applied, so in the stored log)."""
        assert self._snapshot.index < index <= self._last
        snapshot = Snapshot(index=index, term=self.term(index), conf=conf, data=data)
        self._set_snapshot(batch, snapshot)
        return snapshot

    def compact(self, batch: WriteBatchView, index: int) -> None:
        """Drop the entries up to `index`, which the latest snapshot covers."""
        assert index <= self._snapshot.index, "compacting past the snapshot"
        if index <= self._offset:
            return
        term = self.term(index)
        batch.delete_range(
            Family.RAFT_LOG, self._log_key(self._offset + 1), self._log_key(index + 1)
        )
        self._set_truncated(batch, index, term)
        self.appended_bytes = 0
        if self._tail and self._tail[0].index <= index:
            self._tail = self._tail[index + 1 - self._tail[0].index :]

    def set_applied(self, batch: WriteBatchView, index: int) -> None:
        """The state machine's writes up to `index` are in this batch: recovery resumes there."""
        batch.put(Family.RAFT_STATE, self._state_key(_APPLIED), _INDEX.pack(index))
        self.applied = index

    def destroy(self, batch: WriteBatchView) -> None:
        """Delete the group's log and state (its member left this node)."""
        end = self._prefix + b"\xff" * (RAFT_INDEX_BYTES + 1)
        batch.delete_range(Family.RAFT_LOG, self._prefix, end)
        batch.delete_range(Family.RAFT_STATE, self._prefix, end)
        self._tail = []

    def persisted(self) -> None:
        """The batch holding this storage's writes has committed: the cache may shrink again."""
        excess = len(self._tail) - limits.RAFT_LOG_CACHE_ENTRIES
        if excess > 0:
            del self._tail[:excess]

    def _set_snapshot(self, batch: WriteBatchView, snapshot: Snapshot) -> None:
        batch.put(Family.RAFT_STATE, self._state_key(_SNAPSHOT), _encode_snapshot(snapshot))
        self._snapshot = snapshot

    def _set_truncated(self, batch: WriteBatchView, index: int, term: int) -> None:
        batch.put(Family.RAFT_STATE, self._state_key(_TRUNCATED), _POSITION.pack(index, term))
        self._offset, self._offset_term = index, term
