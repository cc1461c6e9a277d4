"""Prometheus metric families of the partition_throughput reply (`rpc.ops`).

A storage node serves them from its own token buckets (`storagenode.metrics`) and the router's
`GET /metrics` (`router.admin`) from the replies it gathers from every node, adding a `node`
label. They render a reply schema of the contract, so they live with the contract: neither
service imports the other.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

KINDS = ("read", "write")
# (metric name, help, the BUCKET field it reports, whether it is a counter)
_SERIES = (
    ("dynalab_partition_consumed_units", "Capacity units charged", "consumed_units", True),
    (
        "dynalab_partition_throttled_units",
        "Capacity units asked for by throttled requests",
        "throttled_units",
        True,
    ),
    ("dynalab_partition_admitted_requests", "Requests admitted", "admitted_requests", True),
    (
        "dynalab_partition_throttled_requests",
        "Requests refused with ProvisionedThroughputExceededException",
        "throttled_requests",
        True,
    ),
    (
        "dynalab_partition_rate_units_per_second",
        "The partition's throughput: its share of the table's, capped per partition",
        "rate_per_second",
        False,
    ),
    (
        "dynalab_partition_balance_units",
        "Capacity units the bucket holds now; negative while a debt is paid back",
        "balance",
        False,
    ),
)


def partition_families(
    partitions: Iterable[Mapping[str, Any]], extra_labels: Sequence[str] = ()
) -> list[Metric]:
    """Metric families of partition_throughput entries (`rpc.ops`).

    Each entry may carry values for `extra_labels` under the same keys (the router adds "node").
    """
    labels = ["table", "partition", *extra_labels, "kind"]
    families: list[tuple[CounterMetricFamily | GaugeMetricFamily, str]] = []
    for name, documentation, field, counter in _SERIES:
        family_type = CounterMetricFamily if counter else GaugeMetricFamily
        families.append((family_type(name, documentation, labels=labels), field))
    for partition in partitions:
        base = [
            str(partition["table_name"]),
            str(partition["partition_id"]),
            *(str(partition[label]) for label in extra_labels),
        ]
        for kind in KINDS:
            bucket = partition[kind]
            for family, field in families:
                family.add_metric([*base, kind], float(bucket[field]))
    return [family for family, _ in families]


# The upper bounds (seconds) of the split-duration histogram's buckets.
SPLIT_SECONDS_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
# ...and of the Raft commit histogram's: a replicated write from its entry's proposal at the
# leader to its apply there (a quorum's synced appends and the leader's round), milliseconds on a
# quiet loopback cluster, seconds while a follower is slow or a leader is changing.
COMMIT_SECONDS_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)


class Durations:
    """How many things a node did and how long each took, in a histogram over `bounds`: the
    partition_throughput reply's `splits` and `moves` (rendered by `split_families`), and its
    `raft` report's `commit` (`raft_families`)."""

    def __init__(self, bounds: Sequence[float] = SPLIT_SECONDS_BUCKETS) -> None:
        self.bounds = tuple(bounds)
        self.count = 0
        self.seconds_sum = 0.0
        self.buckets = [0] * len(self.bounds)

    def record(self, seconds: float) -> None:
        self.count += 1
        self.seconds_sum += seconds
        for index, bound in enumerate(self.bounds):
            if seconds <= bound:
                self.buckets[index] += 1

    def to_json(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "seconds_sum": self.seconds_sum,
            "buckets": [
                [bound, count] for bound, count in zip(self.bounds, self.buckets, strict=True)
            ],
        }


def split_families(
    reports: Iterable[tuple[Sequence[str], Mapping[str, Any]]], extra_labels: Sequence[str] = ()
) -> list[Metric]:
    """Metric families of the `splits` of partition_throughput replies: how many partitions a
    node split and how long each took, from (label values for `extra_labels`, splits) pairs.

    A `splits` report is {"count", "seconds_sum", "buckets": [[upper bound, count at or
    below it], ...]} over SPLIT_SECONDS_BUCKETS.
    """
    return _counted_durations(
        ("dynalab_splits", "Partitions split in place"),
        ("dynalab_split_seconds", "How long a split took, from plan to install"),
        reports,
        extra_labels,
    )


def move_families(
    reports: Iterable[tuple[Sequence[str], Mapping[str, Any]]], extra_labels: Sequence[str] = ()
) -> list[Metric]:
    """Metric families of the `moves` of partition_throughput replies (the partitions a node
    moved to other nodes, and how long each move took), shaped as `split_families`."""
    return _counted_durations(
        ("dynalab_moves", "Partitions moved to another node"),
        ("dynalab_move_seconds", "How long a move took, from the target's copy to the drop"),
        reports,
        extra_labels,
    )


def _counted_durations(
    counter: tuple[str, str],
    histogram: tuple[str, str],
    reports: Iterable[tuple[Sequence[str], Mapping[str, Any]]],
    extra_labels: Sequence[str],
) -> list[Metric]:
    labels = list(extra_labels)
    count = CounterMetricFamily(*counter, labels=labels)
    seconds = HistogramMetricFamily(*histogram, labels=labels)
    for values, report in reports:
        count.add_metric(list(values), float(report["count"]))
        buckets = [(str(bound), float(number)) for bound, number in report["buckets"]]
        buckets.append(("+Inf", float(report["count"])))
        seconds.add_metric(list(values), buckets, float(report["seconds_sum"]))
    return [count, seconds]


def raft_families(
    replicas: Iterable[Mapping[str, Any]],
    reports: Iterable[tuple[Sequence[str], Mapping[str, Any]]],
    extra_labels: Sequence[str] = (),
) -> list[Metric]:
    """Metric families of the replicated groups of partition_throughput replies: `replicas`
    entries (one per replica a node holds, each with values for `extra_labels` under the same
    keys) and (label values for `extra_labels`, `raft` report) pairs, one per node.

    A `replicas` entry is {"table_name", "partition_id", "role", "leader", "term", "commit",
    "applied", "last", "followers": {node: {"match", "lag"}} (a leader's, else empty)}; a `raft`
    report is {"elections", "leader_changes", "groups", "leaders", "commit": a Durations over
    COMMIT_SECONDS_BUCKETS}.
    """
    partition_labels = ["table", "partition", *extra_labels]
    leader = GaugeMetricFamily(
        "dynalab_raft_leader",
        "1 where this replica leads its partition's Raft group, else 0",
        labels=partition_labels,
    )
    term = GaugeMetricFamily(
        "dynalab_raft_term", "The replica's current Raft term", labels=partition_labels
    )
    commit = GaugeMetricFamily(
        "dynalab_raft_commit_index",
        "The newest log index the replica knows committed",
        labels=partition_labels,
    )
    applied = GaugeMetricFamily(
        "dynalab_raft_applied_index",
        "The newest log index the replica has applied to its partition",
        labels=partition_labels,
    )
    lag = GaugeMetricFamily(
        "dynalab_raft_follower_lag_entries",
        "Log entries a follower is behind its leader (reported by the leader)",
        labels=[*partition_labels, "follower"],
    )
    for replica in replicas:
        values = [
            str(replica["table_name"]),
            str(replica["partition_id"]),
            *(str(replica[label]) for label in extra_labels),
        ]
        leader.add_metric(values, 1.0 if replica["role"] == "leader" else 0.0)
        term.add_metric(values, float(replica["term"]))
        commit.add_metric(values, float(replica["commit"]))
        applied.add_metric(values, float(replica["applied"]))
        for follower, progress in sorted(replica["followers"].items()):
            lag.add_metric([*values, follower], float(progress["lag"]))
    node_labels = list(extra_labels)
    elections = CounterMetricFamily(
        "dynalab_raft_elections",
        "Elections this node's replicas started (a candidate's new term)",
        labels=node_labels,
    )
    changes = CounterMetricFamily(
        "dynalab_raft_leader_changes",
        "Times a replica here learned of a leader other than the one it knew",
        labels=node_labels,
    )
    groups = GaugeMetricFamily(
        "dynalab_raft_groups", "Replicated groups this node is a member of", labels=node_labels
    )
    leaders = GaugeMetricFamily(
        "dynalab_raft_leaders", "Replicated groups this node leads", labels=node_labels
    )
    seconds = HistogramMetricFamily(
        "dynalab_raft_commit_seconds",
        "A replicated write from its entry's proposal at the leader to its apply there",
        labels=node_labels,
    )
    for node_values, report in reports:
        elections.add_metric(list(node_values), float(report["elections"]))
        changes.add_metric(list(node_values), float(report["leader_changes"]))
        groups.add_metric(list(node_values), float(report["groups"]))
        leaders.add_metric(list(node_values), float(report["leaders"]))
        durations = report["commit"]
        buckets = [(str(bound), float(number)) for bound, number in durations["buckets"]]
        buckets.append(("+Inf", float(durations["count"])))
        seconds.add_metric(list(node_values), buckets, float(durations["seconds_sum"]))
    return [leader, term, commit, applied, lag, elections, changes, groups, leaders, seconds]
