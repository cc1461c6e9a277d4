"""kill -9 of a storage node while its TTL sweeper deletes a backlog leaves table, expiry index and
TTL counters consistent.

Thousands of items expire together on a table whose TTL was enabled half-way through loading them
(so the first half is indexed by the background backfill and the second by the write path). Once
the sweepers are deleting, one node is killed with SIGKILL and restarted on its data. The test
waits until every expired item is gone and the others are all there, stops the cluster, and runs
the reusable checker (`dynalab.checkers.check_expiry_index`) on every node's store: no index entry
without its item or at the wrong second, no indexable item without its entry, item counts equal to
the items, and TTL counters equal to the change log's service deletes. The counters summed over the
nodes equal the number of expired items: none was counted twice or lost across the crash.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError

from core.catalog import TableDef
from dynalab.checkers import check_expiry_index
from dynalab.cluster import LocalCluster
from storagenode.partition import Partition
from storagenode.store import Store
from tests.integration.conftest import create_active_table, dynamodb_client, stored_catalog

EXPIRING = 3000  # Half put before TTL is enabled, half after.
KEPT = 300
# All are loaded before they expire: 3,300 puts and an UpdateTimeToLive, which took more than the
# 3 to 4 s this was (it is truncated to whole seconds) on a loaded machine with another test file
# running beside this one.
EXPIRE_IN_SECONDS = 10
SWEEP_SECONDS = 0.1
DEADLINE_SECONDS = 120.0
BATCH = 25


def _load(ddb: Any, name: str, keys: list[str], expires: int) -> None:
    for start in range(0, len(keys), BATCH):
        requests = [
            {"PutRequest": {"Item": {"pk": {"S": key}, "exp": {"N": str(expires)}}}}
            for key in keys[start : start + BATCH]
        ]
        pending: dict[str, Any] = {name: requests}
        deadline = time.monotonic() + DEADLINE_SECONDS
        while pending:
            assert time.monotonic() < deadline, "the load did not finish"
            pending = ddb.batch_write_item(RequestItems=pending).get("UnprocessedItems") or {}


def _count(ddb: Any, name: str) -> int | None:
    """The table's item count by a consistent Scan; None while a node is down."""
    total = 0
    start: dict[str, Any] | None = None
    try:
        while True:
            page = ddb.scan(
                TableName=name,
                Select="COUNT",
                ConsistentRead=True,
                **({"ExclusiveStartKey": start} if start else {}),
            )
            total += page["Count"]
            start = page.get("LastEvaluatedKey")
            if start is None:
                return total
    except ClientError:
        return None


def test_kill_9_during_ttl_sweeps_leaves_table_index_and_counters_consistent(
    tmp_path: Path,
) -> None:
    data = tmp_path / "cluster"
    with LocalCluster(data, nodes=3, routers=1, ttl_sweep_seconds=SWEEP_SECONDS) as cluster:
        ddb = dynamodb_client(cluster.router_url)
        name = create_active_table(ddb, "ttl-crash")
        expires = int(time.time()) + EXPIRE_IN_SECONDS
        expiring = [f"e{i:05}" for i in range(EXPIRING)]
        _load(ddb, name, expiring[: EXPIRING // 2], expires)
        ddb.update_time_to_live(
            TableName=name, TimeToLiveSpecification={"Enabled": True, "AttributeName": "exp"}
        )
        _load(ddb, name, expiring[EXPIRING // 2 :], expires)
        _load(ddb, name, [f"k{i:05}" for i in range(KEPT)], expires + 3600)
        assert time.time() < expires, "loading took longer than the items live; raise the margin"
        table = TableDef.from_json(stored_catalog(cluster.nodes)["tables"][name])
        victim = cluster.node(table.partitions[0].node)

        deadline = time.monotonic() + DEADLINE_SECONDS
        while True:  # Until the sweepers are deleting.
            count = _count(ddb, name)
            if count is not None and count < EXPIRING + KEPT - 200:
                break
            assert time.monotonic() < deadline, f"no sweep began (count {count})"
            time.sleep(0.05)
        assert count > KEPT, "the sweep finished before the kill; load more items"
        victim.kill()
        time.sleep(0.5)
        victim.start()

        while True:  # Until every expired item is gone.
            count = _count(ddb, name)
            if count == KEPT:
                break
            assert time.monotonic() < deadline, f"{count} items left, {KEPT} expected"
            time.sleep(0.2)

    deleted = 0
    now = time.time()
    for node in cluster.nodes:
        store = Store(node.data_dir)
        try:
            problems = check_expiry_index(store, now)
            assert problems == [], f"{node.node_id}: " + "\n".join(problems[:20])
            for meta in store.load_partition_metas():
                partition = Partition.from_meta(meta)
                if partition.table_id == table.id:
                    deleted += partition.ttl_deleted
        finally:
            store.close()
    assert deleted == EXPIRING


def test_ttl_stays_enabling_while_a_node_is_down_and_settles_when_it_returns(
    tmp_path: Path,
) -> None:
    """The setting is recorded at once; ENABLED means every node holding a partition took it."""
    with LocalCluster(tmp_path / "cluster", nodes=3, routers=1) as cluster:
        ddb = dynamodb_client(cluster.router_url)
        name = create_active_table(ddb, "ttl-node-down")
        table = TableDef.from_json(stored_catalog(cluster.nodes)["tables"][name])
        catalog_node = stored_catalog(cluster.nodes)["catalog_node"]
        victim = next(cluster.node(node) for node in table.nodes() if node != catalog_node)
        victim.kill()
        reply = ddb.update_time_to_live(
            TableName=name, TimeToLiveSpecification={"Enabled": True, "AttributeName": "exp"}
        )
        assert reply["TimeToLiveSpecification"] == {"Enabled": True, "AttributeName": "exp"}
        description = ddb.describe_time_to_live(TableName=name)["TimeToLiveDescription"]
        assert description == {"TimeToLiveStatus": "ENABLING", "AttributeName": "exp"}
        victim.start()
        deadline = time.monotonic() + DEADLINE_SECONDS
        while True:
            try:
                description = ddb.describe_time_to_live(TableName=name)["TimeToLiveDescription"]
            except ClientError:
                description = {}
            if description.get("TimeToLiveStatus") == "ENABLED":
                break
            assert time.monotonic() < deadline, f"TTL not settled: {description}"
            time.sleep(0.2)
        assert description == {"TimeToLiveStatus": "ENABLED", "AttributeName": "exp"}
