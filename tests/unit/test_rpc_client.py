"""NodeClient against in-process gRPC servers: a real node on a temporary store, and scripted fakes.

The fakes make the stream's failure modes deterministic: a node that never answers, one that
breaks the stream, one that records how requests were batched.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from core import limits
from core.errors import (
    ConditionalCheckFailed,
    OutcomeUnknown,
    ResourceInUse,
    ServiceUnavailable,
    StaleEpoch,
    UnknownOperation,
    ValidationError,
)
from rpc import codec, node_pb2, node_pb2_grpc, ops
from rpc.client import NodeClient
from rpc.ops import Target
from storagenode.server import NodeServer
from tests import envelope

TABLE = {"id": "e5" * 16, "name": "T", "key_schema": {"hash": ["pk", "S"], "range": None}}
PARTITION = {"id": "p0", "start": "", "end": None, "epoch": 1, "node": "n1"}
TIMEOUT_SECONDS = 5.0


def data(**body: Any) -> dict[str, Any]:
    return {"table_id": TABLE["id"], "partition_id": "p0", "epoch": 1, **body}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[NodeServer]:
    server = NodeServer("test-node", "127.0.0.1:0", tmp_path / "node")
    await server.start()
    yield server
    await server.stop(grace=1.0)


@pytest.fixture
async def client(node: NodeServer) -> AsyncIterator[NodeClient]:
    client = NodeClient(node.address)
    await client.control(
        ops.CREATE_PARTITION, {"table": TABLE, "partition": PARTITION}, TIMEOUT_SECONDS
    )
    yield client
    await client.close()


async def test_data_and_control_calls_round_trip(client: NodeClient) -> None:
    item = {"pk": {"S": "a"}, "v": {"N": "1"}}
    put = await envelope.call(client, ops.PUT, data(item=item), TIMEOUT_SECONDS)
    assert put["attributes"] is None and put["new_bytes"] > 0
    got = await envelope.call(client, ops.GET, data(key={"pk": {"S": "a"}}), TIMEOUT_SECONDS)
    assert got["item"] == item
    stats = await client.control(ops.TABLE_STATS, {"table_id": TABLE["id"]}, TIMEOUT_SECONDS)
    assert stats["partitions"]["p0"]["items"] == 1
    throughput = await client.control(ops.PARTITION_THROUGHPUT, {}, TIMEOUT_SECONDS)
    assert set(throughput) == {
        "enforced",
        "burst_seconds",
        "partitions",
        "splits",
        "moves",
        "moving",
        "replicas",
        "raft",
    }
    # A partition of one copy has no replicated group to report.
    assert throughput["replicas"] == [] and throughput["raft"]["groups"] == 0


async def test_node_errors_come_back_typed(client: NodeClient) -> None:
    with pytest.raises(StaleEpoch):
        await envelope.call(client, ops.GET, data(key={"pk": {"S": "a"}}, epoch=9), TIMEOUT_SECONDS)
    with pytest.raises(ValidationError, match="Missing the key pk"):
        await envelope.call(client, ops.PUT, data(item={"x": {"S": "a"}}), TIMEOUT_SECONDS)
    with pytest.raises(UnknownOperation):
        await client.call("frobnicate", scripted("frobnicate"), {}, TIMEOUT_SECONDS)
    moved = {**PARTITION, "end": "80"}  # The same partition id with another range.
    with pytest.raises(ResourceInUse):
        await client.control(
            ops.CREATE_PARTITION, {"table": TABLE, "partition": moved}, TIMEOUT_SECONDS
        )
    item = {"pk": {"S": "a"}, "v": {"N": "1"}}
    guarded = data(condition="attribute_not_exists(pk)", return_on_failure=True)
    await envelope.call(client, ops.PUT, {**guarded, "item": item}, TIMEOUT_SECONDS)
    with pytest.raises(ConditionalCheckFailed) as failure:
        await envelope.call(client, ops.PUT, {**guarded, "item": item}, TIMEOUT_SECONDS)
    assert failure.value.item == item


async def test_many_concurrent_writes_are_all_acknowledged(client: NodeClient) -> None:
    count = 500
    replies = await asyncio.gather(
        *(
            envelope.call(client, ops.PUT, data(item={"pk": {"S": f"k{i}"}}), TIMEOUT_SECONDS)
            for i in range(count)
        )
    )
    assert all(reply["new_bytes"] > 0 for reply in replies)
    stats = await client.control(ops.TABLE_STATS, {"table_id": TABLE["id"]}, TIMEOUT_SECONDS)
    partition = stats["partitions"]["p0"]
    assert (partition["items"], partition["bytes"], partition["last_seq"]) == (
        count,
        sum(r["new_bytes"] for r in replies),
        count,
    )
    assert (partition["first_seq"], partition["log_bytes"] > 0) == (1, True)


async def test_a_dead_node_fails_fast(tmp_path: Path) -> None:
    client = NodeClient(f"127.0.0.1:{free_port()}")
    started = time.monotonic()
    with pytest.raises(ServiceUnavailable):
        await envelope.call(client, ops.GET, data(key={"pk": {"S": "a"}}), TIMEOUT_SECONDS)
    with pytest.raises(ServiceUnavailable):
        await client.control(ops.TABLE_STATS, {"table_id": TABLE["id"]}, TIMEOUT_SECONDS)
    assert time.monotonic() - started < TIMEOUT_SECONDS / 2
    await client.close()


async def test_calls_to_a_node_that_stays_down_wait_at_most_one_short_backoff() -> None:
    """However long a node stays down, its backoff stays short: each call waits at most one
    RPC_RECONNECT_BACKOFF_SECONDS_MAX for the next connection attempt, then fails as not sent."""
    client = NodeClient(f"127.0.0.1:{free_port()}")
    try:
        for _ in range(8):  # Past the doublings: the backoff has reached its maximum.
            with pytest.raises(ServiceUnavailable):
                await envelope.call(client, ops.GET, data(key={"pk": {"S": "a"}}), TIMEOUT_SECONDS)
        loop = asyncio.get_running_loop()
        assert client._reconnect_at - loop.time() <= limits.RPC_RECONNECT_BACKOFF_SECONDS_MAX
    finally:
        await client.close()


async def test_the_client_reconnects_to_a_restarted_node(tmp_path: Path) -> None:
    first = NodeServer("n", "127.0.0.1:0", tmp_path / "node")
    address = await first.start()
    client = NodeClient(address)
    await client.control(
        ops.CREATE_PARTITION, {"table": TABLE, "partition": PARTITION}, TIMEOUT_SECONDS
    )
    await envelope.call(client, ops.PUT, data(item={"pk": {"S": "a"}}), TIMEOUT_SECONDS)
    await first.stop(grace=0.5)
    with pytest.raises(ServiceUnavailable):
        await envelope.call(client, ops.GET, data(key={"pk": {"S": "a"}}), TIMEOUT_SECONDS)
    second = NodeServer("n", address, tmp_path / "node")
    await second.start()
    try:
        got = await envelope.call(client, ops.GET, data(key={"pk": {"S": "a"}}), TIMEOUT_SECONDS)
        assert got["item"] == {"pk": {"S": "a"}}
    finally:
        await client.close()
        await second.stop(grace=0.5)


# Scripted fake nodes ---------------------------------------------------------------------------


def scripted(name: str) -> Target:
    """The target of a scripted op: its name as the table id, for the fake node to read."""
    return Target(name, "p")


class FakeNode(node_pb2_grpc.StorageNodeServicer):  # type: ignore[misc]
    """Echoes each request's body back, except ops named "silent" (never answered) and "break"
    (aborts the whole stream); records the size of every RequestBatch received and the deadline
    of every request. Scripted ops are
    not in the proto's Op enum, so their name travels as the target's table id."""

    def __init__(self) -> None:
        self.batch_sizes: list[int] = []
        self.deadlines: list[float] = []
        self.release = asyncio.Event()

    async def Exchange(self, request_iterator: Any, context: Any) -> None:
        async for batch in request_iterator:
            self.batch_sizes.append(len(batch.requests))
            self.deadlines.extend(request.deadline for request in batch.requests)
            if any(request.table_id == "break" for request in batch.requests):
                await context.abort(grpc.StatusCode.INTERNAL, "scripted break")
            if any(request.table_id == "slow" for request in batch.requests):
                await asyncio.wait_for(self.release.wait(), TIMEOUT_SECONDS)
            answers = [
                codec.ok_response(request.id, codec.decode_body(request.body))
                for request in batch.requests
                if request.table_id != "silent"
            ]
            await context.write(node_pb2.ResponseBatch(responses=answers))

    async def Call(self, request: Any, context: Any) -> Any:
        """A control call held until `release`, then echoed."""
        await asyncio.wait_for(self.release.wait(), TIMEOUT_SECONDS)
        return codec.ok_response(request.id, codec.decode_body(request.body))


@pytest.fixture
async def fake() -> AsyncIterator[tuple[FakeNode, NodeClient]]:
    servicer = FakeNode()
    server = grpc.aio.server()
    node_pb2_grpc.add_StorageNodeServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    client = NodeClient(f"127.0.0.1:{port}")
    yield servicer, client
    await client.close()
    await server.stop(grace=0.5)


async def test_requests_arriving_during_a_send_are_coalesced(
    fake: tuple[FakeNode, NodeClient],
) -> None:
    servicer, client = fake
    slow = asyncio.create_task(client.call("slow", scripted("slow"), {"n": -1}, TIMEOUT_SECONDS))
    while not servicer.batch_sizes:
        await asyncio.sleep(0.01)
    calls = [client.call("echo", scripted("echo"), {"n": i}, TIMEOUT_SECONDS) for i in range(100)]
    gathered = asyncio.gather(*calls)
    await asyncio.sleep(0.1)
    servicer.release.set()
    replies = await gathered
    assert [reply["n"] for reply in replies] == list(range(100))
    assert (await slow) == {"n": -1}
    # The first batch held the slow call; the other hundred did not go out one by one.
    assert sum(servicer.batch_sizes) == 101 and len(servicer.batch_sizes) <= 3


async def test_an_unanswered_call_times_out_without_hurting_the_others(
    fake: tuple[FakeNode, NodeClient],
) -> None:
    _, client = fake
    started = time.monotonic()
    with pytest.raises(ServiceUnavailable, match=r"did not answer silent within 0\.2"):
        await client.call("silent", scripted("silent"), {}, 0.2)
    # The caller waits past the deadline it sent for the grace the node's clock is allowed.
    waited = time.monotonic() - started
    assert (
        0.2 + limits.RPC_DEADLINE_GRACE_SECONDS <= waited < 1.2 + limits.RPC_DEADLINE_GRACE_SECONDS
    )
    assert await client.call("echo", scripted("echo"), {"ok": True}, TIMEOUT_SECONDS) == {
        "ok": True
    }


async def test_a_broken_stream_fails_its_calls_and_the_next_call_reconnects(
    fake: tuple[FakeNode, NodeClient],
) -> None:
    _, client = fake
    waiting = asyncio.create_task(client.call("silent", scripted("silent"), {}, TIMEOUT_SECONDS))
    await asyncio.sleep(0.05)
    with pytest.raises(ServiceUnavailable, match="scripted break"):
        await client.call("break", scripted("break"), {}, TIMEOUT_SECONDS)
    with pytest.raises(ServiceUnavailable):
        await waiting
    assert await client.call("echo", scripted("echo"), {"again": 1}, TIMEOUT_SECONDS) == {
        "again": 1
    }


async def test_a_closed_client_refuses_calls(fake: tuple[FakeNode, NodeClient]) -> None:
    _, client = fake
    pending = asyncio.create_task(client.call("silent", scripted("silent"), {}, TIMEOUT_SECONDS))
    await asyncio.sleep(0.05)
    await client.close()
    with pytest.raises(ServiceUnavailable):
        await pending
    with pytest.raises(ServiceUnavailable):
        await client.call("echo", scripted("echo"), {}, TIMEOUT_SECONDS)


async def test_a_node_refuses_a_taken_port(node: NodeServer, tmp_path: Path) -> None:
    second = NodeServer("other", node.address, tmp_path / "other")
    with pytest.raises(OSError, match="Cannot listen"):
        await second.start()


async def test_every_request_carries_its_deadline_as_unix_time(
    fake: tuple[FakeNode, NodeClient],
) -> None:
    servicer, client = fake
    before = time.time()
    await client.call("echo", scripted("echo"), {}, 3.0)
    (deadline,) = servicer.deadlines
    assert before + 3.0 <= deadline <= time.time() + 3.0


async def test_an_unanswered_write_has_an_unknown_outcome_and_a_read_is_unavailable(
    fake: tuple[FakeNode, NodeClient],
) -> None:
    _, client = fake
    with pytest.raises(OutcomeUnknown, match="may or may not have been applied"):
        await client.call(ops.PUT, scripted("silent"), {}, 0.1)
    with pytest.raises(ServiceUnavailable) as read:
        await client.call(ops.GET, scripted("silent"), {}, 0.1)
    assert not isinstance(read.value, OutcomeUnknown)


async def test_a_write_in_flight_on_a_broken_stream_has_an_unknown_outcome(
    fake: tuple[FakeNode, NodeClient],
) -> None:
    _, client = fake
    waiting = asyncio.create_task(client.call(ops.UPDATE, scripted("silent"), {}, TIMEOUT_SECONDS))
    await asyncio.sleep(0.05)
    with pytest.raises(ServiceUnavailable, match="scripted break"):
        await client.call("break", scripted("break"), {}, TIMEOUT_SECONDS)
    with pytest.raises(OutcomeUnknown):
        await waiting


async def test_a_write_that_was_never_sent_is_unavailable_not_unknown(tmp_path: Path) -> None:
    client = NodeClient(f"127.0.0.1:{free_port()}")
    try:
        with pytest.raises(ServiceUnavailable) as failure:
            await client.call(ops.PUT, scripted("echo"), {}, TIMEOUT_SECONDS)
        assert not isinstance(failure.value, OutcomeUnknown)
    finally:
        await client.close()


async def test_a_control_call_whose_channel_closes_under_it_is_unavailable(
    fake: tuple[FakeNode, NodeClient],
) -> None:
    """A broken stream closes its channel, which cancels the unary calls on it: the caller gets
    ServiceUnavailable, never a CancelledError (which would abort an HTTP handler unanswered)."""
    _, client = fake
    assert await client.call("echo", scripted("echo"), {}, TIMEOUT_SECONDS) == {}
    control = asyncio.create_task(client.control(ops.TABLE_STATS, {}, TIMEOUT_SECONDS))
    await asyncio.sleep(0.1)
    with pytest.raises(ServiceUnavailable, match="scripted break"):
        await client.call("break", scripted("break"), {}, TIMEOUT_SECONDS)
    with pytest.raises(ServiceUnavailable, match="closed"):
        await control
