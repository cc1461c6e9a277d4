"""storagenode.stream_retention: a node moves its stream consumers past expired and trimmed
records with no reader, on a clock the test sets (`core.streams.retention_checkpoint`, pure)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from core import limits, streams
from core.errors import DynamoError
from rpc.ops import Target
from storagenode.node import StorageNode
from storagenode.stream_retention import StreamRetention, round_seconds
from tests.unit.test_changefeed import TABLE, Feed, retire

RETENTION = 100.0
START = 1_700_000_000.0
STREAM = "stream/2023-11-14T22:13:20.000"


class ClockedFeed(Feed):
    """A feed whose node commits at `now`, which the test moves."""

    def __init__(self, path: Path, records_max: int = 1000) -> None:
        self.now = START
        super().__init__(path, records_max)

    def open_node(self) -> StorageNode:
        return StorageNode(
            self.store,
            change_log_records_max=self.records_max,
            change_log_bytes_max=self.bytes_max,
            clock=lambda: self.now,
        )

    def retention(self) -> StreamRetention:
        async def submit(op: str, target: Target, body: dict[str, Any]) -> dict[str, Any]:
            (result,) = self.node.apply_writes([(op, target, body)])
            if isinstance(result, DynamoError):
                raise result
            return dict(result)

        return StreamRetention(self.node, submit, RETENTION, clock=lambda: self.now)

    def advance(self) -> int:
        return asyncio.run(self.retention().advance())

    def checkpoint_of(self, consumer: str, partition_id: str = "p0") -> int | None:
        return self.node.consumer_checkpoint(TABLE["id"], partition_id, consumer)


@pytest.fixture
def feed(tmp_path: Path) -> Iterator[ClockedFeed]:
    f = ClockedFeed(tmp_path / "node")
    f.create()
    yield f
    f.store.close()


def change(seq: int, at: float, kind: str = "INSERT") -> dict[str, Any]:
    return {"seq": seq, "kind": kind, "at": at}


def test_retention_checkpoint_passes_expired_records_and_a_retired_logs_end() -> None:
    now = START + RETENTION
    old, fresh = START - 1, START + 1
    assert streams.retention_checkpoint(4, [], now, RETENTION) == 4
    assert streams.retention_checkpoint(4, [change(5, fresh)], now, RETENTION) == 4
    assert streams.retention_checkpoint(4, [change(5, old), change(6, fresh)], now, RETENTION) == 5
    # Every record before END expired: END too, so the node drops the retired log.
    ended = [change(5, old), change(6, old), {"seq": 7, "kind": "END"}]
    assert streams.retention_checkpoint(4, ended, now, RETENTION) == 7
    held = [change(5, old), change(6, fresh), {"seq": 7, "kind": "END"}]
    assert streams.retention_checkpoint(4, held, now, RETENTION) == 5


def test_round_is_a_quarter_of_a_short_retention() -> None:
    assert round_seconds(2.0) == 0.5
    assert round_seconds(limits.STREAM_RETENTION_SECONDS) == (
        limits.STREAM_RETENTION_ROUND_SECONDS_MAX
    )


def test_a_stream_consumer_moves_past_expired_records_with_no_reader(feed: ClockedFeed) -> None:
    feed.register(STREAM, 0)
    feed.register("gsi/replicator", 0)
    feed.put(1, 2, 3)
    feed.now = START + 50
    feed.put(4, 5)
    feed.now = START + RETENTION
    assert feed.advance() == 0  # Nothing is older than the retention yet.
    assert feed.checkpoint_of(STREAM) == 0
    feed.now = START + RETENTION + 1
    assert feed.advance() == 1
    assert feed.checkpoint_of(STREAM) == 3
    assert feed.checkpoint_of("gsi/replicator") == 0  # Only stream consumers are moved.
    feed.unregister("gsi/replicator")
    assert feed.stored_seqs() == [4, 5]  # The log now keeps what the stream still owes.
    feed.now = START + 50 + RETENTION + 1
    assert feed.advance() == 1
    assert feed.checkpoint_of(STREAM) == 5
    assert feed.stored_seqs() == []


def test_a_stream_consumer_moves_past_what_the_hard_bound_trimmed(tmp_path: Path) -> None:
    feed = ClockedFeed(tmp_path / "bounded", records_max=4)
    try:
        feed.create()
        feed.register(STREAM, 0)
        feed.put(*range(1, 8))
        assert feed.stored_seqs() == [4, 5, 6, 7]  # The newest 4, though the stream holds 0.
        assert feed.advance() == 1
        assert feed.checkpoint_of(STREAM) == 3  # TRIM_HORIZON starts at the first one kept.
        assert feed.advance() == 0
    finally:
        feed.store.close()


def test_a_retired_log_goes_once_everything_in_it_expired(feed: ClockedFeed) -> None:
    feed.register(STREAM, 0)
    feed.put(1, 2)
    retire(feed, ["p0a", "p0b"])
    assert (TABLE["id"], "p0") in feed.node.feeds.retired
    assert feed.advance() == 0
    feed.now = START + RETENTION + 1
    assert feed.advance() == 1
    assert (TABLE["id"], "p0") not in feed.node.feeds.retired
    assert feed.node.feeds.consumers((TABLE["id"], "p0")) == {}


def test_the_task_runs_rounds_until_closed(feed: ClockedFeed) -> None:
    feed.register(STREAM, 0)
    feed.put(1)
    feed.now = START + RETENTION + 1

    async def run() -> None:
        retention = feed.retention()
        retention.interval = 0.01
        retention.start()
        for _ in range(500):
            if feed.checkpoint_of(STREAM) == 1:
                break
            await asyncio.sleep(0.01)
        await asyncio.wait_for(retention.close(), 5.0)

    asyncio.run(run())
    assert feed.checkpoint_of(STREAM) == 1
