"""What nodes report of their replicated partitions (issue 27, observability): the
partition_throughput reply's `replicas` (each replica's role, leader, term, commit and applied
index, a leader's view of its followers' lag) and `raft` (elections, leader changes, commit
times), the router's listing rows made from them (`router.admin.replica_rows`) and the Prometheus
series (`rpc.partition_metrics.raft_families`), on three nodes on virtual time: caught up, with
the leader killed and writes going on, and once it is back."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families

from core import limits
from router import admin
from rpc import ops
from rpc.partition_metrics import raft_families
from tests.sim.replicas import Replicas
from tests.sim.test_replicated_writes import (
    GROUP,
    PARTITION,
    REPLICAS,
    TABLE,
    TARGET,
    create,
    put,
    run,
    settle,
)

REPORT_SECONDS = 2 * limits.RAFT_STATUS_SECONDS  # A report renewed since what was done.


def reports(replicas: Replicas) -> dict[str, dict[str, Any]]:
    """Each live node's partition_throughput reply for the table, by node name."""
    payload = ops.PartitionThroughputPayload(TABLE["id"]).to_json()
    return {
        f"node-{member}": node.read(ops.PARTITION_THROUGHPUT, None, payload)
        for member, node in sorted(replicas.nodes.items())
    }


def gathered(replies: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The replies as the router's `admin.gather` holds them: each replica with its node."""
    return {
        "replicas": [
            {**replica, "node": node}
            for node, reply in replies.items()
            for replica in reply["replicas"]
        ]
    }


def samples(
    replies: dict[str, dict[str, Any]],
) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The Prometheus samples of the replies' Raft families, as the router's /metrics renders
    them, by (sample name, sorted labels)."""

    class Collector:
        def collect(self) -> list[Metric]:
            return raft_families(
                gathered(replies)["replicas"],
                [((node,), reply["raft"]) for node, reply in replies.items()],
                ("node",),
            )

    registry = CollectorRegistry()
    registry.register(Collector())  # type: ignore[arg-type]
    text = generate_latest(registry).decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def label(node: str, **extra: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted({"table": "T", "partition": "p0", "node": node, **extra}.items()))


@pytest.mark.parametrize("seed", range(3))
def test_replicas_report_their_group_through_a_leader_change(seed: int) -> None:
    async def scenario() -> None:
        replicas = Replicas(seed, delay_seconds_max=0.005)  # Commits take a little time.
        try:
            await create(replicas)
            for i in range(30):
                await replicas.write(ops.PUT, TARGET, put(f"k{i}"))
            await settle(replicas, REPORT_SECONDS + 1.0)
            replies = reports(replicas)
            leader = f"node-{replicas.leader_of(GROUP)}"
            entries = [reply["replicas"] for reply in replies.values()]
            assert all(len(listed) == 1 for listed in entries), entries
            rows = {node: reply["replicas"][0] for node, reply in replies.items()}
            last = rows[leader]["last"]
            for node, row in rows.items():
                assert row["table_name"] == "T" and row["partition_id"] == "p0"
                assert row["members"] == REPLICAS
                assert row["role"] == ("leader" if node == leader else "follower")
                assert row["leader"] == leader
                assert row["term"] == rows[leader]["term"] >= 1
                assert row["commit"] == row["applied"] == row["last"] == last
            assert rows[leader]["followers"] == {
                node: {"match": last, "lag": 0} for node in REPLICAS if node != leader
            }
            assert all(row["followers"] == {} for node, row in rows.items() if node != leader)
            raft = {node: reply["raft"] for node, reply in replies.items()}
            assert raft[leader]["leaders"] == 1 and raft[leader]["groups"] == 1
            assert sum(report["elections"] for report in raft.values()) >= 1
            # Every write was an entry proposed at the leader and applied there.
            assert raft[leader]["commit"]["count"] >= 30
            assert raft[leader]["commit"]["seconds_sum"] > 0
            listed = admin.replica_rows(
                PARTITION, TABLE["id"], admin.replicas_of(gathered(replies))
            )
            assert listed is not None
            assert [row["node"] for row in listed] == REPLICAS
            assert {row["node"]: (row["role"], row["lag"]) for row in listed} == {
                node: ("leader" if node == leader else "follower", 0) for node in REPLICAS
            }
            series = samples(replies)
            assert series["dynalab_raft_leader", label(leader)] == 1.0
            assert series["dynalab_raft_applied_index", label(leader)] == last
            for node in REPLICAS:
                if node != leader:
                    assert series["dynalab_raft_leader", label(node)] == 0.0
                    lag = label(leader, follower=node)
                    assert series["dynalab_raft_follower_lag_entries", lag] == 0.0
            count = series["dynalab_raft_commit_seconds_count", (("node", leader),)]
            assert count == raft[leader]["commit"]["count"]

            # The leader dies; writes go on at a new one, which sees the old one fall behind.
            old = int(leader.split("-")[1])
            await replicas.kill(old)
            for i in range(30, 45):
                await replicas.write(ops.PUT, TARGET, put(f"k{i}"))
            await settle(replicas, REPORT_SECONDS)
            replies = reports(replicas)
            new = f"node-{replicas.leader_of(GROUP)}"
            assert new != leader
            rows = {node: reply["replicas"][0] for node, reply in replies.items()}
            assert rows[new]["role"] == "leader"
            assert rows[new]["term"] > series_term(series, leader)
            behind = rows[new]["followers"][leader]
            assert behind["lag"] == rows[new]["last"] - behind["match"] >= 15
            assert all(report["raft"]["leader_changes"] >= 1 for report in replies.values())
            listed = admin.replica_rows(
                PARTITION, TABLE["id"], admin.replicas_of(gathered(replies))
            )
            assert listed is not None
            by_node = {row["node"]: row for row in listed}
            assert by_node[leader]["role"] is None  # its node reports nothing: it is down
            assert by_node[new]["role"] == "leader"

            # Back, it catches up and follows the new leader.
            await replicas.restart(old)
            await settle(replicas, REPORT_SECONDS + 3.0)
            replies = reports(replicas)
            rows = {node: reply["replicas"][0] for node, reply in replies.items()}
            assert rows[leader]["role"] == "follower" and rows[leader]["leader"] == new
            assert rows[new]["followers"][leader]["lag"] == 0
            assert rows[leader]["applied"] == rows[new]["applied"]
        finally:
            await replicas.close()

    run(scenario)


def series_term(series: dict[tuple[str, tuple[tuple[str, str], ...]], float], node: str) -> float:
    return series["dynalab_raft_term", label(node)]
