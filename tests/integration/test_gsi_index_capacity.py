"""Back-pressure from a global index's own write capacity, through boto3 on a real cluster
enforcing throughput (a burst bank of one second, so that an index's burst is spent at once).

A provisioned table (1,000 WCU) has two global indexes: ByGame at 5 WCU and ByLevel at 1,000.
Three clients put at once, for a few seconds: items with a Game (they change ByGame), items with
only a Level (ByLevel alone) and items with neither. ByGame's partition soon has no write
capacity; it refuses the replicator's index writes, the replicator tells the base partition's
node, and that node refuses the base writes that would change ByGame with
ProvisionedThroughputExceededException, its ThrottlingReasons naming ByGame by its ARN. Checked:
every refused write is one of the first kind, and names ByGame alone; no write of the other two
kinds is refused; the ByGame writes acknowledged stay near what the index can take in that time;
and both indexes converge to their table afterwards. The replicator's `/metrics` counts the
refused index writes.
"""

from __future__ import annotations

import threading
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
from tests.integration.conftest import dynamodb_client, wait_active

INDEX_WCU = 5
RUN_SECONDS = 6.0
PAUSE_SECONDS = 0.005
CONVERGE_TIMEOUT_S = 60.0
ARN_PREFIX = "arn:aws:dynamodb:us-east-1:000000000000:table/"
KINDS = ("game", "level", "none")


@pytest.fixture(scope="module")
def enforcing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with pytest.MonkeyPatch.context() as environment:
        environment.setenv("DYNALAB_THROTTLING", "on")
        environment.setenv("DYNALAB_BURST_SECONDS", "1")
        path: Path = tmp_path_factory.mktemp("index-capacity")
        with LocalCluster(path, nodes=2, routers=1) as running:
            yield running


def index(name: str, attribute: str, units: int) -> dict[str, Any]:
    return {
        "IndexName": name,
        "KeySchema": [{"AttributeName": attribute, "KeyType": "HASH"}],
        "Projection": {"ProjectionType": "KEYS_ONLY"},
        "ProvisionedThroughput": {"ReadCapacityUnits": 1000, "WriteCapacityUnits": units},
    }


def made(kind: str, number: int) -> dict[str, Any]:
    item: dict[str, Any] = {"UserId": {"S": f"{kind}-{number}"}}
    if kind == "game":
        item["Game"] = {"S": f"game-{number % 7}"}
    if kind == "level":
        item["Level"] = {"S": f"level-{number % 7}"}
    return item


def test_an_index_at_its_capacity_throttles_exactly_the_base_writes_that_change_it(
    enforcing: LocalCluster, table_name: Callable[[], str]
) -> None:
    client = dynamodb_client(enforcing.router_url)
    name = table_name()
    client.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "UserId", "KeyType": "HASH"}],
        AttributeDefinitions=[
            {"AttributeName": attribute, "AttributeType": "S"}
            for attribute in ("UserId", "Game", "Level")
        ],
        ProvisionedThroughput={"ReadCapacityUnits": 1000, "WriteCapacityUnits": 1000},
        GlobalSecondaryIndexes=[
            index("ByGame", "Game", INDEX_WCU),
            index("ByLevel", "Level", 1000),
        ],
    )
    wait_active(client, name)
    written: dict[str, list[dict[str, Any]]] = {kind: [] for kind in KINDS}
    refused: dict[str, list[dict[str, Any]]] = {kind: [] for kind in KINDS}
    stop = time.monotonic() + RUN_SECONDS

    def writer(kind: str) -> None:
        own = dynamodb_client(enforcing.router_url)
        number = 0
        while time.monotonic() < stop:
            number += 1
            item = made(kind, number)
            try:
                own.put_item(TableName=name, Item=item)
                written[kind].append(item)
            except ClientError as error:
                refused[kind].append(error.response)
            time.sleep(PAUSE_SECONDS)

    threads = [threading.Thread(target=writer, args=(kind,)) for kind in KINDS]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert refused["level"] == [] and refused["none"] == [], refused
    assert refused["game"], "ByGame at its capacity never throttled the writes that change it"
    for response in refused["game"]:
        assert response["Error"]["Code"] == "ProvisionedThroughputExceededException"
        assert response["Error"]["Message"] == GSI_THROTTLED
        assert response["ThrottlingReasons"] == [
            {
                "reason": "IndexWriteProvisionedThroughputExceeded",
                "resource": f"{ARN_PREFIX}{name}/index/ByGame",
            }
        ]
    # ByGame takes INDEX_WCU one-unit writes a second, and its bank of one second: the writes
    # acknowledged are about that (some slip through between an index write it took and its
    # next refusal), while the others went on at the clients' pace, which is the machine's: on
    # a loaded one each put takes tens of milliseconds. So the others are compared with the
    # writes ByGame let through, not with a rate.
    capacity = INDEX_WCU * (RUN_SECONDS + 1)
    acknowledged = {kind: len(items) for kind, items in written.items()}
    assert acknowledged["game"] <= 2 * capacity, acknowledged
    assert acknowledged["level"] > 2 * acknowledged["game"], acknowledged
    assert acknowledged["none"] > 2 * acknowledged["game"], acknowledged
    history = [item for items in written.values() for item in items]
    for index_name in ("ByGame", "ByLevel"):
        result = convergence.wait_converged(client, name, index_name, CONVERGE_TIMEOUT_S, history)
        assert result.converged
    (replicator,) = enforcing.replicators
    with urllib.request.urlopen(f"{replicator.url}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    throttled = [
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("dynalab_gsi_throttled_applies_total{")
    ]
    assert sum(throttled) > 0
