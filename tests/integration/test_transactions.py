"""TransactWriteItems and TransactGetItems against a real cluster (three nodes, two routers),
through boto3: items on partitions of different nodes changed all or none, DynamoDB's
cancellation reasons and messages, ClientRequestToken idempotency, prepared items refusing
single-item writes, ConsumedCapacity, and validation."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest

from core import keycodec, limits
from core import transactions as txn
from core.catalog import PartitionDef
from core.placement import PartitionMap
from dynalab.cluster import LocalCluster
from rpc import ops
from rpc.client import NodeClient
from rpc.transactions import TxnPreparePayload, TxnRecordPayload
from tests.integration.conftest import (
    create_active_table,
    error_of,
    error_response,
    stored_catalog,
)

SPREAD_TABLE_ATTEMPTS = 10
# A decided record left unfinished is applied by a resolver once it is this old, at the next sweep;
# with a margin for a loaded machine.
RESOLVED_SECONDS_MAX = (
    limits.TRANSACTION_RESOLVE_SECONDS + 2 * limits.TRANSACTION_RESOLVE_INTERVAL_SECONDS + 10.0
)


@pytest.fixture
def table(dynamodb: Any, table_name: Callable[[], str], cluster: LocalCluster) -> str:
    """An on-demand table keyed pk (S) whose four partitions are on at least two nodes: the ring
    places each partition by its (random) id, and now and then puts all four on one node, in
    which case another table is made."""
    for _ in range(SPREAD_TABLE_ATTEMPTS):
        name = create_active_table(dynamodb, table_name())
        partitions = stored_catalog(cluster.nodes)["tables"][name]["partitions"]
        if len({partition["node"] for partition in partitions}) >= 2:
            return name
    raise AssertionError(f"{SPREAD_TABLE_ATTEMPTS} tables in a row were placed on one node")


def key(pk: str) -> dict[str, Any]:
    return {"pk": {"S": pk}}


def put(table: str, pk: str, **attributes: Any) -> dict[str, Any]:
    return {"Put": {"TableName": table, "Item": {**key(pk), **attributes}}}


def balance(dynamodb: Any, table: str, pk: str) -> int | None:
    item = dynamodb.get_item(TableName=table, Key=key(pk), ConsistentRead=True).get("Item")
    return None if item is None else int(item["balance"]["N"])


def _holding(record: dict[str, Any], storage_key: bytes) -> dict[str, Any]:
    """The PARTITION document of the table `record` that holds `storage_key`."""
    return next(p for p in record["partitions"] if PartitionDef.from_json(p).holds(storage_key))


def keys_on_distinct_nodes(cluster: LocalCluster, table: str, count: int) -> list[str]:
    """Partition key values whose items live on `count` different nodes."""
    record = stored_catalog(cluster.nodes)["tables"][table]
    partition_map = PartitionMap(map(PartitionDef.from_json, record["partitions"]))
    chosen: dict[str, str] = {}
    for number in range(1000):
        pk = f"account-{number}"
        storage_key = keycodec.encode_storage_key({"S": pk}, None)
        node = partition_map.lookup(storage_key).node
        chosen.setdefault(node, pk)
        if len(chosen) == count:
            return list(chosen.values())
    raise AssertionError(f"the table's partitions are on fewer than {count} nodes")


def transfer(table: str, source: str, target: str, amount: int) -> list[dict[str, Any]]:
    return [
        {
            "Update": {
                "TableName": table,
                "Key": key(source),
                "UpdateExpression": "SET balance = balance - :a",
                "ConditionExpression": "balance >= :a",
                "ExpressionAttributeValues": {":a": {"N": str(amount)}},
            }
        },
        {
            "Update": {
                "TableName": table,
                "Key": key(target),
                "UpdateExpression": "SET balance = balance + :a",
                "ExpressionAttributeValues": {":a": {"N": str(amount)}},
            }
        },
    ]


def test_a_transfer_across_nodes_commits_everywhere(
    dynamodb: Any, cluster: LocalCluster, table: str
) -> None:
    a, b = keys_on_distinct_nodes(cluster, table, 2)
    c = "third"
    dynamodb.transact_write_items(
        TransactItems=[
            put(table, a, balance={"N": "100"}),
            put(table, b, balance={"N": "0"}),
            put(table, c, balance={"N": "5"}),
        ]
    )
    reply = dynamodb.transact_write_items(
        TransactItems=transfer(table, a, b, 30), ReturnConsumedCapacity="TOTAL"
    )
    assert (balance(dynamodb, table, a), balance(dynamodb, table, b)) == (70, 30)
    # Two write units per item of up to 1 KB.
    assert reply["ConsumedCapacity"] == [
        {"TableName": table, "CapacityUnits": 4.0, "WriteCapacityUnits": 4.0}
    ]
    got = dynamodb.transact_get_items(
        TransactItems=[{"Get": {"TableName": table, "Key": key(pk)}} for pk in (a, b, c, "none")],
        ReturnConsumedCapacity="TOTAL",
    )
    assert [int(r["Item"]["balance"]["N"]) if r else None for r in got["Responses"]] == [
        70,
        30,
        5,
        None,
    ]
    assert got["ConsumedCapacity"] == [
        {"TableName": table, "CapacityUnits": 8.0, "ReadCapacityUnits": 8.0}
    ]


def test_a_failed_condition_cancels_every_action(
    dynamodb: Any, cluster: LocalCluster, table: str
) -> None:
    a, b = keys_on_distinct_nodes(cluster, table, 2)
    dynamodb.transact_write_items(
        TransactItems=[put(table, a, balance={"N": "10"}), put(table, b, balance={"N": "0"})]
    )
    items = transfer(table, a, b, 50)
    items[0]["Update"]["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"
    response = error_response(lambda: dynamodb.transact_write_items(TransactItems=items))
    assert response["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert response["Error"]["Code"] == "TransactionCanceledException"
    assert response["Error"]["Message"] == (
        "Transaction cancelled, please refer cancellation reasons for specific reasons "
        "[ConditionalCheckFailed, None]"
    )
    assert response["CancellationReasons"] == [
        {
            "Code": "ConditionalCheckFailed",
            "Message": "The conditional request failed",
            "Item": {"pk": {"S": a}, "balance": {"N": "10"}},
        },
        {"Code": "None"},
    ]
    assert (balance(dynamodb, table, a), balance(dynamodb, table, b)) == (10, 0)
    # Nothing stays locked: both items take single-item writes at once.
    dynamodb.put_item(TableName=table, Item={**key(a), "balance": {"N": "11"}})
    dynamodb.put_item(TableName=table, Item={**key(b), "balance": {"N": "1"}})


def test_condition_check_and_delete(dynamodb: Any, cluster: LocalCluster, table: str) -> None:
    a, b = keys_on_distinct_nodes(cluster, table, 2)
    dynamodb.put_item(TableName=table, Item={**key(a), "open": {"BOOL": True}})
    dynamodb.put_item(TableName=table, Item={**key(b), "balance": {"N": "1"}})
    check = {
        "ConditionCheck": {
            "TableName": table,
            "Key": key(a),
            "ConditionExpression": "#o = :t",
            "ExpressionAttributeNames": {"#o": "open"},
            "ExpressionAttributeValues": {":t": {"BOOL": True}},
        }
    }
    dynamodb.transact_write_items(
        TransactItems=[check, {"Delete": {"TableName": table, "Key": key(b)}}]
    )
    assert balance(dynamodb, table, b) is None
    dynamodb.put_item(TableName=table, Item={**key(a), "open": {"BOOL": False}})
    response = error_response(
        lambda: dynamodb.transact_write_items(TransactItems=[check, put(table, b)])
    )
    assert [r["Code"] for r in response["CancellationReasons"]] == [
        "ConditionalCheckFailed",
        "None",
    ]
    assert "Item" not in response["CancellationReasons"][0]
    assert balance(dynamodb, table, b) is None


def test_client_request_token_is_idempotent(
    dynamodb: Any, dynamodb_for: Callable[[str], Any], cluster: LocalCluster, table: str
) -> None:
    a, b = keys_on_distinct_nodes(cluster, table, 2)
    dynamodb.transact_write_items(
        TransactItems=[put(table, a, balance={"N": "100"}), put(table, b, balance={"N": "0"})]
    )
    token = "transfer-0001"
    dynamodb.transact_write_items(TransactItems=transfer(table, a, b, 10), ClientRequestToken=token)
    # The same request again, through the other router: answered, applied once.
    other = dynamodb_for(cluster.router_urls[1])
    reply = other.transact_write_items(
        TransactItems=transfer(table, a, b, 10),
        ClientRequestToken=token,
        ReturnConsumedCapacity="TOTAL",
    )
    assert reply["ConsumedCapacity"][0]["TableName"] == table
    assert (balance(dynamodb, table, a), balance(dynamodb, table, b)) == (90, 10)
    assert error_of(
        lambda: dynamodb.transact_write_items(
            TransactItems=transfer(table, a, b, 20), ClientRequestToken=token
        )
    ) == (
        400,
        "IdempotentParameterMismatchException",
        "The request uses the same client token as a previous, but non-identical request.",
    )


def test_a_cancelled_token_may_run_again(dynamodb: Any, cluster: LocalCluster, table: str) -> None:
    a, b = keys_on_distinct_nodes(cluster, table, 2)
    dynamodb.put_item(TableName=table, Item={**key(a), "balance": {"N": "5"}})
    dynamodb.put_item(TableName=table, Item={**key(b), "balance": {"N": "0"}})
    items = transfer(table, a, b, 8)
    error_response(
        lambda: dynamodb.transact_write_items(TransactItems=items, ClientRequestToken="again")
    )
    dynamodb.put_item(TableName=table, Item={**key(a), "balance": {"N": "9"}})
    dynamodb.transact_write_items(TransactItems=items, ClientRequestToken="again")
    assert (balance(dynamodb, table, a), balance(dynamodb, table, b)) == (1, 8)


def test_validation_messages(dynamodb: Any, table: str) -> None:
    assert error_of(
        lambda: dynamodb.transact_write_items(
            TransactItems=[put(table, "x"), {"Delete": {"TableName": table, "Key": key("x")}}]
        )
    ) == (
        400,
        "ValidationException",
        "Transaction request cannot include multiple operations on one item",
    )
    both = {**put(table, "y"), "Delete": {"TableName": table, "Key": key("z")}}
    assert error_of(lambda: dynamodb.transact_write_items(TransactItems=[both])) == (
        400,
        "ValidationException",
        "TransactItems can only contain one of Check, Put, Update or Delete",
    )
    status, code, message = error_of(
        lambda: dynamodb.transact_write_items(
            TransactItems=[put(table, f"k{n}") for n in range(101)]
        )
    )
    assert (status, code) == (400, "ValidationException")
    assert message.endswith(
        "at 'transactItems' failed to satisfy constraint: "
        "Member must have length less than or equal to 100"
    )
    assert error_of(lambda: dynamodb.transact_write_items(TransactItems=[])) == (
        400,
        "ValidationException",
        "1 validation error detected: Value '[]' at 'transactItems' failed to satisfy "
        "constraint: Member must have length greater than or equal to 1",
    )
    # An item without its key is the action's own cancellation reason (see below).
    status, code, message = error_of(
        lambda: dynamodb.transact_write_items(
            TransactItems=[{"Put": {"TableName": table, "Item": {"other": {"S": "v"}}}}]
        )
    )
    assert (status, code) == (400, "TransactionCanceledException")
    # An empty key value is the request's: refused whole.
    assert error_of(
        lambda: dynamodb.transact_write_items(
            TransactItems=[put(table, "ok"), {"Delete": {"TableName": table, "Key": key("")}}]
        )
    )[:2] == (400, "ValidationException")
    assert error_of(
        lambda: dynamodb.transact_write_items(TransactItems=[put("no-such-table", "x")])
    ) == (
        400,
        "ResourceNotFoundException",
        "Requested resource not found",
    )
    assert error_of(
        lambda: dynamodb.transact_get_items(
            TransactItems=[{"Get": {"TableName": table, "Key": key("x")}}] * 2
        )
    ) == (
        400,
        "ValidationException",
        "Transaction request cannot include multiple operations on one item",
    )
    # Items a 4 MB transaction cannot hold: eleven of 390 KB. AWS publishes no message for this
    # refusal and none captured from DynamoDB was found: the words are dynalab's.
    big = "x" * (390 * 1024)
    assert error_of(
        lambda: dynamodb.transact_write_items(
            TransactItems=[put(table, f"big{n}", data={"S": big}) for n in range(11)]
        )
    ) == (
        400,
        "ValidationException",
        "Transaction request size has exceeded the maximum allowed size",
    )


def test_each_action_is_cancelled_for_its_own_reason_in_its_place(
    dynamodb: Any, cluster: LocalCluster, table: str
) -> None:
    a, b = keys_on_distinct_nodes(cluster, table, 2)
    dynamodb.put_item(TableName=table, Item={**key(a), "balance": {"N": "10"}})
    items = [
        put(table, b, balance={"N": "1"}),
        # A condition on an item that is not there.
        {
            "ConditionCheck": {
                "TableName": table,
                "Key": key(f"{a}-missing"),
                "ConditionExpression": "attribute_exists(pk)",
            }
        },
        # A key of the wrong type, and an item without its key: each the action's own error.
        {
            "Update": {
                "TableName": table,
                "Key": {"pk": {"N": "5"}},
                "UpdateExpression": "SET v = :v",
                "ExpressionAttributeValues": {":v": {"S": "x"}},
            }
        },
        {"Put": {"TableName": table, "Item": {"pk": {"N": "7"}}}},
        {"Put": {"TableName": table, "Item": {**key(f"{a}-set"), "s": {"SS": ["x", "x"]}}}},
        {
            "Delete": {
                "TableName": table,
                "Key": key(a),
                "ConditionExpression": "balance > :floor",
                "ExpressionAttributeValues": {":floor": {"N": "100"}},
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            }
        },
    ]
    response = error_response(lambda: dynamodb.transact_write_items(TransactItems=items))
    assert response["Error"]["Code"] == "TransactionCanceledException"
    assert response["Error"]["Message"] == (
        "Transaction cancelled, please refer cancellation reasons for specific reasons [None, "
        "ConditionalCheckFailed, ValidationError, ValidationError, ValidationError, "
        "ConditionalCheckFailed]"
    )
    assert response["CancellationReasons"] == [
        {"Code": "None"},
        {"Code": "ConditionalCheckFailed", "Message": "The conditional request failed"},
        {
            "Code": "ValidationError",
            "Message": "The provided key element does not match the schema",
        },
        {
            "Code": "ValidationError",
            "Message": "One or more parameter values were invalid: Type mismatch for key pk "
            "expected: S actual: N",
        },
        {
            "Code": "ValidationError",
            "Message": "One or more parameter values were invalid: Input collection [x, x] "
            "contains duplicates.",
        },
        {
            "Code": "ConditionalCheckFailed",
            "Message": "The conditional request failed",
            "Item": {**key(a), "balance": {"N": "10"}},
        },
    ]
    # Nothing was applied, and nothing stays locked.
    assert "Item" not in dynamodb.get_item(TableName=table, Key=key(b), ConsistentRead=True)
    dynamodb.put_item(TableName=table, Item={**key(a), "balance": {"N": "11"}})
    # Every action refusing itself: cancelled without a participant.
    alone = [{"Put": {"TableName": table, "Item": {"pk": {"B": "AA=="}}}}]
    response = error_response(lambda: dynamodb.transact_write_items(TransactItems=alone))
    assert [r["Code"] for r in response["CancellationReasons"]] == ["ValidationError"]
    # TransactGetItems: a Get whose key does not validate is its reason, an empty one too.
    gets = [
        {"Get": {"TableName": table, "Key": key(a)}},
        {"Get": {"TableName": table, "Key": {"pk": {"N": "1"}}}},
        {"Get": {"TableName": table, "Key": key("")}},
    ]
    response = error_response(lambda: dynamodb.transact_get_items(TransactItems=gets))
    assert response["Error"]["Code"] == "TransactionCanceledException"
    assert [r["Code"] for r in response["CancellationReasons"]] == [
        "None",
        "ValidationError",
        "ValidationError",
    ]
    assert response["CancellationReasons"][1]["Message"] == (
        "The provided key element does not match the schema"
    )


def test_a_prepared_item_refuses_single_item_writes(
    dynamodb: Any, cluster: LocalCluster, table: str
) -> None:
    """An item locked by a prepare whose coordinator is gone refuses writes until a resolver
    releases it (here the lock is taken by sending the node a prepare directly)."""
    record = stored_catalog(cluster.nodes)["tables"][table]
    pk = "locked"
    storage_key = keycodec.encode_storage_key({"S": pk}, None)
    partition = _holding(record, storage_key)
    address = cluster.node(partition["node"]).address

    async def prepare() -> dict[str, Any]:
        client = NodeClient(address)
        try:
            target = ops.Target(record["id"], partition["id"], partition["epoch"])
            body = ops.PutPayload({**key(pk), "v": {"N": "1"}}).to_json()
            payload = TxnPreparePayload(
                "orphan.1", [record["id"], partition["id"]], [{"op": ops.PUT, "body": body}]
            )
            return await client.call(ops.TXN_PREPARE, target, payload.to_json(), 10.0)
        finally:
            await client.close()

    assert asyncio.run(prepare())["votes"] == [{"code": "None"}]
    assert error_of(
        lambda: dynamodb.put_item(TableName=table, Item={**key(pk), "v": {"N": "2"}})
    ) == (400, "TransactionConflictException", "Transaction is ongoing for the item")
    response = error_response(lambda: dynamodb.transact_write_items(TransactItems=[put(table, pk)]))
    assert response["CancellationReasons"] == [
        {"Code": "TransactionConflict", "Message": "Transaction is ongoing for the item"}
    ]
    # Reads see the last committed image (none); a transactional read cannot see it as of one
    # instant while it is prepared, and is cancelled as DynamoDB cancels it.
    assert "Item" not in dynamodb.get_item(TableName=table, Key=key(pk))
    response = error_response(
        lambda: dynamodb.transact_get_items(
            TransactItems=[
                {"Get": {"TableName": table, "Key": key("free")}},
                {"Get": {"TableName": table, "Key": key(pk)}},
            ]
        )
    )
    assert response["Error"]["Code"] == "TransactionCanceledException"
    assert [r["Code"] for r in response["CancellationReasons"]][1] == "TransactionConflict"


def metric(text: str, name: str) -> float:
    """The value of one sample line of a Prometheus text page (0 if absent)."""
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return 0.0


def test_metrics_count_transactions_by_outcome(dynamodb: Any, cluster: LocalCluster) -> None:
    with urllib.request.urlopen(f"{cluster.router_url}/metrics", timeout=10) as reply:
        before = reply.read().decode()
    table = create_active_table(dynamodb, "metrics-transactions")
    dynamodb.transact_write_items(TransactItems=[put(table, "m", balance={"N": "1"})])
    check = {
        "ConditionCheck": {
            "TableName": table,
            "Key": key("m"),
            "ConditionExpression": "attribute_not_exists(pk)",
        }
    }
    error_response(lambda: dynamodb.transact_write_items(TransactItems=[check]))
    with urllib.request.urlopen(f"{cluster.router_url}/metrics", timeout=10) as reply:
        after = reply.read().decode()
    for outcome in ("committed", "cancelled"):
        name = f'dynalab_transactions_total{{outcome="{outcome}"}}'
        assert metric(after, name) == metric(before, name) + 1, outcome
    assert "dynalab_transactions_in_doubt " in after


def test_a_prepared_transaction_commits_through_a_real_split(
    dynamodb: Any, cluster: LocalCluster, table_name: Callable[[], str]
) -> None:
    """A coordinator's steps sent to a node by hand: the record begun and two items prepared on
    one partition, which is then split between them through the admin endpoint; the decision
    (COMMITTED) recorded through a child; then the routers' resolvers apply it through the
    children (the locks and the record stayed on the node) and both items are written."""
    name = create_active_table(dynamodb, table_name(), range_key=("sk", "N"))
    record = stored_catalog(cluster.nodes)["tables"][name]
    partition = _holding(record, keycodec.encode_storage_key({"S": "one"}, None))
    address = cluster.node(partition["node"]).address
    items = [{**key("one"), "sk": {"N": str(number)}, "v": {"S": "new"}} for number in (1, 9)]
    attempt = txn.Record(
        "tsplit",
        "digest",
        txn.State.PENDING,
        (txn.Participant(record["id"], partition["id"], partition["epoch"], partition["node"]),),
        0.0,
    )

    async def call(where: dict[str, Any], op: str, body: dict[str, Any]) -> dict[str, Any]:
        client = NodeClient(address)
        try:
            target = ops.Target(record["id"], where["id"], where["epoch"])
            return await client.call(op, target, body, 10.0)
        finally:
            await client.close()

    begin = TxnRecordPayload("begin", "tsplit", record=attempt.to_json())
    begun = asyncio.run(call(partition, ops.TXN_RECORD, begin.to_json()))
    assert begun["record"]["state"] == "PENDING"
    prepare = TxnPreparePayload(
        "tsplit.1",
        [record["id"], partition["id"]],
        [{"op": ops.PUT, "body": ops.PutPayload(item).to_json()} for item in items],
    )
    assert asyncio.run(call(partition, ops.TXN_PREPARE, prepare.to_json()))["votes"] == [
        {"code": "None"},
        {"code": "None"},
    ]
    request = urllib.request.Request(
        f"{cluster.router_url}/admin/tables/{name}/partitions/{partition['id']}/split",
        data=json.dumps({"Key": {**key("one"), "sk": {"N": "5"}}}).encode(),
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=60) as reply:
        low, high = json.loads(reply.read())["children"]
    assert low["node"] == high["node"] == partition["node"]
    decide = TxnRecordPayload("decide", "tsplit", attempt=1, outcome="COMMITTED")
    # The parent is retired: the record is reached through the child holding its start.
    assert asyncio.run(call(low, ops.TXN_RECORD, decide.to_json()))["record"]["state"] == (
        "COMMITTED"
    )
    deadline = time.monotonic() + RESOLVED_SECONDS_MAX
    while True:
        found = [
            dynamodb.get_item(TableName=name, Key={**key("one"), "sk": item["sk"]}).get("Item")
            for item in items
        ]
        if found == items:
            break
        assert all(item is None for item in found), f"half a transaction is visible: {found}"
        assert time.monotonic() < deadline, "the resolvers did not apply the decision"
        time.sleep(0.5)
    # No lock is left: each item takes a single write, on its own child.
    for item in items:
        dynamodb.put_item(TableName=name, Item={**item, "v": {"S": "after"}})
