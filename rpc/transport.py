"""`NodeTransport`: the one interface through which a service calls a storage node.

Two implementations satisfy it: `rpc.client.NodeClient` over gRPC, and `rpc.local.LocalTransport`,
an in-process twin that calls a node in the same process and can drop, delay, duplicate and cut
calls from a seeded random source (DESIGN.md, "Seams for faults and simulation"). Code that calls
nodes (the router's `RouterContext`, the GSI replicator, a node's splitter and mover) depends on
this Protocol only, and is handed a `connect` callable that makes one transport per node address.

The change feed is on the same seam: `NodeTransport.feed()` is the node's `FeedTransport`
(follow a partition's log, read one page of it, register, checkpoint and unregister a consumer),
over gRPC's ChangeFeed service (`rpc.changefeed.ChangeFeedClient`) or in-process
(`rpc.local.LocalFeed`, with the same seeded faults). Records cross it as `core.changes.Change`.

Both keep the same contract: every call has a deadline, carried to the node in the envelope
(`Target.deadline`), and never hangs. A call that could not be sent raises
`core.errors.ServiceUnavailable` (nothing was applied); a call sent and not answered raises
ServiceUnavailable for a read and `core.errors.OutcomeUnknown` for a write (`unanswered`), since
the node may have applied it. Errors the node reports come back as the same `core.errors`
instances.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from core import limits, planted
from core.changes import Change
from core.errors import DynamoError, OutcomeUnknown, ServiceUnavailable
from rpc.ops import ITEM_WRITE_OPS, Target


class NotSent(ServiceUnavailable):
    """A data-plane request that never left this process (its node could not be reached): it
    was not applied, so it may go to another replica of its partition."""


def unanswered(op: str, reason: str) -> DynamoError:
    """The error of a data-plane call that was sent and not answered: a write's outcome is
    unknown; a read simply failed."""
    if op in ITEM_WRITE_OPS and not planted.on("double-count"):
        return OutcomeUnknown(f"{reason}; the {op} may or may not have been applied")
    return ServiceUnavailable(reason)


@dataclass(frozen=True, slots=True)
class FeedPage:
    """One batch of a partition's log read at once: its records (END included), whether they end
    the log, and the log's retained bounds when it was read."""

    records: tuple[Change, ...]
    end_of_log: bool
    first_seq: int
    last_seq: int


@dataclass(frozen=True, slots=True)
class ConsumerPosition:
    """A consumer's checkpoint and the log's bounds, as a register or checkpoint answered."""

    seq: int
    first_seq: int
    last_seq: int
    unregistered: bool = False


class FeedTransport(Protocol):
    """The change feed of one storage node (the ChangeFeed service's contract,
    `proto/rpc/changefeed.proto`; its rules in `rpc.ops`, "Change feed").

    Every call has a deadline and never hangs. A follow has no overall deadline, but each batch
    must arrive within `idle_seconds_max` (an idle node sends an empty batch every
    `limits.CHANGE_FEED_HEARTBEAT_SECONDS`), so a dead node or a cut link fails it with
    `ServiceUnavailable`. Delivery is at-least-once from the point followed: a follower that
    fails follows again from its checkpoint, and dedupes by seq (a batch may also arrive twice).
    The node's refusals come back as the same `core.errors` instances: `ChangeLogTrimmed`
    (re-snapshot), `StaleEpoch` (the partition is neither live nor kept retired on the node).
    """

    @property
    def address(self) -> str: ...

    async def register(
        self, table_id: str, partition_id: str, consumer: str, seq: int | None, timeout: float
    ) -> ConsumerPosition:
        """Register `consumer` at `seq` (None: the log's last seq); answer its checkpoint.
        Registering again changes nothing and answers the checkpoint the consumer has."""
        ...

    async def checkpoint(
        self, table_id: str, partition_id: str, consumer: str, seq: int, timeout: float
    ) -> ConsumerPosition:
        """Record durably that `consumer` has passed every record up to `seq`."""
        ...

    async def unregister(
        self, table_id: str, partition_id: str, consumer: str, timeout: float
    ) -> ConsumerPosition:
        """Stop holding the log for `consumer`."""
        ...

    def follow_batches(
        self,
        table_id: str,
        partition_id: str,
        *,
        consumer: str = "",
        after_seq: int | None = None,
        max_records_per_batch: int = 0,
        idle_seconds_max: float = limits.CHANGE_FEED_IDLE_SECONDS_MAX,
    ) -> AsyncGenerator[list[Change], None]:
        """The partition's changes after `after_seq` (None: after `consumer`'s checkpoint), one
        list per batch the node sent (never empty: heartbeats are not yielded), in seq order,
        waiting for new ones; ends after an END record."""
        ...

    async def read(
        self,
        table_id: str,
        partition_id: str,
        after_seq: int,
        *,
        max_records: int,
        timeout: float,
    ) -> FeedPage:
        """The first batch of the records after `after_seq`, without waiting for new ones: a
        poll, how the Streams API's GetRecords reads a shard."""
        ...

    async def close(self) -> None: ...


class NodeTransport(Protocol):
    """Calls one storage node: data-plane `call`, control-plane `control`, its change `feed`, and
    `close`."""

    @property
    def address(self) -> str:
        """The node's address, for messages."""
        ...

    async def call(
        self, op: str, target: Target, payload: dict[str, Any], timeout: float
    ) -> dict[str, Any]:
        """Send one data-plane request (`rpc.ops.DATA_OPS`) to `target`; return its reply body."""
        ...

    async def control(self, op: str, payload: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Send one control-plane request (`rpc.ops.CONTROL_OPS`); return its reply body."""
        ...

    def feed(self) -> FeedTransport:
        """The node's change feed, on the same seam (made on first use, closed with this)."""
        ...

    async def close(self) -> None:
        """Fail every call in flight and release the connection (the feed's too)."""
        ...


class Transports:
    """One transport per node address, made by `connect` when first asked for and kept until
    `close`: how a node's background work (splits, moves, catalog copies) calls its peers."""

    def __init__(self, connect: Callable[[str], NodeTransport]) -> None:
        self.connect = connect
        self._made: dict[str, NodeTransport] = {}

    def to(self, address: str) -> NodeTransport:
        transport = self._made.get(address)
        if transport is None:
            transport = self._made[address] = self.connect(address)
        return transport

    async def close(self) -> None:
        made, self._made = self._made, {}
        await asyncio.gather(*(transport.close() for transport in made.values()))
