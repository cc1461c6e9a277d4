"""The router's own request metrics, served on `GET /metrics` beside the nodes' partition series.

Every DynamoDB request the router answers is counted once, when its reply is ready
(`router.protocol.JsonProtocol.handle`), and every ProvisionedThroughputExceeded a node answers is
counted against its table and partition (`router.context.RouterContext`):

    dynalab_router_requests_total{operation, outcome}     outcome: success, client_error (4xx),
                                                          server_error (5xx)
    dynalab_router_request_duration_seconds{operation}    histogram, from the body read to the reply
    dynalab_router_errors_total{operation, type}          error replies by DynamoDB `__type` name
    dynalab_router_request_bytes_total{operation}         request bodies read
    dynalab_router_response_bytes_total{operation}        reply bodies written
    dynalab_router_throttles_total{table, partition}      throttled node calls (a batch's item too)

`operation` is a DynamoDB operation name, or `unknown` for a request naming none the router serves,
so the label's values stay a bounded set. Each router process keeps its own registry: the counters
start at zero when the router starts, as Prometheus expects of counters.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

UNKNOWN_OPERATION = "unknown"
# Latency buckets in seconds: from a cached GetItem (sub-millisecond) to a request that waited out
# a node's deadline (NODE_CALL_SECONDS_MAX is 10 s).
LATENCY_BUCKETS_SECONDS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)


def outcome(status: int) -> str:
    """The outcome label of an HTTP status."""
    if status < 400:
        return "success"
    return "client_error" if status < 500 else "server_error"


OUTCOMES = ("success", "client_error", "server_error")


@dataclass(frozen=True, slots=True)
class _OperationSeries:
    """One operation's children of the request series, bound once: looking a child up by its
    label values takes a lock and a dictionary probe, which every request would pay again."""

    requests: dict[str, Counter]
    latency: Histogram
    bytes_in: Counter
    bytes_out: Counter


class RouterMetrics:
    """The request counters of one router process, in a registry of their own."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "dynalab_router_requests",
            "DynamoDB requests answered, by operation and outcome",
            ["operation", "outcome"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "dynalab_router_request_duration_seconds",
            "Time from reading a request to its reply, by operation",
            ["operation"],
            buckets=LATENCY_BUCKETS_SECONDS,
            registry=self.registry,
        )
        self.errors = Counter(
            "dynalab_router_errors",
            "Error replies, by operation and DynamoDB __type name",
            ["operation", "type"],
            registry=self.registry,
        )
        self.bytes_in = Counter(
            "dynalab_router_request_bytes",
            "Request body bytes read, by operation",
            ["operation"],
            registry=self.registry,
        )
        self.bytes_out = Counter(
            "dynalab_router_response_bytes",
            "Reply body bytes written, by operation",
            ["operation"],
            registry=self.registry,
        )
        self.throttles = Counter(
            "dynalab_router_throttles",
            "Node calls refused for throughput (ProvisionedThroughputExceeded), by partition",
            ["table", "partition"],
            registry=self.registry,
        )
        self._series: dict[str, _OperationSeries] = {}

    def _bind(self, operation: str) -> _OperationSeries:
        series = self._series[operation] = _OperationSeries(
            requests={name: self.requests.labels(operation, name) for name in OUTCOMES},
            latency=self.latency.labels(operation),
            bytes_in=self.bytes_in.labels(operation),
            bytes_out=self.bytes_out.labels(operation),
        )
        return series

    def observe(
        self,
        operation: str,
        status: int,
        error_type: str | None,
        seconds: float,
        bytes_in: int,
        bytes_out: int,
    ) -> None:
        """Count one answered request."""
        series = self._series.get(operation) or self._bind(operation)
        series.requests[outcome(status)].inc()
        series.latency.observe(seconds)
        if error_type is not None:
            self.errors.labels(operation, error_type).inc()
        series.bytes_in.inc(bytes_in)
        series.bytes_out.inc(bytes_out)

    def throttled(self, table: str, partition: str) -> None:
        """Count one call a node refused for the partition's throughput."""
        self.throttles.labels(table, partition).inc()

    def exposition(self) -> bytes:
        """The counters in Prometheus' text format."""
        return generate_latest(self.registry)
