"""Query and Scan against a real cluster (three nodes, two routers), through boto3.

Key conditions, filters, projections, Select and their legacy forms; and paging: thousands of items
spread over every partition and node read page by page with and without Limit, 1 MB pages, pages
that end exactly where a partition does, and parallel scan segments, each time checking that the
pages together hold every item exactly once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from core import limits
from dynalab.cluster import LocalCluster
from tests.integration.conftest import create_active_table

SORT_KEY = ("sk", "N")
# Enough items to land on every partition of a new table, and so on every node.
MANY_ITEMS = 3000
# A Query over a collection larger than one page: 2,000 items of about 1 KB are about 2 MB.
COLLECTION_ITEMS = 2000
PADDING = "x" * 1000


def fill(dynamodb: Any, name: str, items: list[dict[str, Any]]) -> None:
    for start in range(0, len(items), limits.BATCH_WRITE_ITEMS_MAX):
        chunk = items[start : start + limits.BATCH_WRITE_ITEMS_MAX]
        reply = dynamodb.batch_write_item(
            RequestItems={name: [{"PutRequest": {"Item": item}} for item in chunk]}
        )
        assert reply["UnprocessedItems"] == {}


def pages(call: Callable[..., dict[str, Any]], **request: Any) -> Iterator[dict[str, Any]]:
    """Every page of a Query or Scan, following LastEvaluatedKey."""
    for _ in range(100_000):
        page = call(**request)
        yield page
        if "LastEvaluatedKey" not in page:
            return
        request["ExclusiveStartKey"] = page["LastEvaluatedKey"]
    pytest.fail("the pages never ended")


def ids(items: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(item["pk"]["S"], item["sk"]["N"]) for item in items]


def exactly_once(found: list[tuple[str, str]], expected: set[tuple[str, str]]) -> None:
    repeated = [key for key, times in Counter(found).items() if times > 1]
    assert not repeated, f"{len(repeated)} items read twice, e.g. {repeated[:3]}"
    missing = expected - set(found)
    assert not missing, f"{len(missing)} items never read, e.g. {sorted(missing)[:3]}"
    assert set(found) == expected


@pytest.fixture(scope="module")
def many(dynamodb: Any) -> tuple[str, set[tuple[str, str]]]:
    """A table of MANY_ITEMS items under 300 partition keys, spread over every partition."""
    name = create_active_table(dynamodb, "queries-many-items", range_key=SORT_KEY)
    items = [
        {"pk": {"S": f"user{i % 300}"}, "sk": {"N": str(i)}, "odd": {"BOOL": i % 2 == 1}}
        for i in range(MANY_ITEMS)
    ]
    fill(dynamodb, name, items)
    return name, set(ids(items))


@pytest.fixture
def music(dynamodb: Any, table_name: Callable[[], str]) -> str:
    """A small table of songs: pk artist, sk (S) song title, with a few attributes."""
    name = create_active_table(dynamodb, table_name(), range_key=("sk", "S"))
    songs = [
        ("Pärt", "Fratres", 1977),
        ("Pärt", "Spiegel im Spiegel", 1978),
        ("Pärt", "Für Alina", 1976),
        ("Pärt", "Tabula Rasa", 1977),
        ("Pärt", "Summa", 1977),
        ("Glass", "Opening", 1982),
    ]
    fill(
        dynamodb,
        name,
        [
            {"pk": {"S": artist}, "sk": {"S": song}, "year": {"N": str(year)}, "len": {"N": "5"}}
            for artist, song, year in songs
        ],
    )
    return name


def songs(reply: dict[str, Any]) -> list[str]:
    return [item["sk"]["S"] for item in reply["Items"]]


# Query -------------------------------------------------------------------------------------------


def test_query_returns_a_collection_in_sort_key_order(dynamodb: Any, music: str) -> None:
    request = {
        "TableName": music,
        "KeyConditionExpression": "pk = :a",
        "ExpressionAttributeValues": {":a": {"S": "Pärt"}},
    }
    forward = dynamodb.query(**request)
    assert songs(forward) == ["Fratres", "Für Alina", "Spiegel im Spiegel", "Summa", "Tabula Rasa"]
    assert (forward["Count"], forward["ScannedCount"]) == (5, 5)
    assert "LastEvaluatedKey" not in forward
    backward = dynamodb.query(**request, ScanIndexForward=False)
    assert songs(backward) == list(reversed(songs(forward)))


@pytest.mark.parametrize(
    ("condition", "values", "expected"),
    [
        ("sk = :s", {":s": "Summa"}, ["Summa"]),
        ("sk < :s", {":s": "Summa"}, ["Fratres", "Für Alina", "Spiegel im Spiegel"]),
        ("sk <= :s", {":s": "Summa"}, ["Fratres", "Für Alina", "Spiegel im Spiegel", "Summa"]),
        ("sk > :s", {":s": "Summa"}, ["Tabula Rasa"]),
        ("sk >= :s", {":s": "Summa"}, ["Summa", "Tabula Rasa"]),
        ("sk BETWEEN :a AND :b", {":a": "G", ":b": "Summa"}, ["Spiegel im Spiegel", "Summa"]),
        ("begins_with(sk, :s)", {":s": "S"}, ["Spiegel im Spiegel", "Summa"]),
        (":s > sk", {":s": "G"}, ["Fratres", "Für Alina"]),
    ],
)
def test_query_sort_key_conditions(
    dynamodb: Any, music: str, condition: str, values: dict[str, str], expected: list[str]
) -> None:
    reply = dynamodb.query(
        TableName=music,
        KeyConditionExpression=f"pk = :pk AND {condition}",
        ExpressionAttributeValues={
            ":pk": {"S": "Pärt"},
            **{name: {"S": value} for name, value in values.items()},
        },
    )
    assert songs(reply) == expected


def test_query_filter_counts_and_projection(dynamodb: Any, music: str) -> None:
    reply = dynamodb.query(
        TableName=music,
        KeyConditionExpression="pk = :pk",
        FilterExpression="#y = :y",
        ProjectionExpression="sk, #y",
        ExpressionAttributeNames={"#y": "year"},
        ExpressionAttributeValues={":pk": {"S": "Pärt"}, ":y": {"N": "1977"}},
    )
    assert reply["Items"] == [
        {"sk": {"S": "Fratres"}, "year": {"N": "1977"}},
        {"sk": {"S": "Summa"}, "year": {"N": "1977"}},
        {"sk": {"S": "Tabula Rasa"}, "year": {"N": "1977"}},
    ]
    assert (reply["Count"], reply["ScannedCount"]) == (3, 5)


def test_query_select_count(dynamodb: Any, music: str) -> None:
    reply = dynamodb.query(
        TableName=music,
        KeyConditionExpression="pk = :pk",
        FilterExpression="#y < :y",
        ExpressionAttributeNames={"#y": "year"},
        ExpressionAttributeValues={":pk": {"S": "Pärt"}, ":y": {"N": "1978"}},
        Select="COUNT",
    )
    assert "Items" not in reply
    assert (reply["Count"], reply["ScannedCount"]) == (4, 5)


def test_query_legacy_parameters(dynamodb: Any, music: str) -> None:
    reply = dynamodb.query(
        TableName=music,
        KeyConditions={
            "pk": {"ComparisonOperator": "EQ", "AttributeValueList": [{"S": "Pärt"}]},
            "sk": {"ComparisonOperator": "BEGINS_WITH", "AttributeValueList": [{"S": "F"}]},
        },
        QueryFilter={
            "year": {"ComparisonOperator": "LT", "AttributeValueList": [{"N": "1977"}]},
            "len": {"ComparisonOperator": "NULL"},
        },
        ConditionalOperator="OR",
        AttributesToGet=["sk", "year"],
    )
    assert reply["Items"] == [{"sk": {"S": "Für Alina"}, "year": {"N": "1976"}}]
    assert reply["ScannedCount"] == 2


def test_key_conditions_with_a_filter_expression(dynamodb: Any, music: str) -> None:
    reply = dynamodb.query(
        TableName=music,
        KeyConditions={"pk": {"ComparisonOperator": "EQ", "AttributeValueList": [{"S": "Pärt"}]}},
        FilterExpression="#y > :y",
        ExpressionAttributeNames={"#y": "year"},
        ExpressionAttributeValues={":y": {"N": "1977"}},
    )
    assert songs(reply) == ["Spiegel im Spiegel"]


def test_query_limit_pages_in_both_directions(dynamodb: Any, music: str) -> None:
    request = {
        "TableName": music,
        "KeyConditionExpression": "pk = :a",
        "ExpressionAttributeValues": {":a": {"S": "Pärt"}},
        "Limit": 2,
    }
    forward = list(pages(dynamodb.query, **request))
    assert [songs(page) for page in forward] == [
        ["Fratres", "Für Alina"],
        ["Spiegel im Spiegel", "Summa"],
        ["Tabula Rasa"],
    ]
    assert forward[0]["LastEvaluatedKey"] == {"pk": {"S": "Pärt"}, "sk": {"S": "Für Alina"}}
    backward = list(pages(dynamodb.query, **request, ScanIndexForward=False))
    assert [songs(page) for page in backward] == [
        ["Tabula Rasa", "Summa"],
        ["Spiegel im Spiegel", "Für Alina"],
        ["Fratres"],
    ]


def test_query_page_ending_on_the_last_item_names_it(dynamodb: Any, music: str) -> None:
    request = {
        "TableName": music,
        "KeyConditionExpression": "pk = :a",
        "ExpressionAttributeValues": {":a": {"S": "Glass"}},
        "Limit": 1,
    }
    first = dynamodb.query(**request)
    assert songs(first) == ["Opening"]
    # Like DynamoDB, a page stopped by its Limit names its last key even if nothing follows.
    assert first["LastEvaluatedKey"] == {"pk": {"S": "Glass"}, "sk": {"S": "Opening"}}
    last = dynamodb.query(**request, ExclusiveStartKey=first["LastEvaluatedKey"])
    assert (last["Items"], last["Count"]) == ([], 0)
    assert "LastEvaluatedKey" not in last


def test_query_a_collection_larger_than_a_page(
    dynamodb: Any, table_name: Callable[[], str]
) -> None:
    name = create_active_table(dynamodb, table_name(), range_key=SORT_KEY)
    fill(
        dynamodb,
        name,
        [
            {"pk": {"S": "big"}, "sk": {"N": str(i)}, "pad": {"S": PADDING}}
            for i in range(COLLECTION_ITEMS)
        ],
    )
    fill(dynamodb, name, [{"pk": {"S": "other"}, "sk": {"N": str(i)}} for i in range(50)])
    expected = {("big", str(i)) for i in range(COLLECTION_ITEMS)}
    for forward in (True, False):
        request = {
            "TableName": name,
            "KeyConditionExpression": "pk = :p",
            "ExpressionAttributeValues": {":p": {"S": "big"}},
            "ScanIndexForward": forward,
        }
        read = list(pages(dynamodb.query, **request))
        # 1 MB of ~1 KB items per page, the item that crosses the megabyte included.
        assert len(read) >= 2
        assert all(page["ScannedCount"] <= limits.QUERY_PAGE_BYTES_MAX // 1000 + 1 for page in read)
        found = [key for page in read for key in ids(page["Items"])]
        exactly_once(found, expected)
        numbers = [int(sk) for _, sk in found]
        assert numbers == sorted(numbers, reverse=not forward)
        limited = list(pages(dynamodb.query, **request, Limit=333))
        assert [page["Count"] for page in limited[:-1]] == [333] * (len(limited) - 1)
        exactly_once([key for page in limited for key in ids(page["Items"])], expected)


# Scan --------------------------------------------------------------------------------------------


def test_scan_reads_every_item_once(dynamodb: Any, many: tuple[str, set[Any]]) -> None:
    name, expected = many
    read = list(pages(dynamodb.scan, TableName=name))
    exactly_once([key for page in read for key in ids(page["Items"])], expected)
    assert sum(page["Count"] for page in read) == MANY_ITEMS


@pytest.mark.parametrize("limit", [7, 100, 1000])
def test_scan_pages_with_a_limit(dynamodb: Any, many: tuple[str, set[Any]], limit: int) -> None:
    name, expected = many
    read = list(pages(dynamodb.scan, TableName=name, Limit=limit))
    # Every page but the last is full: a page continues into the next partition while it has room.
    assert all(page["ScannedCount"] == limit for page in read[:-1])
    exactly_once([key for page in read for key in ids(page["Items"])], expected)


def test_scan_pages_resume_through_either_router(
    cluster: LocalCluster,
    dynamodb: Any,
    dynamodb_for: Callable[[str], Any],
    many: tuple[str, set[Any]],
) -> None:
    name, expected = many
    clients = [dynamodb, dynamodb_for(cluster.router_urls[1])]
    found: list[tuple[str, str]] = []
    request: dict[str, Any] = {"TableName": name, "Limit": 250}
    for turn in range(MANY_ITEMS):
        page = clients[turn % 2].scan(**request)
        found.extend(ids(page["Items"]))
        if "LastEvaluatedKey" not in page:
            break
        request["ExclusiveStartKey"] = page["LastEvaluatedKey"]
    exactly_once(found, expected)


def test_scan_with_limit_one_crosses_every_partition_boundary(
    dynamodb: Any, table_name: Callable[[], str]
) -> None:
    name = create_active_table(dynamodb, table_name(), range_key=SORT_KEY)
    items = [{"pk": {"S": f"k{i}"}, "sk": {"N": str(i)}} for i in range(120)]
    fill(dynamodb, name, items)
    read = list(pages(dynamodb.scan, TableName=name, Limit=1))
    assert all(page["ScannedCount"] <= 1 for page in read)
    exactly_once([key for page in read for key in ids(page["Items"])], set(ids(items)))


def test_scan_filter_and_count(dynamodb: Any, many: tuple[str, set[Any]]) -> None:
    name, _ = many
    odd = list(
        pages(
            dynamodb.scan,
            TableName=name,
            FilterExpression="odd = :t",
            ExpressionAttributeValues={":t": {"BOOL": True}},
            Limit=500,
        )
    )
    assert sum(page["Count"] for page in odd) == MANY_ITEMS // 2
    assert sum(page["ScannedCount"] for page in odd) == MANY_ITEMS
    assert all(item["odd"] == {"BOOL": True} for page in odd for item in page["Items"])
    counted = list(pages(dynamodb.scan, TableName=name, Select="COUNT"))
    assert all("Items" not in page for page in counted)
    assert sum(page["Count"] for page in counted) == MANY_ITEMS
    legacy = list(
        pages(
            dynamodb.scan,
            TableName=name,
            ScanFilter={
                "sk": {
                    "ComparisonOperator": "BETWEEN",
                    "AttributeValueList": [{"N": "0"}, {"N": "9"}],
                },
                "pk": {
                    "ComparisonOperator": "IN",
                    "AttributeValueList": [{"S": f"user{i}"} for i in (0, 2, 4, 6, 8)],
                },
            },
            ConditionalOperator="AND",
            AttributesToGet=["sk"],
        )
    )
    assert sorted(int(item["sk"]["N"]) for page in legacy for item in page["Items"]) == [
        0,
        2,
        4,
        6,
        8,
    ]


def test_scan_pages_stop_at_one_megabyte(dynamodb: Any, table_name: Callable[[], str]) -> None:
    name = create_active_table(dynamodb, table_name(), range_key=SORT_KEY)
    value = "v" * (100 * limits.KIB)
    items = [{"pk": {"S": f"m{i}"}, "sk": {"N": str(i)}, "v": {"S": value}} for i in range(40)]
    for item in items:
        dynamodb.put_item(TableName=name, Item=item)
    read = list(pages(dynamodb.scan, TableName=name, ProjectionExpression="pk, sk"))
    # About 100 KB each: a page stops at the item that takes it past 1 MB.
    per_page = limits.QUERY_PAGE_BYTES_MAX // len(value) + 1
    assert len(read) >= len(items) // per_page
    assert all(page["ScannedCount"] <= per_page for page in read)
    exactly_once([key for page in read for key in ids(page["Items"])], set(ids(items)))


@pytest.mark.parametrize("total_segments", [1, 2, 3, 7, 64])
def test_parallel_scan_segments_cover_every_item_once(
    dynamodb: Any, many: tuple[str, set[Any]], total_segments: int
) -> None:
    name, expected = many
    found: list[tuple[str, str]] = []
    for segment in range(total_segments):
        for page in pages(
            dynamodb.scan,
            TableName=name,
            Segment=segment,
            TotalSegments=total_segments,
            Limit=400,
        ):
            found.extend(ids(page["Items"]))
    exactly_once(found, expected)


def test_scan_of_an_empty_table(dynamodb: Any, table_name: Callable[[], str]) -> None:
    name = create_active_table(dynamodb, table_name())
    reply = dynamodb.scan(TableName=name)
    assert (reply["Items"], reply["Count"], reply["ScannedCount"]) == ([], 0, 0)
    assert "LastEvaluatedKey" not in reply
