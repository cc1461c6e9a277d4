"""Multi-attribute global secondary index keys on a real cluster through boto3 (DynamoDB since
November 2025; issue 31): a GSI KeySchema of up to four HASH and four RANGE attributes, created
with its table or online with UpdateTable (backfilled), queried with every allowed form of key
condition and refused on every other, ordered attribute by attribute, paged, projected, sparse
over items that lack a key attribute, and bounded in size as one key.

Where the Developer Guide gives no text for a refusal only a multi-attribute key can meet, the
message is dynalab's, in DynamoDB's style; each such assertion says so. "RANGE key attributes ...
must have equality conditions specified ..." is the service's as moto records it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import pytest

from dynalab import convergence
from tests.integration.conftest import error_of, wait_active
from tests.integration.test_gsi import eventually, n, query_all, s
from tests.integration.test_gsi_online import wait_index

INVALID = "One or more parameter values were invalid: "
CONVERGE_TIMEOUT_S = 60.0

# The Developer Guide's tournament example (its `region` is `area` here: REGION is a reserved
# word, which a KeyConditionExpression could only name through a placeholder): a match is found
# by tournament and region (hashed
# together), then ordered by round, bracket and a match number.
BY_REGION = "ByTournamentRegion"
BY_PLAYER = "ByPlayer"
REGION_PARTITION = ("tournamentId", "area")
REGION_SORT = ("round", "bracket", "seq")
PLAYER_SORT = ("matchDate", "seq")
DEFINITIONS = [
    {"AttributeName": "matchId", "AttributeType": "S"},
    {"AttributeName": "tournamentId", "AttributeType": "S"},
    {"AttributeName": "area", "AttributeType": "S"},
    {"AttributeName": "round", "AttributeType": "S"},
    {"AttributeName": "bracket", "AttributeType": "S"},
    {"AttributeName": "seq", "AttributeType": "N"},
    {"AttributeName": "player1Id", "AttributeType": "S"},
    {"AttributeName": "matchDate", "AttributeType": "S"},
]


def key_schema(partition: tuple[str, ...], sort: tuple[str, ...] = ()) -> list[dict[str, str]]:
    return [{"AttributeName": a, "KeyType": "HASH"} for a in partition] + [
        {"AttributeName": a, "KeyType": "RANGE"} for a in sort
    ]


BY_REGION_INDEX = {
    "IndexName": BY_REGION,
    "KeySchema": key_schema(REGION_PARTITION, REGION_SORT),
    "Projection": {"ProjectionType": "INCLUDE", "NonKeyAttributes": ["player1Id"]},
}
BY_PLAYER_INDEX = {
    "IndexName": BY_PLAYER,
    "KeySchema": key_schema(("player1Id",), PLAYER_SORT),
    "Projection": {"ProjectionType": "KEYS_ONLY"},
}


def create_matches(client: Any, name: str, *indexes: dict[str, Any]) -> dict[str, Any]:
    request: dict[str, Any] = {
        "TableName": name,
        "KeySchema": key_schema(("matchId",)),
        "AttributeDefinitions": [
            d
            for d in DEFINITIONS
            if any(
                d["AttributeName"] == e["AttributeName"]
                for index in indexes
                for e in index["KeySchema"]
            )
            or d["AttributeName"] == "matchId"
        ],
        "BillingMode": "PAY_PER_REQUEST",
    }
    if indexes:
        request["GlobalSecondaryIndexes"] = list(indexes)
    client.create_table(**request)
    return wait_active(client, name)


def matches() -> list[dict[str, Any]]:
    """Matches of two tournaments in two regions; match numbers 9 and 10 check numeric order,
    and some matches lack a bracket (not in ByTournamentRegion) or a date (not in ByPlayer)."""
    items = []
    number = 0
    for tournament in ("WINTER2024", "SPRING2025"):
        for region in ("NA-EAST", "EU-WEST"):
            for round_name in ("FINAL", "QUARTER", "SEMI"):
                for bracket in ("LOWER", "UPPER", None):
                    for seq in (1, 9, 10):
                        number += 1
                        item = {
                            "matchId": s(f"m-{number:03}"),
                            "tournamentId": s(tournament),
                            "area": s(region),
                            "round": s(round_name),
                            "seq": n(seq),
                            "player1Id": s(f"p-{number % 4}"),
                            "score": n(number),
                        }
                        if bracket is not None:
                            item["bracket"] = s(bracket)
                        if number % 5:
                            item["matchDate"] = s(f"2024-{number % 12 + 1:02}-{seq:02}")
                        items.append(item)
    return items


def order_key(item: dict[str, Any], names: tuple[str, ...]) -> tuple[Any, ...]:
    """DynamoDB's order of index keys: attribute by attribute, S by UTF-8 bytes, N by value."""
    parts: list[Any] = []
    for name in names:
        value = item[name]
        parts.append(Decimal(value["N"]) if "N" in value else value["S"].encode())
    return tuple(parts)


def projected(item: dict[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    return {name: item[name] for name in names if name in item}


REGION_HELD = ("matchId", *REGION_PARTITION, *REGION_SORT, "player1Id")
PLAYER_HELD = ("matchId", "player1Id", *PLAYER_SORT)


def expected(
    items: list[dict[str, Any]],
    held: tuple[str, ...],
    sort: tuple[str, ...],
    keep: Callable[[dict[str, Any]], bool],
    *,
    forward: bool = True,
) -> list[dict[str, Any]]:
    """What a Query of an index returns over `items`: the entries of items with every key
    attribute (all of `held` but the projected player1Id of ByTournamentRegion) that `keep`
    accepts, in index key order (the match ids break ties, as dynalab stores entries under the
    table key after the index key)."""
    keys = [name for name in held if name != "player1Id" or held is PLAYER_HELD]
    chosen = [item for item in items if all(name in item for name in keys) and keep(item)]
    chosen.sort(key=lambda item: (order_key(item, sort), item["matchId"]["S"]), reverse=not forward)
    return [projected(item, held) for item in chosen]


@pytest.fixture(scope="module")
def loaded(dynamodb: Any) -> Iterator[tuple[str, list[Any]]]:
    """A Matches table with both indexes, loaded, its indexes converged."""
    name = "MultiAttributeMatches"
    create_matches(dynamodb, name, BY_REGION_INDEX, BY_PLAYER_INDEX)
    items = matches()
    for start in range(0, len(items), 25):
        pending = {name: [{"PutRequest": {"Item": item}} for item in items[start : start + 25]]}
        while pending:
            pending = dynamodb.batch_write_item(RequestItems=pending)["UnprocessedItems"]
    for index in (BY_REGION, BY_PLAYER):
        convergence.wait_converged(dynamodb, name, index, CONVERGE_TIMEOUT_S)
    yield name, items
    dynamodb.delete_table(TableName=name)


def region_query(client: Any, name: str, condition: str, **values: Any) -> list[dict[str, Any]]:
    return query_all(
        client,
        TableName=name,
        IndexName=BY_REGION,
        KeyConditionExpression=condition,
        ExpressionAttributeValues={f":{key}": value for key, value in values.items()},
    )


# CreateTable, DescribeTable ---------------------------------------------------------------------


def test_describe_table_shows_the_key_schema_as_given(
    dynamodb: Any, loaded: tuple[str, list[Any]]
) -> None:
    name, _ = loaded
    described = dynamodb.describe_table(TableName=name)["Table"]
    by_name = {index["IndexName"]: index for index in described["GlobalSecondaryIndexes"]}
    assert by_name[BY_REGION]["KeySchema"] == key_schema(REGION_PARTITION, REGION_SORT)
    assert by_name[BY_PLAYER]["KeySchema"] == key_schema(("player1Id",), PLAYER_SORT)
    assert described["KeySchema"] == key_schema(("matchId",))


def test_four_hash_and_four_range_attributes_are_the_most(
    dynamodb: Any, table_name: Callable[[], str]
) -> None:
    name = table_name()
    attributes = [f"a{i}" for i in range(9)]
    definitions = [{"AttributeName": a, "AttributeType": "S"} for a in attributes]

    def create(schema: list[dict[str, str]]) -> Any:
        used = {"a0"} | {e["AttributeName"] for e in schema}
        return dynamodb.create_table(
            TableName=name,
            KeySchema=key_schema(("a0",)),
            AttributeDefinitions=[d for d in definitions if d["AttributeName"] in used],
            BillingMode="PAY_PER_REQUEST",
            GlobalSecondaryIndexes=[
                {"IndexName": "Wide", "KeySchema": schema, "Projection": {"ProjectionType": "ALL"}}
            ],
        )

    # The limit's messages are dynalab's wording (the guide states the limit, not its message).
    assert error_of(lambda: create(key_schema(tuple(attributes[1:6])))) == (
        400,
        "ValidationException",
        INVALID + "Number of HASH key elements in KeySchema for index: Wide exceeds the limit "
        "of 4, number of HASH key elements: 5",
    )
    assert error_of(lambda: create(key_schema(("a1",), tuple(attributes[2:7])))) == (
        400,
        "ValidationException",
        INVALID + "Number of RANGE key elements in KeySchema for index: Wide exceeds the limit "
        "of 4, number of RANGE key elements: 5",
    )
    out_of_order = key_schema(("a1",), ("a2",)) + key_schema(("a3",))
    assert error_of(lambda: create(out_of_order)) == (
        400,
        "ValidationException",
        INVALID + "Invalid KeySchema for index: Wide: every HASH key element must come before "
        "the RANGE key elements",
    )
    assert error_of(lambda: create(key_schema(("a1", "a2"), ("a1",)))) == (
        400,
        "ValidationException",
        INVALID + "Duplicate attribute in KeySchema for index: Wide, attribute: a1",
    )
    create(key_schema(tuple(attributes[1:5]), tuple(attributes[5:9])))
    table = wait_active(dynamodb, name)
    (index,) = table["GlobalSecondaryIndexes"]
    assert index["KeySchema"] == key_schema(tuple(attributes[1:5]), tuple(attributes[5:9]))


def test_tables_and_local_indexes_keep_single_attribute_keys(
    dynamodb: Any, table_name: Callable[[], str]
) -> None:
    name = table_name()
    definitions = [{"AttributeName": a, "AttributeType": "S"} for a in ("a", "b", "c")]
    code, kind, message = error_of(
        lambda: dynamodb.create_table(
            TableName=name,
            KeySchema=key_schema(("a",), ("b", "c")),
            AttributeDefinitions=definitions,
            BillingMode="PAY_PER_REQUEST",
        )
    )
    assert (code, kind) == (400, "ValidationException")
    assert message.startswith("1 validation error detected: ")
    assert message.endswith("Member must have length less than or equal to 2")
    assert error_of(
        lambda: dynamodb.create_table(
            TableName=name,
            KeySchema=key_schema(("a", "b")),
            AttributeDefinitions=definitions[:2],
            BillingMode="PAY_PER_REQUEST",
        )
    ) == (
        400,
        "ValidationException",
        "Invalid KeySchema: The second KeySchemaElement is not a RANGE key type",
    )
    code, kind, message = error_of(
        lambda: dynamodb.create_table(
            TableName=name,
            KeySchema=key_schema(("a",), ("b",)),
            AttributeDefinitions=definitions,
            BillingMode="PAY_PER_REQUEST",
            LocalSecondaryIndexes=[
                {
                    "IndexName": "Local",
                    "KeySchema": key_schema(("a",), ("c", "b")),
                    "Projection": {"ProjectionType": "ALL"},
                }
            ],
        )
    )
    assert (code, kind) == (400, "ValidationException")
    assert message.endswith("Member must have length less than or equal to 2")


# Query: every allowed form ----------------------------------------------------------------------


def where(**equal: str | int) -> Callable[[dict[str, Any]], bool]:
    def keep(item: dict[str, Any]) -> bool:
        for name, value in equal.items():
            wanted = n(value) if isinstance(value, int) else s(value)
            if item.get(name) != wanted:
                return False
        return True

    return keep


WINTER_NA = {"t": s("WINTER2024"), "r": s("NA-EAST")}
PARTITION = "tournamentId = :t AND area = :r"


@pytest.mark.parametrize(
    ("condition", "values", "keep"),
    [
        (PARTITION, {}, where()),
        (f"{PARTITION} AND round = :a", {"a": s("SEMI")}, where(round="SEMI")),
        (
            f"{PARTITION} AND round > :a",
            {"a": s("FINAL")},
            lambda item: item["round"]["S"] > "FINAL",
        ),
        (
            f"{PARTITION} AND round <= :a",
            {"a": s("QUARTER")},
            lambda item: item["round"]["S"] <= "QUARTER",
        ),
        (
            f"{PARTITION} AND round BETWEEN :a AND :b",
            {"a": s("G"), "b": s("R")},
            lambda item: "G" <= item["round"]["S"] <= "R",
        ),
        (
            f"{PARTITION} AND begins_with(round, :a)",
            {"a": s("S")},
            lambda item: item["round"]["S"].startswith("S"),
        ),
        (
            f"{PARTITION} AND round = :a AND bracket = :b",
            {"a": s("SEMI"), "b": s("UPPER")},
            where(round="SEMI", bracket="UPPER"),
        ),
        (
            f"{PARTITION} AND round = :a AND bracket < :b",
            {"a": s("SEMI"), "b": s("UPPER")},
            lambda item: where(round="SEMI")(item) and item["bracket"]["S"] < "UPPER",
        ),
        (
            f"{PARTITION} AND round = :a AND bracket = :b AND seq >= :c",
            {"a": s("SEMI"), "b": s("UPPER"), "c": n(9)},
            lambda item: where(round="SEMI", bracket="UPPER")(item) and int(item["seq"]["N"]) >= 9,
        ),
        (
            f"{PARTITION} AND round = :a AND bracket = :b AND seq BETWEEN :c AND :d",
            {"a": s("FINAL"), "b": s("LOWER"), "c": n(2), "d": n(10)},
            lambda item: (
                where(round="FINAL", bracket="LOWER")(item) and 2 <= int(item["seq"]["N"]) <= 10
            ),
        ),
        (
            f"{PARTITION} AND round = :a AND bracket = :b AND seq = :c",
            {"a": s("FINAL"), "b": s("LOWER"), "c": n(10)},
            where(round="FINAL", bracket="LOWER", seq=10),
        ),
        (
            # Conditions may come in any order and the value first.
            ":c < seq AND bracket = :b AND area = :r AND round = :a AND tournamentId = :t",
            {"a": s("QUARTER"), "b": s("LOWER"), "c": n(1)},
            lambda item: (
                where(round="QUARTER", bracket="LOWER")(item) and int(item["seq"]["N"]) > 1
            ),
        ),
    ],
)
@pytest.mark.parametrize("forward", [True, False])
def test_every_allowed_key_condition_reads_its_entries_in_key_order(
    dynamodb: Any,
    loaded: tuple[str, list[Any]],
    condition: str,
    values: dict[str, Any],
    keep: Callable[[dict[str, Any]], bool],
    forward: bool,
) -> None:
    name, items = loaded
    result = query_all(
        dynamodb,
        TableName=name,
        IndexName=BY_REGION,
        KeyConditionExpression=condition,
        ExpressionAttributeValues={f":{k}": v for k, v in {**WINTER_NA, **values}.items()},
        ScanIndexForward=forward,
    )
    in_partition = where(tournamentId="WINTER2024", area="NA-EAST")
    want = expected(
        items,
        REGION_HELD,
        REGION_SORT,
        lambda item: in_partition(item) and keep(item),
        forward=forward,
    )
    assert want, "every case reads some entries"
    assert result == want


def test_a_single_hash_key_with_two_sort_attributes(
    dynamodb: Any, loaded: tuple[str, list[Any]]
) -> None:
    name, items = loaded
    result = query_all(
        dynamodb,
        TableName=name,
        IndexName=BY_PLAYER,
        KeyConditionExpression="player1Id = :p AND begins_with(matchDate, :d)",
        ExpressionAttributeValues={":p": s("p-1"), ":d": s("2024-0")},
    )
    want = expected(
        items,
        PLAYER_HELD,
        PLAYER_SORT,
        lambda item: item["player1Id"] == s("p-1") and item["matchDate"]["S"] < "2024-1",
    )
    assert want and result == want
    # KEYS_ONLY: the table key and the index key attributes, nothing else.
    assert all(set(item) == {"matchId", "player1Id", "matchDate", "seq"} for item in result)


def test_key_conditions_take_the_same_forms(dynamodb: Any, loaded: tuple[str, list[Any]]) -> None:
    name, items = loaded

    def equal(value: dict[str, str]) -> dict[str, Any]:
        return {"ComparisonOperator": "EQ", "AttributeValueList": [value]}

    result = query_all(
        dynamodb,
        TableName=name,
        IndexName=BY_REGION,
        KeyConditions={
            "tournamentId": equal(s("SPRING2025")),
            "area": equal(s("EU-WEST")),
            "round": equal(s("FINAL")),
            "bracket": {"ComparisonOperator": "BEGINS_WITH", "AttributeValueList": [s("UP")]},
        },
    )
    want = expected(
        items,
        REGION_HELD,
        REGION_SORT,
        where(tournamentId="SPRING2025", area="EU-WEST", round="FINAL", bracket="UPPER"),
    )
    assert want and result == want
    assert error_of(
        lambda: dynamodb.query(
            TableName=name,
            IndexName=BY_REGION,
            KeyConditions={
                "tournamentId": equal(s("SPRING2025")),
                "area": equal(s("EU-WEST")),
                "bracket": equal(s("UPPER")),
            },
        )
    ) == (
        400,
        "ValidationException",
        "RANGE key attributes round must have equality conditions specified in the query "
        "because a condition is present on key attribute bracket",
    )


# Query: the refusals ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("condition", "values", "message"),
    [
        ("tournamentId = :t", {}, "Query condition missed key schema element: area"),
        (
            "area = :r AND round = :a",
            {"a": s("SEMI")},
            "Query condition missed key schema element: tournamentId",
        ),
        ("tournamentId = :t AND area > :r", {}, "Query key condition not supported"),
        (
            f"{PARTITION} AND bracket = :b",
            {"b": s("UPPER")},
            "RANGE key attributes round must have equality conditions specified in the query "
            "because a condition is present on key attribute bracket",
        ),
        (
            f"{PARTITION} AND round = :a AND seq = :c",
            {"a": s("SEMI"), "c": n(1)},
            "RANGE key attributes bracket must have equality conditions specified in the query "
            "because a condition is present on key attribute seq",
        ),
        (
            f"{PARTITION} AND round > :a AND bracket = :b",
            {"a": s("SEMI"), "b": s("UPPER")},
            "RANGE key attributes round must have equality conditions specified in the query "
            "because a condition is present on key attribute bracket",
        ),
        (
            f"{PARTITION} AND player1Id = :a",
            {"a": s("p-1")},
            "Query condition missed key schema element: round",
        ),
        (
            f"{PARTITION} AND round = :a AND bracket = :b AND seq = :c AND player1Id = :d",
            {"a": s("SEMI"), "b": s("UPPER"), "c": n(1), "d": s("p-1")},
            "Query key condition not supported",
        ),
        (
            f"{PARTITION} AND round = :a AND bracket = :b AND seq = :c",
            {"a": s("SEMI"), "b": s("UPPER"), "c": s("1")},
            INVALID + "Condition parameter type does not match schema type",
        ),
        (
            f"{PARTITION} AND round = :a AND bracket = :b AND begins_with(seq, :c)",
            {"a": s("SEMI"), "b": s("UPPER"), "c": n(1)},
            "Invalid KeyConditionExpression: Incorrect operand type for operator or function; "
            "operator or function: begins_with, operand type: N",
        ),
        (
            "tournamentId = :t AND area = :r OR round = :a",
            {"a": s("SEMI")},
            "Invalid operator used in KeyConditionExpression: OR",
        ),
    ],
)
def test_every_other_key_condition_is_refused(
    dynamodb: Any,
    loaded: tuple[str, list[Any]],
    condition: str,
    values: dict[str, Any],
    message: str,
) -> None:
    name, _ = loaded
    used = {k: v for k, v in {**WINTER_NA, **values}.items() if f":{k}" in condition}
    assert error_of(lambda: region_query(dynamodb, name, condition, **used)) == (
        400,
        "ValidationException",
        message,
    )


def test_a_filter_on_any_index_key_attribute_is_refused(
    dynamodb: Any, loaded: tuple[str, list[Any]]
) -> None:
    name, _ = loaded
    assert error_of(
        lambda: dynamodb.query(
            TableName=name,
            IndexName=BY_REGION,
            KeyConditionExpression=PARTITION,
            FilterExpression="bracket = :b",
            ExpressionAttributeValues={":t": WINTER_NA["t"], ":r": WINTER_NA["r"], ":b": s("X")},
        )
    ) == (
        400,
        "ValidationException",
        "Filter Expression can only contain non-primary key attributes: Primary key attribute: "
        "bracket",
    )


# Paging ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("forward", [True, False])
def test_pages_carry_every_key_attribute_and_join_up(
    dynamodb: Any, loaded: tuple[str, list[Any]], forward: bool
) -> None:
    name, items = loaded
    request: dict[str, Any] = {
        "TableName": name,
        "IndexName": BY_REGION,
        "KeyConditionExpression": f"{PARTITION} AND round = :a",
        "ExpressionAttributeValues": {":t": s("SPRING2025"), ":r": s("NA-EAST"), ":a": s("SEMI")},
        "Limit": 2,
        "ScanIndexForward": forward,
    }
    pages: list[dict[str, Any]] = []
    while True:
        page = dynamodb.query(**request)
        pages.extend(page["Items"])
        last = page.get("LastEvaluatedKey")
        if last is None:
            break
        assert set(last) == {"matchId", *REGION_PARTITION, *REGION_SORT}
        assert last == {key: pages[-1][key] for key in last}
        request["ExclusiveStartKey"] = last
    want = expected(
        items,
        REGION_HELD,
        REGION_SORT,
        where(tournamentId="SPRING2025", area="NA-EAST", round="SEMI"),
        forward=forward,
    )
    assert pages == want and len(want) > 2
    # A starting key outside the query's partition or its sort key condition is refused.
    outside = {**pages[0], "area": s("EU-WEST")}
    request["ExclusiveStartKey"] = {
        key: outside[key] for key in ("matchId", *REGION_PARTITION, *REGION_SORT)
    }
    assert error_of(lambda: dynamodb.query(**request)) == (
        400,
        "ValidationException",
        "The provided starting key is outside query boundaries based on provided conditions",
    )


def test_a_parallel_scan_of_the_index_pages_through_each_segment(
    dynamodb: Any, loaded: tuple[str, list[Any]]
) -> None:
    # A segment's ExclusiveStartKey must hash into the segment: the hash of every partition key
    # attribute together, as the entries are placed.
    name, items = loaded
    read: list[dict[str, Any]] = []
    for segment in range(3):
        request: dict[str, Any] = {
            "TableName": name,
            "IndexName": BY_REGION,
            "Segment": segment,
            "TotalSegments": 3,
            "Limit": 7,
        }
        while True:
            page = dynamodb.scan(**request)
            read.extend(page["Items"])
            if "LastEvaluatedKey" not in page:
                break
            request["ExclusiveStartKey"] = page["LastEvaluatedKey"]
    want = expected(items, REGION_HELD, REGION_SORT, lambda item: True)
    assert sorted(repr(sorted(i.items())) for i in read) == sorted(
        repr(sorted(i.items())) for i in want
    )


# Writes: sparse, mistyped, too large ------------------------------------------------------------


def test_items_lacking_a_key_attribute_are_left_out_and_mistyped_ones_refused(
    dynamodb: Any, table_name: Callable[[], str]
) -> None:
    name = table_name()
    create_matches(dynamodb, name, BY_REGION_INDEX)
    whole = {
        "matchId": s("a"),
        "tournamentId": s("T"),
        "area": s("R"),
        "round": s("FINAL"),
        "bracket": s("UPPER"),
        "seq": n(1),
    }
    dynamodb.put_item(TableName=name, Item=whole)
    for missing in (*REGION_PARTITION, *REGION_SORT):
        partial = {k: v for k, v in whole.items() if k != missing}
        dynamodb.put_item(TableName=name, Item={**partial, "matchId": s(f"no-{missing}")})
    assert error_of(
        lambda: dynamodb.put_item(TableName=name, Item={**whole, "matchId": s("b"), "seq": s("1")})
    ) == (
        400,
        "ValidationException",
        INVALID + f"Type mismatch for Index Key seq Expected: N Actual: S IndexName: {BY_REGION}",
    )
    # Each partition key attribute alone is within 2048 bytes, together they are not; each sort
    # key attribute within 1024, together not.
    assert error_of(
        lambda: dynamodb.put_item(
            TableName=name,
            Item={
                **whole,
                "matchId": s("c"),
                "tournamentId": s("t" * 1500),
                "area": s("r" * 600),
            },
        )
    ) == (
        400,
        "ValidationException",
        INVALID + "Size of hashkey has exceeded the maximum size limit of2048 bytes",
    )
    assert error_of(
        lambda: dynamodb.put_item(
            TableName=name,
            Item={**whole, "matchId": s("d"), "round": s("x" * 600), "bracket": s("y" * 500)},
        )
    ) == (
        400,
        "ValidationException",
        INVALID + "Aggregated size of all range keys has exceeded the size limit of 1024 bytes",
    )
    # An item with a key attribute removed leaves the index.
    dynamodb.put_item(TableName=name, Item={**whole, "matchId": s("e")})
    dynamodb.update_item(TableName=name, Key={"matchId": s("e")}, UpdateExpression="REMOVE area")

    def read() -> list[dict[str, Any]]:
        return region_query(dynamodb, name, "tournamentId = :t AND area = :r", t=s("T"), r=s("R"))

    entry = {k: v for k, v in whole.items()}
    eventually(read, [entry], [{**entry, "matchId": s("e")}])


# Online ----------------------------------------------------------------------------------------


def test_a_multi_attribute_index_added_online_is_backfilled(
    dynamodb: Any, table_name: Callable[[], str]
) -> None:
    name = table_name()
    create_matches(dynamodb, name)
    items = matches()
    for item in items:
        dynamodb.put_item(TableName=name, Item=item)
    dynamodb.update_table(
        TableName=name,
        AttributeDefinitions=[
            d for d in DEFINITIONS if d["AttributeName"] in (*REGION_PARTITION, *REGION_SORT)
        ],
        GlobalSecondaryIndexUpdates=[{"Create": BY_REGION_INDEX}],
    )
    described = wait_index(
        dynamodb, name, BY_REGION, lambda i: i is not None and i["IndexStatus"] == "ACTIVE"
    )
    assert described is not None
    assert described["KeySchema"] == key_schema(REGION_PARTITION, REGION_SORT)
    convergence.wait_converged(dynamodb, name, BY_REGION, CONVERGE_TIMEOUT_S)
    result = region_query(
        dynamodb,
        name,
        f"{PARTITION} AND round = :a AND bracket = :b",
        t=s("WINTER2024"),
        r=s("EU-WEST"),
        a=s("QUARTER"),
        b=s("LOWER"),
    )
    want = expected(
        items,
        REGION_HELD,
        REGION_SORT,
        where(tournamentId="WINTER2024", area="EU-WEST", round="QUARTER", bracket="LOWER"),
    )
    assert [item["seq"] for item in result] == [n(1), n(9), n(10)]
    assert result == want
