"""core.catalog: a table's DynamoDB stream (StreamSpecification) and its transitions."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from core import catalog
from core.catalog import ClosedShard, StreamDef, StreamViewType, TableDef, TableStatus, Throughput
from core.errors import ResourceInUse, StaleEpoch, ValidationError
from core.keys import KeyShape
from core.token_bucket import BillingMode

NOW = datetime(2024, 3, 1, 22, 0, 5, 123000, tzinfo=UTC).timestamp()
TABLE_ID = "0123456789abcdef0123456789abcdef"


def new_table(stream_view_type: StreamViewType | None = None) -> TableDef:
    table = catalog.created(
        name="Music",
        table_id=TABLE_ID,
        key_shape=KeyShape.table(("pk", "S"), None),
        attribute_definitions=[("pk", "S")],
        billing_mode=BillingMode.PAY_PER_REQUEST,
        throughput=Throughput(),
        now=NOW,
        owner=lambda _: "node-1",
        stream_view_type=stream_view_type,
    )
    return catalog.activated(table)


def closed(table: TableDef, end_seq: int = 7) -> list[ClosedShard]:
    """Every partition of `table` closed at `end_seq`."""
    return [ClosedShard(partition, end_seq) for partition in (*table.retired, *table.partitions)]


def disabled(table: TableDef, now: float = NOW) -> TableDef:
    return catalog.stream_disabled(table, closed(table), now)


def test_created_with_a_stream_names_it_by_its_time() -> None:
    table = new_table(StreamViewType.NEW_IMAGE)
    assert table.stream == StreamDef("2024-03-01T22:00:05.123", StreamViewType.NEW_IMAGE, NOW)
    assert table.stream.consumer == "stream/2024-03-01T22:00:05.123"
    assert new_table().stream is None


def test_stream_survives_the_descriptor_round_trip() -> None:
    table = disabled(new_table(StreamViewType.KEYS_ONLY))
    again = catalog.stream_enabled(table, StreamViewType.NEW_IMAGE, "2024-03-01T22:00:06.000", NOW)
    assert TableDef.from_json(table.to_json()) == table
    assert TableDef.from_json(again.to_json()) == again
    assert TableDef.from_json(new_table().to_json()).stream is None


def test_enable_disable_enable_makes_a_new_stream_with_a_new_label() -> None:
    table = new_table()
    label = catalog.stream_label(NOW, table.stream)
    enabled = catalog.stream_enabled(table, StreamViewType.OLD_IMAGE, label, NOW)
    assert enabled.stream is not None and enabled.stream.enabled
    off = catalog.stream_disabled(enabled, closed(enabled), NOW + 2)
    assert off.stream == StreamDef(
        label, StreamViewType.OLD_IMAGE, NOW, False, NOW + 2, tuple(closed(enabled))
    )
    # Enabled again in the same millisecond: the label still differs.
    again_label = catalog.stream_label(NOW, off.stream)
    assert again_label == "2024-03-01T22:00:05.124"
    again = catalog.stream_enabled(off, StreamViewType.NEW_IMAGE, again_label, NOW)
    assert again.stream == StreamDef(again_label, StreamViewType.NEW_IMAGE, NOW)
    # The disabled stream is kept beside the new one, readable for the retention.
    assert again.previous_streams == (off.stream,)


def test_closed_shards_must_be_the_tables_partitions() -> None:
    table = new_table(StreamViewType.KEYS_ONLY)
    with pytest.raises(StaleEpoch):
        catalog.stream_disabled(table, closed(table)[1:], NOW)
    parent = table.partitions[0]
    storage_key = bytes.fromhex("2000000000000000")
    split = catalog.split(table, parent.id, storage_key, "low", "high", now=NOW)[0]
    with pytest.raises(StaleEpoch):  # A split came after the ends were read.
        catalog.stream_disabled(split, closed(table), NOW)
    assert catalog.stream_disabled(split, closed(split), NOW).stream is not None


def test_a_disabled_stream_expires_after_the_retention_and_is_let_go() -> None:
    retention = 100.0
    first = disabled(new_table(StreamViewType.KEYS_ONLY), NOW)
    assert first.stream is not None
    label = catalog.stream_label(NOW + 10, first.stream)
    second = disabled(
        catalog.stream_enabled(first, StreamViewType.NEW_IMAGE, label, NOW + 10), NOW + 50
    )
    assert second.stream is not None
    old, latest = first.stream, second.stream
    assert old.readable(NOW + retention, retention)
    assert not old.readable(NOW + retention + 1, retention)
    assert catalog.streams_expired(second, NOW + retention, retention) == ()
    assert catalog.streams_expired(second, NOW + retention + 1, retention) == (old,)
    both = catalog.streams_expired(second, NOW + 50 + retention + 1, retention)
    assert both == (old, latest)
    dropped = catalog.streams_dropped(second, [s.label for s in both])
    assert dropped.previous_streams == ()
    # DescribeTable still names the latest stream; its shards are forgotten, so it is let go once.
    assert dropped.stream is not None and dropped.stream.label == latest.label
    assert dropped.stream.shards == ()
    assert catalog.streams_expired(dropped, NOW + 10**6, retention) == ()
    assert catalog.streams_dropped(dropped, ["no-such-label"]) is dropped


def test_enabling_an_enabled_stream_is_refused_whatever_the_view_type() -> None:
    table = new_table(StreamViewType.KEYS_ONLY)
    label = catalog.stream_label(NOW + 1, table.stream)
    with pytest.raises(ValidationError) as raised:
        catalog.stream_enabled(table, StreamViewType.NEW_IMAGE, label, NOW + 1)
    assert raised.value.message == "Table already has an enabled stream: TableName: Music"


def test_disabling_without_an_enabled_stream_is_refused() -> None:
    with pytest.raises(ValidationError):
        catalog.stream_disabled(new_table(), [], NOW)
    with pytest.raises(ValidationError):
        off = disabled(new_table(StreamViewType.KEYS_ONLY))
        catalog.stream_disabled(off, closed(off), NOW)


def test_a_table_being_updated_or_deleted_cannot_change_its_stream() -> None:
    table = new_table()
    for status in (TableStatus.UPDATING, TableStatus.DELETING):
        busy = catalog.versioned(table, 2)
        busy = TableDef.from_json({**busy.to_json(), "status": status.value})
        with pytest.raises(ResourceInUse):
            catalog.stream_enabled(busy, StreamViewType.KEYS_ONLY, "2024-03-01T22:00:06.000", NOW)


def test_a_streamed_table_keeps_its_retired_partitions_until_their_logs_go() -> None:
    table = new_table(StreamViewType.KEYS_ONLY)
    first = table.partitions[0]
    once, low, _ = catalog.split(
        table, first.id, bytes.fromhex("2000000000000000"), "a", "b", now=NOW
    )
    twice = catalog.split(once, low.id, bytes.fromhex("1000000000000000"), "c", "d", now=NOW)[0]
    twice = catalog.split(twice, "b", bytes.fromhex("3000000000000000"), "e", "f", now=NOW)[0]
    # The first parent is no serving partition's parent now, but the stream still reads it.
    assert [p.id for p in twice.retired] == [first.id, "a", "b"]
    assert [p.id for p in catalog.lineage_only(twice)] == [first.id]
    dropped = catalog.retired_dropped(twice, [first.id, "a"])
    assert [p.id for p in dropped.retired] == ["a", "b"]  # A serving partition's parent stays.
    assert catalog.retired_dropped(dropped, [first.id]) is dropped
    # Without an enabled stream only the serving partitions' parents are kept, as before.
    off = disabled(
        catalog.split(once, "b", bytes.fromhex("3000000000000000"), "e", "f", now=NOW)[0]
    )
    again = catalog.split(off, low.id, bytes.fromhex("1000000000000000"), "c", "d", now=NOW)[0]
    assert [p.id for p in again.retired] == ["b", "a"]
