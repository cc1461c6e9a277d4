"""A storage node's local secondary indexes, on a real RocksDB store: entries written by the one
apply hook in the item's batch, the collection cap, index reads with fetches, and the checker
(`dynalab.checkers`) that compares a node's indexes with its items, which must find every kind of
disagreement it claims to.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from core.catalog import IndexDef, IndexStatus
from core.errors import ItemCollectionSizeLimitExceeded, ValidationError
from core.indexes import local_index_key
from core.keys import KeyShape
from dynalab.checkers import check_local_indexes
from rpc import ops
from storagenode.layout import Family, encode_collection_size, partition_meta_key
from tests import envelope
from tests.unit.test_storage_node import Harness, s

SHAPE = KeyShape.table(("forum", "S"), ("subject", "S"))
INDEX = IndexDef(
    "byDate",
    local_index_key(SHAPE, ("date", "S")),
    "INCLUDE",
    IndexStatus.ACTIVE,
    ("replies",),
    local=True,
)
TABLE = {
    "id": "c3" * 16,
    "name": "Thread",
    "key_schema": SHAPE.to_key_schema(),
    "indexes": [INDEX.to_json()],
}


@pytest.fixture
def h(tmp_path: Path) -> Iterator[Harness]:
    harness = Harness(tmp_path / "node", item_collection_bytes_max=2000)
    harness.create(TABLE)
    yield harness
    harness.store.close()


def thread(forum: str, subject: str, date: str | None = None, **extra: Any) -> dict[str, Any]:
    item = {"forum": s(forum), "subject": s(subject), **extra}
    if date is not None:
        item["date"] = s(date)
    return item


def put(h: Harness, item: dict[str, Any]) -> dict[str, Any]:
    return h.write(ops.PUT, h.data(table=TABLE, item=item))


def query(h: Harness, forum: str, **options: Any) -> dict[str, Any]:
    body = h.data(table=TABLE, hash_value=s(forum), index="byDate", **options)
    return envelope.read(h.node, ops.QUERY, body)


def test_entries_are_written_with_their_items_and_survive_a_reopen(h: Harness) -> None:
    reply = put(h, thread("f", "a", "2015", replies={"N": "1"}, tags={"SS": ["x"]}))
    assert reply["index_units"] == {"byDate": 1.0}
    put(h, thread("f", "b"))  # Sparse: no entry.
    put(h, thread("f", "c", "2014"))
    h.write(ops.DELETE, h.data(table=TABLE, key={"forum": s("f"), "subject": s("c")}))
    h.reopen()
    page = query(h, "f")
    assert page["items"] == [thread("f", "a", "2015", replies={"N": "1"})]
    assert check_local_indexes(h.store) == []


def test_a_mistyped_index_key_changes_nothing(h: Harness) -> None:
    with pytest.raises(ValidationError, match="Type mismatch for Index Key date"):
        put(h, {**thread("f", "a"), "date": {"N": "1"}})
    assert h.get({"forum": s("f"), "subject": s("a")}, table=TABLE) is None


def test_the_collection_cap_refuses_growth_before_anything_is_stored(h: Harness) -> None:
    put(h, thread("f", "a", "2015", replies={"S": "x" * 800}))
    with pytest.raises(ItemCollectionSizeLimitExceeded):
        put(h, thread("f", "b", "2015", replies={"S": "x" * 800}))
    assert h.get({"forum": s("f"), "subject": s("b")}, table=TABLE) is None
    put(h, thread("g", "b", "2015", replies={"S": "x" * 800}))  # Another collection.
    assert check_local_indexes(h.store) == []


def test_a_fetch_reads_the_item_and_counts_it_rounded_to_4_kb(h: Harness) -> None:
    put(h, thread("f", "a", "2015", tags={"SS": ["x"]}))
    page = query(h, "f", fetch=True)
    assert page["items"] == [thread("f", "a", "2015", tags={"SS": ["x"]})]
    assert page["fetched_bytes"] == 4096
    entry_bytes = page["read_bytes"] - 4096
    assert 0 < entry_bytes < 100


def test_the_checker_finds_each_kind_of_disagreement(h: Harness) -> None:
    put(h, thread("f", "a", "2015"))
    put(h, thread("f", "b", "2016"))
    assert check_local_indexes(h.store) == []
    partition = h.node.partitions[TABLE["id"], "p0"]
    prefix, shape = partition.index_layout["byDate"]
    entry_key = prefix + shape.storage_key({**thread("f", "a", "2015")})
    collection_key = partition.collection_key(s("f"))
    miscounted = dataclasses.replace(partition, index_stats={"byDate": [3, 1]})
    batch = h.store.batch()
    batch.delete(Family.INDEX_ENTRIES, entry_key)
    batch.put(Family.ITEM_COLLECTIONS, collection_key, encode_collection_size(1))
    batch.put(Family.PARTITIONS, partition_meta_key(TABLE["id"], "p0"), miscounted.to_meta())
    h.store.commit(batch)
    problems = check_local_indexes(h.store)
    assert len(problems) == 3, problems
    assert "entries: 1 missing" in problems[0]
    assert "counters [3, 1]" in problems[1]
    assert "item collection sizes: 1 different" in problems[2]


def _prepare(h: Harness, attempt: str, *items: dict[str, Any]) -> dict[str, Any]:
    actions = [{"op": ops.PUT, "body": ops.PutPayload(item).to_json()} for item in items]
    return h.write(
        ops.TXN_PREPARE,
        h.data(table=TABLE, attempt=attempt, record=[TABLE["id"], "p0"], actions=actions),
    )


def test_a_transaction_past_the_collection_cap_is_refused_at_prepare(h: Harness) -> None:
    put(h, thread("f", "a", "2015", replies={"S": "x" * 300}))
    # Each item fits alone; together (counted through the prepare) they pass the 2,000-byte cap.
    reply = _prepare(
        h,
        "t1.1",
        thread("f", "b", "2015", replies={"S": "x" * 300}),
        thread("f", "c", "2015", replies={"S": "x" * 300}),
    )
    assert [vote["code"] for vote in reply["votes"]] == ["None", "ItemCollectionSizeLimitExceeded"]
    assert reply["votes"][1]["message"] == "Collection size exceeded."
    # Nothing was locked: b takes a single write.
    put(h, thread("f", "b", "2015"))
    # Within the cap, the prepare reports the collection's size once the transaction applies.
    reply = _prepare(h, "t2.1", thread("g", "a", "2015"), thread("g", "b", "2015"))
    sizes = [cost["collection_bytes"] for cost in reply["costs"]]
    assert sizes[0] < sizes[1]
    assert h.write(ops.TXN_APPLY, {"attempt": "t2.1", "commit": True}) == {"applied": 2}
    stored = h.store.get(
        Family.ITEM_COLLECTIONS, h.node.partitions[TABLE["id"], "p0"].collection_key(s("g"))
    )
    assert stored is not None and int.from_bytes(stored, "big") == sizes[1]
