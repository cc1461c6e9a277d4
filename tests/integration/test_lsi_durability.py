"""A `kill -9` of a storage node during writes to a table with local secondary indexes leaves
every index exactly the projection of its table, with exact counters and collection sizes.

Writers put, update and delete items that move in and out of two LSIs (one ALL, one KEYS_ONLY)
while a node holding some of the table's partitions is killed with SIGKILL and restarted on the
same data. Afterwards each index, read with ConsistentRead through the router, must hold exactly
the entries the table's items project to; then, with the cluster stopped, the checker
(`dynalab.checkers`) reads each node's data directory and compares every partition's entries,
per-index counters and item collection sizes with its items.
"""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from core.catalog import IndexDef, IndexStatus
from core.indexes import index_entry, local_index_key
from core.keys import KeyShape
from dynalab.checkers import check_data_dir
from dynalab.cluster import LocalCluster
from tests.integration.conftest import dynamodb_client, stored_catalog, wait_active

WRITERS = 4
PHASE_SECONDS = 2.0  # Load before the kill, during the outage, and after the restart.
REQUEST_SECONDS_MAX = 15.0
FORUMS = 12
SUBJECTS = 8
SHAPE = KeyShape.table(("forum", "S"), ("subject", "S"))
INDEXES = {
    "byDate": IndexDef(
        "byDate", local_index_key(SHAPE, ("date", "S")), "ALL", IndexStatus.ACTIVE, local=True
    ),
    "byViews": IndexDef(
        "byViews",
        local_index_key(SHAPE, ("views", "N")),
        "KEYS_ONLY",
        IndexStatus.ACTIVE,
        local=True,
    ),
}


class Writer(threading.Thread):
    """Random puts, updates and deletes that add, move and remove index entries, until stopped."""

    def __init__(self, url: str, table: str, seed: int, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.client = dynamodb_client(url)
        self.table = table
        self.random = random.Random(seed)
        self.stop_event = stop
        self.acknowledged = 0
        self.refused: list[tuple[str, str]] = []
        self.unexpected: list[BaseException] = []

    def request(self) -> None:
        key = {
            "forum": {"S": f"f{self.random.randrange(FORUMS)}"},
            "subject": {"S": f"s{self.random.randrange(SUBJECTS)}"},
        }
        choice = self.random.random()
        if choice < 0.4:
            item = dict(key, body={"S": "x" * self.random.randrange(10, 500)})
            if self.random.random() < 0.7:
                item["date"] = {"S": f"2015-{self.random.randrange(1, 13):02d}"}
            if self.random.random() < 0.5:
                item["views"] = {"N": str(self.random.randrange(100))}
            self.client.put_item(TableName=self.table, Item=item)
        elif choice < 0.8:
            expression = self.random.choice(
                [
                    "SET #d = :d",
                    "REMOVE #d",
                    "SET #v = :v",
                    "REMOVE #v",
                    "SET #d = :d, #v = :v",
                ]
            )
            values = {":d": {"S": f"2016-{self.random.randrange(1, 13):02d}"}, ":v": {"N": "7"}}
            used = {name: value for name, value in values.items() if name in expression}
            self.client.update_item(
                TableName=self.table,
                Key=key,
                UpdateExpression=expression,
                ExpressionAttributeNames={
                    placeholder: attribute
                    for placeholder, attribute in (("#d", "date"), ("#v", "views"))
                    if placeholder in expression
                },
                **({"ExpressionAttributeValues": used} if used else {}),
            )
        else:
            self.client.delete_item(TableName=self.table, Key=key)

    def run(self) -> None:
        while not self.stop_event.is_set():
            try:
                self.request()
            except ClientError as error:
                self.refused.append(
                    (error.response["Error"]["Code"], error.response["Error"]["Message"])
                )
            except BaseException as error:
                self.unexpected.append(error)
            else:
                self.acknowledged += 1


def create_table(client: Any, name: str) -> None:
    client.create_table(
        TableName=name,
        KeySchema=[
            {"AttributeName": "forum", "KeyType": "HASH"},
            {"AttributeName": "subject", "KeyType": "RANGE"},
        ],
        AttributeDefinitions=[
            {"AttributeName": "forum", "AttributeType": "S"},
            {"AttributeName": "subject", "AttributeType": "S"},
            {"AttributeName": "date", "AttributeType": "S"},
            {"AttributeName": "views", "AttributeType": "N"},
        ],
        LocalSecondaryIndexes=[
            {
                "IndexName": index.name,
                "KeySchema": [
                    {"AttributeName": "forum", "KeyType": "HASH"},
                    {"AttributeName": index.key_shape.names[1], "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": index.projection},
            }
            for index in INDEXES.values()
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    wait_active(client, name)


def read_all(client: Any, **request: Any) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for _ in range(1000):
        page = client.scan(ConsistentRead=True, **request)
        items.extend(page["Items"])
        if "LastEvaluatedKey" not in page:
            return items
        request["ExclusiveStartKey"] = page["LastEvaluatedKey"]
    pytest.fail("the scan never ended")


def entry_identity(entry: dict[str, Any]) -> str:
    return repr(sorted(entry.items()))


def test_local_indexes_match_their_table_after_kill_9(tmp_path: Path) -> None:
    with pytest.MonkeyPatch.context() as environment:
        environment.setenv("DYNALAB_THROTTLING", "off")
        cluster = LocalCluster(tmp_path / "cluster", nodes=3, routers=1)
        with cluster:
            client = dynamodb_client(cluster.router_url)
            name = "lsi-kill-9"
            create_table(client, name)
            catalog = stored_catalog(cluster.nodes)
            holders = {p["node"] for p in catalog["tables"][name]["partitions"]}
            # A node holding partitions, not the catalog's where there is one: placement is by
            # the hash of random table ids, so all four partitions may share the catalog's node
            # (the routers then serve items from their cached catalog while it is down).
            victims = sorted(holders - {catalog["catalog_node"]}) or sorted(holders)
            victim = cluster.node(victims[0])

            stop = threading.Event()
            writers = [Writer(cluster.router_url, name, seed, stop) for seed in range(WRITERS)]
            for writer in writers:
                writer.start()
            try:
                time.sleep(PHASE_SECONDS)
                victim.kill()
                time.sleep(PHASE_SECONDS)
                victim.start()
                time.sleep(PHASE_SECONDS)
            finally:
                stop.set()
                for writer in writers:
                    writer.join(timeout=REQUEST_SECONDS_MAX)
            assert not any(writer.is_alive() for writer in writers), "a writer is stuck"
            assert not [e for w in writers for e in w.unexpected]
            # The dead node's partitions are unavailable; a write in flight when it died has an
            # unknown outcome, which the router answers as an internal error that says so.
            for code, message in (refusal for w in writers for refusal in w.refused):
                assert code == "ServiceUnavailable" or (
                    code == "InternalServerError" and "may or may not have been applied" in message
                ), (code, message)
            assert sum(w.acknowledged for w in writers) > 0

            items = read_all(client, TableName=name)
            assert items, "the writers left no items"
            for index in INDEXES.values():
                expected = sorted(
                    entry_identity(entry)
                    for item in items
                    if (entry := index_entry(item, index, SHAPE)) is not None
                )
                stored = sorted(
                    entry_identity(entry)
                    for entry in read_all(client, TableName=name, IndexName=index.name)
                )
                assert stored == expected, f"index {index.name} differs from its table"
                assert expected, f"index {index.name} is empty: the test proved nothing"
        for node in cluster.nodes:
            assert check_data_dir(node.data_dir) == [], f"node {node.node_id}"
