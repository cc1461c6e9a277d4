"""The replicator follower's read-ahead and background checkpoints (`gsi_replicator.replicator`
`_FeedRuns`, `_Checkpoints`), over an in-memory feed: runs merge the batches waiting, never past an
END nor past the record bound, keep seq order, and hand on a feed failure only after the batches
read before it; checkpoints skip to the latest seq and the last one is written on flush."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Any

import pytest

from core import limits
from core.errors import ServiceUnavailable
from gsi_replicator.replicator import FollowerStats, _Checkpoints, _FeedRuns
from rpc.changefeed import Change, ConsumerPosition

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
