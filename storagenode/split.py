"""Splitting a partition on its owner node: the decision, the catalog record and the install.

The rules are `core.splits` and the states `core.machines.split` (the split machine, whose
table its step consults); this module does their IO. `Splitter` (one per node, on the event
loop) splits a partition when asked (the `split_partition` control op, which the router's admin
endpoint sends) or when its size passes `split_bytes` (checked every `SPLIT_CHECK_SECONDS`), one
split at a time, by running the split machine through the one driver (`rpc.machines.Driver`).
The machine's record is kept in the parent partition's metadata (`split_record`, the
partition's `split` field) before each effect; its effects are:

1. **pin**: an internal write (`split_pin`, `pin` below) makes, on the writer thread between two
   commits, iterators over the partition's items and local index entries: each pins the
   committed state of that moment, whose change-log seq is the partition's committed last seq;
2. **plan**: read the pinned keys and item sizes on an executor thread and choose the key
   that halves its bytes (`core.splits.halving_key`), or check the key asked for, counting the
   low child's items, bytes and index entries as of the pinned seq on the way;
3. **record**: change the table's catalog row by compare-and-set on its version
   (`core.splits.recorded`) through the one catalog client, reading the catalog's location from
   this node's own bootstrap record; a refusal (the catalog no longer has the parent as planned)
   abandons the split, and a failure is **decided** by reading the row back once no call of it
   can still be applied;
4. **count**: carry the low child's counts forward over the change-log records committed since
   the pin, still off the writer thread: the plan reads them as they commit, every
   SPLIT_FOLLOW_ROWS_MAX rows it walks, so retention cannot trim them first (`Following`,
   `core.splits.LogSince`), and `catch_up` applies their net effect below the key (after a
   restart, the follower gone, over the committed log since the pin, or not at all: a walk);
5. **install**: one internal write through the group commit (`split_install`, `install` below)
   creates both children with their counters and retires the parent with an END record, in one
   batch (which takes the parent's metadata and so the record with it); a write naming the
   parent's epoch that reaches the node after it gets StaleEpoch.

A global index's partitions split the same way (`is_index_partition`: the node holds them under
the name `core.catalog.index_storage_name` gives, so the splitter reaches the catalog by the
table's name and records the children in the index's entry). Their install also hands each
child the parent's per-source rows (`_carry_index_sources`: the replicator's applied seq and
lease fence), and counts the low child by the walk, as they keep no change log.

Recovery is "load the record, step RESTARTED": every SPLIT_CHECK_SECONDS (and so at start) the
splitter drives each record its partitions hold (`recover`). Before the catalog names the
children the split is forgotten; after, it is installed. Crash points are the driver's: between
any two effects (`split:<state>` for `DYNALAB_HOLD_AT` in real-process tests); nothing here
kills its own process.

The install runs on the writer thread, where no write commits meanwhile: it carries the low
child's counts over the few records committed since the count (the high child gets the rest),
so the node's writes pause for those records, not for a walk of half the partition's keys. An
install without counts or whose records were trimmed meanwhile counts the low child by that walk
instead: slow, but exact.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import orjson

from core import catalog, heat, limits, machines, splits
from core.catalog import CatalogLocation, PartitionDef, TableDef
from core.errors import (
    DynamoError,
    NotPartitionLeader,
    ServiceUnavailable,
    StaleEpoch,
)
from core.keycodec import HASH_BYTES, decode_key_value, successor
from core.machines import Effect, Event
from core.machines import split as split_machine
from core.machines.split import SplitRecord, SplitState
from rpc import ops
from rpc.background import BackgroundTask
from rpc.catalog_client import CatalogClient
from rpc.machines import CrashPoints, Driver, Handler, HoldPoints
from rpc.transport import NodeTransport, Transports
from storagenode import changefeed, transactions
from storagenode.layout import Family, item_size_of, seq_bytes
from storagenode.partition import Partition
from storagenode.writes import NodeState, PartitionRef, WriteContext

if TYPE_CHECKING:
    from storagenode.store import NodeStore, WriteBatchView

logger = logging.getLogger(__name__)

SPLIT_INSTALL = "split_install"  # The internal write that installs a split (never on the wire).
SPLIT_PIN = "split_pin"  # The internal write that pins a partition's committed state (idem).
_SYSTEM_TABLES = catalog.SYSTEM_TABLE_IDS
_SYSTEM_EPOCH = 1  # The system tables' one partition never splits.
_HEAT_KINDS = ("write", "read")  # Write heat first: a partition hot both ways splits for writes.
SPLIT_RECORD = "split_record"  # The internal write that keeps a split's record (idem).


@dataclasses.dataclass(slots=True)
class RecordPayload:
    """split_record: keep the split machine's `record` in the metadata of partition
    `partition_id` at `epoch` (None: the split has ended). Reply: {}."""

    table_id: str
    partition_id: str
    epoch: int
    record: dict[str, Any] | None

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> RecordPayload:
        return cls(body["table_id"], body["partition_id"], body["epoch"], body["record"])

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def keep_record(
    group: WriteContext, target: ops.Target | None, payload: RecordPayload
) -> dict[str, Any]:
    """Keep a split's record in its parent's metadata, in the group's batch; a parent gone (or
    at another epoch) keeps nothing, as an ended split needs nothing kept."""
    ref = (payload.table_id, payload.partition_id)
    partition = group.lookup(ref)
    if partition is not None and partition.epoch == payload.epoch:
        staged = group.stage(ref)
        staged.split = payload.record
    return {}


@dataclasses.dataclass(slots=True)
class InstallPayload:
    """split_install: create the recorded children of a partition and retire it, in one batch.

    Reply: {"installed": bool} (false: the children were there already, or the parent is gone).
    """

    table_id: str
    parent_id: str
    parent_epoch: int
    children: list[dict[str, Any]]  # The low and the high child, as the catalog records them.
    # The low child's counters as of a change-log seq (`core.splits.RangeCounts`); None: walk.
    low: dict[str, Any] | None = None

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> InstallPayload:
        return cls(
            body["table_id"],
            body["parent_id"],
            body["parent_epoch"],
            body["children"],
            body.get("low"),
        )

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(slots=True)
class PinPayload:
    """split_pin: pin the committed state of a partition at `epoch` for a split to read.

    Reply: {"pinned": Pinned} (an object, not JSON: the op never leaves the node).
    """

    table_id: str
    partition_id: str
    epoch: int

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> PinPayload:
        return cls(body["table_id"], body["partition_id"], body["epoch"])

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(slots=True)
class Pinned:
    """A partition's committed metadata and iterators over its items and local index entries,
    all made on the writer thread between two commits: one state, that of `partition.last_seq`."""

    partition: Partition
    items: Iterator[tuple[bytes, bytes]]
    entries: dict[str, Iterator[tuple[bytes, bytes]]]


def pin(node: NodeState, payload: PinPayload) -> dict[str, Any]:
    """Pin the committed state of a partition (run in a group, on the writer thread: no commit
    is under way, and `node.partitions` is what the store holds)."""
    partition = node.partitions.get((payload.table_id, payload.partition_id))
    if partition is None or partition.epoch != payload.epoch:
        raise StaleEpoch(
            f"Partition {payload.partition_id} at epoch {payload.epoch} is not on this node"
        )
    lo, hi = _bounds(partition.item_prefix, partition)
    entries = {
        name: node.store.walk(Family.INDEX_ENTRIES, *_bounds(prefix, partition), forward=True)
        for name, (prefix, _) in partition.index_layout.items()
    }
    items = node.store.walk(Family.ITEMS, lo, hi, forward=True)
    return {"pinned": Pinned(partition, items, entries)}


def install(
    group: WriteContext, target: ops.Target | None, payload: InstallPayload
) -> dict[str, Any]:
    """Create the children and retire the parent with an END naming them, in the group's batch.

    Idempotent: children already here (a retried install) change nothing. The parent must not
    have been written earlier in the same group, since the children's counters are read from the
    committed store; such an install is refused as ServiceUnavailable and the splitter retries.
    """
    low_def, high_def = (PartitionDef.from_json(child) for child in payload.children)
    ref = (payload.table_id, payload.parent_id)
    if all(group.lookup((payload.table_id, c.id)) is not None for c in (low_def, high_def)):
        return {"installed": False}
    parent = group.lookup(ref)
    if parent is None:
        return {"installed": False}
    if parent.epoch != payload.parent_epoch:
        raise StaleEpoch(
            f"Partition {parent.partition_id} is at epoch {parent.epoch}, "
            f"the split at {payload.parent_epoch}"
        )
    if group.changed(ref):
        raise ServiceUnavailable(f"Partition {parent.partition_id} was written in this group")
    split_key = bytes.fromhex(high_def.start)
    low = _child(parent, low_def)
    high = _child(parent, high_def)
    counts = None if payload.low is None else splits.RangeCounts.from_json(payload.low)
    if counts is not None:
        counts = _carried(group.node.store, parent, counts, split_key, parent.last_seq)
    if counts is None:
        _count(group.node, parent, low)
    else:
        low.item_count, low.size_bytes = counts.items, counts.bytes
        low.index_stats = {name: list(pair) for name, pair in counts.indexes.items()}
    high.item_count = parent.item_count - low.item_count
    high.size_bytes = parent.size_bytes - low.size_bytes
    high.index_stats = {
        name: [counts[0] - low.index_stats[name][0], counts[1] - low.index_stats[name][1]]
        for name, counts in parent.index_stats.items()
    }
    low.ttl_deleted = parent.ttl_deleted  # The table's count is the sum: it stays whole.
    cursor = None if parent.ttl_backfill is None else bytes.fromhex(parent.ttl_backfill)
    low.ttl_backfill = None if cursor is None or cursor >= split_key else cursor.hex()
    high.ttl_backfill = None if cursor is None else max(cursor, split_key).hex()
    consumers = dict(group.feed.consumers(ref))
    for child in (low, high):
        child_ref = (child.table_id, child.partition_id)
        group.put_partition(child_ref, child)
        for consumer in consumers:
            group.feed.register(child_ref, consumer, 0, changefeed.LogBounds(1, 0))
    if is_index_partition(parent):
        _carry_index_sources(group.batch, group.node.store, parent, (low, high))
    if group.node.replicated(ref):
        # Its transactions' rows are kept under its own id: the children take them over.
        transactions.carry_to_children(group, parent, (low, high))
    group.put_partition(ref, None)
    group.note_split(
        (ref, [((c.table_id, c.partition_id), c.table_name, c.throughput) for c in (low, high)])
    )
    children = [low.partition_id, high.partition_id]
    if not consumers:
        group.feed.forget(ref)
        return {"installed": True}
    end_seq = parent.last_seq + 1
    record = orjson.dumps(changefeed.end_record(end_seq, children))
    group.batch.put(Family.CHANGE_LOG, parent.log_prefix + seq_bytes(end_seq), record)
    group.feed.retire(changefeed.RetiredLog(*ref, parent.first_seq, end_seq, tuple(children)))
    group.feed.trim_retired(ref, group.node.change_log_records_max)
    return {"installed": True}


def is_index_partition(partition: Partition) -> bool:
    """Whether a partition holds a global index's entries rather than a table's items."""
    return catalog.base_table_name(partition.table_name) != partition.table_name


def _carry_index_sources(
    batch: WriteBatchView, store: NodeStore, parent: Partition, children: Iterable[Partition]
) -> None:
    """Give each child of a global index partition the parent's per-source rows (the seq of the
    last change applied from each base partition and the replicator lease epoch it fences at),
    and drop the parent's: a replay after the split is skipped on a child as it was on the
    parent, and a write of a replicator that lost its lease is refused there too."""
    lo = parent.log_prefix
    hi = successor(lo)
    assert hi is not None, "a partition's log prefix is never all 0xff"
    keys = {key for key, _ in store.walk(Family.INDEX_SOURCES, lo, hi, forward=True)}
    keys.update(batch.written(Family.INDEX_SOURCES, lo, hi))
    rows = [(key[len(lo) :], batch.get(Family.INDEX_SOURCES, key)) for key in sorted(keys)]
    for child in children:
        for source, value in rows:
            if value is not None:
                batch.put(Family.INDEX_SOURCES, child.log_prefix + source, value)
    batch.delete_range(Family.INDEX_SOURCES, lo, hi)


def _child(parent: Partition, child: PartitionDef) -> Partition:
    """A child's metadata: the parent's table, settings and indexes, the child's range and
    epoch, a log of its own, and its share of the parent's throughput."""
    return Partition(
        table_id=parent.table_id,
        table_name=parent.table_name,
        partition_id=child.id,
        start=bytes.fromhex(child.start),
        end=None if child.end is None else bytes.fromhex(child.end),
        epoch=child.epoch,
        key_shape=parent.key_shape,
        throughput=splits.child_throughput(parent.throughput, child.share),
        ttl=parent.ttl,
        indexes=parent.indexes,
        # The catalog's: the parent's group as it was when the split was recorded (the
        # replicas may have moved since the parent was made here).
        replicas=child.replicas or parent.replicas,
    )


def _carried(
    store: NodeStore, parent: Partition, counts: splits.RangeCounts, below: bytes, last_seq: int
) -> splits.RangeCounts | None:
    """`counts` (of the parent's keys below `below`) carried over its committed change-log
    records up to `last_seq`; None when some were trimmed meanwhile (the caller walks)."""
    if counts.seq > last_seq:
        return None  # Not counts of this partition's log as the store holds it.
    since = splits.LogSince(counts.seq, parent.key_shape, parent.local_indexes)
    try:
        _absorb(store, parent, since, last_seq)
    except splits.GapInLog as gap:
        logger.warning("split of %s counts by a walk: %s", parent.partition_id, gap)
        return None
    return since.counts(counts, below)


def _absorb(store: NodeStore, parent: Partition, since: splits.LogSince, last_seq: int) -> None:
    """Read the parent's committed records after `since.seq` up to `last_seq` into `since`;
    GapInLog when some were trimmed before they were read."""
    since.absorb(_records(store, parent, since.seq, last_seq))
    if since.seq != last_seq:
        raise splits.GapInLog(f"Change-log records {since.seq + 1}-{last_seq} are missing")


class Following:
    """The parent's change log as a split reads it while it plans: every record committed since
    the pin, read before retention can trim it (`core.splits.LogSince`)."""

    def __init__(self, node: NodeState, pinned: Pinned) -> None:
        parent = pinned.partition
        self.node = node
        self.parent = parent
        self.since = splits.LogSince(parent.last_seq, parent.key_shape, parent.local_indexes)
        self.gap: str | None = None

    def follow(self) -> None:
        """Read what committed since the last call (an executor's job: committed records never
        change). A gap (records trimmed first) is kept: the install then walks."""
        if self.gap is not None:
            return
        current = self.node.partitions.get((self.parent.table_id, self.parent.partition_id))
        if current is None or current.epoch != self.parent.epoch:
            return  # Split or dropped meanwhile: the install refuses.
        try:
            _absorb(self.node.store, current, self.since, current.last_seq)
        except splits.GapInLog as gap:
            self.gap = str(gap)


def _records(
    store: NodeStore, partition: Partition, after_seq: int, last_seq: int
) -> Iterable[dict[str, Any]]:
    """The partition's committed change-log records after `after_seq` up to `last_seq`."""
    lo = partition.log_prefix + seq_bytes(after_seq + 1)
    hi = partition.log_prefix + seq_bytes(last_seq + 1)
    for _, value in store.walk(Family.CHANGE_LOG, lo, hi, forward=True):
        record: dict[str, Any] = orjson.loads(value)
        yield record


def _count(node: NodeState, parent: Partition, child: Partition) -> None:
    """Count a child's items, bytes and local index entries from the committed store."""
    lo, hi = _bounds(parent.item_prefix, child)
    for _, value in node.store.walk(Family.ITEMS, lo, hi, forward=True):
        child.item_count += 1
        child.size_bytes += item_size_of(value)
    stats: dict[str, list[int]] = {}
    for name, (prefix, _) in parent.index_layout.items():
        counts = stats.setdefault(name, [0, 0])
        lo, hi = _bounds(prefix, child)
        for _, value in node.store.walk(Family.INDEX_ENTRIES, lo, hi, forward=True):
            counts[0] += 1
            counts[1] += item_size_of(value) + limits.INDEX_ENTRY_OVERHEAD_BYTES
    child.index_stats = stats


def _bounds(prefix: bytes, child: Partition) -> tuple[bytes, bytes]:
    """The keys under `prefix` of the child's range (its end, or the prefix's end)."""
    if child.end is not None:
        return prefix + child.start, prefix + child.end
    end = successor(prefix)
    assert end is not None, "table ids and index prefixes are never all 0xff"
    return prefix + child.start, end


def collection_finder(partition: Partition) -> Callable[[bytes], bytes]:
    """The function giving a storage key's item collection prefix (hash and partition key: every
    partition key attribute of a multi-attribute global index key)."""
    kinds = [attribute.type for attribute in partition.key_shape.partition_attributes]

    def collection_of(storage_key: bytes) -> bytes:
        if len(storage_key) <= HASH_BYTES:
            return storage_key
        end = HASH_BYTES
        try:
            for kind in kinds:
                _, end = decode_key_value(storage_key, end, kind)
        except DynamoError:
            return storage_key  # Not a whole partition key: a key between collections.
        return storage_key[:end]

    return collection_of


def plan(
    pinned: Pinned, split_key: bytes | None, follow: Callable[[], None]
) -> tuple[bytes, splits.RangeCounts]:
    """The key to split the pinned partition at (`split_key` checked, or the one halving its
    bytes) and the low child's counts as of the pinned seq.

    Reads the pinned iterators (an executor's job): the items up to the key, and each local
    index's entries below it, calling `follow` every SPLIT_FOLLOW_ROWS_MAX of them (the split
    reads the writes committed meanwhile: `Following`).
    """
    partition = pinned.partition
    collection_of = collection_finder(partition)
    inside = not partition.local_indexes
    skip = len(partition.item_prefix)
    rows = ((key[skip:], item_size_of(value)) for key, value in _following(pinned.items, follow))
    if split_key is None:
        point = splits.halving_key(
            rows, partition.size_bytes, collection_of, inside_collection=inside
        )
    else:
        splits.check_split_key(
            split_key, partition.start, partition.end, collection_of, inside_collection=inside
        )
        items = size = 0
        for key, item_bytes in rows:
            if key >= split_key:
                break
            items += 1
            size += item_bytes
        point = splits.SplitPoint(split_key, items, size)
    indexes: dict[str, tuple[int, int]] = {}
    for name, walk in pinned.entries.items():
        skip_entry = len(partition.index_layout[name][0])
        entries = entry_bytes = 0
        for key, value in _following(walk, follow):
            if key[skip_entry:] >= point.key:
                break
            entries += 1
            entry_bytes += item_size_of(value) + limits.INDEX_ENTRY_OVERHEAD_BYTES
        indexes[name] = (entries, entry_bytes)
    return point.key, splits.RangeCounts(partition.last_seq, point.items, point.bytes, indexes)


def _following(
    walk: Iterator[tuple[bytes, bytes]], follow: Callable[[], None]
) -> Iterator[tuple[bytes, bytes]]:
    read = 0
    for number, row in enumerate(walk, 1):
        if number % limits.SPLIT_FOLLOW_ROWS_MAX == 0:
            follow()
        read += len(row[1])
        if read >= limits.SPLIT_WALK_YIELD_BYTES:
            # The walk holds the GIL while the store reads; let the event loop in between.
            read = 0
            time.sleep(0)
        yield row


def catch_up(
    following: Following, counts: splits.RangeCounts, below: bytes
) -> splits.RangeCounts | None:
    """The low child's `counts` (as of the pin) carried over the parent's records committed
    since, up to its committed last seq now (an executor's job); None when some were trimmed
    before the split read them (the install then walks)."""
    following.follow()
    if following.gap is not None:
        logger.warning(
            "split of %s counts by a walk: %s", following.parent.partition_id, following.gap
        )
        return None
    return following.since.counts(counts, below)


# Hands a node write (op, the partition it is addressed to or None, body) to the group commit.
Submit = Callable[[str, ops.Target | None, dict[str, Any]], Awaitable[dict[str, Any]]]
_T = TypeVar("_T")


class Offload(Protocol):
    """Runs a store walk off the event loop and gives its result."""

    def __call__(self, work: Callable[[], _T]) -> Awaitable[_T]: ...


async def _in_thread(work: Callable[[], _T]) -> _T:
    return await asyncio.get_running_loop().run_in_executor(None, work)


class Splitter:
    """Splits the partitions of one node: on request, past the size bound, and after a crash."""

    def __init__(
        self,
        node: NodeState,
        submit: Submit,
        connect: Callable[[str], NodeTransport],
        *,
        split_bytes: int = limits.PARTITION_SPLIT_BYTES_DEFAULT,
        offload: Offload = _in_thread,
        check_seconds: float = limits.SPLIT_CHECK_SECONDS,
        split_for_heat: bool = True,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
        crash_points: CrashPoints | None = None,
    ) -> None:
        """`submit` queues an internal write on the node's group commit; `connect` makes a
        transport to a node from its address (the catalog's); `offload` runs a store walk off
        the event loop (a simulation runs it in place); `rng` draws the pauses of catalog
        changes (default: fresh entropy; a simulation passes a seeded one); `crash_points` are
        the driver's (default: the hold points DYNALAB_HOLD_AT names)."""
        self.node = node
        self.submit = submit
        self.split_bytes = split_bytes
        self.offload = offload
        self.check_seconds = check_seconds
        self.split_for_heat = split_for_heat
        self.clock = clock
        self._heat: dict[tuple[PartitionRef, str], heat.HeatWindow] = {}
        self._peers = Transports(connect)
        source = random.Random() if rng is None else rng
        # The one catalog client, finding the catalog through this node's own bootstrap record.
        self.catalog = CatalogClient(
            self._locate,
            lambda location, node: self.client(location.address_of(node)),
            rng=source,
            clock=clock,
        )
        self._lock = asyncio.Lock()
        self._task = BackgroundTask("splitter", self._run)
        self._refused: set[tuple[str, str, int]] = set()  # Size splits that found no key.
        handlers: dict[str, Handler[SplitRecord]] = {
            "pin": self._pin,
            "plan": self._plan,
            "record": self._record,
            "decide": self._decide,
            "count": self._count,
            "install": self._install,
        }
        self.driver = Driver(
            split_machine.MACHINE,
            handlers,
            self._persist,
            HoldPoints.from_env() if crash_points is None else crash_points,
            clock,
            source,
        )
        # The pin's iterators and the follower of the log since, from the pin to the end of the
        # split that made them: they do not outlive the process (a restart before the record
        # forgets the split; after it, the counts are carried over the committed log).
        self._pinned: dict[PartitionRef, tuple[Pinned, Following]] = {}

    @property
    def lock(self) -> asyncio.Lock:
        """Held for each split, and by the mover (`storagenode.move`) for each move, so a
        partition is never split and moved at once."""
        return self._lock

    def client(self, address: str) -> NodeTransport:
        """A transport to the node at `address`, made once and kept."""
        return self._peers.to(address)

    def start(self) -> None:
        self._task.start()

    async def close(self) -> None:
        await self._task.close()
        await self._peers.close()

    async def _run(self) -> None:
        while True:
            try:
                await self.recover()
                await self.split_oversized()
                await self.split_hot()
            except DynamoError as error:
                logger.warning("split check failed, retrying: %s", error.message)
            except Exception:
                # A bug: logged with its traceback, and the next check goes on, so one bad
                # partition does not stop every later split of the node.
                logger.exception("split check failed on a bug")
            await asyncio.sleep(self.check_seconds)

    # The triggers -------------------------------------------------------------------------------

    async def split_oversized(self) -> None:
        """Split every partition past `split_bytes`, one at a time."""
        for ref, partition in list(self.node.partitions.items()):
            if ref[0] in _SYSTEM_TABLES or partition.size_bytes <= self.split_bytes:
                continue
            if not self._drives(ref):
                continue  # A replicated partition is split by its leader.
            if not partition.serving or partition.split is not None:
                # Moving: it splits where it ends up (`storagenode.move`); a split left kept:
                # `recover` drives it on.
                continue
            marker = (*ref, partition.size_bytes)
            if marker in self._refused:
                continue
            current = self.node.partitions.get(ref)
            if current is None or current.epoch != partition.epoch:
                continue
            try:
                await self.split(*ref)
            except splits.SplitRefused as refusal:
                # A single item, or one collection of a table with a local index: it stays
                # whole (the collection cap stops its growth) until its size changes.
                self._refused.add(marker)
                logger.warning(
                    "partition %s is %d bytes but cannot split: %s",
                    ref[1],
                    partition.size_bytes,
                    refusal.message,
                )

    async def split_hot(self) -> None:
        """Split every partition whose writes or reads were throttled at its ceiling through a
        whole window while its table has capacity to give, where its recent load of that kind
        balances (`core.heat`); never one whose load goes nearly all to one key.

        The samples of write load are the keys of the partition's newest change-log records;
        those of read load the keys of its newest throttled reads (`NodeState.read_heat`).
        """
        if not self.split_for_heat:
            return
        now = self.clock()
        seen: set[tuple[PartitionRef, str]] = set()
        self.node.read_heat.retain(self.node.partitions.keys())
        for entry in self.node.throughput.report()["partitions"]:
            ref = (entry["table_id"], entry["partition_id"])
            partition = self.node.partitions.get(ref)
            if (
                partition is None
                or ref[0] in _SYSTEM_TABLES
                or is_index_partition(partition)
                or not partition.serving
                or not self._drives(ref)
            ):
                # A global index partition has no change log to sample its writes from: it
                # splits for size (and by hand), not for heat; a moving one where it ends up.
                continue
            hot: str | None = None
            for kind in _HEAT_KINDS:
                seen.add((ref, kind))
                window = self._heat.setdefault((ref, kind), heat.HeatWindow())
                window.observe(now, int(entry[kind]["throttled_requests"]))
                if hot is None and window.sustained(now):
                    hot = kind
            if hot is None or not heat.capacity_to_give(partition.throughput, hot):
                continue
            for kind in _HEAT_KINDS:
                self._heat[ref, kind] = heat.HeatWindow()  # New windows either way.
            samples = (
                self._written_keys(partition) if hot == "write" else self.node.read_heat.keys(ref)
            )
            key = heat.balancing_key(
                samples,
                partition.start,
                collection_finder(partition),
                inside_collection=not partition.local_indexes,
            )
            if key is None:
                logger.warning(
                    "partition %s is throttled at its %s ceiling, but one key carries its load: "
                    "a split would not help",
                    ref[1],
                    hot,
                )
                continue
            logger.info(
                "partition %s is throttled at its %s ceiling: splitting for heat", ref[1], hot
            )
            await self.split(*ref, key)
        for stale in self._heat.keys() - seen:
            del self._heat[stale]

    def _written_keys(self, partition: Partition) -> list[bytes]:
        """The storage keys of the partition's newest writes (at most HEAT_SAMPLE_RECORDS_MAX)."""
        after = max(0, partition.last_seq - limits.HEAT_SAMPLE_RECORDS_MAX)
        records = self.node.changes(
            partition.table_id, partition.partition_id, after, limits.HEAT_SAMPLE_RECORDS_MAX
        )
        shape = partition.key_shape
        return [shape.storage_key(r["keys"]) for r in records if r.get("keys") is not None]

    async def recover(self) -> None:
        """Drive on every split this node left half-done, from its record (RESTARTED): forgotten
        before the catalog named the children, installed after."""
        async with self._lock:
            for ref, partition in list(self.node.partitions.items()):
                if partition.split is None or not self._drives(ref):
                    continue
                record = SplitRecord.from_json(partition.split)
                logger.info(
                    "split of %s was left at %s: resuming", record.partition_id, record.state
                )
                record, failure = await self.driver.drive(record, Event(machines.RESTARTED))
                logger.info("split of %s: %s", record.partition_id, record.state)
                if failure is not None:
                    logger.warning("split of %s, resumed: %s", record.partition_id, failure)

    # One split ----------------------------------------------------------------------------------

    async def split(
        self, table_id: str, partition_id: str, split_key: bytes | None = None
    ) -> dict[str, Any]:
        """Split one partition of this node (at `split_key`, or where it halves its bytes);
        return the parent and both children as the catalog records them."""
        async with self._lock:
            started = time.monotonic()
            ref = (table_id, partition_id)
            partition = self.node.partitions.get(ref)
            if partition is None or not partition.serving:
                raise StaleEpoch(
                    f"Partition {partition_id} of table {table_id} is not served by this node"
                )
            if not self._drives(ref):
                raise NotPartitionLeader(
                    f"Partition {partition_id} of table {table_id} is split by its leader",
                    self.node.leader_of(ref),
                )
            if partition.split is not None:
                raise splits.SplitConflict(
                    f"Partition {partition_id}'s last split has not ended yet; it is settled first"
                )
            logger.info("split of %s (%d bytes): planning", partition_id, partition.size_bytes)
            record = SplitRecord(
                table_id=table_id,
                partition_id=partition_id,
                table_name=catalog.base_table_name(partition.table_name),
                epoch=partition.epoch,
                index=is_index_partition(partition),
                started=self.clock(),
                asked=None if split_key is None else split_key.hex(),
            )
            try:
                record, failure = await self.driver.drive(record, Event(machines.STARTED))
            finally:
                self._pinned.pop(ref, None)
            if record.state is not SplitState.INSTALLED:
                if failure is not None:
                    raise failure
                # Refused by the catalog (`_record`): nothing was recorded.
                raise splits.SplitConflict(record.error or f"Partition {partition_id} split")
            assert record.parent is not None and record.children is not None, record
            seconds = time.monotonic() - started
            self.node.split_stats.record(seconds)
            install_seconds = record.install_seconds or 0.0
            logger.info(
                "split of %s: installed in %.3f s (the install %.3f s)",
                partition_id,
                seconds,
                install_seconds,
            )
            return {
                "parent": dict(record.parent),
                "children": [dict(child) for child in record.children],
                "seconds": seconds,
                "install_seconds": install_seconds,
            }

    async def _persist(self, record: SplitRecord) -> None:
        """Keep the split's record in the parent's metadata (cleared once it is abandoned; an
        installed split's went with the parent)."""
        if record.state is SplitState.INSTALLED:
            return
        document = None if split_machine.MACHINE.finished(record) else record.to_json()
        payload = RecordPayload(record.table_id, record.partition_id, record.epoch, document)
        await self.submit(SPLIT_RECORD, self._addressed(record), payload.to_json())

    # The split machine's effects ---------------------------------------------------------------

    async def _pin(self, record: SplitRecord, effect: Effect) -> Event:
        """Pin the parent's committed state, and follow its log from there."""
        payload = PinPayload(record.table_id, record.partition_id, record.epoch)
        pinned: Pinned = (await self.submit(SPLIT_PIN, None, payload.to_json()))["pinned"]
        self._pinned[record.table_id, record.partition_id] = (pinned, Following(self.node, pinned))
        return Event(split_machine.PINNED)

    async def _plan(self, record: SplitRecord, effect: Effect) -> Event:
        """Choose the key (or check the one asked for) and count the low child as of the pin."""
        pinned, following = self._pinned[record.table_id, record.partition_id]
        asked = None if record.asked is None else bytes.fromhex(record.asked)
        key, counted = await self.offload(lambda: plan(pinned, asked, following.follow))
        logger.info(
            "split of %s: at key %s, recording in the catalog", record.partition_id, key.hex()
        )
        return Event(split_machine.CHOSEN, {"key": key.hex(), "low": counted.to_json()})

    async def _record(self, record: SplitRecord, effect: Effect) -> Event:
        """Record the children in the table's catalog row; a refusal records nothing."""
        assert record.key is not None, "a chosen split has its key"
        key = bytes.fromhex(record.key)
        try:
            table = await self.read_table(record.table_name)
            parent = self._parent_def(table, record)
            # The children's creation time, on the node's wall clock, the same in every retry
            # of the compare-and-set (a stream's shard ids carry it).
            now = self.node.clock()
            after = await self.change_table(
                record.table_name,
                lambda current: splits.recorded(current, record.table_id, parent, key, now),
            )
        except splits.SplitConflict as conflict:
            logger.warning("split of %s refused: %s", record.partition_id, conflict.message)
            return Event(split_machine.REFUSED, error=conflict.message)
        children = splits.children_of(after, record.partition_id, record.table_id)
        assert children is not None, "a recorded split names two children"
        return _recorded(parent, children)

    async def _decide(self, record: SplitRecord, effect: Effect) -> Event:
        """Whether the catalog recorded the children, read back."""
        table = await self.read_table(record.table_name)
        children = splits.recovery(table, record.table_id, record.partition_id, record.epoch)
        found = splits.lineage(table, record.table_id)
        if not children or found is None:
            return Event(split_machine.NOT_RECORDED)
        parent = next(p for p in found[1] if p.id == record.partition_id)
        return _recorded(parent, children)

    async def _count(self, record: SplitRecord, effect: Effect) -> Event:
        """The low child's counts carried on to now (None: the install walks)."""
        ref = (record.table_id, record.partition_id)
        held = self._pinned.get(ref)
        low: splits.RangeCounts | None = None
        if record.key is not None and record.low is not None and not record.index:
            # A global index partition keeps no change log to carry counts over (its writes
            # are the replicator's index_apply): its install counts by a walk.
            key = bytes.fromhex(record.key)
            counts = splits.RangeCounts.from_json(record.low)
            if held is not None:
                following = held[1]
                low = await self.offload(lambda: catch_up(following, counts, key))
            else:
                committed = self.node.partitions.get(ref)
                if committed is not None and committed.epoch == record.epoch:
                    parent, store = committed, self.node.store
                    low = await self.offload(
                        lambda: _carried(store, parent, counts, key, parent.last_seq)
                    )
        logger.info(
            "split of %s: recorded as %s, installing (low child counted to seq %s)",
            record.partition_id,
            [child["id"] for child in record.children or ()],
            "none: walking" if low is None else low.seq,
        )
        return Event(split_machine.COUNTED, {"low": None if low is None else low.to_json()})

    async def _install(self, record: SplitRecord, effect: Effect) -> Event:
        """Create the children and retire the parent, in one write batch."""
        assert record.children is not None, "an install has its children"
        payload = InstallPayload(
            record.table_id,
            record.partition_id,
            record.epoch,
            [dict(child) for child in record.children],
            None if record.low is None else dict(record.low),
        )
        began = time.monotonic()
        await self.submit(SPLIT_INSTALL, self._addressed(record), payload.to_json())
        return Event(split_machine.INSTALLED, {"seconds": time.monotonic() - began})

    def _drives(self, ref: PartitionRef) -> bool:
        """Whether this node's splitter splits partition `ref`: one of one copy where it is, a
        replicated one only at its leader (its record and install are entries of its group)."""
        return not self.node.replicated(ref) or self.node.leads(ref)

    def _addressed(self, record: SplitRecord) -> ops.Target | None:
        """Where a split's writes to its parent go: to the parent itself when it is replicated
        (an entry of its group, at its leader: a deposed leader's is refused), else the node."""
        ref = (record.table_id, record.partition_id)
        if not self.node.replicated(ref):
            return None
        return ops.Target(record.table_id, record.partition_id, record.epoch)

    def _parent_def(self, table: TableDef | None, record: SplitRecord) -> PartitionDef:
        """The parent as the catalog records it, which must be the partition this node holds."""
        found = splits.lineage(table, record.table_id)
        if found is None:
            raise splits.SplitConflict(f"Table {record.table_name} is no longer in the catalog")
        serving = {p.id: p for p in found[0]}
        parent = serving.get(record.partition_id)
        if parent is None or parent.epoch != record.epoch:
            raise splits.SplitConflict(
                f"Partition {record.partition_id} at epoch {record.epoch} is not serving "
                "in the catalog"
            )
        return parent

    # The catalog, as this node reaches it -------------------------------------------------------

    async def _locate(self) -> CatalogLocation:
        """Where the catalog is, from this node's own bootstrap record."""
        target = ops.Target(
            catalog.BOOTSTRAP_TABLE_ID, catalog.BOOTSTRAP_PARTITION_ID, _SYSTEM_EPOCH, True
        )
        payload = {"key": {"name": {"S": catalog.BOOTSTRAP_RECORD_NAME}}}
        try:
            item = self.node.read(ops.GET, target, payload)["item"]
        except StaleEpoch:
            item = None
        if item is None:
            raise ServiceUnavailable("This node holds no bootstrap record: no catalog yet")
        return CatalogLocation.from_item(item)

    async def read_table(self, name: str) -> TableDef | None:
        """Table `name`'s newest catalog record (None: no such table)."""
        return await self.catalog.read_table(name)

    async def change_table(
        self, name: str, change: Callable[[TableDef | None], TableDef]
    ) -> TableDef:
        """`change` applied to table `name`'s row by compare-and-set on its version, by the one
        catalog client (`rpc.catalog_client`), as a router changes a table."""
        changed = await self.catalog.change_table(name, change)
        assert changed is not None, f"a change of table {name} removed it"
        return changed


def _recorded(parent: PartitionDef, children: tuple[PartitionDef, ...]) -> Event:
    """The event of a split the catalog records: its parent and children as recorded."""
    return Event(
        split_machine.RECORDED,
        {"parent": parent.to_json(), "children": [child.to_json() for child in children]},
    )
