"""A CreateTable or DeleteTable whose router dies half-way is finished by another router, and
DescribeTable counts the items of a dead node.

Router 1 is started held (`DYNALAB_HOLD_AT=table:<state>`, `rpc.machines.HoldPoints`) at one
point of the table machine between two effects of the operation, where the test kills it with
SIGKILL; router 2's reconciler (router/table_lifecycle.py, TableReconciler) must then roll the
table forward within seconds, where it used to stay CREATING for 10 minutes.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import BotoCoreError, ClientError

from core import limits
from core.machines.table import NAME as TABLE
from dynalab.cluster import LocalCluster, Router
from tests.integration.conftest import dynamodb_client, error_of
from tests.integration.crash_points import KillAt, hold_environment

# A stalled operation is finished after the stall bound plus one reconcile round; the rest is
# slack for a loaded machine.
RECOVERY_SECONDS_MAX = limits.TABLE_TRANSITION_STALL_SECONDS + limits.TABLE_RECONCILE_SECONDS + 10
EXIT_WAIT_SECONDS = 30.0
POLL_SECONDS = 0.1
KEY_SCHEMA = [{"AttributeName": "pk", "KeyType": "HASH"}]
ATTRIBUTES = [{"AttributeName": "pk", "AttributeType": "S"}]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with pytest.MonkeyPatch.context() as environment:
        environment.setenv("DYNALAB_THROTTLING", "off")
        with LocalCluster(
            tmp_path_factory.mktemp("recovery"), nodes=2, routers=2, replicators=0
        ) as running:
            yield running


# Each step of the operation, as the point of the table machine reached just after it (the state
# recorded before the next effect).
POINTS = {
    "create-recorded": "creating",
    "create-partitions": "created",
    "delete-marked": "deleting",
    "delete-dropped": "dropped",
}


def crashing(router: Router, step: str, holds: Path) -> tuple[Any, KillAt]:
    """Restart `router` held at `step`'s point; return a client for it, and what kills it with
    SIGKILL there (to enter around the call that leads it there)."""
    router.stop()
    with pytest.MonkeyPatch.context() as environment:
        for name, value in hold_environment(holds, POINTS[step], machine=TABLE).items():
            environment.setenv(name, value)
        router.start()
    return dynamodb_client(router.url), KillAt(router, holds, POINTS[step], machine=TABLE)


def died(router: Router) -> None:
    assert router.process is not None
    assert router.process.wait(EXIT_WAIT_SECONDS) == -9


def status(client: Any, name: str) -> str | None:
    """The table's status as DescribeTable gives it, None once it is not found."""
    try:
        return str(client.describe_table(TableName=name)["Table"]["TableStatus"])
    except ClientError as error:
        assert error.response["Error"]["Code"] == "ResourceNotFoundException", error.response
        return None


def wait_for_status(client: Any, name: str, wanted: str | None) -> float:
    """Poll DescribeTable until the table's status is `wanted`; return how long it took."""
    started = time.monotonic()
    while (seen := status(client, name)) != wanted:
        assert time.monotonic() - started < RECOVERY_SECONDS_MAX, (name, seen, wanted)
        time.sleep(POLL_SECONDS)
    return time.monotonic() - started


def create(client: Any, name: str) -> None:
    client.create_table(
        TableName=name,
        KeySchema=KEY_SCHEMA,
        AttributeDefinitions=ATTRIBUTES,
        BillingMode="PAY_PER_REQUEST",
    )


@pytest.mark.parametrize("step", ["create-recorded", "create-partitions"])
def test_a_creation_left_half_done_is_finished_by_another_router(
    cluster: LocalCluster, step: str, tmp_path: Path
) -> None:
    doomed, survivor = cluster.routers
    name = f"created_{step.replace('-', '_')}"
    doomed_client, kill = crashing(doomed, step, tmp_path)
    with kill, pytest.raises(BotoCoreError):
        create(doomed_client, name)
    died(doomed)
    client = dynamodb_client(survivor.url)
    wait_for_status(client, name, "ACTIVE")
    client.put_item(TableName=name, Item={"pk": {"S": "a"}, "v": {"N": "1"}})
    assert client.get_item(TableName=name, Key={"pk": {"S": "a"}})["Item"]["v"] == {"N": "1"}
    doomed.start()


@pytest.mark.parametrize("step", ["delete-marked", "delete-dropped"])
def test_a_deletion_left_half_done_is_finished_by_another_router(
    cluster: LocalCluster, step: str, tmp_path: Path
) -> None:
    doomed, survivor = cluster.routers
    name = f"deleted_{step.replace('-', '_')}"
    client = dynamodb_client(survivor.url)
    create(client, name)
    wait_for_status(client, name, "ACTIVE")
    client.put_item(TableName=name, Item={"pk": {"S": "old"}})
    doomed_client, kill = crashing(doomed, step, tmp_path)
    # The deletion is marked during the call below, so its stall is timed from no earlier than
    # here (not from before the doomed router's restart, which takes seconds on a loaded machine).
    deleting_since = time.monotonic()
    with kill, pytest.raises(BotoCoreError):
        doomed_client.delete_table(TableName=name)
    died(doomed)
    # No router finishes the deletion before it has stalled TABLE_TRANSITION_STALL_SECONDS: until
    # then the name is still taken, and creating the table again is ResourceInUseException, as
    # in DynamoDB for a table being deleted.
    refusal = error_of(lambda: create(client, name))
    assert time.monotonic() - deleting_since < limits.TABLE_TRANSITION_STALL_SECONDS, refusal
    assert refusal[:2] == (400, "ResourceInUseException")
    assert name in refusal[2]
    wait_for_status(client, name, None)
    # The name is free again, and the new table holds nothing of the old one.
    create(client, name)
    wait_for_status(client, name, "ACTIVE")
    assert "Item" not in client.get_item(TableName=name, Key={"pk": {"S": "old"}})
    doomed.start()


def catalog_node(router: Router) -> str:
    """The node holding the catalog, as `router` logged finding it."""
    found = re.findall(r"the catalog is partition \S+ on (\S+)", router.log_path.read_text())
    assert found, f"{router.name} logged no catalog location"
    return str(found[-1])


def table_nodes(router: Router, name: str) -> set[str]:
    """The nodes holding the table's partitions (the router's /admin/tables/NAME/partitions)."""
    url = f"{router.url}/admin/tables/{name}/partitions"
    with urllib.request.urlopen(url, timeout=EXIT_WAIT_SECONDS) as reply:
        return {partition["node"] for partition in json.load(reply)["partitions"]}


def test_describe_table_counts_a_dead_nodes_partitions_as_last_reported(
    cluster: LocalCluster,
) -> None:
    router = cluster.routers[1]
    client = dynamodb_client(router.url)
    # A table with a partition off the catalog's node (the catalog must stay readable); its four
    # partitions are placed by their random ids, so each try finds one with odds of 15 in 16.
    for attempt in range(8):
        name = f"counted_{attempt}"
        create(client, name)
        wait_for_status(client, name, "ACTIVE")
        victims = table_nodes(router, name) - {catalog_node(router)}
        if victims:
            break
    assert victims, "every table was placed on the catalog's node alone"
    for number in range(40):
        client.put_item(TableName=name, Item={"pk": {"S": f"k{number}"}})
    described = client.describe_table(TableName=name)["Table"]
    assert described["ItemCount"] == 40
    node = cluster.node(sorted(victims)[0])
    node.kill()
    try:
        unreadable = 0
        for number in range(40):
            try:
                client.get_item(TableName=name, Key={"pk": {"S": f"k{number}"}})
            except ClientError as error:
                assert error.response["Error"]["Code"] == "ServiceUnavailable"
                unreadable += 1
        assert unreadable > 0  # the dead node held some of the items
        again = client.describe_table(TableName=name)["Table"]
        assert again["ItemCount"] == 40
        assert again["TableSizeBytes"] == described["TableSizeBytes"]
    finally:
        node.start()
