"""Back-pressure of a global index on its table, on a real cluster whose nodes hold back writes
once the replicator is 20 change records behind (DYNALAB_GSI_LAG_RECORDS_MAX): with the replicator
stopped, writes that would change the index are refused with DynamoDB's
ProvisionedThroughputExceededException for global indexes, writes that touch no index go on, and
once the replicator is back and caught up the index converges and writes are taken again. The
replicator's `/metrics` reports each index's lag in records and seconds.
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from core.errors import GSI_THROTTLED
from dynalab import convergence
from dynalab.cluster import LocalCluster
from tests.integration.conftest import dynamodb_client, error_summary, wait_active

LAG_RECORDS_MAX = 20
RECOVERY_TIMEOUT_S = 60.0
POLL_S = 0.1
METRICS_TIMEOUT_S = 5.0


@pytest.fixture(scope="module")
def held_back(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with pytest.MonkeyPatch.context() as environment:
        environment.setenv("DYNALAB_THROTTLING", "off")
        environment.setenv("DYNALAB_GSI_LAG_RECORDS_MAX", str(LAG_RECORDS_MAX))
        path: Path = tmp_path_factory.mktemp("held-back")
        with LocalCluster(path, nodes=2, routers=1) as running:
            yield running


ARN_PREFIX = "arn:aws:dynamodb:us-east-1:000000000000:table/"


def item(user: int, game: str | None, level: int = 0) -> dict[str, Any]:
    made: dict[str, Any] = {"UserId": {"S": f"user-{user}"}, "Level": {"N": str(level)}}
    if game is not None:
        made["Game"] = {"S": game}
    return made


def attempt(call: Callable[[], Any]) -> tuple[int, str, str] | None:
    """None if the call succeeded, else its (HTTP status, error code, message)."""
    try:
        call()
    except ClientError as error:
        return error_summary(error.response)
    return None


def metrics(url: str) -> str:
    with urllib.request.urlopen(f"{url}/metrics", timeout=METRICS_TIMEOUT_S) as reply:
        return str(reply.read().decode())


def put_until_held_back(client: Any, name: str, users: range, game: str) -> list[dict[str, Any]]:
    """Put an item of `game` for each of `users`; the ones acknowledged, after checking that
    every other one was refused as held back for the index."""
    written: list[dict[str, Any]] = []
    refused = []
    for user in users:
        made = item(user, game)
        outcome = attempt(lambda: client.put_item(TableName=name, Item=made))  # noqa: B023
        if outcome is None:
            written.append(made)
        else:
            refused.append(outcome)
    assert set(refused) == {(400, "ProvisionedThroughputExceededException", GSI_THROTTLED)}
    return written


def put_once_released(client: Any, name: str, made: dict[str, Any]) -> None:
    """Retry a put of `made` until the nodes stop holding it back (the replicator is back)."""
    deadline = time.monotonic() + RECOVERY_TIMEOUT_S
    while attempt(lambda: client.put_item(TableName=name, Item=made)) is not None:
        assert time.monotonic() < deadline, "writes stayed held back after the replicator returned"
        time.sleep(POLL_S)


def test_a_lagging_index_holds_back_the_writes_that_would_change_it(
    held_back: LocalCluster, table_name: Callable[[], str]
) -> None:
    client = dynamodb_client(held_back.router_url)
    name = table_name()
    # One base partition (5 WCU) and one index partition, so the lag bound is reached quickly.
    client.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "UserId", "KeyType": "HASH"}],
        AttributeDefinitions=[
            {"AttributeName": "UserId", "AttributeType": "S"},
            {"AttributeName": "Game", "AttributeType": "S"},
        ],
        ProvisionedThroughput={"ReadCapacityUnits": 5, "WriteCapacityUnits": 5},
        GlobalSecondaryIndexes=[
            {
                "IndexName": "ByGame",
                "KeySchema": [{"AttributeName": "Game", "KeyType": "HASH"}],
                "Projection": {"ProjectionType": "KEYS_ONLY"},
                "ProvisionedThroughput": {"ReadCapacityUnits": 5, "WriteCapacityUnits": 5},
            }
        ],
    )
    wait_active(client, name)
    (replicator,) = held_back.replicators
    history: list[dict[str, Any]] = []
    replicator.kill()
    try:
        history += put_until_held_back(client, name, range(LAG_RECORDS_MAX + 5), "chess")
        assert len(history) == LAG_RECORDS_MAX + 1
        # The refusal names the index held back, by its ARN, as DynamoDB's ThrottlingReasons do.
        try:
            client.put_item(TableName=name, Item=item(999, "chess"))
        except ClientError as error:
            assert error.response["ThrottlingReasons"] == [
                {
                    "reason": "IndexWriteProvisionedThroughputExceeded",
                    "resource": f"{ARN_PREFIX}{name}/index/ByGame",
                }
            ]
        else:
            raise AssertionError("a write to a held-back index was acknowledged")
        # Writes that change no index go on: an item without the index key, and a change of an
        # attribute the index does not project.
        client.put_item(TableName=name, Item=item(1000, None))
        client.update_item(
            TableName=name,
            Key={"UserId": {"S": "user-0"}},
            UpdateExpression="SET #l = :l",
            ExpressionAttributeNames={"#l": "Level"},
            ExpressionAttributeValues={":l": {"N": "7"}},
        )
    finally:
        replicator.start()
    late = item(LAG_RECORDS_MAX + 100, "go")
    put_once_released(client, name, late)
    history.append(late)
    result = convergence.wait_converged(client, name, "ByGame", RECOVERY_TIMEOUT_S, history)
    assert result.converged
    text = metrics(replicator.url)
    assert f'dynalab_gsi_index_lag_records{{table="{name}",index="ByGame"}}' in text
    assert f'dynalab_gsi_index_lag_seconds{{table="{name}",index="ByGame"}}' in text


def test_an_index_added_online_holds_back_writes_once_active_and_not_while_copied(
    held_back: LocalCluster, table_name: Callable[[], str]
) -> None:
    client = dynamodb_client(held_back.router_url)
    name = table_name()
    client.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "UserId", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "UserId", "AttributeType": "S"}],
        ProvisionedThroughput={"ReadCapacityUnits": 5, "WriteCapacityUnits": 5},
    )
    wait_active(client, name)
    history = [item(user, "chess") for user in range(3)]
    for written in history:
        client.put_item(TableName=name, Item=written)
    client.update_table(
        TableName=name,
        AttributeDefinitions=[{"AttributeName": "Game", "AttributeType": "S"}],
        GlobalSecondaryIndexUpdates=[
            {
                "Create": {
                    "IndexName": "ByGame",
                    "KeySchema": [{"AttributeName": "Game", "KeyType": "HASH"}],
                    "Projection": {"ProjectionType": "KEYS_ONLY"},
                    "ProvisionedThroughput": {"ReadCapacityUnits": 5, "WriteCapacityUnits": 5},
                }
            }
        ],
    )
    deadline = time.monotonic() + RECOVERY_TIMEOUT_S
    while True:
        (index,) = client.describe_table(TableName=name)["Table"]["GlobalSecondaryIndexes"]
        if index["IndexStatus"] == "ACTIVE":
            break
        assert time.monotonic() < deadline, "the online index never became ACTIVE"
        time.sleep(POLL_S)
    result = convergence.wait_converged(client, name, "ByGame", RECOVERY_TIMEOUT_S, history)
    assert result.converged  # The index's consumer has caught up: its lag starts at nothing.
    (replicator,) = held_back.replicators
    replicator.kill()
    try:
        history += put_until_held_back(client, name, range(100, 100 + LAG_RECORDS_MAX + 5), "go")
        # The online index's own consumer is what fell behind: the bound is its lag.
        assert len(history) == 3 + LAG_RECORDS_MAX + 1
        client.put_item(TableName=name, Item=item(1000, None))  # No index key: no index write.
    finally:
        replicator.start()
    late = item(5000, "go")
    put_once_released(client, name, late)
    history.append(late)
    result = convergence.wait_converged(client, name, "ByGame", RECOVERY_TIMEOUT_S, history)
    assert result.converged
