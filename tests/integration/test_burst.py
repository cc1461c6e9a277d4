"""Burst credit as a user meets it: a new provisioned table serves its first burst unthrottled.

This module runs its own cluster with enforcement on and DynamoDB's 300 s burst window (no
DYNALAB_BURST_SECONDS): the Developer Guide's tutorial table of 5 RCU / 5 WCU takes 100 quick puts
and reads them back without a throttle, through boto3 with retries off, so a throttle would fail
the call. Then a table of 1 WCU spends its bank on large items and the next write gets DynamoDB's
ProvisionedThroughputExceededException, checked on the raw wire.
"""

from __future__ import annotations

import http.client
import json
import urllib.parse
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from dynalab.cluster import LocalCluster
from tests.integration.conftest import create_active_table

SIGNATURE = (
    "AWS4-HMAC-SHA256 Credential=test/20240101/us-east-1/dynamodb/aws4_request, "
    "SignedHeaders=content-type;host;x-amz-date;x-amz-target, Signature=0"
)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """Three nodes enforcing throughput with DynamoDB's burst window, and one router."""
    with pytest.MonkeyPatch.context() as environment:
        environment.setenv("DYNALAB_THROTTLING", "on")
        environment.delenv("DYNALAB_BURST_SECONDS", raising=False)
        with LocalCluster(tmp_path_factory.mktemp("burst"), nodes=3, routers=1) as running:
            yield running


def test_a_tutorial_table_takes_100_quick_puts_without_a_throttle(
    dynamodb: Any, table_name: Callable[[], str]
) -> None:
    name = create_active_table(dynamodb, table_name(), throughput=(5, 5))
    for i in range(100):
        dynamodb.put_item(TableName=name, Item={"pk": {"S": f"item-{i}"}, "n": {"N": str(i)}})
    for i in range(100):
        reply = dynamodb.get_item(TableName=name, Key={"pk": {"S": f"item-{i}"}})
        assert reply["Item"]["n"] == {"N": str(i)}


def raw_put(cluster: LocalCluster, table: str, key: str, size: int) -> tuple[int, Any]:
    parsed = urllib.parse.urlsplit(cluster.router_url)
    connection = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=10)
    body = {"TableName": table, "Item": {"pk": {"S": key}, "v": {"S": "x" * size}}}
    try:
        connection.request(
            "POST",
            "/",
            body=json.dumps(body).encode(),
            headers={
                "Content-Type": "application/x-amz-json-1.0",
                "X-Amz-Target": "DynamoDB_20120810.PutItem",
                "X-Amz-Date": "20240101T000000Z",
                "Authorization": SIGNATURE,
            },
        )
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def test_a_spent_bank_throttles_with_dynamodb_envelope(
    cluster: LocalCluster, dynamodb: Any, table_name: Callable[[], str]
) -> None:
    name = create_active_table(dynamodb, table_name(), throughput=(1, 1))
    # The 1 WCU table's bank is 300 units: two items of 200 KB (200 units each) are admitted, the
    # second into debt; the next write is refused until the rate has repaid it.
    for key in ("a", "b"):
        assert raw_put(cluster, name, key, 200 * 1024 - 20) == (200, {})
    assert raw_put(cluster, name, "c", 10) == (
        400,
        {
            "__type": "com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException",
            "message": "The level of configured provisioned throughput for the table was "
            "exceeded. Consider increasing your provisioning level with the UpdateTable API.",
            # The table's one write unit, not the partition's ceiling, is what ran out.
            "ThrottlingReasons": [
                {
                    "reason": "TableWriteProvisionedThroughputExceeded",
                    "resource": f"arn:aws:dynamodb:us-east-1:000000000000:table/{name}",
                }
            ],
        },
    )
