"""Acknowledged writes survive `kill -9` of a storage node, and its outage fails fast and cleanly.

Writers drive the cluster through the router with boto3 (retries off) while one storage node holding
some of the table's partitions is killed with SIGKILL and later restarted on the same data. The test
records every write the router acknowledged and every error a client saw: during the outage,
requests for the dead node's partitions must fail with a DynamoDB-shaped error in bounded time
(never hang), the other partitions must keep serving, and after the restart every acknowledged write
must be there and no write answered ServiceUnavailable (not applied) may be. A write in flight when
the node died may have been committed: it alone is answered InternalServerError, outcome unknown.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from botocore.exceptions import ClientError

from dynalab.cluster import LocalCluster
from tests.integration.conftest import create_active_table, dynamodb_client, stored_catalog

WRITERS = 8
PLACEMENT_ATTEMPTS_MAX = 20  # Tables made at most until one is placed as a test needs.
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
        # (error code, started, seconds taken, key, message)
        self.errors: list[tuple[str, float, float, str, str]] = []
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
                code, message = error.response["Error"]["Code"], error.response["Error"]["Message"]
                self.errors.append((code, started, time.monotonic() - started, key, message))
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
    codes = Counter(code for code, *_ in errors)
    assert set(codes) <= {"ServiceUnavailable", "InternalServerError"}, f"error types: {codes}"
    unknown = [
        (started, message)
        for code, started, _, _, message in errors
        if code != "ServiceUnavailable"
    ]
    for started, message in unknown:
        # Only a write sent before the kill can have been committed without an answer.
        assert started < killed_at and "may or may not have been applied" in message, message
    slowest = max(seconds for _, _, seconds, _, _ in errors)
    assert slowest < FAILED_REQUEST_SECONDS_MAX, f"a failing request took {slowest:.1f} s"
    # Failures belong to the outage (a request started before the restart completed).
    assert all(killed_at - 1 <= started <= time.monotonic() for _, started, *_ in errors)

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
    not_applied = [key for code, _, _, key, _ in errors if code == "ServiceUnavailable"]
    applied = [
        key
        for key in not_applied
        if "Item" in reader.get_item(TableName=name, Key={"pk": {"S": key}}, ConsistentRead=True)
    ]
    assert not applied, f"writes answered ServiceUnavailable were applied: {applied[:5]}"


def test_writes_to_a_paused_node_answered_as_failed_are_never_applied(
    cluster: LocalCluster, table_name: Any
) -> None:
    """A node stopped with SIGSTOP reads the requests queued for it once it resumes. Each one
    carries its deadline, past which the node refuses it: a write the router answered as failed
    (InternalServerError, outcome unknown, since it was sent) is never applied afterwards, so an
    SDK's retry cannot apply an ADD twice."""
    client = dynamodb_client(cluster.router_url)
    # The victim holds some of the table's partitions but not the catalog, and another node holds
    # the rest. Placement follows the table's random id: tables are made until one fits.
    for _ in range(PLACEMENT_ATTEMPTS_MAX):
        name = create_active_table(client, table_name())
        catalog = _catalog(cluster)
        holders = {p["node"] for p in catalog["tables"][name]["partitions"]}
        candidates = sorted(holders - {catalog["catalog_node"]})
        if candidates and len(holders) > 1:
            break
        client.delete_table(TableName=name)
    else:
        raise AssertionError(f"no table of {PLACEMENT_ATTEMPTS_MAX} was placed on two nodes")
    victim = cluster.node(candidates[0])
    assert victim.pid is not None
    keys = [{"pk": {"S": f"counter-{i}"}} for i in range(40)]
    for key in keys:
        client.put_item(TableName=name, Item={**key, "n": {"N": "0"}})

    def add_one(key: dict[str, Any]) -> str | None:
        try:
            client.update_item(
                TableName=name,
                Key=key,
                UpdateExpression="ADD n :one",
                ExpressionAttributeValues={":one": {"N": "1"}},
            )
        except ClientError as error:
            assert error.response["Error"]["Code"] == "InternalServerError", error.response
            assert "may or may not have been applied" in error.response["Error"]["Message"]
            return None
        return key["pk"]["S"]

    os.kill(victim.pid, signal.SIGSTOP)
    try:
        with ThreadPoolExecutor(len(keys)) as pool:
            answered = list(pool.map(add_one, keys))
    finally:
        os.kill(victim.pid, signal.SIGCONT)
    failed = [key for key, ok in zip(keys, answered, strict=True) if ok is None]
    assert failed, "no write was addressed to the paused node"
    assert len(failed) < len(keys), "the other nodes' writes failed too"

    # The resumed node drains what was queued for it (refusing it) and serves again.
    deadline = time.monotonic() + FAILED_REQUEST_SECONDS_MAX
    while True:
        try:
            client.update_item(
                TableName=name,
                Key=failed[0],
                UpdateExpression="ADD probes :one",
                ExpressionAttributeValues={":one": {"N": "1"}},
            )
            break
        except ClientError:
            assert time.monotonic() < deadline, "the resumed node does not serve"
            time.sleep(0.2)
    for key in keys:
        item = client.get_item(TableName=name, Key=key, ConsistentRead=True)["Item"]
        expected = "0" if key in failed else "1"
        assert item["n"] == {"N": expected}, f"{key}: {item}"
