"""Global index partitions moved between the nodes of a real 3-node cluster with two routers
(`storagenode.move`, `storagenode.index_move`).

A client writes (puts, index key changes, projected-attribute changes, deletes) while the admin
endpoint moves the index's partitions from node to node, while the source of such a move is
killed with SIGKILL at a step (held there by DYNALAB_HOLD_AT=move:<step>) and restarted, and while
the target is killed at each of its steps (DYNALAB_HOLD_AT=move:target-<step>): the replicator
follows each partition to its new node, the index converges exactly to its table
(`dynalab.convergence`), and a Scan and a Query of the index through either router return each
entry once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from dynalab import convergence
from dynalab.cluster import LocalCluster
from storagenode.move import MOVE_TARGET_CRASH_STEPS
from tests.integration.conftest import dynamodb_client
from tests.integration.crash_points import KillAt, held_at, hold_environment, let_go
from tests.integration.test_gsi_faults import Writer, create_scores
from tests.integration.test_gsi_index_splits import index_entries, index_partitions
from tests.integration.test_move_faults import restart as restart_with
from tests.integration.test_moves import NODES, restart
from tests.integration.test_splits import admin

CONVERGE_TIMEOUT_S = 90.0
SETTLE_TIMEOUT_S = 30.0
WRITER_JOIN_S = 120.0
POLL_S = 0.5
HELD_WAIT_S = 60.0  # For a held source to reach its step, and writes to land meanwhile.
GAMES = 7  # Writer.burst writes games 0 to 6.


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with pytest.MonkeyPatch.context() as environment:
        environment.setenv("DYNALAB_THROTTLING", "off")
        with LocalCluster(tmp_path_factory.mktemp("index-moves"), nodes=3, routers=2) as running:
            yield running


class Background:
    """Writer bursts in a thread until stopped: the replicator applies while partitions move."""

    def __init__(self, writer: Writer, users: int) -> None:
        self.writer = writer
        self.users = users
        self.rounds = 0
        self.stop = threading.Event()
        self.failure: BaseException | None = None
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                self.rounds += 1
                self.writer.burst(0, self.users, self.rounds)
        except BaseException as error:  # Reported by `join`.
            self.failure = error

    def __enter__(self) -> Background:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join(timeout=WRITER_JOIN_S)
        assert not self.thread.is_alive(), "the writer did not stop"
        assert self.failure is None, self.failure


def move(cluster: LocalCluster, name: str, partition_id: str, node: str) -> tuple[int, Any]:
    return admin(cluster, f"/admin/tables/{name}/partitions/{partition_id}/move", {"Node": node})


def serving_index_partitions(cluster: LocalCluster, name: str) -> list[dict[str, Any]]:
    return [p for p in index_partitions(cluster, name, "ByGame") if p["state"] == "SERVING"]


def fullest_index_partition(cluster: LocalCluster, name: str) -> dict[str, Any]:
    """The serving index partition that holds the most bytes, once the replicator has applied
    entries to one: right after the writes every index partition can still be empty, and a move
    of an empty one never copies a page of items (so never reaches `target-items`)."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while True:
        partition = max(serving_index_partitions(cluster, name), key=lambda p: p["size_bytes"] or 0)
        if partition["size_bytes"]:
            return partition
        assert time.monotonic() < deadline, "no index partition holds an entry"
        time.sleep(POLL_S)


def check_through_both_routers(cluster: LocalCluster, name: str, history: Any) -> None:
    """The index converges to its table, and each router's Scan and Queries of it return
    every entry once."""
    client = dynamodb_client(cluster.router_url)
    result = convergence.wait_converged(client, name, "ByGame", CONVERGE_TIMEOUT_S, history)
    assert result.converged
    expected = None
    for url in cluster.router_urls:
        routed = dynamodb_client(url)
        entries = index_entries(routed, name, "ByGame")
        keys = [(e["Game"]["S"], e["Score"]["N"], e["UserId"]["S"]) for e in entries]
        assert len(keys) == len(set(keys)), f"{url}: a Scan of the index saw an entry twice"
        assert expected is None or sorted(keys) == expected, url
        expected = sorted(keys)
        queried = []
        for game in range(GAMES):
            request: dict[str, Any] = {
                "TableName": name,
                "IndexName": "ByGame",
                "KeyConditionExpression": "Game = :g",
                "ExpressionAttributeValues": {":g": {"S": f"game-{game}"}},
                "Limit": 11,
            }
            while True:
                page = routed.query(**request)
                queried.extend(
                    (e["Game"]["S"], e["Score"]["N"], e["UserId"]["S"]) for e in page["Items"]
                )
                if "LastEvaluatedKey" not in page:
                    break
                request["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        assert sorted(queried) == expected, f"{url}: the Queries saw other entries"


def test_index_partitions_move_under_writes_and_the_index_converges(
    cluster: LocalCluster,
) -> None:
    client = dynamodb_client(cluster.router_url)
    name = "index_moves_under_writes"
    create_scores(client, name)
    writer = Writer(dynamodb_client(cluster.router_urls[1]), name)
    writer.burst(0, 120, 0)
    moved: list[dict[str, Any]] = []
    with Background(writer, 120):
        for _ in range(2):
            for partition in serving_index_partitions(cluster, name):
                target = NODES[(NODES.index(partition["node"]) + 1) % len(NODES)]
                status, reply = move(cluster, name, partition["id"], target)
                assert status == 200, reply
                assert reply["partition"]["node"] == target, reply
                assert reply["partition"]["epoch"] == partition["epoch"] + 1, reply
                moved.append(reply)
    assert len(moved) >= 8
    # Entries the replicator wrote while partitions were copied reached the targets by the
    # catch-up (the index partitions log while they move).
    assert sum(reply["records"] for reply in moved) > 0, moved
    after = {p["id"]: p for p in serving_index_partitions(cluster, name)}
    for reply in moved[-4:]:
        assert after[reply["partition"]["id"]]["node"] == reply["partition"]["node"]
    check_through_both_routers(cluster, name, writer.history)


def settled(cluster: LocalCluster, name: str, partition_id: str) -> dict[str, Any]:
    """The index partition once a Scan of the index is served again."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    client = dynamodb_client(cluster.router_url)
    while True:
        try:
            index_entries(client, name, "ByGame")
            return next(
                p for p in serving_index_partitions(cluster, name) if p["id"] == partition_id
            )
        except ClientError:
            assert time.monotonic() < deadline, "the index partition was not served again"
            time.sleep(POLL_S)


@pytest.mark.parametrize("step", ["copied", "fenced", "drained", "switched"])
def test_a_source_killed_mid_index_move_rolls_back_or_finishes_and_the_index_converges(
    cluster: LocalCluster, tmp_path: Path, step: str
) -> None:
    client = dynamodb_client(cluster.router_url)
    name = f"index_move_killed_{step}"
    create_scores(client, name)
    writer = Writer(dynamodb_client(cluster.router_urls[1]), name)
    writer.burst(0, 80, 0)
    partition = fullest_index_partition(cluster, name)
    source = partition["node"]
    target = next(n for n in NODES if n != source)
    restart(cluster, source, hold_environment(tmp_path, step))
    try:
        with Background(writer, 80):
            with KillAt(cluster.node(source), tmp_path, step) as killer:
                status, reply = move(cluster, name, partition["id"], target)
            assert killer.killed, f"the source never reached {step}"
            assert status != 200, reply  # The source died before it answered.
            restart(cluster, source)
            current = settled(cluster, name, partition["id"])
    finally:
        if not cluster.node(source).is_running():
            restart(cluster, source)
    expected = target if step == "switched" else source
    assert current["node"] == expected, current
    assert current["epoch"] == partition["epoch"] + (step == "switched"), current
    check_through_both_routers(cluster, name, writer.history)
    # A move asked again afterwards goes through (a rolled-back one from a fresh copy).
    other = next(n for n in NODES if n != current["node"])
    status, reply = move(cluster, name, partition["id"], other)
    assert status == 200, reply
    check_through_both_routers(cluster, name, writer.history)


def wait_for(condition: Any, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


@pytest.mark.parametrize("step", MOVE_TARGET_CRASH_STEPS)
def test_a_target_killed_at_each_step_of_an_index_move_and_the_index_converges(
    cluster: LocalCluster, tmp_path: Path, step: str
) -> None:
    """The target is killed once a step of the index partition's move has committed, before it
    answers (DYNALAB_HOLD_AT=move:target-<step>); past the copy the source is held there until index
    writes have landed on it, so the final catch-up applies them."""
    client = dynamodb_client(cluster.router_url)
    name = f"index_move_target_{step.replace('-', '_')}"
    create_scores(client, name)
    writer = Writer(dynamodb_client(cluster.router_urls[1]), name)
    writer.burst(0, 80, 0)
    partition = fullest_index_partition(cluster, name)
    source = partition["node"]
    target = next(n for n in NODES if n != source)
    restart_with(cluster, target, **hold_environment(tmp_path, step))
    hold = step not in ("target-create", "target-items")
    if hold:
        restart_with(cluster, source, **hold_environment(tmp_path, "copied"))
    try:
        with Background(writer, 80):
            asked: dict[str, Any] = {}
            asking = threading.Thread(
                target=lambda: asked.update(reply=move(cluster, name, partition["id"], target))
            )
            # Held once that step has committed on it, before it answers, the target is killed.
            with KillAt(cluster.node(target), tmp_path, step):
                asking.start()
                if hold:
                    held_at(tmp_path, "copied")
                    written = len(writer.history)
                    wait_for(
                        lambda: len(writer.history) > written + 20,
                        HELD_WAIT_S,
                        "no writes while the move was held",
                    )
                    time.sleep(POLL_S)  # The replicator applies them on the held source.
                    let_go(tmp_path, "copied")
                asking.join(timeout=WRITER_JOIN_S)
            assert not asking.is_alive()
            wait_for(
                lambda: not cluster.node(target).is_running(),
                SETTLE_TIMEOUT_S,
                f"the target was not killed at {step}",
            )
            status, reply = asked["reply"]
            # Killed once it had activated, it serves; before, the source rolled the move back.
            assert (status == 200) == (step == "target-activate"), (status, reply)
            restart_with(cluster, target)
            current = settled(cluster, name, partition["id"])
    finally:
        restart_with(cluster, source)
        if not cluster.node(target).is_running():
            restart_with(cluster, target)
    expected = target if step == "target-activate" else source
    assert current["node"] == expected, current
    assert current["epoch"] == partition["epoch"] + (expected == target), current
    check_through_both_routers(cluster, name, writer.history)
