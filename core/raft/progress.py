"""What a leader knows about each follower's log, and how fast it may send to it (flow control).

A follower is in one of three states (etcd's `tracker/progress.go` calls them the same):

- PROBE: the leader does not know where the follower's log matches its own. It sends one append at
  a time and waits for the answer (or the next heartbeat's) before sending another, stepping back
  on each rejection.
- REPLICATE: the logs match up to `match`; the leader streams appends optimistically, advancing
  `next` as it sends, with at most `inflight_max` appends unacknowledged.
- SNAPSHOT: the entries the follower needs are compacted away; a snapshot is on its way and the
  leader sends nothing else until it is acknowledged (or presumed lost after an election timeout).
"""

from __future__ import annotations

import collections
import enum

from core.raft.messages import NONE


class ProgressState(enum.Enum):
    PROBE = "probe"
    REPLICATE = "replicate"
    SNAPSHOT = "snapshot"


class Progress:
    def __init__(self, next_index: int, *, learner: bool) -> None:
        self.match = NONE
        self.next = next_index
        self.state = ProgressState.PROBE
        self.learner = learner
        self.probe_sent = False  # PROBE: an append is out; wait for its answer or a heartbeat's.
        self.pending_snapshot = NONE  # SNAPSHOT: the index of the snapshot sent.
        self.snapshot_sent_tick = NONE
        # The last index of each unacknowledged append, oldest first (REPLICATE only).
        self.inflight: collections.deque[int] = collections.deque()
        # Whether the follower answered since the leader's last quorum check (CheckQuorum).
        self.recent_active = False
        # The newest lease round (the leader's tick when it sent a heartbeat) the follower acked.
        self.lease_tick = NONE

    def __repr__(self) -> str:
        return f"Progress({self.state.value}, match={self.match}, next={self.next})"

    def become_probe(self) -> None:
        # After a snapshot, resume just past it; otherwise just past what is known to match.
        next_index = max(self.match + 1, self.pending_snapshot + 1)
        self._reset(ProgressState.PROBE)
        self.next = next_index

    def become_replicate(self) -> None:
        self._reset(ProgressState.REPLICATE)
        self.next = self.match + 1

    def become_snapshot(self, index: int, tick: int) -> None:
        self._reset(ProgressState.SNAPSHOT)
        self.pending_snapshot = index
        self.snapshot_sent_tick = tick

    def _reset(self, state: ProgressState) -> None:
        self.state = state
        self.probe_sent = False
        self.pending_snapshot = NONE
        self.inflight.clear()

    def maybe_update(self, index: int) -> bool:
        """The follower matches up to `index`; False if that is old news (a late or duplicate
        answer)."""
        updated = index > self.match
        if updated:
            self.match = index
            self.probe_sent = False
        self.next = max(self.next, index + 1)
        return updated

    def maybe_decrease_to(self, rejected: int, hint: int) -> bool:
        """The follower rejected the append after `rejected`; its log can only match at or before
        `hint`. False if the rejection is stale (an answer to an append sent before a newer one)."""
        if self.state is ProgressState.REPLICATE:
            if rejected <= self.match:
                return False
            # Appends were lost or reordered: go back to just past what is known to match.
            self.next = self.match + 1
            return True
        if self.next - 1 != rejected:
            return False
        self.next = max(min(rejected, hint + 1), self.match + 1)
        self.probe_sent = False
        return True

    def is_paused(self, inflight_max: int) -> bool:
        if self.state is ProgressState.PROBE:
            return self.probe_sent
        if self.state is ProgressState.REPLICATE:
            return len(self.inflight) >= inflight_max
        return True

    def sent(self, last_index: int) -> None:
        """An append carrying entries up to `last_index` (NONE if empty) went out."""
        if self.state is ProgressState.REPLICATE and last_index != NONE:
            self.next = last_index + 1
            self.inflight.append(last_index)
        elif self.state is ProgressState.PROBE:
            self.probe_sent = True

    def acknowledged(self, index: int) -> None:
        """Appends up to `index` arrived: they no longer count as in flight."""
        while self.inflight and self.inflight[0] <= index:
            self.inflight.popleft()
