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

import dataclasses
import enum
import random
import struct
from collections.abc import Collection, Iterable, Mapping, Sequence
from concurrent.futures import Future

import orjson

from core import limits
from core.errors import LeaseUnavailable, NotPartitionLeader, ServiceUnavailable
from core.raft import (
    NONE,
    ConfChange,
    ConfChangeKind,
    ConfState,
    Entry,
    EntryKind,
    Message,
    ProposalRefused,
    RaftNode,
    Role,
    Snapshot,
    TimeoutSource,
)
from core.raft import NotLeader as RaftNotLeader
from storagenode.layout import Family, partition_of_meta_key
from storagenode.partition import Partition
from storagenode.raft_host import RaftHost, group_id, member_id, node_name, partition_of_group
from storagenode.raft_storage import stored_groups
from storagenode.snapshots import Install, PageRead
from storagenode.store import DELETE, DELETE_RANGE, PUT, BatchOp, NodeStore, WriteBatchView
from storagenode.writes import PartitionRef, Ready

# `ops.RaftMembershipPayload`'s changes that are entries of the group's log.
_CHANGES = {
    "add-learner": ConfChangeKind.ADD_LEARNER,
    "promote": ConfChangeKind.PROMOTE,
    "remove": ConfChangeKind.REMOVE,
}

# The group of the writes addressed to no one partition (`Ready.spans`' None).
NODE_GROUP = "node"
# A split's child's group begins after a snapshot at this index: the state its members hold
# once they applied the split (`RaftLogStorage.create`'s `start`).
CHILD_LOG_START = 1

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
    membership); the data a member far behind needs is read from the store when it is sent.
    Each effect replayed is also handed to `applied` (the node installs what it changed once the
    round has committed: `StorageNode.install_effects`)."""

    def __init__(self, group: str, applied: list[tuple[str, list[BatchOp]]]) -> None:
        self.group = group
        self.applied = applied

    def apply(self, entries: Sequence[Entry], batch: WriteBatchView) -> None:
        for entry in entries:
            if entry.kind is EntryKind.NORMAL and entry.data:
                writes = decode_effect(entry.data)
                replay(batch, writes)
                self.applied.append((self.group, writes))

    def snapshot(self) -> bytes:
        return b""

    def restore(self, snapshot: Snapshot, batch: WriteBatchView) -> None:
        raise AssertionError(
            f"group {self.group} was sent a snapshot to restore from its data: a partition's "
            "is copied from another member instead (`Replication.offered`)"
        )


class Outbox:
    """The transport of the host's rounds: what they send is collected, and the node's loop
    hands it to the real transport (`rpc.raft_transport`, or its in-process twin) once the round
    is done, off the thread that ran it."""

    def __init__(self) -> None:
        self.batches: list[tuple[int, list[tuple[str, Message]]]] = []

    def send(self, to: int, batch: Sequence[tuple[str, Message]]) -> None:
        self.batches.append((to, list(batch)))

    def take(self) -> list[tuple[int, list[tuple[str, Message]]]]:
        batches, self.batches = self.batches, []
        return batches


@dataclasses.dataclass(frozen=True, slots=True)
class ReadView:
    """What a replica of a partition shared with other nodes may serve, as of the latest round,
    for the readers on other threads (`StorageNode.read`). Times are on the monotonic clock.

    A strongly consistent read needs the leader's lease: this replica leads, has applied every
    entry it knows committed, and no other leader can exist before `lease_until` (the lease in
    ticks, `core.raft`, turned into the monotonic time it ends, a tick early). An eventually
    consistent read is served by the leader, or by a follower until `fresh_until`: while it has
    heard from its leader within the last half election timeout and applied all it knows
    committed. A follower cut off from its leader so stops serving within that bound.

    The change feed (follows, and the reads of GetRecords) is served only by the leader, until
    `feed_until` (`check_feed`): once it has committed an entry of its own term and applied
    every entry it knows committed, so that its change log holds every change any leader
    acknowledged; and while it holds its lease, or, its group asleep, while its node has heard
    from a quorum of the group's nodes within the last half election timeout. A leader cut off
    from the others so stops serving its feed before they can elect another (a change log
    read there is never wrong, being a prefix of the group's, but it would stop growing)."""

    leader: str | None  # the member this replica believes leads (None: none known)
    leads: bool
    lease_until: float
    fresh_until: float
    feed_until: float = 0.0

    def check(self, consistent: bool, now: float, partition_id: str) -> None:
        if self.leads and (not consistent or now < self.lease_until):
            return
        if not consistent and now < self.fresh_until:
            return
        if self.leads:
            raise LeaseUnavailable(
                f"The leader of partition {partition_id} holds no lease now (it was just "
                "elected, or its group was idle): it must confirm it still leads first"
            )
        what = "a strongly consistent read" if consistent else "reads: it is behind its leader"
        raise self._not_leader(partition_id, what)

    def serves_feed(self, now: float) -> bool:
        return self.leads and now < self.feed_until

    def check_feed(self, now: float, partition_id: str) -> None:
        """Refuse a change-feed request unless this replica serves the feed now: a follower
        names its leader (NotPartitionLeader); a leader not there yet, or no longer sure it
        leads, is retried (ServiceUnavailable)."""
        if self.serves_feed(now):
            return
        if self.leads:
            raise ServiceUnavailable(
                f"The leader of partition {partition_id} serves no change feed now (it was just "
                "elected, or has not heard from its group's other nodes lately); retry"
            )
        raise self._not_leader(partition_id, "change feed")

    def _not_leader(self, partition_id: str, what: str) -> NotPartitionLeader:
        known = f"; {self.leader} leads it" if self.leader else "; no leader is known yet"
        return NotPartitionLeader(
            f"This node's replica of partition {partition_id} serves no {what}{known}",
            self.leader,
        )


@dataclasses.dataclass(frozen=True, slots=True)
class GroupStatus:
    """One replicated group's state on this node, as of the latest report (`Replication.status`):
    what /admin, /metrics, the dashboard and `dynalab status` show of it."""

    members: tuple[str, ...]  # the nodes of its voters
    role: str  # this replica's: "leader", "follower", "candidate", "pre-candidate", or "copying"
    leader: str | None  # the node this replica believes leads (None: none known)
    term: int
    commit: int  # the newest index this replica knows committed
    applied: int  # ...and the newest it applied to the partition
    last: int  # the newest index in its log
    # A leader's view of each other member: the newest index known to match its log, and how
    # many entries of the leader's log it lacks. Empty on a follower.
    followers: Mapping[str, tuple[int, int]]
    asleep: bool  # hibernating: idle, not ticking (`raft_host`)

    def to_json(self) -> dict[str, object]:
        return {
            "members": list(self.members),
            "role": self.role,
            "leader": self.leader,
            "term": self.term,
            "commit": self.commit,
            "applied": self.applied,
            "last": self.last,
            "followers": {
                node: {"match": match, "lag": lag} for node, (match, lag) in self.followers.items()
            },
            "asleep": self.asleep,
        }


class Route(enum.Enum):
    """How a write addressed to a partition goes, by the partition's group on this node."""

    # No group of several members: the write runs now and its entry is staged (one voter, this
    # node), or it is refused as stale or creates the partition.
    LOCAL = "local"
    LEAD = "lead"  # this node leads the group and all of its log is applied: plan now, propose
    BUSY = "busy"  # this node leads, but an entry is in flight or not yet applied: wait
    FOLLOW = "follow"  # another member leads (or none is known): refused, NotLeader


@dataclasses.dataclass
class Proposed:
    """A leader's entry in flight: the writes whose effect it carries wait for it to apply."""

    group: str
    index: int
    future: Future[int]
    writes: tuple[int, ...]  # their positions in the round's writes


class Replication:
    """A node's Raft groups and the persisting of its write groups through them."""

    def __init__(
        self,
        store: NodeStore,
        member: int,
        timeouts: TimeoutSource | None = None,
        *,
        peers: Iterable[int] = (),
        compact_entries: int = limits.RAFT_LOG_COMPACT_ENTRIES,
        kept_entries: int = limits.RAFT_LOG_KEPT_ENTRIES,
    ) -> None:
        self.store = store
        self.member = member
        self.compact_entries = compact_entries
        self.kept_entries = kept_entries
        self.peers = tuple(peers)
        # A process draws its election timeouts from the OS's entropy: a restarted node, or
        # nodes started together, draw new ones. (Seeded by the member id, every start of a node
        # drew the same sequence.) The simulator passes a seeded source, so a seed replays.
        self.timeouts = random.Random() if timeouts is None else timeouts
        self.outbox = Outbox()
        # The effects of groups of several members applied in the latest round, by group.
        self.applied: list[tuple[str, list[BatchOp]]] = []
        # Each group's entry in flight at this node as its leader.
        self.proposed: dict[str, Proposed] = {}
        # The groups of partitions an applied entry removed (a split's parent), and the host's
        # tick from which they go (`take_applied`).
        self.retiring: dict[str, int] = {}
        # What each replica shared with other nodes may serve (replaced whole by `publish`).
        self.views: dict[PartitionRef, ReadView] = {}
        # Snapshots sent to members here that must copy their state (`snapshots.py`), taken by
        # the node's loop after each step; and the copies running, by group.
        self.offered: list[tuple[str, Message]] = []
        self.installs: dict[str, Install] = {}
        # Each replicated group's state, renewed by `publish` every RAFT_STATUS_SECONDS and
        # replaced whole, for readers on other threads; and when it is next due.
        self.status: dict[PartitionRef, GroupStatus] = {}
        self._status_due = 0.0
        self.host = self._open()
        if not store.read_only:
            # Entries committed but not applied before a restart are applied now, before the
            # node reads its partitions. (A store opened read-only, on a full disk, takes no
            # writes: nothing is persisted.)
            self.host.handle_round()

    def _open(self) -> RaftHost:
        host = RaftHost(
            self.member,
            self.store,
            self.outbox,
            lambda group: PartitionLog(group, self.applied),
            self.timeouts,
            peers=self.peers,
            compact_entries=self.compact_entries,
            kept_entries=self.kept_entries,
            offer_snapshot=self._offer,
        )
        self.offered = []
        self.installs = {}
        for name, storage in host.suspended.items():
            assert storage.installing is not None
            self.installs[name] = Install.from_record(name, storage.installing)
        return host

    def _offer(self, group: str, message: Message) -> bool:
        """A snapshot the member here cannot continue its log from: its partition's rows are
        copied from another member (`snapshots.py`); the node's loop begins the copy."""
        if group == NODE_GROUP:
            return False
        self.offered.append((group, message))
        return True

    # Copying a replica from another member (`snapshots.py`) ---------------------------------

    def take_offered(self) -> list[tuple[str, Message]]:
        offered, self.offered = self.offered, []
        return [(name, message) for name, message in offered if name in self.host.groups]

    def begin_install(self, name: str, message: Message, batch: WriteBatchView) -> Install:
        """Suspend the group and record its copy in `batch` (the caller deletes the rows)."""
        install = Install.begin(name, message)
        self.host.suspend(name, install.to_record(), batch)
        self.installs[name] = install
        self.proposed.pop(name, None)
        return install

    def page_reads(self) -> list[PageRead]:
        """The next page each running copy waits for."""
        return [
            PageRead(name, install.source, install.request())
            for name, install in sorted(self.installs.items())
        ]

    def record_page(self, install: Install, batch: WriteBatchView) -> None:
        """The copy's cursor after a page, in the batch holding the page's rows."""
        self.host.suspended[install.group].set_installing(batch, install.to_record())

    def end_install(self, install: Install, batch: WriteBatchView) -> None:
        """The last page is in `batch`: the group runs again from the snapshot, and steps the
        leader's message, so the leader sends the entries after it."""
        name = install.group
        del self.installs[name]
        self.host.resume(name, install.snapshot, install.term, install.applied, batch)
        self.host.step(name, install.message(self.member))

    def reopen(self) -> None:
        """Rebuild the groups from the store, after a commit that failed. (What they do on
        opening, electing themselves, is persisted by the next round.)"""
        self.host = self._open()
        self.proposed = {}
        self.applied.clear()

    def recover(self, partitions: Mapping[PartitionRef, Partition]) -> None:
        """Make the groups match the partitions the store holds, after a restart: a group for
        every partition (those written before logs existed get one) and for the node's own
        writes, none for a partition that is gone (the crash came between its last entry and
        the group's removal)."""
        if self.store.read_only:
            return
        wanted = {group_id(*ref): partition for ref, partition in partitions.items()}
        batch = self.store.batch()
        if NODE_GROUP not in self.host.groups:
            self.host.create_group(NODE_GROUP, self._conf(None), batch)
        for name, partition in sorted(wanted.items()):
            if name not in self.host.groups and name not in self.host.suspended:
                # A replicated partition is made with its group in one batch, but for a split's
                # child, whose group the split's apply makes after its round (`take_applied`).
                start = CHILD_LOG_START if partition.replicas else 0
                self._create(name, partition, batch, start=start)
        gone = [n for n in stored_groups(self.store) if n not in wanted and n != NODE_GROUP]
        self.host.handle_round(batch, removing=gone)

    def _conf(self, partition: Partition | None) -> ConfState:
        """The membership a group is created with here: its partition's replicas, this node a
        learner of them if they do not name it (the target of a replica move, which its group
        adds as a learner: `core.machines.replica_move`)."""
        if partition is None or not partition.replicas:
            return ConfState(frozenset({self.member}), frozenset())
        voters = frozenset(member_id(node) for node in partition.replicas)
        if self.member in voters:
            return ConfState(voters, frozenset())
        return ConfState(voters, frozenset({self.member}))

    def _create(
        self, name: str, partition: Partition, batch: WriteBatchView, *, start: int = 0
    ) -> None:
        """A group for a partition that appears on this node: every replica creates it with the
        same membership; the first replica named (where routers look first) campaigns at once."""
        first = bool(partition.replicas) and member_id(partition.replicas[0]) == self.member
        self.host.create_group(name, self._conf(partition), batch, campaign=first, start=start)

    # Routing writes ----------------------------------------------------------------------------

    def route(self, ref: PartitionRef) -> tuple[Route, int]:
        """How a write to partition `ref` goes now, and the leader this node knows (NONE)."""
        name = group_id(*ref)
        group = self.host.groups.get(name)
        if name in self.installs:
            return Route.FOLLOW, self.installs[name].sender
        if group is None or group.node.sole_voter():
            return Route.LOCAL, self.member
        node = group.node
        if node.role is not Role.LEADER:
            return Route.FOLLOW, node.leader
        if name in self.proposed or node.log.applied < node.log.last_index():
            return Route.BUSY, self.member
        return Route.LEAD, self.member

    @property
    def ticking(self) -> bool:
        """Whether time must pass for the groups: some have members on other nodes."""
        return bool(self.peers)

    def replicated(self, ref: PartitionRef) -> bool:
        """Whether partition `ref`'s group on this node has members on other nodes."""
        name = group_id(*ref)
        group = self.host.groups.get(name)
        return name in self.installs or (group is not None and not group.node.sole_voter())

    # Persisting --------------------------------------------------------------------------------

    def persist(
        self,
        ready: Ready,
        held: Mapping[PartitionRef, Partition],
        lead: Ready | None = None,
        lead_writes: Mapping[PartitionRef, Sequence[int]] | None = None,
    ) -> list[Proposed]:
        """Append each partition's share of a write group's effect to its log, and persist with
        one synced commit what this round has: entries, hard states, and the effects that
        committed (of `ready`, staged; of earlier entries, replayed).

        `ready` is the group of writes that run now on groups of one voter (the node's own
        included): their entries are staged. `lead`, if given, is the group of writes to
        partitions this node leads with others (`Route.LEAD`), `lead_writes` their positions in
        it by partition: one entry per partition is proposed, and nothing of it is stored
        before it commits (a later round applies it, here and at every member). `held` are the
        partitions the node held before the group. Groups are made for the partitions the group
        creates and removed, after their last entry, for those it drops."""
        host = self.host
        batch = ready.batch
        gone: list[str] = []
        if batch.ops:
            writes = list(batch.ops)
            shares: dict[str, list[BatchOp]] = {}
            covered = 0
            for ref, start, end in ready.spans:
                assert start == covered, "the spans cover the batch's writes in order"
                covered = end
                shares.setdefault(_group_of(ref, ready, held), []).extend(writes[start:end])
            assert covered == len(writes), "every write of the batch is some partition's"
            for ref, partition in ready.partitions.items():
                name = group_id(*ref)
                if partition is None:
                    if name in host.groups or name in host.suspended:
                        gone.append(name)
                        self.installs.pop(name, None)
                elif name not in host.groups and name not in host.suspended:
                    self._create(name, partition, batch)
            for name, share in shares.items():
                if name not in host.groups:
                    host.create_group(name, self._conf(None), batch)
                assert host.groups[name].node.sole_voter(), f"{name}'s effect staged"
                host.propose_staged(name, encode_effect(share))
        proposed = [] if lead is None else self._propose(lead, lead_writes or {})
        host.handle_round(batch, removing=[*gone, *self._retired_now(gone)])
        return proposed

    def _propose(
        self, lead: Ready, positions: Mapping[PartitionRef, Sequence[int]]
    ) -> list[Proposed]:
        """One entry per partition of `lead` (every write in it addressed to a partition this
        node leads with others), proposed; an entry carries no write of another partition."""
        writes = list(lead.batch.ops)
        shares: dict[PartitionRef, list[BatchOp]] = {}
        for ref, start, end in lead.spans:
            assert ref is not None and ref in positions, "a write led here changes its own alone"
            shares.setdefault(ref, []).extend(writes[start:end])
        proposed = []
        for ref, members in positions.items():
            # An entry even for writes that changed nothing (a failed condition): it commits
            # only while this node still leads, so their answer is not a deposed leader's.
            name = group_id(*ref)
            future = self.host.propose(name, encode_effect(shares.get(ref, ())))
            index = self.host.groups[name].node.log.last_index()  # the entry just appended
            entry = Proposed(name, index, future, tuple(members))
            self.proposed[name] = entry
            proposed.append(entry)
        return proposed

    def membership(self, ref: PartitionRef) -> dict[str, object] | None:
        """The membership of `ref`'s group as this node has it (`ops.RaftMembershipPayload`'s
        reply): at its leader, also how far behind each other member is. None: no group."""
        group = self.host.groups.get(group_id(*ref))
        if group is None:
            return None
        node = group.node
        last = node.log.last_index()
        lag = {}
        if node.role is Role.LEADER:
            lag = {
                node_name(member): max(0, last - progress.match)
                for member, progress in sorted(node.progress.items())
                if member != self.member
            }
        return {
            "voters": sorted(node_name(member) for member in node.conf.voters),
            "learners": sorted(node_name(member) for member in node.conf.learners),
            "leader": node_name(node.leader) if node.leader != NONE else None,
            "pending": node.pending_conf_index > node.log.committed,
            "lag": lag,
        }

    def change_membership(self, ref: PartitionRef, change: str, node: str) -> Future[int] | None:
        """At the leader of `ref`'s group (nothing in flight: `Route.LEAD`), one membership
        step (`ops.RaftMembershipPayload`): None if it is in effect already or begun (a
        transfer), else the future of its entry, which is `proposed` meanwhile. Refused with
        ServiceUnavailable while it must wait."""
        name = group_id(*ref)
        group = self.host.groups[name]
        raft = group.node
        member = member_id(node)
        conf = raft.conf
        if change == "transfer":
            if raft.transferee != member:
                try:
                    self.host.transfer_leadership(name, member)
                except ProposalRefused as refused:
                    raise ServiceUnavailable(f"No transfer to {node} now: {refused}") from None
            return None
        kind = _CHANGES[change]
        if (
            (kind is ConfChangeKind.ADD_LEARNER and member in conf.members)
            or (kind is ConfChangeKind.PROMOTE and member in conf.voters)
            or (kind is ConfChangeKind.REMOVE and member not in conf.members)
        ):
            return None
        if kind is ConfChangeKind.PROMOTE:
            progress = raft.progress.get(member)
            behind = raft.log.last_index() - (NONE if progress is None else progress.match)
            if behind > limits.REPLICA_MOVE_PROMOTE_LAG_ENTRIES:
                raise ServiceUnavailable(
                    f"Learner {node} is {behind} entries behind the leader: not promoted yet"
                )
        if kind is ConfChangeKind.REMOVE and member == self.member:
            raise ServiceUnavailable(f"The leader {node} leaves its group only once another leads")
        future = self.host.propose_conf_change(name, ConfChange(kind, member))
        if future.done() and future.exception() is not None:
            error = future.exception()
            if isinstance(error, ProposalRefused):
                raise ServiceUnavailable(f"The {change} of {node} waits: {error}")
            raise ServiceUnavailable(f"The {change} of {node} was not proposed: {error!r}")
        index = raft.log.last_index()
        self.proposed[name] = Proposed(name, index, future, ())
        return future

    def read_index(self, ref: PartitionRef) -> Future[int]:
        """Confirm this node still leads `ref`'s group, by a heartbeat round (read-index): the
        future resolves once a strong read may be served from the store, or fails NotLeader."""
        name = group_id(*ref)
        if name not in self.host.groups:
            future: Future[int] = Future()
            future.set_exception(RaftNotLeader(NONE))
            return future
        return self.host.read_index(name)

    def settle(self) -> list[Proposed]:
        """The proposals the latest round settled (applied, or known lost): they leave
        `proposed`, and their writes may be answered."""
        done = [entry for entry in self.proposed.values() if entry.future.done()]
        for entry in done:
            del self.proposed[entry.group]
        return done

    def take_applied(self) -> list[tuple[str, list[BatchOp]]]:
        """The effects of groups of several members the latest round applied, to install; and
        the groups of the partitions they made or removed (`_follow_partitions`)."""
        applied = list(self.applied)
        self.applied.clear()
        self._follow_partitions(applied)
        return applied

    # Time and messages -------------------------------------------------------------------------

    def step(
        self, inbound: Iterable[tuple[int, Sequence[tuple[str, Message]]]], ticks: int
    ) -> None:
        """What arrived from other nodes, and the ticks that passed, before a round."""
        for sender, messages in inbound:
            self.host.receive(sender, messages)
        for _ in range(ticks):
            self.host.tick()

    def publish(self, now: float, tick_seconds: float = limits.RAFT_TICK_SECONDS) -> None:
        """Renew the read views of the groups shared with other nodes, at monotonic `now`
        (after a round, with the ticks due delivered)."""
        views: dict[PartitionRef, ReadView] = {}
        host = self.host
        half_timeout = host.election_timeout // 2
        for name, group in host.groups.items():
            node = group.node
            if name == NODE_GROUP or node.sole_voter():
                continue
            # A copy of another member's state is whole once applied to `serve_from`.
            caught_up = node.log.applied >= max(node.log.committed, group.storage.serve_from)
            leader = node_name(node.leader) if node.leader != NONE else None
            lease_until = fresh_until = feed_until = 0.0
            if node.role is Role.LEADER:
                if caught_up and node.committed_in_term():
                    feed_until = self._feed_until(node, group.asleep, now, tick_seconds)
                # A sleeping leader's clock is stopped: its lease, counted on that clock, is
                # believed only once it wakes (`raft_host`), never while it sleeps.
                if caught_up and not group.asleep and node.lease_valid():
                    lease_until = now + (node.lease_end - node.now - 1) * tick_seconds
            elif node.role is Role.FOLLOWER and leader is not None and caught_up:
                heard = host.heard_ticks_ago(node.leader) if group.asleep else node.election_elapsed
                if heard < half_timeout:
                    fresh_until = now + (half_timeout - heard - 1) * tick_seconds
            views[partition_of_group(name)] = ReadView(
                leader, node.role is Role.LEADER, lease_until, fresh_until, feed_until
            )
        for name, install in self.installs.items():
            views[partition_of_group(name)] = ReadView(node_name(install.sender), False, 0.0, 0.0)
        self.views = views
        if now >= self._status_due:
            self._status_due = now + limits.RAFT_STATUS_SECONDS
            self.status = self._report()

    def _feed_until(self, node: RaftNode, asleep: bool, now: float, tick_seconds: float) -> float:
        """Until when a leader that has its log whole serves its feed (`ReadView`)."""
        if not asleep:
            if not node.lease_valid():
                return 0.0
            return now + (node.lease_end - node.now - 1) * tick_seconds
        heard = sorted(
            self.host.heard_ticks_ago(voter) for voter in node.conf.voters if voter != node.id
        )
        # This node and the quorum - 1 others heard from most recently.
        quorum_heard = heard[len(node.conf.voters) // 2 - 1] if heard else 0
        half_timeout = self.host.election_timeout // 2
        if quorum_heard >= half_timeout:
            return 0.0
        return now + (half_timeout - quorum_heard - 1) * tick_seconds

    def _report(self) -> dict[PartitionRef, GroupStatus]:
        """Every replicated group's state now (`GroupStatus`)."""
        status: dict[PartitionRef, GroupStatus] = {}
        for name, group in self.host.groups.items():
            node = group.node
            if name == NODE_GROUP or node.sole_voter():
                continue
            last = node.log.last_index()
            followers = {}
            if node.role is Role.LEADER:
                followers = {
                    node_name(member): (progress.match, max(0, last - progress.match))
                    for member, progress in sorted(node.progress.items())
                    if member != self.member
                }
            status[partition_of_group(name)] = GroupStatus(
                members=tuple(node_name(member) for member in sorted(node.conf.voters)),
                role=node.role.value,
                leader=node_name(node.leader) if node.leader != NONE else None,
                term=node.term,
                commit=node.log.committed,
                applied=node.log.applied,
                last=last,
                followers=followers,
                asleep=group.asleep,
            )
        for name, install in self.installs.items():
            status[partition_of_group(name)] = GroupStatus(
                members=tuple(node_name(member) for member in sorted(install.snapshot.conf.voters)),
                role="copying",
                leader=node_name(install.sender),
                term=install.term,
                commit=install.applied,
                applied=0,
                last=0,
                followers={},
                asleep=False,
            )
        return status

    def round(self) -> None:
        """A round with no writes: persist, send and apply what the groups have to do."""
        if not self.store.read_only:
            self.host.handle_round(removing=self._retired_now())

    def _follow_partitions(self, applied: Sequence[tuple[str, Sequence[BatchOp]]]) -> None:
        """Make the groups of the replicated partitions that applied entries made, and retire
        those of the partitions they removed: a split, an entry of its parent's group, makes
        both children and removes the parent at every member that applies it. Each member
        makes a child's group alike, after a snapshot at CHILD_LOG_START that stands for the
        state the split left (a member that never applies the split, being behind, gets the
        child from the catalog and copies it from a member: `storagenode.placement`). The
        parent's group stays RAFT_RETIRED_GROUP_TICKS_MIN more, so that a member behind learns from
        it the split's commit and applies it too, and then goes."""
        host = self.host
        made: dict[str, Partition] = {}
        for _group, effect in applied:
            for kind, family, key, value in effect:
                if family is not Family.PARTITIONS:
                    continue
                name = group_id(*partition_of_meta_key(key))
                if kind == PUT and value is not None:
                    self.retiring.pop(name, None)
                    if name not in host.groups and name not in host.suspended:
                        made[name] = Partition.from_meta(orjson.loads(value))
                elif kind == DELETE:
                    made.pop(name, None)
                    if name in host.groups or name in host.suspended:
                        self.retiring[name] = host.now + limits.RAFT_RETIRED_GROUP_TICKS_MIN
        made = {name: partition for name, partition in made.items() if partition.replicas}
        if made:
            batch = self.store.batch()
            for name, partition in sorted(made.items()):
                self._create(name, partition, batch, start=CHILD_LOG_START)
            host.handle_round(batch)

    def _retired_now(self, removing: Collection[str] = ()) -> list[str]:
        """The retiring groups whose time is up (not among `removing` already): they leave
        `retiring`, for the caller's round to remove."""
        due = [
            name
            for name, at in self.retiring.items()
            if at <= self.host.now and name not in removing
        ]
        for name in due:
            del self.retiring[name]
        return [name for name in due if name in self.host.groups or name in self.host.suspended]


def _group_of(
    ref: PartitionRef | None, ready: Ready, held: Mapping[PartitionRef, Partition]
) -> str:
    """The group whose entry a span's writes go to: its partition's, if that partition is on
    the node after the write group; the node's otherwise (a checkpoint on a retired partition's
    kept log, say)."""
    if ref is None:
        return NODE_GROUP
    there = ready.partitions[ref] is not None if ref in ready.partitions else ref in held
    return group_id(*ref) if there else NODE_GROUP
