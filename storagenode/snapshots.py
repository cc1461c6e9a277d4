"""A partition replica copied from another member of its group: Raft's InstallSnapshot for data
too large to travel in one message.

A group's leader compacts its log (`raft_host`: every `RAFT_LOG_COMPACT_ENTRIES` entries or
`RAFT_LOG_COMPACT_BYTES`, keeping the newest `RAFT_LOG_KEPT_ENTRIES`), so a member that was
away longer than that cannot catch up from entries: the leader sends it a snapshot instead. A
partition's state is its rows in the node's store, up to a partition's split size, so the
snapshot message carries only where the log was cut (index S, its term, the membership) and the
member copies the rows from another member, page by page, as TiKV and CockroachDB send a
region's or range's data beside their Raft messages.

The copy is fuzzy and then caught up (a fuzzy checkpoint). The pages are read from the source's
live store, not from one point-in-time view: each row as of some state the source had applied at
or after S, and the source reports, after each page, the index it had applied by then (at most
A, the highest). The member installs the rows claiming index S, and its log goes on from S + 1:
every entry after S is applied again on top of the copy. An entry is an effect (the storage
writes its leader planned, `replication.py`), whose writes set each key they touch to one value
or delete it, whatever it held: so once the member has applied through A, every key an entry in
(S, A] wrote holds what the last such entry wrote, and every other key holds the value it had at
S, which any page read at or after S saw. The copy is therefore the state at A once the group
has applied A, and not before: until then the replica serves no read (`serve_from`).

On the member, the copy is a record persisted with the group's Raft state (`Install`), so a
restart resumes it: it begins by deleting the replica's rows (`clear`) and suspending its group
(`RaftHost.suspend`: no messages, no votes, its term and vote kept), then writes each page with
the record's new cursor in one batch, and ends (`RaftHost.resume`) by starting the log at S with
the snapshot's membership, in the batch of the last page. It then steps the leader's snapshot
message, which the log now holds, and the leader's answer sends it the entries after S. Pages
come from the leader that sent the snapshot first, or from the group's other voters in turn when
a source fails; any member whose replica is whole and has applied S will do, since every
member's applied state is a committed prefix of the same log.

A partition's expiry-index entries are keyed by expiry second before the item, so they are no
range of its own: the table's index is walked, on both sides, and only the partition's entries
are copied or cleared (`own`). Not built: a replica of a table with a global index or a stream
(issue 27 keeps such tables at one copy).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson

from core import limits
from core.errors import ServiceUnavailable
from core.keycodec import successor
from core.raft import ConfState, Message, MessageKind, Snapshot
from rpc.ops import SnapshotReadPayload, Target
from storagenode.layout import Family, partition_meta_key, table_prefix, ttl_index_entry
from storagenode.partition import Partition
from storagenode.raft_host import partition_of_group
from storagenode.raft_storage import stored_progress
from storagenode.store import DELETE, DELETE_RANGE, PUT, BatchOp, NodeStore, WriteBatchView
from storagenode.transactions import GROUP_PART_PREFIX, GROUP_RECORD_PREFIX, LOCK_PREFIX
from storagenode.writes import NodeState

Range = tuple[Family, bytes, bytes]


def ranges(partition: Partition) -> list[Range]:
    """Every key range of the node's store that holds the partition's replica state, in a fixed
    order: its items, item collections and local index entries within its hash range, its
    change log, consumers' checkpoints, retired log and index-source rows under its log prefix,
    its transactions' locks, records and parts, its table's expiry index (of which only the
    entries of its own items are its: `own`), and its metadata row."""

    def under(prefix: bytes) -> tuple[bytes, bytes]:
        end = successor(prefix)
        assert end is not None, "table ids and log prefixes are never all 0xff"
        return prefix, end

    def hashed(prefix: bytes) -> tuple[bytes, bytes]:
        lo = prefix + partition.start
        if partition.end is not None:
            return lo, prefix + partition.end
        return lo, under(prefix)[1]

    found: list[Range] = [
        (Family.ITEMS, *hashed(partition.item_prefix)),
        (Family.ITEM_COLLECTIONS, *hashed(partition.item_prefix)),
    ]
    for name in sorted(partition.index_layout):
        prefix, _shape = partition.index_layout[name]
        found.append((Family.INDEX_ENTRIES, *hashed(prefix)))
    log = under(partition.log_prefix)
    for family in (
        Family.CHANGE_LOG,
        Family.CHECKPOINTS,
        Family.RETIRED_LOGS,
        Family.INDEX_SOURCES,
    ):
        found.append((family, *log))
    # Its transactions' locks (beside its items) and its records and parts (under its log
    # prefix: `storagenode.transactions`).
    found.append((Family.TRANSACTIONS, *hashed(LOCK_PREFIX + partition.item_prefix)))
    for prefix in (GROUP_PART_PREFIX, GROUP_RECORD_PREFIX):
        found.append((Family.TRANSACTIONS, *under(prefix + partition.log_prefix)))
    # Keyed by expiry second before the item, a partition's entries are spread over its table's
    # index: the whole table's is walked, and `own` keeps the partition's (with or without TTL
    # now, so that the ranges are the same on both sides of a copy, and a member whose TTL
    # setting is stale clears what it holds).
    found.append((Family.TTL_INDEX, *under(table_prefix(partition.table_id))))
    meta = partition_meta_key(partition.table_id, partition.partition_id)
    found.append((Family.PARTITIONS, meta, meta + b"\x00"))
    return found


def own(partition: Partition, family: Family, key: bytes) -> bool:
    """Whether a row of one of `ranges`' ranges is the partition's: every one but the expiry
    index's, whose rows are the partition's only for the items it holds."""
    return family is not Family.TTL_INDEX or partition.holds(ttl_index_entry(key)[1])


def clear(store: NodeStore, batch: WriteBatchView, partition: Partition) -> list[BatchOp]:
    """Delete the replica's rows (not its metadata row, which the copy's last page replaces),
    in `batch`: its ranges whole, and its own entries of its table's expiry index one by one
    (another partition of the table here keeps its); returns the writes, for the node to
    install."""
    writes: list[BatchOp] = []
    for family, lo, hi in ranges(partition):
        if family is Family.PARTITIONS:
            continue
        if family is Family.TTL_INDEX:
            for key, _ in store.walk(family, lo, hi, forward=True):
                if own(partition, family, key):
                    batch.delete(family, key)
                    writes.append((DELETE, family, key, None))
            continue
        batch.delete_range(family, lo, hi)
        writes.append((DELETE_RANGE, family, lo, hi))
    return writes


# The source: a page of its replica -------------------------------------------------------------


def read_page(
    node: NodeState, _target: Target | None, payload: SnapshotReadPayload
) -> dict[str, Any]:
    """A page of this node's replica of a group's partition, if it is whole: the
    `raft_snapshot_read` handler (`rpc.ops.SnapshotReadPayload` says the reply)."""
    name = payload.group
    ref = partition_of_group(name)
    partition = node.partitions.get(ref)
    before = _whole_applied(node, name)
    if partition is None or before is None or before < payload.min_index:
        raise ServiceUnavailable(
            f"This node has no whole replica of partition {ref[1]} at index "
            f"{payload.min_index} or later to copy from now"
        )
    spans = ranges(partition)
    position = payload.range
    start = bytes.fromhex(payload.key)
    rows: list[list[Any]] = []
    size = 0
    while position < len(spans) and size < payload.bytes_max:
        family, lo, hi = spans[position]
        last = None
        for key, value in node.store.walk(family, max(lo, start), hi, forward=True):
            # (Rows walked and not the partition's count too, so that a page stays bounded.)
            size += len(key) + len(value)
            last = key
            if own(partition, family, key):
                rows.append([family.value, key.hex(), value.hex()])
            if size >= payload.bytes_max:
                break
        if last is not None and size >= payload.bytes_max:
            start = last + b"\x00"
            break
        position += 1
        start = b""
    after = _whole_applied(node, name)
    if after is None:
        raise ServiceUnavailable(f"This node's replica of partition {ref[1]} is being replaced")
    return {"rows": rows, "range": position, "key": start.hex(), "applied": after}


def _whole_applied(node: NodeState, group: str) -> int | None:
    """The index this node's replica has applied, as its store holds it (what was read from the
    store is as of a committed state, and the index in memory may be ahead of the commit), if
    the replica is whole: not being copied, nor copied and still catching up."""
    progress = stored_progress(node.store, group)
    if progress is None or progress.installing or progress.applied < progress.serve_from:
        return None
    return progress.applied


# The member copying: its record --------------------------------------------------------------


@dataclasses.dataclass
class Install:
    """A member's copy of its group's state from another member, persisted with the group's
    Raft state while it runs (`RaftLogStorage.installing`).

    `snapshot`, `term` and `sender` are the leader's snapshot message; `source` the member
    pages are read from now; `range` and `key` where the next page starts; `applied` the highest
    index a source said it had applied after a page (the copy is whole once the group applied
    it)."""

    group: str
    snapshot: Snapshot
    term: int
    sender: int
    source: int
    range: int = 0
    key: bytes = b""
    applied: int = 0
    # Not persisted: the pages the copy has written since this node started it or restarted.
    pages: int = 0

    @classmethod
    def begin(cls, group: str, message: Message) -> Install:
        snapshot = message.snapshot
        assert snapshot is not None and message.kind is MessageKind.SNAPSHOT
        return cls(
            group,
            Snapshot(snapshot.index, snapshot.term, snapshot.conf),
            message.term,
            message.sender,
            message.sender,
            applied=snapshot.index,
        )

    def to_record(self) -> bytes:
        conf = self.snapshot.conf
        return orjson.dumps(
            {
                "index": self.snapshot.index,
                "term": self.snapshot.term,
                "voters": sorted(conf.voters),
                "learners": sorted(conf.learners),
                "message_term": self.term,
                "sender": self.sender,
                "source": self.source,
                "range": self.range,
                "key": self.key.hex(),
                "applied": self.applied,
            }
        )

    @classmethod
    def from_record(cls, group: str, record: bytes) -> Install:
        body = orjson.loads(record)
        conf = ConfState(frozenset(body["voters"]), frozenset(body["learners"]))
        return cls(
            group,
            Snapshot(body["index"], body["term"], conf),
            body["message_term"],
            body["sender"],
            body["source"],
            body["range"],
            bytes.fromhex(body["key"]),
            body["applied"],
        )

    def request(self, bytes_max: int = limits.RAFT_SNAPSHOT_PAGE_BYTES) -> dict[str, Any]:
        """The body of the `raft_snapshot_read` that reads the next page."""
        return {
            "group": self.group,
            "min_index": self.snapshot.index,
            "range": self.range,
            "key": self.key.hex(),
            "bytes_max": bytes_max,
        }

    def answers(self, request: dict[str, Any], source: int) -> bool:
        """Whether a page read by `request` from `source` is the one the copy waits for (a late
        answer to an earlier request is not)."""
        return (
            source == self.source
            and request["range"] == self.range
            and request["key"] == self.key.hex()
        )

    def next_source(self, member: int) -> None:
        """Read from the next voter after the current source (not this node, `member`)."""
        others = sorted(self.snapshot.conf.voters - {member}) or [self.sender]
        later = [voter for voter in others if voter > self.source]
        self.source = later[0] if later else others[0]

    def write_page(self, batch: WriteBatchView, reply: dict[str, Any]) -> list[BatchOp]:
        """Write a page's rows into `batch` and move the cursor past them; returns the writes."""
        writes: list[BatchOp] = []
        for family_name, key_hex, value_hex in reply["rows"]:
            family = Family(family_name)
            key, value = bytes.fromhex(key_hex), bytes.fromhex(value_hex)
            batch.put(family, key, value)
            writes.append((PUT, family, key, value))
        self.range = int(reply["range"])
        self.key = bytes.fromhex(reply["key"])
        self.applied = max(self.applied, int(reply["applied"]))
        self.pages += 1
        return writes

    def done(self, partition: Partition) -> bool:
        return self.range >= len(ranges(partition))

    def message(self, member: int) -> Message:
        """The leader's snapshot message, as it came, for the group to step once resumed."""
        return Message(
            MessageKind.SNAPSHOT,
            sender=self.sender,
            to=member,
            term=self.term,
            snapshot=self.snapshot,
        )


@dataclasses.dataclass(frozen=True, slots=True)
class PageRead:
    """A page a member's copy asks `source` for (`Install.request`): the node's loop sends it
    (`GroupCommitter`) and hands the reply, or the error, to a later round."""

    group: str
    source: int
    request: dict[str, Any]
