"""The router's operator endpoints: per-partition throughput as JSON, Prometheus metrics, health.

    GET /admin/partitions                  every metered partition of every table, from every node
    GET /admin/tables/{name}/partitions    one table: its settings and each partition's buckets
    GET /metrics                           the same counters in Prometheus' text format, and the
                                           router's own request metrics (`router.metrics`)
    GET /health                            which storage nodes this router can reach: 200 when it
                                           reaches all of them, 503 naming those it cannot

Nothing here is on the data path: each request asks every storage node for its partitions' bucket
counters (the partition_throughput control op, bounded by TABLE_STATS_SECONDS_MAX) and answers with
what came back. A node that does not answer is listed under "unreachable" (JSON) or reported by
`dynalab_node_up 0` (metrics) rather than failing the whole answer. Counters are the nodes' own
and start at zero when a node starts. With enforcement off on a node (DYNALAB_THROTTLING=off), its
partitions are not metered and do not appear.

`add_routes` is all `router.app` needs to call.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import orjson
from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric

from core import limits
from core.errors import DynamoError
from rpc import ops
from rpc.partition_metrics import partition_families

if TYPE_CHECKING:
    from collections.abc import Iterator

    from router.context import RouterContext

PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


async def gather(ctx: RouterContext, table_id: str | None = None) -> dict[str, Any]:
    """Every node's partition_throughput reply, with each partition labelled by its node.

    Returns {"nodes": {node id: {"enforced", "burst_seconds"}}, "unreachable": {node id: error},
    "partitions": [...]}, partitions sorted by table name and partition id.
    """
    nodes = sorted(ctx.clients)
    replies = await asyncio.gather(
        *(
            ctx.control(
                node,
                ops.PARTITION_THROUGHPUT,
                ops.PartitionThroughputPayload(table_id).to_json(),
                limits.TABLE_STATS_SECONDS_MAX,
            )
            for node in nodes
        ),
        return_exceptions=True,
    )
    answered: dict[str, Any] = {}
    unreachable: dict[str, str] = {}
    partitions: list[dict[str, Any]] = []
    for node, reply in zip(nodes, replies, strict=True):
        if isinstance(reply, DynamoError):
            unreachable[node] = reply.message
            continue
        if isinstance(reply, BaseException):
            raise reply
        answered[node] = {"enforced": reply["enforced"], "burst_seconds": reply["burst_seconds"]}
        partitions.extend({**partition, "node": node} for partition in reply["partitions"])
    partitions.sort(key=lambda p: (p["table_name"], p["partition_id"]))
    return {"nodes": answered, "unreachable": unreachable, "partitions": partitions}


def _json(body: dict[str, Any], status: int = 200) -> web.Response:
    return web.Response(
        status=status,
        body=orjson.dumps(body, option=orjson.OPT_INDENT_2),
        content_type="application/json",
    )


async def _all_partitions(ctx: RouterContext, request: web.Request) -> web.Response:
    return _json(await gather(ctx))


async def _table_partitions(ctx: RouterContext, request: web.Request) -> web.Response:
    """One table: its catalog settings and partitions, each with its buckets (null: unmetered)."""
    name = request.match_info["name"]
    try:
        await ctx.refresh()
    except DynamoError as error:
        return _json({"error": f"the catalog cannot be read: {error.message}"}, 503)
    table = ctx.tables.get(name)
    if table is None:
        return _json({"error": f"no table named {name}"}, 404)
    gathered = await gather(ctx, table["id"])
    meters = {p["partition_id"]: p for p in gathered["partitions"]}
    partitions = []
    for partition in table["partitions"]:
        meter = meters.get(partition["id"])
        partitions.append(
            {
                "id": partition["id"],
                "node": partition["node"],
                "epoch": partition["epoch"],
                "start": partition["start"],
                "end": partition["end"],
                "read": None if meter is None else meter["read"],
                "write": None if meter is None else meter["write"],
            }
        )
    return _json(
        {
            "table": name,
            "status": table["status"],
            "billing_mode": table["billing_mode"],
            "provisioned": {
                "ReadCapacityUnits": table["throughput"]["read"],
                "WriteCapacityUnits": table["throughput"]["write"],
            },
            "partitions": partitions,
            "nodes": gathered["nodes"],
            "unreachable": gathered["unreachable"],
        }
    )


class _Snapshot:
    """A prometheus-client collector over one gathered answer."""

    def __init__(self, gathered: dict[str, Any], nodes: list[str]) -> None:
        self.gathered = gathered
        self.nodes = nodes

    def collect(self) -> Iterator[Metric]:
        yield from partition_families(self.gathered["partitions"], extra_labels=("node",))
        up = GaugeMetricFamily(
            "dynalab_node_up", "Whether the node answered this scrape", labels=["node"]
        )
        for node in self.nodes:
            up.add_metric([node], 0.0 if node in self.gathered["unreachable"] else 1.0)
        yield up


async def _metrics(ctx: RouterContext, request: web.Request) -> web.Response:
    registry = CollectorRegistry()
    registry.register(_Snapshot(await gather(ctx), sorted(ctx.clients)))  # type: ignore[arg-type]
    body = generate_latest(registry) + ctx.metrics.exposition()
    return web.Response(body=body, headers={"Content-Type": PROMETHEUS_CONTENT_TYPE})


async def _health(ctx: RouterContext, request: web.Request) -> web.Response:
    """Every node this router knows, `up` or `unreachable` (with why), asked now.

    DynamoDB's own health check, `GET /`, answers for the router alone and stays as DynamoDB has
    it; this one is for people and monitors that want to know whether the cluster behind it is
    whole.
    """
    gathered = await gather(ctx)
    unreachable = gathered["unreachable"]
    nodes = {node: "unreachable" if node in unreachable else "up" for node in sorted(ctx.clients)}
    status = "degraded" if unreachable else "ok"
    return _json(
        {"status": status, "nodes": nodes, "unreachable": unreachable},
        503 if unreachable else 200,
    )


def add_routes(app: web.Application, ctx: RouterContext) -> None:
    """Serve the admin endpoints and /metrics from `app` with `ctx`."""

    async def all_partitions(request: web.Request) -> web.Response:
        return await _all_partitions(ctx, request)

    async def table_partitions(request: web.Request) -> web.Response:
        return await _table_partitions(ctx, request)

    async def metrics(request: web.Request) -> web.Response:
        return await _metrics(ctx, request)

    app.router.add_get("/admin/partitions", all_partitions)
    app.router.add_get("/admin/tables/{name}/partitions", table_partitions)

    async def health(request: web.Request) -> web.Response:
        return await _health(ctx, request)

    app.router.add_get("/metrics", metrics)
    app.router.add_get("/health", health)
