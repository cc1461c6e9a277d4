"""The log's bookkeeping (unstable entries over storage, persistence, compaction) against a plain
list, under any sequence of appends, truncations, persists and compactions (hypothesis)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from core.raft import ConfState, Entry, MemoryStorage
from core.raft.log import RaftLog

# One step: ("append", where the new entries start (back from the end), how many),
# ("persist",), or ("compact", how far back from what is applied).
STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(0, 4), st.integers(1, 4)),
        st.tuples(st.just("persist")),
        st.tuples(st.just("compact"), st.integers(0, 3)),
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(STEPS)
def test_the_log_reads_back_what_a_plain_list_holds(steps: list[tuple[object, ...]]) -> None:
    storage = MemoryStorage(ConfState(frozenset({1})))
    log = RaftLog(storage, committed=0, applied=0)
    model: list[Entry] = []  # model[i] has index i + 1
    term = 1
    for step in steps:
        if step[0] == "append":
            back, count = int(str(step[1])), int(str(step[2]))
            start = max(len(model) - back, log.committed) + 1  # never before the commit point
            term += 1
            entries = [Entry(index, term, data=b"x") for index in range(start, start + count)]
            log.append(entries)
            model = model[: start - 1] + entries
        elif step[0] == "persist":
            storage.append(log.unstable.entries)
            if log.unstable.entries:
                last = log.unstable.entries[-1]
                log.unstable.stable_to(last.index, last.term)
            log.commit_to(storage.last_index())
            log.applied = log.committed
        elif log.applied > storage.snapshot().index:
            at = max(storage.snapshot().index + 1, log.applied - int(str(step[1])))
            storage.create_snapshot(at, ConfState(frozenset({1})), b"")
            storage.compact(at)
        assert log.last_index() == len(model)
        first = log.first_index()
        found = log.entries(first, 10_000, 1 << 30)
        assert found == model[first - 1 :]
        for entry in model[first - 1 :]:
            assert log.term(entry.index) == entry.term
        assert log.entries(first - 1, 1, 0) is None or first == 1
