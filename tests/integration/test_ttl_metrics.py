"""A storage node process's TTL metrics, scraped from its Prometheus endpoint: the deletions per
table under dynalab's name and DynamoDB's (`TimeToLiveDeletedItemCount`), and the sweeper's lag,
which survive a restart because the counters are committed with the deletes."""

from __future__ import annotations

import asyncio
import time
import urllib.request
from pathlib import Path

import pytest

from rpc import ops
from rpc.client import NodeClient
from tests import envelope
from tests.integration.test_storagenode import NodeProcess, free_port

CALL_SECONDS = 5.0
DELETED_WITHIN_SECONDS = 15.0
TABLE = {"id": "9e" * 16, "name": "Expiring", "key_schema": {"hash": ["pk", "S"], "range": None}}
PARTITION = {"id": "p0", "start": "", "end": None, "epoch": 1, "node": "it-1"}


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=CALL_SECONDS) as reply:
        return str(reply.read().decode())


def sample(text: str, name: str) -> float | None:
    """The value of `name{table="Expiring"}` in a scrape, None when absent."""
    prefix = f'{name}{{table="Expiring"}} '
    for line in text.splitlines():
        if line.startswith(prefix):
            return float(line[len(prefix) :])
    return None


async def test_a_node_reports_its_ttl_deletions_and_lag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    metrics_port = free_port()
    monkeypatch.setenv("DYNALAB_METRICS_LISTEN", f"127.0.0.1:{metrics_port}")
    monkeypatch.setenv("DYNALAB_TTL_SWEEP_SECONDS", "0.1")
    node = NodeProcess(tmp_path / "data", free_port(), tmp_path / "node.log")
    await node.start()
    client = NodeClient(node.address)
    try:
        await client.control(
            ops.CREATE_PARTITION, {"table": TABLE, "partition": PARTITION}, CALL_SECONDS
        )
        now = int(time.time())
        for key, expires in (("a", now - 30), ("b", now - 20), ("c", now - 10), ("d", now + 3600)):
            item = {"pk": {"S": key}, "exp": {"N": str(expires)}}
            body = {"table_id": TABLE["id"], "partition_id": "p0", "epoch": 1, "item": item}
            await envelope.call(client, ops.PUT, body, CALL_SECONDS)
        # TTL is still off: nothing is reported for the table.
        assert (
            sample(await asyncio.to_thread(scrape, metrics_port), "TimeToLiveDeletedItemCount")
            is None
        )
        ttl = {"attribute": "exp", "enabled": True, "version": 1}
        await client.control(ops.UPDATE_TTL, {"table_id": TABLE["id"], "ttl": ttl}, CALL_SECONDS)
        deadline = time.monotonic() + DELETED_WITHIN_SECONDS
        while True:
            text = await asyncio.to_thread(scrape, metrics_port)
            if sample(text, "dynalab_ttl_deleted_items_total") == 3:
                break
            assert time.monotonic() < deadline, text
            await asyncio.sleep(0.1)
        assert sample(text, "TimeToLiveDeletedItemCount") == 3
        assert sample(text, "dynalab_ttl_sweep_lag_seconds") == 0
        await client.close()
        assert await node.terminate() == 0
        await node.start()
        client = NodeClient(node.address)
        text = await asyncio.to_thread(scrape, metrics_port)
        assert sample(text, "TimeToLiveDeletedItemCount") == 3
    finally:
        await client.close()
        await node.kill()
