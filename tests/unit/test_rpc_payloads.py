"""The typed payloads of `rpc.ops`: their JSON is the wire schema; absent fields are defaults."""

from __future__ import annotations

from typing import Any

import pytest

from rpc import ops

ITEM = {"pk": {"S": "a"}, "n": {"N": "1"}}
KEY = {"pk": {"S": "a"}}

# One payload of every class with every field set, and the wire field names it must use.
FULL: list[tuple[Any, set[str]]] = [
    (
        ops.GetPayload(KEY, "#n", {"#n": "n"}),
        {"key", "projection", "names"},
    ),
    (
        ops.PutPayload(ITEM, 20, "attribute_not_exists(#n)", {"#n": "pk"}, None, "ALL_OLD", True),
        {
            "item",
            "item_bytes",
            "condition",
            "names",
            "values",
            "return_values",
            "return_on_failure",
        },
    ),
    (
        ops.UpdatePayload(KEY, "SET #n = :v", None, {"#n": "n"}, {":v": {"N": "2"}}, "ALL_NEW"),
        {"key", "update", "condition", "names", "values", "return_values", "return_on_failure"},
    ),
    (
        ops.DeletePayload(KEY, "#n = :v", {"#n": "n"}, {":v": {"N": "1"}}, "ALL_OLD", True),
        {"key", "condition", "names", "values", "return_values", "return_on_failure"},
    ),
    (
        ops.QueryPayload(
            {"S": "a"},
            {"op": "begins_with", "values": [{"S": "x"}]},
            False,
            ITEM,
            5,
            "#n > :v",
            "#n",
            {"#n": "n"},
            {":v": {"N": "0"}},
            "SPECIFIC_ATTRIBUTES",
            1000,
            "LastPostIndex",
            True,
            [{"N": "3"}, {"B": "AQ=="}],
        ),
        {
            "hash_value",
            "fixed",
            "range",
            "forward",
            "exclusive_start",
            "limit",
            "filter",
            "projection",
            "names",
            "values",
            "select",
            "page_bytes",
            "index",
            "fetch",
        },
    ),
    (
        ops.ScanPayload(
            KEY, 3, None, None, None, None, "COUNT", 500, 0, 1 << 63, "LastPostIndex", True
        ),
        {
            "exclusive_start",
            "limit",
            "filter",
            "projection",
            "names",
            "values",
            "select",
            "page_bytes",
            "hash_start",
            "hash_end",
            "index",
            "fetch",
        },
    ),
    (
        ops.CreatePartitionPayload({"id": "t"}, {"id": "p"}, {"read": 1}, ["gsi"]),
        {"table", "partition", "throughput", "consumers"},
    ),
    (
        ops.IndexApplyPayload.of("t-0", [{"seq": 1, "put": ITEM, "delete": None}], True, 3),
        {"parts"},
    ),
    (
        ops.IndexApplyPart("t-0", [{"seq": 1, "put": ITEM, "delete": None}], True, 3),
        {"source", "changes", "backfill", "lease_epoch"},
    ),
    (
        ops.IndexPressurePayload(
            "t", "ByGame", "g-0", "", "8000", [{"reason": "r", "resource": "x"}], 1.0
        ),
        {"table_id", "index", "partition_id", "start", "end", "reasons", "seconds"},
    ),
    (ops.DropTablePayload("t"), {"table_id"}),
    (
        ops.RetirePartitionPayload("t", "p", 3, ["p", "q"]),
        {"table_id", "partition_id", "epoch", "children"},
    ),
    (ops.TableStatsPayload("t"), {"table_id"}),
    (ops.UpdateThroughputPayload("t", {"version": 2}), {"table_id", "throughput"}),
    (ops.PartitionThroughputPayload("t"), {"table_id"}),
    (ops.RegisterConsumerPayload("c", 4), {"consumer", "seq"}),
    (ops.CheckpointPayload("c", 4), {"consumer", "seq"}),
    (ops.UnregisterConsumerPayload("c"), {"consumer"}),
]


@pytest.mark.parametrize(("payload", "fields"), FULL, ids=lambda p: type(p).__name__)
def test_a_payload_travels_as_its_fields_and_comes_back_equal(
    payload: Any, fields: set[str]
) -> None:
    body = payload.to_json()
    assert set(body) == fields
    assert type(payload).from_json(body) == payload


def test_absent_optional_fields_read_as_their_defaults() -> None:
    assert ops.PutPayload.from_json({"item": ITEM}) == ops.PutPayload(ITEM)
    put = ops.PutPayload.from_json({"item": ITEM, "return_values": None})
    assert (put.return_values, put.return_on_failure, put.item_bytes) == ("NONE", False, None)
    assert ops.DeletePayload.from_json({"key": KEY}) == ops.DeletePayload(KEY)
    assert ops.UpdatePayload.from_json({"key": KEY}) == ops.UpdatePayload(KEY)
    query = ops.QueryPayload.from_json({"hash_value": {"S": "a"}})
    assert (query.forward, query.range, query.select) == (True, None, "ALL_ATTRIBUTES")
    assert ops.ScanPayload.from_json({}) == ops.ScanPayload()
    assert ops.RegisterConsumerPayload.from_json({"consumer": "c"}).seq is None
    assert ops.PartitionThroughputPayload.from_json({}).table_id is None


def test_only_a_true_return_on_failure_asks_for_the_old_item() -> None:
    assert not ops.DeletePayload.from_json(
        {"key": KEY, "return_on_failure": "yes"}
    ).return_on_failure


def test_a_missing_required_field_does_not_decode() -> None:
    with pytest.raises(KeyError):
        ops.GetPayload.from_json({"projection": "#n"})
    with pytest.raises(KeyError):
        ops.CheckpointPayload.from_json({"consumer": "c"})
