"""The target and the router of a move killed with SIGKILL at each step, on a real 3-node cluster.

Clients put new items, increment counters (conditional ADD) and scan through both routers while a
partition moves. A target started with DYNALAB_HOLD_AT=move:target-<step> holds once that step
of the move has committed on it, before it answers, and the test kills it there with SIGKILL; a
source started with DYNALAB_HOLD_AT=move:<step> waits at that step of the move (a crash point of
the move machine's driver) until the test lets it go, which is
when the test kills the router that asked for the move. After the restart: every acknowledged
write is readable, a scan sees every item once and nothing nobody wrote, and every counter
equals its acknowledged increments (give or take those whose answer was an error). A move whose
target died before the catalog switch rolls back; one whose router died finishes, since a router
takes no part in a move once it has asked for it. A settings change held between the drain and
the switch (a TTL enabled) reaches the target too.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import BotoCoreError, ClientError

from dynalab.cluster import LocalCluster
from storagenode.move import MOVE_CRASH_STEPS, MOVE_TARGET_CRASH_STEPS
from tests.integration.conftest import dynamodb_client
from tests.integration.crash_points import HOLD_ENV, KillAt, held_at, hold_environment, let_go
from tests.integration.test_moves import NODES, fill, move, serving
from tests.integration.test_splits import admin, create, key_of, scan_all

COUNTERS = 3
LOAD_SECONDS = 0.5  # Load before the move is asked for, and after the restart.
HELD_WAIT_SECONDS = 60.0  # For the writes a held move waits for.
DEAD_WAIT_SECONDS = 30.0  # For a target to be killed once the move is asked for.
SETTLE_SECONDS = 30.0  # For the partition to be served by the node the catalog names.
THREAD_JOIN_SECONDS = 120.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with pytest.MonkeyPatch.context() as environment:
        environment.setenv("DYNALAB_THROTTLING", "off")
        environment.setenv("DYNALAB_MOVE_SPLIT_CHILDREN", "off")
        with LocalCluster(tmp_path_factory.mktemp("move-faults"), nodes=3, routers=2) as running:
            yield running


def restart(cluster: LocalCluster, node_id: str, **environment: str) -> None:
    """SIGKILL a node (if it still runs) and start it again with `environment` for its crash
    points (`tests.integration.crash_points.hold_environment`)."""
    node = cluster.node(node_id)
    node.kill()
    with pytest.MonkeyPatch.context() as patch:
        for name in HOLD_ENV:
            if name in environment:
                patch.setenv(name, environment[name])
            else:
                patch.delenv(name, raising=False)
        node.start()


def wait_for(condition: Any, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


class Workload:
    """Client threads through both routers until stopped: puts of new items, conditional ADDs
    of counters, and scans; what was acknowledged, and what failed (its outcome unknown)."""

    def __init__(self, cluster: LocalCluster, name: str, base: list[dict[str, Any]]) -> None:
        self.cluster = cluster
        self.name = name
        self.base = base
        self.acknowledged: dict[tuple[str, str], dict[str, Any]] = {}
        self.failed: set[tuple[str, str]] = set()
        self.increments = [0] * COUNTERS
        self.unknown = [0] * COUNTERS
        self.scans = 0
        self.problems: list[str] = []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.threads = [
            threading.Thread(target=work, args=(router,), daemon=True)
            for work, router in ((self.writer, 0), (self.writer, 1), (self.counter, 0))
        ]
        self.threads.append(threading.Thread(target=self.scanner, args=(1,), daemon=True))

    def __enter__(self) -> Workload:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=THREAD_JOIN_SECONDS)
        assert not any(thread.is_alive() for thread in self.threads), "a client did not stop"

    def client(self, router: int) -> Any:
        return dynamodb_client(self.cluster.router_urls[router])

    def writer(self, router: int) -> None:
        client = self.client(router)
        count = 0
        while not self.stop.is_set():
            count += 1
            entry = {"pk": {"S": f"w{router}-{count % 11}"}, "sk": {"N": str(count)}}
            try:
                client.put_item(TableName=self.name, Item=entry)
            except (ClientError, BotoCoreError):
                with self.lock:
                    self.failed.add(key_of(entry))
                continue
            with self.lock:
                self.acknowledged[key_of(entry)] = entry

    def counter(self, router: int) -> None:
        client = self.client(router)
        count = 0
        while not self.stop.is_set():
            number = count % COUNTERS
            count += 1
            try:
                client.update_item(
                    TableName=self.name,
                    Key={"pk": {"S": "counter"}, "sk": {"N": str(number)}},
                    UpdateExpression="ADD hits :one",
                    ConditionExpression="attribute_not_exists(pk) OR hits < :big",
                    ExpressionAttributeValues={":one": {"N": "1"}, ":big": {"N": "1000000"}},
                )
            except (ClientError, BotoCoreError):
                self.unknown[number] += 1
                continue
            self.increments[number] += 1

    def scanner(self, router: int) -> None:
        client = self.client(router)
        while not self.stop.is_set():
            with self.lock:
                before = {*map(key_of, self.base), *self.acknowledged}
            try:
                keys = [key_of(entry) for entry in scan_all(client, self.name)]
            except (ClientError, BotoCoreError):
                continue  # A page refused past the router's retries: a client retries it.
            if len(keys) != len(set(keys)):
                self.problems.append("a scan saw an item twice")
            if not before <= set(keys):
                self.problems.append(f"a scan missed {sorted(before - set(keys))[:3]}")
            self.scans += 1

    def check(self) -> None:
        """The guarantees, read through the first router once the load has stopped."""
        assert self.problems == []
        assert self.scans > 0 and sum(self.increments) > 0 and self.acknowledged
        client = self.client(0)
        found = scan_all(client, self.name)
        stored = {key_of(entry): entry for entry in found}
        assert len(stored) == len(found), "an item was scanned twice"
        for key, entry in self.acknowledged.items():
            assert stored.get(key) == entry, f"acknowledged write {key} lost"
        for entry in self.base:
            assert key_of(entry) in stored, f"{key_of(entry)} lost"
        written = {*map(key_of, self.base), *self.acknowledged, *self.failed}
        items = {key for key in stored if key[0] != "counter"}
        assert items <= written, f"items nobody wrote: {sorted(items - written)[:3]}"
        for number in range(COUNTERS):
            got = client.get_item(
                TableName=self.name,
                Key={"pk": {"S": "counter"}, "sk": {"N": str(number)}},
                ConsistentRead=True,
            )
            value = int(got.get("Item", {}).get("hits", {"N": "0"})["N"])
            acked, unknown = self.increments[number], self.unknown[number]
            assert acked <= value <= acked + unknown, (number, value, acked, unknown)


def served_by(cluster: LocalCluster, name: str, partition_id: str, node: str) -> dict[str, Any]:
    """The partition once the catalog names `node` for it and its node serves it."""
    client = dynamodb_client(cluster.router_url)
    deadline = time.monotonic() + SETTLE_SECONDS
    while True:
        current = next(p for p in serving(cluster, name) if p["id"] == partition_id)
        try:
            scan_all(client, name)
            if current["node"] == node:
                return current
        except (ClientError, BotoCoreError):
            pass
        assert time.monotonic() < deadline, (current, node)
        time.sleep(0.2)


def moved_one(cluster: LocalCluster, name: str) -> tuple[dict[str, Any], str, str]:
    """The table's largest partition, its node and the next node after it."""
    partition = max(serving(cluster, name), key=lambda p: p["size_bytes"] or 0)
    source = partition["node"]
    return partition, source, NODES[(NODES.index(source) + 1) % len(NODES)]


class AskedMove:
    """A move asked for through the first router in a thread of its own (its source may be held
    at a step): the admin endpoint's (status, reply), or the error of a router that died."""

    def __init__(self, cluster: LocalCluster, name: str, partition: dict[str, Any], target: str):
        self.reply: tuple[int, Any] | None = None
        self.error: OSError | None = None
        self.thread = threading.Thread(target=self.ask, args=(cluster, name, partition, target))
        self.thread.start()

    def ask(self, cluster: LocalCluster, name: str, partition: dict[str, Any], target: str) -> None:
        try:
            self.reply = move(cluster, name, partition, target)
        except OSError as error:  # The router died before it answered.
            self.error = error

    def answer(self) -> tuple[int, Any] | None:
        """The reply once the thread has ended (None if the router died)."""
        self.thread.join(timeout=THREAD_JOIN_SECONDS)
        assert not self.thread.is_alive(), "the move was never answered"
        return self.reply


@pytest.mark.parametrize("step", MOVE_TARGET_CRASH_STEPS)
def test_a_target_killed_at_each_step_loses_nothing(
    cluster: LocalCluster, tmp_path: Path, step: str
) -> None:
    client = dynamodb_client(cluster.router_url)
    name = f"Target_{step.replace('-', '_')}"
    create(client, name)
    base = fill(client, name, 150)
    partition, source, target = moved_one(cluster, name)
    restart(cluster, target, **hold_environment(tmp_path, step))
    # Past the copy, the source holds the move once it has copied, so writes land before the
    # fence: records the target applies ("apply") in the final catch-up.
    hold = step not in ("target-create", "target-items")
    if hold:
        restart(cluster, source, **hold_environment(tmp_path, "copied"))
    try:
        with Workload(cluster, name, base) as load:
            time.sleep(LOAD_SECONDS)
            # Held once that step has committed on it, before it answers, the target is killed.
            with KillAt(cluster.node(target), tmp_path, step):
                asked = AskedMove(cluster, name, partition, target)
                if hold:
                    held_at(tmp_path, "copied")
                    written = len(load.acknowledged)
                    wait_for(
                        lambda: len(load.acknowledged) > written + 5,
                        HELD_WAIT_SECONDS,
                        "no writes while the move was held",
                    )
                    let_go(tmp_path, "copied")
                answer = asked.answer()
            wait_for(
                lambda: not cluster.node(target).is_running(),
                DEAD_WAIT_SECONDS,
                f"the target was not killed at {step}",
            )
            assert answer is not None
            status, reply = answer
            # Killed once it had activated, it serves; before, the source rolled the move back.
            assert (status == 200) == (step == "target-activate"), (status, reply)
            restart(cluster, target)
            if step != "target-activate":
                # Rolled back without reaching the target: its copy waits to be dropped as
                # abandoned, and the listing shows it.
                status, listing = admin(cluster, f"/admin/tables/{name}/partitions")
                assert status == 200, listing
                listed = next(p for p in listing["partitions"] if p["id"] == partition["id"])
                assert listed["move"]["state"] == "INCOMING", listed
                assert listed["move"]["incoming"]["node"] == target, listed
            time.sleep(LOAD_SECONDS)
    finally:
        restart(cluster, source)
        if not cluster.node(target).is_running():
            restart(cluster, target)
    expected = target if step == "target-activate" else source
    current = served_by(cluster, name, partition["id"], expected)
    assert current["epoch"] == partition["epoch"] + (expected == target), current
    load.check()


@pytest.mark.parametrize("step", MOVE_CRASH_STEPS)
def test_the_router_that_asked_for_a_move_killed_at_each_step(
    cluster: LocalCluster, tmp_path: Path, step: str
) -> None:
    client = dynamodb_client(cluster.router_url)
    name = f"Router_{step}"
    create(client, name)
    base = fill(client, name, 150)
    partition, source, target = moved_one(cluster, name)
    restart(cluster, source, **hold_environment(tmp_path, step))
    router = cluster.routers[0]
    try:
        with Workload(cluster, name, base) as load:
            time.sleep(LOAD_SECONDS)
            asked = AskedMove(cluster, name, partition, target)
            held_at(tmp_path, step)
            router.kill()
            let_go(tmp_path, step)
            assert asked.answer() is None and asked.error is not None, asked.reply
            router.start()
            time.sleep(LOAD_SECONDS)
    finally:
        restart(cluster, source)
        if not router.is_running():
            router.start()
    # A router takes no part in a move once it has asked: the source finishes it.
    current = served_by(cluster, name, partition["id"], target)
    assert current["epoch"] == partition["epoch"] + 1, current
    load.check()


def test_a_ttl_enabled_while_a_move_is_held_after_its_drain_reaches_the_target(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    client = dynamodb_client(cluster.router_url)
    name = "HeldSettings"
    # One partition: the target holds nothing else of the table, so the push reaches only the
    # source (a node applies a push to every partition of the table it holds, a copy included).
    client.create_table(
        TableName=name,
        KeySchema=[
            {"AttributeName": "pk", "KeyType": "HASH"},
            {"AttributeName": "sk", "KeyType": "RANGE"},
        ],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "N"},
        ],
        ProvisionedThroughput={"ReadCapacityUnits": 5, "WriteCapacityUnits": 5},
    )
    fill(client, name, 40)
    [partition] = serving(cluster, name)
    source = partition["node"]
    target = NODES[(NODES.index(source) + 1) % len(NODES)]
    restart(cluster, source, **hold_environment(tmp_path, "drained"))
    try:
        asked = AskedMove(cluster, name, partition, target)
        held_at(tmp_path, "drained")
        # Pushed to the source, which has drained already; recorded before the switch.
        client.update_time_to_live(
            TableName=name,
            TimeToLiveSpecification={"Enabled": True, "AttributeName": "expires"},
        )
        let_go(tmp_path, "drained")
        assert asked.answer() is not None and asked.reply[0] == 200, asked.reply
    finally:
        restart(cluster, source)
    served_by(cluster, name, partition["id"], target)
    # The target's sweeper deletes them only if its copy took the setting.
    expired = str(int(time.time()) - 100)
    for number in range(20):
        client.put_item(
            TableName=name,
            Item={"pk": {"S": f"x{number}"}, "sk": {"N": "0"}, "expires": {"N": expired}},
        )
    wait_for(
        lambda: not [e for e in scan_all(client, name) if "expires" in e],
        SETTLE_SECONDS,
        "expired items stayed: the moved partition does not sweep",
    )


@pytest.mark.parametrize("step", ["copied", "fenced"])
def test_the_partitions_listing_shows_a_move_while_it_runs(
    cluster: LocalCluster, tmp_path: Path, step: str
) -> None:
    client = dynamodb_client(cluster.router_url)
    name = f"Listed_{step}"
    create(client, name)
    fill(client, name, 60)
    partition, source, target = moved_one(cluster, name)
    assert partition["move"] is None, partition
    restart(cluster, source, **hold_environment(tmp_path, step))
    try:
        asked = AskedMove(cluster, name, partition, target)
        held_at(tmp_path, step)
        status, listing = admin(cluster, f"/admin/tables/{name}/partitions")
        assert status == 200, listing
        listed = next(p for p in listing["partitions"] if p["id"] == partition["id"])
        assert listed["node"] == source and listed["state"] == "SERVING", listed
        copy = listed["move"].pop("incoming")
        assert listed["move"] == {
            "state": "MOVING",
            "from": source,
            "to": target,
            "fenced": step == "fenced",
        }, listed
        # The whole copy is there: the source held the move once it had copied every item.
        assert copy["node"] == target and copy["epoch"] == partition["epoch"] + 1, copy
        assert copy["size_bytes"] == partition["size_bytes"] and copy["items"] > 0, copy
        let_go(tmp_path, step)
        assert asked.answer() is not None and asked.reply[0] == 200, asked.reply
    finally:
        restart(cluster, source)
    done = served_by(cluster, name, partition["id"], target)
    assert done["move"] is None, done
