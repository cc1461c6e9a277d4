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

The TTL sweeper's series are labelled with the table's name (`storagenode.sweeper.report`):

    dynalab_ttl_deleted_items_total   items the sweeper deleted on this node (committed with the
                                      deletes, so it survives restarts)
    TimeToLiveDeletedItemCount        the same count under DynamoDB's CloudWatch metric name
    dynalab_ttl_sweep_lag_seconds     age of the oldest expired item not yet deleted (0: none)
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Iterator, Mapping
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
    UnknownMetricFamily,
)

from rpc.partition_metrics import partition_families
from storagenode.throughput import NodeThroughput

logger = logging.getLogger(__name__)

METRICS_LISTEN_ENV = "DYNALAB_METRICS_LISTEN"
_watched: weakref.WeakSet[NodeThroughput] = weakref.WeakSet()


class TtlReporter(Protocol):
    def report(self) -> list[dict[str, Any]]: ...


_sweepers: weakref.WeakSet[TtlReporter] = weakref.WeakSet()


def watch(throughput: NodeThroughput) -> None:
    """Report `throughput`'s partitions on this process's metrics server."""
    _watched.add(throughput)


def watch_ttl(sweeper: TtlReporter) -> None:
    """Report a TTL sweeper's tables (`storagenode.sweeper.TtlSweeper`) on the metrics server."""
    _sweepers.add(sweeper)


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
        tables: list[Mapping[str, Any]] = []
        for sweeper in list(_sweepers):
            tables.extend(sweeper.report())
        yield from ttl_families(tables)


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
    registry.register(_NodeCollector())  # type: ignore[arg-type]
    server, _ = start_http_server(address[1], addr=address[0], registry=registry)
    bound = server.server_address[0], server.server_address[1]
    logger.info("metrics on http://%s:%d/metrics", *bound)
    return str(bound[0]), int(bound[1])
