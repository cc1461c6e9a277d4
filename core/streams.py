"""DynamoDB Streams over the change feed: shards, sequence numbers, iterators and stream records.

A table's stream (`core.catalog.StreamDef`) is read through its partitions' change logs: one shard
per partition, live or retired by a split. Everything the Streams API says is derived here, with no
IO and the time passed in:

- **Shards.** A shard's id has DynamoDB's form, `shardId-` then 20 digits of its creation time in
  milliseconds, `-` and 8 hex digits, so that ids sort in creation order, which the Kinesis
  Client Library's DynamoDB Streams adapter relies on (a parent's shard before its children's).
  The time is the partition's creation (`PartitionDef.created_ms`, recorded in the table's row
  by whoever made it, so every router names a shard alike), or, for a partition made before the
  stream was, the stream's creation plus the partition's creation rank in the table's row
  (`PartitionDef.rank`, one more for every row version that made partitions): the later of the
  two. A child is made at least a millisecond and a rank after its parent, so its shard sorts
  after its parent's even when both predate the stream or the clocks of their makers disagree;
  unrelated partitions sort by their makers' clocks. A partition recorded before creation times
  were kept (`created_ms` 0) keeps the id it had, the stream's creation plus its rank. The hex
  digits come from the stream's label and the partition's id: a new stream (a new label) has
  new ids, and `ParentShardId` is the shard of the partition it was split from
  (`PartitionDef.parent`, `parent_rank`, `parent_created_ms`). `stream_shards` lists them in id
  order, which is parent first, the order in which a reader must drain them (a parent's log ends
  with an END record naming its children).
- **Sequence numbers.** A change's seq, numbered per partition from 1, written as a 21-digit
  decimal string: DynamoDB's sequence numbers are numeric strings of 21 to 40 digits that order the
  records of a shard, and so do these.
- **Iterators.** A shard iterator carries the table id, stream label, partition id, the seq it
  reads after and when it was handed out, as URL-safe base64 of JSON. Routers are stateless: any
  router reads any iterator. One used 15 minutes after it was handed out is refused with
  ExpiredIteratorException, as DynamoDB's are.
- **Records.** `stream_record` shapes a change as DynamoDB shapes a stream record: eventID,
  eventName INSERT/MODIFY/REMOVE, eventVersion, eventSource `aws:dynamodb`, awsRegion, and
  `dynamodb` with ApproximateCreationDateTime, Keys, NewImage/OldImage as the view type says,
  SequenceNumber, SizeBytes and StreamViewType; a TTL deletion (a change the service made) carries
  `userIdentity` {PrincipalId `dynamodb.amazonaws.com`, Type `Service`}.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from core import limits
from core.catalog import PartitionDef, StreamDef, StreamViewType, TableDef, milliseconds
from core.errors import ExpiredIterator, ValidationError
from core.size import item_size_bytes

SEQUENCE_NUMBER_DIGITS = 21  # The fewest digits the service model allows a SequenceNumber.
SEQUENCE_NUMBER_DIGITS_MAX = 40
EVENT_VERSION = "1.1"
EVENT_SOURCE = "aws:dynamodb"
SERVICE_PRINCIPAL = "dynamodb.amazonaws.com"
# Shortens the retention (limits.STREAM_RETENTION_SECONDS) for tests, in routers and nodes alike.
RETENTION_ENV = "DYNALAB_STREAM_RETENTION_SECONDS"
_ITERATOR_VERSION = 1
INVALID_ITERATOR = "Invalid ShardIterator"
_NEW_IMAGE_TYPES = frozenset({StreamViewType.NEW_IMAGE, StreamViewType.NEW_AND_OLD_IMAGES})
_OLD_IMAGE_TYPES = frozenset({StreamViewType.OLD_IMAGE, StreamViewType.NEW_AND_OLD_IMAGES})


def shard_id(stream: StreamDef, partition: PartitionDef) -> str:
    """The shard of `partition` in `stream` (see the module's docstring)."""
    return _shard_id(stream, partition.id, partition.rank, partition.created_ms)


def parent_shard_id(stream: StreamDef, partition: PartitionDef) -> str | None:
    """The shard of the partition `partition` was split from (None: it was not)."""
    if partition.parent is None:
        return None
    return _shard_id(stream, partition.parent, partition.parent_rank, partition.parent_created_ms)


def shard_created_ms(stream: StreamDef, rank: int, created_ms: int) -> int:
    """When the shard of a partition made at `created_ms` (0: not recorded) with `rank` was
    created, in milliseconds: the partition's creation, or the stream's plus the rank for a
    partition older than the stream."""
    return max(created_ms, milliseconds(stream.created) + rank)


def _shard_id(stream: StreamDef, partition_id: str, rank: int, created_ms: int) -> str:
    # `shardId-`, 20 digits and 8 hex digits: the form (and the 28-65 characters) of DynamoDB's.
    digest = hashlib.sha256(f"{stream.label}/{partition_id}".encode()).digest()
    return f"shardId-{shard_created_ms(stream, rank, created_ms):020d}-{digest[:4].hex()}"


def lineage(table: TableDef) -> list[PartitionDef]:
    """The table's partitions, retired and serving, parent first (then by key range)."""
    return lineage_of((*table.retired, *table.partitions))


def stream_shards(table: TableDef, stream: StreamDef) -> list[tuple[PartitionDef, int | None]]:
    """The shards of `stream` in shard id order (creation order, so parent first), as
    (partition, the last seq the stream holds of it): an enabled stream's are the table's
    partitions, open (None: their logs say where a retired one ends); a disabled stream's are the
    ones it closed when it was disabled."""
    if stream.enabled:
        shards: list[tuple[PartitionDef, int | None]] = [(p, None) for p in lineage(table)]
    else:
        ends = {shard.partition.id: shard.end_seq for shard in stream.shards}
        shards = [(p, ends[p.id]) for p in lineage_of(shard.partition for shard in stream.shards)]
    # In id order, as DynamoDB lists them (a partition recorded before ranks and creation times
    # were kept, rank 0, sorts among its table's first partitions).
    return sorted(shards, key=lambda shard: shard_id(stream, shard[0]))


def lineage_of(partitions_in: Iterable[PartitionDef]) -> list[PartitionDef]:
    """`partitions_in` parent first (then by key range)."""
    partitions = {partition.id: partition for partition in partitions_in}

    def depth(partition: PartitionDef) -> int:
        count = 0
        while partition.parent is not None and partition.parent in partitions:
            partition = partitions[partition.parent]
            count += 1
        return count

    return sorted(partitions.values(), key=lambda p: (depth(p), bytes.fromhex(p.start), p.id))


def sequence_number(seq: int) -> str:
    return f"{seq:0{SEQUENCE_NUMBER_DIGITS}d}"


def parse_sequence_number(text: str) -> int:
    """The seq a SequenceNumber names; ValidationException for one that names none."""
    if not text.isdigit() or not SEQUENCE_NUMBER_DIGITS <= len(text) <= SEQUENCE_NUMBER_DIGITS_MAX:
        raise ValidationError(f"Invalid SequenceNumber: {text}")
    return int(text)


@dataclass(frozen=True, slots=True)
class ShardIterator:
    """Where a reader of one shard stands: after `after_seq` of partition `partition_id`."""

    table_id: str
    label: str
    partition_id: str
    after_seq: int
    issued: float  # Epoch seconds when a router handed it out.

    def encode(self) -> str:
        document = {
            "v": _ITERATOR_VERSION,
            "t": self.table_id,
            "l": self.label,
            "p": self.partition_id,
            "a": self.after_seq,
            "i": self.issued,
        }
        raw = json.dumps(document, separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(raw).decode()

    @classmethod
    def decode(cls, text: str, now: float) -> ShardIterator:
        """The iterator `text` encodes, refused when malformed (ValidationException) or handed
        out more than `limits.SHARD_ITERATOR_SECONDS_MAX` before `now` (ExpiredIterator)."""
        try:
            document = json.loads(base64.urlsafe_b64decode(text.encode()))
            if not isinstance(document, dict) or document.get("v") != _ITERATOR_VERSION:
                raise ValueError(text)
            iterator = cls(
                table_id=str(document["t"]),
                label=str(document["l"]),
                partition_id=str(document["p"]),
                after_seq=int(document["a"]),
                issued=float(document["i"]),
            )
        except (ValueError, KeyError, TypeError, binascii.Error, UnicodeDecodeError):
            raise ValidationError(INVALID_ITERATOR) from None
        if iterator.after_seq < 0:
            raise ValidationError(INVALID_ITERATOR)
        if now - iterator.issued > limits.SHARD_ITERATOR_SECONDS_MAX:
            raise ExpiredIterator(
                f"Iterator expired. The iterator was created at time {_java_date(iterator.issued)} "
                f"while right now it's {_java_date(now)}"
            )
        return iterator

    def after(self, seq: int, now: float) -> ShardIterator:
        """The iterator that continues after `seq`, handed out at `now`."""
        return ShardIterator(self.table_id, self.label, self.partition_id, seq, now)


def _java_date(at: float) -> str:
    """A time as Java's Date.toString writes it in UTC, as DynamoDB's expiry message does."""
    return datetime.fromtimestamp(at, UTC).strftime("%a %b %d %H:%M:%S UTC %Y")


def event_id(stream: StreamDef, partition_id: str, seq: int) -> str:
    """A record's eventID: 32 hex digits, the same every time the record is read."""
    return hashlib.sha256(f"{stream.label}/{partition_id}/{seq}".encode()).hexdigest()[:32]


def stream_record(
    stream: StreamDef,
    partition_id: str,
    change: Mapping[str, Any],
    region: str,
) -> dict[str, Any]:
    """One change (`rpc.ops` CHANGE: seq, kind, keys, old, new, by_service, at) as DynamoDB
    Streams' Record, with the images the stream's view type carries."""
    view_type = stream.view_type
    keys = change["keys"]
    body: dict[str, Any] = {
        "ApproximateCreationDateTime": int(change["at"]),
        "Keys": keys,
    }
    size = item_size_bytes(keys)
    new, old = change.get("new"), change.get("old")
    if new is not None and view_type in (
        StreamViewType.NEW_IMAGE,
        StreamViewType.NEW_AND_OLD_IMAGES,
    ):
        body["NewImage"] = new
        size += item_size_bytes(new)
    if old is not None and view_type in (
        StreamViewType.OLD_IMAGE,
        StreamViewType.NEW_AND_OLD_IMAGES,
    ):
        body["OldImage"] = old
        size += item_size_bytes(old)
    body["SequenceNumber"] = sequence_number(change["seq"])
    body["SizeBytes"] = size
    body["StreamViewType"] = view_type.value
    record: dict[str, Any] = {
        "eventID": event_id(stream, partition_id, change["seq"]),
        "eventName": change["kind"],
        "eventVersion": EVENT_VERSION,
        "eventSource": EVENT_SOURCE,
        "awsRegion": region,
        "dynamodb": body,
    }
    if change.get("by_service"):
        record["userIdentity"] = {"PrincipalId": SERVICE_PRINCIPAL, "Type": "Service"}
    return record


def expired_through(
    changes: Iterable[Mapping[str, Any]], now: float, retention: float
) -> int | None:
    """The seq of the last of `changes` (oldest first, up to an END) committed more than
    `retention` seconds before `now`: what a stream no longer owes its readers. None when the
    first is still owed."""
    passed = None
    for change in changes:
        if change["kind"] == "END" or now - change["at"] <= retention:
            break
        passed = change["seq"]
    return passed


def retention_checkpoint(
    checkpoint: int, changes: Sequence[Mapping[str, Any]], now: float, retention: float
) -> int:
    """Where a stream's consumer at `checkpoint` stands once past what the stream no longer owes
    of `changes` (the records right after `checkpoint`, oldest first, up to an END): those
    committed more than `retention` seconds before `now`, and a retired log's END once every
    record before it in `changes` has expired (so the node drops the log)."""
    passed = expired_through(changes, now, retention)
    if passed is None:
        return checkpoint
    if len(changes) > 1 and changes[-1]["kind"] == "END" and passed == changes[-2]["seq"]:
        return int(changes[-1]["seq"])
    return passed
