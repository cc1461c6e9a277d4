"""`ChangeFeedClient`: a storage node's change feed over gRPC (`rpc.transport.FeedTransport`).

The contract is `proto/rpc/changefeed.proto` (rules in `rpc.ops`, "Change feed"). This module also
holds the one translation between change records (`core.changes.Change`) and the `ChangeRecord`
messages they travel as, and between `core.errors` and the feed's `FeedError`, for the node's
servicer and this client alike. Its in-process twin is `rpc.local.LocalFeed`.

Every call has a deadline and never hangs. `follow` is a long-lived stream with no overall
deadline, but each message must arrive within `idle_seconds_max` (the node sends an empty batch
every `limits.CHANGE_FEED_HEARTBEAT_SECONDS` while the log is idle), so a dead node or a cut link
fails the follow with `ServiceUnavailable` instead of hanging it. A follow that fails is resumed
by following again from the last checkpoint: delivery is at-least-once from a checkpoint, and a
follower dedupes by seq.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator
from typing import Any, cast

import grpc
import orjson

from core import limits
from core.changes import Change
from core.errors import (
    ERROR_TYPES,
    ChangeLogTrimmed,
    DynamoError,
    InternalServerError,
    NotPartitionLeader,
    ServiceUnavailable,
)
from rpc import changefeed_pb2, changefeed_pb2_grpc
from rpc.client import CHANNEL_OPTIONS
from rpc.transport import ConsumerPosition, FeedPage

logger = logging.getLogger(__name__)

SERVICE_NAME = "dynalab.rpc.ChangeFeed"

_KINDS = {
    "INSERT": changefeed_pb2.ChangeRecord.INSERT,
    "MODIFY": changefeed_pb2.ChangeRecord.MODIFY,
    "REMOVE": changefeed_pb2.ChangeRecord.REMOVE,
    "END": changefeed_pb2.ChangeRecord.END,
}
_KIND_NAMES = {number: name for name, number in _KINDS.items()}


# Translation, shared by the node's servicer and this client ---------------------------------------


def record_to_proto(change: Change) -> changefeed_pb2.ChangeRecord:
    """A change record as it travels."""
    return changefeed_pb2.ChangeRecord(
        seq=change.seq,
        kind=_KINDS[change.kind],
        keys=_json(change.keys),
        old=_json(change.old),
        new=_json(change.new),
        by_service=change.by_service,
        children=change.children,
        at=change.at,
    )


def record_from_proto(record: changefeed_pb2.ChangeRecord) -> Change:
    return Change(
        seq=record.seq,
        kind=_KIND_NAMES[record.kind],
        keys=_object(record.keys),
        old=_object(record.old),
        new=_object(record.new),
        by_service=record.by_service,
        children=tuple(record.children),
        at=record.at,
    )


def error_to_proto(error: DynamoError) -> changefeed_pb2.FeedError:
    proto = changefeed_pb2.FeedError(type=error.type_name, message=error.message or "")
    if isinstance(error, ChangeLogTrimmed) and error.first_retained_seq is not None:
        proto.first_retained_seq = error.first_retained_seq
    if isinstance(error, NotPartitionLeader) and error.leader is not None:
        proto.leader = error.leader
    return proto


def error_from_proto(error: changefeed_pb2.FeedError) -> DynamoError:
    """The `core.errors` instance a FeedError carries (an unknown type is a version skew: a bug)."""
    if error.type == ChangeLogTrimmed.type_name:
        first = error.first_retained_seq if error.HasField("first_retained_seq") else None
        return ChangeLogTrimmed(error.message, first)
    if error.type == NotPartitionLeader.type_name:
        return NotPartitionLeader(error.message, error.leader if error.HasField("leader") else None)
    error_type = ERROR_TYPES.get(error.type)
    if error_type is None:
        return InternalServerError(
            f"Unknown error type {error.type!r} from a node: {error.message}"
        )
    return error_type(error.message)


def _json(value: Any) -> bytes:
    return b"" if value is None else orjson.dumps(value)


def _object(data: bytes) -> dict[str, Any] | None:
    return orjson.loads(data) if data else None


# The client --------------------------------------------------------------------------------------


class ChangeFeedClient:
    """Follows and checkpoints change feeds on one storage node over gRPC
    (`rpc.transport.FeedTransport`)."""

    def __init__(self, address: str) -> None:
        self.address = address
        self._channel = grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS)
        self._stub = changefeed_pb2_grpc.ChangeFeedStub(self._channel)

    async def register(
        self,
        table_id: str,
        partition_id: str,
        consumer: str,
        seq: int | None,
        timeout: float,
    ) -> ConsumerPosition:
        """Register `consumer` at `seq` (None: the log's last seq); answer its checkpoint.

        Registering again changes nothing and answers the checkpoint the consumer has, which is
        how a restarted consumer finds where to resume.
        """
        request = changefeed_pb2.RegisterRequest(
            table_id=table_id, partition_id=partition_id, consumer=consumer, seq=seq
        )
        return await self._unary(self._stub.Register, request, timeout)

    async def checkpoint(
        self, table_id: str, partition_id: str, consumer: str, seq: int, timeout: float
    ) -> ConsumerPosition:
        """Record durably that `consumer` has passed every record up to `seq`."""
        request = changefeed_pb2.CheckpointRequest(
            table_id=table_id, partition_id=partition_id, consumer=consumer, seq=seq
        )
        return await self._unary(self._stub.Checkpoint, request, timeout)

    async def unregister(
        self, table_id: str, partition_id: str, consumer: str, timeout: float
    ) -> ConsumerPosition:
        """Stop holding the log for `consumer`."""
        request = changefeed_pb2.UnregisterRequest(
            table_id=table_id, partition_id=partition_id, consumer=consumer
        )
        return await self._unary(self._stub.Unregister, request, timeout)

    async def follow(
        self,
        table_id: str,
        partition_id: str,
        *,
        consumer: str = "",
        after_seq: int | None = None,
        max_records_per_batch: int = 0,
        idle_seconds_max: float = limits.CHANGE_FEED_IDLE_SECONDS_MAX,
    ) -> AsyncGenerator[Change, None]:
        """The partition's changes after `after_seq` (None: after `consumer`'s checkpoint).

        Yields each record in seq order and waits for new ones; ends after an END record. Raises
        the node's typed refusal (`ChangeLogTrimmed`: re-snapshot; `StaleEpoch`: the partition
        is not on this node), or `ServiceUnavailable` when the stream breaks, the node stops, or
        nothing arrives for `idle_seconds_max`.
        """
        batches = self.follow_batches(
            table_id,
            partition_id,
            consumer=consumer,
            after_seq=after_seq,
            max_records_per_batch=max_records_per_batch,
            idle_seconds_max=idle_seconds_max,
        )
        try:
            async for batch in batches:
                for record in batch:
                    yield record
        finally:
            await batches.aclose()

    async def follow_batches(
        self,
        table_id: str,
        partition_id: str,
        *,
        consumer: str = "",
        after_seq: int | None = None,
        max_records_per_batch: int = 0,
        idle_seconds_max: float = limits.CHANGE_FEED_IDLE_SECONDS_MAX,
    ) -> AsyncGenerator[list[Change], None]:
        """`follow`, one list per batch the node sent (never empty: heartbeats are not yielded),
        for a follower that applies and checkpoints a batch at a time."""
        request = changefeed_pb2.FollowRequest(
            table_id=table_id,
            partition_id=partition_id,
            consumer=consumer,
            after_seq=after_seq,
            max_records_per_batch=max_records_per_batch,
        )
        call = self._stub.Follow(request)
        try:
            while True:
                batch = await self._next_batch(call, partition_id, idle_seconds_max)
                if batch.records:
                    yield [record_from_proto(record) for record in batch.records]
                if batch.end_of_log:
                    return
        finally:
            call.cancel()

    async def read(
        self,
        table_id: str,
        partition_id: str,
        after_seq: int,
        *,
        max_records: int,
        timeout: float,
    ) -> FeedPage:
        """The first batch of the records after `after_seq`, without waiting for new ones.

        A node answers a follow at once, with the records there are (possibly none) and the log's
        bounds, so one read of a follow is a poll: how the Streams API's GetRecords reads a shard.
        Raises the node's refusal (`ChangeLogTrimmed`, `StaleEpoch`, a `ValidationError` for a seq
        past the log's end) or `ServiceUnavailable`.
        """
        request = changefeed_pb2.FollowRequest(
            table_id=table_id,
            partition_id=partition_id,
            after_seq=after_seq,
            max_records_per_batch=max_records,
        )
        call = self._stub.Follow(request)
        try:
            batch = await self._next_batch(call, partition_id, timeout)
        finally:
            call.cancel()
        return FeedPage(
            tuple(record_from_proto(record) for record in batch.records),
            batch.end_of_log,
            batch.first_seq,
            batch.last_seq,
        )

    async def close(self) -> None:
        await self._channel.close()

    async def _next_batch(
        self, call: Any, partition_id: str, timeout: float
    ) -> changefeed_pb2.ChangeBatch:
        """The next batch of a Follow `call`, arriving within `timeout` seconds. Raises the node's
        refusal it carries, or `ServiceUnavailable` when the stream breaks, ends or stays silent."""
        try:
            # (Not asyncio.wait_for, which on 3.11 can swallow a cancel arriving with a batch.)
            async with asyncio.timeout(timeout):
                batch = await call.read()
        except TimeoutError:
            raise ServiceUnavailable(
                f"Node {self.address} sent nothing on the change feed of {partition_id} "
                f"for {timeout:.3g} s"
            ) from None
        except grpc.aio.AioRpcError as error:
            raise ServiceUnavailable(
                f"The change feed of {partition_id} on node {self.address} broke: "
                f"{error.code().name} {error.details()}"
            ) from None
        if batch is grpc.aio.EOF:
            # Only a stopping node ends a follow before the log's end.
            raise ServiceUnavailable(
                f"Node {self.address} ended the change feed of {partition_id} before its end "
                "(it is stopping)"
            )
        if batch.HasField("error"):
            raise error_from_proto(batch.error)
        return cast(changefeed_pb2.ChangeBatch, batch)

    async def _unary(self, method: Any, request: Any, timeout: float) -> ConsumerPosition:
        try:
            reply = await method(request, timeout=timeout)
        except grpc.aio.AioRpcError as error:
            raise ServiceUnavailable(
                f"Node {self.address} failed a change-feed call: {error.code().name} "
                f"{error.details()}"
            ) from None
        if reply.HasField("error"):
            raise error_from_proto(reply.error)
        return ConsumerPosition(reply.seq, reply.first_seq, reply.last_seq, reply.unregistered)
