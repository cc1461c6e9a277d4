"""Back-pressure from a global index's own write capacity on a base partition's node: once the
GSI replicator notes an index partition as refusing its writes (`index_pressure`), the node
refuses exactly the base writes that would change an entry in that partition, with DynamoDB's
ProvisionedThroughputExceededException for global indexes and the index partition's reason,
until the note is released or expires; nothing of a refused write is applied."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from core import limits
from core.catalog import IndexDef
from core.errors import (
    GSI_THROTTLED,
    DynamoError,
    OnDemandThrottled,
    ThrottlingReason,
    ThroughputExceeded,
    ValidationError,
)
from core.indexes import entry_shape
from core.keycodec import HASH_SPACE
from core.keys import KeyAttribute, KeyShape
from core.placement import hash_bound
from rpc import ops
from storagenode.node import StorageNode
from storagenode.store import Store
from tests import envelope
from tests.unit.test_storage_transactions import Clock

TABLE = {"id": "c4" * 16, "name": "Scores", "key_schema": {"hash": ["pk", "S"], "range": None}}
TARGET = {"table_id": TABLE["id"], "partition_id": "p0", "epoch": 1}
MIDDLE = hash_bound(HASH_SPACE // 2)
REASON = {
    "reason": "IndexWriteProvisionedThroughputExceeded",
    "resource": "Scores/index/ByGame",
}


def named(name: str, attribute: str, status: str = "ACTIVE", **more: Any) -> dict[str, Any]:
    return {
        "name": name,
        "key": [[attribute, "S", "partition"]],
        "projection": "KEYS_ONLY",
        "status": status,
        **more,
    }


INDEXES = [named("ByGame", "game"), named("ByLevel", "level")]


@pytest.fixture
def base(tmp_path: Path) -> Iterator[tuple[StorageNode, Clock]]:
    store = Store(tmp_path)
    clock = Clock()
    node = StorageNode(store, clock=clock)
    partition = {"id": "p0", "start": "", "end": None, "epoch": 1, "node": "n1"}
    write(node, ops.CREATE_PARTITION, {"table": TABLE, "partition": partition})
    yield node, clock
    store.close()


def write(node: StorageNode, op: str, body: dict[str, Any]) -> dict[str, Any]:
    (result,) = envelope.apply(node, [(op, body)])
    if isinstance(result, DynamoError):
        raise result
    return result


def put(node: StorageNode, **attributes: str) -> dict[str, Any]:
    item = {name: {"S": value} for name, value in attributes.items()}
    return write(node, ops.PUT, {**TARGET, "item": item, "global_indexes": INDEXES})


def get(node: StorageNode, pk: str) -> dict[str, Any] | None:
    reply = envelope.read(node, ops.GET, {**TARGET, "key": {"pk": {"S": pk}}})
    item: dict[str, Any] | None = reply.get("item")
    return item


def press(node: StorageNode, end: str | None = MIDDLE, **more: Any) -> None:
    body = {
        "table_id": TABLE["id"],
        "index": "ByGame",
        "partition_id": "g-0",
        "start": "",
        "end": end,
        "reasons": [REASON],
        "seconds": limits.GSI_INDEX_PRESSURE_SECONDS,
        **more,
    }
    assert envelope.read(node, ops.INDEX_PRESSURE, body) == {}


def low_and_high_games() -> tuple[str, str]:
    """A game whose ByGame entry is in the lower half of the index's keys, and one above."""
    by_game = IndexDef.from_json(named("ByGame", "game"))
    shape = entry_shape(by_game, KeyShape((KeyAttribute("pk", "S", "partition"),)))
    low = high = None
    for number in range(100):
        game = f"game-{number}"
        key = shape.storage_key({"pk": {"S": "x"}, "game": {"S": game}})
        if key < bytes.fromhex(MIDDLE):
            low = low or game
        else:
            high = high or game
    assert low is not None and high is not None
    return low, high


def test_writes_changing_a_pressed_index_partition_are_refused_and_others_pass(
    base: tuple[StorageNode, Clock],
) -> None:
    node, _ = base
    low, high = low_and_high_games()
    put(node, pk="before", game=low)
    press(node)
    with pytest.raises(ThroughputExceeded) as refused:
        put(node, pk="new", game=low)
    assert refused.value.message == GSI_THROTTLED
    assert refused.value.extra_fields() == {"ThrottlingReasons": [REASON]}
    assert get(node, "new") is None  # Refused whole: nothing applied.
    with pytest.raises(ThroughputExceeded):  # Its entry would be deleted.
        write(
            node, ops.DELETE, {**TARGET, "key": {"pk": {"S": "before"}}, "global_indexes": INDEXES}
        )
    with pytest.raises(ThroughputExceeded):  # Moved out of the pressed partition.
        put(node, pk="before", game=high)
    # The index's other partition, another index, no index at all, an unprojected attribute.
    put(node, pk="other", game=high)
    put(node, pk="level", level="3")
    put(node, pk="plain")
    write(
        node,
        ops.UPDATE,
        {
            **TARGET,
            "key": {"pk": {"S": "before"}},
            "update": "SET note = :n",
            "values": {":n": {"S": "x"}},
            "global_indexes": INDEXES,
        },
    )
    assert get(node, "before") is not None and get(node, "before")["note"] == {"S": "x"}  # type: ignore[index]


def test_a_released_or_expired_note_holds_nothing_back(base: tuple[StorageNode, Clock]) -> None:
    node, clock = base
    low, _ = low_and_high_games()
    press(node)
    with pytest.raises(ThroughputExceeded):
        put(node, pk="a", game=low)
    press(node, reasons=[])  # Released: the index partition took the replicator's writes.
    put(node, pk="a", game=low)
    press(node)
    clock.now += limits.GSI_INDEX_PRESSURE_SECONDS
    put(node, pk="b", game=low)  # Not renewed within its time.


def test_a_note_holds_at_most_the_pressure_time_whatever_it_asks(
    base: tuple[StorageNode, Clock],
) -> None:
    node, clock = base
    low, _ = low_and_high_games()
    press(node, seconds=3600.0)
    clock.now += limits.GSI_INDEX_PRESSURE_SECONDS
    put(node, pk="a", game=low)


def test_an_online_index_is_held_back_for_once_active_and_not_while_copied(
    base: tuple[StorageNode, Clock],
) -> None:
    node, _ = base
    low, _ = low_and_high_games()
    press(node, end=None)
    copying = [named("ByGame", "game", "BACKFILLING", table_id="e7" * 16, online=True)]
    item = {"pk": {"S": "a"}, "game": {"S": low}}
    write(node, ops.PUT, {**TARGET, "item": item, "global_indexes": copying})
    active = [named("ByGame", "game", "ACTIVE", table_id="e7" * 16, online=True)]
    item = {"pk": {"S": "b"}, "game": {"S": low}}
    with pytest.raises(ThroughputExceeded):
        write(node, ops.PUT, {**TARGET, "item": item, "global_indexes": active})


def test_an_on_demand_table_is_held_back_with_throttling_exception(tmp_path: Path) -> None:
    node = StorageNode(Store(tmp_path))
    partition = {"id": "p0", "start": "", "end": None, "epoch": 1, "node": "n1"}
    on_demand = {"billing_mode": "PAY_PER_REQUEST", "partition_count": 1}
    body = {"table": TABLE, "partition": partition, "throughput": on_demand}
    write(node, ops.CREATE_PARTITION, body)
    press(node, end=None, reasons=[{**REASON, "reason": "IndexWriteKeyRangeThroughputExceeded"}])
    with pytest.raises(OnDemandThrottled) as refused:
        put(node, pk="a", game="chess")
    assert refused.value.type_name == "ThrottlingException"
    assert refused.value.reasons == (
        ThrottlingReason("IndexWriteKeyRangeThroughputExceeded", "Scores/index/ByGame"),
    )
    node.store.close()


@pytest.mark.parametrize(
    "bad",
    [
        {"start": "zz"},
        {"end": "not hex"},
        {"reasons": ["IndexWriteProvisionedThroughputExceeded"]},
        {"reasons": [{"reason": "x"}]},
    ],
)
def test_a_malformed_note_is_refused_and_changes_nothing(
    base: tuple[StorageNode, Clock], bad: dict[str, Any]
) -> None:
    node, _ = base
    low, _ = low_and_high_games()
    with pytest.raises(ValidationError):
        press(node, **bad)
    put(node, pk="a", game=low)
