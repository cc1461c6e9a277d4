"""A Raft group in one process, for tests: nodes with their "disks", an application, a checker.

`SimNode` plays one process: a `RaftNode`, the `MemoryStorage` that survives its crashes, and a
key-value application that applies committed entries, takes snapshots and answers strong reads.
`Checker` holds what is globally true and asserts the Raft invariants each time a node hands out
a Ready or changes role: one leader per term, log matching, leader completeness, state machine
safety, committed entries never lost, and linearizable strong reads. `Cluster` drives nodes by
hand (deliver, cut links, crash, restart, tick) for the focused tests; `simulator.Simulation`
drives them from one seed.

Entries of the application: ``b"<op id> <key> <value>"``, so every written value is unique and a
read's answer names the write it saw.
"""

from __future__ import annotations

import dataclasses
import json
import random

from core.raft import (
    NONE,
    Config,
    ConfState,
    Entry,
    EntryKind,
    MemoryStorage,
    Message,
    NotLeader,
    RaftNode,
    ReadState,
    Ready,
    Role,
    Snapshot,
)


class InvariantViolated(AssertionError):
    pass


@dataclasses.dataclass
class Write:
    op: int
    node: int
    key: str
    value: str
    started: int
    index: int = NONE
    term: int = NONE
    acked_at: int | None = None


@dataclasses.dataclass
class Read:
    op: int
    node: int
    key: str
    started: int
    # The highest index of a write acknowledged before this read started: the read must see it.
    floor: int
    index: int = NONE  # the ReadState's index, once the leader gave it
    served_at: int | None = None
    value: str | None = None
    via: str = ""


def entry_payload(entry: Entry) -> object:
    """What identifies an entry's content (two entries at one index agree iff these are equal)."""
    if entry.kind is EntryKind.CONF:
        return ("conf", sorted(entry.conf.voters if entry.conf else ()), entry.conf)
    return ("normal", entry.data)


class Checker:
    """The global truth of one run, and the invariants checked against it."""

    def __init__(self) -> None:
        self.leaders: dict[int, int] = {}  # term -> the one leader of that term
        self.completeness_checked: set[tuple[int, int]] = set()  # (leader, term)
        # (index, term) -> (payload, term of the entry before): log matching, inductively.
        self.entries: dict[tuple[int, int], tuple[object, int]] = {}
        self.committed: dict[int, tuple[int, object]] = {}  # index -> (term, payload)
        self.acked_index_max = NONE
        self.writes: dict[int, Write] = {}
        self.reads: list[Read] = []

    def fail(self, what: str) -> None:
        raise InvariantViolated(what)

    def saw_role(self, node: RaftNode) -> None:
        if node.role is not Role.LEADER:
            return
        leader = self.leaders.setdefault(node.term, node.id)
        if leader != node.id:
            self.fail(f"two leaders in term {node.term}: {leader} and {node.id}")
        if (node.id, node.term) in self.completeness_checked:
            return
        self.completeness_checked.add((node.id, node.term))
        # Leader completeness: a new leader's log holds every entry committed so far.
        first = node.log.first_index()
        for index, (term, _payload) in self.committed.items():
            if index >= first and node.log.term(index) != term:
                self.fail(f"leader {node.id} of term {node.term} lacks committed entry {index}")

    def saw_entries(self, node: RaftNode, entries: tuple[Entry, ...]) -> None:
        for entry in entries:
            previous = node.log.term(entry.index - 1)
            assert previous is not None
            key = (entry.index, entry.term)
            seen = (entry_payload(entry), previous)
            if self.entries.setdefault(key, seen) != seen:
                self.fail(f"log matching: node {node.id}'s entry {key} differs from another's")
            # A committed entry is never lost: a node that persisted it never replaces it. (A
            # deposed leader that never had it may still append another entry at its index.)
            committed = self.committed.get(entry.index)
            storage = node.log.storage
            if (
                committed is not None
                and committed[0] != entry.term
                and storage.first_index() <= entry.index <= storage.last_index()
                and storage.term(entry.index) == committed[0]
            ):
                self.fail(f"node {node.id} overwrote committed entry {entry.index}")

    def saw_commit(self, node: RaftNode, previous: int, commit: int) -> None:
        first = node.log.first_index()
        for index in range(max(previous + 1, first), commit + 1):
            self.record_committed(node.id, node.log.entry(index))

    def record_committed(self, node: int, entry: Entry) -> None:
        found = (entry.term, entry_payload(entry))
        if self.committed.setdefault(entry.index, found) != found:
            self.fail(f"state machine safety: node {node} commits another entry at {entry.index}")

    def saw_snapshot(self, node: int, snapshot: Snapshot) -> None:
        committed = self.committed.get(snapshot.index)
        if committed is not None and committed[0] != snapshot.term:
            self.fail(f"node {node} installs a snapshot that contradicts entry {snapshot.index}")

    def acked(self, write: Write, now: int) -> None:
        write.acked_at = now
        self.acked_index_max = max(self.acked_index_max, write.index)

    def served(self, read: Read, applied: int, value: str | None) -> None:
        """A strong read answered from the state after `applied`: linearizable iff that state
        includes every write acknowledged before the read started, and it is the committed
        history's state there."""
        self.reads.append(read)
        if applied < read.floor:
            self.fail(
                f"stale read: op {read.op} on node {read.node} ({read.via}) saw index {applied}, "
                f"but index {read.floor} was acknowledged before it started"
            )
        expected = self.value_at(read.key, applied)
        if value != expected:
            self.fail(f"read op {read.op} saw {value!r}, the history has {expected!r}")

    def value_at(self, key: str, index: int) -> str | None:
        for at in range(index, 0, -1):
            committed = self.committed.get(at)
            if committed is None:
                continue
            payload = committed[1]
            if isinstance(payload, tuple) and payload[0] == "normal" and payload[1]:
                _op, written_key, value = payload[1].decode().split(" ")
                if written_key == key:
                    return str(value)
        return None


class SimNode:
    """One process: its Raft node (gone while crashed), its disk, its key-value application."""

    def __init__(self, config: Config, conf: ConfState, seed: int, checker: Checker) -> None:
        self.id = config.node_id
        self.config = config
        self.checker = checker
        self.storage = MemoryStorage(conf)
        self.rng = random.Random(seed)
        self.raft: RaftNode | None = None
        self.snapshot_every = 0  # entries applied between snapshots; 0: never
        self.start()

    @property
    def up(self) -> bool:
        return self.raft is not None

    def start(self) -> None:
        """Start (again) from what the disk holds; the application restores its snapshot."""
        self.raft = RaftNode(self.config, self.storage, self.rng)
        snapshot = self.storage.snapshot()
        self.kv: dict[str, str] = json.loads(snapshot.data) if snapshot.data else {}
        self.conf = snapshot.conf
        self.applied = snapshot.index
        self.committed_seen = self.storage.hard_state.commit
        self.proposals: dict[int, Write] = {}  # index -> the write proposed here
        self.waiting_reads: dict[int, Read] = {}  # context -> read sent to read_index
        self.ready_reads: list[Read] = []  # reads waiting for the application to catch up

    def crash(self) -> None:
        """Everything not persisted by a handled Ready is lost with the process."""
        self.raft = None

    def node(self) -> RaftNode:
        assert self.raft is not None, f"node {self.id} is down"
        return self.raft

    def propose(self, write: Write) -> None:
        index, term = self.node().propose(f"{write.op} {write.key} {write.value}".encode())
        write.index, write.term = index, term
        self.proposals[index] = write

    def read(self, read: Read) -> None:
        self.node().read_index(read.op)
        self.waiting_reads[read.op] = read

    def handle_ready(self, now: int) -> list[Message]:
        """Take one Ready, check it, do what it asks; returns the messages to send."""
        raft = self.node()
        self.checker.saw_role(raft)
        if not raft.has_ready():
            return []
        ready = raft.ready()
        self.checker.saw_entries(raft, ready.entries)
        if ready.hard_state is not None and ready.hard_state.commit > self.committed_seen:
            self.checker.saw_commit(raft, self.committed_seen, ready.hard_state.commit)
            self.committed_seen = ready.hard_state.commit
        self._persist(ready)
        self._apply(ready, now)
        raft.advance(ready)
        self._serve_reads(now)
        self._maybe_snapshot()
        return list(ready.messages)

    def _persist(self, ready: Ready) -> None:
        if ready.snapshot is not None:
            self.checker.saw_snapshot(self.id, ready.snapshot)
            self.storage.apply_snapshot(ready.snapshot)
        self.storage.append(ready.entries)
        if ready.hard_state is not None:
            self.storage.set_hard_state(ready.hard_state)

    def _apply(self, ready: Ready, now: int) -> None:
        if ready.snapshot is not None:
            self.kv = json.loads(ready.snapshot.data) if ready.snapshot.data else {}
            self.conf = ready.snapshot.conf
            self.applied = ready.snapshot.index
            self.committed_seen = max(self.committed_seen, ready.snapshot.index)
            self.proposals = {i: w for i, w in self.proposals.items() if i > self.applied}
        for entry in ready.committed_entries:
            assert entry.index == self.applied + 1, "entries applied in order, once"
            self.checker.record_committed(self.id, entry)
            if entry.conf is not None:
                self.conf = entry.conf
            elif entry.data:
                _op, key, value = entry.data.decode().split(" ")
                self.kv[key] = value
            self.applied = entry.index
            write = self.proposals.pop(entry.index, None)
            if write is not None and write.term == entry.term:
                self.checker.acked(write, now)
        for state in ready.read_states:
            self._read_state(state)

    def _read_state(self, state: ReadState) -> None:
        read = self.waiting_reads.pop(state.context, None)
        if read is not None:
            read.index = state.index
            read.via = state.via.value
            self.ready_reads.append(read)

    def _serve_reads(self, now: int) -> None:
        waiting = []
        for read in self.ready_reads:
            if read.index <= self.applied:
                read.served_at = now
                read.value = self.kv.get(read.key)
                self.checker.served(read, self.applied, read.value)
            else:
                waiting.append(read)
        self.ready_reads = waiting

    def _maybe_snapshot(self) -> None:
        first = self.storage.first_index()
        if self.snapshot_every and self.applied - first + 1 >= self.snapshot_every:
            data = json.dumps(self.kv, sort_keys=True).encode()
            self.storage.create_snapshot(self.applied, self.conf, data)
            # Keep a few entries before the snapshot: a follower a little behind gets those.
            self.storage.compact(max(first - 1, self.applied - 2))


class Cluster:
    """A group driven by hand: messages wait in `in_flight` until delivered; links can be cut."""

    def __init__(
        self,
        voters: int = 3,
        *,
        spares: int = 0,
        seed: int = 0,
        config: dict[str, object] | None = None,
    ) -> None:
        self.checker = Checker()
        conf = ConfState(frozenset(range(1, voters + 1)))
        self.nodes = {
            node_id: SimNode(
                Config(node_id=node_id, **(config or {})),  # type: ignore[arg-type]
                conf,
                seed * 100 + node_id,
                self.checker,
            )
            for node_id in range(1, voters + spares + 1)
        }
        self.in_flight: list[Message] = []
        self.cut: set[frozenset[int]] = set()
        self.now = 0
        self.ops = 0

    def raft(self, node_id: int) -> RaftNode:
        return self.nodes[node_id].node()

    def process(self, node_id: int) -> None:
        node = self.nodes[node_id]
        while node.up and node.node().has_ready():
            self.in_flight.extend(node.handle_ready(self.now))
        if node.up:
            self.checker.saw_role(node.node())

    def tick(self, *node_ids: int, times: int = 1) -> None:
        for _ in range(times):
            self.now += 1
            for node_id in node_ids or tuple(self.nodes):
                if self.nodes[node_id].up:
                    self.raft(node_id).tick()
                    self.process(node_id)

    def linked(self, a: int, b: int) -> bool:
        return frozenset((a, b)) not in self.cut

    def deliver(self, rounds_max: int = 1000) -> None:
        """Deliver messages until none is left (over cut links they are lost)."""
        for _ in range(rounds_max):
            if not self.in_flight:
                return
            self.deliver_round()
        raise AssertionError("messages still flowing after many rounds")

    def deliver_round(self) -> None:
        """Deliver the messages in flight now; their answers wait for the next round."""
        messages, self.in_flight = self.in_flight, []
        for message in messages:
            node = self.nodes[message.to]
            if node.up and self.linked(message.sender, message.to):
                node.node().step(message)
                self.process(message.to)

    def isolate(self, node_id: int) -> None:
        for other in self.nodes:
            if other != node_id:
                self.cut.add(frozenset((node_id, other)))

    def heal(self) -> None:
        self.cut = set()

    def crash(self, node_id: int) -> None:
        self.nodes[node_id].crash()

    def restart(self, node_id: int) -> None:
        self.nodes[node_id].start()
        self.process(node_id)

    def leader(self) -> int:
        leaders = [
            n for n, node in self.nodes.items() if node.up and node.node().role is Role.LEADER
        ]
        assert leaders, "no leader"
        return max(leaders, key=lambda n: self.raft(n).term)

    def elect(self, node_id: int, ticks_max: int = 200) -> None:
        """Tick every node until `node_id` wins an election: its timeout is made the shortest and
        every other node's too long to matter (each draws a new one when its role changes)."""
        for other, node in self.nodes.items():
            if node.up:
                node.node().randomized_timeout = ticks_max if other != node_id else 1
        for _ in range(ticks_max):
            self.tick()
            self.deliver()
            if self.raft(node_id).role is Role.LEADER:
                return
        raise AssertionError(f"node {node_id} did not become leader")

    def settle(self, ticks: int = 30) -> None:
        for _ in range(ticks):
            self.tick()
            self.deliver()

    def write(self, node_id: int, key: str, value: str) -> Write:
        self.ops += 1
        write = Write(self.ops, node_id, key, value, self.now)
        self.checker.writes[write.op] = write
        self.nodes[node_id].propose(write)
        self.process(node_id)
        return write

    def read(self, node_id: int, key: str) -> Read:
        self.ops += 1
        read = Read(self.ops, node_id, key, self.now, self.checker.acked_index_max)
        self.nodes[node_id].read(read)
        self.process(node_id)
        return read


__all__ = ["Checker", "Cluster", "InvariantViolated", "NotLeader", "Read", "SimNode", "Write"]
