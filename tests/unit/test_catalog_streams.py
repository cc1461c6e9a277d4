"""core.catalog: a table's DynamoDB stream (StreamSpecification) and its transitions."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from core import catalog
from core.catalog import StreamDef, StreamViewType, TableDef, TableStatus, Throughput
from core.errors import ResourceInUse, ValidationError
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


def test_created_with_a_stream_names_it_by_its_time() -> None:
    table = new_table(StreamViewType.NEW_IMAGE)
    assert table.stream == StreamDef("2024-03-01T22:00:05.123", StreamViewType.NEW_IMAGE, NOW)
    assert table.stream.consumer == "stream/2024-03-01T22:00:05.123"
    assert new_table().stream is None


def test_stream_survives_the_descriptor_round_trip() -> None:
    table = catalog.stream_disabled(new_table(StreamViewType.KEYS_ONLY))
    assert TableDef.from_json(table.to_json()) == table
    assert TableDef.from_json(new_table().to_json()).stream is None


def test_enable_disable_enable_makes_a_new_stream_with_a_new_label() -> None:
    table = new_table()
    label = catalog.stream_label(NOW, table.stream)
    enabled = catalog.stream_enabled(table, StreamViewType.OLD_IMAGE, label, NOW)
    assert enabled.stream is not None and enabled.stream.enabled
    disabled = catalog.stream_disabled(enabled)
    assert disabled.stream == StreamDef(label, StreamViewType.OLD_IMAGE, NOW, enabled=False)
    # Enabled again in the same millisecond: the label still differs.
    again_label = catalog.stream_label(NOW, disabled.stream)
    assert again_label == "2024-03-01T22:00:05.124"
    again = catalog.stream_enabled(disabled, StreamViewType.NEW_IMAGE, again_label, NOW)
    assert again.stream == StreamDef(again_label, StreamViewType.NEW_IMAGE, NOW)


def test_enabling_an_enabled_stream_is_refused_whatever_the_view_type() -> None:
    table = new_table(StreamViewType.KEYS_ONLY)
    label = catalog.stream_label(NOW + 1, table.stream)
    with pytest.raises(ValidationError) as raised:
        catalog.stream_enabled(table, StreamViewType.NEW_IMAGE, label, NOW + 1)
    assert raised.value.message == "Table already has an enabled stream: TableName: Music"


def test_disabling_without_an_enabled_stream_is_refused() -> None:
    with pytest.raises(ValidationError):
        catalog.stream_disabled(new_table())
    with pytest.raises(ValidationError):
        catalog.stream_disabled(catalog.stream_disabled(new_table(StreamViewType.KEYS_ONLY)))


def test_a_table_being_updated_or_deleted_cannot_change_its_stream() -> None:
    table = new_table()
    for status in (TableStatus.UPDATING, TableStatus.DELETING):
        busy = catalog.versioned(table, 2)
        busy = TableDef.from_json({**busy.to_json(), "status": status.value})
        with pytest.raises(ResourceInUse):
            catalog.stream_enabled(busy, StreamViewType.KEYS_ONLY, "2024-03-01T22:00:06.000", NOW)
