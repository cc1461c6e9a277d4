"""`dynalab status`'s rendering of a cluster snapshot (the document of `GET /admin/cluster`)."""

from __future__ import annotations

from rich.console import Console

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


def test_nodes_tables_partitions_and_indexes():
    table = {
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
                "backfill": {"partitions_done": 1, "partitions": 4},
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
    text = text_of(snapshot([table]))
    lines = {
        line.split("│")[1].strip() + "|" + line.split("│")[2].strip(): line
        for line in text.splitlines()
        if line.startswith("│")
    }
    assert "unreachable" in lines["n2|a:2"] and "60 s ago" in lines["n2|a:2"]
    assert "up" in lines["n1|a:1"] and "yes" in lines["n1|a:1"]
    orders = lines["orders|ACTIVE"]
    for shown in (
        "5 RCU / 10 WCU",
        "2.0 KiB",
        "2 (1 not reporting)",
        "12",
        "gsi_replicator 42",
        "9",
    ):
        assert shown in orders
    assert "2.5 / 5.0" in lines["orders|p0"] and "0.0-50.0%" in lines["orders|p0"]
    assert "n2 (unreachable)" in lines["orders|p1"] and "?" in lines["orders|p1"]
    assert "n1" in lines["orders / by-x|p0"]
    assert "BACKFILLING" in lines["orders|by-x"] and "1/4" in lines["orders|by-x"]
    assert "KEYS_ONLY" in lines["orders|by-y"]


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
