"""The storage node's Prometheus metrics: families from bucket reports, and the HTTP server."""

from __future__ import annotations

import urllib.request

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from core.errors import ThroughputExceeded
from storagenode import metrics
from storagenode.throughput import NodeThroughput

KEY = ("d5" * 16, "p0")
SETTINGS = {
    "billing_mode": "PROVISIONED",
    "read": 4,
    "write": 2,
    "partition_count": 1,
    "version": 1,
}


class Clock:
    now = 100.0

    def __call__(self) -> float:
        return self.now


def metered() -> NodeThroughput:
    # A one-second window: the new partition's full bank is one second of its rate.
    throughput = NodeThroughput(clock=Clock(), burst_seconds=1)
    throughput.track(KEY, "Orders", SETTINGS)
    charged = throughput.admit_write(KEY, 3000)  # 3 units: the bucket is 1 in debt.
    throughput.settle_write(KEY, 3.0, charged)
    with pytest.raises(ThroughputExceeded):
        throughput.admit_write(KEY, 10)
    return throughput


def samples(text: str) -> dict[tuple[str, str, str, str], float]:
    """Every partition sample of an exposition by (name, table, partition, kind)."""
    return {
        (sample.name, sample.labels["table"], sample.labels["partition"], sample.labels["kind"]): (
            sample.value
        )
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name.startswith("dynalab_partition_")
    }


def exposition(throughput: NodeThroughput) -> str:
    registry = CollectorRegistry()

    class Collector:
        def collect(self):  # type: ignore[no-untyped-def]
            return metrics.partition_families(throughput.report()["partitions"])

    registry.register(Collector())  # type: ignore[arg-type]
    return generate_latest(registry).decode()


def test_partition_families_carry_table_partition_and_kind() -> None:
    found = samples(exposition(metered()))
    write = ("Orders", "p0", "write")
    assert found["dynalab_partition_consumed_units_total", *write] == 3.0
    assert found["dynalab_partition_throttled_requests_total", *write] == 1.0
    assert found["dynalab_partition_throttled_units_total", *write] == 1.0
    assert found["dynalab_partition_admitted_requests_total", *write] == 1.0
    assert found["dynalab_partition_rate_units_per_second", *write] == 2.0
    assert found["dynalab_partition_balance_units", *write] == -1.0
    assert found["dynalab_partition_rate_units_per_second", "Orders", "p0", "read"] == 4.0


def test_the_metrics_server_serves_every_watched_node() -> None:
    throughput = metered()
    metrics.watch(throughput)
    address = metrics.serve("127.0.0.1:0")
    assert address is not None
    with urllib.request.urlopen(f"http://{address[0]}:{address[1]}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    assert samples(text)["dynalab_partition_throttled_requests_total", "Orders", "p0", "write"] == 1


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (None, None),
        ("", None),
        ("0", None),
        ("9100", ("0.0.0.0", 9100)),
        (":9100", ("0.0.0.0", 9100)),
        ("127.0.0.1:9100", ("127.0.0.1", 9100)),
    ],
)
def test_the_listen_address(text: str | None, expected: tuple[str, int] | None) -> None:
    assert metrics.parse_listen(text) == expected


@pytest.mark.parametrize("text", ["host:", "host:port", "127.0.0.1:70000"])
def test_a_bad_listen_address_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        metrics.parse_listen(text)
