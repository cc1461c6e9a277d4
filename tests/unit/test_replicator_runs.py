"""The replicator follower's read-ahead and background checkpoints (`gsi_replicator.replicator`
`_FeedRuns`, `_Checkpoints`), over an in-memory feed: runs merge the batches waiting, never past an
END nor past the record bound, keep seq order, and hand on a feed failure only after the batches
read before it; checkpoints skip to the latest seq and the last one is written on flush; the
lag histograms time each change from its commit to the feed and to its index partitions."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncGenerator
from typing import Any

import pytest

from core import limits
from core.errors import InternalServerError, LeaseFenced, ServiceUnavailable
from gsi_replicator.replicator import (
    FollowerStats,
    Replicator,
    _Checkpoints,
    _FeedRuns,
    _IndexWrites,
    _LagHistograms,
)
from rpc import ops
from rpc.changefeed import Change, ConsumerPosition
from rpc.replicas import ReplicaCalls

TIMEOUT_SECONDS = 5.0


def change(seq: int, kind: str = "INSERT") -> Change:
    return Change(seq, kind, {"pk": {"S": str(seq)}}, None, {"pk": {"S": str(seq)}})


async def feed(
    batches: list[list[Change]], failure: Exception | None = None
) -> AsyncGenerator[list[Change], None]:
    for batch in batches:
        yield batch
    if failure is not None:
        raise failure


async def settled(runs: _FeedRuns, queued: int) -> None:
    """Until the reader has queued `queued` items (batches, then the end or a failure)."""
    async with asyncio.timeout(TIMEOUT_SECONDS):
        while runs._queue.qsize() < queued:
            await asyncio.sleep(0.001)


async def test_the_batches_waiting_join_one_run_in_seq_order() -> None:
    runs = _FeedRuns(feed([[change(1)], [change(2), change(3)], [change(4)]]), "t")
    await settled(runs, 4)
    run = await runs.next()
    assert run is not None and [c.seq for c in run] == [1, 2, 3, 4]
    assert await runs.next() is None
    await runs.close()


async def test_a_run_stops_at_an_end_record() -> None:
    batches = [[change(1)], [change(2), change(3, "END")], [change(4)]]
    runs = _FeedRuns(feed(batches), "t")
    await settled(runs, 4)
    first = await runs.next()
    assert first is not None and [c.seq for c in first] == [1, 2, 3]
    second = await runs.next()
    assert second is not None and [c.seq for c in second] == [4]
    await runs.close()


async def test_a_run_stops_at_the_record_bound() -> None:
    full = [change(seq) for seq in range(1, limits.CHANGE_FEED_BATCH_RECORDS_MAX + 1)]
    runs = _FeedRuns(feed([full, [change(limits.CHANGE_FEED_BATCH_RECORDS_MAX + 1)]]), "t")
    await settled(runs, 3)
    first = await runs.next()
    assert first is not None and len(first) == limits.CHANGE_FEED_BATCH_RECORDS_MAX
    second = await runs.next()
    assert second is not None and [c.seq for c in second] == [len(full) + 1]
    await runs.close()


async def test_a_feed_failure_comes_after_the_batches_read_before_it() -> None:
    failure = ServiceUnavailable("the stream broke")
    runs = _FeedRuns(feed([[change(1)], [change(2)]], failure), "t")
    await settled(runs, 3)
    run = await runs.next()
    assert run is not None and [c.seq for c in run] == [1, 2]
    with pytest.raises(ServiceUnavailable, match="the stream broke"):
        await runs.next()
    await runs.close()


class RecordingFeed:
    """Answers checkpoints after `delay` seconds and records the seqs written."""

    def __init__(self, delay: float = 0.0, failure: Exception | None = None) -> None:
        self.delay, self.failure = delay, failure
        self.written: list[int] = []

    async def checkpoint(self, *args: Any) -> ConsumerPosition:
        seq = args[3]
        await asyncio.sleep(self.delay)
        if self.failure is not None:
            raise self.failure
        self.written.append(seq)
        return ConsumerPosition(seq, 1, 100)


async def test_checkpoints_skip_to_the_latest_and_flush_writes_the_last() -> None:
    recording = RecordingFeed(delay=0.05)
    stats = FollowerStats("t", "p")
    checkpoints = _Checkpoints(recording, ("t", "p", "c"), stats, lambda: 0.0)  # type: ignore[arg-type]
    checkpoints.advance(1)
    await asyncio.sleep(0.01)  # The write of 1 is under way...
    for seq in (2, 3, 4):  # ...while these arrive: only the latest is written next.
        checkpoints.advance(seq)
    async with asyncio.timeout(TIMEOUT_SECONDS):
        while recording.written[-1:] != [4]:
            await asyncio.sleep(0.01)
    assert recording.written == [1, 4]
    checkpoints.advance(5)
    await checkpoints.flush()
    assert recording.written[-1] == 5 and stats.checkpoint == 5


async def test_a_failed_checkpoint_is_raised_to_the_follower() -> None:
    recording = RecordingFeed(failure=ServiceUnavailable("node down"))
    checkpoints = _Checkpoints(recording, ("t", "p", "c"), FollowerStats("t", "p"), lambda: 0.0)  # type: ignore[arg-type]
    checkpoints.advance(1)
    async with asyncio.timeout(TIMEOUT_SECONDS):
        while True:
            try:
                checkpoints.raise_failure()
            except ServiceUnavailable:
                break
            await asyncio.sleep(0.01)
    await checkpoints.close()


async def test_checkpoints_are_written_at_most_once_per_interval() -> None:
    recording = RecordingFeed()
    loop = asyncio.get_running_loop()
    times: list[float] = []
    stats = FollowerStats("t", "p")
    checkpoints = _Checkpoints(recording, ("t", "p", "c"), stats, lambda: 0.0)  # type: ignore[arg-type]
    async with asyncio.timeout(TIMEOUT_SECONDS):
        for seq in (1, 2, 3):
            checkpoints.advance(seq)
            while recording.written[-1:] != [seq]:
                await asyncio.sleep(0.001)
            times.append(loop.time())
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    assert all(gap >= 0.9 * limits.GSI_CHECKPOINT_INTERVAL_SECONDS for gap in gaps), gaps
    await checkpoints.close()


class IndexNodeCalls:
    """A node transport that records index_apply calls and answers them when told."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[dict[str, Any]]]] = []
        self.queues: dict[str, asyncio.Queue[dict[str, Any] | Exception]] = {}

    def answer(self, partition_id: str, answer: dict[str, Any] | Exception) -> None:
        self.queues.setdefault(partition_id, asyncio.Queue()).put_nowait(answer)

    async def call(
        self, op: str, target: ops.Target, payload: dict[str, Any], timeout: float
    ) -> dict[str, Any]:
        assert op == ops.INDEX_APPLY
        self.calls.append((target.partition_id, payload["parts"]))
        queue = self.queues.setdefault(target.partition_id, asyncio.Queue())
        answer = await queue.get()
        if isinstance(answer, Exception):
            raise answer
        return answer


def part(source: str, seq: int) -> ops.IndexApplyPart:
    return ops.IndexApplyPart(source, [{"seq": seq, "put": {"pk": {"S": str(seq)}}}], False, 1)


def applied(seq: int) -> dict[str, Any]:
    return {"applied": 1, "source_seq": seq, "new_bytes": [10], "units": 1.0}


async def test_parts_waiting_for_one_index_partition_go_in_one_call_at_a_time() -> None:
    node = IndexNodeCalls()
    writes = _IndexWrites({"n1": node}, ReplicaCalls(), lambda target: None)  # type: ignore[dict-item]
    target, other = ("i", "g0", 1, "n1"), ("i", "g1", 1, "n1")
    # Three followers' parts in one turn: one call to g0 with both of its parts, one to g1.
    first = [asyncio.ensure_future(writes.apply(target, part(s, 1))) for s in ("a-0", "b-0")]
    elsewhere = asyncio.ensure_future(writes.apply(other, part("a-0", 1)))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert [(p, [x["source"] for x in parts]) for p, parts in node.calls] == [
        ("g0", ["a-0", "b-0"]),
        ("g1", ["a-0"]),
    ]
    # While g0's call is in flight, two more parts wait for it, and go together next.
    later = [asyncio.ensure_future(writes.apply(target, part(s, 2))) for s in ("c-0", "a-0")]
    await asyncio.sleep(0)
    assert len(node.calls) == 2
    fenced = ops.part_refused(LeaseFenced("Source b-0 is leased under epoch 2 here, not 1"))
    node.answer("g0", {"parts": [applied(1), fenced], "units": 1.0})
    node.answer("g1", {"parts": [applied(1)], "units": 1.0})
    async with asyncio.timeout(TIMEOUT_SECONDS):
        assert (await first[0])["source_seq"] == 1
        with pytest.raises(LeaseFenced):  # Refused on its own: the other part applied.
            ops.part_outcome(await first[1])
        assert (await elsewhere)["applied"] == 1
        while len(node.calls) < 3:
            await asyncio.sleep(0.001)
    assert [x["source"] for x in node.calls[2][1]] == ["c-0", "a-0"]
    # A failure of the call reaches every part it carried.
    node.answer("g0", ServiceUnavailable("node down"))
    for waiting in later:
        with pytest.raises(ServiceUnavailable):
            await asyncio.wait_for(waiting, TIMEOUT_SECONDS)
    assert (writes.calls, writes.parts) == (3, 5)


async def test_a_call_is_cut_past_the_bytes_target() -> None:
    node = IndexNodeCalls()
    writes = _IndexWrites({"n1": node}, ReplicaCalls(), lambda target: None)  # type: ignore[dict-item]
    target = ("i", "g0", 1, "n1")
    text = "x" * int(0.4 * limits.GSI_INDEX_APPLY_BYTES_TARGET)
    big = [{"seq": 1, "put": {"pk": {"S": text}}}]
    parts = [ops.IndexApplyPart(s, big, False, 1) for s in ("a-0", "b-0", "c-0")]
    waiting = [asyncio.ensure_future(writes.apply(target, p)) for p in parts]
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert [len(parts) for _, parts in node.calls] == [2]  # A third would pass the target.
    node.answer("g0", {"parts": [applied(1)] * 2, "units": 2.0})
    node.answer("g0", {"parts": [applied(1)], "units": 1.0})
    async with asyncio.timeout(TIMEOUT_SECONDS):
        await asyncio.gather(*waiting)
    assert [len(parts) for _, parts in node.calls] == [2, 1]


async def test_a_reply_of_the_wrong_shape_fails_every_part_it_answers() -> None:
    node = IndexNodeCalls()
    writes = _IndexWrites({"n1": node}, ReplicaCalls(), lambda target: None)  # type: ignore[dict-item]
    target = ("i", "g0", 1, "n1")
    waiting = [asyncio.ensure_future(writes.apply(target, part(s, 1))) for s in ("a-0", "b-0")]
    await asyncio.sleep(0)
    node.answer("g0", {"parts": [applied(1)], "units": 1.0})
    for future in waiting:
        with pytest.raises(InternalServerError):
            await asyncio.wait_for(future, TIMEOUT_SECONDS)


def test_the_lag_histograms_time_each_change_from_its_commit() -> None:
    lag = _LagHistograms()
    committed = [
        Change(1, "INSERT", {"pk": {"S": "a"}}, None, None, at=100.000),
        Change(2, "INSERT", {"pk": {"S": "b"}}, None, None, at=100.002),
        Change(3, "END", None, None, None),  # No commit time: not counted.
    ]
    lag.observe(committed, received=100.004, applied=100.009)
    text = lag.text()
    assert "dynalab_gsi_feed_seconds_count 2.0" in text
    assert "dynalab_gsi_propagation_seconds_count 2.0" in text
    # Feed: 4 ms and 2 ms; applied: 9 ms and 7 ms.
    assert 'dynalab_gsi_feed_seconds_bucket{le="0.003"} 1.0' in text
    assert 'dynalab_gsi_feed_seconds_bucket{le="0.005"} 2.0' in text
    assert 'dynalab_gsi_propagation_seconds_bucket{le="0.005"} 0.0' in text
    assert 'dynalab_gsi_propagation_seconds_bucket{le="0.0075"} 1.0' in text
    assert 'dynalab_gsi_propagation_seconds_bucket{le="0.01"} 2.0' in text
    # A replicator's /metrics carries its own (several replicators share a simulated process).
    replicators = [Replicator({"n1": "addr"}, connect=lambda _: IndexNodeCalls()) for _ in "ab"]
    replicators[0].lag.observe(committed[:1], received=100.001, applied=100.002)
    assert "dynalab_gsi_propagation_seconds_count 1.0" in replicators[0].metrics()
    assert "dynalab_gsi_propagation_seconds_count 0.0" in replicators[1].metrics()
