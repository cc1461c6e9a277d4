"""A global index partition on a node: entries keyed by (index key, table key), applied with
`index_apply` idempotently per source partition, read with query and scan, dropped with its index.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from core.errors import (
    DynamoError,
    LeaseFenced,
    StaleEpoch,
    ThroughputExceeded,
    ValidationError,
)
from core.size import item_size_bytes
from rpc import ops
from storagenode.node import StorageNode
from storagenode.store import Store
from storagenode.throughput import NodeThroughput
from tests import envelope

# GameTitleIndex of GameScores (seed 001 G-02): index key (GameTitle S, TopScore N), then the
# table key UserId (the table's sort key GameTitle is already in the index key).
INDEX = {
    "id": "e5" * 16,
    "name": "GameScores.GameTitleIndex",
    "key_schema": [
        ["GameTitle", "S", "partition"],
        ["TopScore", "N", "sort"],
        ["UserId", "S", "partition"],
    ],
}
SOURCE = "f6" * 16 + "-0"


def s(text: str) -> dict[str, str]:
    return {"S": text}


def n(number: int) -> dict[str, str]:
    return {"N": str(number)}


def entry(user: str, title: str, score: int) -> dict[str, Any]:
    return {"UserId": s(user), "GameTitle": s(title), "TopScore": n(score)}


PART_FIELDS = ("source", "changes", "backfill", "lease_epoch")


def one_part(body: dict[str, Any]) -> dict[str, Any]:
    """An index_apply body of one part, from a flat body naming the part's fields inline."""
    part = {name: body[name] for name in PART_FIELDS if name in body}
    rest = {name: value for name, value in body.items() if name not in PART_FIELDS}
    return {**rest, "parts": [part]}


class IndexNode:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.store = Store(path)
        self.node = StorageNode(self.store)

    def reopen(self) -> None:
        self.store.close()
        self.store = Store(self.path)
        self.node = StorageNode(self.store)

    def write(self, op: str, body: dict[str, Any]) -> dict[str, Any]:
        """A write's reply; an index_apply's body names one part's fields inline (`one_part`)
        and answers that part's reply, its own refusal raised."""
        if op == ops.INDEX_APPLY:
            body = one_part(body)
        (result,) = envelope.apply(self.node, [(op, body)])
        if isinstance(result, DynamoError):
            raise result
        if op == ops.INDEX_APPLY:
            (part,) = result["parts"]
            return ops.part_outcome(part)
        return result

    def apply(self, changes: list[dict[str, Any]], source: str = SOURCE) -> dict[str, Any]:
        body = {"table_id": INDEX["id"], "partition_id": "g0", "epoch": 1}
        return self.write(ops.INDEX_APPLY, {**body, "source": source, "changes": changes})

    def read(self, op: str, **body: Any) -> dict[str, Any]:
        target = {"table_id": INDEX["id"], "partition_id": "g0", "epoch": 1}
        return envelope.read(self.node, op, {**target, **body})

    def titles(self, title: str, **body: Any) -> list[dict[str, Any]]:
        return list(self.read(ops.QUERY, hash_value=s(title), **body)["items"])

    def stats(self) -> dict[str, Any]:
        reply = envelope.read(self.node, ops.TABLE_STATS, {"table_id": INDEX["id"]})
        return dict(reply["partitions"]["g0"])


@pytest.fixture
def index(tmp_path: Path) -> Iterator[IndexNode]:
    node = IndexNode(tmp_path / "node")
    partition = {"id": "g0", "start": "", "end": None, "epoch": 1, "node": "n1"}
    node.write(ops.CREATE_PARTITION, {"table": INDEX, "partition": partition})
    yield node
    node.store.close()


def test_entries_with_equal_index_keys_stay_distinct_and_query_in_index_order(
    index: IndexNode,
) -> None:
    # Seed 001 G-07: three users with Comet Quest and TopScore 0, all returned.
    index.apply(
        [
            {"seq": 1, "put": entry("301", "Comet Quest", 0)},
            {"seq": 2, "put": entry("123", "Comet Quest", 0)},
            {"seq": 3, "put": entry("201", "Comet Quest", 0)},
            {"seq": 4, "put": entry("101", "Comet Quest", 5)},
            {"seq": 5, "put": entry("101", "Meteor Blasters", 1000)},
        ]
    )
    equal = index.titles(
        "Comet Quest", range={"op": "=", "values": [n(0)]}
    )  # Key order breaks the tie: the table key.
    assert [item["UserId"]["S"] for item in equal] == ["123", "201", "301"]
    at_most = index.titles("Comet Quest", range={"op": "<=", "values": [n(0)]})
    assert len(at_most) == 3
    between = index.titles("Comet Quest", range={"op": "BETWEEN", "values": [n(0), n(5)]})
    assert len(between) == 4
    backwards = index.titles("Comet Quest", forward=False)
    assert [item["UserId"]["S"] for item in backwards] == ["101", "301", "201", "123"]
    assert index.stats()["items"] == 5


def test_a_page_names_the_entry_key_and_the_next_page_resumes_after_it(index: IndexNode) -> None:
    index.apply([{"seq": i, "put": entry(f"u{i}", "Comet Quest", 0)} for i in range(1, 6)])
    first = index.read(ops.QUERY, hash_value=s("Comet Quest"), limit=2)
    assert first["last_key"] == entry("u2", "Comet Quest", 0)
    rest = index.read(
        ops.QUERY, hash_value=s("Comet Quest"), exclusive_start=first["last_key"], limit=10
    )
    assert [item["UserId"]["S"] for item in rest["items"]] == ["u3", "u4", "u5"]
    scanned = index.read(ops.SCAN, exclusive_start=first["last_key"])
    assert len(scanned["items"]) == 3


def test_a_replayed_change_is_skipped_and_only_newer_ones_apply(index: IndexNode) -> None:
    first = index.apply(
        [
            {"seq": 1, "put": entry("1", "Comet Quest", 10)},
            {"seq": 2, "put": entry("2", "Comet Quest", 20)},
        ]
    )
    assert first == {
        "applied": 2,
        "source_seq": 2,
        "new_bytes": [item_size_bytes(entry("1", "Comet Quest", 10))] * 2,
        "units": 2.0,
    }
    # A replay from an earlier checkpoint, with one newer change: the old ones are skipped, even
    # the delete of seq 1 that would remove what seq 1 put... were it not already applied.
    replay = index.apply(
        [
            {"seq": 1, "put": entry("1", "Comet Quest", 10)},
            {"seq": 2, "put": entry("2", "Comet Quest", 20)},
            {
                "seq": 3,
                "delete": entry("2", "Comet Quest", 20),
                "put": entry("2", "Comet Quest", 30),
            },
        ]
    )
    assert (replay["applied"], replay["source_seq"]) == (1, 3)
    assert index.apply([{"seq": 3, "delete": entry("1", "Comet Quest", 10)}])["applied"] == 0
    scores = [item["TopScore"]["N"] for item in index.titles("Comet Quest")]
    assert scores == ["10", "30"]
    assert index.stats()["items"] == 2
    # Each source has its own seq: another base partition's seq 1 applies.
    other = index.apply([{"seq": 1, "put": entry("9", "Comet Quest", 1)}], source="other-0")
    assert other["applied"] == 1
    assert index.stats()["items"] == 3


def test_a_backfill_put_applies_whatever_the_seq_and_leaves_the_seq_as_it_is(
    index: IndexNode,
) -> None:
    index.apply([{"seq": 5, "put": entry("1", "Comet Quest", 10)}])
    body = {"table_id": INDEX["id"], "partition_id": "g0", "epoch": 1, "source": SOURCE}
    copy = [{"seq": 0, "put": entry("1", "Comet Quest", 10)}, {"seq": 0, "put": entry("2", "X", 1)}]
    reply = index.write(ops.INDEX_APPLY, {**body, "changes": copy, "backfill": True})
    assert (reply["applied"], reply["source_seq"]) == (2, 5)
    # The same page again (a resumed copy) changes nothing; the feed's next seq still applies.
    index.write(ops.INDEX_APPLY, {**body, "changes": copy, "backfill": True})
    assert index.stats()["items"] == 2
    assert index.apply([{"seq": 5, "delete": entry("1", "Comet Quest", 10)}])["applied"] == 0
    assert index.apply([{"seq": 6, "delete": entry("1", "Comet Quest", 10)}])["applied"] == 1
    assert index.stats()["items"] == 1


def test_a_source_under_an_older_lease_epoch_is_fenced_out(index: IndexNode) -> None:
    # A replicator that lost its lease (epoch 1) to another (epoch 2) without noticing: once the
    # new holder's epoch has reached the partition (its fence: a payload without changes), the
    # old holder's late writes, a backfill page above all, are refused whole.
    body = {"table_id": INDEX["id"], "partition_id": "g0", "epoch": 1, "source": SOURCE}
    old_put = [{"seq": 1, "put": entry("1", "Comet Quest", 10)}]
    assert index.write(ops.INDEX_APPLY, {**body, "changes": old_put, "lease_epoch": 1})["applied"]
    index.write(ops.INDEX_APPLY, {**body, "changes": [], "lease_epoch": 2})
    late_copy = [{"seq": 0, "put": entry("2", "Comet Quest", 20)}]
    with pytest.raises(LeaseFenced):
        index.write(
            ops.INDEX_APPLY, {**body, "changes": late_copy, "backfill": True, "lease_epoch": 1}
        )
    with pytest.raises(LeaseFenced):
        index.write(ops.INDEX_APPLY, {**body, "changes": [{"seq": 2, **late_copy[0]}]})
    assert [item["UserId"]["S"] for item in index.titles("Comet Quest")] == ["1"]
    # The new holder goes on from the seq the old one applied; the fence survives a restart.
    index.reopen()
    reply = index.write(
        ops.INDEX_APPLY,
        {
            **body,
            "changes": [
                {"seq": 1, "delete": entry("1", "Comet Quest", 10)},
                {"seq": 2, "put": entry("3", "X", 1)},
            ],
            "lease_epoch": 2,
        },
    )
    assert (reply["applied"], reply["source_seq"]) == (1, 2)
    with pytest.raises(LeaseFenced):
        index.write(ops.INDEX_APPLY, {**body, "changes": [], "lease_epoch": 1})
    # Each source is fenced on its own.
    other = {**body, "source": "other-0", "changes": old_put, "lease_epoch": 1}
    assert index.write(ops.INDEX_APPLY, other)["applied"] == 1


def test_the_applied_seq_survives_a_restart(index: IndexNode) -> None:
    index.apply([{"seq": 7, "put": entry("1", "Comet Quest", 10)}])
    index.reopen()
    assert index.apply([{"seq": 7, "delete": entry("1", "Comet Quest", 10)}])["applied"] == 0
    assert len(index.titles("Comet Quest")) == 1
    stats = index.stats()
    assert stats["items"] == 1
    assert stats["bytes"] == item_size_bytes(entry("1", "Comet Quest", 10))


def test_a_refused_change_applies_nothing_of_its_payload(index: IndexNode) -> None:
    with pytest.raises(ValidationError):
        index.apply(
            [
                {"seq": 1, "put": entry("1", "Comet Quest", 10)},
                {"seq": 2, "delete": {"GameTitle": s("Comet Quest")}},  # Not an entry key.
            ]
        )
    assert index.titles("Comet Quest") == []
    assert index.apply([{"seq": 1, "put": entry("1", "Comet Quest", 10)}])["applied"] == 1


def test_an_index_partition_is_addressed_by_epoch_and_dropped_with_its_sources(
    index: IndexNode,
) -> None:
    body = {"table_id": INDEX["id"], "partition_id": "g0", "epoch": 2, "source": SOURCE}
    with pytest.raises(StaleEpoch):
        index.write(ops.INDEX_APPLY, {**body, "changes": []})
    index.apply([{"seq": 4, "put": entry("1", "Comet Quest", 10)}])
    index.write(ops.DROP_TABLE, {"table_id": INDEX["id"]})
    partition = {"id": "g0", "start": "", "end": None, "epoch": 1, "node": "n1"}
    index.write(ops.CREATE_PARTITION, {"table": INDEX, "partition": partition})
    # The new partition starts with no entries and no applied seqs.
    assert index.titles("Comet Quest") == []
    assert index.apply([{"seq": 1, "put": entry("1", "Comet Quest", 10)}])["applied"] == 1


def test_a_partition_created_with_consumers_holds_its_log_for_them_from_seq_0(
    tmp_path: Path,
) -> None:
    node = IndexNode(tmp_path / "base")
    table = {"id": "f6" * 16, "name": "GameScores", "key_schema": {"hash": ["UserId", "S"]}}
    partition = {"id": SOURCE, "start": "", "end": None, "epoch": 1, "node": "n1"}
    body = {"table": table, "partition": partition, "consumers": ["gsi_replicator"]}
    node.write(ops.CREATE_PARTITION, body)
    assert node.node.consumer_checkpoint(table["id"], SOURCE, "gsi_replicator") == 0
    node.write(ops.CREATE_PARTITION, body)  # Again: a no-op, the checkpoint stays.
    node.reopen()
    assert node.node.consumer_checkpoint(table["id"], SOURCE, "gsi_replicator") == 0
    node.store.close()


def test_index_writes_are_charged_as_the_guide_prices_them(index: IndexNode) -> None:
    big = {**entry("1", "Comet Quest", 10), "Note": s("x" * 1500)}  # Over 1 KB: 2 units.
    assert index.apply([{"seq": 1, "put": big}])["units"] == 2.0
    # The same key with a smaller projection: an update in place, the larger of the two.
    assert index.apply([{"seq": 2, "put": entry("1", "Comet Quest", 10)}])["units"] == 2.0
    # A changed key: a delete and a put.
    moved = index.apply(
        [{"seq": 3, "delete": entry("1", "Comet Quest", 10), "put": entry("1", "Comet Quest", 11)}]
    )
    assert moved["units"] == 2.0
    # Deleting an entry that is not there costs nothing.
    assert index.apply([{"seq": 4, "delete": entry("9", "Comet Quest", 1)}])["units"] == 0.0


def test_index_writes_spend_the_index_partitions_own_write_units(tmp_path: Path) -> None:
    now = [1000.0]
    store = Store(tmp_path / "metered")
    meter = NodeThroughput(enforced=True, clock=lambda: now[0], burst_seconds=1.0)
    node = StorageNode(store, throughput=meter)
    partition = {"id": "g0", "start": "", "end": None, "epoch": 1, "node": "n1"}
    throughput = {
        "billing_mode": "PROVISIONED",
        "read": 5,
        "write": 2,
        "partition_count": 1,
        "version": 1,
    }
    body = {"table": INDEX, "partition": partition, "throughput": throughput}
    (created,) = envelope.apply(node, [(ops.CREATE_PARTITION, body)])
    assert created == {}
    target = {"table_id": INDEX["id"], "partition_id": "g0", "epoch": 1, "source": SOURCE}

    def apply(seq: int) -> Any:
        change = {"seq": seq, "put": entry(str(seq), "Comet Quest", seq)}
        body = one_part({**target, "changes": [change]})
        (result,) = envelope.apply(node, [(ops.INDEX_APPLY, body)])
        return result if isinstance(result, DynamoError) else result["parts"][0]

    assert apply(1)["units"] == 1.0
    assert apply(2)["units"] == 1.0  # The 2 units the index partition banks are spent.
    assert isinstance(apply(3), ThroughputExceeded)
    now[0] += 1.0
    assert apply(3)["applied"] == 1  # The throttled change was not applied: it applies now.
    store.close()


def test_parts_of_many_sources_apply_in_order_as_one_write(index: IndexNode) -> None:
    """One index_apply carries the parts of several base partitions (the replicator groups
    what is waiting for an index partition): each source keeps its own seq, two parts of one
    source apply in order, and a part refused on its own (fenced, malformed) applies nothing
    while the others apply."""
    index.apply([{"seq": 1, "put": entry("1", "Comet Quest", 1)}], source="fenced-0")
    index.write(
        ops.INDEX_APPLY,
        {
            "table_id": INDEX["id"],
            "partition_id": "g0",
            "epoch": 1,
            "source": "fenced-0",
            "changes": [],
            "lease_epoch": 5,
        },
    )
    parts = [
        {"source": "a-0", "changes": [{"seq": 1, "put": entry("2", "Comet Quest", 2)}]},
        {"source": "fenced-0", "changes": [{"seq": 2, "put": entry("3", "Comet Quest", 3)}]},
        {"source": "b-0", "changes": [{"seq": 7, "put": entry("4", "Comet Quest", 4)}]},
        {
            "source": "a-0",
            "changes": [
                {"seq": 1, "delete": entry("2", "Comet Quest", 2)},
                {"seq": 2, "delete": entry("2", "Comet Quest", 2)},
            ],
        },
        {"source": "c-0", "changes": [{"seq": 1, "delete": {"GameTitle": s("Comet Quest")}}]},
    ]
    body = {"table_id": INDEX["id"], "partition_id": "g0", "epoch": 1, "parts": parts}
    (result,) = envelope.apply(index.node, [(ops.INDEX_APPLY, body)])
    assert not isinstance(result, DynamoError)
    replies = result["parts"]
    assert [ops.part_outcome(replies[n])["source_seq"] for n in (0, 2, 3)] == [1, 7, 2]
    assert ops.part_outcome(replies[3])["applied"] == 1  # Its seq 1 came in the first part.
    with pytest.raises(LeaseFenced):
        ops.part_outcome(replies[1])
    with pytest.raises(ValidationError):
        ops.part_outcome(replies[4])
    assert result["units"] == 3.0  # Two puts and a delete of an entry that was there.
    assert [item["UserId"]["S"] for item in index.titles("Comet Quest")] == ["1", "4"]
    # Each source's seq was stored with the entries: replays of any of them change nothing.
    assert index.apply([{"seq": 2, "put": entry("2", "X", 9)}], source="a-0")["applied"] == 0
    assert index.apply([{"seq": 7, "put": entry("4", "X", 9)}], source="b-0")["applied"] == 0
    assert index.apply([{"seq": 1, "put": entry("5", "X", 9)}], source="c-0")["applied"] == 1


def test_a_malformed_index_apply_is_refused(index: IndexNode) -> None:
    target = {"table_id": INDEX["id"], "partition_id": "g0", "epoch": 1}
    for body in ({**target}, {**target, "parts": {"source": "a-0"}}, {**target, "parts": [1]}):
        (result,) = envelope.apply(index.node, [(ops.INDEX_APPLY, body)])
        assert isinstance(result, ValidationError)
