"""A cluster whose table partitions are replicated on three nodes (real processes, the Raft
transport over gRPC, boto3): writes go on through kill -9 of each node in turn, no acknowledged
write is lost and no write refused as not applied is there; a paused old leader serves no stale
strong read when it resumes; a restarted node catches up from its peers."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import subprocess
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from botocore.exceptions import ClientError
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console

from core.errors import NotPartitionLeader, ServiceUnavailable
from core.keycodec import successor
from dynalab import status
from dynalab.cluster import LocalCluster
from rpc import ops
from rpc.client import NodeClient
from rpc.ops import Target
from storagenode.layout import Family
from storagenode.store import Store
from tests.integration.conftest import create_active_table, dynamodb_client, wait_active

WRITERS = 4
# Writes to a partition whose leader died resume within an election (1-1.5 s here) plus the
# router's retries; a request waits for that within its own deadline.
RECOVERY_SECONDS_MAX = 10.0
HTTP_TIMEOUT_S = 30.0
BROWSER_TIMEOUT_S = 90.0
# Headless, and time enough in the page for its first fetch of /admin/cluster and its drawing.
BROWSER_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=6000")


def plain_item(key: str, number: int) -> dict[str, Any]:
    return {"pk": {"S": key}, "n": {"N": str(number)}}


class Writers:
    """Threads putting distinct keys through the routers' clients, recording each outcome and
    when; `item` makes the item of a writer's i-th key (from 0) from the key and i."""

    def __init__(
        self,
        clients: list[Any],
        table: str,
        item: Callable[[str, int], dict[str, Any]] = plain_item,
    ) -> None:
        self.clients = clients
        self.table = table
        self.item = item
        self.outcomes: dict[str, str] = {}
        self.times: list[tuple[float, bool]] = []
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._write, args=(number,), daemon=True)
            for number in range(WRITERS)
        ]

    def _write(self, number: int) -> None:
        client = self.clients[number % len(self.clients)]
        i = 0
        while not self._stop.is_set():
            key = f"w{number}-{i}"
            item = self.item(key, i)
            i += 1
            started = time.monotonic()
            try:
                client.put_item(TableName=self.table, Item=item)
                self.outcomes[key] = "acknowledged"
                self.times.append((started, True))
            except ClientError as error:
                code = error.response["Error"]["Code"]
                # InternalServerError: the write was sent and no answer came (its node died): it
                # may or may not apply. Anything else is a refusal: it must not apply.
                self.outcomes[key] = "unknown" if code == "InternalServerError" else "refused"
                self.times.append((started, False))

    def __enter__(self) -> Writers:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=30)

    def acknowledged_since(self, moment: float) -> int:
        return sum(1 for started, ok in self.times if ok and started >= moment)


def kill_under_writes(writers: Writers, node: Any) -> None:
    """SIGKILL `node` while `writers` write, and wait until writes are acknowledged again (the
    dead node's partitions led elsewhere), within RECOVERY_SECONDS_MAX."""
    killed_at = time.monotonic()
    node.kill()
    deadline = killed_at + RECOVERY_SECONDS_MAX
    while writers.acknowledged_since(killed_at + 0.1) < 20:
        assert time.monotonic() < deadline, f"writes stalled after {node.name} died"
        time.sleep(0.05)


def stored(client: Any, table: str, keys: list[str]) -> set[str]:
    present = set()
    for start in range(0, len(keys), 100):
        chunk = keys[start : start + 100]
        request = {table: {"Keys": [{"pk": {"S": key}} for key in chunk], "ConsistentRead": True}}
        while request:
            reply = client.batch_get_item(RequestItems=request)
            present.update(item["pk"]["S"] for item in reply["Responses"].get(table, []))
            request = reply.get("UnprocessedKeys") or {}
    return present


def test_writes_survive_kill_9_of_each_node_in_turn(tmp_path: Path) -> None:
    with LocalCluster(
        tmp_path / "cluster", nodes=3, routers=2, replicators=0, replication_factor=3
    ) as cluster:
        clients = [dynamodb_client(url) for url in cluster.router_urls]
        table = create_active_table(clients[0], "Replicated")
        with Writers(clients, table) as writers:
            time.sleep(2)
            for node in cluster.nodes:
                before = writers.acknowledged_since(0)
                # The writes go on, the killed node's partitions led elsewhere within an election.
                kill_under_writes(writers, node)
                assert writers.acknowledged_since(0) > before
                node.start()
                time.sleep(1)
        outcomes = dict(writers.outcomes)
        acknowledged = [key for key, outcome in outcomes.items() if outcome == "acknowledged"]
        refused = [key for key, outcome in outcomes.items() if outcome == "refused"]
        assert len(acknowledged) > 100
        present = stored(clients[0], table, list(outcomes))
        assert set(acknowledged) <= present, "acknowledged writes lost"
        assert not set(refused) & present, "writes refused as not applied were applied"
        # Every node, the restarted ones too, serves every acknowledged write: each is asked
        # alone (eventually consistent reads go to the replicas in turn).
        time.sleep(1)
        scanned = {
            item["pk"]["S"]
            for page in clients[1].get_paginator("scan").paginate(TableName=table)
            for item in page["Items"]
        }
        assert set(acknowledged) <= scanned


async def _leader(clients: dict[str, NodeClient], target: Target, key: dict[str, Any]) -> str:
    """The node that answers a strongly consistent read of the partition: its leader."""
    deadline = time.monotonic() + RECOVERY_SECONDS_MAX
    while True:
        for name, client in clients.items():
            try:
                await client.call(ops.GET, target, {"key": key}, 2.0)
                return name
            except (NotPartitionLeader, ServiceUnavailable):
                pass
        assert time.monotonic() < deadline, "no leader answers"
        await asyncio.sleep(0.2)


async def _put_anywhere(
    clients: dict[str, NodeClient], target: Target, item: dict[str, Any], skip: str
) -> None:
    deadline = time.monotonic() + RECOVERY_SECONDS_MAX
    while True:
        for name, client in clients.items():
            if name == skip:
                continue
            try:
                await client.call(ops.PUT, target, {"item": item}, 2.0)
                return
            except (NotPartitionLeader, ServiceUnavailable):
                pass
        assert time.monotonic() < deadline, "the majority elected no leader"
        await asyncio.sleep(0.2)


def test_a_paused_leader_serves_no_stale_strong_read_after_it_resumes(tmp_path: Path) -> None:
    """SIGSTOP the leader of a one-partition table past its lease; the others elect a leader
    and take a write; resumed, the old leader must never answer a strong read with the value
    from before (it asks its group first, and learns it no longer leads)."""
    with LocalCluster(
        tmp_path / "cluster", nodes=3, routers=1, replicators=0, replication_factor=3
    ) as cluster:
        client = dynamodb_client(cluster.router_url)
        table = create_active_table(client, "Paused", throughput=(1, 1))  # One partition.
        key = {"pk": {"S": "k"}}
        client.put_item(TableName=table, Item={**key, "v": {"N": "1"}})
        described = client.describe_table(TableName=table)["Table"]
        table_id = uuid.UUID(described["TableId"]).hex
        target = Target(table_id, f"{table_id}-0", 1, True)

        async def scenario() -> None:
            clients = {node.node_id: NodeClient(node.address) for node in cluster.nodes}
            try:
                leader = await _leader(clients, target, key)
                pid = cluster.node(leader).pid
                assert pid is not None
                os.kill(pid, signal.SIGSTOP)
                try:
                    await asyncio.sleep(3)  # Past its lease and an election timeout.
                    await _put_anywhere(clients, target, {**key, "v": {"N": "2"}}, leader)
                finally:
                    os.kill(pid, signal.SIGCONT)
                for _ in range(20):
                    try:
                        reply = await clients[leader].call(ops.GET, target, {"key": key}, 5.0)
                    except (NotPartitionLeader, ServiceUnavailable):
                        continue
                    assert reply["item"]["v"] == {"N": "2"}, "a stale strong read"
            finally:
                for node_client in clients.values():
                    await node_client.close()

        asyncio.run(scenario())
        got = client.get_item(TableName=table, Key=key, ConsistentRead=True)
        assert got["Item"]["v"] == {"N": "2"}
        # A transaction commits through the partitions' groups.
        client.transact_write_items(
            TransactItems=[{"Put": {"TableName": table, "Item": {"pk": {"S": "t"}}}}]
        )
        assert "Item" in client.get_item(
            TableName=table, Key={"pk": {"S": "t"}}, ConsistentRead=True
        )
        described = client.describe_table(TableName=table)["Table"]
        assert described["TableStatus"] == "ACTIVE"
        # TTL: each partition's setting at its leader, whose sweeper deletes what expired, an
        # entry of the group like any write; the item still to expire stays.
        client.update_time_to_live(
            TableName=table, TimeToLiveSpecification={"Enabled": True, "AttributeName": "expires"}
        )
        ttl = client.describe_time_to_live(TableName=table)["TimeToLiveDescription"]
        assert ttl["TimeToLiveStatus"] == "ENABLED"
        now = int(time.time())
        for i in range(5):
            expires = now - 60 if i else now + 3600
            client.put_item(
                TableName=table, Item={"pk": {"S": f"x{i}"}, "expires": {"N": str(expires)}}
            )
        deadline = time.monotonic() + REPORTED_SECONDS_MAX
        while stored(client, table, [f"x{i}" for i in range(5)]) != {"x0"}:
            assert time.monotonic() < deadline, "the expired items were not deleted"
            time.sleep(0.3)
        # A throughput change is each partition's entry at its leader: every replica's buckets
        # take it, the one paused and resumed too.
        client.update_table(
            TableName=table, ProvisionedThroughput={"ReadCapacityUnits": 3, "WriteCapacityUnits": 7}
        )
        wait_active(client, table)
        described = client.describe_table(TableName=table)["Table"]["ProvisionedThroughput"]
        assert (described["ReadCapacityUnits"], described["WriteCapacityUnits"]) == (3, 7)
        deadline = time.monotonic() + REPORTED_SECONDS_MAX
        while True:
            listed = orjson.loads(_get(f"{cluster.router_url}/admin/partitions"))["partitions"]
            rates = {
                p["node"]: (p["read"]["rate_per_second"], p["write"]["rate_per_second"])
                for p in listed
                if p["table_name"] == table
            }
            if rates == {node.node_id: (3.0, 7.0) for node in cluster.nodes}:
                break
            assert time.monotonic() < deadline, f"the replicas' buckets are {rates}"
            time.sleep(0.2)
        # Warm throughput splits the table's partitions at their leaders (each split an entry
        # of its parent's group, its children made alike on every replica), the transaction's
        # record (kept for its ClientRequestToken, which boto3 always sends) carried to a child.
        client.update_table(TableName=table, WarmThroughput={"WriteUnitsPerSecond": 6_000})
        deadline = time.monotonic() + 60
        while True:
            described = client.describe_table(TableName=table)["Table"]
            if described["WarmThroughput"]["Status"] == "ACTIVE":
                break
            assert time.monotonic() < deadline, described["WarmThroughput"]
            time.sleep(0.2)
        assert described["WarmThroughput"]["WriteUnitsPerSecond"] == 6_000
        listing = orjson.loads(_get(f"{cluster.router_urls[0]}/admin/tables/{table}/partitions"))
        serving = {p["id"] for p in listing["partitions"] if p["state"] == "SERVING"}
        assert len(serving) == 6, listing
        got = client.get_item(TableName=table, Key=key, ConsistentRead=True)
        assert got["Item"]["v"] == {"N": "2"}
        assert "Item" in client.get_item(
            TableName=table, Key={"pk": {"S": "t"}}, ConsistentRead=True
        )


def _table_rows(data_dir: Path, table_id: str) -> dict[str, list[tuple[bytes, bytes]]]:
    """A stopped node's rows of one table, by family: its replicas' state (the catalog and
    the node's own Raft state differ by node)."""
    prefix = bytes.fromhex(table_id)
    store = Store(data_dir)
    try:
        return {
            family.value: list(store.walk(family, prefix, successor(prefix), forward=True))
            for family in (Family.ITEMS, Family.CHANGE_LOG, Family.PARTITIONS)
        }
    finally:
        store.close()


REPORTED_SECONDS_MAX = 30.0  # For every replica's report to show it caught up.


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT_S) as reply:
        body: bytes = reply.read()
        return body


def _check_the_groups_are_shown(cluster: LocalCluster, table: str, table_id: str) -> None:
    """Each partition's group as /admin/tables/../partitions, /metrics, /admin/cluster, `dynalab
    status` and the dashboard show it (issue 27, observability): its three replicas, one leader,
    every follower caught up, the nodes' elections and commit times."""
    url = cluster.router_url
    deadline = time.monotonic() + REPORTED_SECONDS_MAX
    while True:
        listing = orjson.loads(_get(f"{url}/admin/tables/{table}/partitions"))
        serving = [p for p in listing["partitions"] if p["state"] == "SERVING"]
        rows = [p["replicas"] for p in serving]
        if all(
            [r["role"] for r in replicas].count("leader") == 1
            and all(r["role"] in ("leader", "follower") and r["lag"] == 0 for r in replicas)
            and len({r["applied"] for r in replicas}) == 1
            for replicas in rows
        ):
            break
        assert time.monotonic() < deadline, f"the replicas never all caught up: {rows}"
        time.sleep(0.5)
    assert len(serving) == 4
    nodes = [node.node_id for node in cluster.nodes]
    assert all(sorted(r["node"] for r in replicas) == nodes for replicas in rows)
    leaders = {
        p["id"]: next(r["node"] for r in p["replicas"] if r["role"] == "leader") for p in serving
    }

    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(_get(f"{url}/metrics").decode())
        for sample in family.samples
    }
    for partition, leader in leaders.items():
        for node in nodes:
            labels = (("node", node), ("partition", partition), ("table", table))
            assert samples["dynalab_raft_leader", labels] == (1.0 if node == leader else 0.0)
            if node != leader:
                lag = (
                    ("follower", node),
                    ("node", leader),
                    ("partition", partition),
                    ("table", table),
                )
                assert samples["dynalab_raft_follower_lag_entries", lag] == 0.0
    assert sum(samples["dynalab_raft_elections_total", (("node", n),)] for n in nodes) >= 4
    # 1,800 writes from 8 threads: at most 8 of them in each entry its leader proposed.
    commits = sum(samples["dynalab_raft_commit_seconds_count", (("node", n),)] for n in nodes)
    assert commits >= 1800 / 8

    document = orjson.loads(_get(f"{url}/admin/cluster"))
    shown = next(t for t in document["tables"] if t["id"] == table_id)
    assert {
        p["id"]: next(r["node"] for r in p["replicas"] if r["role"] == "leader")
        for p in shown["partitions"]
    } == leaders
    console = Console(record=True, width=200, color_system=None)
    assert status.run(url, console) == 0
    text = console.export_text()
    assert all(f"{leader}*" in text for leader in leaders.values()), text
    chromium = shutil.which("chromium")
    if chromium is not None:  # (Without Chromium the page goes unchecked; the rest still runs.)
        page = subprocess.run(
            [chromium, *BROWSER_FLAGS, "--dump-dom", f"{url}/dashboard"],
            capture_output=True,
            timeout=BROWSER_TIMEOUT_S,
            check=True,
            text=True,
        ).stdout
        for partition, leader in leaders.items():
            cell = re.search(rf'data-where="{re.escape(partition)}">([^<]*)<', page)
            assert cell is not None, f"no row for {partition} on the dashboard"
            assert f"{leader}*" in cell.group(1).split(), cell.group(1)


def test_a_node_behind_the_compacted_logs_copies_its_replicas_from_its_peers(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """Logs compacted every 20 entries: a node down while 1,600 writes go to its table finds
    its groups' logs cut past where it stopped, copies each partition's replica from a peer
    over gRPC (storagenode/snapshots.py), and ends with the same rows as the others; with it
    and one other node alone, every write is still read."""
    monkeypatch.setenv("DYNALAB_RAFT_LOG_COMPACT_ENTRIES", "20")
    monkeypatch.setenv("DYNALAB_RAFT_LOG_KEPT_ENTRIES", "5")
    with LocalCluster(
        tmp_path / "cluster", nodes=3, routers=1, replicators=0, replication_factor=3
    ) as cluster:
        client = dynamodb_client(cluster.router_url)
        table = create_active_table(client, "Compacted")
        table_id = uuid.UUID(client.describe_table(TableName=table)["Table"]["TableId"]).hex
        away = cluster.nodes[2]
        away.kill()
        # More entries per partition than a leader keeps in flight to a member (the transport
        # holds those for it while it is away, and it would catch up from them).
        keys = [f"k{i}" for i in range(1600)]

        def write(start: int) -> None:
            own = dynamodb_client(cluster.router_url)
            for i in range(start, len(keys), 8):
                own.put_item(TableName=table, Item={"pk": {"S": keys[i]}, "n": {"N": str(i)}})
            for key in keys[start::80]:
                own.delete_item(TableName=table, Key={"pk": {"S": key}})

        threads = [threading.Thread(target=write, args=(start,)) for start in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        away.start()
        log = cluster.log_dir / f"{away.node_id}.log"
        deadline = time.monotonic() + 60
        while log.read_text().count("copied its replica in") < 4:
            assert time.monotonic() < deadline, "the node did not copy its 4 replicas"
            time.sleep(0.2)
        _check_the_groups_are_shown(cluster, table, table_id)
        # With the copied node and one other alone, a quorum of every group remains.
        cluster.nodes[0].kill()
        kept = {key for i, key in enumerate(keys) if i % 80 >= 8}  # The others were deleted.
        assert stored(client, table, keys) == kept
        cluster.nodes[0].start()
        time.sleep(2)  # The restarted node catches up from the log (it was away briefly).
        cluster.stop()
        rows = [_table_rows(node.data_dir, table_id) for node in cluster.nodes]
        assert rows[0] == rows[1] == rows[2], "the replicas differ"
        assert len(rows[2][Family.ITEMS.value]) == len(kept)
