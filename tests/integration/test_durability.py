"""Acknowledged writes survive `kill -9` of a storage node, and its outage fails fast and cleanly.

Writers drive the cluster through the router with boto3 (retries off) while one storage node holding
some of the table's partitions is killed with SIGKILL and later restarted on the same data. The test
records every write the router acknowledged and every error a client saw: during the outage,
requests for the dead node's partitions must fail with a DynamoDB-shaped error in bounded time
(never hang), the other partitions must keep serving, and after the restart every acknowledged write
must be there.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

from botocore.exceptions import ClientError

from dynalab.cluster import LocalCluster
from tests.integration.conftest import create_active_table, dynamodb_client, stored_catalog

WRITERS = 8
PHASE_SECONDS = 2.5  # load before the kill, during the outage, and after the restart
FAILED_REQUEST_SECONDS_MAX = 12.0  # a request for a dead partition must fail well before this


def _catalog(cluster: LocalCluster) -> dict[str, Any]:
    return stored_catalog(cluster.nodes)


class Writer(threading.Thread):
    """Puts items with unique keys until stopped, recording what was acknowledged and what not."""

    def __init__(self, url: str, table: str, number: int, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.client = dynamodb_client(url)
        self.table = table
        self.number = number
        self.stop_event = stop
        self.acknowledged: dict[str, tuple[str, float]] = {}  # key -> (value, time acknowledged)
        self.errors: list[tuple[str, float, float]] = []  # (error code, started, seconds taken)
        self.unexpected: list[BaseException] = []

    def run(self) -> None:
        sequence = 0
        while not self.stop_event.is_set():
            key = f"w{self.number}-{sequence}"
            value = str(sequence * 7 + self.number)
            sequence += 1
            started = time.monotonic()
            try:
                self.client.put_item(
                    TableName=self.table,
                    Item={"pk": {"S": key}, "v": {"N": value}, "pad": {"S": "x" * 200}},
                )
            except ClientError as error:
                code = error.response["Error"]["Code"]
                self.errors.append((code, started, time.monotonic() - started))
            except BaseException as error:  # a timeout here means a request hung
                self.unexpected.append(error)
            else:
                self.acknowledged[key] = (value, time.monotonic())


def test_acknowledged_writes_survive_kill_9_of_a_node(
    cluster: LocalCluster, table_name: Any
) -> None:
    client = dynamodb_client(cluster.router_url)
    name = table_name()
    create_active_table(client, name)

    catalog = _catalog(cluster)
    partitions = catalog["tables"][name]["partitions"]
    holders = Counter(p["node"] for p in partitions)
    # Kill a node that holds partitions of the table but not the catalog, so that the outage is
    # one of data, and the surviving partitions must go on serving.
    victims = [n for n in holders if n != catalog["catalog_node"]]
    assert victims, f"no node other than the catalog's holds a partition: {partitions}"
    victim = cluster.node(victims[0])

    stop = threading.Event()
    writers = [Writer(cluster.router_url, name, i, stop) for i in range(WRITERS)]
    for writer in writers:
        writer.start()
    try:
        time.sleep(PHASE_SECONDS)
        victim.kill()
        killed_at = time.monotonic()
        time.sleep(PHASE_SECONDS)
        restart_started = time.monotonic()
        victim.start()
        time.sleep(PHASE_SECONDS)
    finally:
        stop.set()
        for writer in writers:
            writer.join(timeout=FAILED_REQUEST_SECONDS_MAX + 5)
    assert not any(w.is_alive() for w in writers), "a writer is stuck in a request"

    unexpected = [e for w in writers for e in w.unexpected]
    assert not unexpected, f"requests failed without a DynamoDB error: {unexpected[:3]}"

    errors = [e for w in writers for e in w.errors]
    assert errors, "killing a node holding partitions caused no failed request"
    codes = Counter(code for code, _, _ in errors)
    assert set(codes) <= {"ServiceUnavailable"}, f"unexpected error types: {codes}"
    slowest = max(seconds for _, _, seconds in errors)
    assert slowest < FAILED_REQUEST_SECONDS_MAX, f"a failing request took {slowest:.1f} s"
    # Failures belong to the outage (a request started before the restart completed).
    assert all(killed_at - 1 <= started <= time.monotonic() for _, started, _ in errors)

    acknowledged = {k: v for w in writers for k, v in w.acknowledged.items()}
    during_outage = [
        k for k, (_, at) in acknowledged.items() if killed_at + 0.5 < at < restart_started
    ]
    assert during_outage, "the surviving partitions acknowledged nothing during the outage"

    reader = dynamodb_client(cluster.router_url)
    missing = []
    for key, (value, _) in acknowledged.items():
        item = reader.get_item(TableName=name, Key={"pk": {"S": key}}, ConsistentRead=True)
        if item.get("Item", {}).get("v") != {"N": value}:
            missing.append(key)
    assert not missing, f"{len(missing)} of {len(acknowledged)} acknowledged writes lost"
