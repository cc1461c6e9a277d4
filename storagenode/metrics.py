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
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import Metric

from rpc.partition_metrics import partition_families
from storagenode.throughput import NodeThroughput

logger = logging.getLogger(__name__)

METRICS_LISTEN_ENV = "DYNALAB_METRICS_LISTEN"
_watched: weakref.WeakSet[NodeThroughput] = weakref.WeakSet()


def watch(throughput: NodeThroughput) -> None:
    """Report `throughput`'s partitions on this process's metrics server."""
    _watched.add(throughput)


class _NodeCollector:
    """Collects the watched throughput reports at scrape time."""

    def collect(self) -> Iterator[Metric]:
        partitions: list[Mapping[str, Any]] = []
        for throughput in list(_watched):
            partitions.extend(throughput.report()["partitions"])
        yield from partition_families(partitions)


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
