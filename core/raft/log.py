"""A node's view of its log: what storage holds, plus what it has not yet handed out to persist.

The log is three stretches of indexes: up to `first_index() - 1` it is a snapshot; then come the
entries the storage holds; after those, the "unstable" entries (and possibly a snapshot received
from the leader) that the next Ready asks the caller to persist. `committed` is the highest index
known to be on a quorum; `applied` the highest the application has applied (never past committed).
"""

from __future__ import annotations

from core.raft.messages import NONE, Entry, Snapshot
from core.raft.storage import Compacted, Storage


class Unstable:
    """Entries (and a snapshot) accepted but not persisted yet; `offset`: the first one's index."""

    def __init__(self, offset: int) -> None:
        self.snapshot: Snapshot | None = None
        self.entries: list[Entry] = []
        self.offset = offset

    def first_index(self) -> int | None:
        return self.snapshot.index + 1 if self.snapshot is not None else None

    def last_index(self) -> int | None:
        if self.entries:
            return self.offset + len(self.entries) - 1
        return self.snapshot.index if self.snapshot is not None else None

    def term(self, index: int) -> int | None:
        if index < self.offset:
            if self.snapshot is not None and self.snapshot.index == index:
                return self.snapshot.term
            return None
        last = self.last_index()
        if last is None or index > last:
            return None
        return self.entries[index - self.offset].term

    def truncate_and_append(self, entries: list[Entry]) -> None:
        after = entries[0].index
        if after == self.offset + len(self.entries):
            self.entries.extend(entries)
        elif after <= self.offset:
            # The new entries replace everything unstable, and part of the stored log too: the
            # storage drops its conflicting suffix when they are persisted.
            self.offset = after
            self.entries = list(entries)
        else:
            self.entries = self.entries[: after - self.offset] + entries

    def stable_to(self, index: int, term: int) -> None:
        # Only if the entry persisted is still the one here: a newer leader may have replaced it
        # between ready() and advance().
        if index >= self.offset and self.term(index) == term:
            self.entries = self.entries[index + 1 - self.offset :]
            self.offset = index + 1

    def restore(self, snapshot: Snapshot) -> None:
        self.offset = snapshot.index + 1
        self.entries = []
        self.snapshot = snapshot


class RaftLog:
    def __init__(self, storage: Storage, committed: int, applied: int) -> None:
        self.storage = storage
        self.unstable = Unstable(storage.last_index() + 1)
        # `applied` is the snapshot's index at start: the application restores the snapshot's
        # state, then applies the committed entries after it again.
        self.applied = applied
        self.committed = max(committed, applied)

    def first_index(self) -> int:
        first = self.unstable.first_index()
        return first if first is not None else self.storage.first_index()

    def last_index(self) -> int:
        last = self.unstable.last_index()
        return last if last is not None else self.storage.last_index()

    def last_term(self) -> int:
        term = self.term(self.last_index())
        assert term is not None
        return term

    def term(self, index: int) -> int | None:
        """The entry's term, or None when it is compacted away or beyond the log."""
        if index < self.first_index() - 1 or index > self.last_index():
            return None
        term = self.unstable.term(index)
        if term is not None:
            return term
        try:
            return self.storage.term(index)
        except Compacted:
            return None

    def match_term(self, index: int, term: int) -> bool:
        return self.term(index) == term

    def entries(self, low: int, count_max: int, bytes_max: int | None) -> list[Entry] | None:
        """Entries from `low` on: at most `count_max`, at most `bytes_max` bytes beyond the first
        (one entry is always given, however large; None: no byte bound). None if `low` is
        compacted away."""
        if low < self.first_index():
            return None
        high = min(self.last_index() + 1, low + count_max)
        found: list[Entry] = []
        if low < self.unstable.offset:
            found.extend(self.storage.entries(low, min(high, self.unstable.offset)))
        if high > self.unstable.offset:
            start = max(low, self.unstable.offset) - self.unstable.offset
            found.extend(self.unstable.entries[start : high - self.unstable.offset])
        if bytes_max is None:
            return found
        size = 0
        for position, entry in enumerate(found):
            size += entry.size_bytes
            if position > 0 and size > bytes_max:
                return found[:position]
        return found

    def entry(self, index: int) -> Entry:
        found = self.entries(index, 1, 0)
        assert found, f"entry {index} is not in the log"
        return found[0]

    def append(self, entries: list[Entry]) -> int:
        if entries:
            assert entries[0].index > self.committed, "overwriting a committed entry"
            self.unstable.truncate_and_append(entries)
        return self.last_index()

    def find_conflict(self, entries: tuple[Entry, ...]) -> int:
        """The index of the first entry that is new or differs from the log (NONE if none)."""
        for entry in entries:
            if not self.match_term(entry.index, entry.term):
                return entry.index
        return NONE

    def find_conflict_by_term(self, index: int, term: int) -> tuple[int, int]:
        """The last index at or before `index` whose entry's term is at most `term`, and that
        term: no entry after it can match a log whose entry at `index` has term `term`, so a
        leader probing there skips them all at once."""
        while index > NONE:
            found = self.term(index)
            if found is None:
                # Compacted: the snapshot's index is committed, so it matches any leader's log.
                return index, NONE
            if found <= term:
                return index, found
            index -= 1
        return NONE, NONE

    def maybe_append(
        self, prev_index: int, prev_term: int, commit: int, entries: tuple[Entry, ...]
    ) -> int | None:
        """An append from the leader: if the log matches at (prev_index, prev_term), keep what
        agrees, replace from the first conflict on, and return the last index the append covers;
        None if the log does not match there (the leader must go back further)."""
        if not self.match_term(prev_index, prev_term):
            return None
        last_new = prev_index + len(entries)
        conflict = self.find_conflict(entries)
        if conflict != NONE:
            assert conflict > self.committed, f"the leader conflicts with committed {conflict}"
            self.append(list(entries[conflict - prev_index - 1 :]))
        self.commit_to(min(commit, last_new))
        return last_new

    def is_up_to_date(self, last_index: int, last_term: int) -> bool:
        """Whether a candidate whose log ends at (last_index, last_term) has a log at least as
        up-to-date as this one (the election restriction, section 5.4.1)."""
        mine = self.last_term()
        return last_term > mine or (last_term == mine and last_index >= self.last_index())

    def commit_to(self, index: int) -> None:
        if index > self.committed:
            assert index <= self.last_index(), f"commit {index} beyond the last index"
            self.committed = index

    def next_committed_entries(self, bytes_max: int | None = None) -> list[Entry]:
        """Committed entries the application has not applied yet, at most `bytes_max` bytes
        beyond the first (None: all of them); none while a received snapshot waits to be
        installed: it comes first. The rest come in the next Readies."""
        if self.unstable.snapshot is not None or self.committed <= self.applied:
            return []
        found = self.entries(self.applied + 1, self.committed - self.applied, bytes_max)
        assert found is not None
        return found

    def restore(self, snapshot: Snapshot) -> None:
        self.committed = snapshot.index
        self.unstable.restore(snapshot)
