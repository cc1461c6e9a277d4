"""TTL on a storage node: the expiry index kept in the write transaction, the backfill of a table
that held items when TTL was enabled, the sweeper's deletes and the metrics.

Writes go through `apply_writes`, as the group committer makes them, on a real RocksDB store in a
temporary directory and a clock the test steps. After each scenario the reusable checker
(`dynalab.checkers.check_expiry_index`) compares the index with the table and the counters with
the log.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from core import limits
from core.errors import DynamoError
from dynalab.checkers import check_expiry_index
from rpc import ops
from storagenode import expiry, metrics
from storagenode.layout import Family
from storagenode.node import StorageNode
from storagenode.store import Store
from storagenode.sweeper import TtlSweeper, report
from storagenode.throughput import NodeThroughput
from tests import envelope

TABLE = {"id": "d5" * 16, "name": "Sessions", "key_schema": {"hash": ["pk", "S"], "range": None}}
T0 = 1_700_000_000.0
HALF = "8000000000000000"


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


class Node:
    """A node with TABLE in two partitions (p0 below HALF, p1 from it), on a stepped clock."""

    def __init__(self, path: Path, *, enforced: bool = False) -> None:
        self.path = path
        self.clock = Clock()
        self.enforced = enforced
        self.store = Store(path)
        self.node = self._open()
        for partition_id, start, end in (("p0", "", HALF), ("p1", HALF, None)):
            partition = {"id": partition_id, "start": start, "end": end, "epoch": 1, "node": "n1"}
            throughput = {
                "billing_mode": "PROVISIONED",
                "read": 1,
                "write": 1,
                "partition_count": 2,
                "version": 1,
            }
            self.write(
                ops.CREATE_PARTITION,
                {"table": TABLE, "partition": partition, "throughput": throughput},
            )

    def _open(self) -> StorageNode:
        meter = NodeThroughput(enforced=self.enforced, clock=self.clock)
        return StorageNode(self.store, throughput=meter, clock=self.clock)

    def restart(self) -> None:
        self.store.close()
        self.store = Store(self.path)
        self.node = self._open()

    def close(self) -> None:
        self.store.close()

    def write(self, op: str, body: dict[str, Any]) -> dict[str, Any]:
        (result,) = envelope.apply(self.node, [(op, body)])
        if isinstance(result, DynamoError):
            raise result
        return result

    def partition_of(self, key: str) -> str:
        storage_key = self.node.partitions[TABLE["id"], "p0"].key_shape.storage_key(
            {"pk": {"S": key}}
        )
        return "p0" if storage_key < bytes.fromhex(HALF) else "p1"

    def put(self, key: str, expires: Any = None, **attributes: Any) -> None:
        item: dict[str, Any] = {"pk": {"S": key}, **attributes}
        if expires is not None:
            item["exp"] = expires if isinstance(expires, dict) else {"N": str(expires)}
        target = {"table_id": TABLE["id"], "partition_id": self.partition_of(key), "epoch": 1}
        self.write(ops.PUT, {**target, "item": item})

    def update(self, key: str, expression: str, values: dict[str, Any]) -> None:
        target = {"table_id": TABLE["id"], "partition_id": self.partition_of(key), "epoch": 1}
        self.write(
            ops.UPDATE,
            {**target, "key": {"pk": {"S": key}}, "update": expression, "values": values},
        )

    def delete(self, key: str) -> None:
        target = {"table_id": TABLE["id"], "partition_id": self.partition_of(key), "epoch": 1}
        self.write(ops.DELETE, {**target, "key": {"pk": {"S": key}}})

    def ttl(self, enabled: bool, version: int, attribute: str = "exp") -> None:
        document = {"attribute": attribute, "enabled": enabled, "version": version}
        self.write(ops.UPDATE_TTL, {"table_id": TABLE["id"], "ttl": document})

    def backfill(self) -> int:
        """Run backfill steps until every partition is indexed; how many steps it took."""
        steps = 0
        for partition_id in ("p0", "p1"):
            body = expiry.BackfillPayload(TABLE["id"], partition_id).to_json()
            while not self.write(expiry.TTL_BACKFILL, body)["done"]:
                steps += 1
        return steps

    def expired(self) -> list[str]:
        """The keys the index says are expired now, oldest first."""
        entries = expiry.expired_entries(self.store, TABLE["id"], self.clock(), 1000)
        return [self.key_of(storage_key) for _, storage_key in entries]

    def key_of(self, storage_key: bytes) -> str:
        raw = self.store.get(Family.ITEMS, bytes.fromhex(TABLE["id"]) + storage_key)
        assert raw is not None, "an index entry without its item"
        return str(orjson.loads(raw[4:])["pk"]["S"])

    def expire(self, keys: list[str]) -> int:
        deleted = 0
        for partition_id in ("p0", "p1"):
            mine = [k for k in keys if self.partition_of(k) == partition_id]
            shape = self.node.partitions[TABLE["id"], partition_id].key_shape
            storage_keys = [shape.storage_key({"pk": {"S": k}}) for k in mine]
            body = expiry.ExpirePayload(TABLE["id"], partition_id, storage_keys).to_json()
            deleted += self.write(expiry.TTL_EXPIRE, body)["deleted"]
        return deleted

    def exists(self, key: str) -> bool:
        target = {"table_id": TABLE["id"], "partition_id": self.partition_of(key), "epoch": 1}
        reply = envelope.read(self.node, ops.GET, {**target, "key": {"pk": {"S": key}}})
        return reply["item"] is not None

    def changes(self) -> list[dict[str, Any]]:
        records: list[dict[str, Any]] = []
        for partition_id in ("p0", "p1"):
            records.extend(self.node.changes(TABLE["id"], partition_id, 0, 10_000))
        return records

    def deleted_count(self) -> int:
        return sum(
            p.ttl_deleted for p in self.node.partitions.values() if p.table_id == TABLE["id"]
        )

    def problems(self) -> list[str]:
        return check_expiry_index(self.store, self.clock())


@pytest.fixture
def node(tmp_path: Path) -> Any:
    running = Node(tmp_path / "node")
    yield running
    running.close()


def test_the_index_follows_every_write_in_its_transaction(node: Node) -> None:
    now = int(T0)
    node.ttl(True, 1)
    node.put("past", now - 100)
    node.put("soon", now + 100)
    node.put("string", {"S": str(now - 100)})  # T-12: not a Number, never expires.
    node.put("ancient", now - limits.TTL_PAST_SECONDS_MAX - 1)  # T-13: more than five years.
    node.put("none")
    assert node.expired() == ["past"]
    assert node.problems() == []
    # Extending the time moves the entry; shortening it makes the item expired.
    node.update("past", "SET exp = :t", {":t": {"N": str(now + 500)}})
    node.update("soon", "SET exp = :t", {":t": {"N": str(now - 5)}})
    assert node.expired() == ["soon"]
    # Removing the attribute or the item removes the entry.
    node.update("soon", "REMOVE exp", {})
    assert node.expired() == []
    node.delete("past")
    node.clock.now += 1000
    assert node.expired() == []
    assert node.problems() == []


def test_without_ttl_nothing_is_indexed(node: Node) -> None:
    node.put("past", int(T0) - 100)
    assert node.expired() == []
    assert node.problems() == []


def test_enabling_ttl_indexes_the_items_already_there_in_bounded_resumable_steps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(limits, "TTL_BACKFILL_BATCH_ITEMS_MAX", 4)
    node = Node(tmp_path / "node")
    try:
        now = int(T0)
        for i in range(20):
            node.put(f"k{i:02}", now - 10 - i if i % 2 else now + 1000)
        node.ttl(True, 1)
        assert node.expired() == []  # Nothing indexed yet: the backfill has not run.
        body = expiry.BackfillPayload(TABLE["id"], "p0").to_json()
        assert node.write(expiry.TTL_BACKFILL, body) == {"done": False}
        cursor = node.node.partitions[TABLE["id"], "p0"].ttl_backfill
        assert cursor is not None
        # The cursor is committed with the entries: a restarted node resumes from it.
        node.restart()
        assert node.node.partitions[TABLE["id"], "p0"].ttl_backfill == cursor
        assert node.problems() == []
        steps = node.backfill()
        assert steps >= 2  # At most 4 items a step: the rest of 20 takes several.
        assert sorted(node.expired()) == sorted(f"k{i:02}" for i in range(1, 20, 2))
        assert all(p.ttl_backfill is None for p in node.node.partitions.values())
        assert node.problems() == []
    finally:
        node.close()


def test_the_sweepers_delete_is_a_service_delete_through_the_write_path(node: Node) -> None:
    now = int(T0)
    node.ttl(True, 1)
    node.put("a", now - 10, payload={"S": "x"})
    node.put("b", now - 5)
    node.put("c", now + 60)
    assert node.expire(["a", "b", "c"]) == 2
    assert not node.exists("a") and not node.exists("b") and node.exists("c")
    removes = [r for r in node.changes() if r["kind"] == "REMOVE"]
    assert len(removes) == 2
    assert all(r["by_service"] is True and r["new"] is None for r in removes)
    assert {r["old"]["pk"]["S"] for r in removes} == {"a", "b"}
    assert node.deleted_count() == 2
    # A client's delete is not a service delete.
    node.delete("c")
    client = [r for r in node.changes() if r["kind"] == "REMOVE" and r["keys"]["pk"]["S"] == "c"]
    assert client[0]["by_service"] is False
    assert node.problems() == []
    # The count is committed with the deletes.
    node.restart()
    assert node.deleted_count() == 2


def test_an_item_extended_after_the_sweeper_read_the_index_survives(node: Node) -> None:
    now = int(T0)
    node.ttl(True, 1)
    node.put("a", now - 10)
    assert node.expired() == ["a"]
    node.update("a", "SET exp = :t", {":t": {"N": str(now + 3600)}})
    assert node.expire(["a"]) == 0
    assert node.exists("a")
    assert node.deleted_count() == 0
    assert node.problems() == []


def test_an_item_equal_to_now_is_not_yet_expired(node: Node) -> None:
    node.ttl(True, 1)
    node.put("a", int(T0))
    assert node.expire(["a"]) == 0
    node.clock.now += 0.5
    assert node.expire(["a"]) == 1


def test_ttl_deletes_consume_no_write_capacity(tmp_path: Path) -> None:
    """T-15 [seed gap]: the partitions have 1 WCU; the sweeper's deletes are never metered."""
    node = Node(tmp_path / "node", enforced=True)
    try:
        node.ttl(True, 1)
        for i in range(4):
            node.put(f"k{i}", int(T0) - 10)
            node.clock.now += 5  # Let the 1-WCU buckets refill between client writes.
        consumed = {
            (p["partition_id"]): p["write"]["consumed_units"]
            for p in node.node.throughput.report(TABLE["id"])["partitions"]
        }
        assert node.expire([f"k{i}" for i in range(4)]) == 4
        after = {
            (p["partition_id"]): p["write"]["consumed_units"]
            for p in node.node.throughput.report(TABLE["id"])["partitions"]
        }
        assert after == consumed
    finally:
        node.close()


def test_disabling_drops_the_index_and_stops_the_deletes(node: Node) -> None:
    node.ttl(True, 1)
    node.put("a", int(T0) - 10)
    node.ttl(False, 2)
    assert node.expired() == []
    assert node.expire(["a"]) == 0
    assert node.exists("a")
    # A late retry of the older setting changes nothing.
    node.ttl(True, 1)
    assert node.expired() == []
    assert node.problems() == []
    # Enabled again (on another attribute), the items are indexed anew.
    node.ttl(True, 3, attribute="exp")
    node.backfill()
    assert node.expired() == ["a"]
    assert node.problems() == []


def test_dropping_the_table_drops_its_index(node: Node) -> None:
    node.ttl(True, 1)
    node.put("a", int(T0) - 10)
    node.write(ops.DROP_TABLE, {"table_id": TABLE["id"]})
    assert list(node.store.walk(Family.TTL_INDEX, b"", None, forward=True)) == []


def test_the_sweeper_deletes_what_expired_and_reports_its_lag(node: Node) -> None:
    now = int(T0)
    node.ttl(True, 1)
    for i in range(10):
        node.put(f"k{i}", now - 30 - i)
    node.put("later", now + 30)

    async def submit(op: str, target: ops.Target | None, body: dict[str, Any]) -> dict[str, Any]:
        (result,) = node.node.apply_writes([(op, target, body)])
        assert not isinstance(result, Exception)
        return result

    async def sweep() -> int:
        sweeper = TtlSweeper(node.node, submit, 0.01)
        return await sweeper.sweep()

    (row,) = report(node.node)
    assert row == {"table": "Sessions", "deleted": 0, "lag_seconds": 39.0}
    assert asyncio.run(sweep()) == 10
    assert report(node.node) == [{"table": "Sessions", "deleted": 10, "lag_seconds": 0.0}]
    assert node.exists("later")
    node.clock.now += 31
    assert asyncio.run(sweep()) == 1
    assert node.problems() == []


def test_metrics_show_deletions_under_both_names_and_the_lag() -> None:
    registry = CollectorRegistry()

    class Collector:
        def collect(self) -> Any:
            return metrics.ttl_families([{"table": "Sessions", "deleted": 7, "lag_seconds": 2.5}])

    registry.register(Collector())  # type: ignore[arg-type]
    text = generate_latest(registry).decode()
    assert 'dynalab_ttl_deleted_items_total{table="Sessions"} 7.0' in text
    assert 'TimeToLiveDeletedItemCount{table="Sessions"} 7.0' in text
    assert 'dynalab_ttl_sweep_lag_seconds{table="Sessions"} 2.5' in text
