"""Fixtures for the integration tests: a real cluster on loopback and boto3 clients for it.

Every test under tests/integration is marked `integration` here, so `pytest -m "not integration"`
runs only the fast tests. The `cluster` fixture is module-scoped: starting five processes costs a
few seconds, so the tests of one module share a cluster and keep apart by using their own tables
(`table_name()` hands out unique names).
"""

from __future__ import annotations

import asyncio
import itertools
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from dynalab.cluster import LocalCluster, StorageNode
from router.context import RouterContext

INTEGRATION_DIR = Path(__file__).resolve().parent
REGION = "us-east-1"
# The router accepts any credentials; botocore refuses to sign without some.
DUMMY_CREDENTIALS = {"aws_access_key_id": "dynalab", "aws_secret_access_key": "dynalab"}
# One attempt, so a test sees the first error instead of a retried success; parameter validation
# off, so tests can send what boto3 would refuse and check the server's own ValidationException.
CLIENT_CONFIG = Config(
    retries={"total_max_attempts": 1},
    parameter_validation=False,
    connect_timeout=5,
    read_timeout=30,
)
TABLE_ACTIVE_TIMEOUT_S = 30.0  # How long a new table may stay CREATING (or UPDATING) in a test.
TABLE_POLL_INTERVAL_S = 0.05
_table_numbers = itertools.count(1)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if INTEGRATION_DIR in item.path.parents:
            item.add_marker(pytest.mark.integration)


def dynamodb_client(endpoint_url: str) -> Any:
    """A boto3 DynamoDB client for `endpoint_url`, configured as the integration tests expect."""
    # A session of its own, so nothing from the environment (profiles, AWS_* variables) leaks in.
    session = boto3.session.Session(region_name=REGION, **DUMMY_CREDENTIALS)
    return session.client("dynamodb", endpoint_url=endpoint_url, config=CLIENT_CONFIG)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """Three storage nodes and two routers, started for the module and stopped after it.

    Throughput enforcement is off on these nodes (DYNALAB_THROTTLING=off): the tests load far more
    into one partition, far faster, than its 1,000 write units per second would admit, as DynamoDB
    would not either. test_capacity.py starts a cluster of its own with enforcement on.
    """
    with pytest.MonkeyPatch.context() as environment:
        environment.setenv("DYNALAB_THROTTLING", "off")
        with LocalCluster(tmp_path_factory.mktemp("cluster"), nodes=3, routers=2) as running:
            yield running


@pytest.fixture(scope="module")
def dynamodb(cluster: LocalCluster) -> Any:
    """A boto3 DynamoDB client for the cluster's first router."""
    return dynamodb_client(cluster.router_url)


@pytest.fixture(scope="session")
def dynamodb_for() -> Callable[[str], Any]:
    """Makes a client like `dynamodb` for any endpoint: `dynamodb_for(cluster.router_urls[1])`."""
    return dynamodb_client


@pytest.fixture
def table_name(request: pytest.FixtureRequest) -> Callable[[], str]:
    """Makes table names that are unique in the session and say which test made them:
    `name = table_name()`."""
    # Table names allow [a-zA-Z0-9_.-] only, and at most 255 characters.
    test = re.sub(r"[^a-zA-Z0-9_.-]+", "-", request.node.name)[:200]

    def make() -> str:
        return f"{test}-{next(_table_numbers)}"

    return make


def error_response(call: Callable[[], Any]) -> dict[str, Any]:
    """The parsed error response of a boto3 call that must fail."""
    with pytest.raises(ClientError) as raised:
        call()
    return dict(raised.value.response)


def error_summary(response: dict[str, Any]) -> tuple[int, str, str]:
    """(HTTP status, error code, message) of a parsed error response."""
    return (
        response["ResponseMetadata"]["HTTPStatusCode"],
        response["Error"]["Code"],
        response["Error"]["Message"],
    )


def error_of(call: Callable[[], Any]) -> tuple[int, str, str]:
    """(HTTP status, error code, message) of a boto3 call that must fail."""
    return error_summary(error_response(call))


def wait_active(client: Any, name: str) -> dict[str, Any]:
    """Wait until the table is ACTIVE (after CreateTable or UpdateTable); its description."""
    deadline = time.monotonic() + TABLE_ACTIVE_TIMEOUT_S
    while True:
        table = client.describe_table(TableName=name)["Table"]
        if table["TableStatus"] == "ACTIVE":
            return dict(table)
        assert time.monotonic() < deadline, f"table {name} not ACTIVE in {TABLE_ACTIVE_TIMEOUT_S} s"
        time.sleep(TABLE_POLL_INTERVAL_S)


def create_active_table(
    client: Any,
    name: str,
    hash_key: tuple[str, str] = ("pk", "S"),
    range_key: tuple[str, str] | None = None,
    throughput: tuple[int, int] | None = None,
) -> str:
    """Create a table keyed by (attribute name, type) pairs, on-demand unless `throughput` gives
    (read, write) units, and wait until it is ACTIVE; returns `name`."""
    keys = [(hash_key, "HASH")] + ([(range_key, "RANGE")] if range_key else [])
    billing: dict[str, Any] = {"BillingMode": "PAY_PER_REQUEST"}
    if throughput is not None:
        read, write = throughput
        billing = {
            "ProvisionedThroughput": {"ReadCapacityUnits": read, "WriteCapacityUnits": write}
        }
    client.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": attr, "KeyType": kind} for (attr, _), kind in keys],
        AttributeDefinitions=[
            {"AttributeName": attr, "AttributeType": type_} for (attr, type_), _ in keys
        ],
        **billing,
    )
    wait_active(client, name)
    return name


@pytest.fixture(scope="session")
def create_table() -> Callable[..., str]:
    """Creates a table and waits for ACTIVE:
    `create_table(dynamodb, name, hash_key=("pk", "S"), range_key=("sk", "N"))`."""
    return create_active_table


def stored_catalog(nodes: list[StorageNode]) -> dict[str, Any]:
    """The catalog as the cluster stores it, read by a router context of the test's own from the
    system table the nodes' bootstrap record names: `{"tables": {name: descriptor},
    "catalog_node": node id}`."""

    async def read() -> dict[str, Any]:
        ctx = RouterContext({node.node_id: node.address for node in nodes}, "test")
        try:
            await ctx.refresh()
            tables = {name: record.to_json() for name, record in ctx.records.items()}
            return {"tables": tables, "catalog_node": ctx.catalog_node}
        finally:
            await ctx.close()

    return asyncio.run(read())
