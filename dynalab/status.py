"""`dynalab status`: the dashboard's picture in a terminal.

It reads one snapshot from a router's `GET /admin/cluster` (see `router/dashboard.py`), so it works
against a `dynalab up` cluster and against any router URL, and prints rich tables: the nodes and
whether each answers, the tables, every partition with its node, key range, size, epoch, state and
throughput now (consumed / allowed units per second), throttled requests over the router's sample
window, global indexes, and how far each change-feed consumer (the GSI replicator, a stream) is
behind.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

SNAPSHOT_PATH = "/admin/cluster"
# A snapshot asks every node: a dead one fails at once, a paused one after TABLE_STATS_SECONDS_MAX.
HTTP_TIMEOUT_S = 15.0
KIB = 1024


class StatusError(Exception):
    """The router could not be asked, or its answer is not a snapshot."""


def fetch(endpoint: str, timeout: float = HTTP_TIMEOUT_S) -> dict[str, Any]:
    """The router's cluster snapshot."""
    url = endpoint.rstrip("/") + SNAPSHOT_PATH
    try:
        with urllib.request.urlopen(url, timeout=timeout) as reply:
            document = json.loads(reply.read())
    except urllib.error.HTTPError as error:
        raise StatusError(f"{url} answered HTTP {error.code}: is it a dynalab router?") from None
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        raise StatusError(f"cannot reach {url}: {reason}") from None
    except json.JSONDecodeError:
        raise StatusError(f"{url} did not answer JSON: is it a dynalab router?") from None
    if not isinstance(document, dict) or "nodes" not in document or "tables" not in document:
        raise StatusError(f"{url} did not answer a cluster snapshot")
    return document


def size(n: int | None) -> str:
    if n is None:
        return "?"
    if n < KIB:
        return f"{n} B"
    value = n / KIB
    for unit in ("KiB", "MiB"):
        if value < KIB:
            return f"{value:.1f} {unit}"
        value /= KIB
    return f"{value:.1f} GiB"


def _rate(bucket: dict[str, Any] | None) -> str:
    if bucket is None:
        return "-"
    return f"{bucket['consumed_per_second']:.1f} / {bucket['allowed_per_second']:.1f}"


def _state(state: str | None) -> Text:
    if state == "up":
        return Text("up", style="green")
    return Text(state or "unknown", style="bold red")


def _short(owner_id: str | None, partition_id: str) -> str:
    """A partition id without its table's id in front (ids are "<table id>-<n>" and the like)."""
    if owner_id and partition_id.startswith(f"{owner_id}-"):
        return "p" + partition_id[len(owner_id) + 1 :]
    return partition_id


def _nodes(document: dict[str, Any]) -> Table:
    table = Table(title="Nodes", title_justify="left")
    for column in ("node", "address", "state", "last answered", "catalog"):
        table.add_column(column)
    for node in document["nodes"]:
        seen = node["last_seen"]
        ago = "-" if seen is None else f"{max(0.0, document['at'] - seen):.0f} s ago"
        table.add_row(
            node["id"],
            node["address"] or "?",
            _state(node["state"]),
            ago,
            "yes" if node["holds_catalog"] else "",
        )
    return table


def _throttled(partition: dict[str, Any]) -> int:
    window = partition["window"]
    return int(window["read_throttled_requests"] + window["write_throttled_requests"])


def _tables(document: dict[str, Any]) -> Table:
    minutes = document["window_seconds"] / 60
    table = Table(title="Tables", title_justify="left")
    for column in ("table", "status", "capacity", "items", "size", "partitions"):
        table.add_column(column)
    table.add_column(f"throttled ({minutes:.0f} min)", justify="right")
    table.add_column("change feeds behind")
    table.add_column("TTL deleted", justify="right")
    for entry in document["tables"]:
        capacity = (
            f"{entry['provisioned']['read']} RCU / {entry['provisioned']['write']} WCU"
            if entry["billing_mode"] == "PROVISIONED"
            else "on demand"
        )
        count = len(entry["partitions"])
        missing = count - entry["partitions_reporting"]
        throttled = sum(_throttled(p) for p in entry["partitions"])
        feeds = ", ".join(
            f"{c['consumer']} {c['records_behind']}" for c in entry["change_feed_consumers"]
        )
        table.add_row(
            entry["name"],
            entry["status"],
            capacity,
            str(entry["item_count"]),
            size(entry["size_bytes"]),
            f"{count} ({missing} not reporting)" if missing else str(count),
            Text(str(throttled), style="bold red" if throttled else ""),
            feeds or "-",
            "-" if entry["ttl"] is None else str(entry["ttl"]["deleted_items"]),
        )
    return table


def _partitions(document: dict[str, Any]) -> Table:
    table = Table(title="Partitions (units/s: consumed / allowed)", title_justify="left")
    for column in ("table", "partition", "node", "key range", "items", "size", "epoch", "state"):
        table.add_column(column)
    table.add_column("read units/s", justify="right")
    table.add_column("write units/s", justify="right")
    table.add_column("throttled", justify="right")
    for entry in document["tables"]:
        owners: list[tuple[str, str | None, list[dict[str, Any]]]] = [
            (entry["name"], entry["id"], entry["partitions"])
        ]
        for index in entry["indexes"]:
            if index["kind"] == "global":
                owners.append(
                    (f"{entry['name']} / {index['name']}", index["id"], index["partitions"])
                )
        for name, owner_id, partitions in owners:
            for p in partitions:
                now = p["throughput"]
                throttled = _throttled(p)
                node = Text(p["node"])
                if p["node_state"] != "up":
                    node.append(f" ({p['node_state']})", style="bold red")
                table.add_row(
                    name,
                    _short(owner_id, p["id"]),
                    node,
                    f"{p['range'][0] * 100:.1f}-{p['range'][1] * 100:.1f}%",
                    "?" if p["item_count"] is None else str(p["item_count"]),
                    size(p["size_bytes"]),
                    str(p["epoch"]),
                    p["state"],
                    _rate(None if now is None else now["read"]),
                    _rate(None if now is None else now["write"]),
                    Text(str(throttled), style="bold red" if throttled else ""),
                )
    return table


def _indexes(document: dict[str, Any]) -> Table | None:
    rows = [(entry, index) for entry in document["tables"] for index in entry["indexes"]]
    if not rows:
        return None
    table = Table(title="Secondary indexes", title_justify="left")
    for column in ("table", "index", "kind", "projection", "status", "backfilled", "entries"):
        table.add_column(column)
    for entry, index in rows:
        entries = str(index["item_count"]) if index["kind"] == "global" else "-"
        kind, projection = index["kind"], index["projection"]
        backfill = index.get("backfill")
        copied = "-"
        if backfill is not None:
            copied = f"{backfill['partitions_done']}/{backfill['partitions']}"
        table.add_row(
            entry["name"], index["name"], kind, projection, index["status"], copied, entries
        )
    return table


def _transactions(document: dict[str, Any]) -> Text | None:
    """One line on the router's transactions, or None before it has coordinated or found any."""
    txn = document.get("transactions")
    if txn is None or not (txn["outcomes"] or txn["in_doubt"] or txn["resolved"]):
        return None
    outcomes = ", ".join(f"{count} {outcome}" for outcome, count in txn["outcomes"].items())
    line = f"transactions: {outcomes or 'none coordinated'} · {txn['conflicts']} conflicts"
    line += f" · {txn['in_doubt']} in doubt"
    if txn["oldest_in_doubt_seconds"] is not None:
        line += f" (oldest {txn['oldest_in_doubt_seconds']:.0f} s)"
    return Text(line)


def render(document: dict[str, Any]) -> RenderableType:
    """The snapshot as rich renderables, nodes first."""
    parts: list[RenderableType] = [Text(f"router {document['router']}", style="bold")]
    parts.append(_nodes(document))
    catalog = document["catalog"]
    if not catalog["readable"]:
        parts.append(Text(f"the catalog cannot be read: {catalog['error']}", style="bold red"))
    if not document["tables"]:
        parts.append(Text("no tables"))
        return Group(*parts)
    parts += [_tables(document), _partitions(document)]
    indexes = _indexes(document)
    if indexes is not None:
        parts.append(indexes)
    transactions = _transactions(document)
    if transactions is not None:
        parts.append(transactions)
    return Group(*parts)


def run(endpoint: str, console: Console) -> int:
    """Print the status of the cluster behind `endpoint`; 1 if it cannot be read."""
    try:
        document = fetch(endpoint)
    except StatusError as error:
        console.print(f"[red]dynalab status:[/red] {error}", highlight=False)
        return 1
    console.print(render(document))
    return 0
