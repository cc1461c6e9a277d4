"""The durable log a node reads: the `Storage` protocol, and `MemoryStorage` that tests use.

A node only reads its storage; the caller writes it, as each Ready asks (`MemoryStorage.append`,
`set_hard_state`, `apply_snapshot`), and compacts it when the application has a snapshot
(`create_snapshot` then `compact`). As in etcd, the storage keeps a "dummy" position just before
its first entry: the index and term of the last snapshot, so the term of the entry before any
stored entry is always known.
"""

from __future__ import annotations

from typing import Protocol

from core.raft.messages import ConfState, Entry, HardState, Snapshot


class Compacted(Exception):
    """The asked index is in the snapshot: its entries are no longer kept."""


class Storage(Protocol):
    def initial_state(self) -> tuple[HardState, Snapshot]:
        """The persisted hard state, and the snapshot the log starts after."""
        ...

    def first_index(self) -> int:
        """The index of the first entry still kept (the snapshot's index + 1)."""
        ...

    def last_index(self) -> int:
        """The index of the last persisted entry (the snapshot's index if there is none)."""
        ...

    def term(self, index: int) -> int:
        """The term of the entry at `index`, from first_index() - 1 to last_index()."""
        ...

    def entries(self, low: int, high: int) -> list[Entry]:
        """The entries in [low, high), first_index() <= low <= high <= last_index() + 1."""
        ...

    def snapshot(self) -> Snapshot:
        """The latest snapshot, which a leader sends to a follower too far behind."""
        ...

    def membership(self) -> tuple[int, ConfState]:
        """A committed index at or after the snapshot's and the membership as of it: the
        snapshot's, or the last membership entry the application applied, which it records as
        it applies them (as etcd's applications record their ConfState). A node that starts
        reads only the committed entries after that index for later changes."""
        ...


class MemoryStorage:
    """A `Storage` in memory. In the simulator it plays the node's disk: it survives a crash, the
    node object does not."""

    def __init__(self, conf: ConfState) -> None:
        self.hard_state = HardState()
        self._snapshot = Snapshot(index=0, term=0, conf=conf)
        # The dummy position: the index and term of the entry just before the first kept one.
        # It is the snapshot's until `compact` moves it (a snapshot may be taken before compacting).
        self._offset = 0
        self._offset_term = 0
        self._entries: list[Entry] = []  # _entries[i] has index _offset + 1 + i

    def initial_state(self) -> tuple[HardState, Snapshot]:
        return self.hard_state, self._snapshot

    def first_index(self) -> int:
        return self._offset + 1

    def last_index(self) -> int:
        return self._offset + len(self._entries)

    def term(self, index: int) -> int:
        if index == self._offset:
            return self._offset_term
        if index < self._offset:
            raise Compacted(index)
        assert index <= self.last_index(), f"term of {index} beyond the last index"
        return self._entries[index - self.first_index()].term

    def entries(self, low: int, high: int) -> list[Entry]:
        if low < self.first_index():
            raise Compacted(low)
        assert low <= high <= self.last_index() + 1
        first = self.first_index()
        return self._entries[low - first : high - first]

    def snapshot(self) -> Snapshot:
        return self._snapshot

    def membership(self) -> tuple[int, ConfState]:
        return self._snapshot.index, self._snapshot.conf

    def set_hard_state(self, hard_state: HardState) -> None:
        self.hard_state = hard_state

    def append(self, entries: tuple[Entry, ...] | list[Entry]) -> None:
        """Persist entries; those from the first one's index on replace what was stored there."""
        if not entries:
            return
        first = entries[0].index
        assert first <= self.last_index() + 1, "a gap in the log"
        # Entries the compaction point already covers were applied and are dropped.
        skip = max(0, self.first_index() - first)
        if skip >= len(entries):
            return
        keep = first + skip - self.first_index()
        self._entries = self._entries[:keep] + list(entries[skip:])

    def apply_snapshot(self, snapshot: Snapshot) -> None:
        """Replace the whole log by a snapshot received from the leader."""
        assert snapshot.index >= self._snapshot.index, "an older snapshot"
        self._snapshot = snapshot
        self._offset = snapshot.index
        self._offset_term = snapshot.term
        self._entries = []

    def create_snapshot(self, index: int, conf: ConfState, data: bytes) -> Snapshot:
        """Record the application's snapshot at `index` (applied, so in the stored log)."""
        assert self._snapshot.index < index <= self.last_index()
        self._snapshot = Snapshot(index=index, term=self.term(index), conf=conf, data=data)
        return self._snapshot

    def compact(self, index: int) -> None:
        """Drop the entries up to `index`, which the latest snapshot covers."""
        assert index <= self._snapshot.index, "compacting past the snapshot"
        if index <= self._offset:
            return
        self._offset_term = self.term(index)
        self._entries = self._entries[index - self._offset :]
        self._offset = index
