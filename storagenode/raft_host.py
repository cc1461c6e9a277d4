"""The multi-raft host: every Raft group a node is a member of, driven in handling rounds.

A node holds many groups (issue 27: every partition replica, the catalog). Each is a `RaftNode`
(`core.raft`), its `RaftLogStorage` in the node's RocksDB (`raft_storage.py`) and its
`StateMachine`. The host's caller (the node's loop) calls `tick()` every tick, hands it what
arrives from other nodes (`receive`), takes `propose` and `read_index` from requests, and calls
`handle_round()` whenever any of those may have given a group something to do.

One handling round, for all groups at once (TiKV's raftstore batches the same way):

1. take the Ready of every group that has one;
2. write all their snapshots, entries and hard states into one `WriteBatchView`;
3. apply their committed entries through each group's state machine into the same batch, with
   each group's applied index (see below why the same batch);
4. commit that batch, synced, once: one fsync whatever the number of groups;
5. send all their messages, grouped per destination node: one `Transport.send` per node;
6. `advance` every group; settle the proposals and reads the round finished.

A commit that raises leaves the groups in memory ahead of the disk: the caller stops the node, as
after a crash, and reopens the store.

Applying in the same batch as persisting. A committed entry may be applied once it is committed,
and an entry in this round's Ready may already be committed (a group of one voter commits on
append; a follower may learn the commit of entries it receives in the same message). Writing the
state machine's effects in the batch that persists those entries and the hard state committing
them keeps them atomic: after a crash either both are on disk or neither is. So one fsync
acknowledges a proposal at replication factor 1 (applying in the next round, which etcd also
allows, would take two). Nothing a round applied is visible before its commit: the futures are
settled after it, and the node's readers read RocksDB, which the batch reaches only by committing.

Recovery. Reopening the store (`RaftHost.__init__`) rebuilds every group from its storage: the
hard state, the snapshot and the log. The applied index is persisted with the effects it covers,
so the node starts with it as its applied index (etcd's `Config.Applied`) and hands the state
machine the committed entries after it again, each exactly once; the state machine itself loads
its state from the store as of that index. A round that had not committed is lost whole, as
Raft allows: nothing of it was sent or acknowledged.

Proposals and reads. `propose` returns a future resolved with the entry's index once it is
applied, or failed with `NotLeader` (naming the leader the node knows) when this node is not the
leader or another entry took its index (the proposal can never commit then), `ProposalRefused`,
or `OutcomeUnknown` when the host cannot tell (a snapshot covered its index, the host closed).
`read_index` returns a future resolved with an index once a strong read may be served from a
state applied that far; it fails with `NotLeader` if leadership is lost first. Callers bound
their waits (a deposed leader cut off from the others settles nothing until it hears them).

Hibernation: idle groups stop ticking. Ticking every group every tick costs CPU proportional to
the groups a node holds, most of which are idle. A group sleeps, and the host neither ticks it
nor looks at it, when
- it leads, every member's log matches its last index, which is committed and applied, no read,
  proposal, transfer or membership change is pending, every follower was heard from since the
  last CheckQuorum and has acknowledged a heartbeat sent after that became true (so each knows
  the last commit index); or
- it follows a known leader that is a voter, on a node this host has heard from within an
  election timeout, and its log is committed and applied to its end, and it was not woken by
  another member within the last `RAFT_WAKE_ELECTION_TIMEOUTS_MIN` election timeouts.
A sleeping group wakes when it is asked to (a proposal or read at a leader), when a message
comes for it (except routine traffic in its term: its leader's appends and heartbeats at a
follower, its followers' acknowledgements at a leader, handled without waking it unless they
leave it work to do), and when its leader's node falls silent for a few ticks
(`RAFT_PEER_SILENT_TICKS_MIN`). Every host sends each peer node something at least every
`RAFT_KEEPALIVE_TICKS_MAX` (an empty batch if nothing else), so a follower tells a sleeping leader
from a dead one by its node, not by the group (CockroachDB's quiescence relies on node liveness
the same way); so a dead leader's groups still elect a new one, an election timeout later.

Why this keeps leases safe. A leader's lease is counted on its own clock, which stops while it
sleeps; a lease from before the sleep must not be believed after it. So a sleeping leader woken
for any reason first receives the ticks it missed, at most an election timeout; every way into
the group (`step`, `receive`, `propose`, `read_index`) wakes it first. The catch-up stops as
soon as the lease has ended (a lease reaches at most `election_timeout - max_clock_drift` ticks
past its last acknowledged heartbeat), so after it any lease from before the sleep has expired
and a strong read waits for a new heartbeat round (read-index, or a lease renewed by heartbeats
sent after the wake); a leader that slept for less than its lease had left gets every missed
tick, as if it had ticked all along. Delivering no more than that matters for CheckQuorum: a
whole election timeout of ticks at once would run a quorum check with no chance for the
followers to answer, and the leader would step down for having slept. A
sleeping follower's clock stops too, which only lengthens the time it refuses votes after hearing
its leader: other leaders come later, never sooner, so the lease stays sound. Followers woken by
their leader's silence also receive the ticks they missed (at most an election timeout), which
reflects time that did pass, so they elect a new leader without waiting out a stale count: the
ticks since the leader's last message, which a sleeping follower may have handled long after it
fell asleep (it reset the follower's count), never the whole sleep. Counted from the sleep, the
followers of a leader that is only cut off would vote before its lease ran out.

Member ids are ints (`RaftNode`'s), node ids are names (`node-1`): `member_id` and `node_name`
are the one mapping between them.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from collections.abc import Callable, Collection, Iterable, Sequence
from concurrent.futures import Future
from typing import Protocol

from core import limits
from core.raft import (
    NONE,
    ConfChange,
    Config,
    ConfState,
    Entry,
    HardState,
    Message,
    MessageKind,
    NotLeader,
    ProposalRefused,
    RaftNode,
    Ready,
    Role,
    Snapshot,
    TimeoutSource,
)
from storagenode.raft_storage import RaftLogStorage, RaftStore, stored_groups
from storagenode.store import WriteBatchView

_NODE_NAME = re.compile(r"node-([1-9][0-9]*)")


def member_id(node_name: str) -> int:
    """The Raft member id of a node: `node-3` is 3 (Raft's ids start at 1)."""
    match = _NODE_NAME.fullmatch(node_name)
    if match is None:
        raise ValueError(f"A node that holds Raft groups is named node-N (N >= 1): {node_name!r}")
    return int(match.group(1))


def node_name(member: int) -> str:
    """The node whose Raft member id is `member`."""
    if member < 1:
        raise ValueError(f"Raft member ids start at 1: {member}")
    return f"node-{member}"


def group_id(table_id: str, partition_id: str) -> str:
    """The Raft group of a partition (the catalog's group is "catalog")."""
    return f"{table_id}/{partition_id}"


def partition_of_group(group: str) -> tuple[str, str]:
    """The (table id, partition id) whose group `group` is (`group_id`'s inverse)."""
    table_id, partition_id = group.split("/", 1)
    return table_id, partition_id


class Transport(Protocol):
    """How a host reaches the others: `send` queues a batch of (group, message) for node `to`
    and returns at once; delivery may fail or reorder (Raft copes), and the receiving node hands
    the batch to its host's `receive(sender, batch)`. An empty batch is a keepalive."""

    def send(self, to: int, batch: Sequence[tuple[str, Message]]) -> None: ...


class StateMachine(Protocol):
    """A group's application: what committed entries do, on this node's store."""

    def apply(self, entries: Sequence[Entry], batch: WriteBatchView) -> None:
        """Apply committed entries (membership changes and empty no-ops included, in index
        order), writing their effects into `batch`."""
        ...

    def snapshot(self) -> bytes:
        """The state as of the last applied entry, for a follower too far behind."""
        ...

    def restore(self, snapshot: Snapshot, batch: WriteBatchView) -> None:
        """Replace the whole state by the snapshot's, writing it into `batch`."""
        ...


class HostStore(RaftStore, Protocol):
    def batch(self) -> WriteBatchView: ...

    def commit(self, batch: WriteBatchView) -> None: ...


class OutcomeUnknown(Exception):
    """A proposal may or may not be applied: a snapshot covered its index, or the host closed."""


@dataclasses.dataclass
class HostStats:
    rounds: int = 0  # rounds with anything to do
    commits: int = 0  # synced commits (rounds, and group creations)
    node_ticks: int = 0  # RaftNode.tick calls: what the awake groups cost per tick
    batches_sent: int = 0
    messages_sent: int = 0
    # Elections this node's groups started (a member turning candidate for a new term), and
    # leader changes they saw (a group learning of a leader other than the one it knew; the
    # first one a group learns after the node starts is not a change).
    elections: int = 0
    leader_changes: int = 0


@dataclasses.dataclass(eq=False)
class _Group:
    name: str
    node: RaftNode
    storage: RaftLogStorage
    machine: StateMachine
    asleep: bool = False
    slept_at: int = 0
    # A follower: the host tick of the last leader's message it handled asleep (0: none).
    heard_asleep_at: int = 0
    awake_until: int = 0  # woken by another member: awake until this host tick at least
    quiet_since: int | None = None  # a leader: its tick when it last became quiescent
    proposals: dict[int, tuple[int, Future[int]]] = dataclasses.field(default_factory=dict)
    reads: dict[int, Future[int]] = dataclasses.field(default_factory=dict)  # by context
    # Entries whose effect their proposer wrote into the round's batch (`propose_staged`).
    staged: set[int] = dataclasses.field(default_factory=set)
    # The newest term a candidate here campaigned in, and the last leader this group knew (NONE:
    # none yet), for HostStats' elections and leader changes.
    campaigned_term: int = 0
    known_leader: int = NONE
    ready_reads: list[tuple[int, Future[int]]] = dataclasses.field(default_factory=list)


_Settle = list[tuple[Future[int], int | Exception]]
_FROM_LEADER = (MessageKind.APPEND, MessageKind.HEARTBEAT, MessageKind.SNAPSHOT)
_ACKS = (MessageKind.APPEND_RESPONSE, MessageKind.HEARTBEAT_RESPONSE)


def _routine(node: RaftNode, message: Message) -> bool:
    """Whether a message is the group's routine traffic in its current term, which a sleeping
    member handles without waking: its leader's appends and heartbeats at a follower, and its
    followers' acknowledgements at a leader (such as those of the heartbeat it slept after)."""
    if message.term != node.term:
        return False
    if node.role is Role.FOLLOWER:
        return message.sender == node.leader and message.kind in _FROM_LEADER
    return node.role is Role.LEADER and message.kind in _ACKS and not message.reject


def _restores(node: RaftNode, message: Message) -> bool:
    """Whether stepping a snapshot message would replace the member's log and state: it is not
    stale, and the log does not already hold its last entry (`RaftNode`'s own test)."""
    snapshot = message.snapshot
    return (
        snapshot is not None
        and message.term >= node.term
        and snapshot.index > node.log.committed
        and not node.log.match_term(snapshot.index, snapshot.term)
    )


class RaftHost:
    """Every group on one node; see the module docstring."""

    def __init__(
        self,
        member: int,
        store: HostStore,
        transport: Transport,
        state_machine_for: Callable[[str], StateMachine],
        timeouts: TimeoutSource,
        *,
        peers: Iterable[int] = (),
        config: Config | None = None,
        compact_entries: int = limits.RAFT_LOG_COMPACT_ENTRIES,
        kept_entries: int = limits.RAFT_LOG_KEPT_ENTRIES,
        compact_bytes: int = limits.RAFT_LOG_COMPACT_BYTES,
        offer_snapshot: Callable[[str, Message], bool] | None = None,
    ) -> None:
        self.id = member
        self.store = store
        self.transport = transport
        self.state_machine_for = state_machine_for
        self.timeouts = timeouts
        self.config = config or Config(node_id=member)
        assert self.config.node_id == member
        self.election_timeout = self.config.election_timeout_ticks
        assert 0 < kept_entries < compact_entries
        self.compact_entries = compact_entries
        self.kept_entries = kept_entries
        self.compact_bytes = compact_bytes
        # Given, a snapshot sent to a member whose log cannot continue from it is offered to
        # the application first, before the group steps it: True, the application takes it
        # (it copies the state from another member: `suspend`, then `resume`), and the group
        # does not see the message. Otherwise the state machine restores it from its data.
        self.offer_snapshot = offer_snapshot
        # Groups whose member here is suspended while its state is copied from another's: its
        # storage, and no `RaftNode` (messages to it are dropped, as if lost).
        self.suspended: dict[str, RaftLogStorage] = {}
        self.now = 0
        self.stats = HostStats()
        self.groups: dict[str, _Group] = {}
        self._awake: dict[str, _Group] = {}
        self._dirty: dict[str, _Group] = {}  # may have a Ready
        self._stepped_asleep: dict[str, _Group] = {}  # asleep, reached by routine traffic
        # Peer nodes: the host tick each was last heard from, and when it was last sent to.
        self._heard: dict[int, int] = {peer: 0 for peer in peers if peer != member}
        self._sent: dict[int, int] = {}
        self._silent: set[int] = set()
        self._contexts = itertools.count(1)
        for name in stored_groups(store):
            storage = RaftLogStorage.load(store, name)
            if storage.installing is not None:
                self.suspended[name] = storage
            else:
                self._open(storage)

    # Groups.

    def create_group(
        self,
        name: str,
        conf: ConfState,
        batch: WriteBatchView | None = None,
        *,
        campaign: bool = False,
        start: int = 0,
    ) -> None:
        """Make this node a member of a new group (every member creates it with the same
        membership; a member added later is created with the membership it is added to).

        Given `batch` (the next round's), the group's state is written there and persisted by
        that round's commit; otherwise it is committed at once. With `campaign` the new member
        starts an election at once (one member of a new group may, so it leads without waiting
        for a timeout); a group whose only voter is this node always does. `start`: the log
        begins after a snapshot at that index (`RaftLogStorage.create`)."""
        own = batch is None
        if batch is None:
            batch = self.store.batch()
        storage = RaftLogStorage.create(self.store, batch, name, conf, start=start)
        if own:
            self.store.commit(batch)
            self.stats.commits += 1
            storage.persisted()
        self._open(storage)
        if campaign:
            self.groups[name].node.campaign()

    def remove_group(self, name: str, batch: WriteBatchView) -> None:
        """This node is no longer a member: its log and state go (in `batch`, which the caller
        commits), and what waited on it fails as OutcomeUnknown."""
        if name in self.suspended:
            self.suspended.pop(name).destroy(batch)
            return
        group = self.groups.pop(name)
        for table in (self._awake, self._dirty, self._stepped_asleep):
            table.pop(name, None)
        group.storage.destroy(batch)
        self._fail_waiting(group, OutcomeUnknown(f"group {name} left this node"))

    def suspend(self, name: str, record: bytes, batch: WriteBatchView) -> None:
        """Stop the member's group here while its state is replaced by a copy of another
        member's: `record` (the application's, in `batch`) says so until `resume`, after a
        restart too. The group keeps its hard state (its term and vote stay promised) and
        takes no message meanwhile; what waited on it fails as NotLeader."""
        group = self.groups.pop(name)
        for table in (self._awake, self._dirty, self._stepped_asleep):
            table.pop(name, None)
        group.storage.set_installing(batch, record)
        self.suspended[name] = group.storage
        self._fail_waiting(group, NotLeader(NONE))

    def resume(
        self, name: str, snapshot: Snapshot, term: int, serve_from: int, batch: WriteBatchView
    ) -> None:
        """Run the suspended group again from `snapshot`, whose state the application has
        written into `batch`, as sent in `term`: its log starts after the snapshot's index,
        committed; it is a follower in `term` (its vote kept if the term did not move). Reads
        of its state wait until it has applied `serve_from`."""
        storage = self.suspended.pop(name)
        old = storage.hard_state
        if term > old.term:
            hard_state = HardState(term, NONE, snapshot.index)
        else:
            hard_state = HardState(old.term, old.vote, max(old.commit, snapshot.index))
        storage.restore(batch, snapshot, hard_state)
        storage.set_installing(batch, None)
        storage.set_serve_from(batch, serve_from)
        self._open(storage)

    def _open(self, storage: RaftLogStorage) -> None:
        node = RaftNode(self.config, storage, self.timeouts)
        # The state machine's state on disk is as of the persisted applied index (etcd's
        # Config.Applied): the entries up to it are not handed out again.
        assert storage.applied <= node.log.committed, "applied past the persisted commit"
        node.log.applied = max(node.log.applied, storage.applied)
        if node.sole_voter():
            # No one else can be asked or can object: lead now rather than after a timeout.
            node.campaign()
        group = _Group(storage.group, node, storage, self.state_machine_for(storage.group))
        self.groups[group.name] = group
        self._awake[group.name] = group
        self._dirty[group.name] = group

    def asleep(self, name: str) -> bool:
        return self.groups[name].asleep

    # Requests.

    def propose(self, name: str, data: bytes) -> Future[int]:
        group = self.groups[name]
        future: Future[int] = Future()
        if group.node.role is Role.LEADER:
            self._wake(group)
        try:
            index, term = group.node.propose(data)
        except (NotLeader, ProposalRefused) as error:
            future.set_exception(error)
            return future
        group.proposals[index] = (term, future)
        self._dirty[name] = group
        return future

    def propose_staged(self, name: str, data: bytes) -> int:
        """Append an entry whose effect the caller has already written into the batch of the
        round it will hand to `handle_round`; returns its index.

        Only a group whose one voter is this node may take one: its append commits as it is
        made, so the entry and its effect persist together in that round and the state machine
        is not handed it again (it would apply it twice). Anywhere else the effect must wait
        for the commit: ProposalRefused (NotLeader at a follower)."""
        group = self.groups[name]
        node = group.node
        if node.role is not Role.LEADER:
            raise NotLeader(node.leader)
        if not node.sole_voter():
            raise ProposalRefused("an effect is staged only in a group of one voter")
        index, _term = node.propose(data)
        assert node.log.committed >= index, "a sole voter commits its appends at once"
        group.staged.add(index)
        self._dirty[name] = group
        return index

    def propose_conf_change(self, name: str, change: ConfChange) -> Future[int]:
        """Propose a membership change of group `name` (at its leader): the future resolves
        with the entry's index once it applied, or fails as `propose`'s does
        (ProposalRefused at once if the change cannot be proposed now)."""
        group = self.groups[name]
        future: Future[int] = Future()
        if group.node.role is Role.LEADER:
            self._wake(group)
        try:
            index, term = group.node.propose_conf_change(change)
        except (NotLeader, ProposalRefused) as error:
            future.set_exception(error)
            return future
        group.proposals[index] = (term, future)
        self._dirty[name] = group
        return future

    def transfer_leadership(self, name: str, to: int) -> None:
        """Have group `name`'s leader here hand its leadership to voter `to` (`RaftNode`'s)."""
        group = self.groups[name]
        self._wake(group)
        group.node.transfer_leadership(to)
        self._dirty[name] = group

    def read_index(self, name: str) -> Future[int]:
        group = self.groups[name]
        future: Future[int] = Future()
        if group.node.role is Role.LEADER:
            self._wake(group)
        context = next(self._contexts)
        try:
            group.node.read_index(context)
        except NotLeader as error:
            future.set_exception(error)
            return future
        group.reads[context] = future
        self._dirty[name] = group
        return future

    # Messages.

    def receive(self, sender: int, batch: Sequence[tuple[str, Message]]) -> None:
        """A batch from node `sender` (empty: a keepalive)."""
        self.heard_from(sender)
        for name, message in batch:
            self.step(name, message)

    def peers(self) -> list[int]:
        """The other nodes this host keeps in touch with (keepalives every tick)."""
        return sorted(self._heard)

    def heard_ticks_ago(self, member: int) -> int:
        """Host ticks since node `member` was last heard from (any batch, a keepalive too)."""
        return self.now - self._heard.get(member, -(1 << 30))

    def heard_from(self, sender: int) -> None:
        """Node `sender` is alive now (its batches say so; so may any other sign of life)."""
        self._heard[sender] = self.now
        self._silent.discard(sender)

    def step(self, name: str, message: Message) -> None:
        group = self.groups.get(name)
        if group is None:
            return  # a group not on this node (yet, or any more): as if the message were lost
        node = group.node
        if (
            message.kind is MessageKind.SNAPSHOT
            and self.offer_snapshot is not None
            and _restores(node, message)
            and self.offer_snapshot(name, message)
        ):
            return
        if group.asleep:
            if _routine(node, message):
                # Handled asleep; the next tick wakes the group if this left it work to do.
                self._stepped_asleep[name] = group
                group.heard_asleep_at = self.now
            else:
                self._wake(group)
                if node.role is not Role.LEADER:
                    wake = limits.RAFT_WAKE_ELECTION_TIMEOUTS_MIN * self.election_timeout
                    group.awake_until = self.now + wake
        node.step(message)
        self._dirty[name] = group

    # Time.

    def tick(self) -> None:
        self.now += 1
        for group in list(self._awake.values()):
            group.node.tick()
            self.stats.node_ticks += 1
            self._dirty[group.name] = group
        stepped, self._stepped_asleep = self._stepped_asleep, {}
        for group in stepped.values():
            if group.asleep and not self._may_sleep(group):
                self._wake(group)
        for peer, heard in self._heard.items():
            # Every host sends each peer something every tick (a keepalive at least), so a few
            # silent ticks already say the peer may be gone: its sleeping groups here wake and
            # count the time that passed, and elect within their own timeout of their leader's
            # last word, not a detection delay later. (Waking early only costs ticks.)
            if self.now - heard <= limits.RAFT_PEER_SILENT_TICKS_MIN:
                continue
            if peer not in self._silent:
                self._silent.add(peer)
                # The peer's groups stopped heartbeating with it: wake those it leads here.
                for group in list(self.groups.values()):
                    if group.asleep and group.node.leader == peer:
                        self._wake(group, catch_up=True)
        for group in list(self._awake.values()):
            if self._may_sleep(group):
                group.asleep = True
                group.slept_at = self.now
                del self._awake[group.name]

    def _wake(self, group: _Group, *, catch_up: bool = False) -> None:
        if not group.asleep:
            return
        group.asleep = False
        group.quiet_since = None
        self._awake[group.name] = group
        self._dirty[group.name] = group
        node = group.node
        missed = self.now - group.slept_at
        if node.role is Role.LEADER:
            # The ticks it missed, as many as its lease had left to run (see the module
            # docstring): no more, so that CheckQuorum still finds the followers it heard
            # before sleeping recent and the answers to its next heartbeats time to come.
            while missed > 0 and node.lease_valid():
                node.tick()
                missed -= 1
                self.stats.node_ticks += 1
        elif catch_up:
            # Its election counts restarted at the leader's last message (see the module).
            missed = self.now - max(group.slept_at, group.heard_asleep_at)
            for _ in range(min(missed, self.election_timeout)):
                node.tick()
                self.stats.node_ticks += 1

    def _may_sleep(self, group: _Group) -> bool:
        node = group.node
        log = node.log
        if (
            self.now < group.awake_until
            or group.proposals
            or group.reads
            or group.ready_reads
            or log.unstable.entries
            or log.unstable.snapshot is not None
            or not log.applied == log.committed == log.last_index()
        ):
            group.quiet_since = None
            return False
        if node.role is Role.FOLLOWER:
            return (
                node.leader != NONE
                and node.leader in node.conf.voters
                and node.leader in self._heard
                and node.leader not in self._silent
            )
        if node.role is not Role.LEADER:
            return False
        if (
            node.pending_reads
            or node.reads_waiting_for_commit
            or node.transferee != NONE
            or node.pending_conf_index > log.committed
            or any(
                progress.match != log.last_index() or not progress.recent_active
                for member, progress in node.progress.items()
                if member != self.id
            )
        ):
            group.quiet_since = None
            return False
        if group.quiet_since is None:
            group.quiet_since = node.now
            return False
        # Every follower acknowledged a heartbeat sent since: each knows the last commit.
        return all(
            progress.lease_tick >= group.quiet_since
            for member, progress in node.progress.items()
            if member != self.id
        )

    # The handling round.

    def handle_round(
        self, batch: WriteBatchView | None = None, *, removing: Collection[str] = ()
    ) -> int:
        """One round for every group with a Ready (see the module docstring); returns how many
        groups it handled. Given `batch`, the round writes into it and commits it (with what the
        caller wrote there already), even if no group has anything to do. The groups named in
        `removing` are removed (`remove_group`) in the same batch, after what the round applied
        of them."""
        dirty, self._dirty = self._dirty, {}
        readies = [
            (group, group.node.ready()) for group in dirty.values() if group.node.has_ready()
        ]
        if not readies and not removing:
            if batch is not None and len(batch):
                self.store.commit(batch)
                self.stats.commits += 1
            self._keepalive()
            return 0
        if batch is None:
            batch = self.store.batch()
        for group, ready in readies:
            self._count(group, ready)
            if ready.snapshot is not None:
                group.storage.apply_snapshot(batch, ready.snapshot)
            group.storage.append(batch, ready.entries)
            if ready.hard_state is not None:
                group.storage.set_hard_state(batch, ready.hard_state)
        settle: _Settle = []
        for group, ready in readies:
            self._apply(group, ready, batch, settle)
        for name in removing:
            self.remove_group(name, batch)
        self.store.commit(batch)
        self.stats.commits += 1
        self.stats.rounds += 1
        outgoing: dict[int, list[tuple[str, Message]]] = {}
        for group, ready in readies:
            group.storage.persisted()
            for message in ready.messages:
                outgoing.setdefault(message.to, []).append((group.name, message))
        for to, messages in outgoing.items():
            self.transport.send(to, messages)
            self._sent[to] = self.now
            self.stats.batches_sent += 1
            self.stats.messages_sent += len(messages)
        self._keepalive()
        for group, ready in readies:
            group.node.advance(ready)
            if group.node.has_ready() and group.name in self.groups:
                self._dirty[group.name] = group
        for future, outcome in settle:
            if isinstance(outcome, Exception):
                future.set_exception(outcome)
            else:
                future.set_result(outcome)
        return len(readies)

    def _count(self, group: _Group, ready: Ready) -> None:
        """Count the election a Ready shows begun, and the change of leader it shows."""
        term = ready.hard_state.term if ready.hard_state is not None else group.node.term
        if ready.role is Role.CANDIDATE and term > group.campaigned_term:
            group.campaigned_term = term
            self.stats.elections += 1
        if ready.leader != NONE and ready.leader != group.known_leader:
            if group.known_leader != NONE:
                self.stats.leader_changes += 1
            group.known_leader = ready.leader

    def _apply(self, group: _Group, ready: Ready, batch: WriteBatchView, settle: _Settle) -> None:
        node, storage = group.node, group.storage
        if ready.snapshot is not None:
            group.machine.restore(ready.snapshot, batch)
            storage.set_applied(batch, ready.snapshot.index)
            for index in [index for index in group.proposals if index <= ready.snapshot.index]:
                _term, future = group.proposals.pop(index)
                settle.append((future, OutcomeUnknown(f"a snapshot covered entry {index}")))
        entries = ready.committed_entries
        if entries:
            for entry in entries:
                if entry.conf is not None:
                    storage.set_membership(batch, entry.index, entry.conf)
            staged = group.staged
            if staged:
                group.machine.apply(
                    [entry for entry in entries if entry.index not in staged], batch
                )
                staged.difference_update(entry.index for entry in entries)
            else:
                group.machine.apply(entries, batch)
            storage.set_applied(batch, entries[-1].index)
            for entry in entries:
                proposal = group.proposals.pop(entry.index, None)
                if proposal is None:
                    continue
                term, future = proposal
                # Another entry at its index: this proposal can never be committed.
                settle.append(
                    (future, entry.index if entry.term == term else NotLeader(node.leader))
                )
            if entries[-1].index == node.log.committed and (
                storage.applied - storage.first_index() + 1 >= self.compact_entries
                or storage.appended_bytes >= self.compact_bytes
            ):
                # node.conf is the membership as of its commit index, which is now applied.
                storage.create_snapshot(batch, storage.applied, node.conf, group.machine.snapshot())
                # A group of one voter has no follower to keep entries for.
                kept = 0 if node.sole_voter() else self.kept_entries
                storage.compact(batch, storage.applied - kept)
        for state in ready.read_states:
            if state.context in group.reads:
                group.ready_reads.append((state.index, group.reads.pop(state.context)))
        waiting = []
        for index, future in group.ready_reads:
            if index <= storage.applied:
                settle.append((future, index))
            else:
                waiting.append((index, future))
        group.ready_reads = waiting
        if node.role is not Role.LEADER and group.reads:
            for future in group.reads.values():
                settle.append((future, NotLeader(node.leader)))
            group.reads = {}

    def _keepalive(self) -> None:
        for peer in self._heard:
            if self.now - self._sent.get(peer, -limits.RAFT_KEEPALIVE_TICKS_MAX) >= (
                limits.RAFT_KEEPALIVE_TICKS_MAX
            ):
                self.transport.send(peer, [])
                self._sent[peer] = self.now
                self.stats.batches_sent += 1

    def close(self) -> None:
        """Stop: every proposal and read not yet settled fails with OutcomeUnknown (the caller
        closes the store)."""
        for group in self.groups.values():
            self._fail_waiting(group, OutcomeUnknown("the host closed"))

    def _fail_waiting(self, group: _Group, error: Exception) -> None:
        futures = [future for _term, future in group.proposals.values()]
        futures += list(group.reads.values()) + [future for _i, future in group.ready_reads]
        for future in futures:
            future.set_exception(error)
        group.proposals, group.reads, group.ready_reads = {}, {}, []
