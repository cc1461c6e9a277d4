"""The router's operator endpoints: per-partition throughput as JSON, Prometheus metrics, health.

    GET /admin/partitions                  every metered partition of every table, from every node
    GET /admin/tables/{name}/partitions    one table: its settings and each partition's buckets,
                                           size, range, epoch, state and parent (retired split
                                           parents too, for lineage) and the move its nodes
                                           report ("move", null if none), then its global
                                           indexes' partitions, each with its "index";
                                           a replicated one lists its "replicas" (node,
                                           role, term, commit and applied index, lag) and
                                           its "replica_move" ({"from", "to"}, null if none)
    POST /admin/tables/{name}/partitions/{id}/split
                                           the partition's node splits it in place: at the key
                                           of the body's optional {"Key": {...}} (DynamoDB
                                           JSON; a partition key alone is the collection's
                                           start), else where it halves its bytes; {id}
                                           may name a global index's partition (listed by
                                           the GET with its "index"), which takes no Key
    POST /admin/tables/{name}/partitions/{id}/move
                                           the partition's node moves it to the node the body
                                           names ({"Node": "n2"}): copy, catch-up, fence,
                                           catalog switch (`storagenode.move`); {id} may
                                           name a global index's partition, as for a split;
                                           a replicated partition moves the replica on
                                           {"From": "node-1"} (default its first) by
                                           changes of its group (`storagenode.replica_move`)
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
import contextlib
from typing import TYPE_CHECKING, Any

import orjson
from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric

from core import keycodec, limits
from core.catalog import PartitionDef
from core.errors import DynamoError, StaleEpoch
from router import transactions
from rpc import ops
from rpc.partition_metrics import (
    move_families,
    partition_families,
    raft_families,
    split_families,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

    from router.context import RouterContext

PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


async def gather(ctx: RouterContext, table_id: str | None = None) -> dict[str, Any]:
    """Every node's partition_throughput reply, with each partition labelled by its node.

    Returns {"nodes": {node id: {"enforced", "burst_seconds", "splits", "moves", "raft"}},
    "unreachable": {node id: error}, "partitions": [...], "moving": [...], "replicas": [...]},
    partitions sorted by table name and partition id, the partitions each node reports moving
    away or moving to it (`storagenode.move.moving`), and each replica of a replicated partition
    as its node reports its Raft group (`rpc.ops.PartitionThroughputPayload`), sorted likewise.
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
    moving: list[dict[str, Any]] = []
    replicas: list[dict[str, Any]] = []
    for node, reply in zip(nodes, replies, strict=True):
        if isinstance(reply, DynamoError):
            unreachable[node] = reply.message
            continue
        if isinstance(reply, BaseException):
            raise reply
        answered[node] = {
            "enforced": reply["enforced"],
            "burst_seconds": reply["burst_seconds"],
            "splits": reply["splits"],
            "moves": reply.get("moves"),
            "raft": reply.get("raft"),
        }
        partitions.extend({**partition, "node": node} for partition in reply["partitions"])
        moving.extend({**partition, "node": node} for partition in reply.get("moving", ()))
        replicas.extend({**replica, "node": node} for replica in reply.get("replicas", ()))
    partitions.sort(key=lambda p: (p["table_name"], p["partition_id"]))
    replicas.sort(key=lambda r: (r["table_name"], r["partition_id"], r["node"]))
    return {
        "nodes": answered,
        "unreachable": unreachable,
        "partitions": partitions,
        "moving": moving,
        "replicas": replicas,
    }


def replicas_of(gathered: dict[str, Any]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """The replicas of each partition in a `gather` answer, by (storage id, partition id): one
    entry per node that reported its group ("node", "role", "leader", "term", "commit",
    "applied", and the leader's "followers")."""
    by_partition: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for replica in gathered["replicas"]:
        key = (replica["table_id"], replica["partition_id"])
        by_partition.setdefault(key, []).append(replica)
    return by_partition


def replica_rows(
    partition: dict[str, Any],
    storage_id: str,
    reported: dict[tuple[str, str], list[dict[str, Any]]],
) -> list[dict[str, Any]] | None:
    """A catalog partition's replicas as the listings show them, the catalog's order (its first
    leader first): each node with what it reported of the group (role, term, commit and applied
    index, and "lag": the entries it lacks, as its leader reports it), or with "role" None
    where its node did not report it (down, cut off, or still creating it). None for a
    partition of one copy."""
    members = partition.get("replicas") or ()
    if not members:
        return None
    mine = {r["node"]: r for r in reported.get((storage_id, partition["id"]), ())}
    lags: dict[str, int] = {}
    for replica in mine.values():
        if replica["role"] == "leader":
            lags.update((node, p["lag"]) for node, p in replica["followers"].items())
    rows = []
    for node in members:
        replica = mine.get(node)
        if replica is None:
            rows.append({"node": node, "role": None})
            continue
        rows.append(
            {
                "node": node,
                "role": replica["role"],
                "leader": replica["leader"],
                "term": replica["term"],
                "commit": replica["commit"],
                "applied": replica["applied"],
                "lag": 0 if replica["role"] == "leader" else lags.get(node),
            }
        )
    return rows


def _json(body: dict[str, Any], status: int = 200) -> web.Response:
    return web.Response(
        status=status,
        body=orjson.dumps(body, option=orjson.OPT_INDENT_2),
        content_type="application/json",
    )


async def _all_partitions(ctx: RouterContext, request: web.Request) -> web.Response:
    return _json(await gather(ctx))


async def _sizes(ctx: RouterContext, table: dict[str, Any]) -> dict[str, int]:
    """Each partition's bytes of items (or of index entries: `table` may be a global index's
    document), from the nodes holding them (table_stats); a node that does not answer leaves
    its partitions out."""
    nodes = sorted({partition["node"] for partition in table["partitions"]})
    storage_id = table["table_id"] if "table_id" in table else table["id"]
    payload = ops.TableStatsPayload(storage_id).to_json()
    replies = await asyncio.gather(
        *(
            ctx.control(node, ops.TABLE_STATS, payload, limits.TABLE_STATS_SECONDS_MAX)
            for node in nodes
        ),
        return_exceptions=True,
    )
    sizes: dict[str, int] = {}
    for reply in replies:
        if isinstance(reply, DynamoError):
            continue
        if isinstance(reply, BaseException):
            raise reply
        sizes.update({pid: stats["bytes"] for pid, stats in reply["partitions"].items()})
    return sizes


async def _table_partitions(ctx: RouterContext, request: web.Request) -> web.Response:
    """One table: its catalog settings and partitions, each with its buckets (null: unmetered),
    its size (null: its node did not answer) and its lineage."""
    name = request.match_info["name"]
    try:
        await ctx.refresh()
    except DynamoError as error:
        return _json({"error": f"the catalog cannot be read: {error.message}"}, 503)
    table = _document(ctx, name)
    if table is None:
        return _json({"error": f"no table named {name}"}, 404)
    gathered = await gather(ctx, table["id"])
    meters = {p["partition_id"]: p for p in gathered["partitions"]}
    moving = list(gathered["moving"])
    reported = replicas_of(gathered)
    # A global index's partitions have buckets of their own, under the index's storage id.
    for index_gathered in await asyncio.gather(
        *(gather(ctx, index["table_id"]) for index in _global_indexes(table))
    ):
        meters.update((p["partition_id"], p) for p in index_gathered["partitions"])
        moving.extend(index_gathered["moving"])
        reported.update(replicas_of(index_gathered))
    sizes = await _sizes(ctx, table)
    partitions = []
    listed = [(None, table, sizes)]
    for index in _global_indexes(table):
        listed.append((index["name"], index, await _sizes(ctx, index)))
    for index_name, holder, sizes in listed:
        partitions.extend(_listed(holder, sizes, meters, index_name, moving, reported))
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


def _listed(
    holder: dict[str, Any],
    sizes: dict[str, int],
    meters: dict[str, dict[str, Any]],
    index_name: str | None,
    moving: list[dict[str, Any]],
    reported: dict[tuple[str, str], list[dict[str, Any]]],
) -> list[dict[str, Any]]:
    """The serving and retired partitions of a table (or, with `index_name`, of its global
    index), as the partitions endpoint lists them, each serving one with the move its nodes
    report (`move`: null when none does, or when its nodes did not answer) and its replicas
    (`replicas`: null for a partition of one copy; `replica_rows`)."""
    storage_id = holder["table_id"] if "table_id" in holder else holder["id"]
    partitions = []
    for partition in (*holder["partitions"], *holder.get("retired_partitions", ())):
        meter = meters.get(partition["id"])
        listed: dict[str, Any] = {} if index_name is None else {"index": index_name}
        partitions.append(
            {
                **listed,
                "id": partition["id"],
                "node": partition["node"],
                "size_bytes": sizes.get(partition["id"]),
                "range": {"start": partition["start"], "end": partition["end"]},
                "epoch": partition["epoch"],
                "state": partition.get("state", "SERVING"),
                "parent": partition.get("parent"),
                "start": partition["start"],
                "end": partition["end"],
                "read": None if meter is None else meter["read"],
                "write": None if meter is None else meter["write"],
                "move": _move_of(partition, storage_id, moving),
                "replicas": replica_rows(partition, storage_id, reported),
                "replica_move": partition.get("replica_move"),
            }
        )
    return partitions


def _move_of(
    partition: dict[str, Any], storage_id: str, moving: list[dict[str, Any]]
) -> dict[str, Any] | None:
    """A serving partition's move as its nodes report it: MOVING while its node moves it away
    (`to`: the target, `fenced`: clients refused for the drain), INCOMING while only a copy on
    another node is left (the source rolled back or switched and has not heard the target yet),
    with that copy (`incoming`: its node, epoch and counts so far); None when neither reports
    one."""
    if partition.get("state", "SERVING") != "SERVING":
        return None
    reported = [
        m for m in moving if m["table_id"] == storage_id and m["partition_id"] == partition["id"]
    ]
    out = next(
        (m for m in reported if m["state"] == "MOVING" and m["node"] == partition["node"]), None
    )
    copy = next((m for m in reported if m["state"] == "INCOMING"), None)
    if out is None and copy is None:
        return None
    incoming = None
    if copy is not None:
        incoming = {
            "node": copy["node"],
            "epoch": copy["epoch"],
            "items": copy["items"],
            "size_bytes": copy["bytes"],
        }
    if out is not None:
        state, to, fenced = "MOVING", out["to"], out["fenced"]
    else:
        assert incoming is not None
        state, to, fenced = "INCOMING", incoming["node"], False
    return {
        "state": state,
        "from": partition["node"],
        "to": to,
        "fenced": fenced,
        "incoming": incoming,
    }


async def _split(ctx: RouterContext, request: web.Request) -> web.Response:
    """Ask a partition's node to split it (`rpc.ops.SplitPartitionPayload`); answer what the
    node answered: the parent and its two children as the catalog now records them."""
    name, partition_id = request.match_info["name"], request.match_info["id"]
    try:
        body = orjson.loads(await request.read() or b"{}")
    except orjson.JSONDecodeError:
        return _json({"error": "the body is not JSON"}, 400)
    try:
        await ctx.refresh()
    except DynamoError as error:
        return _json({"error": f"the catalog cannot be read: {error.message}"}, 503)
    table = _document(ctx, name)
    if table is None:
        return _json({"error": f"no table named {name}"}, 404)
    storage_id, partition = _serving_partition(table, partition_id)
    if partition is None:
        return _json({"error": f"table {name} has no serving partition {partition_id}"}, 404)
    try:
        split_key = _split_key(table, body)
        if storage_id != table["id"] and split_key is not None:
            raise ValueError("a global index partition splits where it halves its bytes: no Key")
    except ValueError as error:
        return _json({"error": str(error)}, 400)
    payload = ops.SplitPartitionPayload(storage_id, partition_id, split_key)
    return await _to_owner(
        ctx, name, partition, ops.SPLIT_PARTITION, payload.to_json(), limits.SPLIT_CALL_SECONDS_MAX
    )


async def _to_owner(
    ctx: RouterContext,
    name: str,
    partition: dict[str, Any],
    op: str,
    body: dict[str, Any],
    timeout: float,
) -> web.Response:
    """Send a split or a move to the partition's node (a replicated one's leader); if it has
    moved meanwhile (StaleEpoch: a router's own placement check may have moved it), to its node
    as the catalog now says."""
    for _ in range(limits.STALE_EPOCH_ATTEMPTS_MAX):
        try:
            if partition.get("replicas"):
                found = PartitionDef.from_json(partition)
                reply = await ctx.driver_call(found, body["table_id"], op, body, timeout)
            else:
                reply = await ctx.control(partition["node"], op, body, timeout)
        except StaleEpoch as error:
            stale = error
            with contextlib.suppress(DynamoError):
                await ctx.refresh()
            table = _document(ctx, name) or {"id": "", "partitions": []}
            current = _serving_partition(table, partition["id"])[1]
            if current is None:
                return _json({"error": f"partition {partition['id']} is no longer serving"}, 404)
            partition = current
            continue
        except DynamoError as error:
            status = 400 if error.type_name == "ValidationException" else 503
            return _json({"error": error.message, "__type": error.type_name}, status)
        with contextlib.suppress(DynamoError):
            await ctx.refresh()  # Done; a router that cannot re-read it now will later.
        return _json(reply)
    return _json({"error": stale.message, "__type": stale.type_name}, 503)


async def _move(ctx: RouterContext, request: web.Request) -> web.Response:
    """Ask a partition's node to move it to the node the body names
    (`rpc.ops.MovePartitionPayload`); answer what the node answered: the partition as the
    catalog now records it, and how long the move and its fence took. A replicated partition
    moves one replica, the one on node "From" (default: its first replica's), by changes of
    its group's membership (`storagenode.replica_move`), asked of its leader."""
    name, partition_id = request.match_info["name"], request.match_info["id"]
    try:
        body = orjson.loads(await request.read() or b"{}")
    except orjson.JSONDecodeError:
        return _json({"error": "the body is not JSON"}, 400)
    if (
        not isinstance(body, dict)
        or "Node" not in body
        or not set(body) <= {"Node", "From"}
        or not all(isinstance(value, str) for value in body.values())
    ):
        return _json({"error": 'the body is {"Node": node id, "From": node id (optional)}'}, 400)
    target = body["Node"]
    source = body.get("From")
    address = ctx.addresses.get(target)
    if address is None:
        return _json({"error": f"no node {target} is known to this router"}, 400)
    try:
        await ctx.refresh()
    except DynamoError as error:
        return _json({"error": f"the catalog cannot be read: {error.message}"}, 503)
    table = _document(ctx, name)
    if table is None:
        return _json({"error": f"no table named {name}"}, 404)
    storage_id, partition = _serving_partition(table, partition_id)
    if partition is None:
        return _json({"error": f"table {name} has no serving partition {partition_id}"}, 404)
    if source is not None and not partition.get("replicas"):
        return _json({"error": "a partition of one copy moves whole: no From"}, 400)
    payload = ops.MovePartitionPayload(storage_id, partition_id, target, address, source)
    return await _to_owner(
        ctx, name, partition, ops.MOVE_PARTITION, payload.to_json(), limits.MOVE_CALL_SECONDS_MAX
    )


def _document(ctx: RouterContext, name: str) -> dict[str, Any] | None:
    """Table `name`'s catalog document (`TableDef.to_json()`, cached in the record), which these
    operator views render; None when the cache has no such table."""
    record = ctx.records.get(name)
    return None if record is None else record.to_json()


def _serving_partition(
    table: dict[str, Any], partition_id: str
) -> tuple[str, dict[str, Any] | None]:
    """The serving partition `partition_id` of the table or of one of its global indexes, with
    the id it is stored under (the table's or the index's)."""
    for storage_id, partitions in (
        (table["id"], table["partitions"]),
        *((index["table_id"], index["partitions"]) for index in _global_indexes(table)),
    ):
        for partition in partitions:
            if partition["id"] == partition_id:
                return storage_id, partition
    return table["id"], None


def _global_indexes(table: dict[str, Any]) -> list[dict[str, Any]]:
    return [index for index in table.get("indexes", ()) if index.get("table_id") is not None]


def _split_key(table: dict[str, Any], body: Any) -> str | None:
    """The storage key (hex) a split request's {"Key": ...} names; None without one."""
    if not isinstance(body, dict) or not set(body) <= {"Key"}:
        raise ValueError('the body is {} or {"Key": {attribute: value, ...}}')
    key = body.get("Key")
    if key is None:
        return None
    declared = {name: kind for name, kind in filter(None, table["key_schema"].values())}
    hash_name = table["key_schema"]["hash"][0]
    if not isinstance(key, dict) or hash_name not in key or not set(key) <= set(declared):
        raise ValueError(f"Key names the partition key {hash_name} and at most the sort key")
    for name, value in key.items():
        if not isinstance(value, dict) or list(value) != [declared[name]]:
            raise ValueError(f"Key's {name} is not a value of type {declared[name]}")
    range_value = None if len(key) == 1 else next(v for n, v in key.items() if n != hash_name)
    try:
        return keycodec.encode_storage_key(key[hash_name], range_value).hex()
    except DynamoError as error:
        raise ValueError(f"Key is not a key of this table: {error.message}") from None


class _Snapshot:
    """A prometheus-client collector over one gathered answer."""

    def __init__(self, gathered: dict[str, Any], nodes: list[str]) -> None:
        self.gathered = gathered
        self.nodes = nodes

    def collect(self) -> Iterator[Metric]:
        yield from partition_families(self.gathered["partitions"], extra_labels=("node",))
        answered = self.gathered["nodes"]
        yield from split_families(
            (((node,), answered[node]["splits"]) for node in sorted(answered)), ("node",)
        )
        yield from move_families(
            (
                ((node,), answered[node]["moves"])
                for node in sorted(answered)
                if answered[node]["moves"]
            ),
            ("node",),
        )
        yield from raft_families(
            self.gathered["replicas"],
            (
                ((node,), answered[node]["raft"])
                for node in sorted(answered)
                if answered[node]["raft"]
            ),
            ("node",),
        )
        up = GaugeMetricFamily(
            "dynalab_node_up", "Whether the node answered this scrape", labels=["node"]
        )
        for node in self.nodes:
            up.add_metric([node], 0.0 if node in self.gathered["unreachable"] else 1.0)
        yield up


async def _metrics(ctx: RouterContext, request: web.Request) -> web.Response:
    registry = CollectorRegistry()
    registry.register(_Snapshot(await gather(ctx), sorted(ctx.clients)))  # type: ignore[arg-type]
    registry.register(transactions.MetricsCollector(ctx.sources.clock()))  # type: ignore[arg-type]
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

    async def split(request: web.Request) -> web.Response:
        return await _split(ctx, request)

    app.router.add_get("/admin/tables/{name}/partitions", table_partitions)
    app.router.add_post("/admin/tables/{name}/partitions/{id}/split", split)

    async def move(request: web.Request) -> web.Response:
        return await _move(ctx, request)

    app.router.add_post("/admin/tables/{name}/partitions/{id}/move", move)

    async def health(request: web.Request) -> web.Response:
        return await _health(ctx, request)

    app.router.add_get("/metrics", metrics)
    app.router.add_get("/health", health)
