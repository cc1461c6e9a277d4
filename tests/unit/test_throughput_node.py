"""Throughput on a storage node: admission and charging of reads and writes, with a stepped clock.

The buckets themselves are `core.token_bucket` (tested in test_token_bucket.py); these tests check
how the node uses them: what a read or write is admitted on, what it is charged once its real size
is known, that a throttled write is never applied, that settings follow update_throughput and
survive a restart, and that enforcement can be switched off.
"""

from __future__ import annotations

from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import orjson
import pytest

from core import limits, settings
from core.catalog import PartitionDef
from core.errors import (
    ON_DEMAND_THROTTLED,
    ConditionalCheckFailed,
    DynamoError,
    StaleEpoch,
    ThrottlingReason,
    ThroughputExceeded,
)
from rpc import ops
from storagenode import split
from storagenode.node import StorageNode
from storagenode.settings import NodeSettings
from storagenode.store import Store
from storagenode.throughput import NodeThroughput
from tests import envelope

TABLE = {"id": "c4" * 16, "name": "Metered", "key_schema": {"hash": ["pk", "S"], "range": None}}
T0 = 1000.0


def provisioned(read: int, write: int, *, partitions: int = 1, version: int = 1) -> dict[str, Any]:
    return {
        "billing_mode": "PROVISIONED",
        "read": read,
        "write": write,
        "partition_count": partitions,
        "version": version,
    }


ON_DEMAND = {
    "billing_mode": "PAY_PER_REQUEST",
    "read": 0,
    "write": 0,
    "partition_count": 4,
    "version": 0,
}


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


class Node:
    """A node with one partition `p0` of TABLE under the given throughput, on a stepped clock."""

    def __init__(
        self,
        path: Path,
        throughput: dict[str, Any] | None,
        *,
        enforced: bool = True,
        burst_seconds: float = 1.0,
    ) -> None:
        self.path = path
        self.clock = Clock()
        self.enforced = enforced
        # One second of burst window unless a test says otherwise: a new partition's full bank is
        # then one second of its rate, which keeps the arithmetic of most tests small.
        self.burst_seconds = burst_seconds
        self.store = Store(path)
        self.node = self._open()
        partition = {"id": "p0", "start": "", "end": None, "epoch": 1, "node": "n1"}
        body: dict[str, Any] = {"table": TABLE, "partition": partition}
        if throughput is not None:
            body["throughput"] = throughput
        self.write(ops.CREATE_PARTITION, body)

    def _open(self) -> StorageNode:
        meter = NodeThroughput(
            enforced=self.enforced, clock=self.clock, burst_seconds=self.burst_seconds
        )
        return StorageNode(self.store, throughput=meter)

    def restart(self) -> None:
        self.store.close()
        self.store = Store(self.path)
        self.node = self._open()

    def write(self, op: str, body: dict[str, Any]) -> dict[str, Any]:
        (result,) = envelope.apply(self.node, [(op, body)])
        if isinstance(result, DynamoError):
            raise result
        return result

    def data(self, **body: Any) -> dict[str, Any]:
        return {"table_id": TABLE["id"], "partition_id": "p0", "epoch": 1, **body}

    def put(self, key: str, size: int = 10, **options: Any) -> dict[str, Any]:
        item = {"pk": {"S": key}, "v": {"S": "x" * size}}
        return self.write(ops.PUT, self.data(item=item, item_bytes=len(key) + 3 + size, **options))

    def get(self, key: str, *, consistent: bool = False) -> dict[str, Any]:
        return envelope.read(
            self.node, ops.GET, self.data(key={"pk": {"S": key}}, consistent=consistent)
        )

    def report(self) -> dict[str, Any]:
        (partition,) = envelope.read(
            self.node, ops.PARTITION_THROUGHPUT, {"table_id": TABLE["id"]}
        )["partitions"]
        return partition

    def balance(self, kind: str) -> float:
        return float(self.report()[kind]["balance"])


@pytest.fixture
def make(tmp_path: Path) -> Iterator[Any]:
    nodes: list[Node] = []

    def factory(throughput: dict[str, Any] | None, **options: Any) -> Node:
        node = Node(tmp_path / f"node{len(nodes)}", throughput, **options)
        nodes.append(node)
        return node

    yield factory
    for node in nodes:
        node.store.close()


# Writes -------------------------------------------------------------------------------------------


def test_a_provisioned_partition_admits_its_rate_then_throttles_until_time_passes(
    make: Any,
) -> None:
    node = make(provisioned(5, 10))
    # A new partition's bank is full: here one second of its rate, ten 1-unit puts.
    for i in range(10):
        node.put(f"k{i}")
    with pytest.raises(ThroughputExceeded) as refused:
        node.put("over")
    assert refused.value.message.startswith("The level of configured provisioned throughput")
    assert refused.value.reasons == (
        ThrottlingReason("TableWriteProvisionedThroughputExceeded", "Metered"),
    )
    # The refused write was never applied.
    assert node.get("over")["item"] is None
    node.clock.now += 0.5  # Five units accrue.
    for i in range(5):
        node.put(f"later{i}")
    with pytest.raises(ThroughputExceeded):
        node.put("over")
    report = node.report()["write"]
    assert report["admitted_requests"] == 15
    assert report["throttled_requests"] == 2
    assert report["consumed_units"] == 15
    assert report["throttled_units"] == 2


def test_a_new_partition_starts_with_a_full_burst_bank(make: Any) -> None:
    node = make(provisioned(5, 5), burst_seconds=limits.BURST_SECONDS_MAX)
    assert node.balance("write") == pytest.approx(5 * limits.BURST_SECONDS_MAX)
    assert node.balance("read") == pytest.approx(5 * limits.BURST_SECONDS_MAX)
    # The tutorial's quick load on a 5/5 table: 100 puts at one instant, none throttled.
    for i in range(100):
        node.put(f"k{i}")
    assert node.report()["write"]["throttled_requests"] == 0


def test_spent_capacity_is_banked_again_up_to_the_burst_window(make: Any) -> None:
    node = make(provisioned(5, 10), burst_seconds=limits.BURST_SECONDS_MAX)
    node.put("big", size=3000 * 10)  # 30 units of the full bank of 3,000.
    assert node.balance("write") == pytest.approx(10 * limits.BURST_SECONDS_MAX - 30)
    node.clock.now += 1  # 10 units accrue.
    assert node.balance("write") == pytest.approx(10 * limits.BURST_SECONDS_MAX - 20)
    node.clock.now += 1000  # The bank holds at most 300 s of the rate.
    assert node.balance("write") == pytest.approx(10 * limits.BURST_SECONDS_MAX)


def test_a_put_is_admitted_on_its_size_and_charged_the_larger_of_old_and_new(make: Any) -> None:
    node = make(provisioned(5, 100))
    node.put("big", size=5000)  # 5 KB: five units.
    assert node.balance("write") == pytest.approx(95)
    node.put("big", size=10)  # Replacing a 5 KB item costs 5 units however small the new one.
    assert node.balance("write") == pytest.approx(90)
    assert node.report()["write"]["consumed_units"] == 10


def test_an_update_is_admitted_on_one_unit_and_charged_after_even_into_debt(make: Any) -> None:
    node = make(provisioned(5, 3))
    node.put("k", size=2500)  # 3 units: the balance is now 0.
    node.clock.now += 1 / 3  # One unit back.
    update = node.data(
        key={"pk": {"S": "k"}}, update="SET w = :w", values={":w": {"S": "y" * 3000}}
    )
    node.write(ops.UPDATE, update)  # Admitted on 1 unit, charged 6 (the new item is 5.5 KB).
    assert node.balance("write") == pytest.approx(-5)
    with pytest.raises(ThroughputExceeded):
        node.write(ops.DELETE, node.data(key={"pk": {"S": "k"}}))
    node.clock.now += 2  # The debt is paid back at the rate, then one unit more.
    node.write(ops.DELETE, node.data(key={"pk": {"S": "k"}}))  # Charged the 5.5 KB deleted.
    assert node.balance("write") == pytest.approx(1 - 6)


def test_a_failed_condition_consumes_the_size_of_the_existing_item(make: Any) -> None:
    node = make(provisioned(5, 100))
    node.put("k", size=3000)  # 3 units.
    with pytest.raises(ConditionalCheckFailed):
        node.put("k", size=10, condition="attribute_not_exists(pk)")
    assert node.balance("write") == pytest.approx(100 - 3 - 3)
    with pytest.raises(ConditionalCheckFailed):
        node.write(
            ops.DELETE, node.data(key={"pk": {"S": "none"}}, condition="attribute_exists(pk)")
        )
    assert node.balance("write") == pytest.approx(100 - 3 - 3 - 1)


def test_a_write_that_fails_for_another_reason_is_refunded(make: Any) -> None:
    node = make(provisioned(5, 10))
    bad_update = node.data(key={"pk": {"S": "k"}}, update="SET pk = :v", values={":v": {"S": "v"}})
    with pytest.raises(DynamoError, match="part of the key"):
        node.write(ops.UPDATE, bad_update)
    assert node.balance("write") == pytest.approx(10)
    # A stale epoch is refused before any admission.
    with pytest.raises(StaleEpoch):
        node.write(ops.PUT, {**node.data(item={"pk": {"S": "k"}}), "epoch": 2})
    assert node.report()["write"]["admitted_requests"] == 1


def test_a_batch_applies_what_it_admits_and_refuses_the_rest(make: Any) -> None:
    node = make(provisioned(5, 10))
    writes = [(ops.PUT, node.data(item={"pk": {"S": f"k{i}"}}, item_bytes=10)) for i in range(15)]
    results = envelope.apply(node.node, writes)
    throttled = [r for r in results if isinstance(r, ThroughputExceeded)]
    assert len(throttled) == 5
    stats = envelope.read(node.node, ops.TABLE_STATS, {"table_id": TABLE["id"]})["partitions"]["p0"]
    assert stats["items"] == 10


# Reads --------------------------------------------------------------------------------------------


def test_reads_cost_half_a_unit_eventually_consistent_and_one_strongly(make: Any) -> None:
    node = make(provisioned(4, 100))
    node.put("k")
    node.get("k")  # 0.5
    node.get("missing", consistent=True)  # A miss still costs the minimum: 1.
    assert node.balance("read") == pytest.approx(2.5)
    node.get("k")
    node.get("k", consistent=True)
    node.get("k")
    node.get("k")  # Balance 0.5 -> admitted, now 0.
    assert node.balance("read") == pytest.approx(0)
    with pytest.raises(ThroughputExceeded):
        node.get("k")
    assert node.report()["read"]["throttled_requests"] == 1


def test_a_query_is_admitted_on_the_minimum_and_charged_all_it_read(make: Any) -> None:
    node = make(provisioned(10, 1000))
    for i in range(6):
        node.put(f"s{i}", size=4000)
    reply = envelope.read(node.node, ops.SCAN, node.data(consistent=True))
    assert reply["scanned"] == 6
    # About 24 KB strongly consistent: rounded up once to 6 units.
    assert node.balance("read") == pytest.approx(10 - 6)
    envelope.read(
        node.node, ops.SCAN, node.data(consistent=True)
    )  # Admitted on 1, charged 6: a debt.
    assert node.balance("read") == pytest.approx(10 - 6 - 6)
    with pytest.raises(ThroughputExceeded):
        envelope.read(node.node, ops.SCAN, node.data(consistent=False))
    node.clock.now += 0.5  # Five units back: the debt is paid and three remain.
    envelope.read(
        node.node, ops.SCAN, node.data(consistent=False)
    )  # Eventually consistent: half, 3.
    assert node.balance("read") == pytest.approx(0)


# Settings -----------------------------------------------------------------------------------------


def test_on_demand_caps_a_partition_at_1000_write_and_3000_read_units(make: Any) -> None:
    node = make(ON_DEMAND)
    report = node.report()
    assert report["write"]["rate_per_second"] == limits.PARTITION_WCU_MAX
    assert report["read"]["rate_per_second"] == limits.PARTITION_RCU_MAX
    # However long it idles, it banks no more than its burst: three seconds of the ceiling.
    node.clock.now += 60
    burst = limits.ON_DEMAND_PARTITION_BURST_SECONDS * limits.PARTITION_WCU_MAX
    results = envelope.apply(
        node.node,
        [
            (ops.PUT, node.data(item={"pk": {"S": f"k{i}"}}, item_bytes=10))
            for i in range(burst + 100)
        ],
    )
    refused = [r for r in results if isinstance(r, ThroughputExceeded)]
    assert len(refused) == 100
    # An on-demand partition is limited by its own ceiling alone: a key range's limit, which
    # DynamoDB answers on such a table as a ThrottlingException with its on-demand message.
    assert {r.reasons for r in refused} == {
        (ThrottlingReason("TableWriteKeyRangeThroughputExceeded", "Metered"),)
    }
    assert {(r.type_name, r.message) for r in refused} == {
        ("ThrottlingException", ON_DEMAND_THROTTLED)
    }


def test_an_on_demand_maximum_throttles_past_its_share_naming_it(make: Any) -> None:
    # MaxWriteRequestUnits 40 over 4 partitions: 10 a second each, a bank of three seconds.
    node = make({**ON_DEMAND, "max_write": 40})
    report = node.report()
    assert report["write"]["rate_per_second"] == 10
    assert report["read"]["rate_per_second"] == limits.PARTITION_RCU_MAX
    for i in range(10 * limits.ON_DEMAND_PARTITION_BURST_SECONDS):
        node.put(f"k{i}")
    with pytest.raises(ThroughputExceeded) as refused:
        node.put("over")
    assert (refused.value.type_name, refused.value.reasons) == (
        "ThrottlingException",
        (ThrottlingReason("TableWriteMaxOnDemandThroughputExceeded", "Metered"),),
    )
    node.clock.now += 1
    for i in range(10):
        node.put(f"again{i}")
    # A maximum whose share is above the ceiling leaves the ceiling as the limit.
    roomy = make({**ON_DEMAND, "max_read": 100_000})
    roomy.clock.now += 60
    with pytest.raises(ThroughputExceeded) as refused:
        for i in range(limits.ON_DEMAND_PARTITION_BURST_SECONDS * limits.PARTITION_RCU_MAX + 1):
            roomy.get(f"k{i}", consistent=True)
    assert refused.value.reasons == (
        ThrottlingReason("TableReadKeyRangeThroughputExceeded", "Metered"),
    )


def test_a_throttled_read_names_its_limit(make: Any) -> None:
    node = make(provisioned(2, 1))
    node.get("a", consistent=True)
    node.get("b", consistent=True)
    with pytest.raises(ThroughputExceeded) as refused:
        node.get("c", consistent=True)
    assert refused.value.reasons == (
        ThrottlingReason("TableReadProvisionedThroughputExceeded", "Metered"),
    )
    # A provisioned table whose share per partition reaches the ceiling is held by the ceiling.
    capped = make(provisioned(limits.PARTITION_RCU_MAX * 2, 1))
    capped.clock.now += 60
    with pytest.raises(ThroughputExceeded) as refused:
        for i in range(limits.PARTITION_RCU_MAX + 1):
            capped.get(f"k{i}", consistent=True)
    assert refused.value.reasons == (
        ThrottlingReason("TableReadKeyRangeThroughputExceeded", "Metered"),
    )


def test_provisioned_units_are_divided_across_the_partitions(make: Any) -> None:
    node = make(provisioned(300, 40, partitions=4))
    report = node.report()
    assert report["read"]["rate_per_second"] == 75
    assert report["write"]["rate_per_second"] == 10


def test_update_throughput_resizes_the_buckets_keeping_the_bank_and_survives_restart(
    make: Any,
) -> None:
    node = make(provisioned(5, 10), burst_seconds=3)
    node.put("big", size=24 * 1024)  # 25 of the full bank's 30 units: 5 left.
    reply = node.write(
        ops.UPDATE_THROUGHPUT,
        {"table_id": TABLE["id"], "throughput": provisioned(5, 20, version=2)},
    )
    assert reply == {"partitions_updated": 1}
    report = node.report()
    assert report["write"]["rate_per_second"] == 20
    # The bank is kept, and credited the burst window's worth of the added rate: 5 + 10 * 3.
    assert report["write"]["balance"] == pytest.approx(35)
    assert report["version"] == 2
    # A late retry of an older change does not undo the newer one.
    node.write(
        ops.UPDATE_THROUGHPUT, {"table_id": TABLE["id"], "throughput": provisioned(5, 1, version=1)}
    )
    assert node.report()["write"]["rate_per_second"] == 20
    # Switching to on-demand lifts the rate to the partition cap.
    node.write(
        ops.UPDATE_THROUGHPUT, {"table_id": TABLE["id"], "throughput": ON_DEMAND | {"version": 3}}
    )
    assert node.report()["write"]["rate_per_second"] == limits.PARTITION_WCU_MAX
    node.write(
        ops.UPDATE_THROUGHPUT, {"table_id": TABLE["id"], "throughput": provisioned(5, 7, version=4)}
    )
    node.restart()
    report = node.report()
    assert (report["billing_mode"], report["version"]) == ("PROVISIONED", 4)
    assert report["write"]["rate_per_second"] == 7


def test_a_partition_without_settings_and_a_node_with_enforcement_off_never_throttle(
    make: Any,
) -> None:
    for node in (make(None), make(provisioned(1, 1), enforced=False)):
        results = envelope.apply(
            node.node,
            [(ops.PUT, node.data(item={"pk": {"S": f"k{i}"}}, item_bytes=10)) for i in range(50)],
        )
        assert all(isinstance(result, dict) for result in results)
        for _ in range(50):
            node.get("k1")
        assert (
            envelope.read(node.node, ops.PARTITION_THROUGHPUT, {"table_id": None})["partitions"]
            == []
        )
    assert envelope.read(node.node, ops.PARTITION_THROUGHPUT, {})["enforced"] is False


def test_dropping_a_table_forgets_its_buckets(make: Any) -> None:
    node = make(provisioned(5, 10))
    node.write(ops.DROP_TABLE, {"table_id": TABLE["id"]})
    assert (
        envelope.read(node.node, ops.PARTITION_THROUGHPUT, {"table_id": None})["partitions"] == []
    )


def test_settings_come_from_the_environment() -> None:
    def read(environ: dict[str, str]) -> NodeSettings:
        return settings.from_environ(NodeSettings, environ, {})

    assert read({}).throttling
    assert read({}).burst_seconds == limits.BURST_SECONDS_MAX
    assert not read({"DYNALAB_THROTTLING": "off"}).throttling
    assert read({"DYNALAB_BURST_SECONDS": "2.5"}).burst_seconds == 2.5
    with pytest.raises(ValueError):
        read({"DYNALAB_BURST_SECONDS": "301"})
    with pytest.raises(ValueError):
        NodeThroughput(burst_seconds=301)


def test_a_splits_children_start_with_their_share_of_the_parents_buckets(make: Any) -> None:
    node = make(provisioned(100, 100), burst_seconds=10)  # A bank of 1,000 write units.
    for i in range(6):
        node.put(f"k{i}", size=100 * 1024 - 10)  # 100 units each: 600 of the bank spent.
    spent = node.balance("write")
    assert spent == pytest.approx(400)
    middle = "8000000000000000"
    children = [
        PartitionDef("p0.2a", "", middle, 2, "n1", parent="p0", share=Fraction(1, 2)),
        PartitionDef("p0.2b", middle, None, 2, "n1", parent="p0", share=Fraction(1, 2)),
    ]
    install = split.InstallPayload(TABLE["id"], "p0", 1, [c.to_json() for c in children])
    [result] = node.node.apply_writes([(split.SPLIT_INSTALL, None, install.to_json())])
    assert result == {"installed": True}
    report = envelope.read(node.node, ops.PARTITION_THROUGHPUT, {"table_id": TABLE["id"]})
    meters = {entry["partition_id"]: entry for entry in report["partitions"]}
    assert meters.keys() == {"p0.2a", "p0.2b"}
    for entry in meters.values():
        # Each child serves half the parent's rate and holds half what the parent held, not a
        # fresh bank of 10 s of its own rate (500).
        assert entry["write"]["rate_per_second"] == 50
        assert entry["write"]["balance"] == pytest.approx(200)
        assert entry["read"]["balance"] == pytest.approx(500)  # Half a full 1,000.


def _prepare(node: Node, attempt: str, *keys: str, size: int = 10) -> dict[str, Any]:
    actions = [
        {
            "op": ops.PUT,
            "body": ops.PutPayload({"pk": {"S": key}, "v": {"S": "x" * size}}).to_json(),
        }
        for key in keys
    ]
    body = node.data(attempt=attempt, record=[TABLE["id"], "p0"], actions=actions)
    return node.write(ops.TXN_PREPARE, body)


def test_a_transaction_is_charged_two_units_per_kb_at_prepare(make: Any) -> None:
    node = make(provisioned(5, 10))
    reply = _prepare(node, "t1.1", "a", "b", size=1500)  # Two items of 2 KB: 4 units each.
    assert [vote["code"] for vote in reply["votes"]] == ["None", "None"]
    assert [cost["units"] for cost in reply["costs"]] == [4.0, 4.0]
    assert node.report()["write"]["consumed_units"] == 8.0


def test_a_throttled_prepare_votes_by_billing_mode_and_locks_nothing(make: Any) -> None:
    for throughput, code, message in (
        (provisioned(5, 1), "ProvisionedThroughputExceeded", "The level of configured"),
        (ON_DEMAND, "ThrottlingError", "Throughput exceeds the current capacity of your table"),
    ):
        node = make(throughput)
        # Spend the bank (one second of the rate; an on-demand partition's three seconds of its
        # 1,000 units) with a transaction of five 390 KB items, admitted into debt.
        first = _prepare(node, "t1.1", "a1", "a2", "a3", "a4", "a5", size=390_000)
        assert [vote["code"] for vote in first["votes"]] == ["None"] * 5
        reply = _prepare(node, "t2.1", "b", "c")
        assert [vote["code"] for vote in reply["votes"]] == [code, code]
        assert reply["votes"][0]["message"].startswith(message)
        # Nothing was locked: single-item writes to b go ahead once capacity is back.
        node.clock.now += 10_000
        node.put("b")


def test_a_transact_get_is_charged_only_when_asked(make: Any) -> None:
    node = make(provisioned(5, 10))
    node.put("a", size=5000)
    body = node.data(gets=[{"key": {"pk": {"S": "a"}}}])
    envelope.read(node.node, ops.TXN_GET, body)
    before = node.report()["read"]["consumed_units"]
    envelope.read(node.node, ops.TXN_GET, {**body, "charge": True})
    # 5 KB read transactionally: two 4 KB units, twice.
    assert node.report()["read"]["consumed_units"] - before == 4.0
    for _ in range(2):  # The bank (5 units) is spent, and then in debt, at the same instant.
        envelope.read(node.node, ops.TXN_GET, {**body, "charge": True})
    reply = envelope.read(node.node, ops.TXN_GET, {**body, "charge": True})
    assert reply["throttled"]["code"] == "ProvisionedThroughputExceeded"


def test_a_moved_partition_starts_with_what_its_buckets_held_on_its_source(
    make: Any, tmp_path: Path
) -> None:
    source = make(provisioned(100, 100), burst_seconds=10)  # A bank of 1,000 write units.
    for i in range(6):
        source.put(f"k{i}", size=100 * 1024 - 10)  # 100 units each: 600 of the bank spent.
    ref = (TABLE["id"], "p0")
    held = source.node.throughput.balances(ref)
    assert held is not None and held["write"] == pytest.approx(400)
    meta = orjson.loads(source.node.partitions[ref].to_meta())
    meta.update(
        epoch=2,
        item_count=0,
        size_bytes=0,
        last_seq=meta["first_seq"] - 1,
        log_bytes=0,
        index_stats={},
        incoming_from="n1",
    )
    store = Store(tmp_path / "target")
    meter = NodeThroughput(clock=source.clock, burst_seconds=10)
    target = StorageNode(store, throughput=meter)
    try:
        for step, extra in (
            ("create", {"partition": meta}),
            ("drain", {"seq": meta["last_seq"], "partition": meta}),
            ("activate", {"epoch": 2, "balances": held}),
        ):
            payload = ops.MoveReceivePayload(TABLE["id"], "p0", step, **extra)
            [result] = target.apply_writes([(ops.MOVE_RECEIVE, None, payload.to_json())])
            assert not isinstance(result, DynamoError), result
        (entry,) = envelope.read(target, ops.PARTITION_THROUGHPUT, {"table_id": TABLE["id"]})[
            "partitions"
        ]
        # Not a fresh bank (a new partition's is full: 1,000): what it held where it was.
        assert entry["write"]["balance"] == pytest.approx(400)
        assert entry["read"]["balance"] == pytest.approx(held["read"])
    finally:
        store.close()
