"""Healing on real processes (`rpc.placement.heals`, each node's placement keeper): four nodes, a
table's partitions on three each, writers putting keys through the router; one node is killed
with SIGKILL and its data directory deleted (a lost disk). Once its peers have not heard from it
for DYNALAB_HEAL_SECONDS, the leader of each partition it held moves that replica to the node
that holds none (a replica move from the lost node). Every acknowledged write is read after,
no partition names the lost node, and each partition's three replicas hold the same items.
"""

from __future__ import annotations

import shutil
import time
import uuid
from pathlib import Path
from typing import Any

from dynalab.cluster import LocalCluster
from tests.integration.conftest import create_active_table, dynamodb_client
from tests.integration.test_replica_moves import Writers, _items, _json
from tests.integration.test_replication import stored

HEAL_SECONDS = 3
HEALED_WITHIN_S = 90.0


def test_a_lost_nodes_replicas_are_rebuilt_on_the_other_nodes(
    tmp_path: Path, monkeypatch: Any
) -> None:
    monkeypatch.setenv("DYNALAB_HEAL_SECONDS", str(HEAL_SECONDS))
    monkeypatch.setenv("DYNALAB_RAFT_LOG_COMPACT_ENTRIES", "20")
    monkeypatch.setenv("DYNALAB_RAFT_LOG_KEPT_ENTRIES", "5")
    with LocalCluster(
        tmp_path / "cluster", nodes=4, routers=1, replicators=0, replication_factor=3
    ) as cluster:
        client = dynamodb_client(cluster.router_url)
        table = create_active_table(client, "Healing")
        table_id = uuid.UUID(client.describe_table(TableName=table)["Table"]["TableId"]).hex
        admin = f"{cluster.router_url}/admin/tables/{table}/partitions"
        writers = Writers(cluster.router_url, table)
        time.sleep(2)
        before = _json(admin)["partitions"]
        # A member of the catalog's group (node-1 to node-3), which goes on with the two left.
        lost = cluster.node("node-2")
        assert any(lost.node_id in [r["node"] for r in p["replicas"]] for p in before)
        lost.kill()
        shutil.rmtree(lost.data_dir)
        deadline = time.monotonic() + HEALED_WITHIN_S
        while True:
            listed = _json(admin)["partitions"]
            nodes = [[r["node"] for r in p["replicas"]] for p in listed]
            if all(lost.node_id not in n and len(n) == 3 for n in nodes) and not any(
                p["replica_move"] for p in listed
            ):
                break
            assert time.monotonic() < deadline, f"not healed: {listed}"
            time.sleep(0.5)
        time.sleep(2)
        acknowledged, refused = writers.stop()
        assert len(acknowledged) > 200 and not refused, (len(acknowledged), refused[:5])
        assert stored(client, table, acknowledged) == set(acknowledged)
        assert [p["id"] for p in listed] == [p["id"] for p in before]
        time.sleep(3)  # Every member applies the last entries.
        cluster.stop()
        for partition in listed:
            replicas = {r["node"] for r in partition["replicas"]}
            copies = [
                _items(node.data_dir, table_id, partition["start"], partition["end"])
                for node in cluster.nodes
                if node.node_id in replicas
            ]
            assert len(copies) == 3 and copies[0] == copies[1] == copies[2], partition["id"]
