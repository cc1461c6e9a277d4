"""Global secondary indexes under faults, on a real cluster: the replicator killed with SIGKILL in
the middle of a stream of writes, and a storage node killed and restarted under it. Each time the
index converges exactly to the projection of its table (`dynalab.convergence`): nothing lost,
nothing applied twice, no entry that no version of the table ever projected.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from botocore.exceptions import ClientError

from dynalab import convergence
from dynalab.cluster import LocalCluster
from tests.integration.conftest import wait_active

CONVERGE_TIMEOUT_S = 60.0
WRITE_ATTEMPTS_MAX = 100
WRITE_RETRY_PAUSE_S = 0.1


def create_scores(client: Any, name: str) -> None:
    client.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "UserId", "KeyType": "HASH"}],
        AttributeDefinitions=[
            {"AttributeName": "UserId", "AttributeType": "S"},
            {"AttributeName": "Game", "AttributeType": "S"},
            {"AttributeName": "Score", "AttributeType": "N"},
        ],
        BillingMode="PAY_PER_REQUEST",
        GlobalSecondaryIndexes=[
            {
                "IndexName": "ByGame",
                "KeySchema": [
                    {"AttributeName": "Game", "KeyType": "HASH"},
                    {"AttributeName": "Score", "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "INCLUDE", "NonKeyAttributes": ["Level"]},
            }
        ],
    )
    wait_active(client, name)


class Writer:
    """Writes a changing population of items, remembering every version it wrote (the
    projections an index may hold while it catches up)."""

    def __init__(self, client: Any, table: str) -> None:
        self.client = client
        self.table = table
        self.history: list[dict[str, Any]] = []

    def put(self, user: int, game: int, score: int, level: int) -> None:
        item = {
            "UserId": {"S": f"user-{user}"},
            "Game": {"S": f"game-{game}"},
            "Score": {"N": str(score)},
            "Level": {"N": str(level)},
            "Unprojected": {"S": "x" * (user % 50)},
        }
        self.history.append(item)
        self._retried(lambda: self.client.put_item(TableName=self.table, Item=item))

    def delete(self, user: int) -> None:
        key = {"UserId": {"S": f"user-{user}"}}
        self._retried(lambda: self.client.delete_item(TableName=self.table, Key=key))

    def burst(self, start: int, count: int, round_number: int) -> None:
        """Puts, key changes, projected-attribute changes and deletes over users [start, +count)."""
        for user in range(start, start + count):
            action = (user + round_number) % 4
            if action == 3 and round_number:
                self.delete(user)
            else:
                self.put(
                    user,
                    game=(user + round_number) % 7,
                    score=user * round_number % 13,
                    level=round_number,
                )

    def _retried(self, write: Callable[[], Any]) -> None:
        # A node being restarted answers 503 ServiceUnavailable for its partitions; a client
        # retries, as SDKs do. Whether a failed attempt was applied does not matter: the checker
        # compares the index with the table as it is.
        for _ in range(WRITE_ATTEMPTS_MAX):
            try:
                write()
                return
            except ClientError as error:
                if error.response["Error"]["Code"] not in (
                    "ServiceUnavailable",
                    "InternalServerError",
                ):
                    raise
            time.sleep(WRITE_RETRY_PAUSE_S)
        raise AssertionError(f"a write kept failing for {WRITE_ATTEMPTS_MAX} attempts")


def test_the_replicator_killed_mid_stream_resumes_and_the_index_converges_exactly(
    cluster: LocalCluster, dynamodb: Any, table_name: Callable[[], str]
) -> None:
    name = table_name()
    create_scores(dynamodb, name)
    writer = Writer(dynamodb, name)
    (replicator,) = cluster.replicators
    writer.burst(0, 150, 0)
    replicator.kill()  # SIGKILL while it is still applying the burst.
    writer.burst(0, 150, 1)  # Written while no replicator runs: held in the change logs.
    replicator.start()
    writer.burst(50, 150, 2)
    replicator.kill()
    replicator.start()
    writer.burst(0, 200, 3)
    result = convergence.wait_converged(
        dynamodb, name, "ByGame", CONVERGE_TIMEOUT_S, writer.history
    )
    assert result.converged


def test_a_node_killed_and_restarted_under_the_replicator(
    cluster: LocalCluster, dynamodb: Any, table_name: Callable[[], str]
) -> None:
    name = table_name()
    create_scores(dynamodb, name)
    writer = Writer(dynamodb, name)
    writer.burst(0, 150, 0)
    # Every node holds base or index partitions of the table (4 of each, on 3 nodes): killing
    # one cuts the replicator off from some sources and some targets at once.
    node = cluster.node("node-2")
    node.kill()
    time.sleep(0.5)
    node.start()
    writer.burst(0, 150, 1)
    node.kill()
    node.start()
    writer.burst(25, 100, 2)
    result = convergence.wait_converged(
        dynamodb, name, "ByGame", CONVERGE_TIMEOUT_S, writer.history
    )
    assert result.converged
