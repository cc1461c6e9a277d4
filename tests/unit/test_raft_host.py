"""The multi-raft host (`storagenode.raft_host`) with real RocksDB stores: three hosts in one
process over an in-memory network that drops and reorders, many groups of a small replicated
key-value state machine, elections, proposals, a host crash and restart; hibernation; and one
synced commit per round whatever the number of groups.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from concurrent.futures import Future
from pathlib import Path

import orjson
import pytest

from core.raft import Config, ConfState, Entry, Message, NotLeader, Role, Snapshot
from storagenode.layout import Family, raft_group_prefix
from storagenode.raft_host import (
    OutcomeUnknown,
    RaftHost,
    group_id,
    member_id,
    node_name,
)
from storagenode.raft_storage import RaftLogStorage
from storagenode.store import Store, WriteBatchView

MEMBERS = (1, 2, 3)


class CountingStore(Store):
    commits = 0

    def commit(self, batch: WriteBatchView) -> None:
        self.commits += 1
        super().commit(batch)


class KeyValue:
    """A replicated key-value map: an entry is b"<op> <key> <value>". Its state lives in the
    store (`items`, under the group's prefix), written in the round's batch; it counts how many
    times each op was applied, which must be once."""

    def __init__(self, store: Store, group: str) -> None:
        self.prefix = b"kv" + raft_group_prefix(group)
        self.kv: dict[str, str] = {}
        self.ops: dict[int, int] = {}
        self.first_applied: int | None = None  # the first entry handed over since opening
        self.restored = 0
        for key, value in store.walk(
            Family.ITEMS, self.prefix, self.prefix + b"\xff", forward=True
        ):
            kind, name = key[len(self.prefix) : len(self.prefix) + 1], key[len(self.prefix) + 1 :]
            if kind == b"k":
                self.kv[name.decode()] = value.decode()
            else:
                self.ops[int(name)] = int(value)

    def apply(self, entries: Sequence[Entry], batch: WriteBatchView) -> None:
        if self.first_applied is None:
            self.first_applied = entries[0].index
        for entry in entries:
            if not entry.data:
                continue
            op, key, value = entry.data.decode().split(" ")
            self.kv[key] = value
            self.ops[int(op)] = self.ops.get(int(op), 0) + 1
            batch.put(Family.ITEMS, self.prefix + b"k" + key.encode(), value.encode())
            batch.put(
                Family.ITEMS, self.prefix + b"o" + op.encode(), str(self.ops[int(op)]).encode()
            )

    def snapshot(self) -> bytes:
        return orjson.dumps({"kv": self.kv, "ops": {str(k): v for k, v in self.ops.items()}})

    def restore(self, snapshot: Snapshot, batch: WriteBatchView) -> None:
        state = orjson.loads(snapshot.data)
        self.restored += 1
        batch.delete_range(Family.ITEMS, self.prefix, self.prefix + b"\xff")
        self.kv = dict(state["kv"])
        self.ops = {int(k): v for k, v in state["ops"].items()}
        for key, value in self.kv.items():
            batch.put(Family.ITEMS, self.prefix + b"k" + key.encode(), value.encode())
        for op, count in self.ops.items():
            batch.put(Family.ITEMS, self.prefix + b"o" + str(op).encode(), str(count).encode())


class Network:
    """Batches between hosts wait in flight; each delivery shuffles them and drops some."""

    def __init__(self, rng: random.Random, drop: float) -> None:
        self.rng = rng
        self.drop = drop
        self.hosts: dict[int, RaftHost] = {}
        self.in_flight: list[tuple[int, int, list[tuple[str, Message]]]] = []
        self.cut: set[int] = set()  # hosts whose links are all down

    def link(self, sender: int) -> Link:
        return Link(self, sender)

    def deliver(self) -> None:
        batches, self.in_flight = self.in_flight, []
        self.rng.shuffle(batches)
        for sender, to, batch in batches:
            host = self.hosts.get(to)
            if host is None or {sender, to} & self.cut or self.rng.random() < self.drop:
                continue
            host.receive(sender, batch)


class Link:
    def __init__(self, network: Network, sender: int) -> None:
        self.network = network
        self.sender = sender

    def send(self, to: int, batch: Sequence[tuple[str, Message]]) -> None:
        self.network.in_flight.append((self.sender, to, list(batch)))


class Cluster:
    def __init__(self, root: Path, *, seed: int, groups: int, drop: float = 0.0) -> None:
        self.root = root
        self.seed = seed
        self.rng = random.Random(seed)
        self.network = Network(self.rng, drop)
        self.stores: dict[int, CountingStore] = {}
        self.machines: dict[tuple[int, str], KeyValue] = {}
        self.groups = [group_id("a" * 32, f"p{number}") for number in range(groups)]
        for member in MEMBERS:
            self.open(member)
            for group in self.groups:
                self.hosts[member].create_group(group, ConfState(frozenset(MEMBERS)))
        self.ops = 0
        self.acked: dict[int, str] = {}  # op -> group
        self.refused: set[int] = set()  # ops answered NotLeader: never to be applied
        self.pending: list[tuple[int, str, Future[int]]] = []

    @property
    def hosts(self) -> dict[int, RaftHost]:
        return self.network.hosts

    def open(self, member: int) -> None:
        store = CountingStore(self.root / node_name(member))
        self.stores[member] = store

        def machine(group: str) -> KeyValue:
            self.machines[member, group] = KeyValue(store, group)
            return self.machines[member, group]

        self.network.hosts[member] = RaftHost(
            member,
            store,
            self.network.link(member),
            machine,
            random.Random(self.seed * 10 + member),
            peers=MEMBERS,
            config=Config(node_id=member),
            compact_entries=6,
            kept_entries=2,
        )

    def crash(self, member: int) -> None:
        """The process dies: whatever the host did not commit is lost with it."""
        del self.network.hosts[member]
        self.stores.pop(member).close()

    def close(self) -> None:
        for member in list(self.hosts):
            self.hosts[member].close()
            self.crash(member)

    def step(self) -> None:
        for host in self.hosts.values():
            host.tick()
            host.handle_round()
        for _ in range(3):
            self.network.deliver()
            for host in self.hosts.values():
                host.handle_round()
        self.collect()

    def leader(self, group: str) -> RaftHost | None:
        for host in self.hosts.values():
            if host.groups[group].node.role is Role.LEADER:
                return host
        return None

    def propose(self, group: str) -> None:
        host = self.leader(group) or self.rng.choice(list(self.hosts.values()))
        self.ops += 1
        future = host.propose(group, f"{self.ops} k{self.rng.randrange(5)} v{self.ops}".encode())
        self.pending.append((self.ops, group, future))
        self.collect()

    def collect(self) -> None:
        waiting = []
        for op, group, future in self.pending:
            if not future.done():
                waiting.append((op, group, future))
            elif future.exception() is None:
                self.acked[op] = group
            elif isinstance(future.exception(), NotLeader):
                self.refused.add(op)
        self.pending = waiting

    def settle(self, steps_max: int = 400) -> None:
        """Run without faults until every member of every group applied the same log."""
        self.network.drop = 0.0
        self.network.cut = set()
        for _ in range(steps_max):
            self.step()
            if all(self._converged(group) for group in self.groups):
                return
        raise AssertionError("the groups did not converge")

    def _converged(self, group: str) -> bool:
        leader = self.leader(group)
        if leader is None:
            return False
        committed = leader.groups[group].node.log.committed
        return all(host.groups[group].storage.applied == committed for host in self.hosts.values())

    def check_exactly_once(self) -> None:
        for group in self.groups:
            states = [self.machines[member, group] for member in self.hosts]
            assert all(state.kv == states[0].kv for state in states), f"{group} diverged"
            for state in states:
                assert set(state.ops.values()) <= {1}, f"an op applied twice in {group}"
        for op, group in self.acked.items():
            for member in self.hosts:
                assert self.machines[member, group].ops.get(op) == 1, f"op {op} lost on {member}"
        for op in self.refused:
            for (member, _group), state in self.machines.items():
                if member in self.hosts:
                    assert op not in state.ops, f"op {op} was refused, then applied"


def test_member_ids_map_node_names() -> None:
    assert member_id("node-12") == 12
    assert node_name(12) == "node-12"
    for bad in ("node-0", "node-", "router-1", "node-01"):
        with pytest.raises(ValueError):
            member_id(bad)


@pytest.mark.parametrize("seed", [1, 2])
def test_three_hosts_many_groups_crash_and_restart_apply_every_ack_once(
    tmp_path: Path, seed: int
) -> None:
    cluster = Cluster(tmp_path, seed=seed, groups=50, drop=0.05)
    try:
        for _ in range(40):
            cluster.step()
        assert all(cluster.leader(group) for group in cluster.groups), "every group elects"
        for round_number in range(60):
            for group in cluster.rng.sample(cluster.groups, 10):
                cluster.propose(group)
            if round_number == 20:
                # A crash between rounds: proposals and messages it took are not committed.
                victim = cluster.rng.choice(MEMBERS)
                cluster.propose(cluster.groups[0])
                cluster.crash(victim)
            if round_number == 35:
                cluster.open(victim)
            cluster.step()
        cluster.settle()
        for _ in range(5):
            cluster.step()
        cluster.collect()
        assert len(cluster.acked) > 300, "most proposals were acknowledged"
        cluster.check_exactly_once()
        # Logs were compacted along the way (compact_entries=6), and the restarted host caught
        # up from snapshots where the entries it lacked were gone.
        assert any(
            host.groups[group].storage.first_index() > 1
            for host in cluster.hosts.values()
            for group in cluster.groups
        )
        assert any(machine.restored for machine in cluster.machines.values())
    finally:
        cluster.close()


def test_one_synced_commit_per_round_whatever_the_number_of_groups(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, seed=3, groups=50)
    try:
        for _ in range(40):
            cluster.step()
        leaders = {group: cluster.leader(group) for group in cluster.groups}
        host = cluster.hosts[1]
        led = [group for group, leader in leaders.items() if leader is host]
        assert len(led) > 5
        commits = cluster.stores[1].commits
        futures = [host.propose(group, f"0 k v{n}".encode()) for n, group in enumerate(led)]
        assert host.handle_round() == len(led)
        assert cluster.stores[1].commits == commits + 1, "one commit for every group's entries"
        cluster.network.deliver()
        for member in (2, 3):
            before = cluster.stores[member].commits
            handled = cluster.hosts[member].handle_round()
            assert handled >= len(led)
            assert cluster.stores[member].commits == before + 1
        cluster.network.deliver()
        assert host.handle_round() >= len(led)  # the acks commit every group's entry
        assert all(future.done() and future.result() > 0 for future in futures)
    finally:
        cluster.close()


def test_idle_groups_sleep_and_cost_no_ticks_then_wake_for_a_proposal(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, seed=4, groups=20)
    try:
        for _ in range(200):
            cluster.step()
            if all(host.asleep(g) for host in cluster.hosts.values() for g in cluster.groups):
                break
        else:
            raise AssertionError("idle groups did not all fall asleep")
        ticks = {member: host.stats.node_ticks for member, host in cluster.hosts.items()}
        for _ in range(50):
            cluster.step()
        assert {m: h.stats.node_ticks for m, h in cluster.hosts.items()} == ticks
        group = cluster.groups[7]
        cluster.propose(group)
        for _ in range(5):
            cluster.step()
        cluster.collect()
        assert cluster.acked == {cluster.ops: group}
        assert all(cluster.machines[m, group].ops == {cluster.ops: 1} for m in MEMBERS)
        for _ in range(20):
            cluster.step()
        assert all(host.asleep(group) for host in cluster.hosts.values()), "asleep again"
    finally:
        cluster.close()


def test_a_woken_leader_holds_no_lease_from_before_its_sleep(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, seed=5, groups=1)
    group = cluster.groups[0]
    try:
        for number in range(200):
            cluster.step()
            # Writes keep it awake past an election timeout of leading, when leases begin.
            if number < 40 and cluster.leader(group):
                cluster.propose(group)
            elif all(host.asleep(group) for host in cluster.hosts.values()):
                break
        leader = cluster.leader(group)
        assert leader is not None and leader.asleep(group)
        node = leader.groups[group].node
        # Asleep, its clock stopped inside a valid lease: believed later, it would be stale.
        assert node.lease_valid()
        for _ in range(30):
            cluster.step()
        read = leader.read_index(group)
        assert not node.lease_valid(), "the missed ticks ended the old lease"
        for _ in range(3):
            cluster.step()
        assert read.done() and read.result() >= 1
    finally:
        cluster.close()


def test_sleeping_followers_elect_a_new_leader_when_the_leaders_node_dies(
    tmp_path: Path,
) -> None:
    cluster = Cluster(tmp_path, seed=6, groups=10)
    try:
        for _ in range(200):
            cluster.step()
            if all(host.asleep(g) for host in cluster.hosts.values() for g in cluster.groups):
                break
        leaders = {group: cluster.leader(group) for group in cluster.groups}
        victim = next(iter(leaders.values()))
        assert victim is not None
        led = [group for group, leader in leaders.items() if leader is victim]
        cluster.crash(victim.id)
        steps = 0
        while not all(cluster.leader(group) for group in led):
            # Silence is noticed after an election timeout, then a follower campaigns at once.
            assert steps < 4 * victim.election_timeout, "no new leader for the dead node's groups"
            cluster.step()
            steps += 1
        for group in led:
            cluster.propose(group)
        for _ in range(5):
            cluster.step()
        cluster.collect()
        assert set(cluster.acked.values()) == set(led)
    finally:
        cluster.close()


@pytest.mark.parametrize("seed", range(16))
def test_followers_asleep_between_writes_wait_out_a_cut_off_leaders_lease(
    tmp_path: Path, seed: int
) -> None:
    """Followers sleep between a busy leader's writes, handling its appends asleep. Woken by its
    silence, they count the ticks since its last message, not since they fell asleep: counted
    from the sleep, they voted within a few ticks (seed 6: while the leader, only cut off and
    awake, still held a lease it could serve strong reads under)."""
    cluster = Cluster(tmp_path, seed=seed, groups=1)
    group = cluster.groups[0]
    try:
        for number in range(300):
            cluster.step()
            leader = cluster.leader(group)
            if leader is None:
                continue
            if number % 7 == 0:
                cluster.propose(group)
            followers = [host for host in cluster.hosts.values() if host is not leader]
            sleeping = all(host.asleep(group) for host in followers)
            if number > 120 and leader.groups[group].node.lease_valid() and sleeping:
                break
        else:
            raise AssertionError("the followers never slept under a leader holding a lease")
        old = leader.groups[group].node
        cluster.network.cut = {leader.id}
        timeout = leader.election_timeout
        for steps in range(1, 8 * timeout):
            cluster.step()
            others = [
                host
                for host in cluster.hosts.values()
                if host is not leader and host.groups[group].node.role is Role.LEADER
            ]
            if others:
                assert steps >= timeout - old.config.max_clock_drift_ticks
                # Asleep, the old leader's clock stopped; waking ends that lease (another test).
                assert leader.asleep(group) or not old.lease_valid(), "two leaders, one leased"
                break
        else:
            raise AssertionError("the followers elected no new leader")
    finally:
        cluster.close()


def test_recovery_hands_over_the_committed_entries_after_the_applied_index(
    tmp_path: Path,
) -> None:
    store = Store(tmp_path / "node-1")
    machines: dict[str, KeyValue] = {}

    def machine(group: str) -> KeyValue:
        machines[group] = KeyValue(store, group)
        return machines[group]

    network = Network(random.Random(0), 0.0)
    host = RaftHost(1, store, network.link(1), machine, random.Random(1))
    host.create_group("catalog", ConfState(frozenset({1})))
    for _ in range(30):
        host.tick()
        host.handle_round()
    futures = [host.propose("catalog", f"{op} k v{op}".encode()) for op in range(1, 6)]
    host.handle_round()
    indexes = [future.result(timeout=0) for future in futures]
    assert indexes == list(range(indexes[0], indexes[0] + 5))
    # A proposal taken but never handled in a round is lost with the process.
    lost = host.propose("catalog", b"6 k lost")
    store.close()
    assert not lost.done()
    # Pretend the state machine had applied only up to the third proposal (as one applying a
    # round later would): the fourth and fifth are handed to it again, and only those.
    store = Store(tmp_path / "node-1")
    batch = store.batch()
    RaftLogStorage.load(store, "catalog").set_applied(batch, indexes[2])
    store.commit(batch)
    host = RaftHost(1, store, network.link(1), machine, random.Random(1))
    host.handle_round()
    assert machines["catalog"].first_applied == indexes[3]
    assert machines["catalog"].kv == {"k": "v5"}
    # Its one voter elected itself as the group opened: it takes proposals without a timeout.
    seventh = host.propose("catalog", b"7 k v7")
    host.handle_round()
    assert seventh.result(timeout=0) > indexes[4]
    assert machines["catalog"].kv == {"k": "v7"}
    pending = host.propose("catalog", b"8 k v8")
    host.close()
    with pytest.raises(OutcomeUnknown):
        pending.result(timeout=0)
    store.close()


def test_a_log_is_compacted_by_its_bytes_and_a_sole_voter_keeps_no_entries(
    tmp_path: Path,
) -> None:
    store = Store(tmp_path / "node-1")
    network = Network(random.Random(0), 0.0)
    host = RaftHost(
        1,
        store,
        network.link(1),
        lambda group: KeyValue(store, group),
        random.Random(1),
        compact_bytes=4000,
    )
    host.create_group("g", ConfState(frozenset({1})))
    host.handle_round()
    storage = host.groups["g"].storage
    for op in range(1, 40):
        future = host.propose("g", f"{op} k {'v' * 200}".encode())
        host.handle_round()
        assert future.result(timeout=0) == storage.applied
    # Far fewer entries than RAFT_LOG_COMPACT_ENTRIES, but past 4,000 bytes: compacted, to the
    # applied index itself (no follower needs what a group of one voter applied).
    assert storage.first_index() > 1
    assert storage.appended_bytes < 4000
    kept = list(store.walk(Family.RAFT_LOG, b"", None, forward=True))
    assert len(kept) < 4000 // 200
    store.close()
    reopened = Store(tmp_path / "node-1")
    host = RaftHost(1, reopened, network.link(1), lambda g: KeyValue(reopened, g), random.Random(1))
    assert host.groups["g"].machine.kv == {"k": "v" * 200}  # type: ignore[attr-defined]
    reopened.close()
