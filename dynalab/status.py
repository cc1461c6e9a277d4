"""`dynalab status`: the dashboard's picture in a terminal, readable at 80 columns.

It reads one snapshot from a router's `GET /admin/cluster` (see `router/dashboard.py`), so it works
against a `dynalab up` cluster and against any router URL, and prints the nodes and whether each
answers, then each table stacked: its figures (status, capacity, items, size, partitions,
throttled requests over the router's sample window, TTL deletions), how far each change-feed
consumer (the GSI replicator, a stream) is behind, its secondary indexes, and for the table and
each global index where every partition is (node, key range, items, size, epoch) and its
throughput now (consumed / allowed units per second). A replicated partition's node column
lists its replicas: the leader starred (`node-1*`), a follower behind its leader with the entries
it lacks (`node-2 -14`), one whose node did not report it with `?`, one copying its state from
another member `(copying)`. Names sit in headings rather than in a
column, so no table is wider than 80 columns for ordinary names, and a value that still does not
fit folds onto the next line rather than being cut. `--json` prints the snapshot as it came.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Sequence
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


def _table(
    title: str, columns: Sequence[str], *, right: Sequence[str] = (), names: Sequence[str] = ()
) -> Table:
    """A table whose values are never cut short with an ellipsis. Values stay on one line
    (`no_wrap`): the layout leaves them room at 80 columns. A column of `names` (ids, nodes,
    index names: anything a user chose, and so of any length) is the one that gives way: it
    wraps, and a name longer than its column folds onto the next line, whole."""
    table = Table(title=title, title_justify="left")
    for column in columns:
        table.add_column(
            column,
            justify="right" if column in right else "left",
            overflow="fold",
            no_wrap=column not in names,
        )
    return table


def _nodes(document: dict[str, Any]) -> Table:
    columns = ("node", "address", "state", "last answered", "catalog")
    table = _table("Nodes", columns, names=("node",))
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


def _summary(document: dict[str, Any], entry: dict[str, Any]) -> Table:
    """A table's figures as label and value pairs, two pairs a line: a row of nine columns
    named after the table cannot fit 80 columns once the name is longer than a word."""
    capacity = (
        f"{entry['provisioned']['read']} RCU / {entry['provisioned']['write']} WCU"
        if entry["billing_mode"] == "PROVISIONED"
        else "on demand"
    )
    count = len(entry["partitions"])
    missing = count - entry["partitions_reporting"]
    throttled = sum(_throttled(p) for p in entry["partitions"])
    minutes = document["window_seconds"] / 60
    pairs: list[tuple[str, str | Text]] = [
        ("status", entry["status"]),
        ("capacity", capacity),
        ("items", str(entry["item_count"])),
        ("size", size(entry["size_bytes"])),
        ("partitions", f"{count} ({missing} not reporting)" if missing else str(count)),
        (
            f"throttled ({minutes:.0f} min)",
            Text(str(throttled), style="bold red" if throttled else ""),
        ),
    ]
    if entry["ttl"] is not None:
        pairs.append(("TTL deleted", str(entry["ttl"]["deleted_items"])))
    grid = Table.grid(padding=(0, 2))
    for _ in range(2):
        grid.add_column(style="dim", no_wrap=True)
        grid.add_column(no_wrap=True, overflow="fold")
    for at in range(0, len(pairs), 2):
        row: list[str | Text] = []
        for label, value in pairs[at : at + 2]:
            row += [label, value]
        grid.add_row(*row)
    return grid


def _feeds(entry: dict[str, Any]) -> Table | None:
    consumers = entry["change_feed_consumers"]
    if not consumers:
        return None
    columns = ("consumer", "records behind")
    table = _table("Change feeds", columns, right=columns[1:], names=columns[:1])
    for consumer in consumers:
        table.add_row(consumer["consumer"], str(consumer["records_behind"]))
    return table


def _duration(seconds: float) -> str:
    """A backfill's time left, to the second under a minute and to the minute past an hour."""
    whole = max(0, round(seconds))
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    return f"{whole // 3600} h {whole % 3600 // 60} min"


def _indexes(entry: dict[str, Any]) -> Table | None:
    if not entry["indexes"]:
        return None
    columns = ("index", "kind", "projection", "status", "copied", "entries")
    table = _table("Secondary indexes", columns, right=("entries",), names=("index",))
    for index in entry["indexes"]:
        entries = str(index["item_count"]) if index["kind"] == "global" else "-"
        backfill = index.get("backfill")
        copied = "-"
        if backfill is not None:
            copied = f"{backfill['partitions_done']}/{backfill['partitions']}"
            if backfill.get("percentage") is not None:
                copied += f" {backfill['percentage']}%"
            if backfill.get("items_per_second") is not None:
                copied += f" {backfill['items_per_second']:,.0f} items/s"
            if backfill.get("seconds_left") is not None:
                copied += f", {_duration(backfill['seconds_left'])} left"
        table.add_row(
            index["name"], index["kind"], index["projection"], index["status"], copied, entries
        )
    return table


def _owners(entry: dict[str, Any]) -> list[tuple[str, str | None, list[dict[str, Any]]]]:
    """The table and each of its global indexes, with the partitions each one holds. The table is
    named by the section's heading already; an index is named in its tables' titles."""
    owners: list[tuple[str, str | None, list[dict[str, Any]]]] = [
        ("", entry["id"], entry["partitions"])
    ]
    for index in entry["indexes"]:
        if index["kind"] == "global":
            owners.append((f" of index {index['name']}", index["id"], index["partitions"]))
    return owners


def _where(p: dict[str, Any]) -> Text:
    """Where a partition is: its node, or each of a replicated one's replicas (the module's
    notation), a node that does not answer said so in red."""
    replicas = p.get("replicas")
    if not replicas:
        node = Text(p["node"])
        if p["node_state"] != "up":
            node.append(f" ({p['node_state']})", style="bold red")
        return node
    where = Text()
    for number, replica in enumerate(replicas):
        if number:
            where.append(" ")
        where.append(replica["node"], style="bold" if replica["role"] == "leader" else "")
        if replica["role"] == "leader":
            where.append("*")
        elif replica["role"] is None:
            where.append("?")
        elif replica["role"] == "copying":
            where.append(" (copying)")
        elif replica["lag"]:
            where.append(f" -{replica['lag']}")
        if replica["node_state"] not in ("up", None):
            where.append(f" ({replica['node_state']})", style="bold red")
    return where


def _partitions(of: str, owner_id: str | None, partitions: list[dict[str, Any]]) -> Table:
    """Where each partition is and what it holds. Its throughput is a second table
    (`_throughput`): both in one row need about 130 columns."""
    columns = ("partition", "node", "key range", "items", "size", "epoch")
    # A node that does not answer says so beside its id, or under it where the line is short.
    right = ("items", "size", "epoch")
    table = _table(f"Partitions{of}", columns, right=right, names=columns[:2])
    for p in partitions:
        node = _where(p)
        partition = _short(owner_id, p["id"])
        if p["state"] != "SERVING":
            partition += f" {p['state']}"
        table.add_row(
            partition,
            node,
            f"{p['range'][0] * 100:.1f}-{p['range'][1] * 100:.1f}%",
            "?" if p["item_count"] is None else str(p["item_count"]),
            size(p["size_bytes"]),
            str(p["epoch"]),
        )
    return table


def _throughput(
    document: dict[str, Any], of: str, owner_id: str | None, partitions: list[dict[str, Any]]
) -> Table:
    minutes = document["window_seconds"] / 60
    throttled_column = f"throttled ({minutes:.0f} min)"
    columns = ("partition", "read units/s", "write units/s", throttled_column)
    title = f"Throughput{of} (units/s: consumed / allowed)"
    table = _table(title, columns, right=columns[1:], names=columns[:1])
    for p in partitions:
        now = p["throughput"]
        throttled = _throttled(p)
        table.add_row(
            _short(owner_id, p["id"]),
            _rate(None if now is None else now["read"]),
            _rate(None if now is None else now["write"]),
            Text(str(throttled), style="bold red" if throttled else ""),
        )
    return table


def _table_section(document: dict[str, Any], entry: dict[str, Any]) -> list[RenderableType]:
    """One table, stacked: its name on a line of its own, its figures, then one narrow table per
    kind of detail, so that an 80-column terminal shows every value whole."""
    parts: list[RenderableType] = [
        Text(f"Table {entry['name']}", style="bold"),
        _summary(document, entry),
    ]
    parts += [part for part in (_feeds(entry), _indexes(entry)) if part is not None]
    for of, owner_id, partitions in _owners(entry):
        if partitions:
            parts.append(_partitions(of, owner_id, partitions))
            parts.append(_throughput(document, of, owner_id, partitions))
    return parts


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
    """The snapshot as rich renderables: the nodes, then each table with its details."""
    parts: list[RenderableType] = [Text(f"router {document['router']}", style="bold")]
    parts.append(_nodes(document))
    catalog = document["catalog"]
    if not catalog["readable"]:
        parts.append(Text(f"the catalog cannot be read: {catalog['error']}", style="bold red"))
    if not document["tables"]:
        parts.append(Text("no tables"))
        return Group(*parts)
    for entry in document["tables"]:
        parts.append(Text())
        parts += _table_section(document, entry)
    transactions = _transactions(document)
    if transactions is not None:
        parts += [Text(), transactions]
    return Group(*parts)


def run(endpoint: str, console: Console, *, as_json: bool = False) -> int:
    """Print the status of the cluster behind `endpoint` (the snapshot's JSON with `as_json`, for
    scripts); 1 if it cannot be read."""
    try:
        document = fetch(endpoint)
    except StatusError as error:
        console.print(f"[red]dynalab status:[/red] {error}", highlight=False)
        return 1
    if as_json:
        console.out(json.dumps(document, indent=2, sort_keys=True), highlight=False)
        return 0
    console.print(render(document))
    return 0
