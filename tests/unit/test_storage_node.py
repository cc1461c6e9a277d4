"""StorageNode on a real LMDB environment in a temporary directory: every operation of ops.py.

Writes go through `apply_writes`, the same call the group committer makes, so these tests see the
exact transaction boundaries the server uses, without asyncio or gRPC.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from core.errors import (
    ConditionalCheckFailed,
    DynamoError,
    InternalServerError,
    ResourceInUse,
    ServiceUnavailable,
    StaleEpoch,
    ValidationError,
)
from core.keycodec import key_hash
from core.size import item_size_bytes
from rpc import ops
from storagenode import replica
from storagenode.layout import Family
from storagenode.node import StorageNode
from storagenode.store import Store
from tests import envelope

TABLE = {
    "id": "a1" * 16,
    "name": "Music",
    "key_schema": {"hash": ["pk", "S"], "range": ["sk", "N"]},
}
HASH_ONLY = {"id": "b2" * 16, "name": "Users", "key_schema": {"hash": ["id", "S"], "range": None}}
HALF = "8000000000000000"  # The middle of the hash space, as a storage-key bound.


def s(text: str) -> dict[str, str]:
    return {"S": text}


def n(number: int | str) -> dict[str, str]:
    return {"N": str(number)}


class Harness:
    """A node over a store in a directory, with shorthand for partitions, writes and reads."""

    def __init__(self, path: Path, **node_options: Any) -> None:
        self.path = path
        self.node_options = node_options
        self.store = Store(path)
        self.node = StorageNode(self.store, **node_options)

    def reopen(self) -> None:
        self.store.close()
        self.store = Store(self.path)
        self.node = StorageNode(self.store, **self.node_options)

    def write(self, op: str, body: dict[str, Any]) -> dict[str, Any]:
        (result,) = envelope.apply(self.node, [(op, body)])
        if isinstance(result, DynamoError):
            raise result
        return result

    def create(
        self,
        table: dict[str, Any] = TABLE,
        partition_id: str = "p0",
        start: str = "",
        end: str | None = None,
        epoch: int = 1,
    ) -> None:
        partition = {"id": partition_id, "start": start, "end": end, "epoch": epoch, "node": "n1"}
        self.write(ops.CREATE_PARTITION, {"table": table, "partition": partition})

    def data(self, partition_id: str = "p0", table: dict[str, Any] = TABLE, **body: Any) -> dict:
        return {"table_id": table["id"], "partition_id": partition_id, "epoch": 1, **body}

    def put(self, item: dict[str, Any], **options: Any) -> dict[str, Any]:
        return self.write(ops.PUT, self.data(item=item, **options))

    def get(self, key: dict[str, Any], **options: Any) -> dict[str, Any] | None:
        reply = envelope.read(self.node, ops.GET, self.data(key=key, **options))
        return reply["item"]

    def query(self, hash_value: str = "a", **options: Any) -> dict[str, Any]:
        return envelope.read(self.node, ops.QUERY, self.data(hash_value=s(hash_value), **options))

    def changes(self, partition_id: str = "p0", after_seq: int = 0) -> list[dict[str, Any]]:
        return self.node.changes(TABLE["id"], partition_id, after_seq, 1000)


@pytest.fixture
def h(tmp_path: Path) -> Harness:
    harness = Harness(tmp_path / "node")
    harness.create()
    yield harness
    harness.store.close()


def song(pk: str, sk: int, **attributes: Any) -> dict[str, Any]:
    return {"pk": s(pk), "sk": n(sk), **attributes}


# Partitions and epochs -----------------------------------------------------------------------


def test_create_partition_is_idempotent_and_refuses_conflicts(h: Harness) -> None:
    h.create()  # Same epoch, same range: a no-op.
    with pytest.raises(ResourceInUse):
        h.create(end=HALF)
    with pytest.raises(ResourceInUse):
        h.create(epoch=2)
    h.create(partition_id="p9", epoch=3)
    with pytest.raises(StaleEpoch):
        h.create(partition_id="p9", epoch=2)
    stats = envelope.read(h.node, ops.TABLE_STATS, {"table_id": TABLE["id"]})
    assert stats == {
        "partitions": {
            partition: {
                "items": 0,
                "bytes": 0,
                "last_seq": 0,
                "first_seq": 1,
                "log_bytes": 0,
                "ttl_deleted": 0,
                "consumers": {},
            }
            for partition in ("p0", "p9")
        }
    }


def test_a_request_past_its_deadline_is_refused_and_not_applied(tmp_path: Path) -> None:
    now = [1_000.0]
    h = Harness(tmp_path / "node", clock=lambda: now[0])
    h.create()
    h.put(song("a", 1, v=n(1)), deadline=1_000.5)  # In time.
    now[0] = 1_001.0
    late = h.data(item=song("a", 1, v=n(2)), deadline=1_000.5)
    on_time = h.data(item=song("b", 1), deadline=1_002.0)
    refused, applied = envelope.apply(h.node, [(ops.PUT, late), (ops.PUT, on_time)])
    assert isinstance(refused, ServiceUnavailable)
    assert "after its deadline; it was not applied" in refused.message
    assert isinstance(applied, dict)
    assert h.get(song("a", 1)) == song("a", 1, v=n(1))
    assert [change["keys"] for change in h.changes()] == [song("a", 1), song("b", 1)]
    with pytest.raises(ServiceUnavailable, match="after its deadline"):
        h.get(song("a", 1), deadline=1_000.5)
    assert h.get(song("a", 1), deadline=0.0) is not None  # No deadline: none to miss.
    h.store.close()


def test_requests_with_another_epoch_or_unknown_partition_are_stale(h: Harness) -> None:
    h.put(song("a", 1))
    for body in (
        h.data(key=song("a", 1), epoch=0),
        h.data(key=song("a", 1), epoch=2),
        h.data(partition_id="nope", key=song("a", 1)),
        {"table_id": "c3" * 16, "partition_id": "p0", "epoch": 1, "key": song("a", 1)},
    ):
        with pytest.raises(StaleEpoch):
            envelope.read(h.node, ops.GET, body)
        with pytest.raises(StaleEpoch):
            h.write(ops.DELETE, body)
    assert h.get(song("a", 1)) == song("a", 1)


def test_retire_partition_leaves_the_items_to_its_children(h: Harness) -> None:
    h.put(song("a", 1))
    h.put(song("z", 2))
    log = h.node.partitions[TABLE["id"], "p0"].log_prefix
    h.create(partition_id="low", end=HALF, epoch=2)
    h.create(partition_id="high", start=HALF, epoch=2)
    retire = {"table_id": TABLE["id"], "partition_id": "p0", "epoch": 1}
    assert h.write(ops.RETIRE_PARTITION, retire) == {"retired": True}
    with pytest.raises(StaleEpoch):
        h.get(song("a", 1))
    assert list(h.store.walk(Family.CHANGE_LOG, log, log + b"\xff", forward=True)) == []
    found = []
    for partition_id in ("low", "high"):
        body = h.data(partition_id=partition_id, epoch=2, exclusive_start=None, limit=None)
        found += [item["pk"]["S"] for item in envelope.read(h.node, ops.SCAN, body)["items"]]
    assert sorted(found) == ["a", "z"]  # The children hold the parent's items, once each.
    assert h.write(ops.RETIRE_PARTITION, retire) == {"retired": False}  # Idempotent.
    with pytest.raises(StaleEpoch):
        h.write(ops.RETIRE_PARTITION, dict(retire, partition_id="low"))  # Newer than asked.
    h.reopen()
    assert sorted(key[1] for key in h.node.partitions) == ["high", "low"]


def test_a_key_outside_the_partition_range_is_stale(tmp_path: Path) -> None:
    harness = Harness(tmp_path / "split")
    harness.create(partition_id="low", end=HALF)
    harness.create(partition_id="high", start=HALF)
    for pk in ("a", "b", "c", "d", "e", "f"):
        home, other = ("low", "high") if key_hash(s(pk)) < 1 << 63 else ("high", "low")
        harness.write(ops.PUT, harness.data(home, item=song(pk, 1)))
        with pytest.raises(StaleEpoch):
            harness.write(ops.PUT, harness.data(other, item=song(pk, 1)))
    stats = envelope.read(harness.node, ops.TABLE_STATS, {"table_id": TABLE["id"]})["partitions"]
    assert stats["low"]["items"] + stats["high"]["items"] == 6
    harness.store.close()


def test_metadata_and_items_survive_reopening(h: Harness) -> None:
    h.put(song("a", 1, title=s("x")))
    h.reopen()
    assert h.get(song("a", 1)) == song("a", 1, title=s("x"))
    assert envelope.read(h.node, ops.TABLE_STATS, {"table_id": TABLE["id"]})["partitions"][
        "p0"
    ] == {
        "items": 1,
        "bytes": item_size_bytes(song("a", 1, title=s("x"))),
        "last_seq": 1,
        "first_seq": 1,
        "log_bytes": len(orjson.dumps(h.changes()[0])),
        "ttl_deleted": 0,
        "consumers": {},
    }
    h.put(song("a", 2))
    assert [record["seq"] for record in h.changes()] == [1, 2]


# Put, get, update, delete ----------------------------------------------------------------------


def test_put_and_get(h: Harness) -> None:
    item = song("a", 1, title=s("Hello"), tags={"SS": ["x", "y"]})
    size = item_size_bytes(item)
    reply = h.put(item)
    assert reply == {"attributes": None, "old_bytes": 0, "new_bytes": size}
    assert envelope.read(h.node, ops.GET, h.data(key=song("a", 1))) == {
        "item": item,
        "read_bytes": size,
    }
    assert envelope.read(h.node, ops.GET, h.data(key=song("a", 2))) == {
        "item": None,
        "read_bytes": 0,
    }
    projected = h.get(song("a", 1), projection="#t, sk", names={"#t": "title"})
    assert projected == {"title": s("Hello"), "sk": n(1)}
    reply = h.put(song("a", 1), return_values="ALL_OLD")
    assert reply == {
        "attributes": item,
        "old_bytes": size,
        "new_bytes": item_size_bytes(song("a", 1)),
    }


def test_put_refuses_items_without_their_key_or_over_the_size_limit(h: Harness) -> None:
    with pytest.raises(ValidationError, match="Missing the key sk"):
        h.put({"pk": s("a")})
    with pytest.raises(ValidationError, match="Type mismatch for key sk"):
        h.put({"pk": s("a"), "sk": s("1")})
    with pytest.raises(ValidationError, match="Item size has exceeded"):
        h.put(song("a", 1, blob=s("x" * 410_000)))
    assert h.changes() == []


def test_conditional_put_fails_atomically_and_can_return_the_old_item(h: Harness) -> None:
    guard = {"condition": "attribute_not_exists(pk)"}
    h.put(song("a", 1, v=n(1)), **guard)
    with pytest.raises(ConditionalCheckFailed) as failure:
        h.put(song("a", 1, v=n(2)), **guard, return_on_failure=True)
    assert failure.value.item == song("a", 1, v=n(1))
    with pytest.raises(ConditionalCheckFailed) as failure:
        h.put(song("a", 1, v=n(2)), **guard)
    assert failure.value.item is None
    assert h.get(song("a", 1)) == song("a", 1, v=n(1))
    assert len(h.changes()) == 1


def test_conditions_in_one_batch_see_the_earlier_writes(h: Harness) -> None:
    guard = {"condition": "attribute_not_exists(pk)"}
    results = envelope.apply(
        h.node,
        [(ops.PUT, h.data(item=song("a", 1, who=s(who)), **guard)) for who in ("first", "second")],
    )
    assert results[0] == {
        "attributes": None,
        "old_bytes": 0,
        "new_bytes": item_size_bytes(song("a", 1, who=s("first"))),
    }
    assert isinstance(results[1], ConditionalCheckFailed)
    assert h.get(song("a", 1))["who"] == s("first")


def test_update_creates_modifies_and_returns_values(h: Harness) -> None:
    def update(expression: str, return_values: str, **values: Any) -> dict[str, Any]:
        return h.write(
            ops.UPDATE,
            h.data(
                key=song("a", 1),
                update=expression,
                values={f":{k}": v for k, v in values.items()},
                return_values=return_values,
            ),
        )

    created = update("SET c = :one", "ALL_NEW", one=n(1))
    assert created == {
        "attributes": song("a", 1, c=n(1)),
        "old_bytes": 0,
        "new_bytes": item_size_bytes(song("a", 1, c=n(1))),
    }
    assert update("ADD c :one SET d = :d", "UPDATED_OLD", one=n(1), d=s("x"))["attributes"] == {
        "c": n(1)
    }
    assert update("SET d = :d", "UPDATED_NEW", d=s("y"))["attributes"] == {"d": s("y")}
    assert update("REMOVE d", "ALL_OLD")["attributes"] == song("a", 1, c=n(2), d=s("y"))
    assert update("SET c = :one", "NONE", one=n(1))["attributes"] is None
    assert h.get(song("a", 1)) == song("a", 1, c=n(1))


def test_update_without_expression_creates_the_item_from_its_key(h: Harness) -> None:
    reply = h.write(ops.UPDATE, h.data(key=song("a", 7), return_values="ALL_NEW"))
    assert reply["attributes"] == song("a", 7)
    assert h.get(song("a", 7)) == song("a", 7)


def test_update_refuses_key_attributes_and_oversized_results(h: Harness) -> None:
    with pytest.raises(ValidationError, match=r"Cannot update attribute pk\. This attribute"):
        h.write(ops.UPDATE, h.data(key=song("a", 1), update="SET pk = :v", values={":v": s("b")}))
    big = {":v": s("x" * 300_000)}
    h.write(ops.UPDATE, h.data(key=song("a", 1), update="SET x = :v", values=big))
    with pytest.raises(ValidationError, match="Item size to update has exceeded"):
        h.write(ops.UPDATE, h.data(key=song("a", 1), update="SET y = :v", values=big))
    assert set(h.get(song("a", 1))) == {"pk", "sk", "x"}


def test_conditional_update_and_delete(h: Harness) -> None:
    h.put(song("a", 1, v=n(1)))
    stale = {"condition": "v = :old", "values": {":old": n(0), ":new": n(9)}}
    with pytest.raises(ConditionalCheckFailed) as failure:
        h.write(
            ops.UPDATE,
            h.data(key=song("a", 1), update="SET v = :new", return_on_failure=True, **stale),
        )
    assert failure.value.item == song("a", 1, v=n(1))
    with pytest.raises(ConditionalCheckFailed):
        h.write(ops.DELETE, h.data(key=song("a", 1), condition="v = :old", values={":old": n(0)}))
    reply = h.write(
        ops.DELETE,
        h.data(key=song("a", 1), condition="v = :v", values={":v": n(1)}, return_values="ALL_OLD"),
    )
    old_bytes = item_size_bytes(song("a", 1, v=n(1)))
    assert reply == {"attributes": song("a", 1, v=n(1)), "old_bytes": old_bytes, "new_bytes": 0}
    assert h.get(song("a", 1)) is None
    missing = h.write(ops.DELETE, h.data(key=song("a", 1), return_values="ALL_OLD"))
    assert missing == {"attributes": None, "old_bytes": 0, "new_bytes": 0}


# Change log ------------------------------------------------------------------------------------


COMMITTED_AT = 1_700_000_000.25


def test_every_change_is_logged_with_its_images(tmp_path: Path) -> None:
    # Each record carries its commit time from the node's clock (DynamoDB Streams' time).
    h = Harness(tmp_path / "node", clock=lambda: COMMITTED_AT)
    h.create()
    h.put(song("a", 1, v=n(1)))
    h.put(song("a", 1, v=n(1)))  # Unchanged: like DynamoDB Streams, no record.
    h.write(ops.UPDATE, h.data(key=song("a", 1), update="SET v = :v", values={":v": n(2)}))
    h.write(ops.DELETE, h.data(key=song("a", 1)))
    h.write(ops.DELETE, h.data(key=song("a", 1)))  # Nothing to delete: no record.
    assert h.changes() == [
        {
            "seq": 1,
            "kind": "INSERT",
            "keys": song("a", 1),
            "old": None,
            "new": song("a", 1, v=n(1)),
            "by_service": False,
            "at": COMMITTED_AT,
        },
        {
            "seq": 2,
            "kind": "MODIFY",
            "keys": song("a", 1),
            "old": song("a", 1, v=n(1)),
            "new": song("a", 1, v=n(2)),
            "by_service": False,
            "at": COMMITTED_AT,
        },
        {
            "seq": 3,
            "kind": "REMOVE",
            "keys": song("a", 1),
            "old": song("a", 1, v=n(2)),
            "new": None,
            "by_service": False,
            "at": COMMITTED_AT,
        },
    ]
    assert [record["seq"] for record in h.changes(after_seq=2)] == [3]
    stats = envelope.read(h.node, ops.TABLE_STATS, {"table_id": TABLE["id"]})["partitions"]["p0"]
    log_bytes = sum(len(orjson.dumps(record)) for record in h.changes())
    assert stats == {
        "items": 0,
        "bytes": 0,
        "last_seq": 3,
        "first_seq": 1,
        "log_bytes": log_bytes,
        "ttl_deleted": 0,
        "consumers": {},
    }


def test_the_change_log_is_trimmed_to_its_bound(tmp_path: Path) -> None:
    harness = Harness(tmp_path / "trim", change_log_records_max=3)
    harness.create()
    envelope.apply(harness.node, [(ops.PUT, harness.data(item=song("a", i))) for i in range(5)])
    harness.put(song("a", 9))
    assert [record["seq"] for record in harness.changes()] == [4, 5, 6]
    harness.store.close()


# Query -----------------------------------------------------------------------------------------


@pytest.fixture
def songs(h: Harness) -> Harness:
    envelope.apply(
        h.node,
        [
            (ops.PUT, h.data(item=song(pk, sk, even=n(int(sk % 2 == 0)))))
            for pk in "ab"
            for sk in range(10)
        ],
    )
    return h


def sort_keys(reply: dict[str, Any]) -> list[int]:
    return [int(item["sk"]["N"]) for item in reply["items"]]


@pytest.mark.parametrize(
    ("op", "values", "expected"),
    [
        ("=", [3], [3]),
        ("<", [3], [0, 1, 2]),
        ("<=", [3], [0, 1, 2, 3]),
        (">", [7], [8, 9]),
        (">=", [7], [7, 8, 9]),
        ("BETWEEN", [2, 5], [2, 3, 4, 5]),
    ],
)
def test_query_sort_key_conditions_both_ways(
    songs: Harness, op: str, values: list[int], expected: list[int]
) -> None:
    condition = {"op": op, "values": [n(v) for v in values]}
    assert sort_keys(songs.query(range=condition)) == expected
    assert sort_keys(songs.query(range=condition, forward=False)) == expected[::-1]


def test_query_begins_with_on_string_sort_keys(tmp_path: Path) -> None:
    table = {**TABLE, "id": "d4" * 16, "key_schema": {"hash": ["pk", "S"], "range": ["sk", "S"]}}
    harness = Harness(tmp_path / "strings")
    harness.create(table)
    names = ["ab", "abc", "ab\x00", "abd", "ac", "a", "b", "aa\uffff"]
    envelope.apply(
        harness.node,
        [(ops.PUT, harness.data(table=table, item={"pk": s("k"), "sk": s(x)})) for x in names],
    )
    for forward in (True, False):
        reply = envelope.read(
            harness.node,
            ops.QUERY,
            harness.data(
                table=table,
                hash_value=s("k"),
                range={"op": "begins_with", "values": [s("ab")]},
                forward=forward,
            ),
        )
        found = [item["sk"]["S"] for item in reply["items"]]
        assert found == (
            ["ab", "ab\x00", "abc", "abd"] if forward else ["abd", "abc", "ab\x00", "ab"]
        )
    harness.store.close()


def test_query_pages_by_limit_until_done(songs: Harness) -> None:
    for forward in (True, False):
        seen: list[int] = []
        start = None
        pages = 0
        while True:
            reply = songs.query(limit=3, exclusive_start=start, forward=forward)
            seen += sort_keys(reply)
            pages += 1
            start = reply["last_key"]
            if start is None:
                break
            assert start == song("a", seen[-1])
        assert seen == (list(range(10)) if forward else list(range(9, -1, -1)))
        assert pages == 4  # The fourth page holds one item and reaches the end.
    # Like DynamoDB, a page that stops at its limit on the last item still names it.
    last = songs.query(limit=10)["last_key"]
    assert last == song("a", 9)
    assert songs.query(limit=10, exclusive_start=last) == {
        "items": [],
        "count": 0,
        "scanned": 0,
        "last_key": None,
        "read_bytes": 0,
    }


def test_query_page_bytes_are_measured_before_the_filter(songs: Harness) -> None:
    sizes = [item_size_bytes(song("a", sk, even=n(int(sk % 2 == 0)))) for sk in (0, 1)]
    reply = songs.query(page_bytes=sizes[0] + 1, filter="even = :f", values={":f": n(1)})
    # The second item takes the page past its bytes: it is read, counted and ends the page.
    assert reply["scanned"] == 2 and reply["read_bytes"] == sum(sizes)
    assert sort_keys(reply) == [0]
    assert reply["count"] == 1
    assert reply["last_key"] == song("a", 1)


def test_query_filter_projection_and_count(songs: Harness) -> None:
    reply = songs.query(
        filter="even = :t", values={":t": n(1)}, projection="sk", select="SPECIFIC_ATTRIBUTES"
    )
    assert reply["items"] == [{"sk": n(k)} for k in (0, 2, 4, 6, 8)]
    read_bytes = sum(item_size_bytes(song("a", k, even=n(int(k % 2 == 0)))) for k in range(10))
    assert (reply["count"], reply["scanned"], reply["read_bytes"]) == (5, 10, read_bytes)
    counted = songs.query(select="COUNT", range={"op": ">", "values": [n(4)]})
    assert (counted["items"], counted["count"], counted["scanned"]) == ([], 5, 5)


def test_query_with_range_condition_and_limit_pages_exactly(songs: Harness) -> None:
    condition = {"op": "BETWEEN", "values": [n(2), n(7)]}
    first = songs.query(range=condition, limit=4)
    assert sort_keys(first) == [2, 3, 4, 5] and first["last_key"] == song("a", 5)
    second = songs.query(range=condition, limit=4, exclusive_start=first["last_key"])
    assert sort_keys(second) == [6, 7] and second["last_key"] is None
    exact = songs.query(range=condition, limit=6)
    assert exact["last_key"] == song("a", 7)


def test_query_on_a_table_without_sort_key(tmp_path: Path) -> None:
    harness = Harness(tmp_path / "hash-only")
    harness.create(HASH_ONLY)
    harness.write(ops.PUT, harness.data(table=HASH_ONLY, item={"id": s("u1"), "x": n(1)}))
    reply = envelope.read(
        harness.node, ops.QUERY, harness.data(table=HASH_ONLY, hash_value=s("u1"))
    )
    assert reply["items"] == [{"id": s("u1"), "x": n(1)}]
    with pytest.raises(ValidationError):
        envelope.read(
            harness.node,
            ops.QUERY,
            harness.data(
                table=HASH_ONLY, hash_value=s("u1"), range={"op": "=", "values": [s("x")]}
            ),
        )
    harness.store.close()


# Scan ------------------------------------------------------------------------------------------


def scan_all(harness: Harness, partition_id: str = "p0", **options: Any) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    start = None
    while True:
        body = harness.data(partition_id, exclusive_start=start, **options)
        reply = envelope.read(harness.node, ops.SCAN, body)
        items += reply["items"]
        start = reply["last_key"]
        if start is None:
            return items


def test_scan_pages_through_the_partition_in_storage_key_order(songs: Harness) -> None:
    items = scan_all(songs, limit=7)
    assert len(items) == 20
    hashes = [key_hash(item["pk"]) for item in items]
    assert hashes == sorted(hashes)
    assert [int(i["sk"]["N"]) for i in items if i["pk"] == s("a")] == list(range(10))


def test_scan_is_restricted_to_its_partition_and_hash_segment(tmp_path: Path) -> None:
    harness = Harness(tmp_path / "segments")
    harness.create(partition_id="low", end=HALF)
    harness.create(partition_id="high", start=HALF)
    keys = [f"user{i}" for i in range(40)]
    for pk in keys:
        home = "low" if key_hash(s(pk)) < 1 << 63 else "high"
        harness.write(ops.PUT, harness.data(home, item=song(pk, 0)))
    low = {item["pk"]["S"] for item in scan_all(harness, "low", limit=5)}
    high = {item["pk"]["S"] for item in scan_all(harness, "high", limit=5)}
    assert low | high == set(keys) and not low & high
    quarter = 1 << 62
    segment = scan_all(harness, "low", hash_start=quarter, hash_end=2 * quarter)
    assert {item["pk"]["S"] for item in segment} == {
        pk for pk in keys if quarter <= key_hash(s(pk)) < 2 * quarter
    }
    everything = scan_all(harness, "high", hash_start=0, hash_end=1 << 64)
    assert {item["pk"]["S"] for item in everything} == high
    harness.store.close()


# Catalog and drop_table ------------------------------------------------------------------------


def test_drop_table_removes_its_items_logs_and_partitions_only(h: Harness) -> None:
    h.create(HASH_ONLY)
    h.put(song("a", 1))
    h.write(ops.PUT, h.data(table=HASH_ONLY, item={"id": s("u1")}))
    assert h.write(ops.DROP_TABLE, {"table_id": TABLE["id"]}) == {"partitions_dropped": 1}
    assert h.write(ops.DROP_TABLE, {"table_id": TABLE["id"]}) == {"partitions_dropped": 0}
    with pytest.raises(StaleEpoch):
        h.get(song("a", 1))
    h.create()
    assert h.get(song("a", 1)) is None
    assert h.changes() == []
    assert envelope.read(h.node, ops.GET, h.data(table=HASH_ONLY, key={"id": s("u1")}))["item"] == {
        "id": s("u1")
    }
    h.reopen()
    assert set(h.node.partitions) == {(TABLE["id"], "p0"), (HASH_ONLY["id"], "p0")}


# Batches ---------------------------------------------------------------------------------------


def test_a_write_that_crashes_is_dropped_from_its_batch_and_the_rest_commit(h: Harness) -> None:
    results = envelope.apply(
        h.node,
        [
            (ops.PUT, h.data(item=song("a", 1))),
            (ops.PUT, h.data()),  # No item: a bug in the caller, not a client error.
            (ops.PUT, h.data(item=song("a", 2))),
        ],
    )
    assert isinstance(results[1], InternalServerError)
    assert results[0]["new_bytes"] == results[2]["new_bytes"] == item_size_bytes(song("a", 1))
    assert [record["seq"] for record in h.changes()] == [1, 2]
    assert h.get(song("a", 2)) == song("a", 2)


def test_query_refuses_a_start_key_from_another_item_collection(songs: Harness) -> None:
    with pytest.raises(ValidationError, match="starting key"):
        songs.query(exclusive_start=song("b", 1))


def test_a_second_store_on_the_same_directory_is_refused(h: Harness) -> None:
    with pytest.raises(OSError, match="in use by another storage node"):
        Store(h.path)


def test_a_write_whose_apply_fails_fails_alone_and_its_neighbours_are_stored(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug while storing one write (here: apply raising for one key) answers that write with
    InternalServerError; nothing of it is stored, and every other write of its group commit is
    acknowledged, stored and logged, with the partition's counters counting only them."""
    real_apply = replica.apply

    def apply(batch: Any, partition: Any, items_key: bytes, effect: Any, **options: Any) -> Any:
        if effect.key == song("bad", 1):
            raise RuntimeError("a bug in apply")
        return real_apply(batch, partition, items_key, effect, **options)

    monkeypatch.setattr(replica, "apply", apply)
    writes = [(ops.PUT, h.data(item=song(pk, 1))) for pk in ("a", "bad", "b", "c")]
    results = envelope.apply(h.node, writes)
    assert isinstance(results[1], InternalServerError)
    assert all(isinstance(results[i], dict) for i in (0, 2, 3))
    assert h.get(song("bad", 1)) is None
    assert [h.get(song(pk, 1)) for pk in ("a", "b", "c")] == [song(pk, 1) for pk in "abc"]
    assert [record["keys"] for record in h.changes()] == [song(pk, 1) for pk in "abc"]
    stats = envelope.read(h.node, ops.TABLE_STATS, {"table_id": TABLE["id"]})["partitions"]["p0"]
    assert stats == {
        "items": 3,
        "bytes": 3 * item_size_bytes(song("a", 1)),
        "last_seq": 3,
        "first_seq": 1,
        "log_bytes": sum(len(orjson.dumps(record)) for record in h.changes()),
        "ttl_deleted": 0,
        "consumers": {},
    }


def test_a_failed_commit_fails_the_group_and_changes_nothing(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only a failure of the batch itself (the disk) fails every write of the group, reported as
    the node not committing; the node's partition metadata stays as it was."""
    h.put(song("a", 1))

    def commit(batch: Any) -> None:
        raise OSError("No space left on device")

    monkeypatch.setattr(h.store, "commit", commit)
    results = envelope.apply(
        h.node,
        [
            (ops.PUT, h.data(item=song("b", 1))),
            (ops.PUT, h.data(item=song("a", 1), condition="attribute_not_exists(pk)")),
            (ops.PUT, h.data(partition_id="nope", item=song("c", 1))),
        ],
    )
    assert [type(result) for result in results] == [
        InternalServerError,
        InternalServerError,
        StaleEpoch,
    ]
    assert "could not commit: No space left on device" in results[0].message
    monkeypatch.undo()
    assert h.get(song("b", 1)) is None
    assert (
        envelope.read(h.node, ops.TABLE_STATS, {"table_id": TABLE["id"]})["partitions"]["p0"][
            "items"
        ]
        == 1
    )
    h.put(song("b", 1))
    assert [record["seq"] for record in h.changes()] == [1, 2]


def test_a_disk_down_to_its_reserve_refuses_growing_writes_and_takes_deletes(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    h.put(song("a", 1))
    h.put(song("a", 2))
    reserve = h.store.disk_reserve_bytes
    monkeypatch.setattr(h.store, "free_bytes", lambda: reserve - 1)
    with pytest.raises(ServiceUnavailable, match="disk is full"):
        h.put(song("a", 3))
    with pytest.raises(ServiceUnavailable, match="disk is full"):
        h.write(ops.UPDATE, h.data(key=song("a", 1), update="SET v = :v", values={":v": n(1)}))
    h.write(ops.DELETE, h.data(key=song("a", 1)))
    assert h.get(song("a", 2)) == song("a", 2)  # Reads are untouched.
    monkeypatch.setattr(h.store, "free_bytes", lambda: reserve // 8)
    with pytest.raises(ServiceUnavailable, match="disk is full"):
        h.write(ops.DELETE, h.data(key=song("a", 2)))
    h.write(ops.DROP_TABLE, {"table_id": TABLE["id"]})
    monkeypatch.setattr(h.store, "free_bytes", lambda: reserve)
    h.create()
    h.put(song("a", 3))
