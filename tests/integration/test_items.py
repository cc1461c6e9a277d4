"""Item operations against a real cluster (three nodes, two routers), through boto3.

PutItem, GetItem, UpdateItem and DeleteItem with conditions and every ReturnValues, the legacy
parameters they still accept, BatchGetItem and BatchWriteItem across tables, the 16 MB BatchGetItem
reply cap, and batches that meet a killed storage node: the keys it holds come back unprocessed
while the others are served.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from core import keycodec, limits
from core.catalog import PartitionDef
from core.placement import PartitionMap
from dynalab.cluster import LocalCluster, StorageNode
from tests.integration.conftest import (
    REGION,
    create_active_table,
    error_of,
    error_response,
    error_summary,
    stored_catalog,
)

SORT_KEY = ("sk", "N")
# How long a restarted node may take before the router's client reconnects to it.
RECONNECT_S = 30.0


@pytest.fixture
def table(dynamodb: Any, table_name: Callable[[], str]) -> str:
    """A table keyed pk (S) and sk (N)."""
    return create_active_table(dynamodb, table_name(), range_key=SORT_KEY)


def key(pk: str, sk: int) -> dict[str, Any]:
    return {"pk": {"S": pk}, "sk": {"N": str(sk)}}


# PutItem and GetItem ---------------------------------------------------------------------------


def test_put_and_get_every_attribute_type(dynamodb: Any, table: str) -> None:
    item = {
        **key("types", 1),
        "s": {"S": "text ✓"},
        "n": {"N": "-12.50"},
        # boto3 takes and returns raw bytes and does the base64 of the wire itself.
        "b": {"B": b"\x00\x01bytes"},
        "bool": {"BOOL": False},
        "null": {"NULL": True},
        "m": {"M": {"inner": {"L": [{"S": "x"}, {"N": "1"}]}}},
        "l": {"L": [{"BOOL": True}, {"M": {}}]},
        "ss": {"SS": ["a", "b"]},
        "ns": {"NS": ["1", "2.5"]},
        "bs": {"BS": [b"x", b"\xff"]},
        "empty_s": {"S": ""},
        "empty_b": {"B": b""},
    }
    assert "Attributes" not in dynamodb.put_item(TableName=table, Item=item)
    got = dynamodb.get_item(TableName=table, Key=key("types", 1), ConsistentRead=True)["Item"]
    # Numbers come back in canonical form; everything else exactly as written.
    assert got == {**item, "n": {"N": "-12.5"}}


def test_put_replaces_the_whole_item_and_returns_the_old_one(dynamodb: Any, table: str) -> None:
    first = {**key("p", 1), "a": {"S": "1"}, "b": {"S": "2"}}
    second = {**key("p", 1), "c": {"S": "3"}}
    created = dynamodb.put_item(TableName=table, Item=first, ReturnValues="ALL_OLD")
    assert "Attributes" not in created
    replaced = dynamodb.put_item(TableName=table, Item=second, ReturnValues="ALL_OLD")
    assert replaced["Attributes"] == first
    assert dynamodb.get_item(TableName=table, Key=key("p", 1))["Item"] == second
    assert "Attributes" not in dynamodb.put_item(TableName=table, Item=first, ReturnValues="NONE")


def test_get_missing_item_has_no_item(dynamodb: Any, table: str) -> None:
    reply = dynamodb.get_item(TableName=table, Key=key("absent", 1), ConsistentRead=True)
    assert "Item" not in reply


def test_get_with_projection_and_attributes_to_get(dynamodb: Any, table: str) -> None:
    item = {
        **key("proj", 1),
        "name": {"S": "n"},
        "size": {"N": "3"},
        "deep": {"M": {"a": {"L": [{"S": "x"}, {"S": "y"}]}, "b": {"S": "z"}}},
    }
    dynamodb.put_item(TableName=table, Item=item)
    projected = dynamodb.get_item(
        TableName=table,
        Key=key("proj", 1),
        ProjectionExpression="#n, deep.a[1], #s",
        ExpressionAttributeNames={"#n": "name", "#s": "size"},
    )["Item"]
    assert projected == {
        "name": {"S": "n"},
        "size": {"N": "3"},
        "deep": {"M": {"a": {"L": [{"S": "y"}]}}},
    }
    legacy = dynamodb.get_item(
        TableName=table, Key=key("proj", 1), AttributesToGet=["pk", "size", "nothing"]
    )["Item"]
    assert legacy == {"pk": {"S": "proj"}, "size": {"N": "3"}}
    # A projection that matches none of the item's attributes still finds the item.
    nothing = dynamodb.get_item(TableName=table, Key=key("proj", 1), ProjectionExpression="x")
    assert nothing["Item"] == {}


def test_empty_strings_and_binaries_are_values_but_not_keys(dynamodb: Any, table: str) -> None:
    dynamodb.put_item(TableName=table, Item={**key("e", 1), "s": {"S": ""}, "b": {"B": b""}})
    assert dynamodb.get_item(TableName=table, Key=key("e", 1))["Item"]["s"] == {"S": ""}
    status, code, message = error_of(
        lambda: dynamodb.put_item(TableName=table, Item={"pk": {"S": ""}, "sk": {"N": "1"}})
    )
    assert (status, code) == (400, "ValidationException")
    assert message == (
        "One or more parameter values are not valid. The AttributeValue for a key attribute "
        "cannot contain an empty string value. Key: pk"
    )


def test_item_size_limit(dynamodb: Any, table: str) -> None:
    # pk "big" (2 + 3) + sk 1 (2 + 2) + name "v" (1): the value fills the item to the byte.
    overhead = len("pk") + len("big") + len("sk") + 2 + len("v")
    fits = {**key("big", 1), "v": {"S": "x" * (limits.ITEM_SIZE_BYTES_MAX - overhead)}}
    dynamodb.put_item(TableName=table, Item=fits)
    assert dynamodb.get_item(TableName=table, Key=key("big", 1))["Item"] == fits
    too_big = {**key("big", 2), "v": {"S": "x" * (limits.ITEM_SIZE_BYTES_MAX - overhead + 1)}}
    status, code, message = error_of(lambda: dynamodb.put_item(TableName=table, Item=too_big))
    assert (status, code, message) == (
        400,
        "ValidationException",
        "Item size has exceeded the maximum allowed size",
    )
    assert "Item" not in dynamodb.get_item(TableName=table, Key=key("big", 2))


def test_return_consumed_capacity_reports_units(dynamodb: Any, table: str) -> None:
    # The shapes of every operation are in test_capacity.py; this is the smoke test.
    reply = dynamodb.put_item(TableName=table, Item=key("cap", 1), ReturnConsumedCapacity="TOTAL")
    assert reply["ConsumedCapacity"] == {"TableName": table, "CapacityUnits": 1.0}
    reply = dynamodb.get_item(TableName=table, Key=key("cap", 1), ReturnConsumedCapacity="INDEXES")
    assert reply["Item"] == key("cap", 1)
    assert reply["ConsumedCapacity"] == {
        "TableName": table,
        "CapacityUnits": 0.5,
        "Table": {"CapacityUnits": 0.5},
    }
    reply = dynamodb.get_item(TableName=table, Key=key("cap", 1), ReturnConsumedCapacity="NONE")
    assert "ConsumedCapacity" not in reply


# Conditions --------------------------------------------------------------------------------------


def test_condition_expression_on_put(dynamodb: Any, table: str) -> None:
    item = {**key("c", 1), "v": {"N": "1"}}
    dynamodb.put_item(TableName=table, Item=item, ConditionExpression="attribute_not_exists(pk)")
    response = error_response(
        lambda: dynamodb.put_item(
            TableName=table,
            Item={**key("c", 1), "v": {"N": "2"}},
            ConditionExpression="attribute_not_exists(pk)",
        )
    )
    assert error_summary(response) == (
        400,
        "ConditionalCheckFailedException",
        "The conditional request failed",
    )
    assert "Item" not in response
    assert dynamodb.get_item(TableName=table, Key=key("c", 1))["Item"] == item
    dynamodb.put_item(
        TableName=table,
        Item={**key("c", 1), "v": {"N": "3"}},
        ConditionExpression="v = :one",
        ExpressionAttributeValues={":one": {"N": "1"}},
    )
    assert dynamodb.get_item(TableName=table, Key=key("c", 1))["Item"]["v"] == {"N": "3"}


def test_return_values_on_condition_check_failure(dynamodb: Any, table: str) -> None:
    item = {**key("f", 1), "v": {"S": "old"}}
    dynamodb.put_item(TableName=table, Item=item)
    for call in (
        lambda: dynamodb.put_item(
            TableName=table,
            Item=key("f", 1),
            ConditionExpression="attribute_not_exists(pk)",
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        ),
        lambda: dynamodb.update_item(
            TableName=table,
            Key=key("f", 1),
            UpdateExpression="SET v = :n",
            ConditionExpression="v = :n",
            ExpressionAttributeValues={":n": {"S": "new"}},
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        ),
        lambda: dynamodb.delete_item(
            TableName=table,
            Key=key("f", 1),
            ConditionExpression="attribute_not_exists(v)",
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        ),
    ):
        response = error_response(call)
        assert response["Error"]["Code"] == "ConditionalCheckFailedException"
        assert response["Item"] == item
    # A missing item has nothing to return.
    response = error_response(
        lambda: dynamodb.delete_item(
            TableName=table,
            Key=key("f", 2),
            ConditionExpression="attribute_exists(pk)",
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )
    )
    assert response["Error"]["Code"] == "ConditionalCheckFailedException"
    assert "Item" not in response


def test_legacy_expected(dynamodb: Any, table: str) -> None:
    dynamodb.put_item(TableName=table, Item=key("x", 1), Expected={"pk": {"Exists": False}})
    _, code, _ = error_of(
        lambda: dynamodb.put_item(
            TableName=table, Item=key("x", 1), Expected={"pk": {"Exists": False}}
        )
    )
    assert code == "ConditionalCheckFailedException"
    dynamodb.put_item(TableName=table, Item={**key("x", 1), "n": {"N": "5"}})
    dynamodb.delete_item(
        TableName=table,
        Key=key("x", 1),
        Expected={
            "n": {"ComparisonOperator": "GT", "AttributeValueList": [{"N": "9"}]},
            "pk": {"Value": {"S": "x"}},
        },
        ConditionalOperator="OR",
    )
    assert "Item" not in dynamodb.get_item(TableName=table, Key=key("x", 1))


# UpdateItem --------------------------------------------------------------------------------------


def test_update_creates_the_item_and_returns_every_image(dynamodb: Any, table: str) -> None:
    created = dynamodb.update_item(
        TableName=table,
        Key=key("u", 1),
        UpdateExpression="SET a = :a, b = :b",
        ExpressionAttributeValues={":a": {"N": "1"}, ":b": {"S": "x"}},
        ReturnValues="ALL_NEW",
    )
    assert created["Attributes"] == {**key("u", 1), "a": {"N": "1"}, "b": {"S": "x"}}
    updated_old = dynamodb.update_item(
        TableName=table,
        Key=key("u", 1),
        UpdateExpression="ADD a :inc",
        ExpressionAttributeValues={":inc": {"N": "2"}},
        ReturnValues="UPDATED_OLD",
    )
    assert updated_old["Attributes"] == {"a": {"N": "1"}}
    updated_new = dynamodb.update_item(
        TableName=table,
        Key=key("u", 1),
        UpdateExpression="SET #b = :c REMOVE a",
        ExpressionAttributeNames={"#b": "b"},
        ExpressionAttributeValues={":c": {"S": "y"}},
        ReturnValues="UPDATED_NEW",
    )
    assert updated_new["Attributes"] == {"b": {"S": "y"}}
    all_old = dynamodb.update_item(
        TableName=table,
        Key=key("u", 1),
        UpdateExpression="SET s = :s",
        ExpressionAttributeValues={":s": {"SS": ["p", "q"]}},
        ReturnValues="ALL_OLD",
    )
    assert all_old["Attributes"] == {**key("u", 1), "b": {"S": "y"}}
    none = dynamodb.update_item(
        TableName=table,
        Key=key("u", 1),
        UpdateExpression="DELETE s :p",
        ExpressionAttributeValues={":p": {"SS": ["p"]}},
    )
    assert "Attributes" not in none
    final = dynamodb.get_item(TableName=table, Key=key("u", 1), ConsistentRead=True)["Item"]
    assert final == {**key("u", 1), "b": {"S": "y"}, "s": {"SS": ["q"]}}


def test_update_without_an_update_creates_the_key(dynamodb: Any, table: str) -> None:
    dynamodb.update_item(TableName=table, Key=key("bare", 1))
    assert dynamodb.get_item(TableName=table, Key=key("bare", 1))["Item"] == key("bare", 1)


def test_update_may_not_touch_the_key(dynamodb: Any, table: str) -> None:
    status, code, message = error_of(
        lambda: dynamodb.update_item(
            TableName=table,
            Key=key("k", 1),
            UpdateExpression="SET sk = :v",
            ExpressionAttributeValues={":v": {"N": "2"}},
        )
    )
    assert (status, code) == (400, "ValidationException")
    assert message == (
        "One or more parameter values were invalid: Cannot update attribute sk. "
        "This attribute is part of the key"
    )


def test_legacy_attribute_updates(dynamodb: Any, table: str) -> None:
    dynamodb.put_item(
        TableName=table, Item={**key("lu", 1), "gone": {"S": "x"}, "set": {"SS": ["a", "b"]}}
    )
    reply = dynamodb.update_item(
        TableName=table,
        Key=key("lu", 1),
        AttributeUpdates={
            "name": {"Value": {"S": "n"}, "Action": "PUT"},
            "count": {"Value": {"N": "3"}, "Action": "ADD"},
            "gone": {"Action": "DELETE"},
            "set": {"Value": {"SS": ["a"]}, "Action": "DELETE"},
        },
        Expected={"gone": {"Exists": True, "Value": {"S": "x"}}},
        ReturnValues="ALL_NEW",
    )
    assert reply["Attributes"] == {
        **key("lu", 1),
        "name": {"S": "n"},
        "count": {"N": "3"},
        "set": {"SS": ["b"]},
    }


# DeleteItem --------------------------------------------------------------------------------------


def test_delete_returns_the_old_item(dynamodb: Any, table: str) -> None:
    item = {**key("d", 1), "v": {"BOOL": True}}
    dynamodb.put_item(TableName=table, Item=item)
    assert (
        dynamodb.delete_item(TableName=table, Key=key("d", 1), ReturnValues="ALL_OLD")["Attributes"]
        == item
    )
    assert "Item" not in dynamodb.get_item(TableName=table, Key=key("d", 1))
    # Deleting what is not there succeeds and returns nothing.
    assert "Attributes" not in dynamodb.delete_item(
        TableName=table, Key=key("d", 1), ReturnValues="ALL_OLD"
    )


def test_writes_through_one_router_are_read_through_the_other(
    cluster: LocalCluster, dynamodb: Any, dynamodb_for: Callable[[str], Any], table: str
) -> None:
    other = dynamodb_for(cluster.router_urls[1])
    dynamodb.put_item(TableName=table, Item={**key("r", 1), "v": {"S": "one"}})
    assert other.get_item(TableName=table, Key=key("r", 1), ConsistentRead=True)["Item"]["v"] == {
        "S": "one"
    }


# Batches -----------------------------------------------------------------------------------------


def test_batch_write_and_get_across_tables(
    dynamodb: Any, table: str, table_name: Callable[[], str]
) -> None:
    hash_only = create_active_table(dynamodb, table_name())
    reply = dynamodb.batch_write_item(
        RequestItems={
            table: [
                {"PutRequest": {"Item": {**key("b", i), "v": {"N": str(i)}}}} for i in range(20)
            ],
            hash_only: [{"PutRequest": {"Item": {"pk": {"S": f"h{i}"}}}} for i in range(5)],
        }
    )
    assert reply["UnprocessedItems"] == {}
    reply = dynamodb.batch_write_item(
        RequestItems={
            table: [{"DeleteRequest": {"Key": key("b", i)}} for i in range(10)],
            hash_only: [{"DeleteRequest": {"Key": {"pk": {"S": "h0"}}}}],
        }
    )
    assert reply["UnprocessedItems"] == {}
    got = dynamodb.batch_get_item(
        RequestItems={
            table: {
                "Keys": [key("b", i) for i in range(20)],
                "ProjectionExpression": "sk, #v",
                "ExpressionAttributeNames": {"#v": "v"},
                "ConsistentRead": True,
            },
            hash_only: {
                "Keys": [{"pk": {"S": f"h{i}"}} for i in range(5)],
                "AttributesToGet": ["pk"],
            },
        }
    )
    assert got["UnprocessedKeys"] == {}
    assert sorted(int(item["sk"]["N"]) for item in got["Responses"][table]) == list(range(10, 20))
    assert all(item["v"] == item["sk"] for item in got["Responses"][table])
    assert sorted(item["pk"]["S"] for item in got["Responses"][hash_only]) == [
        "h1",
        "h2",
        "h3",
        "h4",
    ]


def test_batch_get_of_missing_keys_has_an_empty_list(dynamodb: Any, table: str) -> None:
    got = dynamodb.batch_get_item(RequestItems={table: {"Keys": [key("none", 1)]}})
    assert got["Responses"] == {table: []}
    assert got["UnprocessedKeys"] == {}


def test_invalid_batch_writes_nothing(dynamodb: Any, table: str) -> None:
    requests = [{"PutRequest": {"Item": key("inv", i)}} for i in range(3)]
    requests.append({"PutRequest": {"Item": {"pk": {"S": "inv"}, "sk": {"S": "not a number"}}}})
    status, code, message = error_of(
        lambda: dynamodb.batch_write_item(RequestItems={table: requests})
    )
    assert (status, code, message) == (
        400,
        "ValidationException",
        "The provided key element does not match the schema",
    )
    got = dynamodb.batch_get_item(RequestItems={table: {"Keys": [key("inv", i) for i in range(3)]}})
    assert got["Responses"][table] == []


def test_batch_get_reply_is_capped_at_16_mb(dynamodb: Any, table: str) -> None:
    # 50 items of almost 400 KB are about 20 MB: one reply cannot carry them all.
    value = "v" * (limits.ITEM_SIZE_BYTES_MAX - 100)
    keys = [key("large", i) for i in range(50)]
    for chunk in range(0, len(keys), 5):
        dynamodb.batch_write_item(
            RequestItems={
                table: [
                    {"PutRequest": {"Item": {**k, "v": {"S": value}}}}
                    for k in keys[chunk : chunk + 5]
                ]
            }
        )
    first = dynamodb.batch_get_item(RequestItems={table: {"Keys": keys, "ConsistentRead": True}})
    served = first["Responses"][table]
    left = first["UnprocessedKeys"][table]
    assert left["ConsistentRead"] is True
    assert (
        len(served) * limits.ITEM_SIZE_BYTES_MAX
        >= limits.BATCH_GET_BYTES_MAX - limits.ITEM_SIZE_BYTES_MAX
    )
    assert sum(len(item["v"]["S"]) for item in served) <= limits.BATCH_GET_BYTES_MAX
    got = {item["sk"]["N"] for item in served}
    pending = {"RequestItems": {table: left}}
    for _ in range(len(keys)):
        reply = dynamodb.batch_get_item(**pending)
        got |= {item["sk"]["N"] for item in reply["Responses"][table]}
        if not reply["UnprocessedKeys"]:
            break
        pending = {"RequestItems": reply["UnprocessedKeys"]}
    assert got == {str(i) for i in range(50)}


# A storage node goes away ---------------------------------------------------------------------


def _catalog(cluster: LocalCluster) -> dict[str, Any]:
    """The catalog as the cluster stores it, with the node that holds it as "holder"."""
    catalog = stored_catalog(cluster.nodes)
    catalog["holder"] = catalog["catalog_node"]
    return catalog


@pytest.fixture
def stopped_node(
    cluster: LocalCluster, dynamodb: Any, table_name: Callable[[], str]
) -> Iterator[tuple[str, StorageNode, PartitionMap[PartitionDef]]]:
    """A table with partitions on a node that is then killed, restarted after the test.

    The victim hosts some of the table's partitions but not the catalog, so the routers still
    know every table.
    """
    for _ in range(10):
        name = create_active_table(dynamodb, table_name(), range_key=SORT_KEY)
        catalog = _catalog(cluster)
        partitions = catalog["tables"][name]["partitions"]
        hosts = {partition["node"] for partition in partitions} - {catalog["holder"]}
        if hosts and len({partition["node"] for partition in partitions}) > 1:
            break
    else:
        pytest.fail("no table got partitions on two nodes, one of them not the catalog's")
    victim = cluster.node(sorted(hosts)[0])
    victim.kill()
    try:
        yield name, victim, PartitionMap(map(PartitionDef.from_json, partitions))
    finally:
        victim.start()
        deadline = time.monotonic() + RECONNECT_S
        while True:
            try:
                dynamodb.scan(TableName=name, Limit=1000)
                break
            except ClientError:
                assert time.monotonic() < deadline, "the restarted node was not reachable again"
                time.sleep(0.2)


def _on_node(
    partition_map: PartitionMap[PartitionDef], item_key: dict[str, Any], node_id: str
) -> bool:
    storage_key = keycodec.encode_storage_key(item_key["pk"], item_key["sk"])
    return partition_map.lookup(storage_key).node == node_id


def test_batches_leave_the_keys_of_a_dead_node_unprocessed(
    dynamodb: Any, stopped_node: tuple[str, StorageNode, PartitionMap[PartitionDef]]
) -> None:
    name, victim, partition_map = stopped_node
    keys = [key(f"dead{i}", i) for i in range(25)]
    lost = [k for k in keys if _on_node(partition_map, k, victim.node_id)]
    served = [k for k in keys if k not in lost]
    assert lost and served, "the keys should fall on both live and dead partitions"

    written = dynamodb.batch_write_item(
        RequestItems={name: [{"PutRequest": {"Item": k}} for k in keys]}
    )
    unprocessed = written["UnprocessedItems"][name]
    assert sorted(u["PutRequest"]["Item"]["pk"]["S"] for u in unprocessed) == sorted(
        k["pk"]["S"] for k in lost
    )

    got = dynamodb.batch_get_item(RequestItems={name: {"Keys": keys, "ConsistentRead": True}})
    assert sorted(item["pk"]["S"] for item in got["Responses"][name]) == sorted(
        k["pk"]["S"] for k in served
    )
    assert got["UnprocessedKeys"][name]["ConsistentRead"] is True
    assert sorted(k["pk"]["S"] for k in got["UnprocessedKeys"][name]["Keys"]) == sorted(
        k["pk"]["S"] for k in lost
    )
    # Named by its ARN, the table's unprocessed keys come back under the ARN, as requested
    # (API Reference, BatchGetItem: "a map of table name or table ARN to a list of items").
    arn = f"arn:aws:dynamodb:{REGION}:000000000000:table/{name}"
    written = dynamodb.batch_write_item(
        RequestItems={arn: [{"PutRequest": {"Item": k}} for k in keys]}
    )
    assert list(written["UnprocessedItems"]) == [arn]
    assert sorted(u["PutRequest"]["Item"]["pk"]["S"] for u in written["UnprocessedItems"][arn]) == (
        sorted(k["pk"]["S"] for k in lost)
    )
    got = dynamodb.batch_get_item(RequestItems={arn: {"Keys": keys}})
    assert list(got["Responses"]) == [arn] and list(got["UnprocessedKeys"]) == [arn]
    assert sorted(k["pk"]["S"] for k in got["UnprocessedKeys"][arn]["Keys"]) == sorted(
        k["pk"]["S"] for k in lost
    )
    # A single-item request for a key on the dead node fails as retryable, not as a bug.
    status, code, _ = error_of(lambda: dynamodb.get_item(TableName=name, Key=lost[0]))
    assert (status, code) == (503, "ServiceUnavailable")
