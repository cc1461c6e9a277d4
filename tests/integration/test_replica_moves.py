"""Replica moves on real processes (`storagenode/replica_move.py`): four nodes, a table's
partitions on three each, logs compacted every 20 entries (so a target copies its replica from
a member over gRPC rather than replaying the log), writers putting keys through the router while
each partition's replica moves to the node that holds none of it, through the admin endpoint
(the first by its leader's replica, handed over first). Every acknowledged write is read after,
the catalog names the new replicas, and every replica holds the same items.
"""

from __future__ import annotations

import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import orjson
from botocore.exceptions import ClientError

from core.keycodec import successor
from dynalab.cluster import LocalCluster
from storagenode.layout import Family
from storagenode.store import Store
from tests.integration.conftest import create_active_table, dynamodb_client
from tests.integration.test_replication import stored

WRITERS = 4
HTTP_TIMEOUT_S = 120.0


def _json(url: str, body: dict[str, Any] | None = None) -> Any:
    data = None if body is None else orjson.dumps(body)
    request = urllib.request.Request(url, data=data, method="GET" if body is None else "POST")
    with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as reply:
        return orjson.loads(reply.read())


def _items(data_dir: Path, table_id: str, start: str, end: str | None) -> list[Any]:
    """A stopped node's items of one partition of a table."""
    prefix = bytes.fromhex(table_id)
    store = Store(data_dir)
    try:
        hi = successor(prefix) if end is None else prefix + bytes.fromhex(end)
        return list(store.walk(Family.ITEMS, prefix + bytes.fromhex(start), hi, forward=True))
    finally:
        store.close()


class Writers:
    """WRITERS threads putting distinct keys to `table` through the router until `stop`, which
    gives the keys acknowledged and those refused as invalid (none should be)."""

    def __init__(self, router_url: str, table: str) -> None:
        self.router_url = router_url
        self.table = table
        self.acknowledged: list[str] = []
        self.refused: list[str] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._write, args=(n,)) for n in range(WRITERS)]
        for thread in self._threads:
            thread.start()

    def _write(self, number: int) -> None:
        own = dynamodb_client(self.router_url)
        i = 0
        while not self._stop.is_set():
            key = f"w{number}-{i}"
            i += 1
            try:
                own.put_item(TableName=self.table, Item={"pk": {"S": key}, "n": {"N": str(i)}})
                self.acknowledged.append(key)
            except ClientError as error:
                if error.response["Error"]["Code"] == "ValidationException":
                    self.refused.append(key)

    def stop(self) -> tuple[list[str], list[str]]:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=60)
        return self.acknowledged, self.refused


def test_each_partition_moves_a_replica_under_writes(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setenv("DYNALAB_RAFT_LOG_COMPACT_ENTRIES", "20")
    monkeypatch.setenv("DYNALAB_RAFT_LOG_KEPT_ENTRIES", "5")
    with LocalCluster(
        tmp_path / "cluster", nodes=4, routers=1, replicators=0, replication_factor=3
    ) as cluster:
        client = dynamodb_client(cluster.router_url)
        table = create_active_table(client, "Moving")
        table_id = uuid.UUID(client.describe_table(TableName=table)["Table"]["TableId"]).hex
        admin = f"{cluster.router_url}/admin/tables/{table}/partitions"
        writers = Writers(cluster.router_url, table)
        time.sleep(2)
        nodes = {node.node_id for node in cluster.nodes}
        partitions = _json(admin)["partitions"]
        expected = {}
        for number, partition in enumerate(partitions):
            replicas = [row["node"] for row in partition["replicas"]]
            [target] = sorted(nodes - set(replicas))
            leader = next(row["node"] for row in partition["replicas"] if row["role"] == "leader")
            source = leader if number == 0 else next(n for n in replicas if n != leader)
            reply = _json(f"{admin}/{partition['id']}/move", {"Node": target, "From": source})
            expected[partition["id"]] = [target if n == source else n for n in replicas]
            assert reply["partition"]["replicas"] == expected[partition["id"]], reply
            assert ("TRANSFER" in reply["steps"]) == (source == leader), reply
        time.sleep(2)
        acknowledged, refused = writers.stop()
        assert len(acknowledged) > 200 and not refused, (len(acknowledged), refused[:5])
        assert stored(client, table, acknowledged) == set(acknowledged)
        listed = {p["id"]: p for p in _json(admin)["partitions"]}
        for partition_id, replicas in expected.items():
            nodes_listed = [row["node"] for row in listed[partition_id]["replicas"]]
            assert nodes_listed == replicas, listed[partition_id]
            assert listed[partition_id]["replica_move"] is None, listed[partition_id]
        time.sleep(3)  # Every member applies the last entries.
        cluster.stop()
        for partition in listed.values():
            copies = [
                _items(node.data_dir, table_id, partition["start"], partition["end"])
                for node in cluster.nodes
                if node.node_id in expected[partition["id"]]
            ]
            assert len(copies) == 3 and copies[0] == copies[1] == copies[2], partition["id"]
            others = [
                _items(node.data_dir, table_id, partition["start"], partition["end"])
                for node in cluster.nodes
                if node.node_id not in expected[partition["id"]]
            ]
            assert others == [[]], f"{partition['id']}: its old replica's items stay"
