"""Group commit: concurrent writes share transactions; every future resolves in bounded time."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Hashable, Iterable, Sequence
from pathlib import Path
from typing import Any

import pytest

from core import limits
from core.errors import ConditionalCheckFailed, ServiceUnavailable, StaleEpoch
from rpc import ops
from storagenode.commit import GroupCommitter, Write
from storagenode.node import StorageNode, WriteRound
from storagenode.store import Store
from tests import envelope

TABLE = {"id": "f6" * 16, "name": "T", "key_schema": {"hash": ["pk", "S"], "range": None}}
PARTITION = {"id": "p0", "start": "", "end": None, "epoch": 1, "node": "n1"}
CLOSE_SECONDS = 5.0


def put(pk: str, epoch: int = 1) -> dict[str, Any]:
    return {
        "table_id": TABLE["id"],
        "partition_id": "p0",
        "epoch": epoch,
        "item": {"pk": {"S": pk}},
    }


async def test_concurrent_writes_share_few_synced_transactions(tmp_path: Path) -> None:
    store = Store(tmp_path / "node")
    node = StorageNode(store)
    committer = GroupCommitter(node)
    committer.start()
    await envelope.submit(committer, ops.CREATE_PARTITION, {"table": TABLE, "partition": PARTITION})
    writes = 2000
    futures = [
        envelope.submit(committer, ops.PUT, put(f"k{i}", epoch=1 if i % 100 else 7))
        for i in range(writes)
    ]
    results = await asyncio.gather(*futures, return_exceptions=True)
    stale = [r for r in results if isinstance(r, StaleEpoch)]
    assert len(stale) == writes // 100
    assert all(isinstance(r, dict) for r in results if not isinstance(r, StaleEpoch))
    # All 2000 were queued before the first commit finished, so they needed a handful of commits.
    assert committer.writes_committed == writes + 1
    assert committer.batches_committed <= 2 + writes // limits.WRITE_BATCH_OPS_MAX
    await committer.close(CLOSE_SECONDS)
    store.close()
    reopened = StorageNode(Store(tmp_path / "node"))
    assert reopened.partitions[TABLE["id"], "p0"].item_count == writes - len(stale)
    reopened.store.close()


class SlowBatches:
    """A write loop whose rounds block on the writer thread until released, recording their
    batches; every write settles in its round."""

    ticking = False

    def __init__(self) -> None:
        self.release = threading.Event()
        self.batches: list[int] = []

    def write_round(
        self,
        writes: Sequence[Write],
        tokens: Sequence[Hashable] | None = None,
        inbound: Iterable[Any] = (),
        ticks: int = 0,
        reads: Sequence[Any] = (),
        pages: Sequence[Any] = (),
    ) -> WriteRound:
        self.batches.append(len(writes))
        assert self.release.wait(CLOSE_SECONDS)
        return WriteRound([{"op": op} for op, *_ in writes], [], [], [], [])


async def test_writes_queued_during_a_commit_form_the_next_batch() -> None:
    apply = SlowBatches()
    committer = GroupCommitter(apply)
    committer.start()
    first = committer.submit("put", None, {})
    await asyncio.sleep(0.05)  # The first batch is now committing, holding one write.
    rest = [committer.submit("put", None, {}) for _ in range(50)]
    apply.release.set()
    assert await asyncio.gather(first, *rest) == [{"op": "put"}] * 51
    assert apply.batches == [1, 50]
    await committer.close(CLOSE_SECONDS)


async def test_a_commit_past_its_bound_fails_its_writes_as_unavailable() -> None:
    apply = SlowBatches()
    committer = GroupCommitter(apply, commit_seconds_max=0.1)
    committer.start()
    with pytest.raises(ServiceUnavailable, match="did not commit in time"):
        await committer.submit("put", None, {})
    apply.release.set()
    await committer.close(CLOSE_SECONDS)


async def test_a_full_queue_refuses_writes() -> None:
    apply = SlowBatches()
    committer = GroupCommitter(apply, batch_ops_max=1, queue_ops_max=2)
    committer.start()
    committing = committer.submit("put", None, {})
    await asyncio.sleep(0.05)
    queued = [committer.submit("put", None, {}) for _ in range(2)]
    with pytest.raises(ServiceUnavailable, match="writes queued"):
        committer.submit("put", None, {})
    apply.release.set()
    assert len(await asyncio.gather(committing, *queued)) == 3
    await committer.close(CLOSE_SECONDS)


async def test_close_commits_what_is_queued_then_refuses_writes() -> None:
    apply = SlowBatches()
    committer = GroupCommitter(apply)
    committer.start()
    futures = [committer.submit("put", None, {}) for _ in range(10)]
    apply.release.set()
    await committer.close(CLOSE_SECONDS)
    assert all(future.result() == {"op": "put"} for future in futures)
    with pytest.raises(ServiceUnavailable, match="shutting down"):
        committer.submit("put", None, {})


async def test_a_close_that_times_out_fails_the_queued_writes() -> None:
    apply = SlowBatches()
    committer = GroupCommitter(apply, batch_ops_max=1)
    committer.start()
    committing = committer.submit("put", None, {})
    await asyncio.sleep(0.05)  # The first batch is now committing, holding one write.
    queued = [committer.submit("put", None, {}) for _ in range(2)]
    # The commit is released only after close() has given up waiting, while it joins the thread.
    release = threading.Timer(0.3, apply.release.set)
    release.start()
    try:
        await committer.close(0.1)
    finally:
        release.cancel()
    for future in (committing, *queued):
        with pytest.raises(ServiceUnavailable, match="shut down"):
            future.result()


async def test_conditions_and_updates_are_atomic_under_concurrency(tmp_path: Path) -> None:
    store = Store(tmp_path / "node")
    node = StorageNode(store)
    committer = GroupCommitter(node)
    committer.start()
    await envelope.submit(committer, ops.CREATE_PARTITION, {"table": TABLE, "partition": PARTITION})
    guarded = [
        envelope.submit(
            committer, ops.PUT, {**put("once"), "condition": "attribute_not_exists(pk)"}
        )
        for _ in range(50)
    ]
    outcomes = await asyncio.gather(*guarded, return_exceptions=True)
    assert sum(isinstance(outcome, dict) for outcome in outcomes) == 1
    assert sum(isinstance(outcome, ConditionalCheckFailed) for outcome in outcomes) == 49
    increment = {
        "table_id": TABLE["id"],
        "partition_id": "p0",
        "epoch": 1,
        "key": {"pk": {"S": "counter"}},
        "update": "ADD c :one",
        "values": {":one": {"N": "1"}},
        "return_values": "UPDATED_NEW",
    }
    replies = await asyncio.gather(
        *(envelope.submit(committer, ops.UPDATE, increment) for _ in range(200))
    )
    assert sorted(int(reply["attributes"]["c"]["N"]) for reply in replies) == list(range(1, 201))
    await committer.close(CLOSE_SECONDS)
    store.close()
