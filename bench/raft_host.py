"""Proposals and synced commits per second through the multi-raft host, in one process.

    python bench/raft_host.py [--seconds 1.5]

For 1, 10 and 100 groups at replication factor 1 (one host) and 3 (three hosts, each with its own
RocksDB in a temporary directory, linked by an in-memory transport that delivers at once), every
group keeps one proposal in flight at its leader: a new one as soon as the last is applied
there. A loop runs one handling round on every host and delivers what they sent; every 100 ms it
ticks them. Prints one line per case: groups, replication factor, proposals applied per second
at the leaders, synced commits per second over all hosts, and proposals per commit. The commits
are fsyncs, so the numbers depend mostly on the disk; what they show is that one commit carries
the entries of every group with something to persist.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import Future
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.append(str(ROOT))  # After PYTHONPATH, so another checkout's build can be measured.

from core.raft import ConfState, Entry, Message, Role, Snapshot  # noqa: E402
from storagenode.layout import Family, raft_group_prefix  # noqa: E402
from storagenode.raft_host import RaftHost, group_id  # noqa: E402
from storagenode.store import Store, WriteBatchView  # noqa: E402

GROUP_COUNTS = (1, 10, 100)
FACTORS = (1, 3)
TICK_SECONDS = 0.1
VALUE = b"x" * 200


class Items:
    """A state machine that writes each entry's command as an item, as a partition's would."""

    def __init__(self, group: str) -> None:
        self.prefix = raft_group_prefix(group)
        self.applied = 0

    def apply(self, entries: Sequence[Entry], batch: WriteBatchView) -> None:
        for entry in entries:
            if entry.data:
                batch.put(Family.ITEMS, self.prefix + entry.index.to_bytes(8, "big"), entry.data)
        self.applied = entries[-1].index

    def snapshot(self) -> bytes:
        return b""

    def restore(self, snapshot: Snapshot, batch: WriteBatchView) -> None:
        self.applied = snapshot.index


class Wire:
    """Batches wait here until the loop delivers them, all at once."""

    def __init__(self) -> None:
        self.hosts: dict[int, RaftHost] = {}
        self.queued: list[tuple[int, int, Sequence[tuple[str, Message]]]] = []

    def deliver(self) -> None:
        queued, self.queued = self.queued, []
        for sender, to, batch in queued:
            self.hosts[to].receive(sender, batch)


class Link:
    def __init__(self, wire: Wire, sender: int) -> None:
        self.wire = wire
        self.sender = sender

    def send(self, to: int, batch: Sequence[tuple[str, Message]]) -> None:
        self.wire.queued.append((self.sender, to, batch))


def run(root: Path, groups: int, factor: int, seconds: float) -> tuple[float, float]:
    members = tuple(range(1, factor + 1))
    wire = Wire()
    stores = [Store(root / f"node-{member}") for member in members]
    names = [group_id("b" * 32, f"p{number}") for number in range(groups)]
    for member, store in zip(members, stores, strict=True):
        host = RaftHost(
            member, store, Link(wire, member), Items, random.Random(member), peers=members
        )
        wire.hosts[member] = host
        for name in names:
            host.create_group(name, ConfState(frozenset(members)))
    hosts = list(wire.hosts.values())

    def leader(name: str) -> RaftHost | None:
        return next((h for h in hosts if h.groups[name].node.role is Role.LEADER), None)

    def loop_once() -> None:
        for host in hosts:
            host.handle_round()
        wire.deliver()

    while any(leader(name) is None for name in names):
        for host in hosts:
            host.tick()
        for _ in range(3):
            loop_once()
    in_flight: dict[str, Future[int]] = {}
    proposals = 0
    commits_before = sum(host.stats.commits for host in hosts)
    started = next_tick = time.perf_counter()
    while (now := time.perf_counter()) - started < seconds:
        if now >= next_tick:
            next_tick += TICK_SECONDS
            for host in hosts:
                host.tick()
        for name in names:
            future = in_flight.get(name)
            if future is not None and not future.done():
                continue
            if future is not None and future.exception() is None:
                proposals += 1
            at = leader(name)
            if at is not None:
                in_flight[name] = at.propose(name, VALUE)
        loop_once()
    elapsed = time.perf_counter() - started
    commits = sum(host.stats.commits for host in hosts) - commits_before
    for store in stores:
        store.close()
    return proposals / elapsed, commits / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=1.5, help="measured time per case")
    args = parser.parse_args()
    print("groups factor proposals/s commits/s proposals/commit")
    for factor in FACTORS:
        for groups in GROUP_COUNTS:
            with tempfile.TemporaryDirectory() as directory:
                rate, commits = run(Path(directory), groups, factor, args.seconds)
            print(f"{groups} {factor} {rate:.0f} {commits:.0f} {rate / commits:.2f}")


if __name__ == "__main__":
    main()
