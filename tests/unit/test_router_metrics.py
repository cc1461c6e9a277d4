"""`router.metrics.RouterMetrics`: what one answered request adds to the exposition."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from router.metrics import RouterMetrics, outcome


def samples(metrics: RouterMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found = {}
    for family in text_string_to_metric_families(metrics.exposition().decode()):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def test_outcomes_by_status() -> None:
    assert [outcome(s) for s in (200, 400, 404, 413, 500, 503)] == [
        "success",
        "client_error",
        "client_error",
        "client_error",
        "server_error",
        "server_error",
    ]


def test_one_request_of_each_kind() -> None:
    metrics = RouterMetrics()
    metrics.observe("PutItem", 200, None, 0.002, 120, 2)
    metrics.observe("PutItem", 400, "ValidationException", 0.0004, 30, 90)
    metrics.throttled("orders", "p-1")
    metrics.throttled("orders", "p-1")
    found = samples(metrics)
    put = (("operation", "PutItem"),)
    assert found[("dynalab_router_requests_total", (*put, ("outcome", "success")))] == 1
    assert found[("dynalab_router_requests_total", (*put, ("outcome", "client_error")))] == 1
    assert found[("dynalab_router_errors_total", (*put, ("type", "ValidationException")))] == 1
    assert found[("dynalab_router_request_bytes_total", put)] == 150
    assert found[("dynalab_router_response_bytes_total", put)] == 92
    assert found[("dynalab_router_request_duration_seconds_count", put)] == 2
    assert found[("dynalab_router_request_duration_seconds_bucket", (("le", "0.0005"), *put))] == 1
    throttled = (("partition", "p-1"), ("table", "orders"))
    assert found[("dynalab_router_throttles_total", throttled)] == 2
