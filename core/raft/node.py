"""One member of a Raft group, as a pure state machine: messages and ticks in, a Ready out.

`RaftNode` never touches a disk, a socket or a clock. The caller feeds it `step(message)`,
`tick()` (time, in ticks), `propose(data)`, `propose_conf_change(change)`, `read_index(context)`
and `transfer_leadership(to)`, then takes `ready()`: what to persist, send, apply and answer, in
that order, and hands it back with `advance(ready)`. Randomness (the election timeout) comes from
an injected `TimeoutSource`. The rules below are the Raft paper's (Ongaro and Ousterhout, 2014)
and Ongaro's thesis (2014); the shape is etcd's raft (`raft.go`, `rawnode.go`).

Elections (paper 5.2, thesis 9.6). A follower that hears no leader for a randomized timeout in
[election_timeout, election_timeout + election_spread) ticks first asks for pre-votes for the next
term without raising its own (PreVote): only if a quorum would vote for it does it become a
candidate, so a node that was cut off and comes back cannot depose a working leader by its higher
term. A node refuses to vote (and pre-vote) for anyone while it heard from a leader within the last
election timeout, and for one election timeout after it starts; that is what makes leases safe
(below). A leader steps down when a quorum has not answered it within an election timeout
(CheckQuorum).

Replication (paper 5.3). Proposals are appended to the leader's log; the appends go out when the
caller takes a Ready, batched (at most `append_entries_max` entries and `append_bytes_max` bytes
per message) and flow-controlled per follower (`progress`: probe one append at a time until the
logs match, then stream with at most `inflight_appends_max` appends unacknowledged). A follower
rejecting an append returns a hint that lets the leader skip a whole term of conflicting entries.

Commit (paper 5.4.2, Figure 8). The leader commits the highest index a quorum of voters has, but
only if that entry is of its own term: an entry of an older term on a majority can still be
overwritten, so it is committed only indirectly, by an entry of the current term after it. A new
leader appends an empty entry at once for that reason.

Strong reads (thesis 6.4). `read_index(context)` yields a ReadState: the read may be answered once
the application has applied up to its index. A leader answers only once it has committed an entry
of its term (before that its commit index may be behind). Under a valid lease it answers at once;
otherwise it records its commit index, confirms with a quorum by a heartbeat round carrying the
context (read-index), and answers when the quorum acknowledged.

The lease and the clock-drift bound. A heartbeat carries the leader's tick when sent; the leader's
lease runs until `election_timeout - max_clock_drift` of its ticks after the newest heartbeat round
a quorum of voters acknowledged. A voter that acknowledged that round will not vote for anyone
until `election_timeout` of its own ticks after it received the heartbeat, and a new leader needs a
vote from a quorum, which shares a voter with the lease's quorum; so no other leader exists while
the lease runs, PROVIDED THE DRIFT BOUND HOLDS: while any node's clock counts
`election_timeout - 1` ticks, every other node's clock counts at least
`election_timeout - max_clock_drift` ticks (the 1 is a tick's granularity: a follower's first
tick after the heartbeat may come at once). `max_clock_drift` is at least 1 (`Config` checks). A
node whose clock runs faster than that (a paused VM, a stepped clock) breaks lease reads; read-index
reads stay safe whatever the clocks do. A new leader besides waits out any earlier lease: only
heartbeat rounds it sends an election timeout or more after its election grant it a lease, so
until then it serves strong reads by read-index. A leader that hands its leadership over
(`transfer_leadership`) gives its lease up for the rest of its term, because the voters of the
forced election it triggers do not wait.

Membership: one server at a time, with learners. A change adds a learner, promotes a learner to a
voter, or removes a member; a `ConfChange` entry carries the whole resulting membership, and each
node adopts it when the entry commits (so a truncated change never took effect, and the membership
at any index is the last such entry before it, which a snapshot records). We chose single-server
changes over joint consensus because any majority of the old voters and any majority of the new
share a voter when they differ by one server, so no intermediate configuration is needed, and
moves (the one thing dynalab changes membership for: add a learner, catch it up, promote it,
remove the old replica) are single-server steps anyway. The known pitfall of single-server changes
(Ongaro, raft-dev, 2015: a change proposed by a new leader can conflict with an uncommitted change
of a deposed one) is closed the way the fix describes: a leader proposes a change only once it has
committed an entry of its own term, and only one change is pending at a time.

Log compaction (paper 7). The application takes a snapshot of its state at an applied index and
has the storage drop the log before it; a follower needing dropped entries is sent the snapshot
(InstallSnapshot), then the log after it.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Protocol

from core import limits
from core.raft.log import RaftLog
from core.raft.messages import (
    NONE,
    ConfChange,
    ConfState,
    Entry,
    EntryKind,
    HardState,
    Message,
    MessageKind,
    NotLeader,
    ProposalRefused,
    ReadState,
    ReadVia,
    Ready,
    Role,
    Snapshot,
)
from core.raft.progress import Progress, ProgressState
from core.raft.storage import Storage


class TimeoutSource(Protocol):
    """Where election timeouts come from (`random.Random` is one): injected, so a seed replays."""

    def randrange(self, start: int, stop: int, /) -> int: ...


@dataclasses.dataclass(frozen=True)
class Config:
    node_id: int
    election_timeout_ticks: int = limits.RAFT_ELECTION_TIMEOUT_TICKS_DEFAULT
    # How widely the randomized election timeout ranges beyond the election timeout.
    election_spread_ticks: int = limits.RAFT_ELECTION_SPREAD_TICKS_DEFAULT
    heartbeat_interval_ticks: int = limits.RAFT_HEARTBEAT_INTERVAL_TICKS_DEFAULT
    # The clock-drift bound the lease relies on (the module docstring states it exactly).
    max_clock_drift_ticks: int = limits.RAFT_CLOCK_DRIFT_TICKS_MAX
    append_entries_max: int = limits.RAFT_APPEND_ENTRIES_MAX
    append_bytes_max: int = limits.RAFT_APPEND_BYTES_MAX
    inflight_appends_max: int = limits.RAFT_INFLIGHT_APPENDS_MAX
    # Committed entries one Ready hands to apply: bytes beyond the first (one always goes).
    apply_bytes_max: int = limits.RAFT_APPLY_BYTES_MAX
    # False: every strong read takes the read-index round trip, whatever the clocks do.
    lease_reads: bool = True

    def __post_init__(self) -> None:
        if self.node_id == NONE:
            raise ValueError("node ids start at 1")
        if self.election_spread_ticks < 1:
            raise ValueError("the randomized election timeout needs a range to draw from")
        if not 0 < self.heartbeat_interval_ticks < self.election_timeout_ticks:
            raise ValueError("heartbeats must come more often than election timeouts")
        if not 1 <= self.max_clock_drift_ticks < self.election_timeout_ticks:
            raise ValueError("the clock drift bound is at least a tick, less than a timeout")
        if self.append_entries_max < 1 or self.inflight_appends_max < 1:
            raise ValueError("a leader must be able to send an entry")


@dataclasses.dataclass
class _PendingRead:
    """A read-index request waiting for a quorum to confirm the leader after it arrived."""

    context: int
    index: int
    acks: set[int]


class RaftNode:
    # The planted bug (issue 27): a leader that serves strong reads without a lease or a read-index
    # round. Only tests set it, to show the simulator catches stale reads; no configuration can.
    PLANTED_BUG_UNCHECKED_READS: ClassVar[bool] = False

    def __init__(self, config: Config, storage: Storage, timeouts: TimeoutSource) -> None:
        self.config = config
        self.id = config.node_id
        self.timeouts = timeouts
        hard_state, snapshot = storage.initial_state()
        self.term = hard_state.term
        self.vote = hard_state.vote
        self.log = RaftLog(storage, hard_state.commit, snapshot.index)
        known, self.conf = storage.membership()
        assert snapshot.index <= known <= hard_state.commit, "a membership after the snapshot"
        self._adopt_committed_confs(known)
        self.role = Role.FOLLOWER
        self.leader = NONE
        self.now = 0  # this node's ticks since it started: the clock its lease is measured on
        self.election_elapsed = 0
        self.heartbeat_elapsed = 0
        # Ticks since this node last heard from a leader (or was one), or since it started: it
        # votes for no one while this is below the election timeout (the lease's guarantee).
        self.ticks_since_leader = 0
        self.randomized_timeout = self._draw_timeout()
        self.votes: dict[int, bool] = {}
        self.progress: dict[int, Progress] = {}
        self.messages: list[Message] = []
        self.read_states: list[ReadState] = []
        self.pending_reads: list[_PendingRead] = []
        self.reads_waiting_for_commit: list[int] = []
        self.pending_conf_index = NONE
        self.became_leader_tick = NONE
        self.lease_end = NONE
        self.lease_given_up = False
        self.transferee = NONE
        self.transfer_elapsed = 0  # ticks since the transfer began: it is dropped after a timeout
        self._prev_hard_state = hard_state

    def __repr__(self) -> str:
        where = f"term={self.term} last={self.log.last_index()} commit={self.log.committed}"
        return f"RaftNode({self.id} {self.role.value} {where})"

    # The caller's side: time, messages, proposals, reads.

    def tick(self) -> None:
        self.now += 1
        if self.role is Role.LEADER:
            self._tick_leader()
        else:
            self._tick_election()

    def propose(self, data: bytes) -> tuple[int, int]:
        """Append a command; returns its (index, term). It is committed when an applied entry has
        that index and term; a different term there means it was lost (its leader was deposed)."""
        self._check_can_propose()
        return self._append(Entry(index=NONE, term=NONE, data=data))

    def propose_conf_change(self, change: ConfChange) -> tuple[int, int]:
        self._check_can_propose()
        if self.pending_conf_index > self.log.committed:
            raise ProposalRefused(
                "a membership change is pending, or this leader has not committed in its term yet"
            )
        conf = change.applied_to(self.conf)
        index, term = self._append(Entry(NONE, NONE, kind=EntryKind.CONF, conf=conf))
        self.pending_conf_index = index
        return index, term

    def read_index(self, context: int) -> None:
        """Ask for a strong read; a ReadState with this context (unique per request) follows in a
        Ready, or never if leadership is lost meanwhile (the caller times out and retries)."""
        if self.role is not Role.LEADER:
            raise NotLeader(self.leader)
        if self.PLANTED_BUG_UNCHECKED_READS:
            self.read_states.append(ReadState(context, self.log.committed, ReadVia.UNCHECKED))
            return
        if not self.committed_in_term():
            self.reads_waiting_for_commit.append(context)
            return
        self._start_read(context)

    def campaign(self) -> None:
        """Start an election now instead of at the next timeout (etcd's Campaign).

        It goes through PreVote like any election, so it cannot depose a working leader. The
        host calls it for a group whose only voter is this node, which then leads at once
        instead of after an election timeout of ticks; and for one member of a new group. A
        group that has never had a leader (term 0) holds no lease anyone could break, so there
        the voters are asked to skip the guard that makes them refuse votes for an election
        timeout after they start (as in a leader transfer), and the group has a leader one
        round trip after its members exist rather than after a timeout."""
        if self.role is Role.LEADER:
            return
        self.election_elapsed = 0
        if self.term == 0 and not self.log.last_index():
            self._campaign(pre_vote=False, force=True)
        else:
            self._campaign(pre_vote=True)

    def sole_voter(self) -> bool:
        """Whether this node is its group's only voter: its appends commit as they are made."""
        return self.conf.voters == {self.id}

    def lease_valid(self) -> bool:
        return self.role is Role.LEADER and not self.lease_given_up and self.now < self.lease_end

    def transfer_leadership(self, to: int) -> None:
        """Hand leadership to voter `to` once its log is caught up (thesis 3.10); abandoned after
        an election timeout. Proposals are refused meanwhile."""
        if self.role is not Role.LEADER:
            raise NotLeader(self.leader)
        if to == self.id or to not in self.conf.voters:
            raise ProposalRefused(f"{to} is not another voter")
        self.transferee = to
        self.transfer_elapsed = 0
        if self.progress[to].match == self.log.last_index():
            self._send_timeout_now(to)
        else:
            self._send_append(to)

    def step(self, message: Message) -> None:
        if message.term > self.term:
            if (
                message.kind in (MessageKind.VOTE, MessageKind.PRE_VOTE)
                and not message.force
                and self.ticks_since_leader < self.config.election_timeout_ticks
            ):
                return  # it heard a leader lately: no vote, not even a higher term
            if message.kind is MessageKind.PRE_VOTE:
                pass  # a pre-vote is a question about the next term, not a move into it
            elif message.kind is MessageKind.PRE_VOTE_RESPONSE and not message.reject:
                pass  # a granted pre-vote carries the term we would campaign for
            elif message.kind in (MessageKind.APPEND, MessageKind.HEARTBEAT, MessageKind.SNAPSHOT):
                self._become_follower(message.term, message.sender)
            else:
                self._become_follower(message.term, NONE)
        elif message.term < self.term:
            if message.kind in (MessageKind.APPEND, MessageKind.HEARTBEAT):
                # A deposed leader: tell it the newer term, so it steps down at once.
                self._send(MessageKind.APPEND_RESPONSE, message.sender)
            elif message.kind is MessageKind.PRE_VOTE:
                self._send(MessageKind.PRE_VOTE_RESPONSE, message.sender, reject=True)
            return
        if message.kind in (MessageKind.VOTE, MessageKind.PRE_VOTE):
            self._handle_vote_request(message)
        elif self.role is Role.LEADER:
            self._step_leader(message)
        elif self.role is Role.FOLLOWER:
            self._step_follower(message)
        else:
            self._step_candidate(message)

    # Ready and advance.

    def has_ready(self) -> bool:
        self._flush_appends()
        return bool(
            self.messages
            or self.read_states
            or self.log.unstable.entries
            or self.log.unstable.snapshot is not None
            or self._hard_state() != self._prev_hard_state
            or self.log.committed > self.log.applied
        )

    def ready(self) -> Ready:
        self._flush_appends()
        hard_state = self._hard_state()
        return Ready(
            role=self.role,
            leader=self.leader,
            hard_state=hard_state if hard_state != self._prev_hard_state else None,
            entries=tuple(self.log.unstable.entries),
            snapshot=self.log.unstable.snapshot,
            committed_entries=tuple(self.log.next_committed_entries(self.config.apply_bytes_max)),
            messages=tuple(self.messages),
            read_states=tuple(self.read_states),
        )

    def advance(self, ready: Ready) -> None:
        """The caller did all `ready` asked: persisted, sent, applied."""
        if ready.hard_state is not None:
            self._prev_hard_state = ready.hard_state
        if ready.snapshot is not None:
            if self.log.unstable.snapshot == ready.snapshot:
                self.log.unstable.snapshot = None
            self.log.applied = max(self.log.applied, ready.snapshot.index)
        if ready.entries:
            last = ready.entries[-1]
            self.log.unstable.stable_to(last.index, last.term)
        if ready.committed_entries:
            self.log.applied = max(self.log.applied, ready.committed_entries[-1].index)
        del self.messages[: len(ready.messages)]
        del self.read_states[: len(ready.read_states)]

    def _hard_state(self) -> HardState:
        return HardState(term=self.term, vote=self.vote, commit=self.log.committed)

    # Roles.

    def _reset(self, term: int) -> None:
        if term != self.term:
            self.term = term
            self.vote = NONE
        self.leader = NONE
        self.election_elapsed = 0
        self.heartbeat_elapsed = 0
        self.randomized_timeout = self._draw_timeout()
        self.votes = {}
        self.progress = {}
        self.pending_reads = []
        self.reads_waiting_for_commit = []
        self.pending_conf_index = NONE
        self.lease_end = NONE
        self.lease_given_up = False
        self.transferee = NONE

    def _become_follower(self, term: int, leader: int) -> None:
        self._reset(term)
        self.role = Role.FOLLOWER
        self.leader = leader

    def _become_pre_candidate(self) -> None:
        # Neither the term nor the vote changes: a pre-campaign promises nothing.
        self.role = Role.PRE_CANDIDATE
        self.leader = NONE
        self.votes = {}

    def _become_candidate(self) -> None:
        self._reset(self.term + 1)
        self.role = Role.CANDIDATE
        self.vote = self.id

    def _become_leader(self) -> None:
        self._reset(self.term)
        self.role = Role.LEADER
        self.leader = self.id
        self.ticks_since_leader = 0
        self.became_leader_tick = self.now
        last = self.log.last_index()
        for member in self.conf.members:
            self.progress[member] = Progress(last + 1, learner=member in self.conf.learners)
        self.progress[self.id].match = last
        self.progress[self.id].become_replicate()
        # The empty entry commits everything before it (Figure 8) and lets membership changes and
        # reads start; until it commits, this leader does neither.
        self._append(Entry(NONE, NONE))
        self.pending_conf_index = self.log.last_index()

    def _promotable(self) -> bool:
        return self.id in self.conf.voters

    def _draw_timeout(self) -> int:
        timeout = self.config.election_timeout_ticks
        return self.timeouts.randrange(timeout, timeout + self.config.election_spread_ticks)

    # Ticks.

    def _tick_election(self) -> None:
        self.election_elapsed += 1
        self.ticks_since_leader += 1
        if self._promotable() and self.election_elapsed >= self.randomized_timeout:
            self.election_elapsed = 0
            self._campaign(pre_vote=True)

    def _tick_leader(self) -> None:
        self.ticks_since_leader = 0
        self.heartbeat_elapsed += 1
        self.election_elapsed += 1
        if self.election_elapsed >= self.config.election_timeout_ticks:
            self.election_elapsed = 0
            if not self._quorum_active():
                self._become_follower(self.term, NONE)
                return
        if self.transferee != NONE:
            self.transfer_elapsed += 1
            if self.transfer_elapsed >= self.config.election_timeout_ticks:
                self.transferee = NONE  # a transfer not done within a timeout is dropped
        if self.heartbeat_elapsed >= self.config.heartbeat_interval_ticks:
            self.heartbeat_elapsed = 0
            self._broadcast_heartbeat()

    def _quorum_active(self) -> bool:
        """CheckQuorum: did a quorum of voters answer within the last election timeout?"""
        active = {self.id} | {
            peer for peer, progress in self.progress.items() if progress.recent_active
        }
        for peer, progress in self.progress.items():
            progress.recent_active = peer == self.id
        return len(active & self.conf.voters) >= self._quorum()

    def _quorum(self) -> int:
        return len(self.conf.voters) // 2 + 1

    # Elections.

    def _campaign(self, *, pre_vote: bool, force: bool = False) -> None:
        if not self._promotable():
            return
        if pre_vote:
            self._become_pre_candidate()
            kind, term = MessageKind.PRE_VOTE, self.term + 1
        else:
            self._become_candidate()
            kind, term = MessageKind.VOTE, self.term
        self.votes[self.id] = True
        if self._poll():
            return
        for voter in sorted(self.conf.voters - {self.id}):
            self._send(
                kind,
                voter,
                term=term,
                index=self.log.last_index(),
                log_term=self.log.last_term(),
                force=force,
            )

    def _poll(self) -> bool:
        """Count the votes; act on a won or lost election. True if the election is decided."""
        granted = sum(1 for voter in self.conf.voters if self.votes.get(voter) is True)
        rejected = sum(1 for voter in self.conf.voters if self.votes.get(voter) is False)
        if granted >= self._quorum():
            if self.role is Role.PRE_CANDIDATE:
                self._campaign(pre_vote=False)
            else:
                self._become_leader()
            return True
        if rejected > len(self.conf.voters) - self._quorum():
            self._become_follower(self.term, NONE)
            return True
        return False

    def _handle_vote_request(self, message: Message) -> None:
        pre_vote = message.kind is MessageKind.PRE_VOTE
        response = MessageKind.PRE_VOTE_RESPONSE if pre_vote else MessageKind.VOTE_RESPONSE
        can_vote = (
            self.vote == message.sender
            or (self.vote == NONE and self.leader == NONE)
            or (pre_vote and message.term > self.term)
        )
        if can_vote and self.log.is_up_to_date(message.index, message.log_term):
            # A granted pre-vote answers in the term asked about, so the asker can tell it apart
            # from answers to an older pre-campaign.
            self._send(response, message.sender, term=message.term)
            if not pre_vote:
                self.election_elapsed = 0
                self.vote = message.sender
        else:
            self._send(response, message.sender, reject=True)

    def _step_candidate(self, message: Message) -> None:
        if message.kind in (MessageKind.APPEND, MessageKind.HEARTBEAT, MessageKind.SNAPSHOT):
            # Someone won this term: follow it.
            self._become_follower(self.term, message.sender)
            self._step_follower(message)
            return
        if self.role is Role.CANDIDATE:
            counted = message.kind is MessageKind.VOTE_RESPONSE
        else:
            counted = message.kind is MessageKind.PRE_VOTE_RESPONSE and message.term == (
                self.term if message.reject else self.term + 1
            )
        if counted:
            self.votes.setdefault(message.sender, not message.reject)
            self._poll()

    # Following.

    def _step_follower(self, message: Message) -> None:
        if message.kind in (MessageKind.APPEND, MessageKind.HEARTBEAT, MessageKind.SNAPSHOT):
            self.leader = message.sender
            self.election_elapsed = 0
            self.ticks_since_leader = 0
        if message.kind is MessageKind.APPEND:
            self._handle_append(message)
        elif message.kind is MessageKind.HEARTBEAT:
            self._commit_to(min(message.commit, self.log.last_index()))
            self._send(
                MessageKind.HEARTBEAT_RESPONSE,
                message.sender,
                lease_tick=message.lease_tick,
                context=message.context,
            )
        elif message.kind is MessageKind.SNAPSHOT:
            self._handle_snapshot(message)
        elif message.kind is MessageKind.TIMEOUT_NOW:
            self._campaign(pre_vote=False, force=True)

    def _handle_append(self, message: Message) -> None:
        if message.index < self.log.committed:
            # An old append (reordered or duplicated): everything up to commit matches anyway.
            self._send(MessageKind.APPEND_RESPONSE, message.sender, index=self.log.committed)
            return
        committed = self.log.committed
        last_new = self.log.maybe_append(
            message.index, message.log_term, message.commit, message.entries
        )
        self._committed_advanced(committed)
        if last_new is not None:
            self._send(MessageKind.APPEND_RESPONSE, message.sender, index=last_new)
            return
        hint, hint_term = self.log.find_conflict_by_term(
            min(message.index, self.log.last_index()), message.log_term
        )
        self._send(
            MessageKind.APPEND_RESPONSE,
            message.sender,
            index=message.index,
            reject=True,
            reject_hint=hint,
            log_term=hint_term,
        )

    def _handle_snapshot(self, message: Message) -> None:
        snapshot = message.snapshot
        assert snapshot is not None
        if snapshot.index <= self.log.committed:
            self._send(MessageKind.APPEND_RESPONSE, message.sender, index=self.log.committed)
            return
        if self.log.match_term(snapshot.index, snapshot.term):
            # The log already has the snapshot's last entry: only the commit index moves.
            self._commit_to(snapshot.index)
            self._send(MessageKind.APPEND_RESPONSE, message.sender, index=self.log.committed)
            return
        self.log.restore(snapshot)
        self.conf = snapshot.conf
        self._send(MessageKind.APPEND_RESPONSE, message.sender, index=self.log.last_index())

    # Leading.

    def _check_can_propose(self) -> None:
        if self.role is not Role.LEADER:
            raise NotLeader(self.leader)
        if self.transferee != NONE:
            raise ProposalRefused("leadership is being transferred")

    def _append(self, entry: Entry) -> tuple[int, int]:
        index = self.log.last_index() + 1
        self.log.append([dataclasses.replace(entry, index=index, term=self.term)])
        self.progress[self.id].maybe_update(index)
        # A group of one voter commits at once; otherwise the appends go out with the next Ready.
        self._maybe_commit()
        return index, self.term

    def _flush_appends(self) -> None:
        """Send every follower what it lacks, as far as flow control allows: proposals made since
        the last Ready travel together."""
        if self.role is not Role.LEADER:
            return
        for peer in sorted(self.progress):
            if peer != self.id:
                while self._send_append(peer, send_empty=False):
                    pass

    def _broadcast_append(self) -> None:
        """Send every follower what it lacks, or an empty append carrying the commit index."""
        for peer in sorted(self.progress):
            if peer != self.id and self._send_append(peer):
                while self._send_append(peer, send_empty=False):
                    pass

    def _send_append(self, to: int, *, send_empty: bool = True) -> bool:
        """Send `to` the entries from its `next` on (or a snapshot if they are compacted away).
        False if nothing was sent: paused by flow control, or nothing to send."""
        progress = self.progress[to]
        if progress.is_paused(self.config.inflight_appends_max):
            return False
        if not send_empty and progress.next > self.log.last_index():
            return False
        prev_index = progress.next - 1
        prev_term = self.log.term(prev_index)
        entries = self.log.entries(
            progress.next, self.config.append_entries_max, self.config.append_bytes_max
        )
        if prev_term is None or entries is None:
            return self._send_snapshot(to, progress)
        if not entries and not send_empty:
            return False
        self._send(
            MessageKind.APPEND,
            to,
            index=prev_index,
            log_term=prev_term,
            entries=tuple(entries),
            commit=self.log.committed,
        )
        progress.sent(entries[-1].index if entries else NONE)
        return True

    def _send_snapshot(self, to: int, progress: Progress) -> bool:
        if not progress.recent_active:
            return False  # no snapshot to a follower that may be down: it may be large
        snapshot = self.log.storage.snapshot()
        progress.become_snapshot(snapshot.index, self.now)
        self._send(MessageKind.SNAPSHOT, to, snapshot=snapshot)
        return True

    def _broadcast_heartbeat(self) -> None:
        # The newest read waiting for confirmation rides along; its acks confirm all before it.
        context = self.pending_reads[-1].context if self.pending_reads else NONE
        for peer in sorted(self.progress):
            if peer != self.id:
                self._send(
                    MessageKind.HEARTBEAT,
                    peer,
                    commit=min(self.progress[peer].match, self.log.committed),
                    lease_tick=self.now,
                    context=context,
                )

    def _send_timeout_now(self, to: int) -> None:
        self.lease_given_up = True  # the forced election does not wait for this lease to end
        self._send(MessageKind.TIMEOUT_NOW, to)

    def _step_leader(self, message: Message) -> None:
        progress = self.progress.get(message.sender)
        if progress is None:
            return  # not a member (any more)
        if message.kind is MessageKind.APPEND_RESPONSE:
            progress.recent_active = True
            self._handle_append_response(message, progress)
        elif message.kind is MessageKind.HEARTBEAT_RESPONSE:
            progress.recent_active = True
            self._handle_heartbeat_response(message, progress)

    def _handle_append_response(self, message: Message, progress: Progress) -> None:
        if message.reject:
            hint = message.reject_hint
            if message.log_term != NONE:
                # Skip this leader's entries of terms after the follower's entry at the hint.
                hint, _ = self.log.find_conflict_by_term(hint, message.log_term)
            if progress.maybe_decrease_to(message.index, hint):
                if progress.state is ProgressState.REPLICATE:
                    progress.become_probe()
                self._send_append(message.sender)
            return
        was_paused = progress.is_paused(self.config.inflight_appends_max)
        if not progress.maybe_update(message.index):
            return
        if progress.state is ProgressState.PROBE:
            progress.become_replicate()
        elif progress.state is ProgressState.SNAPSHOT:
            if progress.match >= progress.pending_snapshot:
                progress.become_probe()
                progress.become_replicate()
        else:
            progress.acknowledged(message.index)
        if self._maybe_commit():
            # Tell every follower the new commit index now, not at the next heartbeat (etcd's
            # bcastAppend): they apply a round trip after the leader, which is what their
            # eventually consistent reads, and a reader's own writes, rely on.
            self._broadcast_append()
        elif was_paused:
            self._send_append(message.sender)
        if message.sender == self.transferee and progress.match == self.log.last_index():
            self._send_timeout_now(message.sender)

    def _handle_heartbeat_response(self, message: Message, progress: Progress) -> None:
        progress.probe_sent = False
        if progress.state is ProgressState.SNAPSHOT:
            if self.now - progress.snapshot_sent_tick >= self.config.election_timeout_ticks:
                progress.pending_snapshot = NONE  # presumed lost: probe again, resend if needed
                progress.become_probe()
        elif (
            progress.state is ProgressState.REPLICATE
            and len(progress.inflight) >= self.config.inflight_appends_max
        ):
            # The follower is alive but acknowledges nothing: appends were lost. Let one more
            # through; its rejection sends the follower back to probing.
            progress.inflight.popleft()
        if progress.match < self.log.last_index():
            self._send_append(message.sender)
        if message.lease_tick > progress.lease_tick:
            progress.lease_tick = message.lease_tick
            self._extend_lease()
        if message.context != NONE:
            self._read_acknowledged(message.context, message.sender)

    def _maybe_commit(self) -> bool:
        matches = sorted((self.progress[voter].match for voter in self.conf.voters), reverse=True)
        index = matches[self._quorum() - 1]
        # Figure 8: only an entry of this leader's term is committed by counting replicas.
        if index <= self.log.committed or self.log.term(index) != self.term:
            return False
        committed = self.log.committed
        self.log.commit_to(index)
        self._committed_advanced(committed)
        return True

    # Commit, membership.

    def _commit_to(self, index: int) -> None:
        committed = self.log.committed
        self.log.commit_to(index)
        self._committed_advanced(committed)

    def _committed_advanced(self, previous: int) -> None:
        """Entries in (previous, committed] just committed: adopt the memberships they carry; a
        leader's first commit in its term lets the strong reads that waited for it go ahead."""
        if self.log.committed <= previous:
            return
        conf_changed = False
        for index in range(previous + 1, self.log.committed + 1):
            entry = self.log.entry(index)
            if entry.conf is not None:
                self._apply_conf(entry.conf)
                conf_changed = True
        if self.role is Role.LEADER and conf_changed:
            self._maybe_commit()  # a smaller quorum may commit more at once
        if self.role is Role.LEADER and self.committed_in_term():
            waiting, self.reads_waiting_for_commit = self.reads_waiting_for_commit, []
            for context in waiting:
                self._start_read(context)

    def _adopt_committed_confs(self, after: int) -> None:
        """At start: the membership is the snapshot's, then that of committed entries after it."""
        for index in range(after + 1, self.log.committed + 1):
            entry = self.log.entry(index)
            if entry.conf is not None:
                self.conf = entry.conf

    def _apply_conf(self, conf: ConfState) -> None:
        self.conf = conf
        if self.role is not Role.LEADER:
            return
        if self.id not in conf.voters:
            # This leader removed (or demoted) itself: the rest elect a new leader.
            self._become_follower(self.term, NONE)
            return
        for member in conf.members:
            if member not in self.progress:
                self.progress[member] = Progress(self.log.last_index() + 1, learner=True)
                self.progress[member].recent_active = True
            self.progress[member].learner = member in conf.learners
        for gone in set(self.progress) - conf.members:
            del self.progress[gone]
        if self.transferee not in conf.voters:
            self.transferee = NONE

    # Strong reads.

    def committed_in_term(self) -> bool:
        """Whether an entry of this node's term is committed: at a leader, its commit index then
        covers every entry any earlier leader committed (the paper's 5.4.2; etcd's
        committedEntryInCurrentTerm)."""
        return self.log.term(self.log.committed) == self.term

    def _start_read(self, context: int) -> None:
        index = self.log.committed
        if self.config.lease_reads and self.lease_valid():
            self.read_states.append(ReadState(context, index, ReadVia.LEASE))
        elif self.conf.voters == {self.id}:
            self.read_states.append(ReadState(context, index, ReadVia.READ_INDEX))
        else:
            self.pending_reads.append(_PendingRead(context, index, {self.id}))
            self._broadcast_heartbeat()

    def _read_acknowledged(self, context: int, voter: int) -> None:
        position = next(
            (at for at, read in enumerate(self.pending_reads) if read.context == context), None
        )
        if position is None or voter not in self.conf.voters:
            return
        read = self.pending_reads[position]
        read.acks.add(voter)
        if len(read.acks & self.conf.voters) < self._quorum():
            return
        # The quorum acknowledged a heartbeat sent after every earlier pending read arrived, so
        # it confirms them too.
        for done in self.pending_reads[: position + 1]:
            self.read_states.append(ReadState(done.context, done.index, ReadVia.READ_INDEX))
        del self.pending_reads[: position + 1]

    def _extend_lease(self) -> None:
        rounds = sorted(
            (
                self.now if voter == self.id else self.progress[voter].lease_tick
                for voter in self.conf.voters
            ),
            reverse=True,
        )
        granted = rounds[self._quorum() - 1]
        # Rounds sent less than an election timeout after this leader was elected may overlap an
        # older leader's lease; they grant none (the module docstring).
        if granted < self.became_leader_tick + self.config.election_timeout_ticks:
            return
        end = granted + self.config.election_timeout_ticks - self.config.max_clock_drift_ticks
        self.lease_end = max(self.lease_end, end)

    # Messages.

    def _send(
        self,
        kind: MessageKind,
        to: int,
        *,
        term: int | None = None,
        index: int = NONE,
        log_term: int = NONE,
        entries: tuple[Entry, ...] = (),
        commit: int = NONE,
        reject: bool = False,
        reject_hint: int = NONE,
        snapshot: Snapshot | None = None,
        lease_tick: int = NONE,
        context: int = NONE,
        force: bool = False,
    ) -> None:
        self.messages.append(
            Message(
                kind=kind,
                sender=self.id,
                to=to,
                term=self.term if term is None else term,
                index=index,
                log_term=log_term,
                entries=entries,
                commit=commit,
                reject=reject,
                reject_hint=reject_hint,
                snapshot=snapshot,
                lease_tick=lease_tick,
                context=context,
                force=force,
            )
        )
