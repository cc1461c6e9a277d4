"""Raft, as a pure core: one group member as a state machine, messages and ticks in, Ready out.

No IO, no clock, no randomness: the caller persists, sends, applies and ticks (issue 27). The
modules, in reading order:

- `messages`: the values exchanged and handed out (Entry, Message, Snapshot, Ready, ConfChange).
- `storage`: the `Storage` protocol a node reads its durable log from; `MemoryStorage` for tests.
- `log`: a node's view of its log, persisted and not yet persisted; commit and applied indexes.
- `progress`: what a leader knows of each follower, and its flow control (probe, replicate).
- `node`: `RaftNode` itself: elections with PreVote and CheckQuorum, replication, commit,
  leases and read-index reads, snapshots, single-server membership changes, leader transfer.
"""

from core.raft.messages import (
    NONE,
    ConfChange,
    ConfChangeKind,
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
from core.raft.node import Config, RaftNode, TimeoutSource
from core.raft.storage import Compacted, MemoryStorage, Storage

__all__ = [
    "NONE",
    "Compacted",
    "ConfChange",
    "ConfChangeKind",
    "ConfState",
    "Config",
    "Entry",
    "EntryKind",
    "HardState",
    "MemoryStorage",
    "Message",
    "MessageKind",
    "NotLeader",
    "ProposalRefused",
    "RaftNode",
    "ReadState",
    "ReadVia",
    "Ready",
    "Role",
    "Snapshot",
    "Storage",
    "TimeoutSource",
]
