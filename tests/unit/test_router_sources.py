"""router.sources: the router's clock, randomness and ids are injected, so seeded runs replay.

Table ids, creation times and the UTC-day count of throughput decreases are checked through
`router.tables` and the pure transitions of `core.catalog` (on the tables' descriptor dicts); the
compare-and-set backoff through a `RouterContext` whose catalog reads and writes are replaced, so
nothing here touches the network.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from core import catalog, limits
from core.catalog import CatalogLocation, TableDef
from core.errors import ConditionalCheckFailed, ServiceUnavailable
from router import tables
from router.context import RouterContext
from router.protocol import JsonProtocol, RequestIds
from router.sources import ManualClock, Sources

START = datetime(2024, 3, 1, 22, 0, tzinfo=UTC).timestamp()
HOUR_SECONDS = 3600.0


def create_body(read: int = 10, write: int = 10) -> dict[str, Any]:
    return {
        "TableName": "things",
        "AttributeDefinitions": [{"AttributeName": "pk", "AttributeType": "S"}],
        "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}],
        "ProvisionedThroughput": {"ReadCapacityUnits": read, "WriteCapacityUnits": write},
    }


def new_table(sources: Sources, read: int = 10, write: int = 10) -> dict[str, Any]:
    definition = tables._read_create_table(create_body(read, write))
    return tables._new_table(definition, sources, lambda partition_id: "node-1").to_json()


def updated(
    table: dict[str, Any], billing_mode: None, units: dict[str, int], now: float
) -> dict[str, Any] | None:
    """UpdateTable's transition of `core.catalog` on a table descriptor, once the nodes have
    taken the previous update (the table is ACTIVE again)."""
    record = TableDef.from_json(table)
    if record.status == catalog.TableStatus.UPDATING:
        record = catalog.activated(record)
    record = catalog.throughput_updated(record, billing_mode, units, now, "us-east-1")
    return None if record is None else record.to_json()


def describe(table: dict[str, Any], items: int, size_bytes: int, now: float) -> dict[str, Any]:
    return tables._description(TableDef.from_json(table), tables._Stats(items, size_bytes), now)


def units(read: int, write: int) -> dict[str, int]:
    return {"ReadCapacityUnits": read, "WriteCapacityUnits": write}


# Sources -----------------------------------------------------------------------------------------


def test_seeded_sources_replay_their_ids() -> None:
    first, second = Sources.seeded(7, START), Sources.seeded(7, START)
    ids = [first.new_id() for _ in range(5)]
    assert ids == [second.new_id() for _ in range(5)]
    assert len(set(ids)) == 5
    assert all(re.fullmatch("[0-9a-f]{32}", table_id) for table_id in ids)
    assert Sources.seeded(8, START).new_id() != ids[0]


def test_seeded_ids_do_not_depend_on_backoff_draws() -> None:
    quiet, busy = Sources.seeded(7, START), Sources.seeded(7, START)
    busy.rng.random()
    assert quiet.new_id() == busy.new_id()


def test_manual_clock_moves_only_when_told() -> None:
    sources = Sources.seeded(7, START)
    assert sources.clock() == sources.clock() == START
    assert isinstance(sources.clock, ManualClock)
    sources.clock.advance(1.5)
    assert sources.clock() == START + 1.5


def test_system_sources_draw_fresh_ids() -> None:
    sources = Sources.system()
    assert sources.new_id() != sources.new_id()
    assert re.fullmatch("[0-9a-f]{32}", sources.new_id())


# Table ids and creation times --------------------------------------------------------------------


def test_new_table_takes_its_id_and_creation_time_from_the_sources() -> None:
    table = new_table(Sources.seeded(7, START))
    assert table == new_table(Sources.seeded(7, START))
    assert table["id"] == Sources.seeded(7, START).new_id()
    assert table["created"] == START
    assert table["status"] == "CREATING"
    assert [partition["id"] for partition in table["partitions"]] == [f"{table['id']}-0"]
    assert new_table(Sources.seeded(8, START))["id"] != table["id"]

    description = describe(table, 0, 0, START)
    assert description["TableId"] == str(uuid.UUID(hex=table["id"]))
    assert description["CreationDateTime"] == START


def test_creation_time_follows_the_clock() -> None:
    sources = Sources.seeded(7, START)
    first = new_table(sources)
    assert isinstance(sources.clock, ManualClock)
    sources.clock.advance(60.0)
    second = new_table(sources)
    assert second["created"] == START + 60.0
    assert second["id"] != first["id"]


# Decreases per UTC day ---------------------------------------------------------------------------


def test_decreases_are_counted_per_utc_day() -> None:
    sources = Sources.seeded(7, START)
    clock = sources.clock
    assert isinstance(clock, ManualClock)
    table = {**new_table(sources), "status": "ACTIVE"}

    clock.advance(HOUR_SECONDS)  # 23:00 UTC on 1 March.
    first = updated(table, None, units(5, 5), clock())
    assert first is not None
    changes = first["throughput_changes"]
    assert changes["decreases"] == 1
    assert changes["decreases_day"] == "2024-03-01"
    assert changes["last_decrease"] == START + HOUR_SECONDS

    clock.advance(HOUR_SECONDS / 2)  # 23:30 UTC: the same day.
    second = updated(first, None, units(4, 4), clock())
    assert second is not None
    assert second["throughput_changes"]["decreases"] == 2
    provisioned = describe(second, 0, 0, clock())["ProvisionedThroughput"]
    assert provisioned["NumberOfDecreasesToday"] == 2
    assert provisioned["LastDecreaseDateTime"] == START + 1.5 * HOUR_SECONDS

    # An increase is not a decrease: the count stays.
    increased = updated(second, None, units(8, 8), clock())
    assert increased is not None
    assert increased["throughput_changes"]["decreases"] == 2
    assert increased["throughput_changes"]["last_increase"] == clock()

    clock.advance(HOUR_SECONDS)  # 00:30 UTC on 2 March: a new day, no decreases yet.
    provisioned = describe(increased, 0, 0, clock())["ProvisionedThroughput"]
    assert provisioned["NumberOfDecreasesToday"] == 0
    third = updated(increased, None, units(2, 2), clock())
    assert third is not None
    assert third["throughput_changes"]["decreases"] == 1
    assert third["throughput_changes"]["decreases_day"] == "2024-03-02"


# Compare-and-set backoff and request ids ---------------------------------------------------------


async def test_catalog_backoff_draws_from_the_injected_random(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ctx = RouterContext({"node-1": "127.0.0.1:1"}, "test", sources=Sources.seeded(3, START))
    ctx.location = CatalogLocation("node-1")
    table = TableDef.from_json(new_table(Sources.seeded(3, START)))

    async def read_table(name: str) -> TableDef | None:
        return None

    async def write_row(*args: Any) -> TableDef:
        raise ConditionalCheckFailed()

    pauses: list[float] = []
    real_sleep = asyncio.sleep

    async def sleep(seconds: float) -> None:
        pauses.append(seconds)
        await real_sleep(0)

    monkeypatch.setattr(ctx.catalog_client, "read_table", read_table)
    monkeypatch.setattr(ctx.catalog_client, "_write", write_row)
    monkeypatch.setattr(ctx.catalog_client, "sleep", sleep)
    try:
        with pytest.raises(ServiceUnavailable):
            await ctx.change_table(table.name, lambda current: table)
    finally:
        monkeypatch.undo()
        await ctx.close()

    reference = Sources.seeded(3, START).rng
    # A pause between attempts, none after the last (it gives up at once).
    expected = [
        reference.uniform(0, limits.CATALOG_CAS_BACKOFF_SECONDS_MAX)
        for _ in range(limits.CATALOG_CAS_ATTEMPTS_MAX - 1)
    ]
    assert pauses == expected
    other = Sources.seeded(4, START).rng
    assert pauses[0] != other.uniform(0, limits.CATALOG_CAS_BACKOFF_SECONDS_MAX)


async def test_request_ids_take_their_prefix_from_the_context_sources() -> None:
    ctx = RouterContext({"node-1": "127.0.0.1:1"}, "test", sources=Sources.seeded(5, START))
    try:
        protocol = JsonProtocol(ctx, {})
        reference = RequestIds(Sources.seeded(5, START).new_id())
        ids = [protocol.new_request_id() for _ in range(3)]
        assert ids == [reference() for _ in range(3)]
        prefix = Sources.seeded(5, START).new_id().upper()
        assert ids == [f"{prefix}{number:020d}" for number in range(3)]
    finally:
        await ctx.close()
