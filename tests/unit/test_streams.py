"""core.streams (shards, sequence numbers, iterators, records) and dynalab.checkers.check_stream."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

import pytest

from core import catalog, streams
from core.catalog import StreamDef, StreamViewType, TableDef, Throughput
from core.errors import ExpiredIterator, ValidationError
from core.keys import KeyShape
from core.streams import ShardIterator
from core.token_bucket import BillingMode
from dynalab.checkers import check_stream

NOW = 1_700_000_000.0
STREAM = StreamDef("2023-11-14T22:13:20.000", StreamViewType.NEW_AND_OLD_IMAGES, NOW)


def table() -> TableDef:
    created = catalog.created(
        name="T",
        table_id="ab" * 16,
        key_shape=KeyShape.table(("pk", "S"), None),
        attribute_definitions=[("pk", "S")],
        billing_mode=BillingMode.PROVISIONED,
        throughput=Throughput(1, 1),
        now=NOW,
        owner=lambda _: "node-1",
    )
    return catalog.activated(created)


def test_shard_ids_have_dynamodb_form_and_differ_per_stream() -> None:
    (first,) = table().partitions
    shard = streams.shard_id(STREAM, first)
    assert re.fullmatch(r"shardId-\d{20}-[0-9a-f]{8}", shard) and 28 <= len(shard) <= 65
    # The stream's creation, in milliseconds, plus the partition's rank (1: the table's first).
    assert shard.startswith(f"shardId-{round(STREAM.created * 1000) + 1:020d}-")
    assert shard == streams.shard_id(STREAM, first)
    assert shard != streams.shard_id(STREAM, replace(first, id="p-1"))
    later = replace(STREAM, label="2023-11-14T22:13:20.001", created=STREAM.created + 0.001)
    assert shard != streams.shard_id(later, first)


def test_shard_ids_sort_in_creation_order_parents_first() -> None:
    start = catalog.stream_enabled(table(), StreamViewType.KEYS_ONLY, STREAM.label, NOW)
    (only,) = start.partitions
    # Three splits, each recorded at a later version of the row: the first partition's, its
    # high child's, then its low child's (a partition made earlier split later).
    once, low, high = catalog.split(start, only.id, bytes.fromhex("80"), "low", "high", now=NOW)
    once = catalog.versioned(once, 2)
    twice, _, _ = catalog.split(once, high.id, bytes.fromhex("c0"), "high-a", "high-b", now=NOW)
    twice = catalog.versioned(twice, 3)
    enabled, _, _ = catalog.split(twice, low.id, bytes.fromhex("40"), "low-a", "low-b", now=NOW)
    assert enabled.stream is not None
    shards = streams.stream_shards(enabled, enabled.stream)
    ids = [streams.shard_id(enabled.stream, partition) for partition, _ in shards]
    assert ids == sorted(ids)
    order = [partition.id for partition, _ in shards]
    assert order[0] == only.id and set(order[1:3]) == {"low", "high"}
    assert set(order[3:5]) == {"high-a", "high-b"} and set(order[5:]) == {"low-a", "low-b"}
    # Each child names its parent's shard by the id the parent's shard has.
    by_partition = dict(zip(order, ids, strict=True))
    for partition, _ in shards:
        parent = streams.parent_shard_id(enabled.stream, partition)
        assert parent == (None if partition.parent is None else by_partition[partition.parent])


def shard_time(shard: str) -> int:
    """The creation time a shard id carries, in milliseconds."""
    return int(shard.split("-")[1])


def test_a_shard_id_carries_its_partitions_creation_time() -> None:
    # The table and its stream made at NOW; a split recorded an hour later.
    start = catalog.stream_enabled(table(), StreamViewType.KEYS_ONLY, STREAM.label, NOW)
    stream = start.stream
    assert stream is not None
    (only,) = start.partitions
    later = NOW + 3600.25
    split, low, high = catalog.split(start, only.id, bytes.fromhex("80"), "low", "high", now=later)
    assert low.created_ms == high.created_ms == 1_700_003_600_250
    assert (low.parent_created_ms, only.created_ms) == (1_700_000_000_000, 1_700_000_000_000)
    # The children's shards are dated when they were made; the first partition, made with the
    # stream, at the stream's creation plus its rank (1).
    assert shard_time(streams.shard_id(stream, low)) == 1_700_003_600_250
    assert shard_time(streams.shard_id(stream, only)) == 1_700_000_000_001
    assert streams.parent_shard_id(stream, low) == streams.shard_id(stream, only)
    # A stream enabled after the split dates the partitions already there at its own creation
    # plus their ranks, parents still first.
    off = catalog.stream_disabled(
        split,
        [catalog.ClosedShard(p, 0) for p in (*split.partitions, *split.retired)],
        later + 1,
    )
    again = catalog.stream_enabled(
        off, StreamViewType.KEYS_ONLY, "2023-11-15T00:00:00.000", NOW + 7200
    )
    assert again.stream is not None
    ids = [streams.shard_id(again.stream, p) for p, _ in streams.stream_shards(again, again.stream)]
    assert [shard_time(shard) for shard in ids] == [
        1_700_007_200_001,
        low.rank + 1_700_007_200_000,
        high.rank + 1_700_007_200_000,
    ]
    assert ids[0] < ids[1] and ids[0] < ids[2]


def test_a_child_made_on_a_clock_behind_its_parents_still_sorts_after_it() -> None:
    start = catalog.stream_enabled(table(), StreamViewType.KEYS_ONLY, STREAM.label, NOW)
    assert start.stream is not None
    (only,) = start.partitions
    # The node recording the split runs a minute behind the router that created the table.
    _, low, high = catalog.split(start, only.id, bytes.fromhex("80"), "low", "high", now=NOW - 60)
    assert low.created_ms == only.created_ms + 1
    parent_shard = streams.shard_id(start.stream, only)
    assert all(parent_shard < streams.shard_id(start.stream, child) for child in (low, high))


def test_a_partition_recorded_before_creation_times_keeps_its_shard_id() -> None:
    start = catalog.stream_enabled(table(), StreamViewType.KEYS_ONLY, STREAM.label, NOW)
    stream = start.stream
    assert stream is not None
    (only,) = start.partitions
    # A catalog row written before partitions recorded their creation: rank only.
    document = only.to_json()
    del document["created_ms"]
    old = catalog.PartitionDef.from_json(document)
    assert old.created_ms == 0 and old.to_json() == document
    # Its id is the one handed out before: the stream's creation plus the rank.
    assert shard_time(streams.shard_id(stream, old)) == round(NOW * 1000) + old.rank
    # Its children, made now, name it by that id and sort after it.
    old_table = replace(start, partitions=(old,))
    _, low, _ = catalog.split(old_table, old.id, bytes.fromhex("80"), "low", "high", now=NOW + 5)
    assert (low.parent_created_ms, low.created_ms) == (0, round((NOW + 5) * 1000))
    assert streams.parent_shard_id(stream, low) == streams.shard_id(stream, old)
    assert streams.shard_id(stream, old) < streams.shard_id(stream, low)
    # Recorded ones survive the row's round trip.
    assert catalog.PartitionDef.from_json(low.to_json()) == low


def test_lineage_puts_parents_first() -> None:
    start = table()
    (only,) = start.partitions
    split, low, _ = catalog.split(start, only.id, bytes.fromhex("80"), "low", "high", now=NOW)
    split, _, _ = catalog.split(split, low.id, bytes.fromhex("40"), "lower", "upper", now=NOW)
    order = [partition.id for partition in streams.lineage(split)]
    assert order.index(only.id) < order.index("low") < order.index("lower")
    assert order.index(only.id) < order.index("high")
    assert set(order) == {only.id, "low", "high", "lower", "upper"}


def test_a_disabled_stream_keeps_the_shards_it_closed() -> None:
    start = table()
    (only,) = start.partitions
    split, low, high = catalog.split(start, only.id, bytes.fromhex("80"), "low", "high", now=NOW)
    enabled = catalog.stream_enabled(split, StreamViewType.KEYS_ONLY, STREAM.label, NOW)
    assert enabled.stream is not None
    # An enabled stream's shards are the table's partitions, open.
    assert streams.stream_shards(enabled, enabled.stream) == [
        (p, None) for p in streams.lineage(enabled)
    ]
    ends = {only.id: 4, "low": 9, "high": 0}
    shards = [catalog.ClosedShard(p, ends[p.id]) for p in (*split.partitions, *split.retired)]
    off = catalog.stream_disabled(enabled, shards, NOW + 1)
    assert off.stream is not None
    # A split after the disabling adds no shard to the disabled stream.
    later, _, _ = catalog.split(off, low.id, bytes.fromhex("40"), "lower", "upper", now=NOW)
    assert later.stream is not None
    closed = streams.stream_shards(later, later.stream)
    assert [(p.id, end) for p, end in closed] == [(only.id, 4), ("low", 9), ("high", 0)]
    assert closed[1][0] == low and closed[2][0] == high


def test_sequence_numbers_order_as_numbers_and_round_trip() -> None:
    numbers = [streams.sequence_number(seq) for seq in (1, 9, 10, 12345)]
    assert numbers == sorted(numbers) and all(len(n) == 21 for n in numbers)
    assert streams.parse_sequence_number(numbers[-1]) == 12345
    with pytest.raises(ValidationError):
        streams.parse_sequence_number("12x" + "0" * 20)


def test_iterators_round_trip_and_expire_after_15_minutes() -> None:
    iterator = ShardIterator("t", STREAM.label, "p-0", 7, NOW)
    assert ShardIterator.decode(iterator.encode(), NOW + 900) == iterator
    with pytest.raises(ExpiredIterator) as raised:
        ShardIterator.decode(iterator.encode(), NOW + 901)
    assert raised.value.message == (
        "Iterator expired. The iterator was created at time Tue Nov 14 22:13:20 UTC 2023 "
        "while right now it's Tue Nov 14 22:28:21 UTC 2023"
    )
    for text in ("", "!!", "eyJ2IjoyfQ==", iterator.encode()[:-4]):
        with pytest.raises(ValidationError):
            ShardIterator.decode(text, NOW)


def change(kind: str, old: Any, new: Any, by_service: bool = False) -> dict[str, Any]:
    return {
        "seq": 3,
        "kind": kind,
        "keys": {"pk": {"S": "a"}},
        "old": old,
        "new": new,
        "by_service": by_service,
        "at": NOW + 0.5,
    }


@pytest.mark.parametrize(
    ("view_type", "images"),
    [
        (StreamViewType.KEYS_ONLY, set()),
        (StreamViewType.NEW_IMAGE, {"NewImage"}),
        (StreamViewType.OLD_IMAGE, {"OldImage"}),
        (StreamViewType.NEW_AND_OLD_IMAGES, {"NewImage", "OldImage"}),
    ],
)
def test_records_carry_the_images_of_their_view_type(
    view_type: StreamViewType, images: set[str]
) -> None:
    stream = replace(STREAM, view_type=view_type)
    old = {"pk": {"S": "a"}, "v": {"N": "1"}}
    new = {"pk": {"S": "a"}, "v": {"N": "2"}}
    record = streams.stream_record(stream, "p-0", change("MODIFY", old, new), "eu-west-1")
    body = record["dynamodb"]
    assert set(body) - {"ApproximateCreationDateTime", "Keys", "SequenceNumber", "SizeBytes"} == {
        "StreamViewType",
        *images,
    }
    assert body["SequenceNumber"] == "000000000000000000003"
    assert body["ApproximateCreationDateTime"] == int(NOW)
    assert record["awsRegion"] == "eu-west-1" and record["eventName"] == "MODIFY"
    assert "userIdentity" not in record


def test_a_service_removal_names_dynamodb_as_its_user() -> None:
    removal = change("REMOVE", {"pk": {"S": "a"}}, None, by_service=True)
    record = streams.stream_record(STREAM, "p-0", removal, "r")
    assert record["userIdentity"] == {"PrincipalId": "dynamodb.amazonaws.com", "Type": "Service"}
    assert "NewImage" not in record["dynamodb"]


def test_expired_through_stops_at_the_first_record_still_owed() -> None:
    changes = [{"seq": s, "kind": "INSERT", "at": at} for s, at in ((1, 0.0), (2, 5.0), (3, 9.0))]
    assert streams.expired_through(changes, now=10.0, retention=4.0) == 2
    assert streams.expired_through(changes, now=10.0, retention=20.0) is None


def test_check_stream_finds_lost_doubled_reordered_and_invented_changes() -> None:
    acknowledged = {"a": [1, 2, 3], "b": [1]}
    assert check_stream(acknowledged, {"a": [1, 2, 3], "b": [1]}) == []
    assert check_stream(acknowledged, {"a": [1, 3], "b": [1]}) == [
        "a: acknowledged changes [2] never appeared"
    ]
    assert check_stream(acknowledged, {"a": [1, 2, 2, 3], "b": [1]}) == [
        "a: change 2 appeared 2 times"
    ]
    assert check_stream(acknowledged, {"a": [2, 1, 3], "b": [1]}) == [
        "a: changes appeared as [2, 1, 3], made as [1, 2, 3]"
    ]
    assert check_stream(acknowledged, {"a": [1, 2, 3], "b": [1, 7]}) == [
        "b: change 7 was never made"
    ]
    assert check_stream(acknowledged, {"a": [1, 2, 3], "b": [1, 7]}, {"b": {7}}) == []
