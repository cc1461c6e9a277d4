"""The catalog as typed records, and every change a table's record may go through.

A table is a `TableDef`: its name and id, its status, key shape, billing and throughput settings
with their change bookkeeping, its partitions (`PartitionDef`: key range, epoch, state, parent,
node and share of the table's throughput), its secondary indexes (`IndexDef`), its TTL setting
(`TtlDef`) and its DynamoDB stream (`StreamDef`). The records are frozen; a change is a function
that takes a record and returns a new one, or raises. The statuses each kind of record may move
between are written out once, as tables (`TABLE_TRANSITIONS`, `PARTITION_TRANSITIONS`,
`INDEX_TRANSITIONS`, ...), and every transition function checks its move against them, raising
`IllegalTransition` for a move the table does not list; DynamoDB's own refusals (deleting a table
that is still being created, changing one that is being updated) are raised as the DynamoDB
errors they are.

Nothing here does IO or reads a clock: the time of a change (`now`, epoch seconds) is passed in,
as are new ids, so the rules are tested in microseconds and replay exactly. The router performs
CreateTable, UpdateTable and DeleteTable by reading a record, applying one of these functions and
writing the result back conditionally on the record's `version`; a node splitting a partition
will apply `split`, and the GSI replicator `index_moved`, to their own table's record the same way.

`to_json`/`from_json` give the descriptor form of `rpc.ops` (the TABLE and PARTITION dicts the
router's handlers read), which is also how a record is stored in the catalog's system table.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from fractions import Fraction
from typing import Any, Literal

from core import limits
from core.errors import (
    INDEX_RESOURCE_SEPARATOR,
    INVALID_PARAMETERS,
    InternalServerError,
    LimitExceeded,
    ResourceInUse,
    ResourceNotFound,
    ServiceUnavailable,
    StaleEpoch,
    ValidationError,
)
from core.keycodec import HASH_BYTES, HASH_SPACE
from core.keys import KeyAttribute, KeyShape
from core.placement import initial_partition_count, initial_ranges
from core.token_bucket import BillingMode

# The system tables, which live on the storage nodes as ordinary partitions but are never in the
# catalog themselves. Their ids cannot collide with a table's: those are random UUIDs.
CATALOG_TABLE_ID = "00000000000000000000000000000001"
CATALOG_TABLE_NAME = "__dynalab_catalog"
BOOTSTRAP_TABLE_ID = "00000000000000000000000000000002"
BOOTSTRAP_TABLE_NAME = "__dynalab_bootstrap"
# The GSI replicators' leases (`core.gsi_leases`), beside the catalog on the catalog's node.
LEASES_TABLE_ID = "00000000000000000000000000000003"
LEASES_TABLE_NAME = "__dynalab_gsi_leases"
# Every node's copy of the catalog (`core.catalog_copy`), read when the catalog's node is down.
CATALOG_COPY_TABLE_ID = "00000000000000000000000000000004"
# System tables have one partition each, which never splits or moves.
SYSTEM_TABLE_IDS = frozenset(
    {CATALOG_TABLE_ID, BOOTSTRAP_TABLE_ID, LEASES_TABLE_ID, CATALOG_COPY_TABLE_ID}
)
# All are keyed by one string attribute: a table's name, the bootstrap record's name, a lease's.
SYSTEM_KEY_SCHEMA: dict[str, Any] = {"hash": ["name", "S"], "range": None}
BOOTSTRAP_PARTITION_ID = f"{BOOTSTRAP_TABLE_ID}-0"
BOOTSTRAP_RECORD_NAME = "catalog"
# The catalog partition's id is recorded in the bootstrap record, so a later layout (one per
# replica set, say) can name another; this is the one routers create today.
CATALOG_PARTITION_ID = f"{CATALOG_TABLE_ID}-0"
# A new cluster's catalog goes to the ring owner of this key (the id under which earlier versions
# kept the catalog document, so a new cluster places it where they did); from then on the
# bootstrap record says where it is.
CATALOG_PLACEMENT_KEY = "catalog"


class IllegalTransition(InternalServerError):
    """A change that the transition tables do not allow: a bug in the caller, never bad input."""


class TableClass(enum.StrEnum):
    """A table's storage class (TableClass). dynalab stores both alike; the class is recorded
    and described, as DynamoDB's is, for the applications and tools that set it."""

    STANDARD = "STANDARD"
    STANDARD_INFREQUENT_ACCESS = "STANDARD_INFREQUENT_ACCESS"


# DeleteTable of a table with DeletionProtectionEnabled (DynamoDB's ValidationException).
DELETION_PROTECTED = (
    "Resource cannot be deleted as it is currently protected against deletion. "
    "Disable deletion protection first."
)


class TableStatus(enum.StrEnum):
    """A table's TableStatus, as DynamoDB spells it."""

    CREATING = "CREATING"
    ACTIVE = "ACTIVE"
    UPDATING = "UPDATING"
    DELETING = "DELETING"


class PartitionState(enum.StrEnum):
    """Whether a partition serves its range, or was replaced by its children (a split)."""

    SERVING = "SERVING"
    RETIRED = "RETIRED"


class IndexStatus(enum.StrEnum):
    """A secondary index's IndexStatus; BACKFILLING is dynalab's name for CREATING with
    Backfilling: true (DescribeTable reports it so)."""

    CREATING = "CREATING"
    BACKFILLING = "BACKFILLING"
    ACTIVE = "ACTIVE"
    DELETING = "DELETING"


class TtlStatus(enum.StrEnum):
    """A table's TimeToLiveStatus, as DynamoDB spells it."""

    ENABLING = "ENABLING"
    ENABLED = "ENABLED"
    DISABLING = "DISABLING"
    DISABLED = "DISABLED"


# None on either side is "not in the catalog": a row created, or a row removed.
TABLE_TRANSITIONS: frozenset[tuple[TableStatus | None, TableStatus | None]] = frozenset(
    {
        (None, TableStatus.CREATING),  # CreateTable records the table before its partitions.
        (TableStatus.CREATING, TableStatus.ACTIVE),  # Every partition was created.
        (TableStatus.CREATING, None),  # A partition could not be created: the table is undone.
        (TableStatus.CREATING, TableStatus.DELETING),  # DeleteTable of an overdue creation.
        (TableStatus.ACTIVE, TableStatus.UPDATING),  # UpdateTable changed the throughput.
        (TableStatus.UPDATING, TableStatus.ACTIVE),  # Every node took the new throughput.
        (TableStatus.ACTIVE, TableStatus.DELETING),
        (TableStatus.UPDATING, TableStatus.DELETING),
        (TableStatus.DELETING, None),  # Every node dropped the table's partitions.
    }
)
PARTITION_TRANSITIONS: frozenset[tuple[PartitionState, PartitionState]] = frozenset(
    {
        (PartitionState.SERVING, PartitionState.RETIRED),  # Split into two children.
        (PartitionState.SERVING, PartitionState.SERVING),  # Moved to another node.
    }
)
INDEX_TRANSITIONS: frozenset[tuple[IndexStatus | None, IndexStatus | None]] = frozenset(
    {
        (None, IndexStatus.CREATING),
        # An online index whose partitions could not all be created is taken out again.
        (IndexStatus.CREATING, None),
        # An index created with its table has nothing to backfill: ACTIVE with the table.
        (IndexStatus.CREATING, IndexStatus.ACTIVE),
        (IndexStatus.CREATING, IndexStatus.BACKFILLING),
        (IndexStatus.BACKFILLING, IndexStatus.ACTIVE),
        (IndexStatus.CREATING, IndexStatus.DELETING),
        (IndexStatus.BACKFILLING, IndexStatus.DELETING),
        (IndexStatus.ACTIVE, IndexStatus.DELETING),
        (IndexStatus.DELETING, None),
    }
)
# None: TTL was never set on the table (DescribeTimeToLive says DISABLED).
TTL_TRANSITIONS: frozenset[tuple[TtlStatus | None, TtlStatus]] = frozenset(
    {
        (None, TtlStatus.ENABLING),  # UpdateTimeToLive Enabled=true, recorded before the nodes.
        (TtlStatus.DISABLED, TtlStatus.ENABLING),
        (TtlStatus.ENABLING, TtlStatus.ENABLED),  # Every node holding a partition took it.
        (TtlStatus.ENABLING, TtlStatus.DISABLING),  # A node had not taken it an hour later.
        (TtlStatus.ENABLED, TtlStatus.DISABLING),  # UpdateTimeToLive Enabled=false.
        (TtlStatus.DISABLING, TtlStatus.DISABLED),  # Every node stopped sweeping.
        (TtlStatus.DISABLING, TtlStatus.ENABLING),  # A node had not taken it an hour later.
    }
)
# None: the table never had a stream. A disabled stream is kept (DescribeTable still names it as
# LatestStreamArn, as DynamoDB does); enabling again makes a new stream with a new label.
STREAM_TRANSITIONS: frozenset[tuple[bool | None, bool]] = frozenset(
    {
        (None, True),  # CreateTable or UpdateTable with StreamEnabled true.
        (True, False),  # UpdateTable with StreamEnabled false.
        (False, True),  # Enabled again: a new stream.
    }
)
# Statuses in which a table serves reads and writes (an UPDATING table still does in DynamoDB),
# and in which its partitions may split.
SERVING_STATUSES = frozenset({TableStatus.ACTIVE, TableStatus.UPDATING})


def _check(
    transitions: frozenset[tuple[Any, Any]], what: str, source: object, target: object
) -> None:
    if (source, target) not in transitions:
        raise IllegalTransition(f"{what} cannot go from {source} to {target}")


# Records ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Throughput:
    """A table's provisioned capacity units; zeros for PAY_PER_REQUEST, as DynamoDB reports."""

    read: int = 0
    write: int = 0


@dataclass(frozen=True, slots=True)
class OnDemandThroughput:
    """An on-demand table's OnDemandThroughput: the most read and write request units a second it
    may serve (None: no maximum, DynamoDB's default), divided across its partitions as a
    provisioned table's units are."""

    max_read: int | None = None
    max_write: int | None = None

    @property
    def empty(self) -> bool:
        return self.max_read is None and self.max_write is None

    def to_json(self) -> dict[str, int | None]:
        return {"max_read": self.max_read, "max_write": self.max_write}

    @classmethod
    def from_json(cls, document: Mapping[str, Any] | None) -> OnDemandThroughput:
        if not document:
            return cls()
        return cls(document.get("max_read"), document.get("max_write"))

    def described(self) -> dict[str, int]:
        """DescribeTable's OnDemandThroughput: the members set, and nothing for one never set or
        removed (as DynamoDB describes it)."""
        shown: dict[str, int] = {}
        for member, value in zip(ON_DEMAND_MEMBERS, (self.max_read, self.max_write), strict=True):
            if value is not None:
                shown[member] = value
        return shown


# OnDemandThroughput's members, read first (DynamoDB names the first present one in its refusals),
# and the value UpdateTable takes to remove a maximum (API Reference, OnDemandThroughput).
ON_DEMAND_MEMBERS = ("MaxReadRequestUnits", "MaxWriteRequestUnits")
ON_DEMAND_REMOVED = -1


def _on_demand_gate(
    requested: Mapping[str, int], billing_mode: BillingMode, wording: str, index: str | None = None
) -> None:
    """Refuse OnDemandThroughput on a table that is (or becomes) PROVISIONED, naming the first
    member given (and the index whose it is, `index`); DynamoDB checks this before the members'
    range."""
    if billing_mode != BillingMode.PROVISIONED:
        return
    whose = "" if index is None else f" for index: {index}"
    for member in ON_DEMAND_MEMBERS:
        if member in requested:
            raise ValidationError(
                f"{INVALID_PARAMETERS}{member} for OnDemandThroughput{whose} cannot be specified "
                f"when {wording}"
            )


def _on_demand_range(
    requested: Mapping[str, int], *, removable: bool, index: str | None = None
) -> None:
    # DynamoDB's words put a space before the index's colon here ("for index : g-a"), unlike the
    # gate's ("for index: g-a"), as captured against the service.
    whose = "table" if index is None else f"index : {index}"
    for member in ON_DEMAND_MEMBERS:
        value = requested.get(member)
        if value is None or value >= 1 or (removable and value == ON_DEMAND_REMOVED):
            continue
        raise ValidationError(
            f"{INVALID_PARAMETERS}Requested {member} for OnDemandThroughput for {whose} is "
            "outside of valid range"
        )


def _on_demand_merged(
    current: OnDemandThroughput, requested: Mapping[str, int]
) -> OnDemandThroughput:
    merged = [current.max_read, current.max_write]
    for position, member in enumerate(ON_DEMAND_MEMBERS):
        value = requested.get(member)
        if value is not None:
            merged[position] = None if value == ON_DEMAND_REMOVED else value
    return OnDemandThroughput(merged[0], merged[1])


def on_demand_created(
    billing_mode: BillingMode, requested: Mapping[str, int] | None
) -> OnDemandThroughput:
    """CreateTable's OnDemandThroughput (`requested`: the members given, None or empty when
    absent, which DynamoDB takes alike), or DynamoDB's refusal: none on a PROVISIONED table, each
    member at least 1. The wording differs from UpdateTable's ("table", a final period) as
    DynamoDB's does (as captured against the service by a public emulator's compatibility
    tests, eu-west-2, July 2026)."""
    if not requested:
        return OnDemandThroughput()
    _on_demand_gate(requested, billing_mode, "table BillingMode is PROVISIONED.")
    _on_demand_range(requested, removable=False)
    return OnDemandThroughput(
        requested.get("MaxReadRequestUnits"), requested.get("MaxWriteRequestUnits")
    )


def on_demand_updated(
    current: OnDemandThroughput, billing_mode: BillingMode, requested: Mapping[str, int] | None
) -> OnDemandThroughput:
    """UpdateTable's OnDemandThroughput merged over the table's, member by member, -1 removing
    a maximum; a table that is or becomes PROVISIONED keeps none (switching to it clears them),
    and may not be given one. DynamoDB's refusals, in its order, with its wording ("the table",
    no final period)."""
    if billing_mode == BillingMode.PROVISIONED:
        _on_demand_gate(requested or {}, billing_mode, "the table BillingMode is PROVISIONED")
        return OnDemandThroughput()
    if not requested:
        return current
    _on_demand_range(requested, removable=True)
    return _on_demand_merged(current, requested)


def index_on_demand_created(
    billing_mode: BillingMode, index: str, requested: Mapping[str, int] | None
) -> OnDemandThroughput:
    """A global index's OnDemandThroughput as CreateTable or UpdateTable's Create gives it (None
    or empty: none, as DynamoDB takes an empty one), or DynamoDB's refusal, naming the index:
    none on a PROVISIONED table, each member at least 1 (as captured against the service by a
    public catalogue of DynamoDB's answers, ack-api-quirks DDB-TABLE-128; the gate's words
    after the index's name are the table's, which that capture elides)."""
    if not requested:
        return OnDemandThroughput()
    _on_demand_gate(requested, billing_mode, "table BillingMode is PROVISIONED.", index)
    _on_demand_range(requested, removable=False, index=index)
    return OnDemandThroughput(
        requested.get("MaxReadRequestUnits"), requested.get("MaxWriteRequestUnits")
    )


@dataclass(frozen=True, slots=True)
class WarmThroughput:
    """A table's warm throughput: the read and write units a second it serves at once ("the
    number of read and write operations your DynamoDB table can instantaneously support",
    Developer Guide, "Understanding DynamoDB warm throughput"). In dynalab that is what its
    partitions serve at their ceilings, so raising it (pre-warming) means more partitions."""

    read: int
    write: int

    def covers(self, other: WarmThroughput) -> bool:
        return self.read >= other.read and self.write >= other.write

    def widened(self, other: WarmThroughput) -> WarmThroughput:
        return WarmThroughput(max(self.read, other.read), max(self.write, other.write))


# WarmThroughput's members, read first (as the service model lists them).
WARM_MEMBERS = ("ReadUnitsPerSecond", "WriteUnitsPerSecond")
# The warm throughput every new table starts with, and the least a request may ask for: a new
# on-demand table's "12,000 read units per second and 4,000 write units per second" (Developer
# Guide, "Understanding DynamoDB warm throughput in different scenarios"); DynamoDB refuses a
# request below it, naming the unit.
WARM_THROUGHPUT_MIN = (12_000, 4_000)


def partitions_warm(count: int) -> WarmThroughput:
    """What `count` partitions serve at once: each its 3,000 read and 1,000 write units."""
    return WarmThroughput(count * limits.PARTITION_RCU_MAX, count * limits.PARTITION_WCU_MAX)


def warm_partition_count(warm: WarmThroughput) -> int:
    """The partitions a table needs to serve `warm` at once (reads and writes each at their
    ceiling: a warm throughput is each alone, not both at once)."""
    return max(
        1,
        -(-warm.read // limits.PARTITION_RCU_MAX),
        -(-warm.write // limits.PARTITION_WCU_MAX),
    )


def warm_created(requested: Mapping[str, int] | None, region: str) -> WarmThroughput | None:
    """CreateTable's WarmThroughput (the members given; None or empty when absent): the table
    starts with it, a member not given at the minimum, so it is created with the partitions that
    serve it (`created`)."""
    if not requested:
        return None
    minimum = WarmThroughput(*WARM_THROUGHPUT_MIN)
    return _warm_requested("table", requested, minimum, region, created=True)


def warm_throughput(table: TableDef) -> WarmThroughput:
    """DescribeTable's WarmThroughput units: what was asked for, else what the table's
    partitions serve."""
    return table.warm or partitions_warm(len(table.partitions))


def warm_settled(table: TableDef) -> bool:
    """Whether the table has the partitions its warm throughput needs (WarmThroughput's Status
    ACTIVE; UPDATING while its partitions are split to reach it)."""
    return table.warm is None or len(table.partitions) >= warm_partition_count(table.warm)


def widest_partition(table: TableDef) -> tuple[PartitionDef, bytes]:
    """The serving partition whose hash range is widest, and the key at its middle (a bare
    hash prefix, which is an item collection's start too): where a pre-warm splits next, so
    that the partitions stay even. Raises if no partition's range can be halved by hash."""
    return widest_of(table.partitions, f"Table {table.name}")


def widest_of(partitions: Sequence[PartitionDef], what: str) -> tuple[PartitionDef, bytes]:
    """`widest_partition` of any partitions (a table's or a global index's: `what` names them)."""
    widest: tuple[int, PartitionDef, int] | None = None
    for partition in partitions:
        low = _hash_of(partition.start, 0)
        high = HASH_SPACE if partition.end is None else _hash_of(partition.end, HASH_SPACE)
        if high - low >= 2 and (widest is None or high - low > widest[0]):
            widest = (high - low, partition, (low + high) // 2)
    if widest is None:
        raise InternalServerError(f"{what} has no partition that halves by hash")
    return widest[1], widest[2].to_bytes(HASH_BYTES, "big")


def _hash_of(bound: str, empty: int) -> int:
    """The hash prefix a partition bound starts with (`empty` for the unbounded "")."""
    raw = bytes.fromhex(bound)
    return int.from_bytes(raw[:HASH_BYTES].ljust(HASH_BYTES, b"\0"), "big") if raw else empty


def warm_updated(table: TableDef, requested: Mapping[str, int], region: str) -> TableDef | None:
    """UpdateTable's WarmThroughput: the table asking for more (its partitions are then split
    until they serve it: `warm_settled`), None when it has that already, or DynamoDB's refusal:
    "Once increased, warm throughput values can't be decreased" (Developer Guide), in its words
    (`_warm_requested`)."""
    if table.status != TableStatus.ACTIVE:
        raise table_in_use(table)
    current = warm_throughput(table)
    wanted = _warm_requested("table", requested, current, region, created=False)
    if wanted == current:
        return None
    return _changed(table, warm=wanted)


# WarmThroughput's refusals in DynamoDB's words, the table's and a global index's alike, as
# captured against the service by a public catalogue of its answers (ack-api-quirks
# DDB-TABLE-128, 154, 155, 456, 457): below the minimum at creation "is lower than initial
# throughput for OnDemand" (the table's message goes on with ". See: " and a link into the
# Developer Guide that the capture cuts short, so dynalab stops before it; the index's capture
# shows none), lower than the current one at UpdateTable (checked first: a 0 is refused so)
# "decreasing WarmThroughput is not supported". Above the per-table quota an index's refusal is
# the captured LimitExceeded naming the account's limit; the table's words there are dynalab's.
_WARM_QUOTAS = ("TableMaxReadCapacityUnits", "TableMaxWriteCapacityUnits")


def _warm_requested(
    whose: str,
    requested: Mapping[str, int],
    current: WarmThroughput,
    region: str,
    *,
    created: bool,
) -> WarmThroughput:
    """The warm throughput a request asks for (a member not given keeps `current`'s) of the
    table (`whose`: "table") or a global index ("index NAME"), or DynamoDB's refusal."""
    values = [current.read, current.write]
    for position, member in enumerate(WARM_MEMBERS):
        value = requested.get(member)
        if value is None:
            continue
        if not created and value < values[position]:
            raise ValidationError(
                f"{INVALID_PARAMETERS}Requested {member} for WarmThroughput for {whose} is "
                "lower than current WarmThroughput, decreasing WarmThroughput is not supported"
            )
        if value < WARM_THROUGHPUT_MIN[position]:
            raise ValidationError(
                f"{INVALID_PARAMETERS}Requested {member} for WarmThroughput for {whose} is "
                "lower than initial throughput for OnDemand"
            )
        if value > limits.PROVISIONED_UNITS_PER_TABLE_MAX:
            if whose == "table":
                raise LimitExceeded(
                    f"The requested {member}, {value}, is above the per table maximum for the "
                    f"account in {region}. Per table maximum: "
                    f"{limits.PROVISIONED_UNITS_PER_TABLE_MAX}."
                )
            raise LimitExceeded(
                f"Subscriber limit exceeded: Requested {member} for WarmThroughput for {whose} "
                f"exceeds {_WARM_QUOTAS[position]} of the account in region {region}"
            )
        values[position] = value
    return WarmThroughput(values[0], values[1])


def index_warm_created(
    index: str, requested: Mapping[str, int] | None, region: str
) -> WarmThroughput | None:
    """A global index's WarmThroughput at its creation (None or empty: none asked for, which
    DynamoDB takes alike), a member not given at the minimum: the index is created with the
    partitions that serve it (`global_index`)."""
    if not requested:
        return None
    minimum = WarmThroughput(*WARM_THROUGHPUT_MIN)
    return _warm_requested(f"index {index}", requested, minimum, region, created=True)


def index_warm_throughput(index: IndexDef) -> WarmThroughput:
    """DescribeTable's WarmThroughput units of a global index: what was asked for, else what its
    partitions serve."""
    return index.warm or partitions_warm(len(index.partitions))


def index_warm_settled(index: IndexDef) -> bool:
    """Whether the global index has the partitions its warm throughput needs (its
    WarmThroughput's Status ACTIVE)."""
    return index.warm is None or len(index.partitions) >= warm_partition_count(index.warm)


def prewarm_pending(table: TableDef) -> bool:
    """Whether the table or one of its global indexes still needs partitions split to serve its
    warm throughput (the routers' reconcilers split them: `router.table_lifecycle.prewarm`)."""
    return not warm_settled(table) or any(
        not index_warm_settled(index) for index in global_indexes(table)
    )


@dataclass(frozen=True, slots=True)
class ThroughputChanges:
    """What UpdateTable has done to a table's throughput, for DescribeTable."""

    last_increase: float | None = None
    last_decrease: float | None = None
    decreases_day: str | None = None  # The UTC day (YYYY-MM-DD) `decreases` counts.
    decreases: int = 0
    pay_per_request_since: float | None = None


def milliseconds(seconds: float) -> int:
    """A time in seconds since the epoch as whole milliseconds, as partitions record it."""
    return round(seconds * 1000)


@dataclass(frozen=True, slots=True)
class PartitionDef:
    """One partition: the storage keys [start, end) it holds (hex; end None: unbounded), its
    epoch, its state, the partition it was split from, its node and its share of the table's
    throughput (the shares of a table's serving partitions add up to 1).

    `rank` orders the table's partitions by creation: the version of the table's row that made
    it (a new table's are 1, a split's children the row version that recorded them), and
    `parent_rank` is its parent's; 0 for a partition recorded before ranks were kept.
    `created_ms` is when it was made, in milliseconds since the epoch on the clock of whoever
    made it (the router that created the table, the node that recorded the split), a child's
    always past its parent's; `parent_created_ms` is its parent's; 0 for a partition recorded
    before creation times were kept, and for a global index's partitions. A stream's shard ids
    carry both, so that they give a creation time and sort in creation order
    (`core.streams.shard_id`)."""

    id: str
    start: str
    end: str | None
    epoch: int
    node: str
    state: PartitionState = PartitionState.SERVING
    parent: str | None = None
    share: Fraction = Fraction(1)
    rank: int = 0
    parent_rank: int = 0
    created_ms: int = 0
    parent_created_ms: int = 0
    # The nodes holding its replicas, its first leader first (`node` is that one), each a
    # member of its replication group; empty: `node`'s copy alone (replication factor 1).
    replicas: tuple[str, ...] = ()
    # A replicated partition's replica moving (`core.machines.replica_move`): (source node,
    # target node). The target is a learner of the group until it is named among `replicas`.
    replica_move: tuple[str, str] | None = None

    @property
    def nodes(self) -> tuple[str, ...]:
        """Every node holding a replica of it: its replicas, and the target of its replica
        move while that is not one of them yet."""
        if self.replica_move is not None and self.replica_move[1] not in self.replicas:
            return (*self.replicas, self.replica_move[1])
        return self.replicas or (self.node,)

    def holds(self, storage_key: bytes) -> bool:
        return bytes.fromhex(self.start) <= storage_key and (
            self.end is None or storage_key < bytes.fromhex(self.end)
        )

    def to_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "id": self.id,
            "start": self.start,
            "end": self.end,
            "epoch": self.epoch,
            "node": self.node,
            "state": self.state.value,
            "parent": self.parent,
            "share": str(self.share),
            **({"replicas": list(self.replicas)} if self.replicas else {}),
        }
        if self.replica_move is not None:
            document["replica_move"] = {"from": self.replica_move[0], "to": self.replica_move[1]}
        # Only when kept, so a partition recorded before ranks and creation times were has the
        # document it had.
        if self.rank:
            document["rank"] = self.rank
        if self.parent_rank:
            document["parent_rank"] = self.parent_rank
        if self.created_ms:
            document["created_ms"] = self.created_ms
        if self.parent_created_ms:
            document["parent_created_ms"] = self.parent_created_ms
        return document

    @classmethod
    def from_json(cls, document: Mapping[str, Any], share: Fraction = Fraction(1)) -> PartitionDef:
        """A partition from its PARTITION dict; `share` when the dict has none (an older one)."""
        recorded = document.get("share")
        return cls(
            id=document["id"],
            start=document["start"],
            end=document["end"],
            epoch=int(document["epoch"]),
            node=document["node"],
            state=PartitionState(document.get("state", PartitionState.SERVING)),
            parent=document.get("parent"),
            share=share if recorded is None else Fraction(recorded),
            rank=int(document.get("rank") or 0),
            parent_rank=int(document.get("parent_rank") or 0),
            created_ms=int(document.get("created_ms") or 0),
            parent_created_ms=int(document.get("parent_created_ms") or 0),
            replicas=tuple(document.get("replicas") or ()),
            replica_move=_replica_move(document.get("replica_move")),
        )


def _replica_move(document: Mapping[str, str] | None) -> tuple[str, str] | None:
    return None if document is None else (document["from"], document["to"])


ProjectionType = Literal["ALL", "KEYS_ONLY", "INCLUDE"]


def index_key_shape(document: Sequence[Any]) -> KeyShape:
    """An index's own key from its catalog form `[[name, type, role], ...]`: its partition key
    attributes (one, or up to four for a global index) and then its sort key attributes."""
    attributes = tuple(KeyAttribute(name, kind, role) for name, kind, role in document)
    hashed = sum(attribute.role == "partition" for attribute in attributes)
    return KeyShape(attributes, hashed)


@dataclass(frozen=True, slots=True)
class BackfillProgress:
    """How far the copy of one source partition into an online index has come, as its backfill
    machine (`core.machines.backfill`) last recorded it: `cursor` is the key of the last item
    copied (a scan's LastEvaluatedKey; None: none yet, or the copy is done), `items` how many
    items were copied, `epoch` the lease epoch of the replicator that wrote it (a replicator whose
    lease was taken over cannot move it back)."""

    partition_id: str
    cursor: Mapping[str, Any] | None = None
    items: int = 0
    epoch: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "partition": self.partition_id,
            "cursor": None if self.cursor is None else dict(self.cursor),
            "items": self.items,
            "epoch": self.epoch,
        }

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> BackfillProgress:
        return cls(
            document["partition"], document.get("cursor"), document["items"], document["epoch"]
        )


def percentage_progress(status: IndexStatus, items_copied: int, items_estimate: int) -> int | None:
    """OnlineIndexPercentageProgress of an online index in `status` that has copied
    `items_copied` of the `items_estimate` the table held when its backfill began
    (`IndexDef.percentage_progress`)."""
    if status == IndexStatus.DELETING:
        return None
    if status == IndexStatus.ACTIVE:
        return 100
    if status == IndexStatus.CREATING or items_estimate == 0:
        return 0
    return min(99, 100 * items_copied // items_estimate)


def backfill_rate(items_copied: int, began_at: float, now: float) -> float | None:
    """An online index's backfill rate in items per second: the items copied over the time since
    the backfill began (`IndexDef.began_at`, the replicator's clock), pauses for a restarted
    replicator or a moved lease included; None before it began or with no time passed."""
    if not began_at or now <= began_at:
        return None
    return items_copied / (now - began_at)


def backfill_seconds_left(
    items_copied: int, items_estimate: int, rate: float | None
) -> float | None:
    """The time an online index's backfill still needs at `rate` (`backfill_rate`): the items of
    the estimate not copied yet over the rate; None without a rate or an estimate. An estimate
    is the table's item count when the backfill began, so items written since are not in it."""
    if not rate or not items_estimate:
        return None
    return max(0, items_estimate - items_copied) / rate


@dataclass(frozen=True, slots=True)
class IndexDef:
    """A secondary index: its key shape, what it projects and its status.

    A global index is stored like a table: its entries live under an id of its own (`table_id`)
    in partitions of its own (hash ranges of the index partition key, with epochs, placed on the
    ring like a table's), metered against its own provisioned throughput (zeros on demand). A
    local index has none of these: its entries live in the table's partitions.
    """

    name: str
    key_shape: KeyShape
    projection: ProjectionType
    status: IndexStatus
    non_key_attributes: tuple[str, ...] = ()  # INCLUDE's NonKeyAttributes.
    local: bool = False  # A local index shares the table's partition key and partitions.
    table_id: str | None = None  # A global index's storage id (32 hex characters).
    partitions: tuple[PartitionDef, ...] = ()  # A global index's partitions, sorted by start.
    throughput: Throughput = Throughput()  # A global index's ProvisionedThroughput.
    # Added to a live table by UpdateTable (then backfilled, and followed under a change-feed
    # consumer of its own), rather than created with the table.
    online: bool = False
    # An online index's source partitions whose copy is done (it is ACTIVE once all are).
    backfilled: tuple[str, ...] = ()
    # A global index's partitions a split retired, kept while a serving one names them as its
    # parent (lineage: a node restarted between a split's record and its install finds it so).
    retired: tuple[PartitionDef, ...] = ()
    # While an online index backfills: each source partition's copy as far as it has come (kept
    # for a partition a split retired mid-copy, so the items copied only grow), and the table's
    # item count when the backfill began, the estimate OnlineIndexPercentageProgress divides by.
    progress: tuple[BackfillProgress, ...] = ()
    items_estimate: int = 0
    # When the backfill began (Unix seconds, the replicator's clock; 0: not begun), from which
    # its rate and the time it has left are estimated (`backfill_rate`).
    began_at: float = 0.0
    # A global index's OnDemandThroughput (on an on-demand table only) and the WarmThroughput
    # asked for (None: what its partitions serve), as a table's.
    on_demand: OnDemandThroughput = OnDemandThroughput()
    warm: WarmThroughput | None = None

    def to_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "name": self.name,
            "key": [[a.name, a.type, a.role] for a in self.key_shape.attributes],
            "projection": self.projection,
            "non_key_attributes": list(self.non_key_attributes),
            "status": self.status.value,
            "local": self.local,
        }
        if self.table_id is not None:
            document["table_id"] = self.table_id
            document["partitions"] = [partition.to_json() for partition in self.partitions]
            document["throughput"] = {"read": self.throughput.read, "write": self.throughput.write}
            if self.retired:
                document["retired_partitions"] = [partition.to_json() for partition in self.retired]
            if not self.on_demand.empty:
                document["on_demand"] = self.on_demand.to_json()
            if self.warm is not None:
                document["warm"] = [self.warm.read, self.warm.write]
        if self.online:
            document["online"] = True
            document["backfilled"] = list(self.backfilled)
            if self.progress:
                document["progress"] = [entry.to_json() for entry in self.progress]
            if self.items_estimate:
                document["items_estimate"] = self.items_estimate
            if self.began_at:
                document["began_at"] = self.began_at
        return document

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> IndexDef:
        partitions = document.get("partitions", ())
        even = Fraction(1, max(1, len(partitions)))
        throughput = document.get("throughput") or {"read": 0, "write": 0}
        return cls(
            name=document["name"],
            key_shape=index_key_shape(document["key"]),
            projection=document["projection"],
            status=IndexStatus(document["status"]),
            non_key_attributes=tuple(document.get("non_key_attributes", ())),
            local=bool(document.get("local", False)),
            table_id=document.get("table_id"),
            partitions=tuple(PartitionDef.from_json(p, even) for p in partitions),
            throughput=Throughput(throughput["read"], throughput["write"]),
            online=bool(document.get("online", False)),
            backfilled=tuple(document.get("backfilled", ())),
            retired=tuple(
                PartitionDef.from_json(p) for p in document.get("retired_partitions", ())
            ),
            progress=tuple(BackfillProgress.from_json(p) for p in document.get("progress", ())),
            items_estimate=int(document.get("items_estimate", 0)),
            began_at=float(document.get("began_at", 0.0)),
            on_demand=OnDemandThroughput.from_json(document.get("on_demand")),
            warm=None if document.get("warm") is None else WarmThroughput(*document["warm"]),
        )

    @property
    def is_global(self) -> bool:
        return self.table_id is not None

    @property
    def backfilling(self) -> bool:
        """DescribeTable's Backfilling: an online index copying the table's items."""
        return self.status == IndexStatus.BACKFILLING

    def backfill_of(self, partition_id: str) -> BackfillProgress | None:
        """The recorded copy of source partition `partition_id`; None: not begun."""
        return next((p for p in self.progress if p.partition_id == partition_id), None)

    @property
    def items_copied(self) -> int:
        """The items the backfill has copied so far, over every source partition."""
        return sum(entry.items for entry in self.progress)

    @property
    def percentage_progress(self) -> int | None:
        """DynamoDB's OnlineIndexPercentageProgress (a CloudWatch metric there) of an online
        index: the items copied over the table's item count as estimated when the backfill
        began, below 100 until every partition is copied, 100 once ACTIVE; None for an index
        created with its table or being deleted. Monotonic: the estimate is fixed, the items
        copied only grow (`backfill_progressed`); items written since the estimate, or copied
        again after a split retired their partition mid-copy, cannot take it past 99."""
        if not self.online:
            return None
        return percentage_progress(self.status, self.items_copied, self.items_estimate)


@dataclass(frozen=True, slots=True)
class TtlDef:
    """A table's Time to Live setting: the attribute holding expiry times, whether the last
    UpdateTimeToLive enabled or disabled it, whether every node holding a partition has taken that
    (`settled`), when it was made (`changed`, epoch seconds: DynamoDB allows one change an hour)
    and how many changes there were (`version`, so a node ignores a late, older push)."""

    attribute: str
    enabled: bool
    settled: bool = True
    changed: float | None = None
    version: int = 0

    @property
    def status(self) -> TtlStatus:
        """TimeToLiveStatus as DescribeTimeToLive reports it."""
        if self.enabled:
            return TtlStatus.ENABLED if self.settled else TtlStatus.ENABLING
        return TtlStatus.DISABLED if self.settled else TtlStatus.DISABLING

    def to_json(self) -> dict[str, Any]:
        return {
            "attribute": self.attribute,
            "enabled": self.enabled,
            "settled": self.settled,
            "changed": self.changed,
            "version": self.version,
        }

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> TtlDef:
        return cls(
            attribute=document["attribute"],
            enabled=bool(document["enabled"]),
            settled=bool(document.get("settled", True)),
            changed=document.get("changed"),
            version=int(document.get("version", 0)),
        )


class StreamViewType(enum.StrEnum):
    """What a stream record carries of the item (StreamSpecification's StreamViewType)."""

    KEYS_ONLY = "KEYS_ONLY"
    NEW_IMAGE = "NEW_IMAGE"
    OLD_IMAGE = "OLD_IMAGE"
    NEW_AND_OLD_IMAGES = "NEW_AND_OLD_IMAGES"


# The change-feed consumers of DynamoDB streams are named by this and the stream's label.
STREAM_CONSUMER_PREFIX = "stream/"


def is_stream_consumer(consumer: str) -> bool:
    return consumer.startswith(STREAM_CONSUMER_PREFIX)


@dataclass(frozen=True, slots=True)
class ClosedShard:
    """A shard of a disabled stream: its partition as it was when the stream was disabled, and
    the last seq of that partition's log the stream holds (the shard's EndingSequenceNumber)."""

    partition: PartitionDef
    end_seq: int

    def to_json(self) -> dict[str, Any]:
        return {"partition": self.partition.to_json(), "end_seq": self.end_seq}

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> ClosedShard:
        return cls(PartitionDef.from_json(document["partition"]), int(document["end_seq"]))


@dataclass(frozen=True, slots=True)
class StreamDef:
    """A table's DynamoDB stream: its label (a UTC time to the millisecond, unique per table: the
    last part of its ARN), its view type, when it was enabled (epoch seconds) and whether it is
    still enabled. The change-feed consumer that holds each partition's log for it is named by
    `consumer` (`stream/<label>`), so a new stream never inherits an old one's position.

    A disabled stream also records when it was disabled and its shards, closed: the partitions of
    the table then, each with the last seq the stream holds. It stays readable for the retention
    (24 hours) after that."""

    label: str
    view_type: StreamViewType
    created: float
    enabled: bool = True
    disabled: float | None = None
    shards: tuple[ClosedShard, ...] = ()

    @property
    def consumer(self) -> str:
        return f"{STREAM_CONSUMER_PREFIX}{self.label}"

    def readable(self, now: float, retention: float) -> bool:
        """Whether the stream is served at `now`: enabled, or disabled at most `retention`
        seconds before."""
        return self.disabled is None or now - self.disabled <= retention

    def to_json(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "view_type": self.view_type.value,
            "created": self.created,
            "enabled": self.enabled,
            "disabled": self.disabled,
            "shards": [shard.to_json() for shard in self.shards],
        }

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> StreamDef:
        disabled = document.get("disabled")
        return cls(
            label=document["label"],
            view_type=StreamViewType(document["view_type"]),
            created=float(document["created"]),
            enabled=bool(document["enabled"]),
            disabled=None if disabled is None else float(disabled),
            shards=tuple(ClosedShard.from_json(shard) for shard in document.get("shards", ())),
        )


@dataclass(frozen=True, slots=True)
class TableDef:
    """One table's catalog record; `version` counts the writes of its row (1 once created)."""

    name: str
    id: str
    status: TableStatus
    key_shape: KeyShape
    attribute_definitions: tuple[tuple[str, str], ...]  # (AttributeName, AttributeType)
    billing_mode: BillingMode
    throughput: Throughput
    created: float
    partitions: tuple[PartitionDef, ...]  # The serving partitions, sorted by start.
    throughput_version: int = 0  # +1 for every UpdateTable of throughput or billing.
    throughput_changes: ThroughputChanges = ThroughputChanges()
    # OnDemandThroughput: an on-demand table's maximum request units (none on a provisioned one).
    on_demand: OnDemandThroughput = OnDemandThroughput()
    # The WarmThroughput a request asked for, as its partitions grew since (None: none was, and
    # the table's is what its partitions serve).
    warm: WarmThroughput | None = None
    # Partitions a split retired, kept while a serving partition names them as its parent (a
    # change-log reader drains a parent before its children), and dropped after.
    retired: tuple[PartitionDef, ...] = ()
    indexes: tuple[IndexDef, ...] = ()
    ttl: TtlDef | None = None
    # The user's tags (key, value), in the order their keys were first added.
    tags: tuple[tuple[str, str], ...] = ()
    stream: StreamDef | None = None
    # Disabled streams a newer one replaced, kept readable for the retention after disabling.
    previous_streams: tuple[StreamDef, ...] = ()
    # DeletionProtectionEnabled: DeleteTable is refused while it is set.
    deletion_protection: bool = False
    # TableClass, once a request named one (None: never named, and DescribeTable shows no
    # TableClassSummary, as DynamoDB's does not), and when UpdateTable last changed it.
    table_class: TableClass | None = None
    table_class_updated: float | None = None
    version: int = 0
    _json: dict[str, Any] | None = field(default=None, compare=False, repr=False)

    @property
    def serving(self) -> bool:
        return self.status in SERVING_STATUSES

    @property
    def replicated(self) -> bool:
        """Whether its partitions are replicated on several nodes (a replication factor > 1)."""
        return any(partition.replicas for partition in self.partitions)

    def partition(self, partition_id: str) -> PartitionDef:
        for partition in self.partitions:
            if partition.id == partition_id:
                return partition
        raise IllegalTransition(f"Table {self.name} has no serving partition {partition_id}")

    def nodes(self) -> list[str]:
        """The nodes holding the table's partitions or its global indexes' partitions, by id."""
        held = {partition.node for partition in self.partitions}
        for index in self.indexes:
            held.update(partition.node for partition in index.partitions)
        return sorted(held)

    def to_json(self) -> dict[str, Any]:
        """The TABLE descriptor of `rpc.ops` (cached: a record is immutable, and callers must
        not modify the dict)."""
        if self._json is not None:
            return self._json
        document: dict[str, Any] = {
            "name": self.name,
            "id": self.id,
            "status": self.status.value,
            "key_schema": self.key_shape.to_key_schema(),
            "attribute_definitions": [
                {"AttributeName": name, "AttributeType": kind}
                for name, kind in self.attribute_definitions
            ],
            "billing_mode": self.billing_mode.value,
            "throughput": {"read": self.throughput.read, "write": self.throughput.write},
            "throughput_version": self.throughput_version,
            "throughput_changes": {
                "last_increase": self.throughput_changes.last_increase,
                "last_decrease": self.throughput_changes.last_decrease,
                "decreases_day": self.throughput_changes.decreases_day,
                "decreases": self.throughput_changes.decreases,
                "pay_per_request_since": self.throughput_changes.pay_per_request_since,
            },
            "on_demand": self.on_demand.to_json(),
            "warm": None if self.warm is None else [self.warm.read, self.warm.write],
            "created": self.created,
            "partitions": [partition.to_json() for partition in self.partitions],
            "retired_partitions": [partition.to_json() for partition in self.retired],
            "indexes": [index.to_json() for index in self.indexes],
            "ttl": None if self.ttl is None else self.ttl.to_json(),
            "tags": [[key, value] for key, value in self.tags],
            "stream": None if self.stream is None else self.stream.to_json(),
            "previous_streams": [stream.to_json() for stream in self.previous_streams],
            "deletion_protection": self.deletion_protection,
            "table_class": None if self.table_class is None else self.table_class.value,
            "table_class_updated": self.table_class_updated,
            "version": self.version,
        }
        object.__setattr__(self, "_json", document)
        return document

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> TableDef:
        """A record from its TABLE descriptor; fields an older descriptor lacks take their
        defaults (no throughput change, no indexes, shares split evenly)."""
        partitions = document["partitions"]
        even = Fraction(1, max(1, len(partitions)))
        changes = document.get("throughput_changes") or {}
        ttl = document.get("ttl")
        stream = document.get("stream")
        table_class = document.get("table_class")
        return cls(
            name=document["name"],
            id=document["id"],
            status=TableStatus(document["status"]),
            key_shape=KeyShape.from_key_schema(document["key_schema"]),
            attribute_definitions=tuple(
                (d["AttributeName"], d["AttributeType"]) for d in document["attribute_definitions"]
            ),
            billing_mode=BillingMode(document["billing_mode"]),
            throughput=Throughput(document["throughput"]["read"], document["throughput"]["write"]),
            created=document["created"],
            partitions=tuple(PartitionDef.from_json(p, even) for p in partitions),
            throughput_version=int(document.get("throughput_version", 0)),
            throughput_changes=ThroughputChanges(
                last_increase=changes.get("last_increase"),
                last_decrease=changes.get("last_decrease"),
                decreases_day=changes.get("decreases_day"),
                decreases=int(changes.get("decreases") or 0),
                pay_per_request_since=changes.get("pay_per_request_since"),
            ),
            on_demand=OnDemandThroughput.from_json(document.get("on_demand")),
            warm=None if document.get("warm") is None else WarmThroughput(*document["warm"]),
            retired=tuple(
                PartitionDef.from_json(p) for p in document.get("retired_partitions", ())
            ),
            indexes=tuple(IndexDef.from_json(i) for i in document.get("indexes", ())),
            ttl=None if ttl is None else TtlDef.from_json(ttl),
            tags=tuple((key, value) for key, value in document.get("tags", ())),
            stream=None if stream is None else StreamDef.from_json(stream),
            previous_streams=tuple(
                StreamDef.from_json(previous) for previous in document.get("previous_streams", ())
            ),
            deletion_protection=bool(document.get("deletion_protection", False)),
            table_class=None if table_class is None else TableClass(table_class),
            table_class_updated=document.get("table_class_updated"),
            version=int(document.get("version", 0)),
        )


def _changed(table: TableDef, **changes: Any) -> TableDef:
    """A copy of `table` with `changes` (and no cached descriptor)."""
    return replace(table, _json=None, **changes)


def versioned(table: TableDef, version: int) -> TableDef:
    """The record as written at row version `version` (the catalog's compare-and-set sets it)."""
    return _changed(table, version=version)


# Creating and deleting -------------------------------------------------------------------------


def _initial_partitions(
    stored_id: str,
    count: int,
    owner: Callable[[str], str],
    replicas_of: Callable[[str, int], tuple[str, ...]] | None,
    *,
    rank: int,
    created_ms: int,
) -> tuple[PartitionDef, ...]:
    """The `count` partitions of a new table or global index stored under `stored_id`, made at
    `created_ms` (0: not kept), splitting
    the hash space evenly, each at epoch 1 with an equal share: the i-th on `replicas_of`'s
    nodes for (`stored_id`, i), replicated if there are several, or else on `owner`'s node for
    its id."""
    share = Fraction(1, count)
    partitions = []
    for number, (start, end) in enumerate(initial_ranges(count)):
        partition_id = f"{stored_id}-{number}"
        nodes = () if replicas_of is None else replicas_of(stored_id, number)
        node = nodes[0] if nodes else owner(partition_id)
        replicas = nodes if len(nodes) > 1 else ()
        partitions.append(
            PartitionDef(
                partition_id,
                start,
                end,
                1,
                node,
                share=share,
                rank=rank,
                created_ms=created_ms,
                replicas=replicas,
            )
        )
    return tuple(partitions)


def created(
    *,
    name: str,
    table_id: str,
    key_shape: KeyShape,
    attribute_definitions: Iterable[tuple[str, str]],
    billing_mode: BillingMode,
    throughput: Throughput,
    now: float,
    owner: Callable[[str], str],
    indexes: tuple[IndexDef, ...] = (),
    tags: Sequence[tuple[str, str]] = (),
    replicas_of: Callable[[str, int], tuple[str, ...]] | None = None,
    stream_view_type: StreamViewType | None = None,
    deletion_protection: bool = False,
    table_class: TableClass | None = None,
    on_demand: OnDemandThroughput = OnDemandThroughput(),
    warm: WarmThroughput | None = None,
) -> TableDef:
    """A new table, CREATING, created at `now`, with as many partitions as its throughput (and
    its WarmThroughput, `warm_created`) needs, the secondary indexes given at creation
    (`indexes`), CreateTable's `tags` (as `tagged` adds them), with `stream_view_type` an
    enabled stream, and CreateTable's DeletionProtectionEnabled, TableClass and
    OnDemandThroughput (`on_demand_created`).

    The partitions split the hash space evenly, each at epoch 1 with an equal share of the
    throughput, on the node `owner` picks for its id; or, given `replicas_of` (the nodes of the
    i-th partition of the table with id `table_id`, its first leader first:
    `placement.HashRing.spread`), on those nodes, replicated if there are several.
    """
    count = initial_partition_count(billing_mode, throughput.read, throughput.write)
    if warm is not None:
        count = max(count, warm_partition_count(warm))
    partitions = _initial_partitions(
        table_id, count, owner, replicas_of, rank=1, created_ms=milliseconds(now)
    )
    return TableDef(
        name=name,
        id=table_id,
        status=TableStatus.CREATING,
        key_shape=key_shape,
        attribute_definitions=tuple(attribute_definitions),
        billing_mode=billing_mode,
        throughput=throughput,
        created=now,
        partitions=tuple(partitions),
        indexes=indexes,
        tags=_with_tags((), tags),
        stream=None
        if stream_view_type is None
        else StreamDef(stream_label(now, None), stream_view_type, now),
        deletion_protection=deletion_protection,
        table_class=table_class,
        on_demand=on_demand,
        warm=warm,
    )


def settings_updated(
    table: TableDef,
    *,
    deletion_protection: bool | None,
    table_class: TableClass | None,
    now: float,
) -> TableDef:
    """UpdateTable's DeletionProtectionEnabled and TableClass (None: not in the request). Both
    change the table's record only: no node holds either, so the table needs no UPDATING phase.
    A TableClass the table already has is recorded as named without a new update time."""
    changes: dict[str, Any] = {}
    if deletion_protection is not None:
        changes["deletion_protection"] = deletion_protection
    if table_class is not None:
        changes["table_class"] = table_class
        if table_class != (table.table_class or TableClass.STANDARD):
            changes["table_class_updated"] = now
    return _changed(table, **changes)


def activated(table: TableDef) -> TableDef:
    """The table ACTIVE: its partitions all exist (CREATING), or every node took its new
    throughput (UPDATING). The indexes created with it become ACTIVE with it."""
    _check(TABLE_TRANSITIONS, f"Table {table.name}", table.status, TableStatus.ACTIVE)
    indexes = table.indexes
    if table.status == TableStatus.CREATING:
        for index in indexes:
            _check(INDEX_TRANSITIONS, f"Index {index.name}", index.status, IndexStatus.ACTIVE)
        indexes = tuple(replace(index, status=IndexStatus.ACTIVE) for index in indexes)
    return _changed(table, status=TableStatus.ACTIVE, indexes=indexes)


def may_activate(table: TableDef) -> bool:
    return (table.status, TableStatus.ACTIVE) in TABLE_TRANSITIONS


def deleting(table: TableDef, now: float) -> TableDef:
    """The table DELETING (DeleteTable), as of `now`.

    DynamoDB refuses to delete a table while it is being created; a creation still unfinished
    `TABLE_CREATION_SECONDS_MAX` after it began can no longer finish (its router died), so such a
    table may be deleted.
    """
    if table.deletion_protection:
        # Checked before the table's state: a guess at DynamoDB's order, which is not published.
        raise ValidationError(DELETION_PROTECTED)
    overdue = now - table.created > limits.TABLE_CREATION_SECONDS_MAX
    if table.status == TableStatus.CREATING and not overdue:
        raise table_in_use(table)
    _check(TABLE_TRANSITIONS, f"Table {table.name}", table.status, TableStatus.DELETING)
    return _changed(table, status=TableStatus.DELETING)


def check_removal(table: TableDef) -> None:
    """Raise unless the table may leave the catalog: deleted, or its creation abandoned."""
    _check(TABLE_TRANSITIONS, f"Table {table.name}", table.status, None)


def may_remove(table: TableDef) -> bool:
    return (table.status, None) in TABLE_TRANSITIONS


def table_in_use(table: TableDef) -> ResourceInUse:
    """DynamoDB's refusal to change a table that is being created, updated or deleted."""
    doing = {
        TableStatus.CREATING: "created",
        TableStatus.UPDATING: "updated",
        TableStatus.DELETING: "deleted",
    }[table.status]
    return ResourceInUse(
        f"Attempt to change a resource which is still in use: Table is being {doing}: {table.name}"
    )


# Tags (TagResource, UntagResource, CreateTable's Tags) -----------------------------------------


# DynamoDB's refusal of more tags than a table holds, in a request or on the table: a
# ValidationException, not a LimitExceededException (as captured against the service:
# ack-api-quirks DDB-TABLE-107, 110).
TOO_MANY_TAGS = "Number of Tags exceed the current limit for the provided ResourceArn"


def _with_tags(
    tags: tuple[tuple[str, str], ...], added: Sequence[tuple[str, str]]
) -> tuple[tuple[str, str], ...]:
    """`tags` with `added`: a key already there takes its new value and keeps its place (a key
    is unique per table), a new key goes last. Refuses more than TAGS_PER_TABLE_MAX tags."""
    merged = dict(tags)
    for key, value in added:
        merged[key] = value
    if len(merged) > limits.TAGS_PER_TABLE_MAX:
        raise ValidationError(TOO_MANY_TAGS)
    return tuple(merged.items())


def _check_taggable(table: TableDef) -> None:
    # Tags change with the table's record; a table being created or deleted is in use.
    if table.status in (TableStatus.CREATING, TableStatus.DELETING):
        raise table_in_use(table)


def tagged(table: TableDef, added: Sequence[tuple[str, str]]) -> TableDef:
    """TagResource: the table with `added` tags (see `_with_tags`)."""
    _check_taggable(table)
    return _changed(table, tags=_with_tags(table.tags, added))


def untagged(table: TableDef, keys: Iterable[str]) -> TableDef:
    """UntagResource: the table without the tags of `keys`; a key it does not have is ignored."""
    _check_taggable(table)
    removed = set(keys)
    return _changed(table, tags=tuple(tag for tag in table.tags if tag[0] not in removed))


# Throughput (UpdateTable) ----------------------------------------------------------------------

_THROUGHPUT_MEMBERS = ("ReadCapacityUnits", "WriteCapacityUnits")


def utc_day(at: float) -> str:
    """The UTC day (YYYY-MM-DD) of an epoch time: DynamoDB counts decreases per UTC day."""
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d")


def decreases_today(changes: ThroughputChanges, now: float) -> int:
    """NumberOfDecreasesToday: decreases recorded on the UTC day of `now`."""
    return changes.decreases if changes.decreases_day == utc_day(now) else 0


def throughput_updated(
    table: TableDef,
    billing_mode: BillingMode | None,
    units: Mapping[str, int] | None,
    now: float,
    region: str,
    on_demand: Mapping[str, int] | None = None,
) -> TableDef | None:
    """The table UPDATING with UpdateTable's settings applied at `now`; None when nothing changes.

    `units` holds ReadCapacityUnits and WriteCapacityUnits when ProvisionedThroughput was given,
    `on_demand` the OnDemandThroughput members given (`on_demand_updated`); `region` names the
    Region in LimitExceeded's message. Raises DynamoDB's error for a request that cannot apply to
    this table. Re-sending BillingMode=PAY_PER_REQUEST, or the maximums it has, to an on-demand
    table changes nothing and is no error; sending the provisioned throughput a table already has
    is one.
    """
    if table.status != TableStatus.ACTIVE:
        raise table_in_use(table)
    current_mode = table.billing_mode
    mode = billing_mode or current_mode
    maximums = on_demand_updated(table.on_demand, mode, on_demand)
    current = table.throughput
    if mode == BillingMode.PAY_PER_REQUEST:
        if units is not None:
            raise ValidationError(
                INVALID_PARAMETERS
                + "Neither ReadCapacityUnits nor WriteCapacityUnits can be specified "
                "when BillingMode is PAY_PER_REQUEST"
            )
        if current_mode == BillingMode.PAY_PER_REQUEST and maximums == table.on_demand:
            return None
        throughput = Throughput()
    else:
        if units is None:
            raise ValidationError(
                INVALID_PARAMETERS
                + "ProvisionedThroughput must be specified when BillingMode is PROVISIONED"
            )
        throughput = Throughput(units["ReadCapacityUnits"], units["WriteCapacityUnits"])
        for member, value in zip(
            _THROUGHPUT_MEMBERS, (throughput.read, throughput.write), strict=True
        ):
            if value > limits.PROVISIONED_UNITS_PER_TABLE_MAX:
                raise LimitExceeded(
                    f"The requested {member}, {value}, is above the per table maximum "
                    f"for the account in {region}. Per table maximum: "
                    f"{limits.PROVISIONED_UNITS_PER_TABLE_MAX}."
                )
        if current_mode == BillingMode.PROVISIONED and throughput == current:
            raise ValidationError(
                "The provisioned throughput for the table will not change. The requested value "
                "equals the current value. Current ReadCapacityUnits provisioned for the table: "
                f"{current.read}. Requested ReadCapacityUnits: {throughput.read}. Current "
                f"WriteCapacityUnits provisioned for the table: {current.write}. Requested "
                f"WriteCapacityUnits: {throughput.write}. Refer to the Amazon DynamoDB "
                "Developer Guide for current limits and how to request higher limits."
            )
    changes = table.throughput_changes
    if mode == BillingMode.PAY_PER_REQUEST and current_mode == BillingMode.PROVISIONED:
        changes = replace(changes, pay_per_request_since=now)
    elif current_mode == BillingMode.PROVISIONED:
        if throughput.read > current.read or throughput.write > current.write:
            changes = replace(changes, last_increase=now)
        if throughput.read < current.read or throughput.write < current.write:
            changes = replace(
                changes,
                last_decrease=now,
                decreases=decreases_today(changes, now) + 1,
                decreases_day=utc_day(now),
            )
    _check(TABLE_TRANSITIONS, f"Table {table.name}", table.status, TableStatus.UPDATING)
    indexes = table.indexes
    if mode == BillingMode.PROVISIONED:
        # A switch to provisioned drops the global indexes' maximums too, as DynamoDB's does.
        indexes = tuple(replace(index, on_demand=OnDemandThroughput()) for index in indexes)
    return _changed(
        table,
        billing_mode=mode,
        throughput=throughput,
        throughput_version=table.throughput_version + 1,
        throughput_changes=changes,
        on_demand=maximums,
        indexes=indexes,
        status=TableStatus.UPDATING,
    )


def throughput_document(table: TableDef) -> dict[str, Any]:
    """What the nodes need of a table's throughput (`rpc.ops` THROUGHPUT)."""
    document: dict[str, Any] = {
        "billing_mode": table.billing_mode.value,
        "read": table.throughput.read,
        "write": table.throughput.write,
        "partition_count": len(table.partitions),
        "version": table.throughput_version,
    }
    if table.billing_mode == BillingMode.PAY_PER_REQUEST:
        if table.on_demand.max_read is not None:
            document["max_read"] = table.on_demand.max_read
        if table.on_demand.max_write is not None:
            document["max_write"] = table.on_demand.max_write
    return document


# Partitions ------------------------------------------------------------------------------------


def split(
    table: TableDef,
    partition_id: str,
    split_key: bytes,
    low_id: str,
    high_id: str,
    *,
    now: float,
) -> tuple[TableDef, PartitionDef, PartitionDef]:
    """The table with serving partition `partition_id` split at `split_key` into two children,
    made at `now` (their `created_ms`, at least a millisecond past their parent's).

    The children, `low_id` below the key and `high_id` from it, are at the parent's epoch + 1 on
    its node, name it as their parent and share its throughput share equally; the parent is
    RETIRED and kept (with the other retired partitions still some child's parent) for lineage.
    While the table has an enabled stream or global indexes every retired partition is kept
    (`keeps_lineage`) until no follower holds its log (`retired_dropped`).
    Returns (table, low child, high child).
    """
    if not table.serving:
        raise IllegalTransition(
            f"Table {table.name} is {table.status}: its partitions cannot split"
        )
    partitions, retired, low, high = _split_partitions(
        table.partitions,
        table.retired,
        partition_id,
        split_key,
        (low_id, high_id),
        keep_retired=keeps_lineage(table),
        rank=table.version + 1,
        created_ms=milliseconds(now),
    )
    # A table that grew past the partitions its warm throughput asked for (a split for heat or
    # size) serves more at once now; the splits of a pre-warm leave what was asked for as it was.
    warm = table.warm
    if warm is not None and len(partitions) > warm_partition_count(warm):
        warm = warm.widened(partitions_warm(len(partitions)))
    return _changed(table, partitions=partitions, retired=retired, warm=warm), low, high


def keeps_lineage(table: TableDef) -> bool:
    """Whether `table`'s splits keep every retired partition, not only a serving one's parent.

    Its followers learn the lineage from the catalog: an enabled stream reads each retired log
    as a shard, and the GSI replicator (one consumer per group of indexes) reads a parent's log
    to its END before it follows the children. Were a grandparent dropped once its children
    split in turn, a replicator that had not yet drained it (down, or behind) would follow the
    grandchildren at once and never apply the rest of the grandparent's log.
    """
    if table.stream is not None and table.stream.enabled:
        return True
    return any(i.is_global and i.status is not IndexStatus.DELETING for i in table.indexes)


def index_split(
    table: TableDef,
    index_id: str,
    partition_id: str,
    split_key: bytes,
    low_id: str,
    high_id: str,
    *,
    now: float,
) -> tuple[TableDef, PartitionDef, PartitionDef]:
    """The table with serving partition `partition_id` of its global index stored under
    `index_id` split at `split_key` into two children, as `split` splits a table's: children at
    the parent's epoch + 1 on its node sharing its share of the index's throughput, the parent
    RETIRED and kept while a child names it. An index being deleted does not split (its
    partitions are being dropped); one being created or backfilled does.
    Returns (table, low child, high child).
    """
    if not table.serving:
        raise IllegalTransition(
            f"Table {table.name} is {table.status}: its partitions cannot split"
        )
    index = next((i for i in table.indexes if i.table_id == index_id), None)
    if index is None:
        raise IllegalTransition(f"Table {table.name} has no global index stored as {index_id}")
    if index.status == IndexStatus.DELETING:
        raise IllegalTransition(f"Index {index.name} is DELETING: its partitions cannot split")
    partitions, retired, low, high = _split_partitions(
        index.partitions,
        index.retired,
        partition_id,
        split_key,
        (low_id, high_id),
        keep_retired=False,
        rank=table.version + 1,
        created_ms=milliseconds(now),
    )
    warm = index.warm
    if warm is not None and len(partitions) > warm_partition_count(warm):
        warm = warm.widened(partitions_warm(len(partitions)))
    indexes = tuple(
        replace(i, partitions=partitions, retired=retired, warm=warm)
        if i.table_id == index_id
        else i
        for i in table.indexes
    )
    return _changed(table, indexes=indexes), low, high


def _split_partitions(
    serving: tuple[PartitionDef, ...],
    retired: tuple[PartitionDef, ...],
    partition_id: str,
    split_key: bytes,
    child_ids: tuple[str, str],
    *,
    keep_retired: bool,
    rank: int,
    created_ms: int,
) -> tuple[tuple[PartitionDef, ...], tuple[PartitionDef, ...], PartitionDef, PartitionDef]:
    """A table's or an index's (serving, retired) partitions with `partition_id` split at
    `split_key`, and the (low, high) children, made at `rank` (the row version that records
    them) and `created_ms`, both always past their parent's (a clock behind the parent's maker's
    still orders the child after it); retired partitions no child names are dropped unless
    `keep_retired`."""
    parent = next((p for p in serving if p.id == partition_id), None)
    if parent is None:
        raise IllegalTransition(f"There is no serving partition {partition_id}")
    if not parent.holds(split_key) or bytes.fromhex(parent.start) == split_key:
        raise IllegalTransition(f"Key {split_key.hex()} is not inside partition {partition_id}")
    _check(PARTITION_TRANSITIONS, f"Partition {partition_id}", parent.state, PartitionState.RETIRED)
    if parent.replica_move is not None:
        # Its children would be made with a membership its group is changing.
        raise IllegalTransition(f"Partition {partition_id} splits once its replica move ends")
    epoch = parent.epoch + 1
    half = parent.share / 2
    low_id, high_id = child_ids
    child = replace(
        parent,
        epoch=epoch,
        parent=parent.id,
        share=half,
        rank=max(rank, parent.rank + 1),
        parent_rank=parent.rank,
        created_ms=max(created_ms, parent.created_ms + 1),
        parent_created_ms=parent.created_ms,
    )
    low = replace(child, id=low_id, end=split_key.hex())
    high = replace(child, id=high_id, start=split_key.hex())
    partitions: list[PartitionDef] = []
    for partition in serving:
        partitions.extend((low, high) if partition.id == partition_id else (partition,))
    kept = (*retired, replace(parent, state=PartitionState.RETIRED))
    if not keep_retired:
        parents = {partition.parent for partition in partitions}
        kept = tuple(partition for partition in kept if partition.id in parents)
    return tuple(partitions), kept, low, high


def moved(table: TableDef, partition_id: str, node: str) -> TableDef:
    """The table with serving partition `partition_id` moved to `node` at its epoch + 1: the
    same id, range, share and lineage, so its change log and its consumers carry on there."""
    if not table.serving:
        raise IllegalTransition(f"Table {table.name} is {table.status}: its partitions cannot move")
    return _changed(table, partitions=_moved_partitions(table.partitions, partition_id, node))


def index_partition_moved(table: TableDef, index_id: str, partition_id: str, node: str) -> TableDef:
    """The table with serving partition `partition_id` of its global index stored under
    `index_id` moved to `node` at its epoch + 1, as `moved` moves a table's: the same id, range,
    share and lineage. An index being deleted does not move (its partitions are being dropped)."""
    if not table.serving:
        raise IllegalTransition(f"Table {table.name} is {table.status}: its partitions cannot move")
    index = next((i for i in table.indexes if i.table_id == index_id), None)
    if index is None:
        raise IllegalTransition(f"Table {table.name} has no global index stored as {index_id}")
    if index.status == IndexStatus.DELETING:
        raise IllegalTransition(f"Index {index.name} is DELETING: its partitions cannot move")
    partitions = _moved_partitions(index.partitions, partition_id, node)
    indexes = tuple(
        replace(i, partitions=partitions) if i.table_id == index_id else i for i in table.indexes
    )
    return _changed(table, indexes=indexes)


def _moved_partitions(
    serving: tuple[PartitionDef, ...], partition_id: str, node: str
) -> tuple[PartitionDef, ...]:
    """A table's or an index's serving partitions with `partition_id` on `node`, epoch + 1."""
    current = next((p for p in serving if p.id == partition_id), None)
    if current is None:
        raise IllegalTransition(f"There is no serving partition {partition_id}")
    _check(
        PARTITION_TRANSITIONS, f"Partition {partition_id}", current.state, PartitionState.SERVING
    )
    if current.node == node:
        raise IllegalTransition(f"Partition {partition_id} is on node {node} already")
    after = replace(current, node=node, epoch=current.epoch + 1)
    return tuple(after if p.id == partition_id else p for p in serving)


def replica_partition_changed(
    table: TableDef,
    stored_id: str,
    partition_id: str,
    change: Callable[[PartitionDef], PartitionDef],
) -> TableDef:
    """The table with `change` made to serving partition `partition_id` of the table or of its
    global index stored under `stored_id`, at the same epoch: a replica move's steps
    (`core.machines.replica_move`), which change where its replicas are and nothing a request
    is addressed by."""
    if not table.serving:
        raise IllegalTransition(f"Table {table.name} is {table.status}: its replicas cannot move")

    def changed(serving: tuple[PartitionDef, ...]) -> tuple[PartitionDef, ...]:
        current = next((p for p in serving if p.id == partition_id), None)
        if current is None or current.state is not PartitionState.SERVING:
            raise IllegalTransition(f"There is no serving partition {partition_id}")
        after = change(current)
        return tuple(after if p.id == partition_id else p for p in serving)

    if stored_id == table.id:
        return _changed(table, partitions=changed(table.partitions))
    index = next((i for i in table.indexes if i.table_id == stored_id), None)
    if index is None or index.status == IndexStatus.DELETING:
        raise IllegalTransition(f"Table {table.name} has no global index stored as {stored_id}")
    indexes = tuple(
        replace(i, partitions=changed(i.partitions)) if i.table_id == stored_id else i
        for i in table.indexes
    )
    return _changed(table, indexes=indexes)


# Indexes ---------------------------------------------------------------------------------------


def index_moved(table: TableDef, index_name: str, status: IndexStatus | None) -> TableDef:
    """The table with index `index_name` moved to `status` (None: removed), as the GSI replicator
    and UpdateTable will move it."""
    current = next((index for index in table.indexes if index.name == index_name), None)
    if current is None:
        raise IllegalTransition(f"Table {table.name} has no index {index_name}")
    _check(INDEX_TRANSITIONS, f"Index {index_name}", current.status, status)
    indexes = tuple(
        index
        if index.name != index_name
        else (None if status is None else replace(index, status=status))
        for index in table.indexes
    )
    return _changed(table, indexes=tuple(index for index in indexes if index is not None))


def global_index(
    *,
    name: str,
    key_shape: KeyShape,
    projection: ProjectionType,
    non_key_attributes: Iterable[str],
    index_id: str,
    billing_mode: BillingMode,
    throughput: Throughput,
    owner: Callable[[str], str],
    on_demand: OnDemandThroughput = OnDemandThroughput(),
    warm: WarmThroughput | None = None,
    replicas_of: Callable[[str, int], tuple[str, ...]] | None = None,
) -> IndexDef:
    """A new global index, CREATING, stored under `index_id` in as many partitions as its
    throughput needs (as a table's: `initial_partition_count`) or its WarmThroughput (`warm`,
    `index_warm_created`) does, splitting the hash space of the index partition key evenly, each
    at epoch 1 on the node `owner` picks for its id, or on `replicas_of`'s for the index's id (as
    a table's: `created`); with its OnDemandThroughput (`index_on_demand_created`)."""
    count = initial_partition_count(billing_mode, throughput.read, throughput.write)
    if warm is not None:
        count = max(count, warm_partition_count(warm))
    partitions = _initial_partitions(index_id, count, owner, replicas_of, rank=0, created_ms=0)
    return IndexDef(
        name=name,
        key_shape=key_shape,
        projection=projection,
        status=IndexStatus.CREATING,
        non_key_attributes=tuple(non_key_attributes),
        table_id=index_id,
        partitions=partitions,
        throughput=throughput,
        on_demand=on_demand,
        warm=warm,
    )


# The name a node knows a global index's partitions by (for metrics, logs and the splitter,
# which reaches the catalog by the base table's name): table names never hold a "/".
_INDEX_NAME_SEPARATOR = INDEX_RESOURCE_SEPARATOR


def index_storage_name(table_name: str, index_name: str) -> str:
    """The name the nodes hold a global index's partitions under."""
    return f"{table_name}{_INDEX_NAME_SEPARATOR}{index_name}"


def base_table_name(storage_name: str) -> str:
    """The table a node's partition belongs to, from the name it holds it under: the table's
    own name, or the table of the global index named by `index_storage_name`."""
    return storage_name.split(_INDEX_NAME_SEPARATOR, 1)[0]


def global_indexes(table: TableDef) -> tuple[IndexDef, ...]:
    return tuple(index for index in table.indexes if index.is_global)


def index_throughput_document(table: TableDef, index: IndexDef) -> dict[str, Any]:
    """What the nodes need of a global index's throughput (`rpc.ops` THROUGHPUT): the index's
    own units (on demand: its OnDemandThroughput) over its own partitions, under the table's
    billing mode and throughput version."""
    document: dict[str, Any] = {
        "billing_mode": table.billing_mode.value,
        "read": index.throughput.read,
        "write": index.throughput.write,
        "partition_count": len(index.partitions),
        "version": table.throughput_version,
    }
    if table.billing_mode == BillingMode.PAY_PER_REQUEST:
        if index.on_demand.max_read is not None:
            document["max_read"] = index.on_demand.max_read
        if index.on_demand.max_write is not None:
            document["max_write"] = index.on_demand.max_write
    return document


def index_added(table: TableDef, index: IndexDef) -> TableDef:
    """The table with a new index, CREATING."""
    if any(existing.name == index.name for existing in table.indexes):
        raise IllegalTransition(f"Table {table.name} already has an index {index.name}")
    _check(INDEX_TRANSITIONS, f"Index {index.name}", None, index.status)
    return _changed(table, indexes=(*table.indexes, index))


# Online index management (UpdateTable GlobalSecondaryIndexUpdates) ------------------------------

ONLINE_INDEX_LIMIT = (
    "Subscriber limit exceeded: Only 1 online index can be created or deleted simultaneously "
    "per table"
)
INDEX_EXISTS = "Attempting to create an index which already exists"


def _index_in_progress(table: TableDef) -> bool:
    """Whether an index of the table is being created or deleted."""
    return any(
        index.status in (IndexStatus.CREATING, IndexStatus.BACKFILLING, IndexStatus.DELETING)
        for index in table.indexes
    )


def online_index_added(
    table: TableDef, index: IndexDef, attribute_definitions: Iterable[tuple[str, str]]
) -> TableDef:
    """The table with `index` added online (UpdateTable Create), CREATING until the replicator
    starts its backfill.

    DynamoDB's refusals: a table being created, updated or deleted is in use; a name any index of
    the table has is taken; only one index may be created or deleted at a time (seed 004 O-13,
    O-16, O-18), and at most 20 global indexes (O-01). The index's key attributes not yet in
    the table's AttributeDefinitions (`attribute_definitions`: name and type) join them.
    """
    if table.status != TableStatus.ACTIVE:
        raise table_in_use(table)
    if any(existing.name == index.name for existing in table.indexes):
        raise ValidationError(INDEX_EXISTS)
    if _index_in_progress(table):
        raise LimitExceeded(ONLINE_INDEX_LIMIT)
    if len(global_indexes(table)) >= limits.GSI_PER_TABLE_MAX:
        raise LimitExceeded(
            INVALID_PARAMETERS + "GlobalSecondaryIndex count exceeds the per-table limit of "
            f"{limits.GSI_PER_TABLE_MAX}"
        )
    defined = {name for name, _ in table.attribute_definitions}
    added = tuple(pair for pair in attribute_definitions if pair[0] not in defined)
    with_definitions = _changed(table, attribute_definitions=(*table.attribute_definitions, *added))
    return index_added(with_definitions, replace(index, online=True, status=IndexStatus.CREATING))


def index_deleting(table: TableDef, index_name: str) -> TableDef:
    """The table with its global index `index_name` DELETING (UpdateTable Delete).

    DynamoDB's refusals: the table must be ACTIVE; the name must be a global index's; another
    index being created or deleted, or this one before its backfill began, is a limit (seed 004
    O-16, O-18, O-32: an index can be deleted while it backfills).
    """
    if table.status != TableStatus.ACTIVE:
        raise table_in_use(table)
    index = next((i for i in table.indexes if i.name == index_name), None)
    if index is not None and not index.is_global:
        raise ValidationError(
            f"Cannot delete an index that is not a GlobalSecondaryIndex: {index_name}"
        )
    if index is not None and index.status == IndexStatus.DELETING:
        return table  # A deletion that stopped half-way (a node was down): finish it.
    if index is None:
        raise ResourceNotFound(
            f"Requested resource not found: Table: {table.name} index: {index_name} not found"
        )
    others = replace(table, indexes=tuple(i for i in table.indexes if i.name != index_name))
    if _index_in_progress(others) or index.status in (IndexStatus.CREATING, IndexStatus.DELETING):
        raise LimitExceeded(ONLINE_INDEX_LIMIT)
    return index_moved(table, index_name, IndexStatus.DELETING)


def index_throughput_updated(
    table: TableDef,
    updates: Mapping[str, Mapping[str, int] | None],
    region: str,
    *,
    on_demand: Mapping[str, Mapping[str, int]] | None = None,
    warm: Mapping[str, Mapping[str, int]] | None = None,
) -> TableDef:
    """The table with UpdateTable's GlobalSecondaryIndexUpdates Update applied to its global
    indexes (`updates`: index name -> ReadCapacityUnits and WriteCapacityUnits, None when absent;
    `on_demand` and `warm`: index name -> the OnDemandThroughput or WarmThroughput members given).
    New units or maximums make the table UPDATING with its throughput version moved on, so the
    nodes take them; a raised WarmThroughput alone leaves it ACTIVE, the index's partitions then
    split until they serve it (`index_warm_settled`); a request that changes nothing (maximums
    or a warm throughput the index has) returns the table as it is, which is no error.

    DynamoDB's refusals: the table must be ACTIVE; each name must be a global index's; on demand
    an index takes no ProvisionedThroughput and must be given OnDemandThroughput or
    WarmThroughput, provisioned it needs ProvisionedThroughput (or WarmThroughput) and takes no
    maximums; an index still being created before its backfill began, or being deleted, cannot
    change (seed 004 O-16, O-18: it can while it backfills); units equal to the current ones
    change nothing, which is an error as for a table; each value within the per-table maximum;
    the maximums' and warm throughput's rules as at creation, a lower warm throughput refused.
    """
    if table.status != TableStatus.ACTIVE:
        raise table_in_use(table)
    on_demand = on_demand or {}
    warm = warm or {}
    indexes = {index.name: index for index in table.indexes}
    changed: dict[str, IndexDef] = {}
    pushed = False  # Whether the nodes need new settings (units or maximums).
    for name, units in updates.items():
        index = indexes.get(name)
        if index is None or not index.is_global:
            raise ResourceNotFound(
                f"Requested resource not found: Table: {table.name} index: {name} not found"
            )
        maximums, warm_asked = on_demand.get(name), warm.get(name)
        if table.billing_mode == BillingMode.PAY_PER_REQUEST:
            if units is not None:
                raise ValidationError(
                    INVALID_PARAMETERS + "ProvisionedThroughput should not be specified for "
                    f"index: {name} when BillingMode is PAY_PER_REQUEST"
                )
            if not maximums and not warm_asked:
                raise ValidationError(
                    f"{INVALID_PARAMETERS}The only Updates for index: {name} when "
                    "TableThroughputMode is PAY_PER_REQUEST can be to OnDemandThroughput, "
                    "WarmThroughput"
                )
        else:
            # dynalab's guess at the words past the index's name: DynamoDB's UpdateTable words
            # for a table's maximums on a provisioned table.
            _on_demand_gate(
                maximums or {}, table.billing_mode, "the table BillingMode is PROVISIONED", name
            )
            if units is None and not warm_asked:
                raise ValidationError(
                    INVALID_PARAMETERS + f"ProvisionedThroughput is not specified for index: {name}"
                )
        if index.status in (IndexStatus.CREATING, IndexStatus.DELETING):
            doing = "created" if index.status == IndexStatus.CREATING else "deleted"
            raise ResourceInUse(
                f"Attempt to change a resource which is still in use: Index is being {doing}: "
                f"{name}"
            )
        updated = index
        if units is not None:
            updated = replace(
                updated, throughput=_index_units(name, index.throughput, units, region)
            )
            pushed = True
        if maximums:
            _on_demand_range(maximums, removable=True, index=name)
            merged = _on_demand_merged(index.on_demand, maximums)
            if merged != index.on_demand:
                updated = replace(updated, on_demand=merged)
                pushed = True
        if warm_asked:
            current = index_warm_throughput(index)
            wanted = _warm_requested(f"index {name}", warm_asked, current, region, created=False)
            if wanted != current:
                updated = replace(updated, warm=wanted)
        if updated != index:
            changed[name] = updated
    if not changed:
        return table
    indexes_after = tuple(changed.get(index.name, index) for index in table.indexes)
    if not pushed:
        return _changed(table, indexes=indexes_after)
    _check(TABLE_TRANSITIONS, f"Table {table.name}", table.status, TableStatus.UPDATING)
    return _changed(
        table,
        indexes=indexes_after,
        throughput_version=table.throughput_version + 1,
        status=TableStatus.UPDATING,
    )


def _index_units(
    name: str, current: Throughput, units: Mapping[str, int], region: str
) -> Throughput:
    """A global index's new ProvisionedThroughput, or DynamoDB's refusal: above the per-table
    maximum, or equal to the current units."""
    throughput = Throughput(units["ReadCapacityUnits"], units["WriteCapacityUnits"])
    for member, value in zip(_THROUGHPUT_MEMBERS, (throughput.read, throughput.write), strict=True):
        if value > limits.PROVISIONED_UNITS_PER_TABLE_MAX:
            raise LimitExceeded(
                f"The requested {member}, {value}, is above the per table maximum "
                f"for the account in {region}. Per table maximum: "
                f"{limits.PROVISIONED_UNITS_PER_TABLE_MAX}."
            )
    if throughput == current:
        raise ValidationError(
            f"The provisioned throughput for the index {name} will not change. The "
            "requested value equals the current value. Current ReadCapacityUnits provisioned "
            f"for the index: {current.read}. Requested ReadCapacityUnits: {throughput.read}. "
            "Current WriteCapacityUnits provisioned for the index: "
            f"{current.write}. Requested WriteCapacityUnits: {throughput.write}. Refer to "
            "the Amazon DynamoDB Developer Guide for current limits and how to request "
            "higher limits."
        )
    return throughput


def index_backfill_started(
    table: TableDef, index_id: str, items_estimate: int = 0, began_at: float = 0.0
) -> TableDef:
    """The table with its online index `index_id` BACKFILLING (the replicator began copying at
    `began_at`), `items_estimate` the table's item count then; unchanged if that index is not
    CREATING."""
    index = _online_index(table, index_id)
    if index is None or index.status != IndexStatus.CREATING:
        return table
    started = index_moved(table, index.name, IndexStatus.BACKFILLING)
    begun = replace(_index(started, index.name), items_estimate=items_estimate, began_at=began_at)
    return _with_index(started, begun)


def partition_backfill_begun(
    table: TableDef,
    index_id: str,
    partition_id: str,
    epoch: int,
    items_estimate: int,
    began_at: float = 0.0,
) -> TableDef:
    """The table with online index `index_id` BACKFILLING (`index_backfill_started`) and the copy
    of source partition `partition_id` begun under lease `epoch` (from no cursor), unless it has
    begun or is done; unchanged if the index is neither CREATING nor BACKFILLING (deleted
    meanwhile, or ACTIVE) or the partition is no longer serving."""
    started = index_backfill_started(table, index_id, items_estimate, began_at)
    index = _online_index(started, index_id)
    if (
        index is None
        or index.status != IndexStatus.BACKFILLING
        or partition_id in index.backfilled
        or index.backfill_of(partition_id) is not None
        or all(partition.id != partition_id for partition in started.partitions)
    ):
        return started
    entry = BackfillProgress(partition_id, None, 0, epoch)
    return _with_index(started, replace(index, progress=(*index.progress, entry)))


def backfill_progressed(
    table: TableDef,
    index_id: str,
    partition_id: str,
    cursor: Mapping[str, Any],
    items: int,
    epoch: int,
) -> TableDef:
    """The table with the copy of source partition `partition_id` into online index `index_id`
    at `cursor`, `items` copied, under lease `epoch`. Unchanged if the index is not BACKFILLING,
    the partition's copy has not begun or is done, or was recorded under a later lease (a
    replicator that lost its lease cannot move it back). The items never go down: a copy resumed
    from a cursor read before a late write of the lease's previous holder counts at least what
    that holder recorded."""
    index = _online_index(table, index_id)
    if index is None or index.status != IndexStatus.BACKFILLING:
        return table
    entry = index.backfill_of(partition_id)
    if entry is None or partition_id in index.backfilled or entry.epoch > epoch:
        return table
    moved = BackfillProgress(partition_id, dict(cursor), max(items, entry.items), epoch)
    if moved == entry:
        return table
    return _with_index(table, replace(index, progress=_replaced(index.progress, moved)))


def partition_backfilled(
    table: TableDef, index_id: str, partition_id: str, items: int = 0, epoch: int = 0
) -> TableDef:
    """The table with source partition `partition_id` copied into online index `index_id`
    (`items` copied in all, under lease `epoch`); the index ACTIVE once every serving partition
    of the table is, its progress then dropped. Unchanged if the index is not backfilling
    (deleted meanwhile), already has the partition, or its copy was recorded under a later
    lease."""
    index = _online_index(table, index_id)
    if index is None or index.status != IndexStatus.BACKFILLING:
        return table
    entry = index.backfill_of(partition_id)
    if partition_id in index.backfilled or (entry is not None and entry.epoch > epoch):
        return table
    done = (*index.backfilled, partition_id)
    copied = max(items, 0 if entry is None else entry.items)
    progress = _replaced(index.progress, BackfillProgress(partition_id, None, copied, epoch))
    status: IndexStatus = index.status
    if {partition.id for partition in table.partitions} <= set(done):
        _check(INDEX_TRANSITIONS, f"Index {index.name}", status, IndexStatus.ACTIVE)
        status = IndexStatus.ACTIVE
        progress, estimate, began_at = (), 0, 0.0
    else:
        estimate, began_at = index.items_estimate, index.began_at
    changed = replace(
        index,
        backfilled=done,
        status=status,
        progress=progress,
        items_estimate=estimate,
        began_at=began_at,
    )
    return _with_index(table, changed)


def _replaced(
    progress: tuple[BackfillProgress, ...], entry: BackfillProgress
) -> tuple[BackfillProgress, ...]:
    """`progress` with `entry` in place of its partition's (or added last)."""
    if all(p.partition_id != entry.partition_id for p in progress):
        return (*progress, entry)
    return tuple(entry if p.partition_id == entry.partition_id else p for p in progress)


def _index(table: TableDef, name: str) -> IndexDef:
    return next(index for index in table.indexes if index.name == name)


def _with_index(table: TableDef, changed: IndexDef) -> TableDef:
    """The table with `changed` in place of its index of that name."""
    return _changed(
        table, indexes=tuple(changed if i.name == changed.name else i for i in table.indexes)
    )


def _online_index(table: TableDef, index_id: str) -> IndexDef | None:
    return next((i for i in table.indexes if i.online and i.table_id == index_id), None)


# Time To Live (UpdateTimeToLive) ---------------------------------------------------------------

TTL_ALREADY_ENABLED = "TimeToLive is already enabled"
TTL_ALREADY_DISABLED = "TimeToLive is already disabled"
TTL_CHANGED_RECENTLY = "Time to live has been modified multiple times within a fixed interval"


def ttl_updated(
    table: TableDef, enabled: bool, attribute: str, now: float, interval_seconds: float
) -> TableDef:
    """The table with UpdateTimeToLive's specification recorded at `now`, ENABLING or DISABLING
    until every node has taken it (`ttl_settled`).

    DynamoDB's refusals, in its order: enabling what is enabled ("already enabled", or, for
    another attribute, which attribute is active), disabling what is not enabled, disabling
    another attribute than the active one, then any change within `interval_seconds` (one hour,
    `limits.TTL_CHANGE_INTERVAL_SECONDS`) of the last one.
    """
    if table.status in (TableStatus.CREATING, TableStatus.DELETING):
        raise table_in_use(table)
    current = table.ttl
    active = current is not None and current.enabled
    if active and current is not None and current.attribute != attribute:
        raise ValidationError(
            "TimeToLive is active on a different AttributeName: current AttributeName is "
            f"{current.attribute}"
        )
    if enabled and active:
        raise ValidationError(TTL_ALREADY_ENABLED)
    if not enabled and not active:
        raise ValidationError(TTL_ALREADY_DISABLED)
    if (
        current is not None
        and current.changed is not None
        and now - current.changed < interval_seconds
    ):
        raise ValidationError(TTL_CHANGED_RECENTLY)
    ttl = TtlDef(
        attribute=attribute,
        enabled=enabled,
        settled=False,
        changed=now,
        version=1 if current is None else current.version + 1,
    )
    _check(TTL_TRANSITIONS, f"TTL of {table.name}", _ttl_status(current), ttl.status)
    return _changed(table, ttl=ttl)


def ttl_settled(table: TableDef, version: int) -> TableDef:
    """The table with its TTL change `version` taken by every node: ENABLED or DISABLED. A table
    whose TTL has changed again since (another version) is returned as it is."""
    current = table.ttl
    if current is None or current.version != version or current.settled:
        return table
    ttl = replace(current, settled=True)
    _check(TTL_TRANSITIONS, f"TTL of {table.name}", current.status, ttl.status)
    return _changed(table, ttl=ttl)


def ttl_document(table: TableDef) -> dict[str, Any] | None:
    """What the nodes need of a table's TTL setting (`rpc.ops` TTL): None when it never had one.
    A node indexes and sweeps the attribute while `enabled`."""
    ttl = table.ttl
    if ttl is None:
        return None
    return {"attribute": ttl.attribute, "enabled": ttl.enabled, "version": ttl.version}


def _ttl_status(ttl: TtlDef | None) -> TtlStatus | None:
    return None if ttl is None else ttl.status


# DynamoDB Streams (StreamSpecification) ---------------------------------------------------------


def stream_label(now: float, previous: StreamDef | None) -> str:
    """The label of a stream enabled at `now`: its UTC time to the millisecond, as DynamoDB's
    StreamLabel, one millisecond past the previous stream's when they would fall on the same one
    (a label names one stream of the table for good)."""
    millis = int(now * 1000)
    if previous is not None:
        millis = max(millis, _label_millis(previous.label) + 1)
    at = datetime.fromtimestamp(millis / 1000, UTC)
    return at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{millis % 1000:03d}"


def _label_millis(label: str) -> int:
    at = datetime.strptime(label, "%Y-%m-%dT%H:%M:%S.%f").replace(tzinfo=UTC)
    return round(at.timestamp() * 1000)


def stream_enabled(table: TableDef, view_type: StreamViewType, label: str, now: float) -> TableDef:
    """UpdateTable with StreamEnabled true: the table with a new stream `label` (see
    `stream_label`), enabled at `now`. Refuses a table whose stream is already enabled, whatever
    the view type asked (DynamoDB changes a view type only by disabling and enabling again)."""
    _check_stream_change(table)
    current = table.stream
    if current is not None and current.enabled:
        raise ValidationError(f"Table already has an enabled stream: TableName: {table.name}")
    _check(STREAM_TRANSITIONS, f"Stream of {table.name}", _stream_state(current), True)
    previous = table.previous_streams if current is None else (*table.previous_streams, current)
    return _changed(table, stream=StreamDef(label, view_type, now), previous_streams=previous)


def stream_disabled(table: TableDef, shards: Iterable[ClosedShard], now: float) -> TableDef:
    """UpdateTable with StreamEnabled false: the table's stream disabled at `now` (kept as the
    latest) with its `shards` closed. Refused with StaleEpoch when `shards` are not the table's
    partitions, retired and serving (a split came between reading their ends and this change):
    the caller reads them again."""
    current = stream_to_disable(table)
    closed = tuple(shards)
    partitions = {(p.id, p.epoch, p.state) for p in (*table.retired, *table.partitions)}
    if {(s.partition.id, s.partition.epoch, s.partition.state) for s in closed} != partitions:
        raise StaleEpoch(f"The partitions of {table.name} changed while its stream was disabled")
    return _changed(table, stream=replace(current, enabled=False, disabled=now, shards=closed))


def lineage_only(table: TableDef) -> tuple[PartitionDef, ...]:
    """The retired partitions kept only for the table's followers: no serving partition names
    them as its parent (`split` keeps them while `keeps_lineage`)."""
    parents = {partition.parent for partition in table.partitions}
    return tuple(partition for partition in table.retired if partition.id not in parents)


def retired_dropped(table: TableDef, partition_ids: Iterable[str]) -> TableDef:
    """The table without the retired partitions `partition_ids` whose logs no follower holds any
    more (a serving partition's parent stays, for lineage)."""
    gone = set(partition_ids) & {partition.id for partition in lineage_only(table)}
    if not gone:
        return table
    return _changed(table, retired=tuple(p for p in table.retired if p.id not in gone))


def stream_to_disable(table: TableDef) -> StreamDef:
    """The stream UpdateTable with StreamEnabled false disables; DynamoDB's refusal if none."""
    _check_stream_change(table)
    current = table.stream
    if current is None or not current.enabled:
        # DynamoDB's words, for a table that never had a stream and one whose stream is disabled.
        raise ValidationError(f"Table has no stream to disable: TableName: {table.name}")
    _check(STREAM_TRANSITIONS, f"Stream of {table.name}", True, False)
    return current


def streams_expired(table: TableDef, now: float, retention: float) -> tuple[StreamDef, ...]:
    """The table's disabled streams no longer readable at `now` (disabled for longer than
    `retention`) and not yet let go: their consumers can be unregistered, then `streams_dropped`
    forgets them."""
    latest = table.stream
    candidates = (*table.previous_streams, *(() if latest is None else (latest,)))
    return tuple(s for s in candidates if not s.readable(now, retention) and s.shards)


def streams_dropped(table: TableDef, labels: Iterable[str]) -> TableDef:
    """The table without the previous streams labelled `labels`; the latest stream, if one of
    them, stays (DescribeTable still names it) without its shards."""
    gone = set(labels)
    kept = tuple(s for s in table.previous_streams if s.label not in gone)
    latest = table.stream
    if latest is not None and latest.label in gone:
        latest = replace(latest, shards=())
    if kept == table.previous_streams and latest == table.stream:
        return table
    return _changed(table, previous_streams=kept, stream=latest)


def _check_stream_change(table: TableDef) -> None:
    if table.status != TableStatus.ACTIVE:
        raise table_in_use(table)


def _stream_state(stream: StreamDef | None) -> bool | None:
    return None if stream is None else stream.enabled


# The bootstrap record --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CatalogLocation:
    """Where the catalog's system table lives: the node holding its partition (by id, and the
    address it was reached at when the record was written) and the partition's id; and, when
    the catalog is a replication group, its replicas (node id and address each, its first leader
    first: `node` and `address` are that one's).

    Every node holds a copy in its bootstrap partition, so that a process finds the catalog by
    asking any node, never by hashing over its own list of nodes; the addresses let a process
    whose list lacks a node reach it all the same. The GSI replicators' leases table lives beside
    the catalog, on the same nodes.
    """

    node: str
    address: str = ""
    partition: str = CATALOG_PARTITION_ID
    # Empty: `node`'s copy alone (replication factor 1).
    replicas: tuple[tuple[str, str], ...] = ()

    @property
    def nodes(self) -> tuple[str, ...]:
        """Every node holding a replica of the catalog."""
        return tuple(node for node, _ in self.replicas) or (self.node,)

    def address_of(self, node: str) -> str:
        """The address recorded for `node` (one of `nodes`)."""
        return dict(self.replicas).get(node, self.address if node == self.node else "")

    def partition_of(self, partition_id: str) -> PartitionDef:
        """The descriptor of a system partition placed where the catalog is (the catalog's own,
        or the leases table's beside it): one unbounded range that never splits or moves."""
        replicas = tuple(node for node, _ in self.replicas)
        return PartitionDef(partition_id, "", None, 1, self.node, replicas=replicas)

    def describe(self) -> str:
        """The catalog's node, or its replicas' nodes, for messages."""
        if not self.replicas:
            return self.node
        return "replicas on " + ", ".join(self.nodes)

    def to_item(self) -> dict[str, Any]:
        """The bootstrap record as an item of the bootstrap table (DynamoDB JSON)."""
        item: dict[str, Any] = {
            "name": {"S": BOOTSTRAP_RECORD_NAME},
            "catalog_node": {"S": self.node},
            "catalog_address": {"S": self.address},
            "catalog_partition": {"S": self.partition},
        }
        if self.replicas:
            item["catalog_replicas"] = {
                "L": [
                    {"M": {"node": {"S": node}, "address": {"S": address}}}
                    for node, address in self.replicas
                ]
            }
        return item

    @classmethod
    def from_item(cls, item: Mapping[str, Any]) -> CatalogLocation:
        replicas = tuple(
            (replica["M"]["node"]["S"], replica["M"]["address"]["S"])
            for replica in item.get("catalog_replicas", {}).get("L", ())
        )
        return cls(
            node=item["catalog_node"]["S"],
            address=item["catalog_address"]["S"],
            partition=item["catalog_partition"]["S"],
            replicas=replicas,
        )


class CatalogDisagreement(ServiceUnavailable):
    """Nodes hold different bootstrap records: routers bootstrapping a new cluster at once from
    different node lists, one of them still correcting its first writes."""


def agreed_location(found: Mapping[str, CatalogLocation | None]) -> CatalogLocation | None:
    """The bootstrap record the nodes that hold one agree on (by node id; None: the node holds
    none); None when no node holds one. Raises CatalogDisagreement when they hold different ones.
    """
    held = {location for location in found.values() if location is not None}
    if len(held) > 1:
        listed = ", ".join(f"{node}: {location}" for node, location in sorted(found.items()))
        raise CatalogDisagreement(f"Storage nodes disagree on where the catalog lives ({listed})")
    return next(iter(held), None)
