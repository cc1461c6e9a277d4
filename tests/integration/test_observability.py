"""The router's request metrics, its health endpoint, and a quiet log while a node is down.

This module runs its own cluster, with throughput enforced and a 1 s burst bank so that a
provisioned table throttles within a second, and kills one of its nodes.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError
from prometheus_client.parser import text_string_to_metric_families

from dynalab.cluster import LocalCluster
from tests.integration.conftest import create_active_table, dynamodb_client

HTTP_TIMEOUT_S = 10.0
HEALTH_TIMEOUT_S = 30.0
NODE_DOWN_LOAD_S = 6.0
# With a node down, each failed request used to add a 25-line traceback. Now the router logs one
# line per node and per rate-limit interval (10 s): a few lines over the whole outage.
NODE_DOWN_LOG_LINES_MAX = 10


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with pytest.MonkeyPatch.context() as environment:
        environment.setenv("DYNALAB_THROTTLING", "on")
        environment.setenv("DYNALAB_BURST_SECONDS", "1")
        directory = tmp_path_factory.mktemp("observability")
        with LocalCluster(directory, nodes=3, routers=1, replicators=0) as running:
            yield running


@pytest.fixture(scope="module")
def dynamodb(cluster: LocalCluster) -> Any:
    return dynamodb_client(cluster.router_url)


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT_S) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def scrape(cluster: LocalCluster) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    status, body = get(f"{cluster.router_url}/metrics")
    assert status == 200
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(body.decode())
        for sample in family.samples
    }


def value(samples: dict[Any, float], name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def test_requests_are_counted_by_operation_outcome_and_error_type(
    cluster: LocalCluster, dynamodb: Any
) -> None:
    name = create_active_table(dynamodb, "metrics-requests")
    before = scrape(cluster)
    for i in range(3):
        dynamodb.put_item(TableName=name, Item={"pk": {"S": f"k{i}"}, "v": {"S": "x" * 100}})
    with pytest.raises(ClientError):
        dynamodb.get_item(TableName="no-such-table", Key={"pk": {"S": "k"}})
    with pytest.raises(ClientError):
        dynamodb.put_item(TableName=name, Item={"v": {"S": "no key"}})
    after = scrape(cluster)

    def grew(metric: str, **labels: str) -> float:
        return value(after, metric, **labels) - value(before, metric, **labels)

    requests = "dynalab_router_requests_total"
    errors = "dynalab_router_errors_total"
    assert grew(requests, operation="PutItem", outcome="success") == 3
    assert grew(requests, operation="PutItem", outcome="client_error") == 1
    assert grew(requests, operation="GetItem", outcome="client_error") == 1
    assert grew(errors, operation="PutItem", type="ValidationException") == 1
    assert grew(errors, operation="GetItem", type="ResourceNotFoundException") == 1
    assert grew("dynalab_router_request_duration_seconds_count", operation="PutItem") == 4
    assert grew("dynalab_router_request_bytes_total", operation="PutItem") > 3 * 100
    assert grew("dynalab_router_response_bytes_total", operation="GetItem") > 0


def test_throttles_are_counted_by_table_and_partition(cluster: LocalCluster, dynamodb: Any) -> None:
    name = create_active_table(dynamodb, "metrics-throttles", throughput=(1, 1))
    throttled = 0
    deadline = time.monotonic() + 20.0
    while throttled < 3 and time.monotonic() < deadline:
        try:
            dynamodb.put_item(TableName=name, Item={"pk": {"S": "hot"}, "v": {"S": "x" * 900}})
        except ClientError as error:
            assert error.response["Error"]["Code"] == "ProvisionedThroughputExceededException"
            throttled += 1
    assert throttled == 3, "a 1-WCU table never throttled"
    status, body = get(f"{cluster.router_url}/admin/tables/{name}/partitions")
    assert status == 200
    (partition,) = json.loads(body)["partitions"]
    counted = value(
        scrape(cluster), "dynalab_router_throttles_total", table=name, partition=partition["id"]
    )
    assert counted == throttled


def wait_health(cluster: LocalCluster, status: int) -> dict[str, Any]:
    deadline = time.monotonic() + HEALTH_TIMEOUT_S
    while True:
        got, body = get(f"{cluster.router_url}/health")
        if got == status:
            return dict(json.loads(body))
        assert time.monotonic() < deadline, f"/health kept answering {got}: {body!r}"
        time.sleep(0.2)


def test_health_names_a_dead_node_and_the_log_stays_small(
    cluster: LocalCluster, dynamodb: Any
) -> None:
    name = create_active_table(dynamodb, "metrics-health")
    healthy = wait_health(cluster, 200)
    assert healthy["status"] == "ok"
    assert healthy["nodes"] == {node.node_id: "up" for node in cluster.nodes}
    _, body = get(f"{cluster.router_url}/admin/tables/{name}/partitions")
    victim = cluster.node(json.loads(body)["partitions"][0]["node"])
    log_path = cluster.routers[0].log_path
    lines_before = len(log_path.read_text().splitlines())

    victim.kill()
    try:
        failures = 0
        deadline = time.monotonic() + NODE_DOWN_LOAD_S
        while time.monotonic() < deadline:
            try:
                dynamodb.get_item(TableName=name, Key={"pk": {"S": "k"}})
            except ClientError:
                failures += 1
        assert failures > 0
        degraded = wait_health(cluster, 503)
        assert degraded["status"] == "degraded"
        assert degraded["nodes"][victim.node_id] == "unreachable"
        assert list(degraded["unreachable"]) == [victim.node_id]
        # DynamoDB's own health check answers for the router and stays as it is.
        status, text = get(f"{cluster.router_url}/")
        assert (status, text.startswith(b"healthy: ")) == (200, True)
    finally:
        victim.start()
    added = log_path.read_text().splitlines()[lines_before:]
    assert "Traceback" not in "\n".join(added)
    assert len(added) <= NODE_DOWN_LOG_LINES_MAX, "\n".join(added)
    assert any(f"stream to node {victim.address} broke" in line for line in added), added
    assert wait_health(cluster, 200)["status"] == "ok"
