"""Burst credit as a user meets it: a new table serves its first bursts unthrottled.

This module runs its own cluster with enforcement on and DynamoDB's 300 s burst window (no
DYNALAB_BURST_SECONDS), and calls it through boto3 with retries off, so a throttle would fail the
call. The Developer Guide's tutorial table of 5 RCU / 5 WCU takes 100 quick puts and reads them
back without a throttle; a table of 1 WCU spends its bank on large items and the next write gets
DynamoDB's ProvisionedThroughputExceededException, checked on the raw wire.

A new on-demand table serves what DynamoDB serves (issue 30): 50 sequential puts of 100 KB, then a
transaction of nearly 4 MB (TransactWriteItems' limit) of them, and 30 quick 100 KB puts to one
key; past that burst a hot key is held to its partition's 1,000 write units a second and refused
with DynamoDB's ThrottlingException, checked on the raw wire.
"""

from __future__ import annotations

import http.client
import json
import time
import urllib.parse
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from botocore.exceptions import ClientError

from core import limits
from core.errors import ON_DEMAND_THROTTLED
from core.size import item_size_bytes
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


# On-demand tables --------------------------------------------------------------------------------

PAYLOAD_100_KB = "x" * (100 * 1024)


def large_item(key: str) -> dict[str, Any]:
    return {"pk": {"S": key}, "v": {"S": PAYLOAD_100_KB}}


def write_units(item: dict[str, Any]) -> int:
    return -(-item_size_bytes(item) // limits.WRITE_UNIT_BYTES)


def test_a_new_on_demand_table_takes_50_sequential_100_kb_puts_then_a_4_mb_transaction(
    dynamodb: Any, table_name: Callable[[], str]
) -> None:
    name = create_active_table(dynamodb, table_name())
    # About 5,000 write units in a second or two over the table's four partitions: more than any
    # one partition's 1,000 a second, which its burst covers.
    for i in range(50):
        dynamodb.put_item(TableName=name, Item=large_item(f"item-{i}"))
    # 39 more such items in one transaction (3.9 MB of TransactWriteItems' 4 MB), at twice the
    # units, right after: another 7,900 units, admitted on every partition.
    actions = [{"Put": {"TableName": name, "Item": large_item(f"txn-{i}")}} for i in range(39)]
    reply = dynamodb.transact_write_items(TransactItems=actions, ReturnConsumedCapacity="TOTAL")
    assert reply["ConsumedCapacity"] == [
        {
            "TableName": name,
            "CapacityUnits": 2.0 * 39 * write_units(large_item("txn-0")),
            "WriteCapacityUnits": 2.0 * 39 * write_units(large_item("txn-0")),
        }
    ]
    # Every item is there (a Scan reads 1 MB a page: about ten of these).
    pages = dynamodb.get_paginator("scan").paginate(TableName=name, Select="COUNT")
    assert sum(page["Count"] for page in pages) == 89


def test_a_hot_key_gets_a_burst_then_its_partitions_ceiling_refused_as_dynamodb_does(
    cluster: LocalCluster,
    dynamodb: Any,
    dynamodb_for: Callable[[str], Any],
    table_name: Callable[[], str],
) -> None:
    name = create_active_table(dynamodb, table_name())
    item = large_item("hot")
    units = write_units(item)
    # 30 quick puts of 100 KB to one key (3,030 units in well under a second): no throttle.
    started = time.monotonic()
    for _ in range(30):
        dynamodb.put_item(TableName=name, Item=item)

    # Then four writers on the key: the partition's ceiling, 1,000 units a second, and no more.
    def hot_writer(_: int) -> tuple[int, int]:
        client = dynamodb_for(cluster.router_url)
        served = throttled = 0
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:
            try:
                client.put_item(TableName=name, Item=item)
                served += 1
            except ClientError as error:
                assert error.response["Error"]["Code"] == "ThrottlingException", error.response
                throttled += 1
        return served, throttled

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(hot_writer, range(4)))
    elapsed = time.monotonic() - started
    served = 30 + sum(result[0] for result in results)
    assert sum(result[1] for result in results) > 0
    # All that was served is the burst (3,000 units), the ceiling's 1,000 units a second since the
    # first put, and the overdraft of one request per writer (each admitted on a positive balance).
    burst = limits.ON_DEMAND_PARTITION_BURST_SECONDS * limits.PARTITION_WCU_MAX
    assert served * units <= burst + limits.PARTITION_WCU_MAX * elapsed + 4 * units

    # The refusal on the wire: DynamoDB's ThrottlingException for an on-demand table, naming the
    # partition's own ceiling (a key range's) as the reason, with the table's ARN.
    status, body = 200, {}
    deadline = time.monotonic() + 10
    while status == 200 and time.monotonic() < deadline:
        status, body = raw_put(cluster, name, "hot", 100 * 1024)
    assert (status, body) == (
        400,
        {
            "__type": "com.amazonaws.dynamodb.v20120810#ThrottlingException",
            "message": ON_DEMAND_THROTTLED,
            "throttlingReasons": [
                {
                    "reason": "TableWriteKeyRangeThroughputExceeded",
                    "resource": f"arn:aws:dynamodb:us-east-1:000000000000:table/{name}",
                }
            ],
        },
    )
    # boto3 reads the reasons as the service model names them.
    try:
        for _ in range(100):
            dynamodb.put_item(TableName=name, Item=item)
    except ClientError as error:
        assert error.response["throttlingReasons"] == body["throttlingReasons"]
    else:
        raise AssertionError("100 more puts of 100 KB to one key were not throttled")
