"""A real `python -m storagenode` process on loopback, driven through NodeClient.

The central check: kill -9 the node while many acknowledged writes are in flight, restart it on the
same data directory, and find every acknowledged write there. Every wait here has a deadline and
every process started is stopped at the end, whatever happens.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from core.errors import OutcomeUnknown, ServiceUnavailable
from rpc import ops
from rpc.client import NodeClient
from tests import envelope

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
START_SECONDS = 30.0
STOP_SECONDS = 10.0
CALL_SECONDS = 5.0
TABLE = {"id": "9a" * 16, "name": "T", "key_schema": {"hash": ["pk", "S"], "range": ["sk", "N"]}}
PARTITION = {"id": "p0", "start": "", "end": None, "epoch": 1, "node": "it-1"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class NodeProcess:
    """One storage node process; `start` returns once it prints that it is listening."""

    def __init__(self, data_dir: Path, port: int, log_path: Path) -> None:
        self.data_dir = data_dir
        self.address = f"127.0.0.1:{port}"
        self.log_path = log_path
        self.process: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        with self.log_path.open("ab") as log:
            self.process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "storagenode",
                "--node-id",
                "it-1",
                "--listen",
                self.address,
                "--data-dir",
                str(self.data_dir),
                cwd=ROOT,
                env=env,
                stdout=asyncio.subprocess.PIPE,
                stderr=log,
            )
        assert self.process.stdout is not None
        line = await asyncio.wait_for(self.process.stdout.readline(), START_SECONDS)
        assert f"listening on {self.address}" in line.decode(), self.log_path.read_text()

    async def kill(self) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.kill()
            await asyncio.wait_for(self.process.wait(), STOP_SECONDS)

    async def terminate(self) -> int:
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        return await asyncio.wait_for(self.process.wait(), STOP_SECONDS)


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[NodeProcess]:
    process = NodeProcess(tmp_path / "data", free_port(), tmp_path / "node.log")
    await process.start()
    try:
        yield process
    finally:
        await process.kill()


async def setup_table(client: NodeClient) -> None:
    await client.control(
        ops.CREATE_PARTITION, {"table": TABLE, "partition": PARTITION}, CALL_SECONDS
    )


def key(writer: int, n: int) -> dict[str, Any]:
    return {"pk": {"S": f"w{writer}"}, "sk": {"N": str(n)}}


def body(**fields: Any) -> dict[str, Any]:
    return {"table_id": TABLE["id"], "partition_id": "p0", "epoch": 1, **fields}


async def test_health_is_serving(node: NodeProcess) -> None:
    async with grpc.aio.insecure_channel(node.address) as channel:
        reply = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service="dynalab.rpc.StorageNode"), timeout=CALL_SECONDS
        )
    assert reply.status == health_pb2.HealthCheckResponse.SERVING


async def test_acknowledged_writes_survive_kill_9(node: NodeProcess) -> None:
    client = NodeClient(node.address)
    await setup_table(client)
    acknowledged: dict[int, list[int]] = {writer: [] for writer in range(32)}
    killed = asyncio.Event()

    async def writer(number: int) -> None:
        n = 0
        while True:
            item = {**key(number, n), "payload": {"S": "x" * 100}}
            try:
                await envelope.call(client, ops.PUT, body(item=item), CALL_SECONDS)
            except (ServiceUnavailable, OutcomeUnknown):
                # In flight at the kill: OutcomeUnknown; sent after it: ServiceUnavailable.
                assert killed.is_set(), "a write failed before the node was killed"
                return
            acknowledged[number].append(n)
            n += 1

    writers = [asyncio.create_task(writer(number)) for number in range(32)]
    deadline = time.monotonic() + START_SECONDS
    while sum(map(len, acknowledged.values())) < 2000:
        assert time.monotonic() < deadline, "the node acknowledged too few writes"
        await asyncio.sleep(0.01)
    killed.set()
    await node.kill()
    await asyncio.wait_for(asyncio.gather(*writers), CALL_SECONDS * 2)
    total = sum(map(len, acknowledged.values()))

    # A dead node fails calls fast instead of letting them wait out their deadline.
    started = time.monotonic()
    with pytest.raises(ServiceUnavailable):
        await envelope.call(client, ops.GET, body(key=key(0, 0)), CALL_SECONDS)
    assert time.monotonic() - started < 1.0

    await node.start()
    for number, written in acknowledged.items():
        reply = await envelope.call(
            client, ops.QUERY, body(hash_value={"S": f"w{number}"}, limit=None), CALL_SECONDS
        )
        stored = [int(item["sk"]["N"]) for item in reply["items"]]
        # Every acknowledged write is there; at most the writes in flight at the kill may be too.
        assert stored[: len(written)] == written
        assert len(stored) - len(written) <= 1
    stats = await client.control(ops.TABLE_STATS, {"table_id": TABLE["id"]}, CALL_SECONDS)
    assert stats["partitions"]["p0"]["items"] >= total
    assert stats["partitions"]["p0"]["last_seq"] == stats["partitions"]["p0"]["items"]
    await client.close()


async def test_sigterm_stops_gracefully_and_keeps_the_data(node: NodeProcess) -> None:
    client = NodeClient(node.address)
    await setup_table(client)
    await envelope.call(client, ops.PUT, body(item=key(1, 1)), CALL_SECONDS)
    assert await node.terminate() == 0
    assert "stopped" in node.log_path.read_text()
    await node.start()
    assert (await envelope.call(client, ops.GET, body(key=key(1, 1)), CALL_SECONDS))["item"] == key(
        1, 1
    )
    await client.close()
