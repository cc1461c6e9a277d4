"""The DynamoDB Streams API (`DynamoDBStreams_20120810.*`): ListStreams, DescribeStream,
GetShardIterator and GetRecords, served by the router over the partitions' change feeds.

A table's stream is in its catalog record (`core.catalog.StreamDef`); its shards are the table's
partitions, retired and serving (`core.streams`: shard ids, lineage, sequence numbers, iterators
and record shaping are pure). Each partition's log is held for the stream by a change-feed
consumer named after the stream's label, registered when the stream is enabled (or the
partition created); this module reads the logs with `rpc.transport.FeedTransport.read`, one
batch per GetRecords, and moves that consumer's checkpoint past what the stream no longer owes
(records older than the retention, 24 hours, and records the log's bounds trimmed) whenever it
positions a reader at a shard's TRIM_HORIZON or describes the stream, as each node also does on
its own every round (`storagenode/stream_retention.py`). So a log keeps what the stream owes,
within the log's own bounds in records and bytes (`limits.CHANGE_LOG_RECORDS_MAX`,
`CHANGE_LOG_BYTES_MAX`); a reader past either bound, or past the retention, is told
TrimmedDataAccessException.

A table's streams are served while readable: the latest while enabled, and a disabled one (the
latest or a previous one) for the retention after disabling, with the shards it closed then
(`core.streams.stream_shards`: each ends at the last seq its log had when the stream was
disabled, which GetRecords does not read past). The router's settings (`router.settings`,
DYNALAB_STREAM_RETENTION_SECONDS) may shorten the retention, for tests.
"""

from __future__ import annotations

import asyncio
import re
from bisect import bisect_right
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import orjson

from core import limits, streams
from core.catalog import PartitionDef, PartitionState, StreamDef, TableDef
from core.errors import (
    ChangeLogTrimmed,
    ResourceNotFound,
    ServiceUnavailable,
    StaleEpoch,
    ValidationError,
)
from core.streams import ShardIterator
from router.protocol import request_region
from router.requests import NAME_PATTERN, RequestReader
from router.tags import stream_arn
from rpc import ops
from rpc.transport import FeedPage

if TYPE_CHECKING:
    from router.context import RouterContext

T = TypeVar("T")

TRIMMED = "The operation attempted to read past the oldest stream record in a shard."
SHARD_NOT_FOUND = "Requested resource not found: Shard does not exist"
SHARD_FILTER_TYPES = ("CHILD_SHARDS",)
ITERATOR_TYPES = ("TRIM_HORIZON", "LATEST", "AT_SEQUENCE_NUMBER", "AFTER_SEQUENCE_NUMBER")
STREAM_ARN_CHARS = (37, 1024)
SHARD_ID_CHARS = (28, 65)
SEQUENCE_NUMBER_CHARS = (streams.SEQUENCE_NUMBER_DIGITS, streams.SEQUENCE_NUMBER_DIGITS_MAX)
# Expired records a TRIM_HORIZON skips per call, in pages of GET_RECORDS_LIMIT_MAX: a reader
# further behind than this is told TrimmedDataAccessException and the next call skips more.
_EXPIRY_PAGES_MAX = 10


def _stream_not_found(arn: str) -> ResourceNotFound:
    return ResourceNotFound(f"Requested resource not found: Stream: {arn} not found")


def _trimmed() -> ChangeLogTrimmed:
    # The client's error carries no first_retained_seq: that is between dynalab's processes.
    return ChangeLogTrimmed(TRIMMED)


def _readable(table: TableDef, now: float, retention: float) -> list[StreamDef]:
    """The table's streams a reader may read at `now`: the latest, and any disabled one within
    the retention of its disabling."""
    every = (*table.previous_streams, *(() if table.stream is None else (table.stream,)))
    return [stream for stream in every if stream.readable(now, retention)]


# A stream ARN's shape: a table's ARN (any partition, Region and 12-digit account), then
# `/stream/` and the stream's label, a creation time to the millisecond. DynamoDB refuses a
# StreamArn of another shape as a ValidationException before it looks for a table (ScyllaDB's
# test_streams.py checks it against DynamoDB), and an unknown one of this shape as
# ResourceNotFoundException. DynamoDB's text for the refusal is not published; this one is ours.
_STREAM_ARN = re.compile(
    r"arn:aws[a-z-]*:dynamodb:[a-z0-9-]+:\d{12}:table/[a-zA-Z0-9_.-]{3,255}"
    r"/stream/\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}"
)


def _check_stream_arn(arn: str) -> None:
    if _STREAM_ARN.fullmatch(arn) is None:
        raise ValidationError(f"Invalid StreamArn: {arn}")


async def _stream_of(ctx: RouterContext, arn: str, now: float) -> tuple[TableDef, StreamDef]:
    """The table and stream an ARN names (`<table ARN>/stream/<label>`), while readable."""
    _check_stream_arn(arn)
    table_part, _, label = arn.rpartition("/stream/")
    name = table_part.rpartition(":table/")[2]
    await ctx.refresh()
    table = ctx.records.get(name)
    if table is None or arn != stream_arn(name, label):
        raise _stream_not_found(arn)
    for stream in _readable(table, now, ctx.settings.stream_retention_seconds):
        if stream.label == label:
            return table, stream
    raise _stream_not_found(arn)


def _shard_partition(
    table: TableDef, stream: StreamDef, shard_id: str
) -> tuple[PartitionDef, int | None]:
    for partition, end_seq in streams.stream_shards(table, stream):
        if streams.shard_id(stream, partition) == shard_id:
            return partition, end_seq
    raise ResourceNotFound(SHARD_NOT_FOUND)


async def _located(
    ctx: RouterContext,
    table: TableDef,
    partition: PartitionDef,
    call: Callable[[PartitionDef], Awaitable[T]],
) -> T:
    """`call` at the partition where the catalog places it now. A partition that moved since
    `table` was read (a split's child moved to the node the ring places it on) answers
    StaleEpoch where it was: the catalog is read again and the call follows it, waiting a
    moment while the catalog has not caught up with the move. StaleEpoch is raised once the
    catalog no longer lists the partition as serving (retired by a split, its table gone)."""
    backoff = limits.STALE_EPOCH_BACKOFF_SECONDS_MIN
    for _ in range(limits.STALE_EPOCH_ATTEMPTS_MAX):
        try:
            return await call(partition)
        except StaleEpoch:
            current = await ctx.read_table(table.name)
            serving = (
                None
                if current is None or current.id != table.id
                else next((p for p in current.partitions if p.id == partition.id), None)
            )
            if serving is None:
                raise
            if serving.nodes == partition.nodes:
                await asyncio.sleep(backoff)
                backoff *= 2
            partition = serving
    raise ServiceUnavailable(
        f"Partition {partition.id}'s node kept refusing it while the catalog placed it there; retry"
    )


async def _register(
    ctx: RouterContext, table: TableDef, stream: StreamDef, partition: PartitionDef
) -> tuple[dict[str, Any], PartitionDef]:
    """The stream's consumer on `partition` ({seq, first_seq, last_seq}), and the partition as
    the catalog places it now (`_located`). A split's children have it from the node's split
    batch; a partition that does not (one a router created by hand, as tests do) has it
    registered here at seq 0, its whole log being owed."""
    body = ops.RegisterConsumerPayload(stream.consumer, 0).to_json()

    async def register(at: PartitionDef) -> tuple[dict[str, Any], PartitionDef]:
        return await ctx.feed_call(at, ops.REGISTER_CONSUMER, table.id, body), at

    try:
        return await _located(ctx, table, partition, register)
    except StaleEpoch:
        # A retired partition whose log is gone: its records are all past the retention.
        raise ResourceNotFound(SHARD_NOT_FOUND) from None


async def _position(
    ctx: RouterContext, table: TableDef, stream: StreamDef, partition: PartitionDef, now: float
) -> dict[str, Any]:
    """The stream's consumer on `partition` once moved past the records older than the
    retention: {seq (what the stream no longer owes), first_seq, last_seq}."""
    position, partition = await _register(ctx, table, stream, partition)
    for _ in range(_EXPIRY_PAGES_MAX):
        if position["seq"] >= position["last_seq"]:
            break
        try:
            page = await ctx.feed_read(
                table.id,
                partition,
                position["seq"],
                max_records=limits.GET_RECORDS_LIMIT_MAX,
                timeout=limits.CONTROL_CALL_SECONDS_MAX,
            )
        except ChangeLogTrimmed as error:
            if error.first_retained_seq is None or error.first_retained_seq - 1 <= position["seq"]:
                break
            # The log's hard bounds trimmed what the stream held: start at what it keeps.
            passed = error.first_retained_seq - 1
        else:
            changes = [{"seq": c.seq, "kind": c.kind, "at": c.at} for c in page.records]
            passed = streams.retention_checkpoint(
                position["seq"], changes, now, ctx.settings.stream_retention_seconds
            )
            if passed == position["seq"]:
                break
        position = await ctx.feed_call(
            partition,
            ops.CHECKPOINT,
            table.id,
            ops.CheckpointPayload(stream.consumer, passed).to_json(),
        )
    return position


# ListStreams ------------------------------------------------------------------------------------


async def list_streams(ctx: RouterContext, body: dict[str, Any]) -> dict[str, Any]:
    reader = RequestReader(body)
    table_name = reader.string(
        "TableName",
        pattern=NAME_PATTERN,
        min_length=limits.TABLE_NAME_CHARS_MIN,
        max_length=limits.TABLE_NAME_CHARS_MAX,
    )
    limit = reader.integer("Limit", minimum=1, maximum=limits.LIST_STREAMS_LIMIT_MAX)
    start = reader.string("ExclusiveStartStreamArn", min_length=STREAM_ARN_CHARS[0])
    reader.check()
    if start is not None:
        _check_stream_arn(start)
    limit = limit or limits.LIST_STREAMS_LIMIT_MAX
    await ctx.refresh()
    if table_name is not None and table_name not in ctx.records:
        raise ResourceNotFound(f"Requested resource not found: Table: {table_name} not found")
    now = ctx.sources.clock()
    listed = []
    for name, table in ctx.records.items():
        if table_name is not None and name != table_name:
            continue
        for stream in _readable(table, now, ctx.settings.stream_retention_seconds):
            arn = stream_arn(name, stream.label)
            listed.append({"StreamArn": arn, "TableName": name, "StreamLabel": stream.label})
    # Pages follow ARN order (a table's name sorts otherwise inside its ARN: "a-b" < "a/").
    listed.sort(key=lambda entry: entry["StreamArn"])
    arns = [entry["StreamArn"] for entry in listed]
    if start is not None:
        listed = listed[bisect_right(arns, start) :]
    reply: dict[str, Any] = {"Streams": listed[:limit]}
    if len(listed) > limit:
        reply["LastEvaluatedStreamArn"] = listed[limit - 1]["StreamArn"]
    return reply


# DescribeStream ---------------------------------------------------------------------------------


async def describe_stream(ctx: RouterContext, body: dict[str, Any]) -> dict[str, Any]:
    reader = RequestReader(body)
    arn = reader.string(
        "StreamArn", required=True, min_length=STREAM_ARN_CHARS[0], max_length=STREAM_ARN_CHARS[1]
    )
    limit = reader.integer("Limit", minimum=1, maximum=limits.DESCRIBE_STREAM_LIMIT_MAX)
    start = reader.string(
        "ExclusiveStartShardId", min_length=SHARD_ID_CHARS[0], max_length=SHARD_ID_CHARS[1]
    )
    parent_shard = _read_shard_filter(reader)
    reader.check()
    assert arn is not None
    limit = limit or limits.DESCRIBE_STREAM_LIMIT_MAX
    now = ctx.sources.clock()
    table, stream = await _stream_of(ctx, arn, now)
    every = [
        (partition, end_seq)
        for partition, end_seq in streams.stream_shards(table, stream)
        if parent_shard is None or streams.parent_shard_id(stream, partition) == parent_shard
    ]
    partitions = every
    if start is not None:
        # The shards after it in id order, which is the order listed: none after an id past
        # the last, as DynamoDB answers one it does not know (ScyllaDB's tests run on DynamoDB).
        ids = [streams.shard_id(stream, partition) for partition, _ in partitions]
        partitions = partitions[bisect_right(ids, start) :]
    shards = []
    for partition, end_seq in partitions:
        if len(shards) == limit:
            break
        try:
            position = await _position(ctx, table, stream, partition, now)
        except ResourceNotFound:
            continue  # A retired shard whose records have all gone.
        shard: dict[str, Any] = {
            "ShardId": streams.shard_id(stream, partition),
            "SequenceNumberRange": {
                "StartingSequenceNumber": streams.sequence_number(position["seq"] + 1)
            },
        }
        if end_seq is not None or partition.state == PartitionState.RETIRED:
            # The last record the stream holds: the one before END, or the disabling's.
            last = position["last_seq"] - 1 if end_seq is None else end_seq
            ending = streams.sequence_number(max(last, position["seq"]))
            shard["SequenceNumberRange"]["EndingSequenceNumber"] = ending
        parent = streams.parent_shard_id(stream, partition)
        if parent is not None:
            shard["ParentShardId"] = parent
        shards.append(shard)
    description: dict[str, Any] = {
        "StreamArn": arn,
        "StreamLabel": stream.label,
        "StreamStatus": "ENABLED" if stream.enabled else "DISABLED",
        "StreamViewType": stream.view_type.value,
        "CreationRequestDateTime": stream.created,
        "TableName": table.name,
        "KeySchema": [
            {"AttributeName": attribute.name, "KeyType": kind}
            for attribute, kind in zip(table.key_shape.attributes, ("HASH", "RANGE"), strict=False)
        ],
        "Shards": shards,
    }
    if shards and partitions and shards[-1]["ShardId"] != streams.shard_id(stream, every[-1][0]):
        description["LastEvaluatedShardId"] = shards[-1]["ShardId"]
    return {"StreamDescription": description}


def _read_shard_filter(reader: RequestReader) -> str | None:
    """DescribeStream's ShardFilter: the parent shard whose children alone are described
    (Type CHILD_SHARDS, the only type); None without a filter. A filter names both members."""
    shard_filter = reader.mapping("ShardFilter")
    if shard_filter is None:
        return None
    nested = reader.nested(shard_filter, reader.where("ShardFilter"))
    kind = nested.string("Type", enum=SHARD_FILTER_TYPES)
    parent = nested.string("ShardId", min_length=SHARD_ID_CHARS[0], max_length=SHARD_ID_CHARS[1])
    if kind is None and shard_filter.get("Type") is None:
        nested.violation("Type", None, "Member must not be null")
    if parent is None and shard_filter.get("ShardId") is None:
        nested.violation("ShardId", None, "Member must not be null")
    return parent


# GetShardIterator -------------------------------------------------------------------------------


async def get_shard_iterator(ctx: RouterContext, body: dict[str, Any]) -> dict[str, Any]:
    reader = RequestReader(body)
    arn = reader.string(
        "StreamArn", required=True, min_length=STREAM_ARN_CHARS[0], max_length=STREAM_ARN_CHARS[1]
    )
    shard_id = reader.string(
        "ShardId", required=True, min_length=SHARD_ID_CHARS[0], max_length=SHARD_ID_CHARS[1]
    )
    iterator_type = reader.string("ShardIteratorType", required=True, enum=ITERATOR_TYPES)
    number = reader.string(
        "SequenceNumber", min_length=SEQUENCE_NUMBER_CHARS[0], max_length=SEQUENCE_NUMBER_CHARS[1]
    )
    reader.check()
    assert arn is not None and shard_id is not None and iterator_type is not None
    by_number = iterator_type in ("AT_SEQUENCE_NUMBER", "AFTER_SEQUENCE_NUMBER")
    if by_number and number is None:
        raise ValidationError(f"SequenceNumber is required for ShardIteratorType {iterator_type}")
    if not by_number and number is not None:
        # DynamoDB refuses a SequenceNumber with TRIM_HORIZON or LATEST (ScyllaDB's tests, run
        # against DynamoDB, check it); its text is not published: this one is ours.
        raise ValidationError(
            f"SequenceNumber must not be given for ShardIteratorType {iterator_type}"
        )
    seq = None if number is None or not by_number else streams.parse_sequence_number(number)
    now = ctx.sources.clock()
    table, stream = await _stream_of(ctx, arn, now)
    partition, end_seq = _shard_partition(table, stream, shard_id)
    position = await _position(ctx, table, stream, partition, now)
    last_seq = position["last_seq"] if end_seq is None else min(end_seq, position["last_seq"])
    if iterator_type == "TRIM_HORIZON":
        after = position["seq"]
    elif iterator_type == "LATEST":
        after = max(last_seq, position["seq"])
    else:
        assert seq is not None and number is not None
        after = seq - 1 if iterator_type == "AT_SEQUENCE_NUMBER" else seq
        if after < position["seq"]:
            raise _trimmed()
        # The shard's StartingSequenceNumber (the next record's, position["seq"] + 1) starts
        # either iterator even while no record has it yet, as DynamoDB's does: then at it, since
        # the record that will have it is the shard's first (a DynamoDB shard's first record is
        # numbered past its starting number, so AFTER it reads that record too).
        if after > max(last_seq, position["seq"] + 1):
            raise ValidationError(f"Invalid SequenceNumber: {number}")
        after = min(after, max(last_seq, position["seq"]))
    iterator = ShardIterator(table.id, stream.label, partition.id, after, now)
    return {"ShardIterator": iterator.encode()}


# GetRecords -------------------------------------------------------------------------------------


def _table_by_id(ctx: RouterContext, table_id: str) -> TableDef | None:
    for table in ctx.records.values():
        if table.id == table_id:
            return table
    return None


async def get_records(ctx: RouterContext, body: dict[str, Any]) -> dict[str, Any]:
    reader = RequestReader(body)
    text = reader.string(
        "ShardIterator", required=True, min_length=1, max_length=limits.SHARD_ITERATOR_CHARS_MAX
    )
    limit = reader.integer("Limit", minimum=1, maximum=limits.GET_RECORDS_LIMIT_MAX)
    reader.check()
    assert text is not None
    limit = limit or limits.GET_RECORDS_LIMIT_MAX
    now = ctx.sources.clock()
    iterator = ShardIterator.decode(text, now)
    await ctx.refresh()
    table = _table_by_id(ctx, iterator.table_id)
    stream = next(
        (
            s
            for s in (
                ()
                if table is None
                else _readable(table, now, ctx.settings.stream_retention_seconds)
            )
            if s.label == iterator.label
        ),
        None,
    )
    if table is None or stream is None:
        raise ResourceNotFound(SHARD_NOT_FOUND)
    shard = next(
        (s for s in streams.stream_shards(table, stream) if s[0].id == iterator.partition_id),
        None,
    )
    if shard is None:
        raise ResourceNotFound(SHARD_NOT_FOUND)
    partition, end_seq = shard
    if end_seq is not None and iterator.after_seq >= end_seq:
        return {"Records": []}  # A closed shard drained: no NextShardIterator.

    def read(at: PartitionDef) -> Awaitable[FeedPage]:
        return ctx.feed_read(
            table.id,
            at,
            iterator.after_seq,
            max_records=limit,
            timeout=limits.NODE_CALL_SECONDS_MAX,
        )

    try:
        page = await _located(ctx, table, partition, read)
    except ChangeLogTrimmed:
        raise _trimmed() from None
    except StaleEpoch:
        raise ResourceNotFound(SHARD_NOT_FOUND) from None
    region = request_region()
    records: list[dict[str, Any]] = []
    size = 0
    last = iterator.after_seq
    closed = page.end_of_log and not page.records
    for change in page.records:
        if change.kind == "END" or (end_seq is not None and change.seq > end_seq):
            closed = True
            break
        if now - change.at > ctx.settings.stream_retention_seconds:
            raise _trimmed()
        record = streams.stream_record(
            stream,
            partition.id,
            {
                "seq": change.seq,
                "kind": change.kind,
                "keys": change.keys,
                "old": change.old,
                "new": change.new,
                "by_service": change.by_service,
                "at": change.at,
            },
            region,
        )
        size += len(orjson.dumps(record))
        if records and size > limits.GET_RECORDS_BYTES_MAX:
            break
        records.append(record)
        last = change.seq
    closed = closed or (end_seq is not None and last >= end_seq)
    reply: dict[str, Any] = {"Records": records}
    if not closed:
        reply["NextShardIterator"] = iterator.after(last, now).encode()
    return reply


OPERATIONS = {
    "ListStreams": list_streams,
    "DescribeStream": describe_stream,
    "GetShardIterator": get_shard_iterator,
    "GetRecords": get_records,
}
