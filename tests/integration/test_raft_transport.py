"""`rpc.raft_transport` over real gRPC on loopback: batching per peer, order, drops within the
bound while a peer is down or stalled, reconnects, refusals, metrics; and the Raft core itself
(`core.raft.RaftNode`, several groups on three nodes) electing and committing across it.

Every server, transport and channel a test starts is stopped at its end (the `net` fixture), and
every wait is bounded (`until`).
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import pytest
from prometheus_client import CollectorRegistry

from core.raft import (
    Config,
    ConfState,
    Entry,
    EntryKind,
    MemoryStorage,
    Message,
    MessageKind,
    RaftNode,
    Ready,
    Role,
)
from core.retry import RetryPolicy
from dynalab.cluster import LOOPBACK, free_ports
from rpc import raft_pb2, raft_pb2_grpc
from rpc.raft_transport import RaftTransport, TransportLimits

WAIT_SECONDS_MAX = 15.0
# Reconnect quickly in tests: 20 ms doubling to 200 ms.
FAST_RECONNECT = RetryPolicy(
    attempts_max=50, base_seconds=0.02, cap_seconds=0.2, deadline_seconds=10.0
)


async def until(
    condition: Callable[[], bool], what: str, seconds: float = WAIT_SECONDS_MAX
) -> None:
    """Wait, polling, until `condition()` holds; fail the test after `seconds`."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {seconds} s: {what}")
        await asyncio.sleep(0.01)


def heartbeat(sender: int, to: int, group: str, tick: int) -> tuple[str, Message]:
    return group, Message(MessageKind.HEARTBEAT, sender, to, term=1, commit=tick, lease_tick=tick)


def append(sender: int, to: int, group: str, index: int, size: int) -> tuple[str, Message]:
    entry = Entry(index=index, term=1, data=b"x" * size)
    message = Message(MessageKind.APPEND, sender, to, term=1, index=index - 1, entries=(entry,))
    return group, message


class Node:
    """One node's transport and gRPC server, and every batch delivered to it."""

    def __init__(self, node_id: int, port: int) -> None:
        self.node_id = node_id
        self.address = f"{LOOPBACK}:{port}"
        self.port = port
        self.delivered: list[tuple[int, list[tuple[str, Message]]]] = []
        self.transport: RaftTransport | None = None
        self.server: grpc.aio.Server | None = None

    def messages_from(self, sender: int) -> list[tuple[str, Message]]:
        return [pair for origin, batch in self.delivered if origin == sender for pair in batch]

    def deliver(self, from_node: int, batch: list[tuple[str, Message]]) -> None:
        self.delivered.append((from_node, batch))


class Net:
    """Nodes on loopback; `close` stops every server and transport a test made."""

    def __init__(self) -> None:
        self.nodes: dict[int, Node] = {}
        self.servers: list[grpc.aio.Server] = []
        self.transports: list[RaftTransport] = []

    def add(self, *node_ids: int) -> list[Node]:
        ports = free_ports(len(node_ids))
        made = [Node(node_id, port) for node_id, port in zip(node_ids, ports, strict=True)]
        self.nodes.update((node.node_id, node) for node in made)
        return made

    def addresses(self) -> dict[int, str]:
        return {node_id: node.address for node_id, node in self.nodes.items()}

    def transport(
        self,
        node: Node,
        deliver: Callable[[int, list[tuple[str, Message]]], None] | None = None,
        **bounds: Any,
    ) -> RaftTransport:
        bounds.setdefault("reconnect", FAST_RECONNECT)
        transport = RaftTransport(
            node.node_id,
            self.addresses(),
            deliver or node.deliver,
            bounds=TransportLimits(**bounds),
            draw=random.Random(node.node_id).random,
        )
        node.transport = transport
        self.transports.append(transport)
        return transport

    async def serve(self, node: Node, servicer: Any = None) -> grpc.aio.Server:
        server = grpc.aio.server()
        if servicer is not None:
            raft_pb2_grpc.add_RaftTransportServicer_to_server(servicer, server)
        else:
            assert node.transport is not None
            node.transport.add_to_server(server)
        assert server.add_insecure_port(node.address) == node.port
        await server.start()
        node.server = server
        self.servers.append(server)
        return server

    async def close(self) -> None:
        await asyncio.gather(*(transport.close() for transport in self.transports))
        await asyncio.gather(*(server.stop(grace=None) for server in self.servers))


@pytest.fixture
async def net() -> AsyncIterator[Net]:
    made = Net()
    try:
        yield made
    finally:
        await asyncio.wait_for(made.close(), WAIT_SECONDS_MAX)


async def test_batches_arrive_in_order_per_peer(net: Net) -> None:
    one, two, three = net.add(1, 2, 3)
    for node in (one, two, three):
        net.transport(node)
        await net.serve(node)
    assert one.transport is not None and three.transport is not None
    sent: dict[tuple[int, int], list[tuple[str, Message]]] = {(1, 2): [], (1, 3): [], (3, 2): []}
    for turn in range(200):
        for sender, to in sent:
            batch = [
                heartbeat(sender, to, f"g{turn % 7}", turn),
                append(sender, to, "a", turn + 1, 10),
            ]
            net.nodes[sender].transport.send(to, batch)  # type: ignore[union-attr]
            sent[sender, to].extend(batch)
        if turn % 3 == 0:
            await asyncio.sleep(0)  # several loop turns, some with several sends each
    for (sender, to), expected in sent.items():
        receiver = net.nodes[to]

        def arrived(
            receiver: Node = receiver, sender: int = sender, count: int = len(expected)
        ) -> bool:
            return len(receiver.messages_from(sender)) >= count

        await until(arrived, f"node {to} gets {len(expected)} messages from node {sender}")
        assert receiver.messages_from(sender) == expected
    # One stream per peer, reused for every batch.
    assert one.transport.counters[2].streams_opened == 1
    assert one.transport.counters[3].streams_opened == 1
    assert three.transport.counters[2].streams_opened == 1


async def test_one_stream_message_per_loop_turn_under_a_burst(net: Net) -> None:
    one, two = net.add(1, 2)
    sender = net.transport(one)
    net.transport(two)
    await net.serve(two)
    sender.send(2, [heartbeat(1, 2, "warm-up", 0)])
    await until(lambda: len(two.messages_from(1)) == 1, "the first message arrives")
    batches_before = len(two.delivered)
    # A burst: 500 groups heartbeat in one turn, each with its own send.
    started = time.monotonic()
    for group in range(500):
        sender.send(2, [heartbeat(1, 2, f"group-{group}", 1)])
    assert time.monotonic() - started < 0.5, "send never waits for the network"
    await until(lambda: len(two.messages_from(1)) == 501, "the burst arrives")
    assert len(two.delivered) == batches_before + 1, "one turn's messages in one stream message"
    counters = sender.counters[2]
    assert (counters.batches_sent, counters.messages_sent) == (2, 501)
    assert two.transport is not None
    assert two.transport.counters[1].batches_received == 2


async def test_an_empty_batch_is_a_keepalive(net: Net) -> None:
    one, two = net.add(1, 2)
    sender = net.transport(one)
    net.transport(two)
    await net.serve(two)
    sender.send(2, [])
    await until(lambda: len(two.delivered) == 1, "the keepalive arrives")
    assert two.delivered == [(1, [])]
    # With messages in the same turn, the keepalive adds nothing: they are the sign of life.
    sender.send(2, [])
    sender.send(2, [heartbeat(1, 2, "g", 1)])
    sender.send(2, [])
    await until(lambda: len(two.delivered) == 2, "the next batch arrives")
    await asyncio.sleep(0.05)
    assert two.delivered == [(1, []), (1, [heartbeat(1, 2, "g", 1)])]
    assert sender.counters[2].batches_sent == 2


async def test_a_burst_past_the_batch_target_is_cut(net: Net) -> None:
    one, two = net.add(1, 2)
    sender = net.transport(one, batch_bytes_target=10_000, message_bytes_max=5_000)
    net.transport(two)
    await net.serve(two)
    burst = [append(1, 2, "g", index, 1_000) for index in range(1, 101)]
    for pair in burst:
        sender.send(2, [pair])
    await until(lambda: len(two.messages_from(1)) == 100, "the burst arrives")
    assert two.messages_from(1) == burst
    # Each message counts a little over 1,000 bytes: a stream message is cut at its tenth.
    assert [len(batch) for _, batch in two.delivered] == [10] * 10


async def test_a_peer_down_then_up_drops_within_the_bound_then_flows(net: Net) -> None:
    one, two = net.add(1, 2)
    queue_bound = 16
    sender = net.transport(one, queue_messages_max=queue_bound)
    net.transport(two)
    # Node 2 is down: nothing listens on its port.
    down = [heartbeat(1, 2, "down", tick) for tick in range(100)]
    for pair in down:
        sender.send(2, [pair])
        await asyncio.sleep(0.005)
    assert sender.queued_messages(2) <= queue_bound
    counters = sender.counters[2]
    assert counters.reconnects >= 1 and counters.streams_opened == 0
    dropped = counters.dropped["queue_full"] + counters.dropped["unreachable"]
    assert dropped >= len(down) - queue_bound
    # Node 2 comes up; the same sender keeps sending and reaches it.
    await net.serve(two)
    up: list[tuple[str, Message]] = []

    async def keep_sending() -> None:
        tick = 0
        while True:
            up.append(heartbeat(1, 2, "up", tick))
            sender.send(2, [up[-1]])
            tick += 1
            await asyncio.sleep(0.02)

    task = asyncio.create_task(keep_sending())
    try:
        await until(lambda: any(g == "up" for g, _ in two.messages_from(1)), "node 2 is reached")
    finally:
        task.cancel()
    received = two.messages_from(1)
    from_down = [pair for pair in received if pair[0] == "down"]
    assert len(from_down) <= queue_bound, "at most a queue's worth of what was sent while down"
    assert from_down == down[len(down) - len(from_down) :], "the newest kept, the oldest dropped"
    from_up = [pair for pair in received if pair[0] == "up"]
    first = up.index(from_up[0])
    assert from_up == up[first : first + len(from_up)], "in order, none missing after the first"
    assert counters.streams_opened == 1


async def test_a_reconnect_round_that_gives_up_drops_the_queue_until_the_next_send(
    net: Net,
) -> None:
    one, two = net.add(1, 2)
    brief = RetryPolicy(attempts_max=3, base_seconds=0.01, cap_seconds=0.01, deadline_seconds=1)
    sender = net.transport(one, reconnect=brief)
    net.transport(two)
    sender.send(2, [heartbeat(1, 2, "g", tick) for tick in range(5)])
    counters = sender.counters[2]
    await until(lambda: counters.dropped["unreachable"] == 5, "the round gives up")
    assert sender.queued_messages(2) == 0 and counters.reconnects == 2
    await net.serve(two)
    sender.send(2, [heartbeat(1, 2, "g", 5)])
    await until(lambda: len(two.messages_from(1)) == 1, "the next send starts a new round")
    assert two.messages_from(1) == [heartbeat(1, 2, "g", 5)]


async def test_a_message_over_the_bound_is_dropped_alone(net: Net) -> None:
    one, two = net.add(1, 2)
    sender = net.transport(one, batch_bytes_target=10_000, message_bytes_max=5_000)
    net.transport(two)
    await net.serve(two)
    small, huge = append(1, 2, "g", 1, 100), append(1, 2, "g", 2, 10_000)
    sender.send(2, [small, huge, heartbeat(1, 2, "g", 3)])
    await until(lambda: len(two.messages_from(1)) == 2, "the others arrive")
    assert two.messages_from(1) == [small, heartbeat(1, 2, "g", 3)]
    assert sender.counters[2].dropped["oversize"] == 1


async def test_a_batch_the_core_cannot_read_is_refused(net: Net) -> None:
    (two,) = net.add(2)
    net.transport(two)
    await net.serve(two)
    unknown_kind = raft_pb2.RaftMessage(kind=99, sender=1, to=2)  # type: ignore[arg-type]
    record = raft_pb2.GroupMessage(message=raft_pb2.FullMessage(group="g", message=unknown_kind))
    async with grpc.aio.insecure_channel(two.address) as channel:
        call = raft_pb2_grpc.RaftTransportStub(channel).Send()
        await call.write(raft_pb2.RaftBatch(from_node=1, to_node=2, messages=[record]))
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await asyncio.wait_for(call, WAIT_SECONDS_MAX)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "unknown Raft message kind 99" in (refused.value.details() or "")
    assert two.delivered == []


class StalledServicer(raft_pb2_grpc.RaftTransportServicer):
    """A peer that accepts streams and never reads them: to its senders, a slow node."""

    def __init__(self) -> None:
        self.release = asyncio.Event()

    async def Send(self, request_iterator: Any, context: Any) -> raft_pb2.RaftSendDone:
        await asyncio.wait_for(self.release.wait(), WAIT_SECONDS_MAX)
        return raft_pb2.RaftSendDone()


async def test_a_stalled_peer_does_not_block_sends_to_the_others(net: Net) -> None:
    one, stalled, healthy = net.add(1, 2, 3)
    queue_bound = 32
    sender = net.transport(one, queue_messages_max=queue_bound, write_seconds_max=0.5)
    net.transport(healthy)
    stuck = StalledServicer()
    await net.serve(stalled, stuck)
    await net.serve(healthy)
    to_healthy: list[tuple[str, Message]] = []
    slowest_send = 0.0
    try:
        for index in range(1, 151):
            started = time.monotonic()
            # 256 KiB appends fill the stalled stream's flow-control window within a few turns.
            sender.send(2, [append(1, 2, "big", index, 256 * 1024)])
            to_healthy.append(heartbeat(1, 3, "small", index))
            sender.send(3, [to_healthy[-1]])
            slowest_send = max(slowest_send, time.monotonic() - started)
            assert sender.queued_messages(2) <= queue_bound
            await asyncio.sleep(0.01)
        await until(
            lambda: len(healthy.messages_from(1)) == len(to_healthy), "node 3 gets everything"
        )
    finally:
        stuck.release.set()
    assert healthy.messages_from(1) == to_healthy
    assert slowest_send < 0.1, "send never waits for a peer"
    counters = sender.counters[2]
    assert counters.dropped["queue_full"] + counters.dropped["broken"] > 0
    assert counters.reconnects >= 1, "the stalled stream was broken and opened again"
    assert sender.counters[3].dropped == dict.fromkeys(sender.counters[3].dropped, 0)


async def test_a_batch_for_another_node_is_refused(
    net: Net, caplog: pytest.LogCaptureFixture
) -> None:
    # Ids of their own: the log lines of a peer id are rate-limited across the tests.
    one, _, three = net.add(7, 8, 9)
    sender = net.transport(one)
    net.transport(three)
    await net.serve(three)
    # Node 7's address book is wrong: it believes node 8 listens where node 9 does.
    sender.set_addresses({8: three.address, 9: three.address})

    async def keep_sending() -> None:
        for tick in itertools.count():
            sender.send(8, [heartbeat(7, 8, "g", tick)])
            await asyncio.sleep(0.01)

    task = asyncio.create_task(keep_sending())
    try:
        await until(lambda: "FAILED_PRECONDITION" in caplog.text, "node 9 refuses the stream")
        await until(lambda: sender.counters[8].streams_opened >= 2, "node 7 tries again")
    finally:
        task.cancel()
    assert "node 9 got Raft messages for node 8" in caplog.text
    assert three.delivered == [], "no message stepped into the wrong node's groups"


async def test_a_peer_that_moves_is_reached_at_its_new_address(net: Net) -> None:
    one, two = net.add(1, 2)
    sender = net.transport(one)
    net.transport(two)
    await net.serve(two)
    sender.send(2, [heartbeat(1, 2, "g", 0)])
    await until(lambda: len(two.messages_from(1)) == 1, "node 2 is reached")
    assert two.server is not None
    await two.server.stop(grace=None)
    (two.port,) = free_ports(1)  # node 2 comes back on another port
    two.address = f"{LOOPBACK}:{two.port}"
    await net.serve(two)
    sender.set_addresses({2: two.address})
    sender.send(2, [heartbeat(1, 2, "g", 1)])
    await until(lambda: len(two.messages_from(1)) == 2, "node 2 is reached at its new address")
    sender.set_addresses({})  # node 2 leaves the cluster: its messages are dropped
    sender.send(2, [heartbeat(1, 2, "g", 2)])
    assert sender.counters[2].dropped["unknown_peer"] == 1


async def test_the_counters_are_prometheus_metrics(net: Net) -> None:
    one, two = net.add(1, 2)
    sender = net.transport(one)
    receiver = net.transport(two)
    await net.serve(two)
    sender.send(2, [heartbeat(1, 2, "g", 0), heartbeat(1, 2, "h", 0)])
    await until(lambda: len(two.messages_from(1)) == 2, "node 2 is reached")
    registry = CollectorRegistry()
    registry.register(sender)
    registry.register(receiver)
    sent = {"node": "1", "peer": "2"}
    assert registry.get_sample_value("dynalab_raft_messages_sent_total", sent) == 2
    assert registry.get_sample_value("dynalab_raft_batches_sent_total", sent) == 1
    got = {"node": "2", "peer": "1"}
    assert registry.get_sample_value("dynalab_raft_messages_received_total", got) == 2
    assert registry.get_sample_value("dynalab_raft_batches_received_total", got) == 1
    full = {**sent, "reason": "queue_full"}
    assert registry.get_sample_value("dynalab_raft_messages_dropped_total", full) == 0


# The Raft core over the transport -------------------------------------------------------------

GROUPS = ("g1", "g2", "g3", "g4")
TICK_SECONDS = 0.02


class RaftHost:
    """A node hosting one `RaftNode` per group over its transport: a tick loop, and each Ready
    persisted to the group's MemoryStorage, its messages sent, its committed entries applied."""

    def __init__(self, node: Node, voters: frozenset[int]) -> None:
        self.node = node
        self.storages = {group: MemoryStorage(ConfState(voters)) for group in GROUPS}
        seed = random.Random(node.node_id)
        self.rafts = {
            group: RaftNode(Config(node.node_id), self.storages[group], seed) for group in GROUPS
        }
        self.applied: dict[str, list[bytes]] = {group: [] for group in GROUPS}
        self.transport: RaftTransport | None = None

    def deliver(self, from_node: int, batch: list[tuple[str, Message]]) -> None:
        for group, message in batch:
            assert message.sender == from_node and message.to == self.node.node_id
            self.rafts[group].step(message)
        self.handle_ready()

    def handle_ready(self) -> None:
        assert self.transport is not None
        outbox: dict[int, list[tuple[str, Message]]] = {}
        for group, raft in self.rafts.items():
            while raft.has_ready():
                ready = raft.ready()
                self._persist(group, ready)
                for message in ready.messages:
                    outbox.setdefault(message.to, []).append((group, message))
                for entry in ready.committed_entries:
                    if entry.kind is EntryKind.NORMAL and entry.data:
                        self.applied[group].append(entry.data)
                raft.advance(ready)
        for to, batch in outbox.items():
            self.transport.send(to, batch)

    def _persist(self, group: str, ready: Ready) -> None:
        storage = self.storages[group]
        if ready.snapshot is not None:
            storage.apply_snapshot(ready.snapshot)
        storage.append(ready.entries)
        if ready.hard_state is not None:
            storage.set_hard_state(ready.hard_state)

    async def tick_loop(self) -> None:
        while True:
            for raft in self.rafts.values():
                raft.tick()
            self.handle_ready()
            await asyncio.sleep(TICK_SECONDS)


async def test_raft_groups_elect_and_commit_over_grpc(net: Net) -> None:
    nodes = net.add(1, 2, 3)
    voters = frozenset(node.node_id for node in nodes)
    hosts = {node.node_id: RaftHost(node, voters) for node in nodes}
    for node in nodes:
        hosts[node.node_id].transport = net.transport(node, hosts[node.node_id].deliver)
        await net.serve(node)
    loops = [asyncio.create_task(host.tick_loop()) for host in hosts.values()]
    try:

        def leaders() -> dict[str, int]:
            """Each group's leader of the highest term (a deposed one may not know it yet)."""
            found: dict[str, RaftNode] = {}
            for host in hosts.values():
                for group, raft in host.rafts.items():
                    if raft.role is Role.LEADER and (
                        group not in found or raft.term > found[group].term
                    ):
                        found[group] = raft
            return {group: raft.id for group, raft in found.items()}

        await until(lambda: len(leaders()) == len(GROUPS), "every group elects a leader")
        proposals = {group: [f"{group}-{n}".encode() for n in range(20)] for group in GROUPS}
        # A client per group: it proposes whatever its group's leader has not applied, again
        # whenever leadership moves (a deposed leader's uncommitted entries may be lost).
        proposed_at: dict[str, set[tuple[int, int]]] = {group: set() for group in GROUPS}

        def propose_missing() -> None:
            for group, leader in leaders().items():
                raft = hosts[leader].rafts[group]
                if (leader, raft.term) in proposed_at[group]:
                    continue
                proposed_at[group].add((leader, raft.term))
                for data in proposals[group]:
                    if data not in hosts[leader].applied[group]:
                        raft.propose(data)
                hosts[leader].handle_ready()

        def all_applied() -> bool:
            propose_missing()
            return all(
                set(proposals[group]) <= set(host.applied[group])
                and host.applied[group] == hosts[1].applied[group]
                for host in hosts.values()
                for group in GROUPS
            )

        await until(all_applied, "every proposal is applied on every node, in the same order")
        for group in GROUPS:
            if len(proposed_at[group]) == 1:  # one leader throughout: exactly in proposal order
                assert hosts[1].applied[group] == proposals[group]
        # Every member knows its group's leader, and all of it went over one stream per pair.
        await until(
            lambda: all(
                {host.rafts[group].leader for host in hosts.values()} == {leader}
                for group, leader in leaders().items()
            ),
            "every member knows its group's leader",
        )
        for host in hosts.values():
            assert host.transport is not None
            for peer, counters in host.transport.counters.items():
                assert counters.streams_opened == 1, (host.node.node_id, peer)
    finally:
        for task in loops:
            task.cancel()
        await asyncio.gather(*loops, return_exceptions=True)
