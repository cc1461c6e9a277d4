"""Every write group through Raft logs: each partition's writes are entries of its group's log.

A node's write group (`StorageNode.run_group`) ends as one `writes.Ready` value, whose batch holds
the effect of every write of the group: items, index entries, change records, checkpoints, the
partitions' metadata. `Replication.persist` turns it into log entries before it is stored: the
batch's writes are cut by the partition they belong to (`Ready.spans`), each partition's share
becomes one entry of that partition's Raft group, and one handling round of the node's multi-raft
host (`raft_host.RaftHost`) persists the entries and the effects in one synced commit.

What an entry carries is the effect, not the request: the leader plans a write (its condition,
its update expressions, its clock, its local indexes, its change record) once, and the entry holds
the storage writes that plan made (`encode_effect`), so applying it decides nothing and gives the
same bytes on every replica (CockroachDB's proposer-evaluated writes are this shape; DESIGN.md,
"Writes are planned, then applied"). A replica that applies an entry replays those writes into its
round's batch (`PartitionLog.apply`).

The groups (issue 27, step 2). Every partition a node holds is a group (`raft_host.group_id`),
created in the batch that makes the partition appear on the node (created, split off, moved in)
and removed once it is gone (dropped, retired, moved away); writes addressed to no one partition
(the node's control plane, its TTL sweeper, splitter and mover, transaction commits across
partitions) are entries of the node's own group, `NODE_GROUP`. Today every group has one voter,
this node (replication factor 1): its appends commit as they are made, so the effect is written
into the round's batch once, by the write itself, and the entry beside it is "staged"
(`RaftHost.propose_staged`): the log costs its entries, not a second copy of the data. With more
voters (the next step) an entry commits only once a quorum has it, and every member, the leader
too, applies it by replaying it.

A commit that fails leaves the groups in memory ahead of the disk; `reopen` rebuilds them from
the store, as a restart would, and the writes of that group fail as the node's commit failures
always have (`Ready.lost`).
"""

from __future__ import annotations

import random
import struct
from collections.abc import Collection, Iterable, Sequence

from core.raft import ConfState, Entry, EntryKind, Message, Snapshot, TimeoutSource
from storagenode.layout import Family
from storagenode.raft_host import RaftHost, group_id
from storagenode.raft_storage import stored_groups
from storagenode.store import DELETE, DELETE_RANGE, PUT, BatchOp, NodeStore, WriteBatchView
from storagenode.writes import PartitionRef, Ready

# The group of the writes addressed to no one partition (`Ready.spans`' None).
NODE_GROUP = "node"

# An entry's command: a format byte, then each write as (kind, family, key length, value
# length) and its bytes. The numbers are stored in logs: append to these tables, never renumber.
EFFECT_FORMAT = 1
_FORMAT = bytes([EFFECT_FORMAT])
_WRITE = struct.Struct(">BBII")
_KINDS = (PUT, DELETE, DELETE_RANGE)
_KIND_CODES = {kind: code for code, kind in enumerate(_KINDS)}
_FAMILIES = (
    Family.ITEMS,
    Family.CHANGE_LOG,
    Family.PARTITIONS,
    Family.CHECKPOINTS,
    Family.RETIRED_LOGS,
    Family.INDEX_SOURCES,
    Family.TTL_INDEX,
    Family.INDEX_ENTRIES,
    Family.ITEM_COLLECTIONS,
    Family.TRANSACTIONS,
)
_FAMILY_CODES = {family: code for code, family in enumerate(_FAMILIES)}


class EffectError(Exception):
    """An entry that is not an effect this node can read: a newer format, or damaged."""


def encode_effect(writes: Iterable[BatchOp]) -> bytes:
    """The command of an entry carrying these storage writes (a Raft log's own families are
    never among them: an effect is the application's)."""
    parts = [_FORMAT]
    for kind, family, key, value in writes:
        body = b"" if value is None else value
        parts.append(_WRITE.pack(_KIND_CODES[kind], _FAMILY_CODES[family], len(key), len(body)))
        parts.append(key)
        parts.append(body)
    return b"".join(parts)


def decode_effect(data: bytes) -> list[BatchOp]:
    """The storage writes an entry's command carries, in order."""
    if not data or data[0] != EFFECT_FORMAT:
        raise EffectError(f"an entry of effect format {data[:1].hex() or 'none'}")
    writes: list[BatchOp] = []
    offset, end = 1, len(data)
    try:
        while offset < end:
            kind_code, family_code, key_length, value_length = _WRITE.unpack_from(data, offset)
            offset += _WRITE.size
            key = data[offset : offset + key_length]
            offset += key_length
            value = data[offset : offset + value_length]
            offset += value_length
            kind = _KINDS[kind_code]
            writes.append((kind, _FAMILIES[family_code], key, None if kind == DELETE else value))
    except (struct.error, IndexError):
        raise EffectError("a damaged effect") from None
    if offset != end:
        raise EffectError("a damaged effect")
    return writes


def replay(batch: WriteBatchView, writes: Iterable[BatchOp]) -> None:
    """Write an effect's storage writes into a batch, in order."""
    for kind, family, key, value in writes:
        if kind == PUT:
            assert value is not None
            batch.put(family, key, value)
        elif kind == DELETE:
            batch.delete(family, key)
        else:
            assert value is not None  # a range delete's upper bound
            batch.delete_range(family, key, value)


class PartitionLog:
    """A group's state machine on a node: committed entries are effects, replayed in order.

    The state is the store itself (the partition's items, entries, log and metadata), so a
    snapshot records only where the log was cut (`RaftHost` keeps its index, term and
    membership); the data a member far behind needs is read from the store when it is sent,
    which only a group of several members ever does."""

    def __init__(self, group: str) -> None:
        self.group = group

    def apply(self, entries: Sequence[Entry], batch: WriteBatchView) -> None:
        for entry in entries:
            if entry.kind is EntryKind.NORMAL and entry.data:
                replay(batch, decode_effect(entry.data))

    def snapshot(self) -> bytes:
        return b""

    def restore(self, snapshot: Snapshot, batch: WriteBatchView) -> None:
        raise AssertionError(
            f"group {self.group} was sent a snapshot: only a group of one member exists yet"
        )


class _NoPeers:
    """The transport of a node whose every group has itself as its only member."""

    def send(self, to: int, batch: Sequence[tuple[str, Message]]) -> None:
        assert not batch, f"a message to node {to} from a group of one member"


class Replication:
    """A node's Raft groups and the persisting of its write groups through them."""

    def __init__(
        self, store: NodeStore, member: int, timeouts: TimeoutSource | None = None
    ) -> None:
        self.store = store
        self.member = member
        self.timeouts = random.Random(member) if timeouts is None else timeouts
        self.host = self._open()
        if not store.read_only:
            # Entries committed but not applied before a restart (none, while appends and
            # effects commit together) are applied now, before the node reads its partitions.
            # (A store opened read-only, on a full disk, takes no writes: nothing is persisted.)
            self.host.handle_round()

    def _open(self) -> RaftHost:
        return RaftHost(self.member, self.store, _NoPeers(), PartitionLog, self.timeouts)

    def reopen(self) -> None:
        """Rebuild the groups from the store, after a commit that failed. (What they do on
        opening, electing themselves, is persisted by the next round.)"""
        self.host = self._open()

    def recover(self, partitions: Iterable[PartitionRef]) -> None:
        """Make the groups match the partitions the store holds, after a restart: a group for
        every partition (those written before logs existed get one) and for the node's own
        writes, none for a partition that is gone (the crash came between its last entry and
        the group's removal)."""
        if self.store.read_only:
            return
        wanted = {group_id(*ref) for ref in partitions} | {NODE_GROUP}
        batch = self.store.batch()
        for name in sorted(wanted - self.host.groups.keys()):
            self.host.create_group(name, self._conf(), batch)
        self.host.handle_round(
            batch, removing=[n for n in stored_groups(self.store) if n not in wanted]
        )

    def _conf(self) -> ConfState:
        return ConfState(frozenset({self.member}), frozenset())

    def persist(self, ready: Ready, held: Collection[PartitionRef]) -> None:
        """Append each partition's share of the group's effect to its log, and persist the
        entries and the effect with one synced commit.

        `held` are the partitions the node held before the group. In the same batch, groups are
        made for the partitions the group creates and removed, after their last entry, for
        those it drops."""
        batch = ready.batch
        if not batch.ops:
            return  # Nothing to persist: refusals and failed conditions alone.
        writes = list(batch.ops)
        host = self.host
        shares: dict[str, list[BatchOp]] = {}
        covered = 0
        for ref, start, end in ready.spans:
            assert start == covered, "the spans cover the batch's writes in order"
            covered = end
            shares.setdefault(_group_of(ref, ready, held), []).extend(writes[start:end])
        assert covered == len(writes), "every write of the batch is some partition's"
        gone = []
        for ref, partition in ready.partitions.items():
            name = group_id(*ref)
            if partition is None:
                if name in host.groups:
                    gone.append(name)
            elif name not in host.groups:
                host.create_group(name, self._conf(), batch)
        for name, share in shares.items():
            if name not in host.groups:
                host.create_group(name, self._conf(), batch)
            host.propose_staged(name, encode_effect(share))
        host.handle_round(batch, removing=gone)


def _group_of(ref: PartitionRef | None, ready: Ready, held: Collection[PartitionRef]) -> str:
    """The group whose entry a span's writes go to: its partition's, if that partition is on
    the node after the write group; the node's otherwise (a checkpoint on a retired partition's
    kept log, say)."""
    if ref is None:
        return NODE_GROUP
    there = ready.partitions[ref] is not None if ref in ready.partitions else ref in held
    return group_id(*ref) if there else NODE_GROUP
