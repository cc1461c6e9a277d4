"""The values Raft nodes exchange and hand to their caller: entries, messages, snapshots, Ready.

Everything here is a frozen value. A node never mutates what it has handed out, and a caller may
keep, send or persist any of them as they are (step 2 of issue 27 gives them a wire encoding).
"""

from __future__ import annotations

import dataclasses
import enum

# A term or an index of 0 means "none": the log's first entry has index 1, the first term is 1.
NONE = 0


class Role(enum.Enum):
    FOLLOWER = "follower"
    # PreVote (thesis 9.6): a node that wants to campaign first asks whether it could win, without
    # raising its term, so a node that was cut off cannot force a working leader to step down.
    PRE_CANDIDATE = "pre-candidate"
    CANDIDATE = "candidate"
    LEADER = "leader"


class EntryKind(enum.Enum):
    NORMAL = "normal"  # `data` is the application's command (empty: a new leader's no-op).
    CONF = "conf"  # `conf` is the whole membership from this entry on (see `node` on why whole).


@dataclasses.dataclass(frozen=True)
class ConfState:
    """A group's membership: voters elect and commit; learners receive the log and do neither."""

    voters: frozenset[int]
    learners: frozenset[int] = frozenset()

    def __post_init__(self) -> None:
        assert not self.voters & self.learners, "a member is either a voter or a learner"

    @property
    def members(self) -> frozenset[int]:
        return self.voters | self.learners


@dataclasses.dataclass(frozen=True)
class Entry:
    index: int
    term: int
    kind: EntryKind = EntryKind.NORMAL
    data: bytes = b""
    conf: ConfState | None = None

    def __post_init__(self) -> None:
        assert (self.kind is EntryKind.CONF) == (self.conf is not None)

    @property
    def size_bytes(self) -> int:
        return len(self.data)


@dataclasses.dataclass(frozen=True)
class HardState:
    """What a node must have on disk before it sends any message that depends on it: the term it
    is in, whom it voted for in that term, and how far it knows the log to be committed."""

    term: int = NONE
    vote: int = NONE
    commit: int = NONE


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """The application's state after applying every entry up to `index`, with the membership then.
    It replaces that prefix of the log: the log keeps only what follows it."""

    index: int
    term: int
    conf: ConfState
    data: bytes = b""


class MessageKind(enum.Enum):
    APPEND = "append"  # entries after (index, log_term), and the leader's commit index
    APPEND_RESPONSE = "append-response"  # index: the last index now matching, or the rejected one
    HEARTBEAT = "heartbeat"  # commit, plus a lease round (lease_tick) and a read-index context
    HEARTBEAT_RESPONSE = "heartbeat-response"
    VOTE = "vote"
    VOTE_RESPONSE = "vote-response"
    PRE_VOTE = "pre-vote"
    PRE_VOTE_RESPONSE = "pre-vote-response"
    SNAPSHOT = "snapshot"  # InstallSnapshot, answered by an APPEND_RESPONSE
    TIMEOUT_NOW = "timeout-now"  # leader transfer: "campaign now, even though you hear me"


@dataclasses.dataclass(frozen=True)
class Message:
    kind: MessageKind
    sender: int
    to: int
    term: int
    # APPEND: the entry just before `entries`. VOTE / PRE_VOTE: the candidate's last entry.
    # APPEND_RESPONSE: the last matching index, or (reject) the `index` of the rejected append.
    index: int = NONE
    log_term: int = NONE
    entries: tuple[Entry, ...] = ()
    commit: int = NONE
    reject: bool = False
    # A rejected append's hint: the follower's last index whose term is at most the leader's
    # `log_term` (with `log_term` set to that entry's term), so the leader skips a whole term of
    # conflicting entries per round trip instead of one entry (the paper's section 5.3 remark).
    reject_hint: int = NONE
    snapshot: Snapshot | None = None
    # HEARTBEAT and its response: the leader's tick when it sent the heartbeat (the lease round
    # it starts), and the newest read-index request it confirms leadership for.
    lease_tick: int = NONE
    context: int = NONE
    # VOTE after a leader transfer: the voter grants it even though it hears a leader.
    force: bool = False


class ReadVia(enum.Enum):
    LEASE = "lease"  # served under the leader's lease, without a round trip
    READ_INDEX = "read-index"  # a quorum confirmed the leader after the read arrived
    UNCHECKED = "unchecked"  # only with the planted bug: neither, which is unsafe


@dataclasses.dataclass(frozen=True)
class ReadState:
    """A strong read may be answered once the application has applied up to `index`."""

    context: int
    index: int
    via: ReadVia


@dataclasses.dataclass(frozen=True)
class Ready:
    """What the caller must do now, in this order: persist `snapshot`, `entries` and `hard_state`
    (one atomic, synced write), then send `messages`, then apply `snapshot` and `committed_entries`
    to the state machine, answer `read_states` once applied far enough, then call `advance`."""

    role: Role
    leader: int
    hard_state: HardState | None
    entries: tuple[Entry, ...]
    snapshot: Snapshot | None
    committed_entries: tuple[Entry, ...]
    messages: tuple[Message, ...]
    read_states: tuple[ReadState, ...]


class NotLeader(Exception):
    """A proposal or a strong read reached a node that is not the leader; `leader` is the leader it
    knows of (NONE if it knows none), where the caller should retry."""

    def __init__(self, leader: int) -> None:
        super().__init__(f"not the leader; the leader is {leader or 'unknown'}")
        self.leader = leader


class ProposalRefused(Exception):
    """The leader cannot take this proposal now (a membership change while another is pending,
    or a transfer of leadership under way); the caller may retry later."""


class ConfChangeKind(enum.Enum):
    ADD_LEARNER = "add-learner"
    PROMOTE = "promote"  # a learner (caught up, the caller's judgement) becomes a voter
    REMOVE = "remove"


@dataclasses.dataclass(frozen=True)
class ConfChange:
    """One membership change: a move is ADD_LEARNER, catch up, PROMOTE, then REMOVE the old one."""

    kind: ConfChangeKind
    node: int

    def applied_to(self, conf: ConfState) -> ConfState:
        """The membership after this change, or ProposalRefused if it does not apply to `conf`."""
        if self.kind is ConfChangeKind.ADD_LEARNER:
            if self.node in conf.members:
                raise ProposalRefused(f"{self.node} is already a member")
            return ConfState(conf.voters, conf.learners | {self.node})
        if self.kind is ConfChangeKind.PROMOTE:
            if self.node not in conf.learners:
                raise ProposalRefused(f"{self.node} is not a learner")
            return ConfState(conf.voters | {self.node}, conf.learners - {self.node})
        if self.node not in conf.members:
            raise ProposalRefused(f"{self.node} is not a member")
        if conf.voters == {self.node}:
            raise ProposalRefused("the last voter cannot be removed")
        return ConfState(conf.voters - {self.node}, conf.learners - {self.node})
