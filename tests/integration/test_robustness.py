"""No request, however malformed, makes the router answer 500 or any process crash.

Hypothesis takes a valid request of every operation and mutates it: a member replaced by random
JSON, removed, or a random member added, at any depth. Each mutant goes to the router as raw HTTP.
Every answer must be a success or a DynamoDB-shaped client error (HTTP 400 with a `__type`), and
after the run every process of the cluster must still be running and the table must still answer.
"""

from __future__ import annotations

import copy
import http.client
import json
import random
from collections.abc import Callable
from typing import Any
from urllib.parse import urlparse

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dynalab.cluster import LocalCluster
from tests.integration.conftest import create_active_table, dynamodb_client, error_of

TABLE = "robustness"
HTTP_TIMEOUT_S = 15.0
EXAMPLES = 500
AUTHORIZATION = (
    "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20260101/us-east-1/dynamodb/aws4_request, "
    "SignedHeaders=host;x-amz-date;x-amz-target, Signature=0123456789abcdef"
)

KEY = {"pk": {"S": "a"}, "sk": {"N": "1"}}
ITEM = {**KEY, "n": {"N": "3"}, "l": {"L": [{"S": "x"}, {"M": {"b": {"BOOL": True}}}]}}
VALID: list[tuple[str, dict[str, Any]]] = [
    ("PutItem", {"TableName": TABLE, "Item": ITEM, "ReturnValues": "ALL_OLD"}),
    (
        "PutItem",
        {
            "TableName": TABLE,
            "Item": ITEM,
            "ConditionExpression": "attribute_not_exists(#n) OR n < :v",
            "ExpressionAttributeNames": {"#n": "n"},
            "ExpressionAttributeValues": {":v": {"N": "10"}},
        },
    ),
    ("GetItem", {"TableName": TABLE, "Key": KEY, "ProjectionExpression": "n, l[1].b"}),
    (
        "UpdateItem",
        {
            "TableName": TABLE,
            "Key": KEY,
            "UpdateExpression": "SET n = n + :one, l = list_append(l, :l) REMOVE x",
            "ExpressionAttributeValues": {":one": {"N": "1"}, ":l": {"L": [{"NULL": True}]}},
            "ReturnValues": "UPDATED_NEW",
        },
    ),
    (
        "UpdateItem",
        {
            "TableName": TABLE,
            "Key": KEY,
            "AttributeUpdates": {"s": {"Action": "ADD", "Value": {"SS": ["q"]}}},
            "Expected": {"n": {"ComparisonOperator": "GE", "AttributeValueList": [{"N": "0"}]}},
        },
    ),
    ("DeleteItem", {"TableName": TABLE, "Key": {"pk": {"S": "b"}, "sk": {"N": "2"}}}),
    (
        "Query",
        {
            "TableName": TABLE,
            "KeyConditionExpression": "pk = :p AND sk BETWEEN :a AND :b",
            "FilterExpression": "size(l) > :z",
            "ExpressionAttributeValues": {
                ":p": {"S": "a"},
                ":a": {"N": "0"},
                ":b": {"N": "9"},
                ":z": {"N": "0"},
            },
            "Limit": 5,
            "ScanIndexForward": False,
        },
    ),
    ("Scan", {"TableName": TABLE, "Segment": 1, "TotalSegments": 3, "Select": "COUNT"}),
    (
        "BatchGetItem",
        {"RequestItems": {TABLE: {"Keys": [KEY], "ConsistentRead": True}}},
    ),
    (
        "BatchWriteItem",
        {
            "RequestItems": {
                TABLE: [
                    {"PutRequest": {"Item": {**KEY, "sk": {"N": "5"}}}},
                    {"DeleteRequest": {"Key": {"pk": {"S": "c"}, "sk": {"N": "1"}}}},
                ]
            }
        },
    ),
    ("DescribeTable", {"TableName": TABLE}),
    ("ListTables", {"Limit": 3}),
    (
        "CreateTable",
        {
            "TableName": "robustness-new",
            "KeySchema": [{"AttributeName": "k", "KeyType": "HASH"}],
            "AttributeDefinitions": [{"AttributeName": "k", "AttributeType": "B"}],
            "ProvisionedThroughput": {"ReadCapacityUnits": 1, "WriteCapacityUnits": 1},
        },
    ),
]

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
    | st.sampled_from(["S", "N", "B", "M", "L", "SS", "NS", "BS", "NULL", "BOOL", "1e400", ""]),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.sampled_from(["S", "N", "B", "M", "L", "SS", "NS", "BS", "NULL", "BOOL", "pk", "sk"])
            | st.text(max_size=6),
            children,
            max_size=4,
        )
    ),
    max_leaves=12,
)


def _containers(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Paths of every dict and list inside value (value itself included)."""
    found: list[tuple[Any, ...]] = []
    if isinstance(value, dict | list):
        found.append(path)
        members = value.items() if isinstance(value, dict) else enumerate(value)
        for key, child in members:
            found.extend(_containers(child, (*path, key)))
    return found


def _mutate(body: dict[str, Any], rng: random.Random, replacement: Any) -> dict[str, Any]:
    mutant = copy.deepcopy(body)
    path = rng.choice(_containers(mutant))
    target: Any = mutant
    for step in path:
        target = target[step]
    if isinstance(target, dict):
        keys = list(target)
        action = rng.choice(["replace", "remove", "add"]) if keys else "add"
        if action == "replace":
            target[rng.choice(keys)] = replacement
        elif action == "remove":
            del target[rng.choice(keys)]
        else:
            target[rng.choice(["Limit", "Select", "Key", "Item", "S", "N", "zz"])] = replacement
    elif target:
        target[rng.randrange(len(target))] = replacement
    else:
        target.append(replacement)
    return mutant


def _post(url: str, operation: str, payload: bytes) -> tuple[int, bytes]:
    parsed = urlparse(url)
    connection = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=HTTP_TIMEOUT_S)
    try:
        connection.request(
            "POST",
            "/",
            body=payload,
            headers={
                "Content-Type": "application/x-amz-json-1.0",
                "X-Amz-Target": f"DynamoDB_20120810.{operation}",
                "X-Amz-Date": "20260101T000000Z",
                "Authorization": AUTHORIZATION,
            },
        )
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def _check_reply(status: int, body: bytes, what: str) -> None:
    assert status in (200, 400, 413), f"{what} -> HTTP {status}: {body[:300]!r}"
    if status == 400:
        error = json.loads(body)
        text = error.get("message", error.get("Message"))
        # Only a body that is no JSON at all gets DynamoDB's SerializationException without text.
        untexted = error["__type"] == "com.amazon.coral.service#SerializationException"
        assert error["__type"].split("#")[-1] and (text is not None or untexted), error


@pytest.fixture(scope="module")
def robust_cluster(cluster: LocalCluster) -> LocalCluster:
    create_active_table(dynamodb_client(cluster.router_url), TABLE, ("pk", "S"), ("sk", "N"))
    return cluster


def test_every_valid_base_request_succeeds(robust_cluster: LocalCluster) -> None:
    for operation, body in VALID:
        status, reply = _post(robust_cluster.router_url, operation, json.dumps(body).encode())
        # UpdateItem with Expected may fail its condition before n exists; any 400 must still be
        # well formed, and the plain forms must succeed.
        _check_reply(status, reply, operation)


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    base=st.sampled_from(VALID),
    seed=st.integers(min_value=0, max_value=2**32),
    replacement=json_values,
    mutations=st.integers(min_value=1, max_value=3),
)
def test_mutated_requests_get_dynamodb_shaped_answers(
    robust_cluster: LocalCluster,
    base: tuple[str, dict[str, Any]],
    seed: int,
    replacement: Any,
    mutations: int,
) -> None:
    operation, body = base
    rng = random.Random(seed)
    mutant = body
    for _ in range(mutations):
        mutant = _mutate(mutant, rng, replacement)
    status, reply = _post(robust_cluster.router_url, operation, json.dumps(mutant).encode())
    _check_reply(status, reply, f"{operation} {json.dumps(mutant)[:400]}")


@pytest.mark.parametrize(
    "payload",
    [b"", b"{", b"[]", b"null", b'"x"', b"\xff\xfe", b'{"TableName": "a"' * 1000, b"{}" * 10],
    ids=["empty", "truncated", "array", "null", "string", "not-utf8", "garbage", "two-objects"],
)
@pytest.mark.parametrize("operation", ["PutItem", "Query", "CreateTable", "BatchWriteItem"])
def test_malformed_bodies(robust_cluster: LocalCluster, operation: str, payload: bytes) -> None:
    status, reply = _post(robust_cluster.router_url, operation, payload)
    _check_reply(status, reply, f"{operation} {payload[:40]!r}")


@pytest.mark.parametrize(
    "value",
    [{"L": [{"S": "a"}]}, {"M": {"a": {"S": "a"}}}, {"SS": ["a", "b"]}],
    ids=["list", "map", "set"],
)
def test_batch_get_item_with_a_document_or_a_set_in_a_key_is_refused(
    robust_cluster: LocalCluster, dynamodb_for: Callable[[str], Any], value: dict[str, Any]
) -> None:
    # It answered 500: the batch's duplicate check hashed each key's values, and a list, a map
    # or a set is not hashable. The key's schema check refuses it, as DynamoDB does.
    client = dynamodb_for(robust_cluster.router_url)
    keys = [{"pk": value, "sk": {"N": "1"}}, KEY]
    assert error_of(lambda: client.batch_get_item(RequestItems={TABLE: {"Keys": keys}})) == (
        400,
        "ValidationException",
        "The provided key element does not match the schema",
    )


def test_cluster_is_whole_after_the_fuzz(
    robust_cluster: LocalCluster, dynamodb_for: Callable[[str], Any]
) -> None:
    assert all(service.is_running() for service in robust_cluster.services())
    client = dynamodb_for(robust_cluster.router_url)
    assert client.describe_table(TableName=TABLE)["Table"]["TableStatus"] == "ACTIVE"
    client.put_item(TableName=TABLE, Item={"pk": {"S": "after"}, "sk": {"N": "0"}})
    assert client.get_item(TableName=TABLE, Key={"pk": {"S": "after"}, "sk": {"N": "0"}})["Item"]
