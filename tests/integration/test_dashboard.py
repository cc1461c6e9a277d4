"""The router's cluster snapshot (`GET /admin/cluster`) and `dynalab status` on a real 3-node
cluster with throughput enforced: nodes and their state, every table's partitions covering the hash
space with their sizes and item counts, consumed against allowed units and throttling over time,
global indexes and the replicator's progress, TTL, and a node killed (the module's cluster stays
broken after that test, so the tests after it expect the dead node); `dynalab status` against a
`dynalab up` too."""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from dynalab.cluster import PROJECT_ROOT, LocalCluster, free_ports
from tests.integration.conftest import create_active_table, dynamodb_client, wait_active
from tests.integration.test_cli import EXIT_TIMEOUT_S, wait_for_endpoint

BURST_SECONDS = 1.0  # Banked capacity is spent in a second, so a hot key throttles at once.
SNAPSHOT_WAIT_S = 30.0  # How long a test waits for the snapshot to show what it expects.
POLL_S = 0.5
HTTP_TIMEOUT_S = 10.0
HAMMER_S = 5.0  # How long a hot key is written: longer than a sample interval.
STATUS_TIMEOUT_S = 60.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with pytest.MonkeyPatch.context() as environment:
        environment.setenv("DYNALAB_THROTTLING", "on")
        environment.setenv("DYNALAB_BURST_SECONDS", str(BURST_SECONDS))
        with LocalCluster(tmp_path_factory.mktemp("dashboard"), nodes=3, routers=1) as running:
            yield running


@pytest.fixture(scope="module")
def dynamodb(cluster: LocalCluster) -> Any:
    return dynamodb_client(cluster.router_url)


VICTIM_TABLE_ATTEMPTS = 10


def snapshot(cluster: LocalCluster) -> dict[str, Any]:
    with urllib.request.urlopen(f"{cluster.router_url}/admin/cluster", timeout=HTTP_TIMEOUT_S) as r:
        assert r.headers["Content-Type"].startswith("application/json")
        return dict(json.loads(r.read()))


def wait_for(cluster: LocalCluster, check: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """The first snapshot for which `check` holds, within SNAPSHOT_WAIT_S."""
    deadline = time.monotonic() + SNAPSHOT_WAIT_S
    while True:
        document = snapshot(cluster)
        if check(document):
            return document
        assert time.monotonic() < deadline, f"snapshot never matched: {json.dumps(document)[:3000]}"
        time.sleep(POLL_S)


def status(endpoint: str, *flags: str) -> subprocess.CompletedProcess[str]:
    """`dynalab status --endpoint endpoint`, on an 80-column terminal (issue 29)."""
    return subprocess.run(
        [sys.executable, "-m", "dynalab", "status", "--endpoint", endpoint, *flags],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=STATUS_TIMEOUT_S,
        env={**os.environ, "COLUMNS": "80"},
    )


def rows(output: str, first_cell: str) -> list[list[str]]:
    """The cells of each table row of `output` whose first cell is `first_cell`."""
    found = []
    for line in output.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("│┃").split("│")]
        if cells[0] == first_cell:
            found.append(cells)
    assert found, f"no row {first_cell!r} in:\n{output}"
    return found


def after(output: str, heading: str) -> str:
    """`output` from the first line that starts with `heading` on."""
    lines = output.splitlines()
    start = next((at for at, line in enumerate(lines) if line.startswith(heading)), None)
    assert start is not None, f"no {heading!r} in:\n{output}"
    return "\n".join(lines[start:])


def first_table(output: str) -> list[list[str]]:
    """The cells of each row of the first table in `output`."""
    lines = output.splitlines()
    start = next(at for at, line in enumerate(lines) if line.startswith("┡"))
    end = next(at for at in range(start, len(lines)) if lines[at].startswith("└"))
    return [
        [cell.strip() for cell in line.strip("│").split("│")] for line in lines[start + 1 : end]
    ]


def row(output: str, first_cell: str) -> list[str]:
    """The cells of the first table row of `output` whose first cell is `first_cell`."""
    return rows(output, first_cell)[0]


def table_of(document: dict[str, Any], name: str) -> dict[str, Any]:
    return next(t for t in document["tables"] if t["name"] == name)


def hammer(dynamodb: Any, table: str, key: str, seconds: float) -> int:
    """PutItems on one key for `seconds`, as fast as one client goes; how many were throttled."""
    throttled = 0
    deadline = time.monotonic() + seconds
    for i in itertools.count():
        if time.monotonic() >= deadline:
            return throttled
        try:
            dynamodb.put_item(TableName=table, Item={"pk": {"S": key}, "n": {"N": str(i)}})
        except ClientError as error:
            assert error.response["Error"]["Code"] == "ProvisionedThroughputExceededException"
            throttled += 1
    raise AssertionError("unreachable")


def test_nodes_and_partitions_with_sizes_cover_the_hash_space(cluster, dynamodb, table_name):
    name = create_active_table(dynamodb, table_name(), throughput=(1000, 1000))
    for i in range(30):
        dynamodb.put_item(TableName=name, Item={"pk": {"S": f"k{i}"}, "v": {"S": "x" * 100}})

    def counted_and_sampled(d: dict[str, Any]) -> bool:
        table = table_of(d, name)
        return table["item_count"] == 30 and all(p["throughput"] for p in table["partitions"])

    document = wait_for(cluster, counted_and_sampled)
    assert document["version"] == 1
    assert [(n["id"], n["address"], n["state"]) for n in document["nodes"]] == [
        (node.node_id, node.address, "up") for node in cluster.nodes
    ]
    assert sum(n["holds_catalog"] for n in document["nodes"]) == 1
    assert document["catalog"]["readable"] is True
    table = table_of(document, name)
    assert (table["status"], table["billing_mode"]) == ("ACTIVE", "PROVISIONED")
    assert table["provisioned"] == {"read": 1000, "write": 1000}
    partitions = table["partitions"]
    # The ranges tile the hash space, in order.
    assert partitions[0]["range"][0] == 0.0 and partitions[-1]["range"][1] == 1.0
    for left, right in itertools.pairwise(partitions):
        assert left["range"][1] == right["range"][0]
    assert {p["node"] for p in partitions} <= {node.node_id for node in cluster.nodes}
    assert all(p["node_state"] == "up" and p["state"] == "SERVING" for p in partitions)
    assert sum(p["item_count"] for p in partitions) == 30
    assert table["size_bytes"] == sum(p["size_bytes"] for p in partitions) > 30 * 100
    # Allowed units: each partition's share of the table's 1,000 write units.
    writes = [p["throughput"]["write"]["allowed_per_second"] for p in partitions]
    assert sum(writes) == pytest.approx(1000)


def test_a_hot_key_shows_consumed_against_allowed_units_and_throttling(
    cluster, dynamodb, table_name
):
    name = create_active_table(dynamodb, table_name(), throughput=(5, 5))
    # Counters count from a partition's first sample: wait for it, so every request is seen.
    wait_for(cluster, lambda d: all(p["throughput"] for p in table_of(d, name)["partitions"]))
    throttled = hammer(dynamodb, name, "hot", HAMMER_S)
    assert throttled > 0

    def all_throttles_counted(d: dict[str, Any]) -> bool:
        partitions = table_of(d, name)["partitions"]
        return sum(p["window"]["write_throttled_requests"] for p in partitions) == throttled

    document = wait_for(cluster, all_throttles_counted)
    partitions = table_of(document, name)["partitions"]
    hot = next(p for p in partitions if p["window"]["write_throttled_requests"] > 0)
    # The throttled requests were counted once, all by the hot key's partition.
    assert hot["window"]["write_throttled_requests"] == throttled
    assert hot["window"]["write_consumed_units"] >= 1
    history = hot["history"]
    assert len(history["at"]) == len(history["write_consumed"]) == len(history["write_allowed"])
    assert max(history["write_throttled"]) > 0
    assert hot["throughput"]["write"]["allowed_per_second"] == pytest.approx(
        5 / len(partitions), rel=0.01
    )

    # `dynalab status` shows the same: the table's throttled requests, the partition's too.
    shown = status(cluster.router_url)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    for node in cluster.nodes:
        assert row(shown.stdout, node.node_id)[1:3] == [node.address, "up"]
    # The table's figures under its name, then one row per partition in its Throughput table.
    figures = after(shown.stdout, f"Table {name}")
    assert re.search(r"status\s+ACTIVE\s+capacity\s+5 RCU / 5 WCU\n", figures), figures
    assert re.search(rf"throttled \(\d+ min\)\s+{throttled}\s", figures), figures
    partition_rows = first_table(after(figures, "Throughput ("))
    assert len(partition_rows) == len(partitions)
    assert sum(int(cells[-1]) for cells in partition_rows) == throttled


def test_global_indexes_and_ttl_are_shown(cluster, dynamodb, table_name):
    name = table_name()
    dynamodb.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "g", "AttributeType": "S"},
        ],
        BillingMode="PAY_PER_REQUEST",
        GlobalSecondaryIndexes=[
            {
                "IndexName": "by-g",
                "KeySchema": [{"AttributeName": "g", "KeyType": "HASH"}],
                "Projection": {"ProjectionType": "ALL"},
            }
        ],
    )
    wait_active(dynamodb, name)
    dynamodb.update_time_to_live(
        TableName=name, TimeToLiveSpecification={"Enabled": True, "AttributeName": "expires"}
    )
    expired = int(time.time()) - 60
    for i in range(5):
        dynamodb.put_item(
            TableName=name,
            Item={"pk": {"S": f"k{i}"}, "g": {"S": "a"}, "expires": {"N": str(expired)}},
        )

    def settled(d: dict[str, Any]) -> bool:
        table = table_of(d, name)
        return (
            table["ttl"] is not None
            and table["ttl"]["deleted_items"] == 5
            and all(c["records_behind"] == 0 for c in table["change_feed_consumers"])
            and table["indexes"][0]["item_count"] == 0
        )

    table = table_of(wait_for(cluster, settled), name)
    assert table["ttl"]["attribute"] == "expires" and table["ttl"]["enabled"] is True
    assert len(table["change_feed_consumers"]) >= 1
    (index,) = table["indexes"]
    assert (index["name"], index["kind"], index["status"]) == ("by-g", "global", "ACTIVE")
    assert index["partitions"] and index["partitions"][0]["range"][0] == 0.0


def test_transactions_are_counted_by_outcome_with_their_rates(cluster, dynamodb, table_name):
    name = create_active_table(dynamodb, table_name())
    for i in range(2):
        dynamodb.put_item(TableName=name, Item={"pk": {"S": f"acct{i}"}, "balance": {"N": "10"}})

    def transfer(amount: int) -> dict[str, Any]:
        step = {"TableName": name, "ConditionExpression": "balance >= :a"}
        return {
            "TransactItems": [
                {
                    "Update": {
                        **step,
                        "Key": {"pk": {"S": "acct0"}},
                        "UpdateExpression": "SET balance = balance - :a",
                        "ExpressionAttributeValues": {":a": {"N": str(amount)}},
                    }
                },
                {
                    "Update": {
                        "TableName": name,
                        "Key": {"pk": {"S": "acct1"}},
                        "UpdateExpression": "SET balance = balance + :a",
                        "ExpressionAttributeValues": {":a": {"N": str(amount)}},
                    }
                },
            ]
        }

    before = snapshot(cluster)["transactions"]
    for _ in range(3):
        dynamodb.transact_write_items(**transfer(1))
    with pytest.raises(ClientError) as refused:
        dynamodb.transact_write_items(**transfer(1000))
    assert refused.value.response["Error"]["Code"] == "TransactionCanceledException"

    def counted(d: dict[str, Any]) -> bool:
        txn = d["transactions"]
        return (
            txn["outcomes"].get("committed", 0) >= before["outcomes"].get("committed", 0) + 3
            and txn["outcomes"].get("cancelled", 0) >= before["outcomes"].get("cancelled", 0) + 1
            and sum(txn["history"]["committed"]) > 0
        )

    txn = wait_for(cluster, counted)["transactions"]
    assert txn["in_doubt"] == 0 and txn["oldest_in_doubt_seconds"] is None
    assert len(txn["history"]["at"]) == len(txn["history"]["cancelled"])
    shown = status(cluster.router_url)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert re.search(r"transactions: .*\d+ committed.* · \d+ conflicts · 0 in doubt", shown.stdout)


def test_a_paused_node_is_unreachable_until_it_resumes(cluster):
    # Not the catalog's node: a snapshot would wait on its catalog read.
    catalog = snapshot(cluster)["catalog"]["node"]
    paused = next(node for node in cluster.nodes if node.node_id != catalog)
    assert paused.pid is not None

    def state_of(d: dict[str, Any]) -> str:
        return next(n["state"] for n in d["nodes"] if n["id"] == paused.node_id)

    os.kill(paused.pid, signal.SIGSTOP)
    try:
        document = wait_for(cluster, lambda d: state_of(d) == "unreachable")
        assert next(n for n in document["nodes"] if n["id"] == paused.node_id)["error"]
    finally:
        os.kill(paused.pid, signal.SIGCONT)
    wait_for(cluster, lambda d: state_of(d) == "up")


def test_a_killed_node_is_unreachable_with_its_partitions(cluster, dynamodb, table_name):
    victim = cluster.nodes[-1]
    # The ring places each partition by its (random) id: make tables until one has a partition on
    # the victim, so that the dead node's partitions are there to show (here and in `status`).
    for _ in range(VICTIM_TABLE_ATTEMPTS):
        name = create_active_table(dynamodb, table_name())
        nodes = {p["node"] for p in table_of(snapshot(cluster), name)["partitions"]}
        if victim.node_id in nodes:
            break
    else:
        raise AssertionError(f"{VICTIM_TABLE_ATTEMPTS} tables had no partition on {victim.node_id}")
    victim.kill()
    document = wait_for(
        cluster,
        lambda d: any(
            n["id"] == victim.node_id and n["state"] == "unreachable" for n in d["nodes"]
        ),
    )
    dead = next(n for n in document["nodes"] if n["id"] == victim.node_id)
    assert dead["error"] and dead["last_seen"] is not None
    assert all(n["state"] == "up" for n in document["nodes"] if n["id"] != victim.node_id)
    for partition in table_of(document, name)["partitions"]:
        if partition["node"] == victim.node_id:
            assert partition["node_state"] == "unreachable"
            assert partition["size_bytes"] is None
        else:
            assert partition["node_state"] == "up"
            assert partition["size_bytes"] is not None


def test_status_shows_the_dead_node(cluster):
    victim = cluster.nodes[-1]
    assert not victim.is_running()  # killed by the test before
    shown = status(cluster.router_url)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert row(shown.stdout, victim.node_id)[2] == "unreachable"
    assert "(unreachable)" in shown.stdout  # its partitions
    # --json, for scripts: the router's snapshot itself, whatever the terminal's width.
    scripted = status(cluster.router_url, "--json")
    assert scripted.returncode == 0, scripted.stdout + scripted.stderr
    document = json.loads(scripted.stdout)
    states = {node["id"]: node["state"] for node in document["nodes"]}
    assert states[victim.node_id] == "unreachable"
    assert {node.node_id for node in cluster.nodes} == set(states)


def test_status_of_a_router_that_is_not_there():
    (port,) = free_ports(1)
    shown = status(f"http://127.0.0.1:{port}")
    assert shown.returncode == 1
    assert f"cannot reach http://127.0.0.1:{port}/admin/cluster" in shown.stdout


def test_dynalab_up_opens_its_dashboard_and_status_reads_it(tmp_path):
    # webbrowser runs $BROWSER with the URL for %s: a script that writes down what it was given.
    opener = tmp_path / "browser.sh"
    opener.write_text('#!/bin/sh\necho "$1" > "$(dirname "$0")/opened"\n')
    opener.chmod(0o755)
    (port,) = free_ports(1)
    output = tmp_path / "up.out"
    command = ["up", "--port", str(port), "--data-dir", str(tmp_path / "data"), "--open"]
    with output.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "dynalab", *command],
            cwd=PROJECT_ROOT,
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
            env={**os.environ, "BROWSER": f"{opener} %s"},
        )
    try:
        wait_for_endpoint(port, process, output)
        check_status_of_up(f"http://127.0.0.1:{port}", tmp_path)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            process.wait(EXIT_TIMEOUT_S)
    assert process.returncode == 0


def check_status_of_up(url: str, tmp_path) -> None:
    dashboard = f"{url}/dashboard"
    assert dashboard in (tmp_path / "up.out").read_text()  # the banner
    opened = tmp_path / "opened"
    deadline = time.monotonic() + SNAPSHOT_WAIT_S
    while not (opened.exists() and opened.read_text().strip()):
        assert time.monotonic() < deadline, "dynalab up --open did not open the dashboard"
        time.sleep(POLL_S)
    assert opened.read_text().strip() == dashboard
    shown = status(url)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    for node in ("node-1", "node-2", "node-3"):
        assert row(shown.stdout, node)[2] == "up"
    assert "no tables" in shown.stdout
    # The page and everything it loads come from the router (package data, no CDN).
    with urllib.request.urlopen(dashboard, timeout=HTTP_TIMEOUT_S) as page:
        html = page.read().decode()
    assert "<title>dynalab dashboard</title>" in html
    for asset in re.findall(r'(?:src|href)="([^"]+)"', html):
        assert asset.startswith("/dashboard/static/"), asset
        with urllib.request.urlopen(f"{url}{asset}", timeout=HTTP_TIMEOUT_S) as loaded:
            assert loaded.status == 200 and len(loaded.read()) > 0
