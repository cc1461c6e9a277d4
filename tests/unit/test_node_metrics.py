"""A storage node's write metrics on its metrics server: group commits, WAL syncs, store size."""

from __future__ import annotations

import asyncio
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from rpc import ops
from storagenode import metrics
from storagenode.commit import GroupCommitter
from storagenode.node import StorageNode
from storagenode.store import Store
from tests import envelope

TABLE = {"id": "a7" * 16, "name": "M", "key_schema": {"hash": ["pk", "S"], "range": None}}
PARTITION = {"id": "p0", "start": "", "end": None, "epoch": 1, "node": "n1"}
SCRAPE_TIMEOUT_S = 5.0
CLOSE_SECONDS = 5.0


def scrape(port: int) -> dict[str, float]:
    url = f"http://127.0.0.1:{port}/metrics"
    with urllib.request.urlopen(url, timeout=SCRAPE_TIMEOUT_S) as response:
        text = response.read().decode()
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if not sample.labels or sample.labels == {"le": "+Inf"}
    }


async def test_commits_syncs_and_store_size_are_reported(tmp_path: Path) -> None:
    bound = metrics.serve("127.0.0.1:0")
    assert bound is not None
    before = scrape(bound[1])
    store = Store(tmp_path / "node")
    committer = GroupCommitter(StorageNode(store))
    committer.start()
    try:
        await envelope.submit(
            committer, ops.CREATE_PARTITION, {"table": TABLE, "partition": PARTITION}
        )
        item = {"table_id": TABLE["id"], "partition_id": "p0", "epoch": 1}
        await asyncio.gather(
            *(
                envelope.submit(committer, ops.PUT, {**item, "item": {"pk": {"S": f"k{i}"}}})
                for i in range(50)
            )
        )
    finally:
        await committer.close(CLOSE_SECONDS)
    after = scrape(bound[1])

    def grew(name: str) -> float:
        return after[name] - before.get(name, 0.0)

    assert grew("dynalab_node_group_commit_writes_sum") == 51
    commits = grew("dynalab_node_group_commit_writes_count")
    assert 2 <= commits <= 51
    assert grew("dynalab_node_group_commit_seconds_count") == commits
    assert grew("dynalab_node_group_commit_seconds_sum") > 0
    assert grew("dynalab_node_wal_sync_seconds_count") >= commits
    assert after["dynalab_node_store_bytes"] >= metrics.directory_bytes(tmp_path / "node") > 0
