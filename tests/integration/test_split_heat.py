"""Split for heat on a real cluster that enforces throughput (1 s of burst).

Writes of 20 KB items (20 write units each) spread over many keys of one partition keep it
throttled at its 1,000 WCU ceiling; its node splits it where the writes balance. Writes of 100 KB
items to a single key of another partition keep that one throttled too, but it never splits: two
children would leave the key just as throttled.
"""

from __future__ import annotations

import threading
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from botocore.exceptions import ClientError

from core.keycodec import encode_storage_key
from dynalab.cluster import LocalCluster
from tests.integration.conftest import dynamodb_client, wait_active

HEAT_WAIT_SECONDS = 90.0  # Several heat windows (10 s) on a loaded machine.
PAD = "h" * 20_000  # 20 write units a put: about 50 puts a second fill a partition's 1,000.
HOT_PAD = "h" * 100_000  # 100 units: a single key throttles at 10 puts a second.


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with pytest.MonkeyPatch.context() as environment:
        environment.setenv("DYNALAB_THROTTLING", "on")
        environment.setenv("DYNALAB_BURST_SECONDS", "1")
        with LocalCluster(tmp_path_factory.mktemp("heat"), nodes=3, routers=1) as running:
            yield running


def keys_in_quarter(quarter: int, count: int) -> list[str]:
    """Partition key values hashing into one quarter of the hash space: one of an on-demand
    table's four partitions."""
    found: list[str] = []
    number = 0
    while len(found) < count:
        value = f"k{number}"
        if encode_storage_key({"S": value}, None)[0] >> 6 == quarter:
            found.append(value)
        number += 1
    return found


def partitions(cluster: LocalCluster, name: str) -> list[dict[str, Any]]:
    url = f"{cluster.router_url}/admin/tables/{name}/partitions"
    with urllib.request.urlopen(url, timeout=30) as reply:
        listing: list[dict[str, Any]] = orjson.loads(reply.read())["partitions"]
    return listing


def test_a_spread_load_splits_for_heat_and_a_hot_key_does_not(cluster: LocalCluster) -> None:
    client = dynamodb_client(cluster.router_url)
    client.create_table(
        TableName="Heat",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    wait_active(client, "Heat")
    spread = keys_in_quarter(0, 200)
    hot = keys_in_quarter(2, 1)[0]
    first = {p["id"]: p for p in partitions(cluster, "Heat")}
    spread_partition = next(p for p in first if p.endswith("-0"))
    hot_partition = next(p for p in first if p.endswith("-2"))
    stop = threading.Event()

    def writer(number: int, keys: list[str], pad: str) -> None:
        writes = dynamodb_client(cluster.router_url)
        count = number
        while not stop.is_set():
            try:
                writes.put_item(
                    TableName="Heat", Item={"pk": {"S": keys[count % len(keys)]}, "v": {"S": pad}}
                )
            except ClientError as error:
                # An on-demand table throttles with ThrottlingException, as DynamoDB does.
                assert error.response["Error"]["Code"] == "ThrottlingException"
            count += 7

    threads = [
        threading.Thread(
            target=writer,
            args=(n, *((spread, PAD) if n < 3 else ([hot], HOT_PAD))),
            daemon=True,
        )
        for n in range(5)
    ]
    for thread in threads:
        thread.start()
    try:
        deadline = time.monotonic() + HEAT_WAIT_SECONDS
        while True:
            listing = partitions(cluster, "Heat")
            children = [p for p in listing if p["parent"] == spread_partition]
            hot_now = next((p for p in listing if p["id"] == hot_partition), None)
            throttled = hot_now is not None and (hot_now["write"] or {}).get(
                "throttled_requests", 0
            )
            if children and throttled:
                break
            assert time.monotonic() < deadline, listing
            time.sleep(1.0)
        # Two more heat windows of throttling on the hot key: still one partition.
        time.sleep(21.0)
        listing = partitions(cluster, "Heat")
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=60)
    assert not any(p["parent"] == hot_partition for p in listing), "a hot key split"
    hot_after = next(p for p in listing if p["id"] == hot_partition)
    assert hot_after["state"] == "SERVING" and hot_after["write"]["throttled_requests"] > 0
    logs = "".join(path.read_text() for path in (cluster.log_dir).glob("node-*.log"))
    assert "splitting for heat" in logs
    assert "one key carries its load" in logs
