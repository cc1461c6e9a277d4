"""Global secondary indexes on a real cluster (nodes, routers and the GSI replicator as processes)
through boto3: CreateTable's rules, DescribeTable, Query and Scan on an index, and the index
converging to the projection of its table (seeds 001 and 004).

Index reads are eventually consistent, so every check of an index result uses the standard test
for eventual consistency (`eventually`): retry while the result is a subset of what may be there,
fail at once on an item that should not be there.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

import pytest

from dynalab import convergence
from tests.integration.conftest import error_of, wait_active

CONVERGE_TIMEOUT_S = 30.0
POLL_S = 0.05


def s(text: str) -> dict[str, str]:
    return {"S": text}


def n(number: int) -> dict[str, str]:
    return {"N": str(number)}


def key_schema(partition: str, sort: str | None = None) -> list[dict[str, str]]:
    schema = [{"AttributeName": partition, "KeyType": "HASH"}]
    if sort is not None:
        schema.append({"AttributeName": sort, "KeyType": "RANGE"})
    return schema


def gsi(
    name: str,
    partition: str,
    sort: str | None = None,
    projection: str = "KEYS_ONLY",
    non_key: list[str] | None = None,
    throughput: tuple[int, int] | None = None,
) -> dict[str, Any]:
    index: dict[str, Any] = {
        "IndexName": name,
        "KeySchema": key_schema(partition, sort),
        "Projection": {"ProjectionType": projection},
    }
    if non_key is not None:
        index["Projection"]["NonKeyAttributes"] = non_key
    if throughput is not None:
        index["ProvisionedThroughput"] = {
            "ReadCapacityUnits": throughput[0],
            "WriteCapacityUnits": throughput[1],
        }
    return index


GAME_DEFINITIONS = [
    {"AttributeName": "UserId", "AttributeType": "S"},
    {"AttributeName": "GameTitle", "AttributeType": "S"},
    {"AttributeName": "TopScore", "AttributeType": "N"},
]


def create_game_scores(client: Any, name: str, *indexes: dict[str, Any]) -> dict[str, Any]:
    """The GameScores table of seed 001 (G-01), on demand, with `indexes`; its description."""
    client.create_table(
        TableName=name,
        KeySchema=key_schema("UserId", "GameTitle"),
        AttributeDefinitions=GAME_DEFINITIONS,
        BillingMode="PAY_PER_REQUEST",
        GlobalSecondaryIndexes=list(indexes)
        or [gsi("GameTitleIndex", "GameTitle", "TopScore", "INCLUDE", ["Wins"])],
    )
    return wait_active(client, name)


def score(user: str, title: str, top: int | None, **more: Any) -> dict[str, Any]:
    item: dict[str, Any] = {"UserId": s(user), "GameTitle": s(title), **more}
    if top is not None:
        item["TopScore"] = n(top)
    return item


def identity(item: dict[str, Any]) -> str:
    return repr(sorted(item.items()))


def eventually(
    read: Callable[[], list[dict[str, Any]]],
    expected: Iterable[dict[str, Any]],
    allowed: Iterable[dict[str, Any]] = (),
    *,
    ordered: bool = False,
) -> list[dict[str, Any]]:
    """The standard test for eventual consistency: call `read` until it returns exactly
    `expected`, failing at once if it returns an item outside `expected` and `allowed` (earlier
    versions that may linger), or if CONVERGE_TIMEOUT_S passes first."""
    expected = list(expected)
    wanted = {identity(item) for item in expected}
    permitted = wanted | {identity(item) for item in allowed}
    deadline = time.monotonic() + CONVERGE_TIMEOUT_S
    while True:
        result = read()
        unexpected = [item for item in result if identity(item) not in permitted]
        assert not unexpected, f"items that should never be in the index: {unexpected}"
        if ordered and result == expected:
            return result
        if not ordered and sorted(map(identity, result)) == sorted(map(identity, expected)):
            return result
        assert time.monotonic() < deadline, f"index did not converge: {result} != {expected}"
        time.sleep(POLL_S)


def query_all(client: Any, **request: Any) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    while True:
        page = client.query(**request)
        items.extend(page["Items"])
        if "LastEvaluatedKey" not in page:
            return items
        request["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def comet(client: Any, table: str, **more: Any) -> Callable[[], list[dict[str, Any]]]:
    def read() -> list[dict[str, Any]]:
        return query_all(
            client,
            TableName=table,
            IndexName="GameTitleIndex",
            KeyConditionExpression="GameTitle = :t",
            ExpressionAttributeValues={":t": s("Comet Quest")},
            **more,
        )

    return read


# CreateTable and DescribeTable ------------------------------------------------------------------


def test_describe_table_lists_each_global_index(
    dynamodb: Any, table_name: Callable[[], str]
) -> None:
    name = table_name()
    table = create_game_scores(
        dynamodb,
        name,
        gsi("GameTitleIndex", "GameTitle", "TopScore", "INCLUDE", ["Wins"]),
        gsi("TopScoreIndex", "TopScore"),
    )
    first, second = table["GlobalSecondaryIndexes"]
    assert first == {
        "IndexName": "GameTitleIndex",
        "KeySchema": key_schema("GameTitle", "TopScore"),
        "Projection": {"ProjectionType": "INCLUDE", "NonKeyAttributes": ["Wins"]},
        "IndexStatus": "ACTIVE",
        "ProvisionedThroughput": {
            "NumberOfDecreasesToday": 0,
            "ReadCapacityUnits": 0,
            "WriteCapacityUnits": 0,
        },
        "IndexSizeBytes": 0,
        "ItemCount": 0,
        "IndexArn": f"{table['TableArn']}/index/GameTitleIndex",
        # An on-demand index's four partitions, as DynamoDB starts a new on-demand index.
        "WarmThroughput": {
            "ReadUnitsPerSecond": 12_000,
            "WriteUnitsPerSecond": 4_000,
            "Status": "ACTIVE",
        },
    }
    assert "Backfilling" not in first  # Created with its table (seed 004 O-33).
    assert second["KeySchema"] == key_schema("TopScore")
    dynamodb.put_item(TableName=name, Item=score("101", "Comet Quest", 5, Wins=n(3)))
    dynamodb.put_item(TableName=name, Item=score("102", "Comet Quest", None))

    def counts() -> list[dict[str, Any]]:
        described = dynamodb.describe_table(TableName=name)["Table"]["GlobalSecondaryIndexes"]
        return [{"count": i["ItemCount"], "big": i["IndexSizeBytes"] > 100} for i in described]

    eventually(
        counts, [{"count": 1, "big": True}, {"count": 1, "big": True}], [{"count": 0, "big": False}]
    )


def test_provisioned_indexes_have_their_own_throughput(
    dynamodb: Any, table_name: Callable[[], str]
) -> None:
    name = table_name()
    dynamodb.create_table(
        TableName=name,
        KeySchema=key_schema("UserId", "GameTitle"),
        AttributeDefinitions=GAME_DEFINITIONS,
        ProvisionedThroughput={"ReadCapacityUnits": 5, "WriteCapacityUnits": 5},
        GlobalSecondaryIndexes=[gsi("GameTitleIndex", "GameTitle", "TopScore", throughput=(7, 3))],
    )
    table = wait_active(dynamodb, name)
    (index,) = table["GlobalSecondaryIndexes"]
    assert index["ProvisionedThroughput"] == {
        "NumberOfDecreasesToday": 0,
        "ReadCapacityUnits": 7,
        "WriteCapacityUnits": 3,
    }
    assert table["ProvisionedThroughput"]["ReadCapacityUnits"] == 5


INVALID = "One or more parameter values were invalid: "


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"GlobalSecondaryIndexes": [gsi(f"Idx{i}", "TopScore") for i in range(21)]},
            INVALID + "GlobalSecondaryIndex count exceeds the per-table limit of 20",
        ),
        (
            {"GlobalSecondaryIndexes": [gsi("Idx", "Missing")]},
            INVALID + "Some index key attributes are not defined in AttributeDefinitions. "
            "Keys: [Missing], AttributeDefinitions: [UserId, GameTitle, TopScore]",
        ),
        # The index's key schema is checked before its projection.
        (
            {"GlobalSecondaryIndexes": [gsi("Idx", "Missing", projection="INCLUDE")]},
            INVALID + "Some index key attributes are not defined in AttributeDefinitions. "
            "Keys: [Missing], AttributeDefinitions: [UserId, GameTitle, TopScore]",
        ),
        (
            {"GlobalSecondaryIndexes": [gsi("Idx", "TopScore", "TopScore", "INCLUDE")]},
            "Both the Hash Key and the Range Key element in the KeySchema have the same name",
        ),
        (
            {"GlobalSecondaryIndexes": [gsi("Idx", "TopScore"), gsi("Idx", "GameTitle")]},
            INVALID + "Duplicate index name: Idx",
        ),
        (
            {"GlobalSecondaryIndexes": [gsi("Idx", "TopScore", "TopScore")]},
            "Both the Hash Key and the Range Key element in the KeySchema have the same name",
        ),
        (
            {"GlobalSecondaryIndexes": [gsi("Idx", "TopScore", throughput=(1, 1))]},
            INVALID + "ProvisionedThroughput should not be specified for index: Idx when "
            "BillingMode is PAY_PER_REQUEST",
        ),
        (
            {
                "GlobalSecondaryIndexes": [gsi("Idx", "TopScore")],
                "BillingMode": "PROVISIONED",
                "ProvisionedThroughput": {"ReadCapacityUnits": 1, "WriteCapacityUnits": 1},
            },
            INVALID + "ProvisionedThroughput is not specified for index: Idx",
        ),
        (
            {"GlobalSecondaryIndexes": [gsi("Idx", "TopScore", projection="INCLUDE")]},
            INVALID + "ProjectionType is INCLUDE, but NonKeyAttributes is not specified",
        ),
        (
            {"GlobalSecondaryIndexes": []},
            INVALID + "List of GlobalSecondaryIndexes is empty",
        ),
    ],
)
def test_create_table_refuses_bad_global_indexes(
    dynamodb: Any, table_name: Callable[[], str], change: dict[str, Any], message: str
) -> None:
    request: dict[str, Any] = {
        "TableName": table_name(),
        "KeySchema": key_schema("UserId", "GameTitle"),
        "AttributeDefinitions": GAME_DEFINITIONS,
        "BillingMode": "PAY_PER_REQUEST",
        **change,
    }
    if "ProvisionedThroughput" in change:
        del request["BillingMode"]
    assert error_of(lambda: dynamodb.create_table(**request)) == (
        400,
        "ValidationException",
        message,
    )
    assert request["TableName"] not in dynamodb.list_tables()["TableNames"]


def test_an_attribute_definition_no_key_uses_is_refused(
    dynamodb: Any, table_name: Callable[[], str]
) -> None:
    status, code, message = error_of(
        lambda: dynamodb.create_table(
            TableName=table_name(),
            KeySchema=key_schema("UserId", "GameTitle"),
            AttributeDefinitions=[*GAME_DEFINITIONS, {"AttributeName": "X", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
            GlobalSecondaryIndexes=[gsi("Idx", "TopScore")],
        )
    )
    assert (status, code) == (400, "ValidationException")
    assert message.startswith(INVALID + "Some AttributeDefinitions are not used.")


def test_delete_table_removes_its_indexes(dynamodb: Any, table_name: Callable[[], str]) -> None:
    name = table_name()
    create_game_scores(dynamodb, name)
    dynamodb.put_item(TableName=name, Item=score("101", "Comet Quest", 5))
    eventually(comet(dynamodb, name), [score("101", "Comet Quest", 5)])
    dynamodb.delete_table(TableName=name)
    create_game_scores(dynamodb, name)
    # The new table's index starts empty: nothing of the old index is left on the nodes.
    assert comet(dynamodb, name)() == []


# Query and Scan on a global index ---------------------------------------------------------------


def test_game_title_index_of_seed_001(dynamodb: Any, table_name: Callable[[], str]) -> None:
    name = table_name()
    create_game_scores(dynamodb, name)
    rows = [
        score("101", "Galaxy Invaders", 5842, Wins=n(21), Losses=n(72)),
        score("101", "Meteor Blasters", 1000, Wins=n(12), Losses=n(3)),
        score("102", "Meteor Blasters", 24, Wins=n(4), Losses=n(9)),
        score("103", "Meteor Blasters", 99999, Wins=n(40), Losses=n(1)),
        score("123", "Comet Quest", 0, Wins=n(0), Losses=n(3)),
        score("201", "Comet Quest", 0, Wins=n(0), Losses=n(1)),
        score("301", "Comet Quest", 0, Wins=n(0), Losses=n(5)),
        score("400", "Comet Quest", None),  # No TopScore: not in the index (G-08).
    ]
    for row in rows:
        dynamodb.put_item(TableName=name, Item=row)
    projected = [
        {key: row[key] for key in ("UserId", "GameTitle", "TopScore", "Wins")}
        for row in rows
        if "TopScore" in row
    ]
    # G-07: three entries with equal index keys, all returned; G-08: 4 items in the table, 3 in
    # the index.
    comets = eventually(
        comet(dynamodb, name), [p for p in projected if p["GameTitle"] == s("Comet Quest")]
    )
    assert len(comets) == 3
    table_comets = dynamodb.scan(
        TableName=name,
        FilterExpression="GameTitle = :t",
        ExpressionAttributeValues={":t": s("Comet Quest")},
    )["Items"]
    assert len(table_comets) == 4
    # G-14: highest score first, with a projection.
    blasters = eventually(
        lambda: dynamodb.query(
            TableName=name,
            IndexName="GameTitleIndex",
            KeyConditionExpression="GameTitle = :v_title",
            ExpressionAttributeValues={":v_title": s("Meteor Blasters")},
            ProjectionExpression="UserId, TopScore",
            ScanIndexForward=False,
        )["Items"],
        [
            {"UserId": s("103"), "TopScore": n(99999)},
            {"UserId": s("101"), "TopScore": n(1000)},
            {"UserId": s("102"), "TopScore": n(24)},
        ],
        ordered=True,
    )
    assert blasters[0]["TopScore"] == n(99999)
    # A sort-key condition on the index sort key.
    high = dynamodb.query(
        TableName=name,
        IndexName="GameTitleIndex",
        KeyConditionExpression="GameTitle = :t AND TopScore >= :s",
        ExpressionAttributeValues={":t": s("Meteor Blasters"), ":s": n(1000)},
    )["Items"]
    assert sorted(item["UserId"]["S"] for item in high) == ["101", "103"]
    # G-15: a Scan of the index reads every entry; a filter discards some.
    scanned = dynamodb.scan(TableName=name, IndexName="GameTitleIndex")
    assert sorted(map(identity, scanned["Items"])) == sorted(map(identity, projected))
    filtered = dynamodb.scan(
        TableName=name,
        IndexName="GameTitleIndex",
        FilterExpression="Wins > :w",
        ExpressionAttributeValues={":w": n(10)},
    )
    assert filtered["ScannedCount"] == 7 and filtered["Count"] == 3


def test_index_reads_are_eventually_consistent_and_project_only(
    dynamodb: Any, table_name: Callable[[], str]
) -> None:
    name = table_name()
    create_game_scores(dynamodb, name)
    base = {
        "TableName": name,
        "IndexName": "GameTitleIndex",
        "KeyConditionExpression": "GameTitle = :t",
        "ExpressionAttributeValues": {":t": s("Comet Quest")},
    }
    assert error_of(lambda: dynamodb.query(**base, ConsistentRead=True)) == (
        400,
        "ValidationException",
        "Consistent reads are not supported on global secondary indexes",
    )
    assert (
        error_of(
            lambda: dynamodb.scan(TableName=name, IndexName="GameTitleIndex", ConsistentRead=True)
        )[2]
        == "Consistent reads are not supported on global secondary indexes"
    )
    assert error_of(lambda: dynamodb.query(**base, Select="ALL_ATTRIBUTES")) == (
        400,
        "ValidationException",
        INVALID + "Select type ALL_ATTRIBUTES is not supported for global secondary index "
        "GameTitleIndex because its projection type is not ALL",
    )
    assert error_of(lambda: dynamodb.query(**{**base, "IndexName": "Nope"})) == (
        400,
        "ValidationException",
        "The table does not have the specified index: Nope",
    )
    # Without Select, an index read returns what the index projects, never Losses (G-11).
    dynamodb.put_item(TableName=name, Item=score("1", "Comet Quest", 3, Wins=n(1), Losses=n(2)))
    entry = score("1", "Comet Quest", 3, Wins=n(1))
    eventually(lambda: dynamodb.query(**base)["Items"], [entry])
    assert dynamodb.query(**base, Select="ALL_PROJECTED_ATTRIBUTES")["Items"] == [entry]
    assert dynamodb.query(**base, Select="COUNT")["Count"] == 1


def test_index_pages_name_the_index_and_table_keys(
    dynamodb: Any, table_name: Callable[[], str]
) -> None:
    name = table_name()
    create_game_scores(dynamodb, name)
    rows = [score(f"u{i:02}", "Comet Quest", i % 3) for i in range(30)]
    for row in rows:
        dynamodb.put_item(TableName=name, Item=row)
    eventually(comet(dynamodb, name), rows)
    page = dynamodb.query(
        TableName=name,
        IndexName="GameTitleIndex",
        KeyConditionExpression="GameTitle = :t",
        ExpressionAttributeValues={":t": s("Comet Quest")},
        Limit=4,
    )
    assert set(page["LastEvaluatedKey"]) == {"GameTitle", "TopScore", "UserId"}
    assert len(comet(dynamodb, name, Limit=4)()) == 30
    # A parallel Scan of the index: the segments together read every entry once.
    seen: list[dict[str, Any]] = []
    for segment in range(3):
        request: dict[str, Any] = {
            "TableName": name,
            "IndexName": "GameTitleIndex",
            "Segment": segment,
            "TotalSegments": 3,
            "Limit": 5,
        }
        while True:
            scanned = dynamodb.scan(**request)
            seen.extend(scanned["Items"])
            if "LastEvaluatedKey" not in scanned:
                break
            request["ExclusiveStartKey"] = scanned["LastEvaluatedKey"]
    assert sorted(map(identity, seen)) == sorted(map(identity, rows))


def test_updates_and_deletes_reach_the_index(dynamodb: Any, table_name: Callable[[], str]) -> None:
    name = table_name()
    create_game_scores(dynamodb, name)
    history: list[dict[str, Any]] = []

    def put(item: dict[str, Any]) -> None:
        history.append(item)
        dynamodb.put_item(TableName=name, Item=item)

    for user in range(10):
        put(score(str(user), "Comet Quest", user, Wins=n(0)))
    # A key change (G-31 case 2), a projected attribute change (case 5), an index key removed
    # (case 3), an unprojected attribute (case 4), a delete.
    dynamodb.update_item(
        TableName=name,
        Key={"UserId": s("1"), "GameTitle": s("Comet Quest")},
        UpdateExpression="SET TopScore = :s",
        ExpressionAttributeValues={":s": n(100)},
    )
    dynamodb.update_item(
        TableName=name,
        Key={"UserId": s("2"), "GameTitle": s("Comet Quest")},
        UpdateExpression="SET Wins = :w, Losses = :l",
        ExpressionAttributeValues={":w": n(7), ":l": n(1)},
    )
    dynamodb.update_item(
        TableName=name,
        Key={"UserId": s("3"), "GameTitle": s("Comet Quest")},
        UpdateExpression="REMOVE TopScore",
    )
    dynamodb.delete_item(TableName=name, Key={"UserId": s("4"), "GameTitle": s("Comet Quest")})
    convergence.wait_converged(dynamodb, name, "GameTitleIndex", CONVERGE_TIMEOUT_S, history)
    entries = {item["UserId"]["S"]: item for item in comet(dynamodb, name)()}
    assert entries["1"]["TopScore"] == n(100)
    assert entries["2"]["Wins"] == n(7) and "Losses" not in entries["2"]
    assert "3" not in entries and "4" not in entries
    assert len(entries) == 8


def test_a_write_with_a_mistyped_index_key_is_refused_at_once(
    dynamodb: Any, table_name: Callable[[], str]
) -> None:
    # Seed 001 G-18: GameTitleIndex declares TopScore a Number; the base write itself fails.
    name = table_name()
    create_game_scores(dynamodb, name)
    bad = score("101", "Comet Quest", None, TopScore=s("lots"))
    assert error_of(lambda: dynamodb.put_item(TableName=name, Item=bad)) == (
        400,
        "ValidationException",
        INVALID + "Type mismatch for Index Key TopScore Expected: N Actual: S "
        "IndexName: GameTitleIndex",
    )
    assert (
        dynamodb.get_item(
            TableName=name, Key={"UserId": s("101"), "GameTitle": s("Comet Quest")}
        ).get("Item")
        is None
    )


def test_consumed_capacity_reports_each_global_index(
    dynamodb: Any, table_name: Callable[[], str]
) -> None:
    # Seed 001 G-30..G-32: a new item in the index is one write, a changed index key two, a
    # change to an unprojected attribute none; INDEXES lists them under GlobalSecondaryIndexes.
    name = table_name()
    create_game_scores(dynamodb, name)

    def put(item: dict[str, Any]) -> dict[str, Any]:
        reply = dynamodb.put_item(TableName=name, Item=item, ReturnConsumedCapacity="INDEXES")
        return dict(reply["ConsumedCapacity"])

    first = put(score("1", "Comet Quest", 5, Wins=n(1)))
    assert first["Table"] == {"CapacityUnits": 1.0}
    assert first["GlobalSecondaryIndexes"] == {"GameTitleIndex": {"CapacityUnits": 1.0}}
    assert first["CapacityUnits"] == 2.0
    moved = put(score("1", "Comet Quest", 6, Wins=n(1)))
    assert moved["GlobalSecondaryIndexes"] == {"GameTitleIndex": {"CapacityUnits": 2.0}}
    unprojected = put(score("1", "Comet Quest", 6, Wins=n(1), Losses=n(3)))
    assert "GlobalSecondaryIndexes" not in unprojected
    assert unprojected["CapacityUnits"] == 1.0
    # A change to an attribute the index projects (INCLUDE's NonKeyAttributes) rewrites its
    # entry: one write, priced by the entry's size (here past 2 KB: three units).
    projected = put(score("1", "Comet Quest", 6, Wins=n(2), Losses=n(3)))
    assert projected["GlobalSecondaryIndexes"] == {"GameTitleIndex": {"CapacityUnits": 1.0}}
    large = put(score("1", "Comet Quest", 6, Wins=s("w" * 2100), Losses=n(3)))
    assert large["GlobalSecondaryIndexes"] == {"GameTitleIndex": {"CapacityUnits": 3.0}}
    total = dynamodb.put_item(
        TableName=name, Item=score("2", "Comet Quest", 1), ReturnConsumedCapacity="TOTAL"
    )["ConsumedCapacity"]
    assert total == {"TableName": name, "CapacityUnits": 2.0}
    # An index read is charged to the index.
    eventually(
        comet(dynamodb, name),
        [score("1", "Comet Quest", 6, Wins=s("w" * 2100)), score("2", "Comet Quest", 1)],
    )
    read = dynamodb.query(
        TableName=name,
        IndexName="GameTitleIndex",
        KeyConditionExpression="GameTitle = :t",
        ExpressionAttributeValues={":t": s("Comet Quest")},
        ReturnConsumedCapacity="INDEXES",
    )["ConsumedCapacity"]
    assert read["GlobalSecondaryIndexes"] == {"GameTitleIndex": {"CapacityUnits": 0.5}}
    assert read["Table"] == {"CapacityUnits": 0.0}
