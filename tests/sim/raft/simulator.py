"""A seeded, deterministic simulation of one Raft group under faults, with invariants checked.

Everything comes from one seed: the group's size, its limits, the network's faults (drops,
duplicates, delays that reorder, partitions), crashes and restarts (a node restarts from what its
handled Readies persisted; a Ready not yet handled is lost with it), each node's clock rate (within
the drift bound `core.raft.node` states), clients writing and reading strongly, membership changes
and leader transfers. The `Checker` (`cluster`) checks the Raft invariants at every Ready and role
change; after the faults stop, the group must converge and every acknowledged write must be on
every member. A failing seed replays with `python -m tests.sim.raft.simulator SEED`.

Time is counted in units; a tick is about `TICK_UNITS` units, each node's a little more or less.
"""

from __future__ import annotations

import argparse
import dataclasses
import heapq
import random
import sys

from core.raft import (
    ConfChange,
    ConfChangeKind,
    Config,
    ConfState,
    Message,
    NotLeader,
    ProposalRefused,
    RaftNode,
    Role,
)
from tests.sim.raft.cluster import Checker, InvariantViolated, Read, SimNode, Write

TICK_UNITS = 100
ELECTION_TIMEOUT_TICKS = 10
CLOCK_DRIFT_TICKS = 2
FAULT_TICKS = 200  # how long faults go on
SETTLE_TICKS_MAX = 300  # how long the healed group has to converge


@dataclasses.dataclass(frozen=True)
class Plan:
    """Everything a seed decides up front."""

    voters: int
    spares: int
    drop: float
    duplicate: float
    delay_max_units: int
    io_max_units: int
    crash: float  # chance per tick that a node crashes
    partition: float  # chance per tick that the network splits
    membership: float  # chance per tick of a membership change
    transfer: float  # chance per tick of a leader transfer
    client_ops_per_tick: float
    snapshot_every: int
    config: dict[str, int | bool]
    periods: tuple[int, ...]  # each node's tick period in units

    @classmethod
    def from_seed(cls, seed: int) -> Plan:
        rng = random.Random(seed)
        voters = rng.choice((3, 3, 3, 5, 1)) if seed % 17 else 1
        spares = rng.choice((0, 1, 2))
        # The drift bound: while one clock counts election_timeout - 1 ticks, every other counts
        # at least election_timeout - drift; with periods p: (ET - drift) p_max <= (ET - 1) p_min.
        slowest = (
            TICK_UNITS
            * (ELECTION_TIMEOUT_TICKS - 1)
            // (ELECTION_TIMEOUT_TICKS - CLOCK_DRIFT_TICKS)
        )
        periods = tuple(rng.randint(TICK_UNITS, slowest) for _ in range(voters + spares))
        return cls(
            voters=voters,
            spares=spares,
            drop=rng.choice((0.0, 0.02, 0.1, 0.3)),
            duplicate=rng.choice((0.0, 0.05)),
            delay_max_units=rng.choice((5, 40, 150)),
            io_max_units=rng.choice((0, 10, 50)),
            crash=rng.choice((0.0, 0.005, 0.02)),
            partition=rng.choice((0.0, 0.01, 0.03)),
            membership=rng.choice((0.0, 0.02)) if spares else 0.0,
            transfer=rng.choice((0.0, 0.01)),
            client_ops_per_tick=rng.choice((0.5, 2.0)),
            snapshot_every=rng.choice((0, 4, 16)),
            config={
                "election_timeout_ticks": ELECTION_TIMEOUT_TICKS,
                "heartbeat_interval_ticks": rng.choice((1, 2)),
                "max_clock_drift_ticks": CLOCK_DRIFT_TICKS,
                "append_entries_max": rng.choice((1, 3, 64)),
                "append_bytes_max": rng.choice((10, 1000)),
                "inflight_appends_max": rng.choice((1, 2, 16)),
                "lease_reads": rng.random() < 0.8,
            },
            periods=periods,
        )


class Simulation:
    def __init__(self, seed: int, plan: Plan | None = None) -> None:
        self.seed = seed
        self.plan = plan or Plan.from_seed(seed)
        self.rng = random.Random(seed ^ 0x5EED)
        self.checker = Checker()
        conf = ConfState(frozenset(range(1, self.plan.voters + 1)))
        self.nodes: dict[int, SimNode] = {}
        for position in range(self.plan.voters + self.plan.spares):
            node_id = position + 1
            config = Config(node_id=node_id, **self.plan.config)  # type: ignore[arg-type]
            node = SimNode(config, conf, seed * 1000 + node_id, self.checker)
            node.snapshot_every = self.plan.snapshot_every
            self.nodes[node_id] = node
        self.incarnation = dict.fromkeys(self.nodes, 0)
        self.ready_scheduled: set[int] = set()
        self.events: list[tuple[int, int, str, object]] = []
        self.sequence = 0
        self.now = 0
        self.faults_on = True
        self.cut: set[frozenset[int]] = set()  # links that lose every message
        self.ops = 0
        self.trace: list[str] = []

    # Events.

    def schedule(self, delay: int, kind: str, payload: object) -> None:
        self.sequence += 1
        heapq.heappush(self.events, (self.now + delay, self.sequence, kind, payload))

    def run(self) -> None:
        for node_id, period in zip(self.nodes, self.plan.periods, strict=True):
            self.schedule(self.rng.randint(1, period), "tick", (node_id, 0))
        self.schedule(TICK_UNITS, "faults", None)
        fault_end = FAULT_TICKS * TICK_UNITS
        settle_end = fault_end + SETTLE_TICKS_MAX * TICK_UNITS
        while self.events:
            time, _, kind, payload = heapq.heappop(self.events)
            self.now = time
            if self.faults_on and time >= fault_end:
                self.heal_everything()
            if not self.faults_on and kind == "tick" and self.converged():
                break
            if time >= settle_end:
                raise InvariantViolated("the healed group did not converge")
            getattr(self, f"on_{kind}")(payload)
        self.check_final()

    def on_tick(self, payload: object) -> None:
        node_id, incarnation = payload  # type: ignore[misc]
        if incarnation != self.incarnation[node_id]:
            return
        node = self.nodes[node_id]
        if node.up:
            node.node().tick()
            self.touched(node_id)
            self.schedule(self.plan.periods[node_id - 1], "tick", payload)

    def on_deliver(self, message: Message) -> None:
        node = self.nodes[message.to]
        if node.up and frozenset((message.sender, message.to)) not in self.cut:
            node.node().step(message)
            self.touched(message.to)

    def on_ready(self, payload: object) -> None:
        node_id, incarnation = payload  # type: ignore[misc]
        self.ready_scheduled.discard(node_id)
        if incarnation != self.incarnation[node_id] or not self.nodes[node_id].up:
            return
        for message in self.nodes[node_id].handle_ready(self.now):
            self.send(message)
        if self.nodes[node_id].node().has_ready():
            self.touched(node_id)

    def on_restart(self, node_id: object) -> None:
        assert isinstance(node_id, int)
        node = self.nodes[node_id]
        if node.up:
            return
        node.start()
        self.trace.append(f"{self.now}: restart {node_id}")
        self.schedule(
            self.rng.randint(1, self.plan.periods[node_id - 1]),
            "tick",
            (node_id, self.incarnation[node_id]),
        )
        self.touched(node_id)

    def on_heal(self, _payload: object) -> None:
        self.cut = set()
        self.trace.append(f"{self.now}: heal")

    def touched(self, node_id: int) -> None:
        """A node took input: its Ready is handled after a simulated disk write's time."""
        node = self.nodes[node_id]
        self.checker.saw_role(node.node())
        if node_id not in self.ready_scheduled:
            self.ready_scheduled.add(node_id)
            delay = self.rng.randint(0, self.plan.io_max_units) if self.faults_on else 0
            self.schedule(delay, "ready", (node_id, self.incarnation[node_id]))

    def send(self, message: Message) -> None:
        copies = 1
        if self.faults_on:
            if self.rng.random() < self.plan.drop:
                return
            if self.rng.random() < self.plan.duplicate:
                copies = 2
        for _ in range(copies):
            delay = self.rng.randint(1, self.plan.delay_max_units if self.faults_on else 5)
            self.schedule(delay, "deliver", message)

    # Faults and clients, once a tick while faults are on.

    def on_faults(self, _payload: object) -> None:
        if not self.faults_on:
            return
        self.schedule(TICK_UNITS, "faults", None)
        rng, plan = self.rng, self.plan
        if rng.random() < plan.crash:
            self.crash(rng.choice(list(self.nodes)))
        if rng.random() < plan.partition:
            self.partition()
        if rng.random() < plan.membership:
            self.change_membership()
        if rng.random() < plan.transfer:
            self.transfer()
        ops = int(plan.client_ops_per_tick) + (rng.random() < plan.client_ops_per_tick % 1)
        for _ in range(ops):
            self.client_op()

    def crash(self, node_id: int) -> None:
        node = self.nodes[node_id]
        if not node.up:
            return
        node.crash()
        self.incarnation[node_id] += 1
        self.trace.append(f"{self.now}: crash {node_id}")
        self.schedule(self.rng.randint(2, 40) * TICK_UNITS, "restart", node_id)

    def partition(self) -> None:
        """Split the nodes in two, or cut one link only: a partial partition, where a node hears
        the leader but a peer does not (the case the vote guard of leases is for)."""
        ids = list(self.nodes)
        if self.rng.random() < 0.5 and len(ids) > 2:
            a, b = self.rng.sample(ids, 2)
            self.cut.add(frozenset((a, b)))
            self.trace.append(f"{self.now}: cut {a} <-> {b}")
        else:
            side = set(self.rng.sample(ids, self.rng.randint(1, max(1, len(ids) // 2))))
            self.cut |= {frozenset((a, b)) for a in side for b in ids if b not in side}
            self.trace.append(f"{self.now}: partition {sorted(side)} from the rest")
        self.schedule(self.rng.randint(5, 60) * TICK_UNITS, "heal", None)

    def leaders(self) -> list[RaftNode]:
        return [
            node.node()
            for node in self.nodes.values()
            if node.up and node.node().role is Role.LEADER
        ]

    def client_op(self) -> None:
        leaders = self.leaders()
        if not leaders:
            return
        # A client may reach any node that believes it leads, a deposed one included.
        leader = self.rng.choice(leaders)
        self.ops += 1
        key = self.rng.choice("abcde")
        try:
            if self.rng.random() < 0.6:
                write = Write(self.ops, leader.id, key, f"v{self.ops}", self.now)
                self.checker.writes[write.op] = write
                self.nodes[leader.id].propose(write)
            else:
                read = Read(self.ops, leader.id, key, self.now, self.checker.acked_index_max)
                self.nodes[leader.id].read(read)
        except (NotLeader, ProposalRefused):
            return
        self.touched(leader.id)

    def change_membership(self) -> None:
        leaders = self.leaders()
        if not leaders:
            return
        leader = self.rng.choice(leaders)
        conf = leader.conf
        options = [
            ConfChange(ConfChangeKind.ADD_LEARNER, n) for n in self.nodes if n not in conf.members
        ]
        options += [ConfChange(ConfChangeKind.PROMOTE, n) for n in conf.learners]
        options += [ConfChange(ConfChangeKind.REMOVE, n) for n in conf.learners]
        if len(conf.voters) > 3:
            options += [ConfChange(ConfChangeKind.REMOVE, n) for n in conf.voters]
        if not options:
            return
        change = self.rng.choice(options)
        try:
            leader.propose_conf_change(change)
        except (NotLeader, ProposalRefused):
            return
        self.trace.append(f"{self.now}: {leader.id} proposes {change.kind.value} {change.node}")
        self.touched(leader.id)

    def transfer(self) -> None:
        leaders = self.leaders()
        if not leaders:
            return
        leader = self.rng.choice(leaders)
        others = sorted(leader.conf.voters - {leader.id})
        if not others:
            return
        to = self.rng.choice(others)
        try:
            leader.transfer_leadership(to)
        except (NotLeader, ProposalRefused):
            return
        self.trace.append(f"{self.now}: {leader.id} transfers leadership to {to}")
        self.touched(leader.id)

    # The end.

    def heal_everything(self) -> None:
        self.faults_on = False
        self.cut = set()
        for node_id, node in self.nodes.items():
            if not node.up:
                self.on_restart(node_id)
        self.trace.append(f"{self.now}: faults stop")

    def converged(self) -> bool:
        """A leader of the newest term has committed its whole log, and every member applied it."""
        leaders = self.leaders()
        if not leaders:
            return False
        leader = max(leaders, key=lambda node: node.term)
        if leader.log.committed != leader.log.last_index() or not leader.log.committed:
            return False
        if leader.log.term(leader.log.committed) != leader.term:
            return False
        return all(
            self.nodes[member].up and self.nodes[member].applied == leader.log.committed
            for member in leader.conf.members
        )

    def check_final(self) -> None:
        leader = max(self.leaders(), key=lambda node: node.term)
        committed = leader.log.committed
        for write in self.checker.writes.values():
            if write.acked_at is None:
                continue
            found = self.checker.committed.get(write.index)
            if found is None or found[0] != write.term:
                raise InvariantViolated(f"acknowledged write {write.op} was lost")
        state = {}
        for key in "abcde":
            value = self.checker.value_at(key, committed)
            if value is not None:
                state[key] = value
        for member in leader.conf.members:
            if self.nodes[member].kv != state:
                raise InvariantViolated(f"member {member}'s state differs from the history's")


def run_seed(seed: int, *, plan: Plan | None = None) -> Simulation:
    """Run one seed; on a violated invariant, say how to replay it."""
    simulation = Simulation(seed, plan)
    try:
        simulation.run()
    except AssertionError as error:
        raise InvariantViolated(
            f"seed {seed}: {error}\n  replay: python -m tests.sim.raft.simulator {seed}"
        ) from error
    return simulation


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("seeds", type=int, nargs="+")
    parser.add_argument("--planted-bug", action="store_true", help="leaders read unchecked")
    arguments = parser.parse_args()
    RaftNode.PLANTED_BUG_UNCHECKED_READS = arguments.planted_bug
    for seed in arguments.seeds:
        simulation = Simulation(seed)
        print(f"seed {seed}: {simulation.plan}")
        try:
            simulation.run()
        except AssertionError as error:
            print("\n".join(simulation.trace[-40:]))
            print(f"seed {seed} FAILED: {error}")
            sys.exit(1)
        checker = simulation.checker
        print(
            f"seed {seed} ok: {len(checker.committed)} committed, {len(checker.reads)} reads, "
            f"last term {max(checker.leaders, default=0)}"
        )


if __name__ == "__main__":
    main()
