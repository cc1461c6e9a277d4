"""DynamoDB Streams through boto3 on real processes: StreamSpecification on CreateTable and
UpdateTable, and what DescribeTable says of a table's stream."""

from __future__ import annotations

import asyncio
import base64
import functools
import re
import threading
import time
from collections.abc import Callable
from typing import Any

import boto3
import orjson
import pytest

from core import catalog, keycodec
from dynalab.checkers import check_stream
from dynalab.cluster import LocalCluster
from router.context import RouterContext
from rpc import ops
from tests.integration.conftest import DUMMY_CREDENTIALS, REGION, error_of, wait_active

INVALID = "One or more parameter values were invalid: "
PAGES_MAX = 100
TTL_WAIT_S = 30.0
READER_WAIT_S = 60.0
WRITES = 120


def create_streamed(client: Any, name: str, view_type: str | None) -> dict[str, Any]:
    specification: dict[str, Any] = {"StreamEnabled": view_type is not None}
    if view_type is not None:
        specification["StreamViewType"] = view_type
    client.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
        StreamSpecification=specification,
    )
    return wait_active(client, name)


@pytest.mark.parametrize("view_type", ["KEYS_ONLY", "NEW_IMAGE", "OLD_IMAGE", "NEW_AND_OLD_IMAGES"])
def test_create_table_with_a_stream(
    dynamodb: Any, table_name: Callable[[], str], view_type: str
) -> None:
    name = table_name()
    table = create_streamed(dynamodb, name, view_type)
    assert table["StreamSpecification"] == {"StreamEnabled": True, "StreamViewType": view_type}
    label = table["LatestStreamLabel"]
    assert table["LatestStreamArn"] == f"{table['TableArn']}/stream/{label}"


def test_table_without_a_stream_says_nothing_of_one(
    dynamodb: Any, table_name: Callable[[], str]
) -> None:
    table = create_streamed(dynamodb, table_name(), None)
    assert "StreamSpecification" not in table
    assert "LatestStreamArn" not in table and "LatestStreamLabel" not in table


def test_disable_then_enable_gives_a_new_stream(
    dynamodb: Any, table_name: Callable[[], str]
) -> None:
    name = table_name()
    first = create_streamed(dynamodb, name, "NEW_IMAGE")["LatestStreamLabel"]
    disabled = dynamodb.update_table(TableName=name, StreamSpecification={"StreamEnabled": False})[
        "TableDescription"
    ]
    assert "StreamSpecification" not in disabled
    assert disabled["LatestStreamLabel"] == first  # DynamoDB keeps naming the last stream.
    enabled = dynamodb.update_table(
        TableName=name,
        StreamSpecification={"StreamEnabled": True, "StreamViewType": "KEYS_ONLY"},
    )["TableDescription"]
    assert enabled["StreamSpecification"] == {"StreamEnabled": True, "StreamViewType": "KEYS_ONLY"}
    assert enabled["LatestStreamLabel"] > first
    described = dynamodb.describe_table(TableName=name)["Table"]
    assert described["LatestStreamArn"] == enabled["LatestStreamArn"]


def test_stream_specification_errors(dynamodb: Any, table_name: Callable[[], str]) -> None:
    name = table_name()
    create_streamed(dynamodb, name, "NEW_IMAGE")
    assert error_of(
        lambda: dynamodb.update_table(
            TableName=name,
            StreamSpecification={"StreamEnabled": True, "StreamViewType": "OLD_IMAGE"},
        )
    ) == (400, "ValidationException", f"Table already has an enabled stream: TableName: {name}")
    assert error_of(
        lambda: dynamodb.update_table(TableName=name, StreamSpecification={"StreamEnabled": True})
    ) == (
        400,
        "ValidationException",
        INVALID + "StreamViewType is required when StreamEnabled is true",
    )
    assert error_of(
        lambda: dynamodb.update_table(
            TableName=name,
            StreamSpecification={"StreamEnabled": True, "StreamViewType": "EVERYTHING"},
        )
    ) == (
        400,
        "ValidationException",
        "1 validation error detected: Value 'EVERYTHING' at 'streamSpecification.streamViewType' "
        "failed to satisfy constraint: Member must satisfy enum value set: "
        "[NEW_IMAGE, OLD_IMAGE, NEW_AND_OLD_IMAGES, KEYS_ONLY]",
    )
    plain = table_name()
    create_streamed(dynamodb, plain, None)
    assert error_of(
        lambda: dynamodb.update_table(TableName=plain, StreamSpecification={"StreamEnabled": False})
    ) == (400, "ValidationException", f"Table has no stream to disable: TableName: {plain}")
    assert error_of(
        lambda: dynamodb.update_table(
            TableName="missing-table", StreamSpecification={"StreamEnabled": False}
        )
    ) == (
        400,
        "ResourceNotFoundException",
        "Requested resource not found: Table: missing-table not found",
    )


# The Streams API ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def streams(cluster: LocalCluster) -> Any:
    """A boto3 DynamoDB Streams client for the cluster's first router (`endpoint_url` only)."""
    session = boto3.session.Session(region_name=REGION, **DUMMY_CREDENTIALS)
    return session.client("dynamodbstreams", endpoint_url=cluster.router_url)


def read_shard(streams: Any, arn: str, shard_id: str, **position: Any) -> list[dict[str, Any]]:
    """Every record of one shard from `position` (TRIM_HORIZON by default) until the reader is
    caught up (an empty page) or the shard is closed (no NextShardIterator)."""
    iterator = streams.get_shard_iterator(
        StreamArn=arn, ShardId=shard_id, **({"ShardIteratorType": "TRIM_HORIZON"} | position)
    )["ShardIterator"]
    records: list[dict[str, Any]] = []
    for _ in range(PAGES_MAX):
        page = streams.get_records(ShardIterator=iterator)
        records.extend(page["Records"])
        iterator = page.get("NextShardIterator")
        if iterator is None or not page["Records"]:
            return records
    raise AssertionError(f"shard {shard_id} still had records after {PAGES_MAX} pages")


def read_stream(streams: Any, arn: str) -> list[dict[str, Any]]:
    """Every record of every shard of the stream, shards parent first (DescribeStream's order,
    checked), pages of DescribeStream followed."""
    shards: list[dict[str, Any]] = []
    request: dict[str, Any] = {"StreamArn": arn, "Limit": 1}
    for _ in range(PAGES_MAX):
        description = streams.describe_stream(**request)["StreamDescription"]
        shards.extend(description["Shards"])
        if "LastEvaluatedShardId" not in description:
            break
        request["ExclusiveStartShardId"] = description["LastEvaluatedShardId"]
    listed: set[str] = set()
    for shard in shards:
        parent = shard.get("ParentShardId")
        assert (
            parent is None
            or parent in listed
            or not any(other["ShardId"] == parent for other in shards)
        ), f"shard {shard['ShardId']} listed before its parent {parent}"
        listed.add(shard["ShardId"])
    return [record for shard in shards for record in read_shard(streams, arn, shard["ShardId"])]


def stream_arn_of(dynamodb: Any, name: str) -> str:
    return str(dynamodb.describe_table(TableName=name)["Table"]["LatestStreamArn"])


def changes(records: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """(eventName, dynamodb minus the members that vary by run) of each record."""
    out = []
    for record in records:
        body = dict(record["dynamodb"])
        for member in ("ApproximateCreationDateTime", "SequenceNumber", "SizeBytes"):
            body.pop(member)
        out.append((record["eventName"], body))
    return out


def write_everything(dynamodb: Any, name: str) -> None:
    """One of each kind of change, and one write that changes nothing."""
    dynamodb.put_item(TableName=name, Item={"pk": {"S": "a"}, "v": {"N": "1"}})
    dynamodb.update_item(
        TableName=name,
        Key={"pk": {"S": "a"}},
        UpdateExpression="SET v = :v",
        ExpressionAttributeValues={":v": {"N": "2"}},
    )
    # Changes nothing: DynamoDB writes no stream record for it.
    dynamodb.put_item(TableName=name, Item={"pk": {"S": "a"}, "v": {"N": "2"}})
    dynamodb.batch_write_item(
        RequestItems={
            name: [
                {"PutRequest": {"Item": {"pk": {"S": "b"}, "v": {"N": "1"}}}},
                {"DeleteRequest": {"Key": {"pk": {"S": "a"}}}},
            ]
        }
    )
    dynamodb.delete_item(TableName=name, Key={"pk": {"S": "b"}})
    dynamodb.delete_item(TableName=name, Key={"pk": {"S": "never-written"}})


def _images(view_type: str, old: dict[str, Any] | None, new: dict[str, Any] | None) -> Any:
    images: dict[str, Any] = {}
    if new is not None and view_type in ("NEW_IMAGE", "NEW_AND_OLD_IMAGES"):
        images["NewImage"] = new
    if old is not None and view_type in ("OLD_IMAGE", "NEW_AND_OLD_IMAGES"):
        images["OldImage"] = old
    return images


@pytest.mark.parametrize("view_type", ["KEYS_ONLY", "NEW_IMAGE", "OLD_IMAGE", "NEW_AND_OLD_IMAGES"])
def test_every_operation_kind_in_every_view_type(
    dynamodb: Any, streams: Any, table_name: Callable[[], str], view_type: str
) -> None:
    name = table_name()
    create_streamed(dynamodb, name, view_type)
    write_everything(dynamodb, name)
    records = read_stream(streams, stream_arn_of(dynamodb, name))
    a1 = {"pk": {"S": "a"}, "v": {"N": "1"}}
    a2 = {"pk": {"S": "a"}, "v": {"N": "2"}}
    b1 = {"pk": {"S": "b"}, "v": {"N": "1"}}
    expected = [
        ("INSERT", {"pk": {"S": "a"}}, None, a1),
        ("MODIFY", {"pk": {"S": "a"}}, a1, a2),
        ("REMOVE", {"pk": {"S": "a"}}, a2, None),
        ("INSERT", {"pk": {"S": "b"}}, None, b1),
        ("REMOVE", {"pk": {"S": "b"}}, b1, None),
    ]
    # One item's records are in order; the batch's two items may land on different shards.
    for key in ("a", "b"):
        assert [c for c in changes(records) if c[1]["Keys"]["pk"]["S"] == key] == [
            (event, {"Keys": keys, **_images(view_type, old, new), "StreamViewType": view_type})
            for event, keys, old, new in expected
            if keys["pk"]["S"] == key
        ]
    for record in records:
        assert record["eventSource"] == "aws:dynamodb"
        assert record["eventVersion"] == "1.1"
        assert record["awsRegion"] == REGION
        assert len(record["eventID"]) == 32
        assert "userIdentity" not in record
        body = record["dynamodb"]
        assert body["SequenceNumber"].isdigit() and len(body["SequenceNumber"]) >= 21
        assert body["SizeBytes"] > 0
        assert abs(body["ApproximateCreationDateTime"].timestamp() - time.time()) < 600


def test_transactions_in_a_stream(
    dynamodb: Any, streams: Any, table_name: Callable[[], str]
) -> None:
    """TransactWriteItems' changes appear once each, in per-item order, with their images; a
    condition check, a cancelled transaction and a retried token write nothing more."""
    name = table_name()
    create_streamed(dynamodb, name, "NEW_AND_OLD_IMAGES")
    keys = [f"t{number}" for number in range(6)]
    dynamodb.put_item(TableName=name, Item={"pk": {"S": "t0"}, "v": {"N": "0"}})
    dynamodb.put_item(TableName=name, Item={"pk": {"S": "t1"}, "v": {"N": "0"}})
    first = [
        {
            "Update": {
                "TableName": name,
                "Key": {"pk": {"S": "t0"}},
                "UpdateExpression": "SET v = :v",
                "ExpressionAttributeValues": {":v": {"N": "1"}},
            }
        },
        {"Delete": {"TableName": name, "Key": {"pk": {"S": "t1"}}}},
        *[
            {"Put": {"TableName": name, "Item": {"pk": {"S": key}, "v": {"N": "1"}}}}
            for key in keys[2:5]
        ],
        {
            "ConditionCheck": {
                "TableName": name,
                "Key": {"pk": {"S": "t5"}},
                "ConditionExpression": "attribute_not_exists(pk)",
            }
        },
    ]
    dynamodb.transact_write_items(TransactItems=first, ClientRequestToken="streams-first")
    # The same token again within ten minutes is the same transaction: nothing is applied twice.
    dynamodb.transact_write_items(TransactItems=first, ClientRequestToken="streams-first")
    cancelled = [
        {"Put": {"TableName": name, "Item": {"pk": {"S": "t2"}, "v": {"N": "9"}}}},
        {
            "ConditionCheck": {
                "TableName": name,
                "Key": {"pk": {"S": "t1"}},
                "ConditionExpression": "attribute_exists(pk)",
            }
        },
    ]
    assert error_of(lambda: dynamodb.transact_write_items(TransactItems=cancelled))[1] == (
        "TransactionCanceledException"
    )
    dynamodb.transact_write_items(
        TransactItems=[
            {
                "Update": {
                    "TableName": name,
                    "Key": {"pk": {"S": key}},
                    "UpdateExpression": "SET v = :v",
                    "ExpressionAttributeValues": {":v": {"N": "2"}},
                }
            }
            for key in keys[:4]
        ]
    )
    records = read_stream(streams, stream_arn_of(dynamodb, name))

    def item(key: str, value: int) -> dict[str, Any]:
        return {"pk": {"S": key}, "v": {"N": str(value)}}

    expected: dict[str, list[tuple[str, Any, Any]]] = {
        "t0": [("INSERT", None, item("t0", 0)), ("MODIFY", item("t0", 0), item("t0", 1))],
        "t1": [("INSERT", None, item("t1", 0)), ("REMOVE", item("t1", 0), None)],
        **{key: [("INSERT", None, item(key, 1))] for key in keys[2:5]},
    }
    # The last transaction updates t0 to t3; t1 was deleted, so its update creates it anew.
    expected["t0"].append(("MODIFY", item("t0", 1), item("t0", 2)))
    expected["t1"].append(("INSERT", None, {"pk": {"S": "t1"}, "v": {"N": "2"}}))
    for key in keys[2:4]:
        expected[key].append(("MODIFY", item(key, 1), item(key, 2)))
    seen: dict[str, list[tuple[str, Any, Any]]] = {}
    for record in records:
        body = record["dynamodb"]
        assert body["Keys"] == {"pk": body["Keys"]["pk"]}
        seen.setdefault(body["Keys"]["pk"]["S"], []).append(
            (record["eventName"], body.get("OldImage"), body.get("NewImage"))
        )
        assert "userIdentity" not in record
    assert seen == expected
    assert len({record["eventID"] for record in records}) == len(records)


def test_a_ttl_deletion_is_a_service_removal(
    dynamodb: Any, streams: Any, table_name: Callable[[], str]
) -> None:
    name = table_name()
    create_streamed(dynamodb, name, "NEW_AND_OLD_IMAGES")
    dynamodb.update_time_to_live(
        TableName=name, TimeToLiveSpecification={"Enabled": True, "AttributeName": "expires"}
    )
    expired = {"pk": {"S": "gone"}, "expires": {"N": str(int(time.time()) - 60)}}
    dynamodb.put_item(TableName=name, Item=expired)
    arn = stream_arn_of(dynamodb, name)
    deadline = time.monotonic() + TTL_WAIT_S
    while True:
        records = read_stream(streams, arn)
        if len(records) == 2:
            break
        assert time.monotonic() < deadline, f"no TTL deletion in {TTL_WAIT_S} s: {records}"
        time.sleep(0.2)
    insert, removal = records
    assert "userIdentity" not in insert
    assert removal["eventName"] == "REMOVE"
    assert removal["userIdentity"] == {"PrincipalId": "dynamodb.amazonaws.com", "Type": "Service"}
    assert removal["dynamodb"]["OldImage"] == expired


def test_iterator_types(dynamodb: Any, streams: Any, table_name: Callable[[], str]) -> None:
    name = table_name()
    create_streamed(dynamodb, name, "KEYS_ONLY")
    arn = stream_arn_of(dynamodb, name)
    for number in range(3):
        dynamodb.put_item(TableName=name, Item={"pk": {"S": "k"}, "v": {"N": str(number)}})
    (shard,) = [
        s
        for s in streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]
        if read_shard(streams, arn, s["ShardId"])
    ]
    shard_id = shard["ShardId"]
    everything = read_shard(streams, arn, shard_id)
    numbers = [record["dynamodb"]["SequenceNumber"] for record in everything]
    assert len(numbers) == 3 and numbers == sorted(numbers, key=int)
    assert shard["SequenceNumberRange"]["StartingSequenceNumber"] <= numbers[0]
    assert "EndingSequenceNumber" not in shard["SequenceNumberRange"]
    at = read_shard(
        streams, arn, shard_id, ShardIteratorType="AT_SEQUENCE_NUMBER", SequenceNumber=numbers[1]
    )
    assert [r["dynamodb"]["SequenceNumber"] for r in at] == numbers[1:]
    after = read_shard(
        streams,
        arn,
        shard_id,
        ShardIteratorType="AFTER_SEQUENCE_NUMBER",
        SequenceNumber=numbers[1],
    )
    assert [r["dynamodb"]["SequenceNumber"] for r in after] == numbers[2:]
    latest = streams.get_shard_iterator(
        StreamArn=arn, ShardId=shard_id, ShardIteratorType="LATEST"
    )["ShardIterator"]
    page = streams.get_records(ShardIterator=latest)
    assert page["Records"] == []
    dynamodb.put_item(TableName=name, Item={"pk": {"S": "k"}, "v": {"N": "9"}})
    page = streams.get_records(ShardIterator=page["NextShardIterator"])
    assert [r["eventName"] for r in page["Records"]] == ["MODIFY"]
    limited = streams.get_records(
        ShardIterator=streams.get_shard_iterator(
            StreamArn=arn, ShardId=shard_id, ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"],
        Limit=2,
    )
    assert [r["dynamodb"]["SequenceNumber"] for r in limited["Records"]] == numbers[:2]


def test_list_streams(dynamodb: Any, streams: Any, table_name: Callable[[], str]) -> None:
    first, second = table_name(), table_name()
    create_streamed(dynamodb, first, "KEYS_ONLY")
    create_streamed(dynamodb, second, "NEW_IMAGE")
    plain = table_name()
    create_streamed(dynamodb, plain, None)
    listed = streams.list_streams(TableName=first)["Streams"]
    assert listed == [
        {
            "StreamArn": stream_arn_of(dynamodb, first),
            "TableName": first,
            "StreamLabel": dynamodb.describe_table(TableName=first)["Table"]["LatestStreamLabel"],
        }
    ]
    assert streams.list_streams(TableName=plain)["Streams"] == []
    page = streams.list_streams(Limit=1)
    assert len(page["Streams"]) == 1
    following = streams.list_streams(ExclusiveStartStreamArn=page["LastEvaluatedStreamArn"])
    assert page["Streams"][0] not in following["Streams"]
    everything = [s["TableName"] for s in streams.list_streams()["Streams"]]
    assert first in everything and second in everything and plain not in everything
    # A name that extends another sorts before it inside their ARNs ("a-b/stream" < "a/stream"):
    # paging one stream at a time still meets every stream exactly once.
    create_streamed(dynamodb, f"{first}-b", "KEYS_ONLY")
    # (A table whose stream was disabled and enabled again lists both streams.)
    paged: list[dict[str, str]] = []
    request: dict[str, Any] = {"Limit": 1}
    for _ in range(PAGES_MAX):
        page = streams.list_streams(**request)
        paged.extend(page["Streams"])
        if "LastEvaluatedStreamArn" not in page:
            break
        request["ExclusiveStartStreamArn"] = page["LastEvaluatedStreamArn"]
    arns = [s["StreamArn"] for s in paged]
    assert sorted(arns) == sorted(s["StreamArn"] for s in streams.list_streams()["Streams"])
    assert len(arns) == len(set(arns))
    assert {first, f"{first}-b", second} <= {s["TableName"] for s in paged}


def test_a_shards_starting_number_starts_either_iterator_before_any_record(
    dynamodb: Any, streams: Any, table_name: Callable[[], str]
) -> None:
    name = table_name()
    create_streamed(dynamodb, name, "KEYS_ONLY")
    arn = stream_arn_of(dynamodb, name)
    shard = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"][0]
    start = shard["SequenceNumberRange"]["StartingSequenceNumber"]
    # No record has that number yet (the stream is empty): both iterators still start there,
    # as DynamoDB's do (ScyllaDB's tests, run against DynamoDB, check it), and both read the
    # shard's first record once it is written, as a DynamoDB shard's first record is numbered
    # past its starting number.
    iterators = []
    for kind in ("AT_SEQUENCE_NUMBER", "AFTER_SEQUENCE_NUMBER"):
        iterator = streams.get_shard_iterator(
            StreamArn=arn, ShardId=shard["ShardId"], ShardIteratorType=kind, SequenceNumber=start
        )["ShardIterator"]
        page = streams.get_records(ShardIterator=iterator)
        assert page["Records"] == []
        iterators.append(page["NextShardIterator"])
    for number in range(200):  # Some key of the first shard's range.
        key = {"pk": {"S": f"k{number}"}}
        dynamodb.put_item(TableName=name, Item=key)
        pages = [streams.get_records(ShardIterator=iterator) for iterator in iterators]
        if pages[0]["Records"]:
            break
    assert [[r["dynamodb"]["Keys"] for r in page["Records"]] for page in pages] == [[key], [key]]
    # A SequenceNumber with TRIM_HORIZON or LATEST is refused, as DynamoDB refuses it.
    for kind in ("TRIM_HORIZON", "LATEST"):
        assert error_of(
            lambda kind=kind: streams.get_shard_iterator(
                StreamArn=arn,
                ShardId=shard["ShardId"],
                ShardIteratorType=kind,
                SequenceNumber=start,
            )
        ) == (
            400,
            "ValidationException",
            f"SequenceNumber must not be given for ShardIteratorType {kind}",
        )


def test_streams_errors(dynamodb: Any, streams: Any, table_name: Callable[[], str]) -> None:
    name = table_name()
    create_streamed(dynamodb, name, "KEYS_ONLY")
    arn = stream_arn_of(dynamodb, name)
    missing = arn.rsplit("/", 1)[0] + "/2000-01-01T00:00:00.000"
    assert error_of(lambda: streams.describe_stream(StreamArn=missing)) == (
        400,
        "ResourceNotFoundException",
        f"Requested resource not found: Stream: {missing} not found",
    )
    assert error_of(
        lambda: streams.get_shard_iterator(
            StreamArn=arn,
            ShardId="shardId-00000000000000000000-00000000",
            ShardIteratorType="LATEST",
        )
    ) == (400, "ResourceNotFoundException", "Requested resource not found: Shard does not exist")
    assert error_of(lambda: streams.list_streams(TableName="no-such-table")) == (
        400,
        "ResourceNotFoundException",
        "Requested resource not found: Table: no-such-table not found",
    )
    # ListStreams' TableName is a name only ("Pattern: [a-zA-Z0-9_.-]+" in the Streams API
    # Reference, which unlike DynamoDB's TableName does not mention an ARN): a table's ARN fails
    # the pattern.
    table_arn = dynamodb.describe_table(TableName=name)["Table"]["TableArn"]
    assert error_of(lambda: streams.list_streams(TableName=table_arn)) == (
        400,
        "ValidationException",
        f"1 validation error detected: Value '{table_arn}' at 'tableName' failed to satisfy "
        "constraint: Member must satisfy regular expression pattern: [a-zA-Z0-9_.-]+",
    )
    assert error_of(lambda: streams.get_records(ShardIterator="not-an-iterator")) == (
        400,
        "ValidationException",
        "Invalid ShardIterator",
    )
    shard_id = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"][0]["ShardId"]
    assert (
        error_of(
            lambda: streams.get_shard_iterator(
                StreamArn=arn, ShardId=shard_id, ShardIteratorType="SOMEWHERE"
            )
        )[1]
        == "ValidationException"
    )
    # An iterator handed out 15 minutes and a second ago has expired.
    iterator = streams.get_shard_iterator(
        StreamArn=arn, ShardId=shard_id, ShardIteratorType="TRIM_HORIZON"
    )["ShardIterator"]
    fields = orjson.loads(base64.urlsafe_b64decode(iterator))
    fields["i"] -= 15 * 60 + 1
    old = base64.urlsafe_b64encode(orjson.dumps(fields)).decode()
    status, code, message = error_of(lambda: streams.get_records(ShardIterator=old))
    assert (status, code) == (400, "ExpiredIteratorException")
    assert message.startswith("Iterator expired. The iterator was created at time ")


def keys_of(records: list[dict[str, Any]]) -> list[str]:
    return [record["dynamodb"]["Keys"]["pk"]["S"] for record in records]


def test_a_disabled_stream_is_read_for_its_retention(
    dynamodb: Any, streams: Any, table_name: Callable[[], str]
) -> None:
    """Disabling closes the stream's shards where each log stood; the stream is still listed,
    described and read (what it recorded, nothing after), also once a new stream is enabled."""
    name = table_name()
    create_streamed(dynamodb, name, "KEYS_ONLY")
    arn = stream_arn_of(dynamodb, name)
    before = [f"x{number}" for number in range(6)]
    for key in before:
        dynamodb.put_item(TableName=name, Item={"pk": {"S": key}})
    dynamodb.update_table(TableName=name, StreamSpecification={"StreamEnabled": False})
    dynamodb.put_item(TableName=name, Item={"pk": {"S": "after-disabling"}})
    description = streams.describe_stream(StreamArn=arn)["StreamDescription"]
    assert description["StreamStatus"] == "DISABLED"
    assert description["Shards"]
    for shard in description["Shards"]:
        assert "EndingSequenceNumber" in shard["SequenceNumberRange"]
    assert sorted(keys_of(read_stream(streams, arn))) == before
    # A closed shard's LATEST iterator is at its end: nothing more, and no next iterator.
    shard_id = description["Shards"][0]["ShardId"]
    latest = streams.get_shard_iterator(
        StreamArn=arn, ShardId=shard_id, ShardIteratorType="LATEST"
    )["ShardIterator"]
    page = streams.get_records(ShardIterator=latest)
    assert page["Records"] == [] and "NextShardIterator" not in page
    listed = streams.list_streams(TableName=name)["Streams"]
    assert [entry["StreamArn"] for entry in listed] == [arn]

    dynamodb.update_table(
        TableName=name, StreamSpecification={"StreamEnabled": True, "StreamViewType": "KEYS_ONLY"}
    )
    new_arn = stream_arn_of(dynamodb, name)
    assert new_arn != arn
    dynamodb.put_item(TableName=name, Item={"pk": {"S": "y"}})
    # Both are listed while the old one is retained, each read as it was.
    listed = streams.list_streams(TableName=name)["Streams"]
    assert sorted(entry["StreamArn"] for entry in listed) == sorted([arn, new_arn])
    assert streams.describe_stream(StreamArn=arn)["StreamDescription"]["StreamStatus"] == (
        "DISABLED"
    )
    assert sorted(keys_of(read_stream(streams, arn))) == before
    # The new stream starts after the changes made before it.
    assert keys_of(read_stream(streams, new_arn)) == ["y"]
    # Disabling the new one too: a table keeps both streams readable.
    dynamodb.update_table(TableName=name, StreamSpecification={"StreamEnabled": False})
    assert keys_of(read_stream(streams, new_arn)) == ["y"]
    assert sorted(keys_of(read_stream(streams, arn))) == before


def test_a_reader_sees_every_acknowledged_change_once_in_order(
    dynamodb: Any, streams: Any, table_name: Callable[[], str]
) -> None:
    """A writer thread changes items while a reader follows every shard; `check_stream`."""
    name = table_name()
    create_streamed(dynamodb, name, "NEW_IMAGE")
    arn = stream_arn_of(dynamodb, name)
    acknowledged: dict[str, list[Any]] = {}

    def write() -> None:
        for number in range(WRITES):
            key = f"k{number % 7}"
            if number % 5 == 4:
                dynamodb.delete_item(TableName=name, Key={"pk": {"S": key}})
                value: Any = ("deleted", number)
            else:
                dynamodb.put_item(TableName=name, Item={"pk": {"S": key}, "n": {"N": str(number)}})
                value = number
            acknowledged.setdefault(key, []).append(value)

    writer = threading.Thread(target=write)
    shards = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]
    iterators = {
        shard["ShardId"]: streams.get_shard_iterator(
            StreamArn=arn, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        for shard in shards
    }
    writer.start()
    seen: dict[str, list[Any]] = {}
    deadline = time.monotonic() + READER_WAIT_S

    def poll_all() -> None:
        for shard_id, iterator in iterators.items():
            page = streams.get_records(ShardIterator=iterator)
            iterators[shard_id] = page["NextShardIterator"]
            for record in page["Records"]:
                body = record["dynamodb"]
                key = body["Keys"]["pk"]["S"]
                if record["eventName"] == "REMOVE":
                    # A REMOVE shows no write number: name it by its place among the key's.
                    removes = sum(1 for v in seen.get(key, []) if isinstance(v, tuple))
                    value: Any = ("deleted", removes)
                else:
                    value = int(body["NewImage"]["n"]["N"])
                seen.setdefault(key, []).append(value)

    while writer.is_alive():
        poll_all()
        assert time.monotonic() < deadline
    writer.join(timeout=READER_WAIT_S)
    poll_all()
    # Deletes are named by their place among the key's, as the reader names them; a delete of a
    # missing item changes nothing and writes no record.
    for key, values in acknowledged.items():
        missing = True
        named: list[Any] = []
        for value in values:
            if isinstance(value, tuple):
                if not missing:
                    named.append(("deleted", sum(1 for v in named if isinstance(v, tuple))))
                missing = True
            else:
                named.append(value)
                missing = False
        acknowledged[key] = named
    assert check_stream(acknowledged, seen) == []


def split_partition(cluster: LocalCluster, name: str, at: bytes) -> None:
    """Split the partition of table `name` holding storage key `at`, as a node-side split will
    (and as dynalab/sim/cluster.py does): both children on the parent's node at epoch + 1, the
    catalog switched to them by compare-and-set, the parent retired with an END naming them."""

    async def run() -> None:
        ctx = RouterContext({node.node_id: node.address for node in cluster.nodes}, "test")
        try:
            table = await ctx.read_table(name)
            assert table is not None
            parent = next(p for p in table.partitions if p.holds(at))
            epoch = parent.epoch + 1
            low_id, high_id = f"{parent.id}.{epoch}a", f"{parent.id}.{epoch}b"
            now = time.time()  # As the node's split records its children: on its wall clock.
            after, low, high = catalog.split(table, parent.id, at, low_id, high_id, now=now)
            schema = {"id": table.id, "name": name, "key_schema": table.key_shape.to_key_schema()}
            for child in (low, high):
                await ctx.control(
                    parent.node,
                    ops.CREATE_PARTITION,
                    ops.CreatePartitionPayload(
                        schema, child.to_json(), catalog.throughput_document(after)
                    ).to_json(),
                )

            def commit(current: catalog.TableDef | None) -> catalog.TableDef | None:
                assert current is not None and current.id == table.id
                return catalog.split(current, parent.id, at, low_id, high_id, now=now)[0]

            await ctx.change_table(name, commit)
            await ctx.control(
                parent.node,
                ops.RETIRE_PARTITION,
                ops.RetirePartitionPayload(
                    table.id, parent.id, parent.epoch, [low_id, high_id]
                ).to_json(),
            )
        finally:
            await ctx.close()

    asyncio.run(run())


def test_shard_lineage_across_a_split_is_read_parent_first(
    cluster: LocalCluster, dynamodb: Any, streams: Any, table_name: Callable[[], str]
) -> None:
    name = table_name()
    create_streamed(dynamodb, name, "NEW_IMAGE")
    keys = [f"k{number}" for number in range(24)]
    for key in keys:
        dynamodb.put_item(TableName=name, Item={"pk": {"S": key}, "v": {"N": "1"}})
    # Split the partition holding the most of these keys, between two of them.
    table = asyncio.run(_read_table(cluster, name))
    placed: dict[str, list[bytes]] = {}
    for key in keys:
        storage = keycodec.encode_storage_key({"S": key}, None)
        holder = next(p for p in table.partitions if p.holds(storage))
        placed.setdefault(holder.id, []).append(storage)
    crowded = sorted(max(placed.values(), key=len))
    assert len(crowded) >= 2
    split_started_ms = int(time.time() * 1000)
    split_partition(cluster, name, crowded[len(crowded) // 2])
    split_ended_ms = int(time.time() * 1000) + 1
    for key in keys:
        dynamodb.put_item(TableName=name, Item={"pk": {"S": key}, "v": {"N": "2"}})

    arn = stream_arn_of(dynamodb, name)
    shards = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]
    by_id = {shard["ShardId"]: shard for shard in shards}
    children = [shard for shard in shards if "ParentShardId" in shard]
    assert len(children) == 2
    (parent_id,) = {shard["ParentShardId"] for shard in children}
    parent = by_id[parent_id]
    assert "EndingSequenceNumber" in parent["SequenceNumberRange"]
    assert [s["ShardId"] for s in shards].index(parent_id) < min(
        [s["ShardId"] for s in shards].index(child["ShardId"]) for child in children
    )
    # Shard ids have DynamoDB's form, a creation time first, so their lexical order is their
    # creation order, the order DescribeStream lists them in: a parent before its children.
    ids = [shard["ShardId"] for shard in shards]
    assert all(re.fullmatch(r"shardId-\d{20}-[0-9a-f]{8}", shard_id) for shard_id in ids)
    assert ids == sorted(ids)
    assert all(parent_id < child["ShardId"] for child in children)
    # The children's ids carry the time the split made them, in milliseconds.
    for child in children:
        assert split_started_ms <= int(child["ShardId"].split("-")[1]) <= split_ended_ms
    # ExclusiveStartShardId pages in that order; past the last shard, even an unknown id,
    # there is nothing more, as DynamoDB answers.
    for start, expected in (
        (ids[0], ids[1:]),
        (ids[-1], []),
        ("shardId-99999999999999999999-ffffffff", []),
        ("shardId-00000000000000000000-00000000", ids),
    ):
        page = streams.describe_stream(StreamArn=arn, ExclusiveStartShardId=start)
        assert [s["ShardId"] for s in page["StreamDescription"]["Shards"]] == expected
    # ShardFilter CHILD_SHARDS describes the parent's children only.
    filtered = streams.describe_stream(
        StreamArn=arn, ShardFilter={"Type": "CHILD_SHARDS", "ShardId": parent_id}
    )["StreamDescription"]["Shards"]
    assert filtered == children
    childless = streams.describe_stream(
        StreamArn=arn, ShardFilter={"Type": "CHILD_SHARDS", "ShardId": children[0]["ShardId"]}
    )["StreamDescription"]
    assert childless["Shards"] == [] and "LastEvaluatedShardId" not in childless
    assert error_of(
        lambda: streams.describe_stream(StreamArn=arn, ShardFilter={"Type": "CHILD_SHARDS"})
    ) == (
        400,
        "ValidationException",
        "1 validation error detected: Value null at 'shardFilter.shardId' failed to satisfy "
        "constraint: Member must not be null",
    )
    assert error_of(
        lambda: streams.describe_stream(
            StreamArn=arn, ShardFilter={"Type": "PARENT_SHARDS", "ShardId": parent_id}
        )
    ) == (
        400,
        "ValidationException",
        "1 validation error detected: Value 'PARENT_SHARDS' at 'shardFilter.type' failed to "
        "satisfy constraint: Member must satisfy enum value set: [CHILD_SHARDS]",
    )
    # The closed parent is drained: its last page has no NextShardIterator.
    iterator = streams.get_shard_iterator(
        StreamArn=arn, ShardId=parent_id, ShardIteratorType="TRIM_HORIZON"
    )["ShardIterator"]
    for _ in range(PAGES_MAX):
        page = streams.get_records(ShardIterator=iterator)
        if "NextShardIterator" not in page:
            break
        iterator = page["NextShardIterator"]
    else:
        raise AssertionError("the split parent's shard never closed")
    seen: dict[str, list[Any]] = {}
    for record in read_stream(streams, arn):
        body = record["dynamodb"]
        seen.setdefault(body["Keys"]["pk"]["S"], []).append(int(body["NewImage"]["v"]["N"]))
    assert check_stream({key: [1, 2] for key in keys}, seen) == []


async def _read_table(cluster: LocalCluster, name: str) -> catalog.TableDef:
    ctx = RouterContext({node.node_id: node.address for node in cluster.nodes}, "test")
    try:
        table = await ctx.read_table(name)
        assert table is not None
        return table
    finally:
        await ctx.close()


def test_a_limit_past_its_range_is_refused(
    dynamodb: Any, streams: Any, table_name: Callable[[], str]
) -> None:
    # ListStreams and DescribeStream take 1-100, GetRecords 1-1000 (API Reference): a Limit past
    # the range is a ValidationException, not a page of the largest size.
    name = table_name()
    create_streamed(dynamodb, name, "KEYS_ONLY")
    arn = stream_arn_of(dynamodb, name)
    shard_id = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"][0]["ShardId"]
    iterator = streams.get_shard_iterator(
        StreamArn=arn, ShardId=shard_id, ShardIteratorType="TRIM_HORIZON"
    )["ShardIterator"]
    calls = {
        "ListStreams": (100, lambda limit: streams.list_streams(TableName=name, Limit=limit)),
        "DescribeStream": (100, lambda limit: streams.describe_stream(StreamArn=arn, Limit=limit)),
        "GetRecords": (
            1000,
            lambda limit: streams.get_records(ShardIterator=iterator, Limit=limit),
        ),
    }
    for operation, (most, call) in calls.items():
        call(most)  # The largest page is served.
        assert error_of(functools.partial(call, most + 1)) == (
            400,
            "ValidationException",
            f"1 validation error detected: Value '{most + 1}' at 'limit' failed to satisfy "
            f"constraint: Member must have value less than or equal to {most}",
        ), operation


def test_a_malformed_stream_arn_is_a_validation_error(
    dynamodb: Any, streams: Any, table_name: Callable[[], str]
) -> None:
    # A StreamArn not of a stream ARN's shape is refused before any table is looked for; one of
    # that shape that names no stream is not found (test_streams_errors).
    name = table_name()
    create_streamed(dynamodb, name, "KEYS_ONLY")
    arn = stream_arn_of(dynamodb, name)
    shard_id = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"][0]["ShardId"]
    for malformed in (
        "sdfadfsdfnlfkajakfgjalksfgklasjklasdjfklasdfasdfgasf",
        arn.replace("/stream/", "/streams/"),
        arn + "x",
    ):
        calls = (
            functools.partial(streams.describe_stream, StreamArn=malformed),
            functools.partial(streams.list_streams, ExclusiveStartStreamArn=malformed),
            functools.partial(
                streams.get_shard_iterator,
                StreamArn=malformed,
                ShardId=shard_id,
                ShardIteratorType="LATEST",
            ),
        )
        for call in calls:
            assert error_of(call) == (400, "ValidationException", f"Invalid StreamArn: {malformed}")
