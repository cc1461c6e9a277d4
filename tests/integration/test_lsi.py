"""Local secondary indexes against a real cluster (three nodes, two routers), through boto3.

Seed 000 (`../shared/seeds/000_*`, rules L-01..L-45 of the seed checklist): CreateTable's rules and
messages, DescribeTable's LocalSecondaryIndexes, entries kept in step with every write (sparse,
typed, equal sort keys all returned), Query and Scan on the index with every Select, fetches of
non-projected attributes and what they cost, paging with index and table keys, write capacity per
the guide's cases, and item collections: their metrics and their cap. The cap is lowered for this
module's cluster (DYNALAB_ITEM_COLLECTION_BYTES_MAX) so that a test can reach it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from core import limits
from core.size import item_size_bytes
from dynalab.cluster import LocalCluster
from tests.integration.conftest import error_of, error_response, wait_active
from tests.integration.test_wire import call

INVALID = "One or more parameter values were invalid: "
# Small enough to reach with a few 300 KB items, large enough for every other test's collections.
COLLECTION_BYTES_MAX = 1_000_000
TTL_DELETION_SECONDS_MAX = 30.0  # The nodes sweep every second by default.


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with pytest.MonkeyPatch.context() as environment:
        environment.setenv("DYNALAB_THROTTLING", "off")
        environment.setenv("DYNALAB_ITEM_COLLECTION_BYTES_MAX", str(COLLECTION_BYTES_MAX))
        with LocalCluster(tmp_path_factory.mktemp("cluster"), nodes=3, routers=2) as running:
            yield running


def thread_table(
    dynamodb: Any,
    name: str,
    projection: dict[str, Any] | None = None,
    extra_indexes: list[dict[str, Any]] | None = None,
) -> str:
    """Seed 000's Thread table with LastPostIndex (L-01, L-02), INCLUDE Replies by default."""
    dynamodb.create_table(
        TableName=name,
        KeySchema=[
            {"AttributeName": "ForumName", "KeyType": "HASH"},
            {"AttributeName": "Subject", "KeyType": "RANGE"},
        ],
        AttributeDefinitions=[
            {"AttributeName": "ForumName", "AttributeType": "S"},
            {"AttributeName": "Subject", "AttributeType": "S"},
            {"AttributeName": "LastPostDateTime", "AttributeType": "S"},
            *(
                [{"AttributeName": "Views", "AttributeType": "N"}]
                if extra_indexes is not None
                else []
            ),
        ],
        LocalSecondaryIndexes=[
            {
                "IndexName": "LastPostIndex",
                "KeySchema": [
                    {"AttributeName": "ForumName", "KeyType": "HASH"},
                    {"AttributeName": "LastPostDateTime", "KeyType": "RANGE"},
                ],
                "Projection": projection
                or {"ProjectionType": "INCLUDE", "NonKeyAttributes": ["Replies"]},
            },
            *(extra_indexes or []),
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    wait_active(dynamodb, name)
    return name


def thread(forum: str, subject: str, posted: str | None, **extra: Any) -> dict[str, Any]:
    item: dict[str, Any] = {"ForumName": {"S": forum}, "Subject": {"S": subject}}
    if posted is not None:
        item["LastPostDateTime"] = {"S": posted}
    for name, value in extra.items():
        item[name] = value
    return item


def query_index(dynamodb: Any, name: str, forum: str, **request: Any) -> dict[str, Any]:
    values = {":f": {"S": forum}, **request.pop("values", {})}
    condition = request.pop("condition", "")
    reply: dict[str, Any] = dynamodb.query(
        TableName=name,
        IndexName="LastPostIndex",
        KeyConditionExpression="ForumName = :f" + condition,
        ExpressionAttributeValues=values,
        **request,
    )
    return reply


def subjects(items: list[dict[str, Any]]) -> list[str]:
    return [item["Subject"]["S"] for item in items]


# CreateTable and DescribeTable -----------------------------------------------------------------


def base_request(name: str, **changes: Any) -> dict[str, Any]:
    request: dict[str, Any] = {
        "TableName": name,
        "KeySchema": [
            {"AttributeName": "pk", "KeyType": "HASH"},
            {"AttributeName": "sk", "KeyType": "RANGE"},
        ],
        "AttributeDefinitions": [
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
            {"AttributeName": "lsk", "AttributeType": "N"},
        ],
        "LocalSecondaryIndexes": [lsi("byNumber")],
        "BillingMode": "PAY_PER_REQUEST",
    }
    request.update(changes)
    return request


def lsi(
    name: str,
    sort: str = "lsk",
    partition: str = "pk",
    projection: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "IndexName": name,
        "KeySchema": [
            {"AttributeName": partition, "KeyType": "HASH"},
            {"AttributeName": sort, "KeyType": "RANGE"},
        ],
        "Projection": projection or {"ProjectionType": "KEYS_ONLY"},
    }


def numbers(count: int) -> list[dict[str, str]]:
    return [{"AttributeName": f"n{i}", "AttributeType": "N"} for i in range(count)]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {
                "AttributeDefinitions": [
                    {"AttributeName": "pk", "AttributeType": "S"},
                    {"AttributeName": "sk", "AttributeType": "S"},
                    *numbers(6),
                ],
                "LocalSecondaryIndexes": [lsi(f"index{i}", f"n{i}") for i in range(6)],
            },
            INVALID + "Number of LocalSecondaryIndexes exceeds per-table limit of 5",
        ),
        (
            {
                "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}],
                "AttributeDefinitions": [
                    {"AttributeName": "pk", "AttributeType": "S"},
                    {"AttributeName": "lsk", "AttributeType": "N"},
                ],
            },
            INVALID + "Table KeySchema does not have a range key, which is required when "
            "specifying a LocalSecondaryIndex",
        ),
        (
            {
                "AttributeDefinitions": [
                    {"AttributeName": "pk", "AttributeType": "S"},
                    {"AttributeName": "sk", "AttributeType": "S"},
                    {"AttributeName": "lsk", "AttributeType": "N"},
                    {"AttributeName": "other", "AttributeType": "S"},
                ],
                "LocalSecondaryIndexes": [lsi("byOther", "lsk", partition="other")],
            },
            INVALID + "Index KeySchema does not have the same leading hash key as table "
            "KeySchema for index: byOther. index hash key: other, table hash key: pk",
        ),
        (
            {"LocalSecondaryIndexes": [lsi("byNumber"), lsi("byNumber")]},
            INVALID + "Duplicate index name: byNumber",
        ),
        (
            {"LocalSecondaryIndexes": [lsi("byMissing", "missing")]},
            INVALID + "Some index key attributes are not defined in AttributeDefinitions. "
            "Keys: [pk, missing], AttributeDefinitions: [pk, sk, lsk]",
        ),
        (
            {
                "AttributeDefinitions": [
                    {"AttributeName": "pk", "AttributeType": "S"},
                    {"AttributeName": "sk", "AttributeType": "S"},
                    {"AttributeName": "lsk", "AttributeType": "N"},
                    {"AttributeName": "unused", "AttributeType": "S"},
                ]
            },
            INVALID + "Some AttributeDefinitions are not used. AttributeDefinitions: "
            "[pk, sk, lsk, unused], keys used: [pk, sk, lsk]",
        ),
        (
            {
                "LocalSecondaryIndexes": [
                    lsi("byNumber", projection={"ProjectionType": "ALL", "NonKeyAttributes": ["a"]})
                ]
            },
            INVALID + "ProjectionType is ALL, but NonKeyAttributes is specified",
        ),
        (
            {"LocalSecondaryIndexes": [lsi("byNumber", projection={"ProjectionType": "INCLUDE"})]},
            INVALID + "ProjectionType is INCLUDE, but NonKeyAttributes is not specified",
        ),
        # An index's key schema is checked before its projection.
        (
            {
                "LocalSecondaryIndexes": [
                    lsi("byNumber", "nope", projection={"ProjectionType": "INCLUDE"})
                ]
            },
            INVALID + "Some index key attributes are not defined in AttributeDefinitions. "
            "Keys: [pk, nope], AttributeDefinitions: [pk, sk, lsk]",
        ),
        (
            {
                "LocalSecondaryIndexes": [
                    lsi("byNumber", "lsk", "sk", projection={"ProjectionType": "INCLUDE"})
                ]
            },
            INVALID + "Index KeySchema does not have the same leading hash key as table "
            "KeySchema for index: byNumber. index hash key: sk, table hash key: pk",
        ),
        (
            {
                "AttributeDefinitions": [
                    {"AttributeName": "pk", "AttributeType": "S"},
                    {"AttributeName": "sk", "AttributeType": "S"},
                    *numbers(5),
                ],
                "LocalSecondaryIndexes": [
                    lsi(
                        f"index{i}",
                        f"n{i}",
                        projection={
                            "ProjectionType": "INCLUDE",
                            "NonKeyAttributes": [f"a{i}_{j}" for j in range(20 if i < 4 else 21)],
                        },
                    )
                    for i in range(5)
                ],
            },
            "1 validation error detected: Value '[a4_0, a4_1, a4_2, a4_3, a4_4, a4_5, a4_6, a4_7, "
            "a4_8, a4_9, a4_10, a4_11, a4_12, a4_13, a4_14, a4_15, a4_16, a4_17, a4_18, a4_19, "
            "a4_20]' at 'localSecondaryIndexes.5.member.projection.nonKeyAttributes' failed to "
            "satisfy constraint: Member must have length less than or equal to 20",
        ),
        (
            # NonKeyAttributeName is 1 to 255 characters (botocore's model); a list's member
            # constraints are stated once for the list.
            {
                "LocalSecondaryIndexes": [
                    lsi(
                        "index0",
                        projection={
                            "ProjectionType": "INCLUDE",
                            "NonKeyAttributes": ["a", "b" * 256],
                        },
                    )
                ]
            },
            f"1 validation error detected: Value '[a, {'b' * 256}]' at "
            "'localSecondaryIndexes.1.member.projection.nonKeyAttributes' failed to satisfy "
            "constraint: Member must satisfy constraint: [Member must have length less than or "
            "equal to 255, Member must have length greater than or equal to 1]",
        ),
        (
            {"LocalSecondaryIndexes": [lsi("ab")]},
            "1 validation error detected: Value 'ab' at 'localSecondaryIndexes.1.member.indexName' "
            "failed to satisfy constraint: Member must have length greater than or equal to 3",
        ),
    ],
)
def test_create_table_refuses_bad_local_indexes(
    dynamodb: Any, table_name: Callable[[], str], changes: dict[str, Any], message: str
) -> None:
    name = table_name()
    assert error_of(lambda: dynamodb.create_table(**base_request(name, **changes))) == (
        400,
        "ValidationException",
        message,
    )
    assert name not in dynamodb.list_tables()["TableNames"]


def test_100_projected_attributes_across_indexes(
    dynamodb: Any, table_name: Callable[[], str]
) -> None:
    """5 local indexes of 20 NonKeyAttributes (each index's maximum) are the 100 allowed across
    a table's indexes, though every index projects the same names (each counts again); only
    global indexes can take a table past 100 (core.indexes' unit tests)."""
    name = table_name()
    definitions = [
        {"AttributeName": "pk", "AttributeType": "S"},
        {"AttributeName": "sk", "AttributeType": "S"},
        *numbers(5),
    ]

    def indexes(extra: int) -> list[dict[str, Any]]:
        return [
            lsi(
                f"index{i}",
                f"n{i}",
                projection={
                    "ProjectionType": "INCLUDE",
                    "NonKeyAttributes": [f"a{j}" for j in range(20 if i < 4 else extra)],
                },
            )
            for i in range(5)
        ]

    dynamodb.create_table(
        **base_request(name, AttributeDefinitions=definitions, LocalSecondaryIndexes=indexes(20))
    )
    described = wait_active(dynamodb, name)
    assert len(described["LocalSecondaryIndexes"]) == 5


def test_describe_table_shows_each_local_index_and_its_counts(
    dynamodb: Any, table_name: Callable[[], str]
) -> None:
    name = thread_table(dynamodb, table_name())
    dynamodb.put_item(TableName=name, Item=thread("S3", "a", "2015-09-01", Replies={"N": "2"}))
    dynamodb.put_item(TableName=name, Item=thread("S3", "b", None))  # Not in the index.
    described = dynamodb.describe_table(TableName=name)["Table"]
    (index,) = described["LocalSecondaryIndexes"]
    entry = thread("S3", "a", "2015-09-01", Replies={"N": "2"})
    entry_bytes = item_size_bytes(entry)
    assert index == {
        "IndexName": "LastPostIndex",
        "KeySchema": [
            {"AttributeName": "ForumName", "KeyType": "HASH"},
            {"AttributeName": "LastPostDateTime", "KeyType": "RANGE"},
        ],
        "Projection": {"ProjectionType": "INCLUDE", "NonKeyAttributes": ["Replies"]},
        "IndexSizeBytes": entry_bytes + 100,
        "ItemCount": 1,
        "IndexArn": f"{described['TableArn']}/index/LastPostIndex",
    }
    assert described["ItemCount"] == 2


def test_delete_table_removes_its_indexes(dynamodb: Any, table_name: Callable[[], str]) -> None:
    name = thread_table(dynamodb, table_name())
    dynamodb.put_item(TableName=name, Item=thread("S3", "a", "2015-09-01"))
    dynamodb.delete_table(TableName=name)
    deadline_tables = dynamodb.list_tables()["TableNames"]
    assert name not in deadline_tables
    # The same name again: a new, empty index.
    thread_table(dynamodb, name)
    assert query_index(dynamodb, name, "S3")["Items"] == []
    index = dynamodb.describe_table(TableName=name)["Table"]["LocalSecondaryIndexes"][0]
    assert (index["ItemCount"], index["IndexSizeBytes"]) == (0, 0)


# Writes and entries ----------------------------------------------------------------------------


def test_entries_follow_every_write_and_are_sparse(
    dynamodb: Any, table_name: Callable[[], str]
) -> None:
    name = thread_table(dynamodb, table_name())
    dynamodb.put_item(TableName=name, Item=thread("EC2", "a", "2015-10-01"))
    dynamodb.put_item(TableName=name, Item=thread("EC2", "b", None))  # L-27: no entry.
    assert subjects(query_index(dynamodb, name, "EC2")["Items"]) == ["a"]
    # An update that defines the attribute adds the entry; one that changes it moves it.
    dynamodb.update_item(
        TableName=name,
        Key={"ForumName": {"S": "EC2"}, "Subject": {"S": "b"}},
        UpdateExpression="SET LastPostDateTime = :d",
        ExpressionAttributeValues={":d": {"S": "2015-09-01"}},
    )
    assert subjects(query_index(dynamodb, name, "EC2")["Items"]) == ["b", "a"]
    dynamodb.update_item(
        TableName=name,
        Key={"ForumName": {"S": "EC2"}, "Subject": {"S": "a"}},
        UpdateExpression="SET LastPostDateTime = :d",
        ExpressionAttributeValues={":d": {"S": "2015-08-01"}},
    )
    assert subjects(query_index(dynamodb, name, "EC2")["Items"]) == ["a", "b"]
    # Removing the attribute, or the item, removes the entry.
    dynamodb.update_item(
        TableName=name,
        Key={"ForumName": {"S": "EC2"}, "Subject": {"S": "a"}},
        UpdateExpression="REMOVE LastPostDateTime",
    )
    dynamodb.delete_item(TableName=name, Key={"ForumName": {"S": "EC2"}, "Subject": {"S": "b"}})
    assert query_index(dynamodb, name, "EC2")["Items"] == []
    assert len(dynamodb.scan(TableName=name)["Items"]) == 1


def test_a_mistyped_or_empty_index_key_is_refused_and_changes_nothing(
    dynamodb: Any, table_name: Callable[[], str]
) -> None:
    name = thread_table(dynamodb, table_name())
    original = thread("RDS", "a", "2015-10-01")
    dynamodb.put_item(TableName=name, Item=original)
    mismatch = (
        400,
        "ValidationException",
        INVALID + "Type mismatch for Index Key LastPostDateTime Expected: S Actual: N "
        "IndexName: LastPostIndex",
    )
    assert (
        error_of(
            lambda: dynamodb.put_item(
                TableName=name, Item=thread("RDS", "a", None, LastPostDateTime={"N": "20151001"})
            )
        )
        == mismatch
    )
    assert (
        error_of(
            lambda: dynamodb.update_item(
                TableName=name,
                Key={"ForumName": {"S": "RDS"}, "Subject": {"S": "a"}},
                UpdateExpression="SET LastPostDateTime = :d",
                ExpressionAttributeValues={":d": {"N": "1"}},
            )
        )
        == mismatch
    )
    assert error_of(lambda: dynamodb.put_item(TableName=name, Item=thread("RDS", "b", ""))) == (
        400,
        "ValidationException",
        "One or more parameter values are not valid. A value specified for a secondary index key "
        "is not supported. The AttributeValue for a key attribute cannot contain an empty string "
        "value. IndexName: LastPostIndex, IndexKey: LastPostDateTime",
    )
    assert dynamodb.scan(TableName=name, ConsistentRead=True)["Items"] == [original]
    assert query_index(dynamodb, name, "RDS", ConsistentRead=True)["Items"] == [
        thread("RDS", "a", "2015-10-01")
    ]


def test_equal_index_sort_keys_are_all_returned(
    dynamodb: Any, table_name: Callable[[], str]
) -> None:
    name = thread_table(dynamodb, table_name())
    for subject in ("x", "y", "z"):
        dynamodb.put_item(TableName=name, Item=thread("S3", subject, "2015-09-01"))
    found = query_index(
        dynamodb,
        name,
        "S3",
        condition=" and LastPostDateTime = :d",
        values={":d": {"S": "2015-09-01"}},
    )["Items"]
    assert sorted(subjects(found)) == ["x", "y", "z"]


# Query and Scan on the index ------------------------------------------------------------------


@pytest.fixture(scope="module")
def forum(dynamodb: Any) -> str:
    """A Thread table with 30 threads in forum EC2, posted on distinct days, each with Replies
    (projected) and Tags (not projected), and a few in S3."""
    name = thread_table(dynamodb, "lsi-forum-table")
    for day in range(1, 31):
        dynamodb.put_item(
            TableName=name,
            Item=thread(
                "EC2",
                f"subject-{31 - day:02d}",
                f"2015-09-{day:02d}T00:00:00.000Z",
                Replies={"N": str(day)},
                Tags={"SS": [f"tag{day}"]},
            ),
        )
    for day in range(1, 4):
        dynamodb.put_item(
            TableName=name, Item=thread("S3", f"s3-{day}", f"2015-10-0{day}", Replies={"N": "0"})
        )
    return name


def test_query_reads_the_index_in_its_sort_order(dynamodb: Any, forum: str) -> None:
    forward = query_index(dynamodb, forum, "EC2")
    assert forward["Count"] == 30
    assert subjects(forward["Items"]) == [f"subject-{31 - day:02d}" for day in range(1, 31)]
    backward = query_index(dynamodb, forum, "EC2", ScanIndexForward=False)
    assert subjects(backward["Items"]) == subjects(forward["Items"])[::-1]
    for consistent in (True, False):
        assert query_index(dynamodb, forum, "EC2", ConsistentRead=consistent)["Count"] == 30


def test_the_seed_query_with_a_time_window_fetches_tags(dynamodb: Any, forum: str) -> None:
    """L-20: between on the index sort key, ProjectionExpression naming Tags (not projected)."""
    reply = query_index(
        dynamodb,
        forum,
        "EC2",
        condition=" and LastPostDateTime between :v_start and :v_end",
        values={
            ":v_start": {"S": "2015-09-10T00:00:00.000Z"},
            ":v_end": {"S": "2015-09-12T00:00:00.000Z"},
        },
        ProjectionExpression="Subject, LastPostDateTime, Replies, Tags",
        ReturnConsumedCapacity="INDEXES",
    )
    assert reply["Items"] == [
        {
            "Subject": {"S": f"subject-{31 - day}"},
            "LastPostDateTime": {"S": f"2015-09-{day}T00:00:00.000Z"},
            "Replies": {"N": str(day)},
            "Tags": {"SS": [f"tag{day}"]},
        }
        for day in (10, 11, 12)
    ]
    # Three entries, rounded together to one 4 KB unit, eventually consistent: 0.5 on the index;
    # three fetched items, each rounded to 4 KB: 3 x 0.5 on the table (L-18, L-34).
    assert reply["ConsumedCapacity"] == {
        "TableName": forum,
        "CapacityUnits": 2.0,
        "Table": {"CapacityUnits": 1.5},
        "LocalSecondaryIndexes": {"LastPostIndex": {"CapacityUnits": 0.5}},
    }


def test_projected_attributes_cost_no_fetch(dynamodb: Any, forum: str) -> None:
    """L-19: Replies is projected, so reading it touches only the index."""
    reply = query_index(
        dynamodb,
        forum,
        "EC2",
        ProjectionExpression="Subject, Replies",
        ReturnConsumedCapacity="INDEXES",
        ConsistentRead=True,
    )
    assert reply["Count"] == 30 and all(
        set(item) == {"Subject", "Replies"} for item in reply["Items"]
    )
    assert reply["ConsumedCapacity"]["Table"] == {"CapacityUnits": 0.0}
    assert reply["ConsumedCapacity"]["LocalSecondaryIndexes"] == {
        "LastPostIndex": {"CapacityUnits": 1.0}
    }


def test_select_modes_on_the_index(dynamodb: Any, forum: str) -> None:
    projected = query_index(dynamodb, forum, "S3")  # ALL_PROJECTED_ATTRIBUTES by default.
    assert {frozenset(item) for item in projected["Items"]} == {
        frozenset({"ForumName", "Subject", "LastPostDateTime", "Replies"})
    }
    explicit = query_index(dynamodb, forum, "S3", Select="ALL_PROJECTED_ATTRIBUTES")
    assert explicit["Items"] == projected["Items"]
    whole = query_index(dynamodb, forum, "EC2", Select="ALL_ATTRIBUTES", Limit=1)["Items"]
    assert set(whole[0]) == {"ForumName", "Subject", "LastPostDateTime", "Replies", "Tags"}
    counted = query_index(dynamodb, forum, "EC2", Select="COUNT")
    assert (counted["Count"], "Items" in counted) == (30, False)
    specific = query_index(
        dynamodb,
        forum,
        "EC2",
        Select="SPECIFIC_ATTRIBUTES",
        ProjectionExpression="Tags",
        Limit=2,
    )["Items"]
    assert specific == [{"Tags": {"SS": ["tag1"]}}, {"Tags": {"SS": ["tag2"]}}]
    filtered = query_index(
        dynamodb,
        forum,
        "EC2",
        FilterExpression="contains(Tags, :t)",
        values={":t": {"S": "tag7"}},
    )
    assert (filtered["Count"], filtered["ScannedCount"]) == (1, 30)
    assert subjects(filtered["Items"]) == ["subject-24"]


def test_pages_carry_index_and_table_keys(dynamodb: Any, forum: str) -> None:
    request: dict[str, Any] = {"Limit": 7}
    seen: list[str] = []
    for _ in range(10):
        page = query_index(dynamodb, forum, "EC2", **request)
        seen.extend(subjects(page["Items"]))
        if "LastEvaluatedKey" not in page:
            break
        assert set(page["LastEvaluatedKey"]) == {"ForumName", "Subject", "LastPostDateTime"}
        request["ExclusiveStartKey"] = page["LastEvaluatedKey"]
    assert seen == subjects(query_index(dynamodb, forum, "EC2")["Items"])
    assert error_of(
        lambda: query_index(
            dynamodb,
            forum,
            "EC2",
            ExclusiveStartKey={"ForumName": {"S": "EC2"}, "Subject": {"S": "subject-01"}},
        )
    ) == (
        400,
        "ValidationException",
        "The provided starting key is invalid: The provided key element does not match the schema",
    )


def test_scan_and_parallel_scan_of_the_index(dynamodb: Any, forum: str) -> None:
    whole = dynamodb.scan(TableName=forum, IndexName="LastPostIndex")
    assert whole["Count"] == 33
    segments: list[str] = []
    for segment in range(3):
        request: dict[str, Any] = {
            "TableName": forum,
            "IndexName": "LastPostIndex",
            "Segment": segment,
            "TotalSegments": 3,
            "Limit": 4,
        }
        for _ in range(40):
            page = dynamodb.scan(**request)
            segments.extend(subjects(page["Items"]))
            if "LastEvaluatedKey" not in page:
                break
            request["ExclusiveStartKey"] = page["LastEvaluatedKey"]
    assert sorted(segments) == sorted(subjects(whole["Items"]))


def test_unknown_index(dynamodb: Any, forum: str) -> None:
    expected = (400, "ValidationException", "The table does not have the specified index: nope")
    assert error_of(lambda: dynamodb.scan(TableName=forum, IndexName="nope")) == expected
    assert (
        error_of(
            lambda: dynamodb.query(
                TableName=forum,
                IndexName="nope",
                KeyConditionExpression="ForumName = :f",
                ExpressionAttributeValues={":f": {"S": "EC2"}},
            )
        )
        == expected
    )


# Write capacity --------------------------------------------------------------------------------


def test_index_write_units_follow_the_guides_cases(
    dynamodb: Any, table_name: Callable[[], str]
) -> None:
    """L-32: new entry 1, changed index key 2, removed entry 1, not in the index 0."""
    name = thread_table(dynamodb, table_name())
    key = {"ForumName": {"S": "S3"}, "Subject": {"S": "a"}}

    def index_units(reply: dict[str, Any]) -> float:
        capacity = reply["ConsumedCapacity"]
        return float(
            capacity.get("LocalSecondaryIndexes", {})
            .get("LastPostIndex", {})
            .get("CapacityUnits", 0.0)
        )

    def update(expression: str, **values: Any) -> dict[str, Any]:
        reply: dict[str, Any] = dynamodb.update_item(
            TableName=name,
            Key=key,
            UpdateExpression=expression,
            ReturnConsumedCapacity="INDEXES",
            **({"ExpressionAttributeValues": values} if values else {}),
        )
        return reply

    assert index_units(update("SET ViewCount = :v", **{":v": {"N": "1"}})) == 0.0  # Case 4.
    created = update("SET LastPostDateTime = :d", **{":d": {"S": "2015"}})
    assert index_units(created) == 1.0  # Case 1.
    assert created["ConsumedCapacity"]["CapacityUnits"] == 2.0  # The table's unit and the index's.
    assert index_units(update("SET LastPostDateTime = :d", **{":d": {"S": "2016"}})) == 2.0
    assert index_units(update("SET ViewCount = :v", **{":v": {"N": "2"}})) == 0.0  # Not projected.
    assert index_units(update("SET Replies = :v", **{":v": {"N": "2"}})) == 1.0  # X-04.
    assert index_units(update("REMOVE LastPostDateTime")) == 1.0  # Case 3.
    put = dynamodb.put_item(
        TableName=name,
        Item=thread("S3", "b", "2015"),
        ReturnConsumedCapacity="TOTAL",
    )
    assert put["ConsumedCapacity"] == {"TableName": name, "CapacityUnits": 2.0}


# Item collections ------------------------------------------------------------------------------


def test_item_collection_metrics(dynamodb: Any, table_name: Callable[[], str]) -> None:
    name = thread_table(dynamodb, table_name())
    expected = {
        "ItemCollectionKey": {"ForumName": {"S": "EC2"}},
        "SizeEstimateRangeGB": [0.0, 1.0],
    }
    put = dynamodb.put_item(
        TableName=name, Item=thread("EC2", "a", "2015"), ReturnItemCollectionMetrics="SIZE"
    )
    assert put["ItemCollectionMetrics"] == expected
    updated = dynamodb.update_item(
        TableName=name,
        Key={"ForumName": {"S": "EC2"}, "Subject": {"S": "a"}},
        UpdateExpression="SET Replies = :r",
        ExpressionAttributeValues={":r": {"N": "1"}},
        ReturnItemCollectionMetrics="SIZE",
    )
    assert updated["ItemCollectionMetrics"] == expected
    deleted = dynamodb.delete_item(
        TableName=name,
        Key={"ForumName": {"S": "EC2"}, "Subject": {"S": "a"}},
        ReturnItemCollectionMetrics="SIZE",
    )
    assert deleted["ItemCollectionMetrics"] == expected
    batch = dynamodb.batch_write_item(
        RequestItems={
            name: [
                {"PutRequest": {"Item": thread("EC2", "b", "2015")}},
                {"PutRequest": {"Item": thread("RDS", "c", "2015")}},
            ]
        },
        ReturnItemCollectionMetrics="SIZE",
    )
    assert sorted(
        m["ItemCollectionKey"]["ForumName"]["S"] for m in batch["ItemCollectionMetrics"][name]
    ) == ["EC2", "RDS"]
    # Not asked for, or NONE: no metrics.
    plain = dynamodb.put_item(TableName=name, Item=thread("EC2", "c", "2015"))
    assert "ItemCollectionMetrics" not in plain


def test_no_item_collection_metrics_without_local_indexes(
    dynamodb: Any, table_name: Callable[[], str], create_table: Callable[..., str]
) -> None:
    name = create_table(dynamodb, table_name(), range_key=("sk", "S"))
    reply = dynamodb.put_item(
        TableName=name,
        Item={"pk": {"S": "a"}, "sk": {"S": "b"}},
        ReturnItemCollectionMetrics="SIZE",
    )
    assert "ItemCollectionMetrics" not in reply


def test_a_full_item_collection_refuses_growth_only(
    dynamodb: Any, table_name: Callable[[], str]
) -> None:
    """L-41..L-43, with this module's cap of about 1 MB instead of 10 GB."""
    name = thread_table(dynamodb, table_name(), projection={"ProjectionType": "ALL"})
    blob = "x" * 200_000  # With ALL, each item counts twice: about 400 KB per item.
    dynamodb.put_item(TableName=name, Item=thread("S3", "a", "2015", Body={"S": blob}))
    dynamodb.put_item(TableName=name, Item=thread("S3", "b", "2015", Body={"S": blob}))
    refused = error_of(
        lambda: dynamodb.put_item(TableName=name, Item=thread("S3", "c", "2015", Body={"S": blob}))
    )
    assert refused == (400, "ItemCollectionSizeLimitExceededException", "Collection size exceeded.")
    assert "Item" not in dynamodb.get_item(
        TableName=name, Key={"ForumName": {"S": "S3"}, "Subject": {"S": "c"}}
    )
    # Growing an item is refused too; reads, shrinking writes and other collections go on.
    assert (
        error_of(
            lambda: dynamodb.update_item(
                TableName=name,
                Key={"ForumName": {"S": "S3"}, "Subject": {"S": "a"}},
                UpdateExpression="SET More = :m",
                ExpressionAttributeValues={":m": {"S": blob}},
            )
        )[1]
        == "ItemCollectionSizeLimitExceededException"
    )
    assert query_index(dynamodb, name, "S3", Select="COUNT")["Count"] == 2
    dynamodb.put_item(TableName=name, Item=thread("EC2", "c", "2015", Body={"S": blob}))
    dynamodb.update_item(
        TableName=name,
        Key={"ForumName": {"S": "S3"}, "Subject": {"S": "a"}},
        UpdateExpression="REMOVE Body",
    )
    # Back under the cap, the collection grows again.
    dynamodb.put_item(TableName=name, Item=thread("S3", "c", "2015", Body={"S": blob}))
    assert query_index(dynamodb, name, "S3", Select="COUNT")["Count"] == 3
    assert limits.ITEM_COLLECTION_BYTES_MAX == 10 * limits.GIB  # The default the cap replaces.


def test_a_batch_with_a_mistyped_index_key_is_refused_whole(
    dynamodb: Any, table_name: Callable[[], str]
) -> None:
    name = thread_table(dynamodb, table_name())
    refused = error_of(
        lambda: dynamodb.batch_write_item(
            RequestItems={
                name: [
                    {"PutRequest": {"Item": thread("S3", "good", "2015")}},
                    {
                        "PutRequest": {
                            "Item": thread("S3", "bad", None, LastPostDateTime={"N": "1"})
                        }
                    },
                ]
            }
        )
    )
    assert refused == (
        400,
        "ValidationException",
        INVALID + "Type mismatch for Index Key LastPostDateTime Expected: S Actual: N "
        "IndexName: LastPostIndex",
    )
    assert dynamodb.scan(TableName=name, ConsistentRead=True)["Count"] == 0


def test_a_page_with_fetches_counts_each_item_as_4_kb(
    dynamodb: Any, table_name: Callable[[], str]
) -> None:
    """L-34: the 1 MB page counts the entries' bytes plus each fetched item rounded up to 4 KB,
    so a page of small items that all need a fetch holds about 256 of them."""
    name = thread_table(dynamodb, table_name(), projection={"ProjectionType": "KEYS_ONLY"})
    count = 300
    for start in range(0, count, limits.BATCH_WRITE_ITEMS_MAX):
        dynamodb.batch_write_item(
            RequestItems={
                name: [
                    {"PutRequest": {"Item": thread("EC2", f"s{i:03d}", f"d{i:03d}")}}
                    for i in range(start, min(count, start + limits.BATCH_WRITE_ITEMS_MAX))
                ]
            }
        )
    entry = thread("EC2", "s000", "d000")
    per_item = item_size_bytes(entry) + limits.READ_UNIT_BYTES
    expected = -(-limits.QUERY_PAGE_BYTES_MAX // per_item)
    fetched = query_index(dynamodb, name, "EC2", Select="ALL_ATTRIBUTES")
    assert (fetched["Count"], "LastEvaluatedKey" in fetched) == (expected, True)
    rest = query_index(
        dynamodb,
        name,
        "EC2",
        Select="ALL_ATTRIBUTES",
        ExclusiveStartKey=fetched["LastEvaluatedKey"],
    )
    assert fetched["Count"] + rest["Count"] == count
    # Without a fetch the same entries fit in one page.
    assert query_index(dynamodb, name, "EC2")["Count"] == count


def test_ttl_deletes_reach_the_local_indexes(dynamodb: Any, table_name: Callable[[], str]) -> None:
    name = thread_table(dynamodb, table_name())
    dynamodb.update_time_to_live(
        TableName=name, TimeToLiveSpecification={"Enabled": True, "AttributeName": "Expires"}
    )
    dynamodb.put_item(
        TableName=name, Item=thread("S3", "old", "2015", Expires={"N": str(int(time.time()) - 5)})
    )
    dynamodb.put_item(TableName=name, Item=thread("S3", "kept", "2016"))
    deadline = time.monotonic() + TTL_DELETION_SECONDS_MAX
    while query_index(dynamodb, name, "S3", ConsistentRead=True)["Count"] != 1:
        assert time.monotonic() < deadline, "the expired item's entry was not deleted"
        time.sleep(0.2)
    assert subjects(query_index(dynamodb, name, "S3", ConsistentRead=True)["Items"]) == ["kept"]
    assert dynamodb.scan(TableName=name, ConsistentRead=True)["Count"] == 1


def test_update_table_cannot_add_a_local_index(
    cluster: LocalCluster, dynamodb: Any, table_name: Callable[[], str]
) -> None:
    """L-11: LSIs exist only from CreateTable. UpdateTable has no LocalSecondaryIndexes member
    (boto3 will not even send one); sent raw, it is no change DynamoDB knows of."""
    name = thread_table(dynamodb, table_name())
    reply = call(
        cluster,
        "UpdateTable",
        {"TableName": name, "LocalSecondaryIndexes": [lsi("byNumber", "Views")]},
    )
    assert reply.status == 400
    assert reply.json()["message"].startswith("At least one of ProvisionedThroughput")
    described = dynamodb.describe_table(TableName=name)["Table"]
    assert [index["IndexName"] for index in described["LocalSecondaryIndexes"]] == ["LastPostIndex"]


def test_batch_write_reports_local_index_units(
    dynamodb: Any, table_name: Callable[[], str]
) -> None:
    name = thread_table(dynamodb, table_name())
    reply = dynamodb.batch_write_item(
        RequestItems={
            name: [
                {"PutRequest": {"Item": thread("S3", "a", "2015")}},
                {"PutRequest": {"Item": thread("S3", "b", None)}},  # Not in the index.
            ]
        },
        ReturnConsumedCapacity="INDEXES",
    )
    assert reply["ConsumedCapacity"] == [
        {
            "TableName": name,
            "CapacityUnits": 3.0,
            "Table": {"CapacityUnits": 2.0},
            "LocalSecondaryIndexes": {"LastPostIndex": {"CapacityUnits": 1.0}},
        }
    ]


# Transactions on a table with local indexes ---------------------------------------------------


def test_a_transaction_reports_index_units_and_item_collection_metrics(
    dynamodb: Any, table_name: Callable[[], str]
) -> None:
    name = thread_table(dynamodb, table_name())
    reply = dynamodb.transact_write_items(
        TransactItems=[
            {"Put": {"TableName": name, "Item": thread("EC2", "a", "2015")}},
            {"Put": {"TableName": name, "Item": thread("EC2", "b", None)}},  # Not indexed.
            {"Put": {"TableName": name, "Item": thread("RDS", "c", "2015")}},
        ],
        ReturnConsumedCapacity="INDEXES",
        ReturnItemCollectionMetrics="SIZE",
    )
    # Two units per item, and two per index entry written (the transactional price).
    assert reply["ConsumedCapacity"] == [
        {
            "TableName": name,
            "CapacityUnits": 10.0,
            "WriteCapacityUnits": 10.0,
            "Table": {"CapacityUnits": 6.0, "WriteCapacityUnits": 6.0},
            "LocalSecondaryIndexes": {
                "LastPostIndex": {"CapacityUnits": 4.0, "WriteCapacityUnits": 4.0}
            },
        }
    ]
    metrics = reply["ItemCollectionMetrics"][name]
    assert sorted(m["ItemCollectionKey"]["ForumName"]["S"] for m in metrics) == ["EC2", "RDS"]
    assert all(m["SizeEstimateRangeGB"] == [0.0, 1.0] for m in metrics)
    # A ConditionCheck changes no collection; without SIZE there are no metrics.
    checked = dynamodb.transact_write_items(
        TransactItems=[
            {
                "ConditionCheck": {
                    "TableName": name,
                    "Key": {"ForumName": {"S": "EC2"}, "Subject": {"S": "a"}},
                    "ConditionExpression": "attribute_exists(Subject)",
                }
            },
            {
                "Delete": {
                    "TableName": name,
                    "Key": {"ForumName": {"S": "RDS"}, "Subject": {"S": "c"}},
                }
            },
        ],
        ReturnItemCollectionMetrics="SIZE",
    )
    assert [m["ItemCollectionKey"] for m in checked["ItemCollectionMetrics"][name]] == [
        {"ForumName": {"S": "RDS"}}
    ]
    plain = dynamodb.transact_write_items(
        TransactItems=[{"Put": {"TableName": name, "Item": thread("EC2", "d", "2015")}}]
    )
    assert "ItemCollectionMetrics" not in plain


def test_a_transaction_past_the_collection_cap_is_cancelled_before_anything_commits(
    dynamodb: Any, table_name: Callable[[], str]
) -> None:
    name = thread_table(dynamodb, table_name(), projection={"ProjectionType": "ALL"})
    blob = "x" * 200_000  # With ALL, each item counts twice: about 400 KB per item.
    dynamodb.put_item(TableName=name, Item=thread("S3", "a", "2015", Body={"S": blob}))
    error = error_response(
        lambda: dynamodb.transact_write_items(
            TransactItems=[
                {"Put": {"TableName": name, "Item": thread("EC2", "x", "2015")}},
                {"Put": {"TableName": name, "Item": thread("S3", "b", "2015", Body={"S": blob})}},
                {"Put": {"TableName": name, "Item": thread("S3", "c", "2015", Body={"S": blob})}},
            ]
        )
    )
    assert error["Error"]["Code"] == "TransactionCanceledException"
    assert [(r["Code"], r.get("Message")) for r in error["CancellationReasons"]] == [
        ("None", None),
        ("None", None),
        ("ItemCollectionSizeLimitExceeded", "Collection size exceeded."),
    ]
    # Nothing committed, in either collection.
    for forum, subject in (("EC2", "x"), ("S3", "b"), ("S3", "c")):
        key = {"ForumName": {"S": forum}, "Subject": {"S": subject}}
        assert "Item" not in dynamodb.get_item(TableName=name, Key=key, ConsistentRead=True)
