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


class Durations:
    """How many splits (or moves) a node made and how long each took: the partition_throughput
    reply's `splits` and `moves`, rendered by `split_families`."""

    def __init__(self) -> None:
        self.count = 0
        self.seconds_sum = 0.0
        self.buckets = [0] * len(SPLIT_SECONDS_BUCKETS)

    def record(self, seconds: float) -> None:
        self.count += 1
        self.seconds_sum += seconds
        for index, bound in enumerate(SPLIT_SECONDS_BUCKETS):
            if seconds <= bound:
                self.buckets[index] += 1

    def to_json(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "seconds_sum": self.seconds_sum,
            "buckets": [
                [bound, count]
                for bound, count in zip(SPLIT_SECONDS_BUCKETS, self.buckets, strict=True)
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
