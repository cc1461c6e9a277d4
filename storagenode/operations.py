"""The storage node's operations: one declaration each, which the server, admission, metering and
the write group read.

An operation is declared once, by an `Operation` in `OPERATIONS`: its name (the wire enum's, in
`proto/rpc/node.proto`, lower-cased without `OP_`; an internal write has no wire value), the type
its JSON body decodes into, its kind, whether it spends a partition's units, whether the node
still takes it when its disk is full, and its handler. Adding an operation is one declaration here
and one handler in the module of its feature (plus the proto enum value, the wire contract, for
an operation other services send).

The kinds:
- READ runs on the event loop against the committed store (`reads.py`), or the node's memory
  alone (`index_pressure`: soft state that no write group persists and a restart forgets);
- WRITE and INTERNAL_WRITE run in a write group, against `writes.WriteContext`, and are answered
  once their group has committed; an internal write is the node's own (the TTL sweeper's, the
  splitter's, the mover's) and never arrives from the wire;
- DRIVER takes more than one step on the event loop (a split, a move): its handler is a coroutine
  of the node's drivers (`split.Splitter`, `move.Mover`).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from core.errors import DynamoError
from rpc import node_pb2, ops
from rpc.ops import Target
from rpc.transactions import (
    TxnApplyPayload,
    TxnGetPayload,
    TxnPreparePayload,
    TxnRecordPayload,
    TxnSweepPayload,
)
from storagenode import control, expiry, items, move, reads, replica_move, snapshots, split
from storagenode import transactions as txn
from storagenode.writes import NodeState, WriteContext, addressed


class Kind(enum.Enum):
    READ = "read"
    WRITE = "write"
    INTERNAL_WRITE = "internal write"
    DRIVER = "driver"


class DiskFull(enum.IntEnum):
    """What a node whose disk is down to its reserve (`StorageNode._keep_disk_reserve`) still
    takes: writes that free space or let the change log be trimmed; and, below a quarter of the
    reserve, dropping tables alone. Reads are never refused for space."""

    REFUSED = 0
    FREES_SPACE = 1  # Taken above a quarter of the reserve.
    ALWAYS = 2  # Taken down to an empty disk.


class Drivers(Protocol):
    """The node's multi-step drivers, which a DRIVER operation's handler runs."""

    splitter: split.Splitter
    mover: move.Mover
    replica_mover: replica_move.ReplicaMover


# A read's handler, a write's (its reply or refusal; a metered one sets `ctx.consumed`), a
# driver's. Each takes its payload decoded.
ReadHandler = Callable[[NodeState, Target | None, Any], dict[str, Any]]
WriteHandler = Callable[[WriteContext, Target | None, Any], dict[str, Any] | DynamoError]
DriverHandler = Callable[[Drivers, Any], Awaitable[Any]]


class Payload(Protocol):
    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Any: ...


@dataclasses.dataclass(frozen=True, slots=True)
class Operation:
    """One node operation (see the module's docstring)."""

    name: str
    payload: type[Payload]
    kind: Kind
    handler: ReadHandler | WriteHandler | DriverHandler
    metered: bool = False
    disk_full: DiskFull = DiskFull.REFUSED
    # A node write that may also be addressed to one partition (`addressable`).
    partition_setting: bool = False

    @property
    def wire(self) -> int | None:
        """Its value of the proto's `Op` enum; None for an internal write."""
        if self.kind is Kind.INTERNAL_WRITE:
            return None
        return int(node_pb2.Op.Value(f"OP_{self.name.upper()}"))

    @property
    def addressed(self) -> bool:
        """Whether a request of it names its partition (the envelope's table and partition)."""
        return self.name in ops.DATA_OPS or self.name in ops.FEED_OPS

    @property
    def addressable(self) -> bool:
        """Whether a request of it may name its partition: every addressed one, the control-plane
        writes that also change one partition alone (`ops.ADDRESSABLE_CONTROL_OPS`), and the
        node's own writes to one partition that a replicated partition's leader addresses to
        it, so that they are entries of its group (the TTL sweeper's)."""
        return self.addressed or self.name in ops.ADDRESSABLE_CONTROL_OPS or self.partition_setting

    @property
    def writes(self) -> bool:
        """Whether it runs in a write group."""
        return self.kind is Kind.WRITE or self.kind is Kind.INTERNAL_WRITE


# Handlers that only adapt a feature module's function to the handler's shape ------------------


def _split_pin(ctx: WriteContext, target: Target | None, payload: split.PinPayload) -> Any:
    return split.pin(ctx.node, payload)


def _txn_record(ctx: WriteContext, target: Target | None, payload: TxnRecordPayload) -> Any:
    assert target is not None, "a transaction's record names its partition"
    addressed(ctx.lookup((target.table_id, target.partition_id)), target)
    return txn.record(txn.Group(ctx, items.write_request), target, payload)


def _txn_prepare(ctx: WriteContext, target: Target | None, payload: TxnPreparePayload) -> Any:
    assert target is not None, "a transaction's prepare names its partition"
    addressed(ctx.lookup((target.table_id, target.partition_id)), target)
    return txn.prepare(txn.Group(ctx, items.write_request), target, payload)


def _txn_apply(ctx: WriteContext, target: Target | None, payload: TxnApplyPayload) -> Any:
    return txn.apply(txn.Group(ctx, items.write_request), target, payload)


def _txn_sweep(ctx: WriteContext, target: Target | None, payload: TxnSweepPayload) -> Any:
    return txn.sweep(ctx, target)


async def _split_partition(drivers: Drivers, payload: ops.SplitPartitionPayload) -> Any:
    key = None if payload.split_key is None else bytes.fromhex(payload.split_key)
    return await drivers.splitter.split(payload.table_id, payload.partition_id, key)


async def _move_partition(drivers: Drivers, payload: ops.MovePartitionPayload) -> Any:
    if drivers.splitter.node.replicated((payload.table_id, payload.partition_id)):
        return await drivers.replica_mover.move(
            payload.table_id, payload.partition_id, payload.target_node, payload.source_node
        )
    return await drivers.mover.move(
        payload.table_id, payload.partition_id, payload.target_node, payload.target_address
    )


_R, _W, _I, _D = Kind.READ, Kind.WRITE, Kind.INTERNAL_WRITE, Kind.DRIVER
_FREES, _ALWAYS = DiskFull.FREES_SPACE, DiskFull.ALWAYS

OPERATIONS: Mapping[str, Operation] = {
    operation.name: operation
    for operation in (
        # Data plane: items, queries and scans, a global index's entries.
        Operation(ops.GET, ops.GetPayload, _R, reads.get, metered=True),
        Operation(ops.QUERY, ops.QueryPayload, _R, reads.query, metered=True),
        Operation(ops.SCAN, ops.ScanPayload, _R, reads.scan, metered=True),
        Operation(ops.PUT, ops.PutPayload, _W, items.item_write, metered=True),
        Operation(ops.UPDATE, ops.UpdatePayload, _W, items.item_write, metered=True),
        Operation(
            ops.DELETE, ops.DeletePayload, _W, items.item_write, metered=True, disk_full=_FREES
        ),
        Operation(ops.INDEX_APPLY, ops.IndexApplyPayload, _W, items.index_apply, metered=True),
        # A partition's lifecycle and settings.
        Operation(ops.CREATE_PARTITION, ops.CreatePartitionPayload, _W, control.create_partition),
        Operation(ops.DROP_TABLE, ops.DropTablePayload, _W, control.drop_table, disk_full=_ALWAYS),
        Operation(ops.RETIRE_PARTITION, ops.RetirePartitionPayload, _W, control.retire_partition),
        Operation(
            ops.UPDATE_THROUGHPUT, ops.UpdateThroughputPayload, _W, control.update_throughput
        ),
        Operation(ops.UPDATE_TTL, ops.UpdateTtlPayload, _W, control.update_ttl),
        Operation(ops.TABLE_STATS, ops.TableStatsPayload, _R, reads.table_stats),
        Operation(
            ops.PARTITION_THROUGHPUT,
            ops.PartitionThroughputPayload,
            _R,
            reads.partition_throughput,
        ),
        # A global index partition out of write capacity, as the GSI replicator reports it.
        Operation(ops.INDEX_PRESSURE, ops.IndexPressurePayload, _R, items.index_pressure),
        Operation(ops.RAFT_SNAPSHOT_READ, ops.SnapshotReadPayload, _R, snapshots.read_page),
        # A replicated partition's membership (at its leader: `StorageNode.write_round`), and
        # a replica whose node left its group (`storagenode.replica_move`).
        Operation(ops.RAFT_MEMBERSHIP, ops.RaftMembershipPayload, _W, control.raft_membership),
        Operation(
            ops.DROP_REPLICA,
            ops.DropReplicaPayload,
            _W,
            control.drop_replica,
            disk_full=_FREES,
        ),
        # The TTL sweeper's own writes.
        Operation(
            expiry.TTL_EXPIRE,
            expiry.ExpirePayload,
            _I,
            control.ttl_expire,
            disk_full=_FREES,
            partition_setting=True,
        ),
        Operation(
            expiry.TTL_BACKFILL,
            expiry.BackfillPayload,
            _I,
            control.ttl_backfill,
            partition_setting=True,
        ),
        # Splits and moves: the drivers, and their steps in write groups.
        Operation(ops.SPLIT_PARTITION, ops.SplitPartitionPayload, _D, _split_partition),
        Operation(split.SPLIT_PIN, split.PinPayload, _I, _split_pin),
        Operation(
            split.SPLIT_INSTALL,
            split.InstallPayload,
            _I,
            split.install,
            partition_setting=True,
        ),
        Operation(
            split.SPLIT_RECORD,
            split.RecordPayload,
            _I,
            split.keep_record,
            partition_setting=True,
        ),
        Operation(ops.MOVE_PARTITION, ops.MovePartitionPayload, _D, _move_partition),
        # A move's source fences, then drops the partition: its steps free space.
        Operation(move.MOVE_SOURCE, move.SourceStepPayload, _I, move.source_step, disk_full=_FREES),
        Operation(ops.MOVE_RECEIVE, ops.MoveReceivePayload, _W, move.receive),
        # A change feed's consumers: a checkpoint and an unregister let the log be trimmed.
        Operation(
            ops.REGISTER_CONSUMER, ops.RegisterConsumerPayload, _W, control.register_consumer
        ),
        Operation(ops.CHECKPOINT, ops.CheckpointPayload, _W, control.checkpoint, disk_full=_FREES),
        Operation(
            ops.UNREGISTER_CONSUMER,
            ops.UnregisterConsumerPayload,
            _W,
            control.unregister_consumer,
            disk_full=_FREES,
        ),
        # Transactions (`storagenode/transactions.py`).
        Operation(ops.TXN_RECORD, TxnRecordPayload, _W, _txn_record),
        Operation(ops.TXN_PREPARE, TxnPreparePayload, _W, _txn_prepare),
        Operation(ops.TXN_GET, TxnGetPayload, _R, reads.txn_get),
        Operation(ops.TXN_APPLY, TxnApplyPayload, _W, _txn_apply),
        Operation(ops.TXN_SWEEP, TxnSweepPayload, _W, _txn_sweep),
    )
}
