"""Online global secondary indexes on a real cluster (seed 004, O-12 to O-37): UpdateTable's
GlobalSecondaryIndexUpdates Create and Delete with DynamoDB's validation, a backfill under
concurrent writes that converges exactly (`dynalab.convergence`), a replicator killed with SIGKILL
in the middle of a backfill, and an index deleted.
"""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from dynalab import convergence
from dynalab.cluster import LocalCluster
from tests.integration.conftest import dynamodb_client, error_of, wait_active
from tests.integration.crash_points import held_at, hold_environment
from tests.integration.test_gsi_faults import Writer, create_scores

ACTIVE_TIMEOUT_S = 120.0
CONVERGE_TIMEOUT_S = 60.0
POLL_S = 0.05
WRITER_JOIN_TIMEOUT_S = 30.0
DETECTOR_TIMEOUT_S = 60.0
PROJECT_ROOT = Path(__file__).resolve().parents[2]
DETECTOR = (sys.executable, "-m", "dynalab", "gsi", "violations")

BY_GAME = {
    "IndexName": "ByGame",
    "KeySchema": [
        {"AttributeName": "Game", "KeyType": "HASH"},
        {"AttributeName": "Score", "KeyType": "RANGE"},
    ],
    "Projection": {"ProjectionType": "INCLUDE", "NonKeyAttributes": ["Level"]},
}
DEFINITIONS = [
    {"AttributeName": "Game", "AttributeType": "S"},
    {"AttributeName": "Score", "AttributeType": "N"},
]


def create_users(client: Any, name: str) -> None:
    client.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "UserId", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "UserId", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    wait_active(client, name)


def load(client: Any, name: str, writer: Writer, count: int) -> None:
    """`count` items through BatchWriteItem, remembered by `writer`."""
    for start in range(0, count, 25):
        requests = []
        for user in range(start, min(count, start + 25)):
            item = {
                "UserId": {"S": f"user-{user}"},
                "Game": {"S": f"game-{user % 7}"},
                "Score": {"N": str(user % 101)},
                "Level": {"N": "0"},
            }
            writer.history.append(item)
            requests.append({"PutRequest": {"Item": item}})
        pending = {name: requests}
        while pending:
            pending = client.batch_write_item(RequestItems=pending)["UnprocessedItems"]


def index_description(client: Any, name: str, index: str) -> dict[str, Any] | None:
    table = client.describe_table(TableName=name)["Table"]
    return next(
        (i for i in table.get("GlobalSecondaryIndexes", []) if i["IndexName"] == index), None
    )


def wait_index(
    client: Any, name: str, index: str, done: Callable[[dict[str, Any] | None], bool]
) -> dict[str, Any] | None:
    deadline = time.monotonic() + ACTIVE_TIMEOUT_S
    while True:
        described = index_description(client, name, index)
        if done(described):
            return described
        assert time.monotonic() < deadline, f"index {index} of {name} is still {described}"
        time.sleep(POLL_S)


def add_by_game(client: Any, name: str) -> dict[str, Any]:
    reply = client.update_table(
        TableName=name,
        AttributeDefinitions=DEFINITIONS,
        GlobalSecondaryIndexUpdates=[{"Create": BY_GAME}],
    )
    return reply["TableDescription"]


class BackgroundWriter:
    """A thread writing bursts of puts, key changes and deletes until stopped."""

    def __init__(self, endpoint: str, name: str) -> None:
        self.writer = Writer(dynamodb_client(endpoint), name)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.failure: BaseException | None = None

    def _run(self) -> None:
        round_number = 1
        try:
            while not self.stop.is_set():
                self.writer.burst(round_number * 37 % 1500, 50, round_number)
                round_number += 1
        except BaseException as error:  # Reported by the test once the thread has stopped.
            self.failure = error

    def __enter__(self) -> BackgroundWriter:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(WRITER_JOIN_TIMEOUT_S)
        assert not self.thread.is_alive(), "the background writer did not stop"


@pytest.fixture
def users(dynamodb: Any, table_name: Callable[[], str]) -> Iterator[str]:
    name = table_name()
    create_users(dynamodb, name)
    yield name


def test_global_secondary_index_updates_are_validated_as_dynamodb_does(
    dynamodb: Any, users: str
) -> None:
    def update(**request: Any) -> tuple[int, str, str]:
        return error_of(lambda: dynamodb.update_table(TableName=users, **request))

    invalid = "One or more parameter values were invalid: "
    # An empty list is refused as empty beside another change; alone it counts as no change
    # (as captured against DynamoDB: ack-api-quirks DDB-TABLE-359).
    assert update(GlobalSecondaryIndexUpdates=[], DeletionProtectionEnabled=False) == (
        400,
        "ValidationException",
        invalid + "List of GlobalSecondaryIndexUpdates is empty",
    )
    assert update(GlobalSecondaryIndexUpdates=[])[2].startswith("At least one of ")
    assert update(GlobalSecondaryIndexUpdates=[{}]) == (
        400,
        "ValidationException",
        invalid + "One of GlobalSecondaryIndexUpdate.Update, GlobalSecondaryIndexUpdate.Create, "
        "GlobalSecondaryIndexUpdate.Delete must not be null",
    )
    assert update(
        GlobalSecondaryIndexUpdates=[{"Create": BY_GAME, "Delete": {"IndexName": "ByGame"}}]
    ) == (
        400,
        "ValidationException",
        invalid + "Only one global secondary index action is allowed per "
        "GlobalSecondaryIndexUpdate object",
    )
    second = {**BY_GAME, "IndexName": "Other"}
    assert update(
        AttributeDefinitions=DEFINITIONS,
        GlobalSecondaryIndexUpdates=[{"Create": BY_GAME}, {"Create": second}],
    ) == (
        400,
        "LimitExceededException",
        "Subscriber limit exceeded: Only 1 online index can be created or deleted "
        "simultaneously per table",
    )
    assert update(GlobalSecondaryIndexUpdates=[{"Create": BY_GAME}]) == (
        400,
        "ValidationException",
        invalid + "AttributeDefinitions is not specified for index: ByGame",
    )
    status, kind, message = update(
        AttributeDefinitions=DEFINITIONS[:1], GlobalSecondaryIndexUpdates=[{"Create": BY_GAME}]
    )
    assert (status, kind) == (400, "ValidationException")
    assert message.startswith(
        invalid + "Some index key attributes are not defined in AttributeDefinitions."
    )
    assert update(GlobalSecondaryIndexUpdates=[{"Delete": {"IndexName": "Missing"}}])[:2] == (
        400,
        "ResourceNotFoundException",
    )
    assert dynamodb.describe_table(TableName=users)["Table"].get("GlobalSecondaryIndexes") is None


def test_an_index_added_to_a_live_table_is_backfilled_under_writes_and_converges(
    cluster: LocalCluster, dynamodb: Any, users: str
) -> None:
    seeding = Writer(dynamodb, users)
    load(dynamodb, users, seeding, 3000)
    # Items whose would-be index key has another type than the index will declare: written
    # before the index exists, they are left out of it (seed 004 O-22, O-23).
    for user in range(3):
        wrong = {"UserId": {"S": f"wrong-{user}"}, "Game": {"S": "g"}, "Score": {"S": "high"}}
        dynamodb.put_item(TableName=users, Item=wrong)
    (replicator,) = cluster.replicators
    replicator.kill()  # No replicator: the index stays in its first phase, not backfilling.
    try:
        described = add_by_game(dynamodb, users)
        index = next(i for i in described["GlobalSecondaryIndexes"] if i["IndexName"] == "ByGame")
        assert (index["IndexStatus"], index["Backfilling"]) == ("CREATING", False)
        assert {"AttributeName": "Score", "AttributeType": "N"} in described["AttributeDefinitions"]
        assert error_of(
            lambda: dynamodb.query(
                TableName=users,
                IndexName="ByGame",
                KeyConditionExpression="Game = :g",
                ExpressionAttributeValues={":g": {"S": "game-1"}},
            )
        ) == (400, "ValidationException", "Cannot read from backfilling global secondary index")
        assert error_of(
            lambda: dynamodb.update_table(
                TableName=users,
                AttributeDefinitions=DEFINITIONS,
                GlobalSecondaryIndexUpdates=[{"Create": BY_GAME}],
            )
        ) == (400, "ValidationException", "Attempting to create an index which already exists")
        assert error_of(
            lambda: dynamodb.update_table(
                TableName=users,
                AttributeDefinitions=DEFINITIONS,
                GlobalSecondaryIndexUpdates=[{"Create": {**BY_GAME, "IndexName": "Second"}}],
            )
        )[:2] == (400, "LimitExceededException")
    finally:
        replicator.start()
    with BackgroundWriter(cluster.router_url, users) as background:
        seen = wait_index(
            dynamodb, users, "ByGame", lambda i: i is not None and i["IndexStatus"] == "ACTIVE"
        )
    assert background.failure is None, background.failure
    assert seen is not None and seen["Backfilling"] is False
    history = [*seeding.history, *background.writer.history]
    result = convergence.wait_converged(dynamodb, users, "ByGame", CONVERGE_TIMEOUT_S, history)
    assert result.converged
    page = dynamodb.query(
        TableName=users,
        IndexName="ByGame",
        KeyConditionExpression="Game = :g",
        ExpressionAttributeValues={":g": {"S": "g"}},
    )
    assert page["Items"] == []  # The items whose Score is a string are not in the index.


def test_the_replicator_killed_mid_backfill_resumes_and_the_index_converges(
    cluster: LocalCluster, dynamodb: Any, users: str, tmp_path: Path
) -> None:
    seeding = Writer(dynamodb, users)
    load(dynamodb, users, seeding, 3000)
    (replicator,) = cluster.replicators
    # The replicator is held by its backfill driver at its first page and killed there, so the
    # kill falls in the middle of the backfill however fast the copy would otherwise be (waiting
    # to see Backfilling and then killing could find the index already built).
    replicator.stop()
    try:
        with pytest.MonkeyPatch.context() as environment:
            holding = hold_environment(tmp_path, "copying", machine="backfill")
            for variable, value in holding.items():
                environment.setenv(variable, value)
            replicator.start()
        with BackgroundWriter(cluster.router_url, users) as background:
            add_by_game(dynamodb, users)
            held_at(tmp_path, "copying", machine="backfill")
            wait_index(dynamodb, users, "ByGame", lambda i: i is not None and i["Backfilling"])
            replicator.kill()
            time.sleep(0.5)
            replicator.start()
            wait_index(
                dynamodb, users, "ByGame", lambda i: i is not None and i["IndexStatus"] == "ACTIVE"
            )
    except BaseException:
        replicator.kill()  # The module's later tests need a replicator without the hold.
        replicator.start()
        raise
    assert background.failure is None, background.failure
    history = [*seeding.history, *background.writer.history]
    result = convergence.wait_converged(dynamodb, users, "ByGame", CONVERGE_TIMEOUT_S, history)
    assert result.converged


def test_an_online_index_is_deleted_and_its_table_goes_on(dynamodb: Any, users: str) -> None:
    writer = Writer(dynamodb, users)
    load(dynamodb, users, writer, 100)
    add_by_game(dynamodb, users)
    wait_index(dynamodb, users, "ByGame", lambda i: i is not None and i["IndexStatus"] == "ACTIVE")
    reply = dynamodb.update_table(
        TableName=users, GlobalSecondaryIndexUpdates=[{"Delete": {"IndexName": "ByGame"}}]
    )
    (index,) = reply["TableDescription"]["GlobalSecondaryIndexes"]
    assert index["IndexStatus"] == "DELETING"
    assert index_description(dynamodb, users, "ByGame") is None
    assert error_of(
        lambda: dynamodb.query(
            TableName=users,
            IndexName="ByGame",
            KeyConditionExpression="Game = :g",
            ExpressionAttributeValues={":g": {"S": "game-1"}},
        )
    ) == (400, "ValidationException", "The table does not have the specified index: ByGame")
    writer.put(1, game=1, score=1, level=1)
    item = dynamodb.get_item(TableName=users, Key={"UserId": {"S": "user-1"}}, ConsistentRead=True)
    assert item["Item"]["Level"] == {"N": "1"}
    # The index can be created again, under the same name, and is backfilled again.
    add_by_game(dynamodb, users)
    wait_index(dynamodb, users, "ByGame", lambda i: i is not None and i["IndexStatus"] == "ACTIVE")
    result = convergence.wait_converged(
        dynamodb, users, "ByGame", CONVERGE_TIMEOUT_S, writer.history
    )
    assert result.converged


def test_writes_are_checked_against_an_index_added_online_and_not_one_deleted(
    dynamodb: Any, users: str
) -> None:
    # Seed 004 O-21: once the index exists, a write whose item violates its key schema is
    # refused, whatever node holds the item; UpdateItem's new image is only known on the node.
    mismatch = (
        400,
        "ValidationException",
        "One or more parameter values were invalid: Type mismatch for Index Key Game "
        "Expected: S Actual: N IndexName: ByGame",
    )
    add_by_game(dynamodb, users)
    wait_index(dynamodb, users, "ByGame", lambda i: i is not None and i["IndexStatus"] == "ACTIVE")
    for user in range(8):  # Items on every partition of the table.
        key = {"UserId": {"S": f"user-{user}"}}
        assert (
            error_of(
                lambda key=key: dynamodb.update_item(
                    TableName=users,
                    Key=key,
                    UpdateExpression="SET Game = :g",
                    ExpressionAttributeValues={":g": {"N": "7"}},
                )
            )
            == mismatch
        )
        assert (
            error_of(
                lambda key=key: dynamodb.put_item(TableName=users, Item={**key, "Game": {"N": "7"}})
            )
            == mismatch
        )
        # In a transaction, the update's refusal is its cancellation reason; nothing is written.
        with pytest.raises(ClientError) as cancelled:
            dynamodb.transact_write_items(
                TransactItems=[
                    {
                        "Update": {
                            "TableName": users,
                            "Key": key,
                            "UpdateExpression": "SET Game = :g",
                            "ExpressionAttributeValues": {":g": {"N": "7"}},
                        }
                    }
                ]
            )
        assert cancelled.value.response["Error"]["Code"] == "TransactionCanceledException"
        [reason] = cancelled.value.response["CancellationReasons"]
        assert (reason["Code"], reason["Message"]) == ("ValidationError", mismatch[2])
        dynamodb.update_item(
            TableName=users,
            Key=key,
            UpdateExpression="SET Game = :g",
            ExpressionAttributeValues={":g": {"S": "game-7"}},
        )
    # Deleted, the index checks nothing any more: the same update goes through.
    dynamodb.update_table(
        TableName=users, GlobalSecondaryIndexUpdates=[{"Delete": {"IndexName": "ByGame"}}]
    )
    dynamodb.update_item(
        TableName=users,
        Key={"UserId": {"S": "user-0"}},
        UpdateExpression="SET Game = :g",
        ExpressionAttributeValues={":g": {"N": "7"}},
    )
    item = dynamodb.get_item(TableName=users, Key={"UserId": {"S": "user-0"}}, ConsistentRead=True)
    assert item["Item"]["Game"] == {"N": "7"}


def test_an_index_created_with_its_table_and_deleted_checks_no_write_any_more(
    dynamodb: Any, table_name: Callable[[], str]
) -> None:
    name = table_name()
    create_scores(dynamodb, name)
    key = {"UserId": {"S": "user-1"}}

    def set_score() -> Any:
        return dynamodb.update_item(
            TableName=name,
            Key=key,
            UpdateExpression="SET Score = :s",
            ExpressionAttributeValues={":s": {"S": "high"}},
        )

    assert error_of(set_score)[2].endswith("Expected: N Actual: S IndexName: ByGame")
    dynamodb.update_table(
        TableName=name, GlobalSecondaryIndexUpdates=[{"Delete": {"IndexName": "ByGame"}}]
    )
    set_score()
    dynamodb.put_item(TableName=name, Item={"UserId": {"S": "user-2"}, "Score": {"S": "low"}})
    item = dynamodb.get_item(TableName=name, Key=key, ConsistentRead=True)
    assert item["Item"]["Score"] == {"S": "high"}


def test_an_index_throughput_is_updated_in_provisioned_mode(
    dynamodb: Any, users: str, table_name: Callable[[], str]
) -> None:
    name = table_name()
    dynamodb.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "UserId", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "UserId", "AttributeType": "S"}, *DEFINITIONS],
        ProvisionedThroughput={"ReadCapacityUnits": 5, "WriteCapacityUnits": 5},
        GlobalSecondaryIndexes=[
            {**BY_GAME, "ProvisionedThroughput": {"ReadCapacityUnits": 5, "WriteCapacityUnits": 5}}
        ],
    )
    wait_active(dynamodb, name)

    def update(table: str, index: dict[str, Any]) -> Any:
        return dynamodb.update_table(
            TableName=table, GlobalSecondaryIndexUpdates=[{"Update": index}]
        )

    more = {"ReadCapacityUnits": 7, "WriteCapacityUnits": 9}
    reply = update(name, {"IndexName": "ByGame", "ProvisionedThroughput": more})["TableDescription"]
    assert reply["TableStatus"] == "UPDATING"
    (index,) = reply["GlobalSecondaryIndexes"]
    assert index["IndexStatus"] == "UPDATING"
    assert index["ProvisionedThroughput"]["WriteCapacityUnits"] == 5  # As it starts updating.
    table = wait_active(dynamodb, name)
    (index,) = table["GlobalSecondaryIndexes"]
    assert index["IndexStatus"] == "ACTIVE"
    assert (
        index["ProvisionedThroughput"]["ReadCapacityUnits"],
        index["ProvisionedThroughput"]["WriteCapacityUnits"],
    ) == (7, 9)
    invalid = "One or more parameter values were invalid: "
    assert error_of(lambda: update(name, {"IndexName": "ByGame", "ProvisionedThroughput": more}))[
        2
    ].startswith("The provisioned throughput for the index ByGame will not change.")
    assert error_of(lambda: update(name, {"IndexName": "Missing", "ProvisionedThroughput": more}))[
        :2
    ] == (400, "ResourceNotFoundException")
    assert error_of(
        lambda: update(
            name,
            {
                "IndexName": "ByGame",
                "ProvisionedThroughput": {"ReadCapacityUnits": 0, "WriteCapacityUnits": 1},
            },
        )
    )[:2] == (400, "ValidationException")
    # On demand, an index takes no ProvisionedThroughput.
    add_by_game(dynamodb, users)
    assert error_of(
        lambda: update(users, {"IndexName": "ByGame", "ProvisionedThroughput": more})
    ) == (
        400,
        "ValidationException",
        invalid + "ProvisionedThroughput should not be specified for index: ByGame when "
        "BillingMode is PAY_PER_REQUEST",
    )


def test_the_violation_detector_lists_the_items_the_index_left_out(
    cluster: LocalCluster, dynamodb: Any, users: str
) -> None:
    # Seed 004 O-22 to O-24: written before the index existed, these items violate its key
    # schema; the index is created anyway and leaves them out; the detector names them.
    good = {"UserId": {"S": "good"}, "Game": {"S": "g"}, "Score": {"N": "1"}}
    wrong = {"UserId": {"S": "wrong"}, "Game": {"S": "g"}, "Score": {"S": "high"}}
    empty = {"UserId": {"S": "empty"}, "Game": {"S": ""}, "Score": {"N": "2"}}
    large = {"UserId": {"S": "large"}, "Game": {"S": "x" * 2049}}
    for item in (good, wrong, empty, large):
        dynamodb.put_item(TableName=users, Item=item)
    add_by_game(dynamodb, users)
    wait_index(dynamodb, users, "ByGame", lambda i: i is not None and i["IndexStatus"] == "ACTIVE")
    result = convergence.wait_converged(
        dynamodb, users, "ByGame", CONVERGE_TIMEOUT_S, [good, wrong, empty, large]
    )
    assert result.converged
    finished = subprocess.run(
        [*DETECTOR, users, "ByGame", "--endpoint", cluster.router_url],
        capture_output=True,
        text=True,
        timeout=DETECTOR_TIMEOUT_S,
        check=True,
        cwd=PROJECT_ROOT,
    )
    header, *rows = list(csv.reader(io.StringIO(finished.stdout)))
    assert header[:5] == [
        "Table Hash Key",
        "Table Range Key",
        "GSI Hash Key Value",
        "GSI Hash Key Violation Type",
        "GSI Hash Key Violation Description",
    ]
    by_user = {json.loads(row[0])["S"]: row for row in rows}
    assert sorted(by_user) == ["empty", "large", "wrong"]
    assert by_user["wrong"][5:7] == ['{"S": "high"}', "Type Violation"]
    assert by_user["wrong"][7].endswith("Expected: N Actual: S IndexName: ByGame")
    assert by_user["empty"][3] == "Size Violation"
    assert "empty string" in by_user["empty"][4]
    assert by_user["large"][3] == "Size Violation"
    assert by_user["large"][5:] == ["", "", ""]
    assert finished.stderr.strip().endswith(f"3 items of {users} violate index ByGame")
    missing = subprocess.run(
        [*DETECTOR, users, "Nope", "--endpoint", cluster.router_url],
        capture_output=True,
        text=True,
        timeout=DETECTOR_TIMEOUT_S,
        cwd=PROJECT_ROOT,
    )
    assert missing.returncode == 2
    assert f"table {users} has no global index Nope" in missing.stderr
