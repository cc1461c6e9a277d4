"""Prometheus metrics of a storage node: each partition's consumed and throttled capacity.

The numbers are the partitions' token-bucket counters (`storagenode.throughput`), read when
Prometheus scrapes, so serving requests costs nothing extra. The metrics server is off unless
asked for (`--metrics-listen HOST:PORT` or DYNALAB_METRICS_LISTEN; `0` or empty: off); it is
prometheus-client's own HTTP server on a thread of its own, apart from the gRPC event loop.

Every series is labelled with the table's name, the partition id and the kind of units (read or
write):

    dynalab_partition_consumed_units_total     units charged (admitted requests, after correction)
    dynalab_partition_throttled_units_total    units that throttled requests asked for
    dynalab_partition_admitted_requests_total  requests admitted
    dynalab_partition_throttled_requests_total requests refused with ProvisionedThroughputExceeded
    dynalab_partition_rate_units_per_second    the bucket's rate (the partition's share)
    dynalab_partition_balance_units            what the bucket holds now (negative: in debt)

The series are defined with the reply they render, in `rpc.partition_metrics`, which the router's
`GET /metrics` (`router.admin`) uses too, adding a `node` label.

How the node writes (observed by `storagenode.commit` and `storagenode.store` as they work, and
read at scrape time like the rest):

    dynalab_node_group_commit_writes          histogram: writes per group commit
    dynalab_node_group_commit_seconds         histogram: a group commit from its start on the
                                              writer thread to its results (plan, apply, sync)
    dynalab_node_wal_sync_seconds             histogram: one synced RocksDB write (the WAL append
                                              and its fsync), which every group commit ends with
    dynalab_node_store_bytes                  bytes the node's database directory takes on disk

The TTL sweeper's series are labelled with the table's name (`storagenode.sweeper.report`):

    dynalab_ttl_deleted_items_total   items the sweeper deleted on this node (committed with the
                                      deletes, so it survives restarts)
    TimeToLiveDeletedItemCount        the same count under DynamoDB's CloudWatch metric name
    dynalab_ttl_sweep_lag_seconds     age of the oldest expired item not yet deleted (0: none)

The replicated partitions' Raft groups (`storagenode.replication.GroupStatus`, as of the node's
latest report, at most RAFT_STATUS_SECONDS old), labelled with the table and partition:

    dynalab_raft_leader               1 where this replica leads its group, else 0
    dynalab_raft_term                 the replica's term
    dynalab_raft_commit_index         the newest index it knows committed
    dynalab_raft_applied_index        the newest index it applied
    dynalab_raft_follower_lag_entries a leader's followers (label `follower`): entries behind

and the node's, unlabelled here and labelled with the node by the router:

    dynalab_raft_elections_total      elections its replicas started
    dynalab_raft_leader_changes_total times a replica learned of a new leader
    dynalab_raft_groups, _leaders     replicated groups it is in, and leads
    dynalab_raft_commit_seconds       a histogram: a replicated write, proposal to apply (leader)

The splitter's (`storagenode.split`), unlabelled here and labelled with the node by the router:

    dynalab_splits_total              partitions this node split in place
    dynalab_split_seconds             a histogram of how long each split took, plan to install
    dynalab_moves_total               partitions this node moved to another node
    dynalab_move_seconds              a histogram of how long each move took, copy to drop
"""

from __future__ import annotations

import contextlib
import logging
import os
import weakref
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Histogram, start_http_server
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
    UnknownMetricFamily,
)

from rpc.partition_metrics import (
    move_families,
    partition_families,
    raft_families,
    split_families,
)
from storagenode.throughput import NodeThroughput

logger = logging.getLogger(__name__)

_watched: weakref.WeakSet[NodeThroughput] = weakref.WeakSet()


class TtlReporter(Protocol):
    def report(self) -> list[dict[str, Any]]: ...


_sweepers: weakref.WeakSet[TtlReporter] = weakref.WeakSet()
_store_paths: set[Path] = set()

# Batch sizes go up to WRITE_BATCH_OPS_MAX; times from a fast disk's sub-millisecond fsync to a
# commit near WRITE_COMMIT_SECONDS_MAX.
_WRITES_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
_SECONDS_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10, 30)
group_commit_writes = Histogram(
    "dynalab_node_group_commit_writes",
    "Writes per group commit",
    buckets=_WRITES_BUCKETS,
    registry=None,
)
group_commit_seconds = Histogram(
    "dynalab_node_group_commit_seconds",
    "Time of one group commit on the writer thread (plan, apply, sync)",
    buckets=_SECONDS_BUCKETS,
    registry=None,
)
wal_sync_seconds = Histogram(
    "dynalab_node_wal_sync_seconds",
    "Time of one synced RocksDB write (the WAL append and its fsync)",
    buckets=_SECONDS_BUCKETS,
    registry=None,
)


def watch(throughput: NodeThroughput) -> None:
    """Report `throughput`'s partitions on this process's metrics server."""
    _watched.add(throughput)


class SplitReporter(Protocol):
    def to_json(self) -> dict[str, Any]: ...


_splits: weakref.WeakSet[SplitReporter] = weakref.WeakSet()


def watch_splits(stats: SplitReporter) -> None:
    """Report a node's split counts and durations (`rpc.partition_metrics.Durations`)."""
    _splits.add(stats)


_moves: weakref.WeakSet[SplitReporter] = weakref.WeakSet()


def watch_moves(stats: SplitReporter) -> None:
    """Report a node's move counts and durations (`rpc.partition_metrics.Durations`)."""
    _moves.add(stats)


class RaftReporter(Protocol):
    def raft_report(self, table_id: str | None) -> tuple[list[dict[str, Any]], dict[str, Any]]: ...


_raft: weakref.WeakSet[RaftReporter] = weakref.WeakSet()


def watch_raft(node: RaftReporter) -> None:
    """Report a node's replicated groups and Raft counters (`StorageNode.raft_report`)."""
    _raft.add(node)


def watch_ttl(sweeper: TtlReporter) -> None:
    """Report a TTL sweeper's tables (`storagenode.sweeper.TtlSweeper`) on the metrics server."""
    _sweepers.add(sweeper)


def watch_store(path: Path) -> None:
    """Report the size on disk of the database directory at `path`."""
    _store_paths.add(path)


def directory_bytes(path: Path) -> int:
    """Bytes the files under `path` take (their sizes; a file deleted meanwhile counts nothing)."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(FileNotFoundError):
                total += os.stat(os.path.join(root, name)).st_size
    return total


def ttl_families(tables: list[Mapping[str, Any]]) -> list[Metric]:
    """The TTL series of `sweeper.report` rows ({"table", "deleted", "lag_seconds"})."""
    deleted = CounterMetricFamily(
        "dynalab_ttl_deleted_items", "Items deleted by the TTL sweeper", labels=["table"]
    )
    cloudwatch = UnknownMetricFamily(
        "TimeToLiveDeletedItemCount",
        "Items deleted by TTL (DynamoDB's CloudWatch metric name)",
        labels=["table"],
    )
    lag = GaugeMetricFamily(
        "dynalab_ttl_sweep_lag_seconds",
        "Age of the oldest expired item not yet deleted by the TTL sweeper",
        labels=["table"],
    )
    for row in tables:
        deleted.add_metric([row["table"]], row["deleted"])
        cloudwatch.add_metric([row["table"]], row["deleted"])
        lag.add_metric([row["table"]], row["lag_seconds"])
    return [deleted, cloudwatch, lag]


class _NodeCollector:
    """Collects the watched throughput reports at scrape time."""

    def collect(self) -> Iterator[Metric]:
        partitions: list[Mapping[str, Any]] = []
        for throughput in list(_watched):
            partitions.extend(throughput.report()["partitions"])
        yield from partition_families(partitions)
        yield from split_families(((), stats.to_json()) for stats in list(_splits))
        yield from move_families(((), stats.to_json()) for stats in list(_moves))
        replicas: list[Mapping[str, Any]] = []
        reports: list[tuple[tuple[str, ...], Mapping[str, Any]]] = []
        for node in list(_raft):
            listed, report = node.raft_report(None)
            replicas.extend(listed)
            reports.append(((), report))
        yield from raft_families(replicas, reports)
        tables: list[Mapping[str, Any]] = []
        for sweeper in list(_sweepers):
            tables.extend(sweeper.report())
        yield from ttl_families(tables)
        for histogram in (group_commit_writes, group_commit_seconds, wal_sync_seconds):
            yield from histogram.collect()
        size = GaugeMetricFamily(
            "dynalab_node_store_bytes", "Bytes the node's database directory takes on disk"
        )
        size.add_metric([], float(sum(directory_bytes(path) for path in _store_paths)))
        yield size


def parse_listen(text: str | None) -> tuple[str, int] | None:
    """HOST:PORT (or PORT, on all interfaces) to serve metrics on; None when metrics are off."""
    if text is None or text.strip() in ("", "0"):
        return None
    host, _, port = text.strip().rpartition(":")
    if not port.isdigit() or int(port) > 65535:
        raise ValueError(f"expected HOST:PORT or PORT for the metrics listener, not {text!r}")
    return (host or "0.0.0.0"), int(port)


def serve(listen: str | None) -> tuple[str, int] | None:
    """Start the metrics HTTP server if `listen` asks for one; return the address it bound."""
    address = parse_listen(listen)
    if address is None:
        return None
    registry = CollectorRegistry()
    registry.register(_NodeCollector())
    server, _ = start_http_server(address[1], addr=address[0], registry=registry)
    bound = server.server_address[0], server.server_address[1]
    logger.info("metrics on http://%s:%d/metrics", *bound)
    return str(bound[0]), int(bound[1])
