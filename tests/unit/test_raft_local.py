"""`rpc.raft_local`: the in-process twin of the Raft transport, its seeded faults, and the Raft
core running over it."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable

import pytest

from core.raft import (
    Config,
    ConfState,
    EntryKind,
    MemoryStorage,
    Message,
    MessageKind,
    RaftNode,
    Role,
)
from rpc.raft_local import LocalRaftNetwork, RaftSender

WAIT_SECONDS_MAX = 10.0


async def until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_SECONDS_MAX
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {WAIT_SECONDS_MAX} s: {what}")
        await asyncio.sleep(0.005)


def heartbeat(sender: int, to: int, tick: int) -> tuple[str, Message]:
    return "g", Message(MessageKind.HEARTBEAT, sender, to, term=1, commit=tick, lease_tick=tick)


class Inbox:
    def __init__(self) -> None:
        self.batches: list[tuple[int, list[tuple[str, Message]]]] = []

    def deliver(self, from_node: int, batch: list[tuple[str, Message]]) -> None:
        self.batches.append((from_node, batch))

    def messages(self) -> list[tuple[str, Message]]:
        return [pair for _, batch in self.batches for pair in batch]


async def test_batches_arrive_in_order_on_a_later_turn() -> None:
    network = LocalRaftNetwork(seed=1)
    inbox = Inbox()
    one = network.join(1, Inbox().deliver)
    network.join(2, inbox.deliver)
    sent = [heartbeat(1, 2, tick) for tick in range(50)]
    for pair in sent:
        one.send(2, [pair])
    assert inbox.batches == [], "never delivered within the sender's turn"
    await until(lambda: len(inbox.batches) == 50, "every batch arrives")
    assert inbox.messages() == sent
    assert all(origin == 1 for origin, _ in inbox.batches)
    network.close()


async def test_an_empty_batch_is_carried_as_a_keepalive() -> None:
    network = LocalRaftNetwork(seed=1)
    inbox = Inbox()
    network.join(1, Inbox().deliver).send(2, [])
    network.join(2, inbox.deliver)
    await until(lambda: len(inbox.batches) == 1, "the keepalive arrives")
    assert inbox.batches == [(1, [])]


async def test_faults_replay_from_the_seed() -> None:
    def run(seed: int) -> list[int]:
        network = LocalRaftNetwork(seed, drop_rate=0.3, duplicate_rate=0.2)
        inbox = Inbox()
        sender = network.join(1, Inbox().deliver)
        network.join(2, inbox.deliver)
        for tick in range(200):
            sender.send(2, [heartbeat(1, 2, tick)])
        return [network.counters[1, 2].dropped, network.counters[1, 2].duplicated]

    assert run(7) == run(7)
    dropped, duplicated = run(7)
    assert 30 < dropped < 90 and 10 < duplicated < 60
    assert run(7) != run(8)


async def test_duplicates_and_delays_reorder_but_lose_nothing() -> None:
    network = LocalRaftNetwork(seed=3, duplicate_rate=1.0, delay_seconds_max=0.02)
    inbox = Inbox()
    sender = network.join(1, Inbox().deliver)
    network.join(2, inbox.deliver)
    sent = [heartbeat(1, 2, tick) for tick in range(40)]
    for pair in sent:
        sender.send(2, [pair])
    await until(lambda: len(inbox.batches) == 80, "every batch arrives twice")
    received = inbox.messages()
    assert sorted(received, key=sent.index) == [pair for pair in sent for _ in range(2)]
    assert received != sorted(received, key=sent.index), "delays reorder batches"


async def test_a_cut_link_loses_batches_until_healed() -> None:
    network = LocalRaftNetwork(seed=1)
    inbox_one, inbox_two = Inbox(), Inbox()
    one = network.join(1, inbox_one.deliver)
    two = network.join(2, inbox_two.deliver)
    network.cut(1, 2, both_ways=False)
    one.send(2, [heartbeat(1, 2, 0)])
    two.send(1, [heartbeat(2, 1, 0)])
    await until(lambda: len(inbox_one.batches) == 1, "the other direction still works")
    await asyncio.sleep(0.01)
    assert inbox_two.batches == [] and network.counters[1, 2].dropped == 1
    network.heal()
    one.send(2, [heartbeat(1, 2, 1)])
    await until(lambda: len(inbox_two.batches) == 1, "the healed link delivers")


async def test_a_closed_transport_neither_sends_nor_receives() -> None:
    network = LocalRaftNetwork(seed=1, delay_seconds_max=0.01)
    inbox = Inbox()
    one = network.join(1, Inbox().deliver)
    two = network.join(2, inbox.deliver)
    one.send(2, [heartbeat(1, 2, 0)])  # in flight when node 2 goes
    await two.close()
    two.send(1, [heartbeat(2, 1, 0)])
    await asyncio.sleep(0.03)
    assert inbox.batches == []
    assert network.counters[1, 2].dropped == 1 and (2, 1) not in network.counters
    network.close()


async def test_raft_groups_commit_over_a_lossy_network() -> None:
    """The core and the twin together: three nodes, three groups, batches dropped, duplicated
    and reordered; every proposal is applied on every node, in the same order."""
    network = LocalRaftNetwork(seed=11, drop_rate=0.1, duplicate_rate=0.1, delay_seconds_max=0.01)
    groups = ("a", "b", "c")
    voters = frozenset({1, 2, 3})
    rafts: dict[int, dict[str, RaftNode]] = {}
    storages: dict[int, dict[str, MemoryStorage]] = {}
    applied: dict[int, dict[str, list[bytes]]] = {}
    senders: dict[int, RaftSender] = {}

    def handle_ready(node_id: int) -> None:
        outbox: dict[int, list[tuple[str, Message]]] = {}
        for group, raft in rafts[node_id].items():
            while raft.has_ready():
                ready = raft.ready()
                storage = storages[node_id][group]
                storage.append(ready.entries)
                if ready.hard_state is not None:
                    storage.set_hard_state(ready.hard_state)
                for message in ready.messages:
                    outbox.setdefault(message.to, []).append((group, message))
                for entry in ready.committed_entries:
                    if entry.kind is EntryKind.NORMAL and entry.data:
                        applied[node_id][group].append(entry.data)
                raft.advance(ready)
        for to, batch in outbox.items():
            senders[node_id].send(to, batch)

    for node_id in voters:
        storages[node_id] = {group: MemoryStorage(ConfState(voters)) for group in groups}
        seed = random.Random(node_id)
        rafts[node_id] = {
            group: RaftNode(Config(node_id), storages[node_id][group], seed) for group in groups
        }
        applied[node_id] = {group: [] for group in groups}

        def deliver(
            from_node: int, batch: list[tuple[str, Message]], node_id: int = node_id
        ) -> None:
            for group, message in batch:
                rafts[node_id][group].step(message)
            handle_ready(node_id)

        senders[node_id] = network.join(node_id, deliver)

    async def tick_loop(node_id: int) -> None:
        while True:
            for raft in rafts[node_id].values():
                raft.tick()
            handle_ready(node_id)
            await asyncio.sleep(0.005)

    loops = [asyncio.create_task(tick_loop(node_id)) for node_id in voters]
    proposals = {group: [f"{group}{n}".encode() for n in range(10)] for group in groups}
    proposed_at: dict[str, set[tuple[int, int]]] = {group: set() for group in groups}

    def all_applied() -> bool:
        # A client per group proposes what its leader has not applied, again when leadership
        # moves (a deposed leader's uncommitted entries may be lost).
        for group in groups:
            leading = [rafts[n][group] for n in voters if rafts[n][group].role is Role.LEADER]
            if not leading:
                continue
            raft = max(leading, key=lambda node: node.term)
            if (raft.id, raft.term) not in proposed_at[group]:
                proposed_at[group].add((raft.id, raft.term))
                for data in proposals[group]:
                    if data not in applied[raft.id][group]:
                        raft.propose(data)
                handle_ready(raft.id)
        return all(
            set(proposals[group]) <= set(applied[n][group])
            and applied[n][group] == applied[1][group]
            for n in voters
            for group in groups
        )

    try:
        await until(all_applied, "every proposal applied on every node, in the same order")
    finally:
        for task in loops:
            task.cancel()
        await asyncio.gather(*loops, return_exceptions=True)
        network.close()
    assert sum(counters.dropped for counters in network.counters.values()) > 0
