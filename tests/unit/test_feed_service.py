"""The node's side of a follow (`storagenode.feed_service.FeedService`), on a real store: a
batch that reached the log's last seq is not followed by a read that would find nothing, the
next read waits for a commit of the partition, and a log longer than a batch is read on at once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from rpc import ops
from rpc.transport import FeedPage
from storagenode.feed_service import FeedService
from storagenode.node import StorageNode
from storagenode.store import Store
from tests import envelope

T = TypeVar("T")
TABLE = {"id": "d5" * 16, "name": "Fed", "key_schema": {"hash": ["pk", "S"], "range": None}}
WAKE_SECONDS_MAX = 5.0


class Fed:
    def __init__(self, path: Path) -> None:
        self.store = Store(path)
        self.node = StorageNode(self.store)
        partition = {"id": "p0", "start": "", "end": None, "epoch": 1, "node": "n1"}
        envelope.apply(
            self.node, [(ops.CREATE_PARTITION, {"table": TABLE, "partition": partition})]
        )
        self.reads = 0
        self.service = FeedService(self.node, self._submit, self._offload)

    async def _submit(self, op: str, target: ops.Target, body: dict[str, Any]) -> dict[str, Any]:
        raise AssertionError("no consumer writes here")

    async def _offload(self, work: Callable[[], T]) -> T:
        self.reads += 1
        return work()

    def put(self, *keys: str) -> None:
        target = {"table_id": TABLE["id"], "partition_id": "p0", "epoch": 1}
        writes = [(ops.PUT, {**target, "item": {"pk": {"S": key}}}) for key in keys]
        assert all(not isinstance(r, Exception) for r in envelope.apply(self.node, writes))

    def follow(self, records_max: int = 1000) -> AsyncGenerator[FeedPage, None]:
        return self.service.follow(
            TABLE["id"], "p0", consumer="", after_seq=0, records_max=records_max, encode=lambda p: p
        )


@pytest.fixture
async def fed(tmp_path: Path) -> AsyncIterator[Fed]:
    made = Fed(tmp_path)  # Its FeedService needs the running loop.
    yield made
    made.store.close()


def seqs(page: FeedPage) -> list[int]:
    return [record.seq for record in page.records]


async def test_a_batch_at_the_log_end_waits_for_the_next_commit_without_reading(fed: Fed) -> None:
    fed.put("a", "b", "c")
    follow = fed.follow()
    assert seqs(await anext(follow)) == [1, 2, 3]
    assert fed.reads == 1
    following = asyncio.ensure_future(anext(follow))
    await asyncio.sleep(0.05)
    assert not following.done() and fed.reads == 1  # Waiting for a commit, not reading.
    fed.put("d")
    assert seqs(await asyncio.wait_for(following, WAKE_SECONDS_MAX)) == [4]
    assert fed.reads == 2
    await follow.aclose()


async def test_a_log_longer_than_a_batch_is_read_on_at_once(fed: Fed) -> None:
    fed.put("a", "b", "c", "d", "e")
    follow = fed.follow(records_max=2)
    pages = [seqs(await asyncio.wait_for(anext(follow), WAKE_SECONDS_MAX)) for _ in range(3)]
    assert pages == [[1, 2], [3, 4], [5]]
    assert fed.reads == 3
    await follow.aclose()
