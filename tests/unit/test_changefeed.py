"""The change feed's core: reading after a seq, consumers, retention, the END record, durability.

A StorageNode over a real RocksDB store in a temporary directory, written through `apply_writes`
(the group committer's call), read through `read_feed` (what the Follow stream sends), and
reopened to show that checkpoints and retired logs survive a restart.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from core import limits
from core.errors import (
    ChangeLogTrimmed,
    DynamoError,
    LimitExceeded,
    ResourceNotFound,
    StaleEpoch,
    ValidationError,
)
from rpc import ops
from storagenode import changefeed
from storagenode.changefeed import first_retained_seq, first_retained_within_bytes
from storagenode.layout import Family
from storagenode.node import StorageNode
from storagenode.store import Store
from tests import envelope

TABLE = {"id": "c4" * 16, "name": "Feed", "key_schema": {"hash": ["pk", "S"], "range": None}}
OTHER = {"id": "d5" * 16, "name": "Other", "key_schema": {"hash": ["pk", "S"], "range": None}}


class Feed:
    """A node over a store in a directory, with shorthand for writes, consumers and reads."""

    def __init__(
        self, path: Path, records_max: int = 1000, bytes_max: int = limits.CHANGE_LOG_BYTES_MAX
    ) -> None:
        self.path = path
        self.records_max = records_max
        self.bytes_max = bytes_max
        self.store = Store(path)
        self.node = self.open_node()

    def open_node(self) -> StorageNode:
        return StorageNode(
            self.store,
            change_log_records_max=self.records_max,
            change_log_bytes_max=self.bytes_max,
        )

    def reopen(self) -> None:
        self.store.close()
        self.store = Store(self.path)
        self.node = self.open_node()

    def write(self, op: str, body: dict[str, Any]) -> dict[str, Any]:
        (result,) = envelope.apply(self.node, [(op, body)])
        if isinstance(result, DynamoError):
            raise result
        return result

    def create(self, partition_id: str = "p0", table: dict[str, Any] = TABLE) -> None:
        partition = {"id": partition_id, "start": "", "end": None, "epoch": 1, "node": "n1"}
        self.write(ops.CREATE_PARTITION, {"table": table, "partition": partition})

    def ref(self, partition_id: str = "p0", **body: Any) -> dict[str, Any]:
        return {"table_id": TABLE["id"], "partition_id": partition_id, **body}

    def put(self, *numbers: int, partition_id: str = "p0", pad: int = 0) -> None:
        """Put item k<n> for each number; `pad` characters of attribute "v" make it larger."""
        extra = {"v": {"S": "x" * pad}} if pad else {}
        writes = [
            (ops.PUT, self.ref(partition_id, epoch=1, item={"pk": {"S": f"k{n}"}, **extra}))
            for n in numbers
        ]
        for result in envelope.apply(self.node, writes):
            if isinstance(result, DynamoError):
                raise result

    def register(self, consumer: str, seq: int | None = 0, partition_id: str = "p0") -> dict:
        return self.write(ops.REGISTER_CONSUMER, self.ref(partition_id, consumer=consumer, seq=seq))

    def checkpoint(self, consumer: str, seq: int, partition_id: str = "p0") -> dict[str, Any]:
        return self.write(ops.CHECKPOINT, self.ref(partition_id, consumer=consumer, seq=seq))

    def unregister(self, consumer: str, partition_id: str = "p0") -> dict[str, Any]:
        return self.write(ops.UNREGISTER_CONSUMER, self.ref(partition_id, consumer=consumer))

    def seqs(self, after_seq: int = 0, partition_id: str = "p0", **options: Any) -> list[int]:
        batch = self.node.read_feed(TABLE["id"], partition_id, after_seq, **options)
        return [record["seq"] for record in batch.records]

    def stored_seqs(self, partition_id: str = "p0") -> list[int]:
        """Every change-log record of the partition actually in the store."""
        return [record["seq"] for record in self.node.changes(TABLE["id"], partition_id, 0, 10_000)]


@pytest.fixture
def feed(tmp_path: Path) -> Iterator[Feed]:
    f = Feed(tmp_path / "node", records_max=5)
    f.create()
    yield f
    f.store.close()


# The retention rule, pure ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("first", "last", "records_max", "checkpoints", "keep"),
    [
        (1, 3, 5, [], 1),  # Under the bound, no consumer: everything stays.
        (1, 8, 5, [], 4),  # No consumer: the newest 5.
        (1, 4, 5, [0], 1),  # A consumer at 0 holds everything within the bound.
        (1, 4, 5, [2], 3),  # ...and lets go of what it passed.
        (1, 4, 5, [2, 1], 2),  # The slowest consumer decides.
        (1, 9, 5, [0], 5),  # The hard bound wins over a consumer that fell behind.
        (6, 9, 5, [2], 6),  # Never backwards.
        (1, 4, 5, [4], 5),  # Everything passed: an empty log, ready for seq 5.
    ],
)
def test_first_retained_seq(
    first: int, last: int, records_max: int, checkpoints: list[int], keep: int
) -> None:
    assert first_retained_seq(first, last, records_max, checkpoints) == keep


@pytest.mark.parametrize(
    ("keep", "last", "log_bytes", "bytes_max", "sizes", "expected"),
    [
        (1, 3, 30, 100, [(1, 10), (2, 10), (3, 10)], (1, 30)),  # Within both bounds.
        (2, 3, 30, 100, [(1, 10), (2, 10), (3, 10)], (2, 20)),  # The record bound's trim, counted.
        (1, 3, 30, 25, [(1, 10), (2, 10), (3, 10)], (2, 20)),  # The oldest go past the bytes...
        (1, 3, 30, 5, [(1, 10), (2, 10), (3, 10)], (3, 10)),  # ...but never the newest record.
        (1, 3, 300, 100, [(1, 200), (2, 50), (3, 50)], (2, 100)),  # One large record goes.
        (3, 2, 20, 100, [(1, 10), (2, 10)], (3, 0)),  # Everything passed: an empty log.
        (1, 0, 0, 100, [], (1, 0)),  # An empty log stays empty.
    ],
)
def test_first_retained_within_bytes(
    keep: int,
    last: int,
    log_bytes: int,
    bytes_max: int,
    sizes: list[tuple[int, int]],
    expected: tuple[int, int],
) -> None:
    assert first_retained_within_bytes(keep, last, log_bytes, bytes_max, sizes) == expected


def test_the_bytes_bound_reads_only_what_it_trims() -> None:
    read: list[int] = []

    def sizes() -> Iterator[tuple[int, int]]:
        for seq in range(1, 1001):
            read.append(seq)
            yield seq, 10

    assert first_retained_within_bytes(1, 1000, 10_000, 9_980, sizes()) == (3, 9_980)
    assert read == [1, 2, 3]


# Reading ---------------------------------------------------------------------------------------


def test_records_after_a_seq_in_bounded_batches(feed: Feed) -> None:
    feed.put(1, 2, 3)
    batch = feed.node.read_feed(TABLE["id"], "p0", 0)
    assert [r["kind"] for r in batch.records] == ["INSERT"] * 3
    assert all(r["by_service"] is False for r in batch.records)
    assert (batch.first_seq, batch.last_seq, batch.end_of_log) == (1, 3, False)
    assert feed.seqs(1) == [2, 3]
    assert feed.seqs(0, records_max=2) == [1, 2]
    assert feed.seqs(3) == []
    with pytest.raises(StaleEpoch):
        feed.node.read_feed(TABLE["id"], "nope", 0)


def test_a_batch_is_cut_at_its_byte_target(feed: Feed) -> None:
    feed.put(1, 2, 3)
    bounds = feed.node.feed_bounds(TABLE["id"], "p0")
    batch = changefeed.read_batch(feed.store, TABLE["id"], "p0", bounds, 0, bytes_target=1)
    assert [r["seq"] for r in batch.records] == [1]


# Retention with 0, 1 and 2 consumers -----------------------------------------------------------


def test_without_consumers_the_log_keeps_its_hard_bound(feed: Feed) -> None:
    feed.put(*range(1, 9))
    assert feed.stored_seqs() == [4, 5, 6, 7, 8]
    assert feed.node.feed_bounds(TABLE["id"], "p0") == changefeed.LogBounds(4, 8)


def test_one_consumer_holds_what_it_has_not_passed(feed: Feed) -> None:
    assert feed.register("gsi", 0) == {"seq": 0, "first_seq": 1, "last_seq": 0}
    feed.put(1, 2, 3, 4)
    assert feed.stored_seqs() == [1, 2, 3, 4]
    assert feed.checkpoint("gsi", 2) == {"seq": 2, "first_seq": 3, "last_seq": 4}
    assert feed.stored_seqs() == [3, 4]
    assert feed.checkpoint("gsi", 1)["seq"] == 2  # Never backwards.
    feed.put(5)
    assert feed.stored_seqs() == [3, 4, 5]
    feed.checkpoint("gsi", 5)
    assert feed.stored_seqs() == []
    feed.put(6)
    assert feed.seqs(5) == [6]


def test_two_consumers_the_slowest_decides(feed: Feed) -> None:
    feed.register("fast", 0)
    feed.register("slow", 0)
    feed.put(1, 2, 3, 4)
    feed.checkpoint("fast", 4)
    assert feed.stored_seqs() == [1, 2, 3, 4]
    feed.checkpoint("slow", 1)
    assert feed.stored_seqs() == [2, 3, 4]
    feed.unregister("slow")
    assert feed.stored_seqs() == []
    assert feed.unregister("slow")["unregistered"] is False


def test_past_the_hard_bound_a_consumer_must_resnapshot(feed: Feed) -> None:
    feed.register("lagging", 0)
    feed.put(*range(1, 8))  # 7 records, the bound is 5.
    assert feed.stored_seqs() == [3, 4, 5, 6, 7]
    with pytest.raises(ChangeLogTrimmed) as trimmed:
        feed.seqs(feed.node.consumer_checkpoint(TABLE["id"], "p0", "lagging") or 0)
    assert trimmed.value.first_retained_seq == 3
    assert trimmed.value.type_name == "TrimmedDataAccessException"
    # Re-snapshotted as of seq 2, it follows on from there.
    feed.checkpoint("lagging", 2)
    assert feed.seqs(2) == [3, 4, 5, 6, 7]
    # A new consumer cannot start before what the log holds either.
    with pytest.raises(ChangeLogTrimmed):
        feed.register("late", 1)
    assert feed.register("late", None)["seq"] == 7  # None: from now on.


def stored_bytes(feed: Feed, partition_id: str = "p0") -> int:
    """The bytes of every change-log record of the partition actually in the store."""
    rows = feed.store.walk(Family.CHANGE_LOG, b"", None, forward=True)
    return sum(len(value) for _, value in rows)


def test_without_consumers_the_log_keeps_its_bytes_bound(tmp_path: Path) -> None:
    feed = Feed(tmp_path / "node", records_max=1000, bytes_max=10_000)
    feed.create()
    feed.put(*range(1, 11), pad=3000)  # One group of ten records of about 3 KB each.
    kept = feed.stored_seqs()
    assert kept == list(range(8, 11))
    assert feed.node.partitions[TABLE["id"], "p0"].log_bytes == stored_bytes(feed) <= 10_000
    for n in range(11, 21):  # One record per group: each trims what the bound needs.
        feed.put(n, pad=3000)
    assert feed.stored_seqs() == list(range(18, 21))
    assert feed.node.partitions[TABLE["id"], "p0"].log_bytes == stored_bytes(feed)
    # The byte count is kept with the partition: a restarted node trims from where it was.
    feed.reopen()
    assert feed.node.partitions[TABLE["id"], "p0"].log_bytes == stored_bytes(feed)
    feed.put(21, pad=3000)
    assert feed.stored_seqs() == [19, 20, 21]
    feed.store.close()


def test_the_newest_record_stays_whatever_its_size(tmp_path: Path) -> None:
    feed = Feed(tmp_path / "node", bytes_max=1000)
    feed.create()
    feed.put(1, 2, pad=5000)
    assert feed.stored_seqs() == [2]
    feed.store.close()


def test_past_the_bytes_bound_a_consumer_must_resnapshot(tmp_path: Path) -> None:
    feed = Feed(tmp_path / "node", records_max=1000, bytes_max=10_000)
    feed.create()
    feed.register("lagging", 0)
    for n in range(1, 8):
        feed.put(n, pad=3000)
    assert feed.stored_seqs() == [5, 6, 7]
    with pytest.raises(ChangeLogTrimmed) as trimmed:
        feed.seqs(feed.node.consumer_checkpoint(TABLE["id"], "p0", "lagging") or 0)
    assert trimmed.value.first_retained_seq == 5
    feed.checkpoint("lagging", 4)  # Re-snapshotted as of seq 4, it follows on from there.
    assert feed.seqs(4) == [5, 6, 7]
    feed.store.close()


def test_a_log_written_before_the_bytes_bound_is_measured_once(tmp_path: Path) -> None:
    feed = Feed(tmp_path / "node", bytes_max=10_000)
    feed.create()
    feed.put(1, 2, pad=3000)
    # The metadata as a node that did not count log bytes wrote it.
    meta_key, meta = next(iter(feed.store.walk(Family.PARTITIONS, b"", None, forward=True)))
    older = orjson.loads(meta)
    del older["log_bytes"]
    batch = feed.store.batch()
    batch.put(Family.PARTITIONS, meta_key, orjson.dumps(older))
    feed.store.commit(batch)
    feed.reopen()
    assert feed.node.partitions[TABLE["id"], "p0"].log_bytes == stored_bytes(feed) > 6000
    feed.store.close()


def test_a_stale_view_of_the_bounds_cannot_skip_a_trimmed_record(feed: Feed) -> None:
    feed.put(*range(1, 9))
    stale = changefeed.LogBounds(1, 8)  # Metadata read before the commit that trimmed.
    with pytest.raises(ChangeLogTrimmed) as trimmed:
        changefeed.read_batch(feed.store, TABLE["id"], "p0", stale, 1)
    assert trimmed.value.first_retained_seq == 4


def test_consumer_writes_are_checked(feed: Feed) -> None:
    feed.put(1, 2)
    with pytest.raises(ResourceNotFound):
        feed.checkpoint("nobody", 1)
    feed.register("c", 0)
    assert feed.register("c", 2)["seq"] == 0  # Registering again moves nothing.
    with pytest.raises(ValidationError):
        feed.checkpoint("c", 3)  # Past the log's end.
    with pytest.raises(ValidationError):
        feed.register("d", 9)
    with pytest.raises(ValidationError):
        feed.register("")
    with pytest.raises(ValidationError):
        feed.register("x" * 256)
    with pytest.raises(StaleEpoch):
        feed.register("c", 0, partition_id="elsewhere")
    for n in range(limits.CHANGE_FEED_CONSUMERS_PER_PARTITION_MAX - 1):
        feed.register(f"extra-{n}")
    with pytest.raises(LimitExceeded):
        feed.register("one-too-many")


def test_checkpoints_commit_with_the_writes_of_their_group(feed: Feed) -> None:
    feed.register("c", 0)
    body = feed.ref(epoch=1, item={"pk": {"S": "k1"}})
    results = envelope.apply(
        feed.node, [(ops.PUT, body), (ops.CHECKPOINT, feed.ref(consumer="c", seq=1))]
    )
    assert results[1] == {"seq": 1, "first_seq": 2, "last_seq": 1}
    assert feed.stored_seqs() == []


# The END record ---------------------------------------------------------------------------------


def retire(feed: Feed, children: list[str] | None = None) -> dict[str, Any]:
    return feed.write(ops.RETIRE_PARTITION, feed.ref(epoch=1, children=children))


def test_retire_ends_the_log_and_keeps_it_for_its_consumers(feed: Feed) -> None:
    feed.register("gsi", 0)
    feed.register("streams", 0)
    feed.put(1, 2)
    assert retire(feed, ["p0a", "p0b"]) == {"retired": True}
    with pytest.raises(StaleEpoch):  # The partition itself is gone...
        feed.put(3)
    batch = feed.node.read_feed(TABLE["id"], "p0", 0)  # ...its log is not.
    assert [r["seq"] for r in batch.records] == [1, 2, 3]
    end = batch.records[-1]
    assert (end["kind"], end["children"], end["keys"], end["by_service"]) == (
        "END",
        ["p0a", "p0b"],
        None,
        True,
    )
    assert batch.end_of_log
    assert feed.node.read_feed(TABLE["id"], "p0", 1).end_of_log
    assert feed.node.read_feed(TABLE["id"], "p0", 3) == changefeed.FeedBatch([], True, 1, 3)
    assert retire(feed) == {"retired": False}  # Idempotent.
    # Consumers pass records of a retired log as of a live one; at END the first is done.
    assert feed.checkpoint("gsi", 3) == {"seq": 3, "first_seq": 1, "last_seq": 3}
    assert feed.checkpoint("streams", 2) == {"seq": 2, "first_seq": 3, "last_seq": 3}
    assert feed.stored_seqs() == [3]
    # The last consumer reads END: the log, its checkpoints and its record go.
    assert feed.checkpoint("streams", 3) == {"seq": 3, "first_seq": 0, "last_seq": 0}
    with pytest.raises(StaleEpoch):
        feed.node.read_feed(TABLE["id"], "p0", 0)
    for family in (Family.CHANGE_LOG, Family.CHECKPOINTS, Family.RETIRED_LOGS):
        assert list(feed.store.walk(family, b"", None, forward=True)) == []


def test_retire_without_consumers_drops_the_log_at_once(feed: Feed) -> None:
    feed.put(1, 2)
    assert retire(feed, ["a", "b"]) == {"retired": True}
    with pytest.raises(StaleEpoch):
        feed.node.read_feed(TABLE["id"], "p0", 0)
    assert list(feed.store.walk(Family.CHANGE_LOG, b"", None, forward=True)) == []


def test_unregistering_the_last_consumer_of_a_retired_log_drops_it(feed: Feed) -> None:
    feed.register("c", 0)
    feed.put(1)
    retire(feed, ["a"])
    assert feed.unregister("c") == {"unregistered": True, "first_seq": 0, "last_seq": 0}
    with pytest.raises(StaleEpoch):
        feed.node.read_feed(TABLE["id"], "p0", 0)


def test_a_partition_that_returns_starts_a_new_log(feed: Feed) -> None:
    feed.register("c", 0)
    feed.put(1)
    retire(feed, ["p0"])
    feed.create()  # Moved back to this node while its old log waited for "c".
    assert feed.node.consumer_checkpoint(TABLE["id"], "p0", "c") is None
    feed.put(7)
    assert [r["keys"] for r in feed.node.read_feed(TABLE["id"], "p0", 0).records] == [
        {"pk": {"S": "k7"}}
    ]


def test_drop_table_drops_its_feeds(feed: Feed) -> None:
    feed.create("q0", OTHER)
    other = {"table_id": OTHER["id"], "partition_id": "q0"}
    feed.write(ops.REGISTER_CONSUMER, {**other, "consumer": "c", "seq": 0})
    feed.register("c", 0)
    feed.create("p1")
    feed.register("c", 0, partition_id="p1")
    feed.put(1, partition_id="p1")
    feed.write(ops.RETIRE_PARTITION, feed.ref("p1", epoch=1, children=[]))
    feed.write(ops.DROP_TABLE, {"table_id": TABLE["id"]})
    assert feed.node.feeds.checkpoints == {(OTHER["id"], "q0"): {"c": 0}}
    assert feed.node.feeds.retired == {}
    feed.reopen()
    assert feed.node.feeds.checkpoints == {(OTHER["id"], "q0"): {"c": 0}}
    assert feed.node.feeds.retired == {}


# Durability ---------------------------------------------------------------------------------------


def test_checkpoints_and_retired_logs_survive_reopening_the_store(feed: Feed) -> None:
    feed.register("a", 0)
    feed.register("b", 0)
    feed.put(1, 2, 3)
    feed.checkpoint("a", 2)
    feed.checkpoint("b", 1)
    feed.reopen()
    assert feed.node.consumer_checkpoint(TABLE["id"], "p0", "a") == 2
    assert feed.node.consumer_checkpoint(TABLE["id"], "p0", "b") == 1
    assert feed.stored_seqs() == [2, 3]
    feed.put(4)
    assert feed.stored_seqs() == [2, 3, 4]  # Still held for "b" after the restart.
    retire(feed, ["x", "y"])
    feed.reopen()
    assert feed.node.feeds.retired[TABLE["id"], "p0"] == changefeed.RetiredLog(
        TABLE["id"], "p0", 2, 5, ("x", "y")
    )
    assert feed.seqs(1) == [2, 3, 4, 5]
    feed.checkpoint("a", 5)
    feed.checkpoint("b", 5)
    feed.reopen()
    assert feed.node.feeds.checkpoints == {}
    assert feed.node.feeds.retired == {}
