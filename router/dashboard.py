"""The live dashboard: a JSON snapshot of the whole cluster and the page that draws it.

    GET /admin/cluster             nodes, tables, partitions, throughput history, GSIs, TTL (JSON)
    GET /dashboard                 the page; it polls /admin/cluster and redraws itself
    GET /dashboard/static/{file}   its script, style sheet and the vendored uPlot (package data)

A `Sampler` asks every node for its token-bucket counters (`partition_throughput`) every
`DASHBOARD_SAMPLE_SECONDS` and keeps them in a bounded `core.cluster_view.ThroughputHistory`, so
the snapshot can show consumed against allowed units and throttling over the last
`DASHBOARD_WINDOW_SECONDS`; the arithmetic is `core.cluster_view`'s. Sizes, item counts, change-feed
checkpoints and TTL deletions are asked of the nodes when a snapshot is taken (`table_stats`,
within `TABLE_STATS_SECONDS_MAX`), skipping nodes the last sample found unreachable so that a dead
node does not slow every refresh.

The snapshot is a JSON object of sections, each made by one function of `SECTIONS`; a feature that
has something to show (splits in progress, transactions) adds its own section there.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
from aiohttp import web

from core import catalog, cluster_view, limits
from core.catalog import IndexStatus
from core.errors import DynamoError
from router import admin, transactions
from rpc import ops
from rpc.background import BackgroundTask

if TYPE_CHECKING:
    from router.context import RouterContext

log = logging.getLogger("router.dashboard")

STATIC_DIR = Path(__file__).resolve().parent / "static"
SNAPSHOT_VERSION = 1
UP = "up"
UNREACHABLE = "unreachable"


@dataclass
class NodeReport:
    """What the last sample heard from one node: whether it answered, and when it last did."""

    state: str
    error: str | None = None
    enforced: bool | None = None
    last_seen: float | None = None


def node_states(
    nodes: list[str], gathered: dict[str, Any], at: float, before: dict[str, NodeReport]
) -> dict[str, NodeReport]:
    """Each node's state from one `admin.gather` answer taken at `at`: up if it answered,
    unreachable (dead, paused past the deadline, or cut off) if not; `before` carries the time
    each node last answered across samples."""
    states = {}
    for node in nodes:
        if node in gathered["nodes"]:
            states[node] = NodeReport(UP, None, gathered["nodes"][node]["enforced"], at)
        else:
            seen = before[node].last_seen if node in before else None
            states[node] = NodeReport(UNREACHABLE, gathered["unreachable"].get(node), None, seen)
    return states


@dataclass
class Sampler:
    """Samples the nodes' throughput counters on a timer, keeping a bounded history."""

    ctx: RouterContext
    history: cluster_view.ThroughputHistory = field(
        default_factory=lambda: cluster_view.ThroughputHistory(limits.DASHBOARD_SAMPLES_MAX)
    )
    nodes: dict[str, NodeReport] = field(default_factory=dict)
    # The replicas of each replicated partition as the last sample heard them
    # (`admin.replicas_of`), by (storage id, partition id).
    replicas: dict[tuple[str, str], list[dict[str, Any]]] = field(default_factory=dict)
    _task: BackgroundTask = field(init=False)

    def __post_init__(self) -> None:
        self._task = BackgroundTask("dashboard-sampler", self._run)

    async def sample(self) -> None:
        """Take one sample now."""
        gathered = await admin.gather(self.ctx)
        at = self.ctx.sources.clock()
        self.nodes = node_states(sorted(self.ctx.clients), gathered, at, self.nodes)
        self.replicas = admin.replicas_of(gathered)
        self.history.record(cluster_view.sample_of(at, gathered["partitions"], _router_counters()))

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            try:
                await self.sample()
            except Exception:
                # A bug must not end the sampling for good: log it and sample again next time.
                log.exception("dashboard sample failed")
            elapsed = loop.time() - started
            await asyncio.sleep(max(0.0, limits.DASHBOARD_SAMPLE_SECONDS - elapsed))

    def start(self) -> None:
        self._task.start()

    async def stop(self) -> None:
        await self._task.close()


@dataclass
class View:
    """What the sections of one snapshot are made from."""

    ctx: RouterContext
    sampler: Sampler
    now: float
    catalog_error: str | None
    samples: list[cluster_view.Sample]
    # Per table id: {(partition id, node): table_stats entry} from the nodes that answered.
    stats: dict[str, dict[tuple[str, str], dict[str, Any]]]


def _holders(tables: Iterable[dict[str, Any]]) -> dict[str, set[str]]:
    """The nodes holding each table id's partitions (a table's and each global index's)."""
    holders: dict[str, set[str]] = {}
    for table in tables:
        held = [*table["partitions"], *table["retired_partitions"]]
        holders[table["id"]] = {partition["node"] for partition in held}
        for index in table["indexes"]:
            if not index["local"]:
                holders[index["table_id"]] = {p["node"] for p in index["partitions"]}
    return holders


async def _stats(
    ctx: RouterContext, holders: dict[str, set[str]], skip: set[str]
) -> dict[str, dict[tuple[str, str], dict[str, Any]]]:
    """table_stats of each table id from the nodes holding it, except those in `skip`."""
    calls = [
        (table_id, node)
        for table_id, nodes in holders.items()
        for node in sorted(nodes - skip)
        if node in ctx.clients
    ]
    replies = await asyncio.gather(
        *(
            ctx.control(
                node,
                ops.TABLE_STATS,
                ops.TableStatsPayload(table_id).to_json(),
                limits.TABLE_STATS_SECONDS_MAX,
            )
            for table_id, node in calls
        ),
        return_exceptions=True,
    )
    merged: dict[str, dict[tuple[str, str], dict[str, Any]]] = {t: {} for t in holders}
    for (table_id, node), reply in zip(calls, replies, strict=True):
        if isinstance(reply, DynamoError):
            continue  # The node is listed as it last answered; its partitions show no size.
        if isinstance(reply, BaseException):
            raise reply
        for partition_id, counts in reply["partitions"].items():
            merged[table_id][(partition_id, node)] = counts
    return merged


def _counts(
    stats: dict[tuple[str, str], dict[str, Any]], partition: dict[str, Any]
) -> dict[str, Any] | None:
    """A partition's table_stats from the node the catalog places it on (a node it moved away
    from may still report it)."""
    return stats.get((partition["id"], partition["node"]))


def _nodes_section(view: View) -> list[dict[str, Any]]:
    ctx = view.ctx
    result = []
    for node in sorted(ctx.clients):
        report = view.sampler.nodes.get(node)
        result.append(
            {
                "id": node,
                "address": ctx.addresses.get(node),
                "state": None if report is None else report.state,
                "error": None if report is None else report.error,
                "last_seen": None if report is None else report.last_seen,
                "throughput_enforced": None if report is None else report.enforced,
                "holds_catalog": node in ctx.catalog_nodes_named,
            }
        )
    return result


def _replicas(
    view: View, storage_id: str, partition: dict[str, Any]
) -> list[dict[str, Any]] | None:
    """A replicated partition's replicas (`admin.replica_rows`), each with its node's state."""
    rows = admin.replica_rows(partition, storage_id, view.sampler.replicas)
    if rows is None:
        return None
    for row in rows:
        node = view.sampler.nodes.get(row["node"])
        row["node_state"] = None if node is None else node.state
    return rows


def _partition(
    view: View,
    table_name: str,
    storage_id: str,
    partition: dict[str, Any],
    stats: dict[tuple[str, str], dict[str, Any]],
) -> dict[str, Any]:
    low, high = cluster_view.key_range(partition["start"], partition["end"])
    counts = _counts(stats, partition)
    node = view.sampler.nodes.get(partition["node"])
    name = (table_name, partition["id"])
    history = cluster_view.series(view.samples, name)
    latest = None
    # Now: only if the newest sample has it (a partition whose node stopped answering has none).
    if history["at"] and history["at"][-1] == view.samples[-1].at:
        latest = {
            kind: {
                "consumed_per_second": history[f"{kind}_consumed"][-1],
                "allowed_per_second": history[f"{kind}_allowed"][-1],
                "throttled_per_second": history[f"{kind}_throttled"][-1],
            }
            for kind in cluster_view.KINDS
        }
    return {
        "id": partition["id"],
        "node": partition["node"],
        "node_state": None if node is None else node.state,
        "epoch": partition["epoch"],
        "state": partition.get("state", "SERVING"),
        "parent": partition.get("parent"),
        "start": partition["start"],
        "end": partition["end"],
        "range": [low, high],
        "size_bytes": None if counts is None else counts["bytes"],
        "item_count": None if counts is None else counts["items"],
        "last_seq": None if counts is None else counts["last_seq"],
        "replicas": _replicas(view, storage_id, partition),
        "throughput": latest,
        "window": cluster_view.totals(view.samples, name),
        "history": history,
    }


def _consumers(
    partitions: list[dict[str, Any]], stats: dict[tuple[str, str], dict[str, Any]]
) -> list[dict[str, Any]]:
    """How far behind each change-feed consumer (the GSI replicator, ...) is on this table: the
    change records the partitions that answered hold past its checkpoints."""
    behind: dict[str, int] = {}
    for partition in partitions:
        counts = _counts(stats, partition)
        if counts is None:
            continue
        for consumer, seq in counts.get("consumers", {}).items():
            behind[consumer] = behind.get(consumer, 0) + max(0, counts["last_seq"] - seq)
    return [{"consumer": name, "records_behind": behind[name]} for name in sorted(behind)]


def _index(view: View, table: dict[str, Any], index: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = {
        "name": index["name"],
        "id": index.get("table_id"),  # A global index's storage id; None for a local one.
        "kind": "local" if index["local"] else "global",
        "status": index["status"],
        "projection": index["projection"],
    }
    if index.get("online") and index["status"] in ("CREATING", "BACKFILLING"):
        # An index added to a live table: which of the table's partitions it has copied so far.
        serving = {partition["id"] for partition in table["partitions"]}
        done = serving & set(index.get("backfilled", ()))
        # DynamoDB's OnlineIndexPercentageProgress (a CloudWatch metric there) and what it is
        # made of: the items copied over the table's item count when the backfill began.
        copied = sum(entry["items"] for entry in index.get("progress", ()))
        estimate = index.get("items_estimate", 0)
        status = IndexStatus(index["status"])
        # Its rate since it began, and the time the estimate's items left need at that rate.
        rate = catalog.backfill_rate(copied, index.get("began_at", 0.0), view.now)
        result["backfill"] = {
            "partitions_done": len(done),
            "partitions": len(serving),
            "percentage": catalog.percentage_progress(status, copied, estimate),
            "items_copied": copied,
            "items_estimate": estimate,
            "items_per_second": rate,
            "seconds_left": catalog.backfill_seconds_left(copied, estimate, rate),
        }
    if not index["local"]:
        stats = view.stats.get(index["table_id"], {})
        result["partitions"] = [
            _partition(
                view, f"{table['name']}/index/{index['name']}", index["table_id"], partition, stats
            )
            for partition in index["partitions"]
        ]
        result["item_count"] = sum(p["item_count"] or 0 for p in result["partitions"])
    return result


def _table(view: View, table: dict[str, Any]) -> dict[str, Any]:
    stats = view.stats.get(table["id"], {})
    partitions = [
        _partition(view, table["name"], table["id"], p, stats) for p in table["partitions"]
    ]
    retired = [
        _partition(view, table["name"], table["id"], p, stats) for p in table["retired_partitions"]
    ]
    ttl = table["ttl"]
    answered = [p for p in partitions if p["size_bytes"] is not None]
    return {
        "name": table["name"],
        "id": table["id"],
        "status": table["status"],
        "billing_mode": table["billing_mode"],
        "provisioned": dict(table["throughput"]),
        "item_count": sum(p["item_count"] for p in answered),
        "size_bytes": sum(p["size_bytes"] for p in answered),
        "partitions_reporting": len(answered),
        "partitions": partitions,
        "retired_partitions": retired,
        "indexes": [_index(view, table, index) for index in table["indexes"]],
        "change_feed_consumers": _consumers(table["partitions"], stats),
        "ttl": None
        if ttl is None
        else {
            "attribute": ttl["attribute"],
            "enabled": ttl["enabled"],
            "deleted_items": sum(
                (_counts(stats, p) or {}).get("ttl_deleted", 0) for p in table["partitions"]
            ),
        },
    }


def _tables_section(view: View) -> list[dict[str, Any]]:
    records = view.ctx.records
    return [_table(view, records[name].to_json()) for name in sorted(records)]


def _catalog_section(view: View) -> dict[str, Any]:
    return {
        "node": view.ctx.catalog_node,
        "nodes": list(view.ctx.catalog_nodes_named),
        "readable": view.catalog_error is None,
        "error": view.catalog_error,
    }


# The router's counters the transactions chart draws as rates, by their names in a sample.
TRANSACTION_SERIES = ("committed", "cancelled", "conflicts")


def _router_counters() -> dict[str, float]:
    """This router's cumulative counters for a sample: its transactions by outcome, conflicts."""
    counters = transactions.COUNTERS
    return {**counters.outcomes, "conflicts": counters.conflicts}


def _transactions_section(view: View) -> dict[str, Any]:
    """The transactions this router coordinated and resolved, and those in doubt (its own
    counters: another router's transactions are on that router's dashboard)."""
    counters = transactions.COUNTERS
    oldest = min(counters.in_doubt.values(), default=None)
    return {
        "outcomes": dict(sorted(counters.outcomes.items())),
        "conflicts": counters.conflicts,
        "resolved": dict(sorted(counters.resolved.items())),
        "in_doubt": len(counters.in_doubt),
        "oldest_in_doubt_seconds": None if oldest is None else max(0.0, view.now - oldest),
        "history": cluster_view.counter_series(view.samples, TRANSACTION_SERIES),
    }


# The snapshot's sections, in order: (name, function of the view). Add a feature's section here.
SECTIONS: list[tuple[str, Callable[[View], Any]]] = [
    ("nodes", _nodes_section),
    ("catalog", _catalog_section),
    ("tables", _tables_section),
    ("transactions", _transactions_section),
]


async def snapshot(ctx: RouterContext, sampler: Sampler) -> dict[str, Any]:
    """The cluster as this router sees it now (the `/admin/cluster` document)."""
    if not sampler.nodes:
        await sampler.sample()  # The first snapshot may come before the first timed sample.
    catalog_error = None
    try:
        await ctx.refresh()
    except DynamoError as error:
        catalog_error = error.message  # The cached catalog is shown, and the error with it.
    unreachable = {node for node, report in sampler.nodes.items() if report.state != UP}
    now = ctx.sources.clock()
    view = View(
        ctx=ctx,
        sampler=sampler,
        now=now,
        catalog_error=catalog_error,
        samples=sampler.history.since(now - limits.DASHBOARD_WINDOW_SECONDS),
        stats=await _stats(
            ctx, _holders(record.to_json() for record in ctx.records.values()), unreachable
        ),
    )
    document: dict[str, Any] = {
        "version": SNAPSHOT_VERSION,
        "at": now,
        "router": ctx.advertise,
        "sample_seconds": limits.DASHBOARD_SAMPLE_SECONDS,
        "window_seconds": limits.DASHBOARD_WINDOW_SECONDS,
    }
    for name, section in SECTIONS:
        document[name] = section(view)
    return document


def add_routes(app: web.Application, ctx: RouterContext) -> None:
    """Serve /admin/cluster and /dashboard from `app`, sampling while the app runs."""
    sampler = Sampler(ctx)

    async def cluster(request: web.Request) -> web.Response:
        return web.Response(
            body=orjson.dumps(await snapshot(ctx, sampler)), content_type="application/json"
        )

    async def page(request: web.Request) -> web.FileResponse:
        return web.FileResponse(STATIC_DIR / "dashboard.html")

    async def start_sampler(_: web.Application) -> None:
        sampler.start()

    async def stop_sampler(_: web.Application) -> None:
        await sampler.stop()

    app.router.add_get("/admin/cluster", cluster)
    app.router.add_get("/dashboard", page)
    app.router.add_static("/dashboard/static", STATIC_DIR)
    app.on_startup.append(start_sampler)
    app.on_cleanup.append(stop_sampler)
