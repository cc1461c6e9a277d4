"""Partitions moved between the nodes of a real 3-node cluster (`storagenode.move`).

Clients write, read, query, scan and increment counters (conditional ADD) through both routers
while the nodes split partitions past 4 KB and a client moves serving partitions to other nodes
through the admin endpoint; afterwards every acknowledged write is readable, a scan sees every
item exactly once, and every counter equals its acknowledged increments (give or take those whose
answer was an error). A source killed with SIGKILL at a step of a move (held there by
DYNALAB_HOLD_AT) and restarted rolls the move back or finishes it, as the catalog says; so does
a target killed mid-move. A global index on a moved table converges (`dynalab.convergence`), and
a stream on one still gives every change exactly once (`dynalab.checkers.check_stream`).
"""

from __future__ import annotations

import random
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from core.placement import HashRing
from dynalab import convergence
from dynalab.checkers import check_stream
from dynalab.cluster import LocalCluster
from tests.integration.conftest import DUMMY_CREDENTIALS, REGION, dynamodb_client
from tests.integration.crash_points import HOLD_ENV, KillAt, hold_environment
from tests.integration.test_gsi_faults import Writer
from tests.integration.test_splits import Load, admin, create, key_of, scan_all
from tests.integration.test_streams import create_streamed, stream_arn_of
from tests.integration.test_streams_splits import ParentFirstReader

SPLIT_BYTES = 4096
MOVES_MIN = 8  # Moves that must succeed while the load runs.
# How long restarted nodes may take to settle a move (they check each second).
SETTLE_SECONDS = 30.0
CONVERGE_TIMEOUT_S = 90.0
DRAIN_SECONDS_MAX = 90.0
NODES = ("node-1", "node-2", "node-3")
PLACEMENT_WAIT_SECONDS = 90.0  # Splits, then one placement move a second per router.


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with pytest.MonkeyPatch.context() as environment:
        environment.setenv("DYNALAB_THROTTLING", "off")
        with LocalCluster(
            tmp_path_factory.mktemp("moves"), nodes=3, routers=2, split_bytes=SPLIT_BYTES
        ) as running:
            yield running


def serving(cluster: LocalCluster, name: str) -> list[dict[str, Any]]:
    status, listing = admin(cluster, f"/admin/tables/{name}/partitions")
    assert status == 200, listing
    return [p for p in listing["partitions"] if p["state"] == "SERVING"]


def move(cluster: LocalCluster, name: str, partition: dict[str, Any], node: str) -> tuple[int, Any]:
    return admin(cluster, f"/admin/tables/{name}/partitions/{partition['id']}/move", {"Node": node})


class Mover:
    """A client thread moving a random serving partition to another node, again and again."""

    def __init__(self, cluster: LocalCluster, name: str, seed: int) -> None:
        self.cluster = cluster
        self.name = name
        self.rng = random.Random(seed)
        self.moved: list[dict[str, Any]] = []
        self.refused: list[Any] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        while not self.stop.is_set():
            partition = self.rng.choice(serving(self.cluster, self.name))
            target = self.rng.choice([n for n in NODES if n != partition["node"]])
            status, reply = move(self.cluster, self.name, partition, target)
            if status == 200:
                self.moved.append(reply)
            else:
                self.refused.append(reply)  # Split or moved meanwhile: the catalog moved on.
            time.sleep(0.1)


def counters_match(stored: dict[tuple[str, str], Any], load: Load) -> None:
    for name, count in load.increments.items():
        value = int(stored[name, "0"]["hits"]["N"])
        unknown = load.unknown.get(name, 0)
        assert count <= value <= count + unknown, (name, value, count, unknown)


def test_sustained_load_runs_through_splits_and_moves(cluster: LocalCluster) -> None:
    client = dynamodb_client(cluster.router_url)
    create(client, "Moving")
    load = Load(cluster, "Moving")
    mover = Mover(cluster, "Moving", seed=12)
    mover.thread.start()
    try:
        load.run()
        deadline = time.monotonic() + 120
        while len(mover.moved) < MOVES_MIN:
            assert time.monotonic() < deadline, (len(mover.moved), mover.refused[:3])
            time.sleep(0.2)
    finally:
        mover.stop.set()
        mover.thread.join(timeout=120)
    assert not mover.thread.is_alive()
    for reply in mover.moved:
        assert reply["partition"]["node"] != reply["from"], reply
    # A move may be refused (the partition split or moved before its node got to it), never
    # fail on a bug.
    for reply in mover.refused:
        assert reply.get("__type") != "InternalServerError", reply
    found = scan_all(client, "Moving")
    stored = {key_of(entry): entry for entry in found}
    assert len(stored) == len(found), "an item was scanned twice"
    for key, entry in load.acknowledged.items():
        assert stored.get(key) == entry, f"acknowledged write {key} lost"
    counters_match(stored, load)
    assert load.reads > 0
    nodes = {p["node"] for p in serving(cluster, "Moving")}
    assert len(nodes) > 1
    with urllib.request.urlopen(cluster.router_url + "/metrics", timeout=10) as reply:
        metrics = reply.read().decode()
    moves = sum(
        float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith("dynalab_moves_total{")
    )
    assert moves >= len(mover.moved), metrics
    assert "dynalab_move_seconds_bucket" in metrics


def fill(client: Any, name: str, count: int) -> list[dict[str, Any]]:
    entries = [{"pk": {"S": f"k{n % 13}"}, "sk": {"N": str(n)}} for n in range(count)]
    for entry in entries:
        client.put_item(TableName=name, Item=entry)
    return entries


def restart(cluster: LocalCluster, node_id: str, environment: dict[str, str] | None = None) -> None:
    """SIGKILL a node (if it still runs) and start it again, held at the crash points
    `environment` names (`tests.integration.crash_points.hold_environment`), or at none."""
    node = cluster.node(node_id)
    node.kill()
    with pytest.MonkeyPatch.context() as patch:
        for name in HOLD_ENV:
            if environment is not None and name in environment:
                patch.setenv(name, environment[name])
            else:
                patch.delenv(name, raising=False)
        node.start()


def settled(cluster: LocalCluster, name: str, partition_id: str) -> dict[str, Any]:
    """The partition once exactly its catalog node holds it, serving (read from the nodes'
    own table stats through the listing: a moving or incoming copy is not listed as held)."""
    deadline = time.monotonic() + SETTLE_SECONDS
    while True:
        status, listing = admin(cluster, f"/admin/tables/{name}/partitions")
        if status == 503:
            # The catalog's node was the one restarted: table reads answer 503 until it is
            # back, as they do while it is down.
            assert time.monotonic() < deadline, listing
            time.sleep(0.5)
            continue
        assert status == 200, listing
        current = next(
            p for p in listing["partitions"] if p["state"] == "SERVING" and p["id"] == partition_id
        )
        client = dynamodb_client(cluster.router_url)
        try:
            client.get_item(
                TableName=name, Key={"pk": {"S": "k0"}, "sk": {"N": "0"}}, ConsistentRead=True
            )
            scan_all(client, name)
            return current
        except ClientError:
            assert time.monotonic() < deadline, "the partition was not served again"
            time.sleep(0.5)


@pytest.mark.parametrize("step", ["copied", "fenced", "drained", "switched"])
def test_a_source_killed_mid_move_rolls_back_or_finishes_when_it_restarts(
    cluster: LocalCluster, tmp_path: Path, step: str
) -> None:
    client = dynamodb_client(cluster.router_url)
    name = f"Killed_{step}"
    create(client, name)
    entries = fill(client, name, 120)
    partition = max(serving(cluster, name), key=lambda p: p["size_bytes"] or 0)
    source = partition["node"]
    target = next(n for n in NODES if n != source)
    restart(cluster, source, hold_environment(tmp_path, step))
    try:
        with KillAt(cluster.node(source), tmp_path, step) as killer:
            status, reply = move(cluster, name, partition, target)
        assert killer.killed, f"the source never reached {step}"
        assert status != 200, reply  # The source died before it answered.
    finally:
        restart(cluster, source)
    current = settled(cluster, name, partition["id"])
    expected = target if step == "switched" else source
    assert current["node"] == expected, current
    assert current["epoch"] == partition["epoch"] + (step == "switched"), current
    client.update_item(
        TableName=name,
        Key={"pk": {"S": "counter"}, "sk": {"N": "0"}},
        UpdateExpression="ADD hits :one",
        ExpressionAttributeValues={":one": {"N": "1"}},
    )
    found = scan_all(client, name)
    assert sorted(map(key_of, found)) == sorted(
        map(key_of, [*entries, {"pk": {"S": "counter"}, "sk": {"N": "0"}}])
    )
    # A move asked again afterwards goes through (a rolled-back one from a fresh copy).
    again = next(p for p in serving(cluster, name) if p["id"] == partition["id"])
    other = next(n for n in NODES if n != again["node"])
    status, reply = move(cluster, name, again, other)
    assert status == 200, reply
    assert len(scan_all(client, name)) == len(entries) + 1


def test_a_target_killed_mid_move_loses_nothing(cluster: LocalCluster) -> None:
    client = dynamodb_client(cluster.router_url)
    name = "TargetKilled"
    create(client, name)
    entries = fill(client, name, 300)
    partition = max(serving(cluster, name), key=lambda p: p["size_bytes"] or 0)
    target = next(n for n in NODES if n != partition["node"])
    killer = threading.Timer(0.05, cluster.node(target).kill)
    killer.start()
    try:
        status, reply = move(cluster, name, partition, target)
    finally:
        killer.join(timeout=10)
        restart(cluster, target)
    current = settled(cluster, name, partition["id"])
    assert current["node"] == (target if status == 200 else partition["node"]), (status, reply)
    found = scan_all(client, name)
    assert sorted(map(key_of, found)) == sorted(map(key_of, entries))


def test_a_global_index_and_a_stream_follow_moved_partitions(cluster: LocalCluster) -> None:
    client = dynamodb_client(cluster.router_url)
    session = boto3.session.Session(region_name=REGION, **DUMMY_CREDENTIALS)
    streams: Any = session.client("dynamodbstreams", endpoint_url=cluster.router_url)
    indexed = "MovedIndex"
    client.create_table(
        TableName=indexed,
        KeySchema=[{"AttributeName": "UserId", "KeyType": "HASH"}],
        AttributeDefinitions=[
            {"AttributeName": "UserId", "AttributeType": "S"},
            {"AttributeName": "Game", "AttributeType": "S"},
            {"AttributeName": "Score", "AttributeType": "N"},
        ],
        GlobalSecondaryIndexes=[
            {
                "IndexName": "ByGame",
                "KeySchema": [
                    {"AttributeName": "Game", "KeyType": "HASH"},
                    {"AttributeName": "Score", "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "ALL"},
            }
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    streamed = "MovedStream"
    create_streamed(client, streamed, "NEW_IMAGE")
    client.get_waiter("table_exists").wait(TableName=indexed)
    arn = stream_arn_of(client, streamed)
    writer = Writer(client, indexed)
    acknowledged: dict[str, list[int]] = {}
    reader = ParentFirstReader(streams, arn)
    moved = 0
    for round_number in range(3):
        for user in range(60):
            number = round_number * 60 + user
            writer.put(user, number % 5, number, round_number)
            key = f"k{user:03d}"
            client.put_item(TableName=streamed, Item={"pk": {"S": key}, "n": {"N": str(number)}})
            acknowledged.setdefault(key, []).append(number)
        reader.poll()
        for name in (indexed, streamed):
            for partition in serving(cluster, name):
                target = NODES[(NODES.index(partition["node"]) + 1) % len(NODES)]
                status, reply = move(cluster, name, partition, target)
                if status == 200:
                    moved += 1
                else:
                    # Split past 4 KB (or moved by a router's placement check) meanwhile.
                    assert status in (400, 404), reply
    result = convergence.wait_converged(
        client, indexed, "ByGame", CONVERGE_TIMEOUT_S, writer.history
    )
    assert result.converged
    deadline = time.monotonic() + DRAIN_SECONDS_MAX
    while reader.poll() or sum(len(v) for v in reader.seen.values()) < 180:
        assert time.monotonic() < deadline, "the stream reader never caught up"
        time.sleep(0.1)
    assert check_stream(acknowledged, reader.seen) == []
    assert moved >= 8


def test_split_children_move_to_the_node_the_ring_places_them_on(cluster: LocalCluster) -> None:
    client = dynamodb_client(cluster.router_url)
    create(client, "Placed")
    entries = [
        {"pk": {"S": f"p{n % 40}"}, "sk": {"N": str(n)}, "pad": {"S": "p" * 80}} for n in range(400)
    ]
    for entry in entries:
        client.put_item(TableName="Placed", Item=entry)
    ring = HashRing(NODES)
    deadline = time.monotonic() + PLACEMENT_WAIT_SECONDS
    while True:
        status, listing = admin(cluster, "/admin/tables/Placed/partitions")
        assert status == 200, listing
        epochs = {p["id"]: p["epoch"] for p in listing["partitions"]}
        children = [
            p for p in listing["partitions"] if p["state"] == "SERVING" and p["parent"] is not None
        ]
        unmoved = [p for p in children if p["epoch"] == epochs.get(p["parent"], -2) + 1]
        misplaced = [p for p in unmoved if p["node"] != ring.owner(p["id"])]
        sized = all(
            p["size_bytes"] is not None and p["size_bytes"] <= SPLIT_BYTES for p in children
        )
        if children and sized and not misplaced:
            break
        assert time.monotonic() < deadline, misplaced
        time.sleep(0.5)
    moved = [p for p in children if p["epoch"] == epochs.get(p["parent"], -2) + 2]
    assert moved, "no split child was off its ring owner (or none was moved)"
    assert all(p["node"] == ring.owner(p["id"]) for p in moved)
    found = scan_all(client, "Placed")
    assert sorted(map(key_of, found)) == sorted(map(key_of, entries))
