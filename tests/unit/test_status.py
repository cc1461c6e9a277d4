"""`dynalab status`'s rendering of a cluster snapshot (the document of `GET /admin/cluster`)."""

from __future__ import annotations

import json
import re

from rich.console import Console

from dynalab import status
from dynalab.status import render, size


def text_of(document: dict) -> str:
    console = Console(record=True, width=250, color_system=None)
    console.print(render(document))
    return console.export_text()


def partition(pid: str, node: str, state: str, low: float, high: float) -> dict:
    up = state == "up"
    bucket = {"consumed_per_second": 2.5, "allowed_per_second": 5.0, "throttled_per_second": 1.0}
    return {
        "id": pid,
        "node": node,
        "node_state": state,
        "epoch": 3,
        "state": "SERVING",
        "range": [low, high],
        "item_count": 7 if up else None,
        "size_bytes": 2048 if up else None,
        "throughput": {"read": bucket, "write": bucket} if up else None,
        "window": {
            "read_throttled_requests": 0,
            "write_throttled_requests": 12 if up else 0,
            "read_consumed_units": 0.0,
            "write_consumed_units": 0.0,
        },
    }


def snapshot(tables: list) -> dict:
    return {
        "at": 100.0,
        "router": "127.0.0.1:8000",
        "window_seconds": 300.0,
        "catalog": {"node": "n1", "readable": True, "error": None},
        "nodes": [
            {"id": "n1", "address": "a:1", "state": "up", "last_seen": 99.0, "holds_catalog": True},
            {
                "id": "n2",
                "address": "a:2",
                "state": "unreachable",
                "last_seen": 40.0,
                "holds_catalog": False,
            },
        ],
        "tables": tables,
    }


def orders() -> dict:
    return {
        "name": "orders",
        "id": "t1",
        "status": "ACTIVE",
        "billing_mode": "PROVISIONED",
        "provisioned": {"read": 5, "write": 10},
        "item_count": 7,
        "size_bytes": 2048,
        "partitions_reporting": 1,
        "partitions": [
            partition("t1-0", "n1", "up", 0, 0.5),
            partition("t1-1", "n2", "unreachable", 0.5, 1),
        ],
        "indexes": [
            {
                "name": "by-x",
                "id": "i1",
                "kind": "global",
                "status": "BACKFILLING",
                "backfill": {
                    "partitions_done": 1,
                    "partitions": 4,
                    "percentage": 37,
                    "items_per_second": 21_345.6,
                    "seconds_left": 125.4,
                },
                "projection": "ALL",
                "item_count": 3,
                "partitions": [partition("i1-0", "n1", "up", 0, 1)],
            },
            {
                "name": "by-y",
                "id": None,
                "kind": "local",
                "status": "ACTIVE",
                "projection": "KEYS_ONLY",
            },
        ],
        "change_feed_consumers": [{"consumer": "gsi_replicator", "records_behind": 42}],
        "ttl": {"attribute": "exp", "enabled": True, "deleted_items": 9},
    }


def cells(text: str) -> dict[str, list[str]]:
    """Each table row of `text` by its first cell, with the cells after it (the last row wins)."""
    found = {}
    for line in text.splitlines():
        if line.startswith("│"):
            row = [cell.strip() for cell in line.strip("│").split("│")]
            found[row[0]] = row[1:]
    return found


def section(text: str, title: str) -> str:
    """The lines of `text` from the line `title` to the next blank line or title-like line."""
    lines = text.splitlines()
    start = next(at for at, line in enumerate(lines) if line.strip() == title)
    end = start + 1
    while end < len(lines) and lines[end].startswith(("┏", "┃", "┡", "│", "└")):
        end += 1
    return "\n".join(lines[start:end])


def test_nodes_tables_partitions_and_indexes():
    text = text_of(snapshot([orders()]))
    nodes = cells(section(text, "Nodes"))
    assert nodes["n2"][:3] == ["a:2", "unreachable", "60 s ago"]
    assert nodes["n1"][1:] == ["up", "1 s ago", "yes"]
    assert "Table orders" in text
    for label, shown in (
        ("status", "ACTIVE"),
        ("capacity", "5 RCU / 10 WCU"),
        ("size", "2.0 KiB"),
        ("partitions", "2 (1 not reporting)"),
        ("throttled (5 min)", "12"),
        ("TTL deleted", "9"),
    ):
        assert re.search(rf"{re.escape(label)}\s+{re.escape(shown)}(\s|$)", text), label
    assert cells(section(text, "Change feeds"))["gsi_replicator"] == ["42"]
    indexes = cells(section(text, "Secondary indexes"))
    assert indexes["by-x"] == [
        "global",
        "ALL",
        "BACKFILLING",
        "1/4 37% 21,346 items/s, 2 min 5 s left",
        "3",
    ]
    assert indexes["by-y"] == ["local", "KEYS_ONLY", "ACTIVE", "-", "-"]
    table = cells(section(text, "Partitions"))
    assert table["p0"] == ["n1", "0.0-50.0%", "7", "2.0 KiB", "3"]
    assert table["p1"] == ["n2 (unreachable)", "50.0-100.0%", "?", "?", "3"]
    rates = cells(section(text, "Throughput (units/s: consumed / allowed)"))
    assert rates["p0"] == ["2.5 / 5.0", "2.5 / 5.0", "12"]
    assert rates["p1"] == ["-", "-", "0"]
    assert cells(section(text, "Partitions of index by-x"))["p0"][0] == "n1"


LONG_NAME = "test_a_hot_key_shows_consumed_against_allowed_units_and_throttling-2"


def realistic() -> dict:
    """A cluster as a laptop runs it after a while: five nodes, one of them dead, table names and
    index names as people write them, split partitions, busy provisioned capacity, an online
    index being copied, a stream and TTL."""
    music, genre = "8f14e45fceea167a5a36dedd4bea2543", "c9f0f895fb98ab9159f51fd0297e236d"

    def busy(pid: str, node: str, state: str, low: float, high: float) -> dict:
        p = partition(pid, node, state, low, high)
        if p["throughput"] is not None:
            rate = {"consumed_per_second": 2999.5, "allowed_per_second": 3000.0}
            p["throughput"] = {"read": rate, "write": {**rate, "allowed_per_second": 1000.0}}
            p["item_count"], p["size_bytes"] = 1234567, 537_182_208
            p["window"]["write_throttled_requests"] = 123456
        return p

    document = snapshot(
        [
            {
                "name": "MusicCollection",
                "id": music,
                "status": "UPDATING",
                "billing_mode": "PROVISIONED",
                "provisioned": {"read": 12000, "write": 4000},
                "item_count": 3703701,
                "size_bytes": 1_611_546_624,
                "partitions_reporting": 3,
                "partitions": [
                    busy(f"{music}-0.2a", "node-1", "up", 0, 0.125),
                    busy(f"{music}-0.2b.3a", "node-12", "up", 0.125, 0.1875),
                    busy(f"{music}-0.2b.3b", "node-5", "unreachable", 0.1875, 0.25),
                    busy(f"{music}-1", "node-3", "up", 0.25, 1),
                ],
                "indexes": [
                    {
                        "name": "GenreAlbumTitleIndex",
                        "id": genre,
                        "kind": "global",
                        "status": "BACKFILLING",
                        "backfill": {"partitions_done": 3, "partitions": 4},
                        "projection": "INCLUDE",
                        "item_count": 2469134,
                        "partitions": [
                            busy(f"{genre}-0", "node-2", "up", 0, 0.5),
                            busy(f"{genre}-1", "node-5", "unreachable", 0.5, 1),
                        ],
                    },
                    {
                        "name": "AlbumTitleLocalIndex",
                        "id": None,
                        "kind": "local",
                        "status": "ACTIVE",
                        "projection": "KEYS_ONLY",
                    },
                ],
                "change_feed_consumers": [
                    {"consumer": f"gsi_replicator/{genre}", "records_behind": 1234567},
                    {"consumer": "stream/1732712345678", "records_behind": 98765},
                ],
                "ttl": {"attribute": "expires_at", "enabled": True, "deleted_items": 4567890},
            },
            {
                # As the integration tests name theirs: the longest that still fits its heading.
                "name": LONG_NAME,
                "id": "45c48cce2e2d7fbdea1afc51c7c6ad26",
                "status": "ACTIVE",
                "billing_mode": "PAY_PER_REQUEST",
                "provisioned": {"read": 0, "write": 0},
                "item_count": 0,
                "size_bytes": 0,
                "partitions_reporting": 1,
                "partitions": [busy("45c48cce2e2d7fbdea1afc51c7c6ad26-0", "node-4", "up", 0, 1)],
                "indexes": [],
                "change_feed_consumers": [],
                "ttl": None,
            },
        ]
    )
    document["nodes"] = [
        {
            "id": f"node-{n}",
            "address": f"127.0.0.1:{41230 + n}",
            "state": "unreachable" if n == 5 else "up",
            "last_seen": 40.0 if n == 5 else 99.0,
            "holds_catalog": n == 1,
        }
        for n in (1, 2, 3, 4, 5, 12)
    ]
    return document


def test_at_80_columns_every_value_is_shown_whole():
    console = Console(record=True, width=80, color_system=None)
    console.print(render(realistic()))
    text = console.export_text()
    lines = text.splitlines()
    assert "…" not in text
    assert max(len(line.rstrip()) for line in lines) <= 80
    whole = [
        "MusicCollection",
        f"Table {LONG_NAME}",
        "GenreAlbumTitleIndex",
        "AlbumTitleLocalIndex",
        "12000 RCU / 4000 WCU",
        "on demand",
        "UPDATING",
        "BACKFILLING",
        "KEYS_ONLY",
        "INCLUDE",
        "3/4",
        "1.5 GiB",
        "512.3 MiB",
        "4 (1 not reporting)",
        "4567890",
        "gsi_replicator/c9f0f895fb98ab9159f51fd0297e236d",
        "stream/1732712345678",
        "127.0.0.1:41242",
        "unreachable",
        "2999.5 / 3000.0",
        "2999.5 / 1000.0",
        "123456",
        "12.5-18.8%",
        "p0.2b.3a",
        "p0.2b.3b",
    ]
    whole += [f"node-{n}" for n in (1, 2, 3, 4, 5, 12)]
    assert [value for value in whole if not any(value in line for line in lines)] == []
    # Every partition of the table and of its global index, with its node, on one line.
    for partition_id, node in (("p0.2a", "node-1"), ("p0.2b.3a", "node-12"), ("p1", "node-3")):
        assert any(f"│ {partition_id} " in line and f"│ {node} " in line for line in lines)
    assert sum("(unreachable)" in line for line in lines) == 2  # node-5's partitions


def test_a_value_too_wide_for_80_columns_folds_instead_of_being_cut():
    document = realistic()
    long_name = "an-index-name-of-eighty-characters-that-no-row-of-80-columns-can-hold-beside-more"
    document["tables"][0]["indexes"][1]["name"] = long_name
    console = Console(record=True, width=80, color_system=None)
    console.print(render(document))
    text = console.export_text()
    assert "…" not in text
    assert long_name in "".join(
        cell.strip() for line in text.splitlines() for cell in line.split("│")[1:2]
    )


def test_an_empty_cluster_and_an_unreadable_catalog():
    document = snapshot([])
    document["catalog"] = {"node": "n2", "readable": False, "error": "node n2 is down"}
    text = text_of(document)
    assert "the catalog cannot be read: node n2 is down" in text
    assert "no tables" in text


def test_sizes():
    assert [size(n) for n in (None, 0, 1023, 1024, 1536 * 1024, 3 * 1024**3)] == [
        "?",
        "0 B",
        "1023 B",
        "1.0 KiB",
        "1.5 MiB",
        "3.0 GiB",
    ]


def test_transactions_are_one_line_once_there_are_any():
    table = {
        "name": "orders",
        "id": "t1",
        "status": "ACTIVE",
        "billing_mode": "PAY_PER_REQUEST",
        "provisioned": {"read": 0, "write": 0},
        "item_count": 0,
        "size_bytes": 0,
        "partitions_reporting": 0,
        "partitions": [],
        "indexes": [],
        "change_feed_consumers": [],
        "ttl": None,
    }
    quiet = {"outcomes": {}, "conflicts": 0, "resolved": {}, "in_doubt": 0}
    document = snapshot([table])
    document["transactions"] = {**quiet, "oldest_in_doubt_seconds": None}
    assert "transactions:" not in text_of(document)
    document["transactions"] = {
        **quiet,
        "outcomes": {"cancelled": 1, "committed": 7},
        "conflicts": 2,
        "in_doubt": 1,
        "oldest_in_doubt_seconds": 4.2,
    }
    assert (
        "transactions: 1 cancelled, 7 committed · 2 conflicts · 1 in doubt (oldest 4 s)"
        in text_of(document)
    )


def test_json_prints_the_snapshot_as_it_came(monkeypatch):
    document = realistic()
    monkeypatch.setattr(status, "fetch", lambda endpoint: document)
    console = Console(record=True, width=80, color_system=None)
    assert status.run("http://router", console, as_json=True) == 0
    assert json.loads(console.export_text()) == document


def test_a_replicated_partition_lists_its_replicas_leader_lag_and_the_unreported():
    table = orders()
    replicated = partition("t1-0", "n1", "up", 0, 1)
    replicated["replicas"] = [
        {"node": "n1", "role": "follower", "lag": 14, "node_state": "up"},
        {"node": "n2", "role": None, "node_state": "unreachable"},
        {"node": "n3", "role": "leader", "lag": 0, "node_state": "up"},
    ]
    caught_up = partition("t1-1", "n1", "up", 0, 1)
    caught_up["replicas"] = [
        {"node": "n1", "role": "leader", "lag": 0, "node_state": "up"},
        {"node": "n3", "role": "follower", "lag": 0, "node_state": "up"},
        {"node": "n4", "role": "copying", "lag": None, "node_state": "up"},
    ]
    table["partitions"] = [replicated, caught_up]
    text = text_of(snapshot([table]))
    assert "n1 -14 n2? (unreachable) n3*" in text
    assert "n1* n3 n4 (copying)" in text
