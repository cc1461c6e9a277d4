"""The ChangeFeed service against an in-process node server: follow, wake-ups, END, refusals, stop.

A real NodeServer on a temporary store and port 0, its feed read through ChangeFeedClient. Every
wait is bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from core import limits
from core.errors import (
    ChangeLogTrimmed,
    ResourceNotFound,
    ServiceUnavailable,
    StaleEpoch,
    ValidationError,
)
from rpc import ops
from rpc.changefeed import (
    Change,
    ChangeFeedClient,
    error_from_proto,
    error_to_proto,
    record_from_proto,
    record_to_proto,
)
from rpc.client import NodeClient
from storagenode.server import NodeServer
from tests import envelope

TABLE = {"id": "f6" * 16, "name": "T", "key_schema": {"hash": ["pk", "S"], "range": None}}
TIMEOUT_SECONDS = 5.0


def partition(partition_id: str) -> dict[str, Any]:
    return {"id": partition_id, "start": "", "end": None, "epoch": 1, "node": "n1"}


def put(n: int, partition_id: str = "p0") -> dict[str, Any]:
    item = {"pk": {"S": f"k{n}"}, "n": {"N": str(n)}}
    return {"table_id": TABLE["id"], "partition_id": partition_id, "epoch": 1, "item": item}


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[NodeServer]:
    server = NodeServer("feed-node", "127.0.0.1:0", tmp_path / "node")
    await server.start()
    yield server
    await server.stop(grace=1.0)


@pytest.fixture
async def clients(server: NodeServer) -> AsyncIterator[tuple[NodeClient, ChangeFeedClient]]:
    node, feed = NodeClient(server.address), ChangeFeedClient(server.address)
    for partition_id in ("p0", "p1"):
        body = {"table": TABLE, "partition": partition(partition_id)}
        await node.control(ops.CREATE_PARTITION, body, TIMEOUT_SECONDS)
    yield node, feed
    await node.close()
    await feed.close()


async def collect(feed: ChangeFeedClient, into: list[Change], **options: Any) -> None:
    changes = feed.follow(TABLE["id"], "p0", **options)
    async with contextlib.aclosing(changes):
        async for change in changes:
            into.append(change)


async def until(condition: Any, seconds: float = TIMEOUT_SECONDS) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.005)


async def test_a_follower_is_woken_by_each_commit_and_stops_at_end(
    clients: tuple[NodeClient, ChangeFeedClient],
) -> None:
    node, feed = clients
    await envelope.call(node, ops.PUT, put(1), TIMEOUT_SECONDS)
    position = await feed.register(TABLE["id"], "p0", "gsi", 0, TIMEOUT_SECONDS)
    assert (position.seq, position.first_seq, position.last_seq) == (0, 1, 1)
    seen: list[Change] = []
    follower = asyncio.create_task(collect(feed, seen, consumer="gsi"))
    await until(lambda: len(seen) == 1)
    for n in (2, 3):
        started = time.monotonic()
        await envelope.call(node, ops.PUT, put(n), TIMEOUT_SECONDS)
        await until(lambda n=n: len(seen) == n)
        # Woken by the commit, not found by the heartbeat's re-read.
        assert time.monotonic() - started < limits.CHANGE_FEED_HEARTBEAT_SECONDS / 2
    assert [(c.seq, c.kind, c.keys, c.new) for c in seen] == [
        (n, "INSERT", {"pk": {"S": f"k{n}"}}, put(n)["item"]) for n in (1, 2, 3)
    ]
    assert not any(c.by_service for c in seen)
    await node.control(
        ops.RETIRE_PARTITION,
        {"table_id": TABLE["id"], "partition_id": "p0", "epoch": 1, "children": ["a", "b"]},
        TIMEOUT_SECONDS,
    )
    await asyncio.wait_for(follower, TIMEOUT_SECONDS)  # END ends the follow.
    end = seen[-1]
    assert (end.seq, end.kind, end.children, end.by_service) == (4, "END", ("a", "b"), True)
    # The retired log stays for "gsi" until it has checkpointed END, then goes.
    again: list[Change] = []
    await asyncio.wait_for(collect(feed, again, after_seq=2), TIMEOUT_SECONDS)
    assert [c.seq for c in again] == [3, 4]
    done = await feed.checkpoint(TABLE["id"], "p0", "gsi", 4, TIMEOUT_SECONDS)
    assert (done.seq, done.first_seq, done.last_seq) == (4, 0, 0)
    with pytest.raises(StaleEpoch):
        await asyncio.wait_for(collect(feed, [], after_seq=0), TIMEOUT_SECONDS)


async def test_refusals_arrive_typed(clients: tuple[NodeClient, ChangeFeedClient]) -> None:
    _, feed = clients
    with pytest.raises(StaleEpoch):
        await feed.register(TABLE["id"], "nowhere", "c", 0, TIMEOUT_SECONDS)
    with pytest.raises(ResourceNotFound):
        await feed.checkpoint(TABLE["id"], "p0", "nobody", 0, TIMEOUT_SECONDS)
    with pytest.raises(ValidationError):  # Neither a seq nor a registered consumer.
        await asyncio.wait_for(collect(feed, [], consumer="nobody"), TIMEOUT_SECONDS)
    with pytest.raises(ValidationError):  # Past the end of the log.
        await asyncio.wait_for(collect(feed, [], after_seq=5), TIMEOUT_SECONDS)
    gone = await feed.unregister(TABLE["id"], "p0", "nobody", TIMEOUT_SECONDS)
    assert gone.unregistered is False


async def test_stopping_the_server_ends_every_follow_promptly(
    server: NodeServer, clients: tuple[NodeClient, ChangeFeedClient]
) -> None:
    _, feed = clients
    follower = asyncio.create_task(collect(feed, [], after_seq=0))
    await asyncio.sleep(0.2)  # The follow is waiting for a commit.
    started = time.monotonic()
    await server.stop(grace=1.0)
    with pytest.raises(ServiceUnavailable, match="before its end"):
        await asyncio.wait_for(follower, TIMEOUT_SECONDS)
    assert time.monotonic() - started < 1.0


def test_records_and_errors_cross_the_wire_unchanged() -> None:
    key = {"pk": {"S": "k1"}}
    records = [
        {"seq": 1, "kind": "INSERT", "keys": key, "old": None, "new": {**key, "n": {"N": "1"}}},
        {"seq": 2, "kind": "REMOVE", "keys": key, "old": {**key, "n": {"N": "1"}}, "new": None},
        {"seq": 3, "kind": "END", "keys": None, "old": None, "new": None, "by_service": True,
         "children": ["a", "b"]},
    ]  # fmt: skip
    for record in records:
        change = record_from_proto(record_to_proto(Change.from_record(record)))
        assert change == Change(
            record["seq"],
            record["kind"],
            record["keys"],
            record["old"],
            record["new"],
            record.get("by_service", False),
            tuple(record.get("children", ())),
        )
    trimmed = error_from_proto(error_to_proto(ChangeLogTrimmed("gone", first_retained_seq=7)))
    assert isinstance(trimmed, ChangeLogTrimmed)
    assert (trimmed.message, trimmed.first_retained_seq) == ("gone", 7)
    assert isinstance(error_from_proto(error_to_proto(StaleEpoch("moved"))), StaleEpoch)
