"""`LocalRaftNetwork`: the in-process twin of `rpc.raft_transport`, with seeded faults.

DESIGN.md ("Seams for faults and simulation") puts Raft's messages on the same seam as every other
call between processes: one small interface, `RaftSender` (`send(to, batch)` that never blocks,
and `close`), with the gRPC implementation (`rpc.raft_transport.RaftTransport`) and this one. A
node's multi-raft loop depends on the Protocol only, so the same loop runs over gRPC between
processes and over a `LocalRaftNetwork` in one process.

The twin keeps the real transport's contract and none of its sockets: each `send` is one batch,
which crosses the codec (`rpc.raft_codec`, so what a twin run steps is what gRPC would deliver)
and reaches the receiver's `deliver(from_node, batch)` on a later turn of the event loop. Faults
come from one seeded `random.Random`, so a seed replays a run's faults: a batch may be dropped
(`drop_rate`), delivered twice (`duplicate_rate`), or delayed up to `delay_seconds_max` (which
reorders batches, as a reconnect of the real transport may); a link may be cut in one direction
or both (`cut`, `heal`). A node that left the network, or closed its transport, receives nothing.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import random
from collections.abc import Sequence
from typing import Protocol

from core.raft.messages import Message
from rpc.raft_codec import decode_batch, encode_batch
from rpc.raft_transport import Deliver


class RaftSender(Protocol):
    """How a node sends Raft messages: to a peer by member id, never blocking, maybe lost. An
    empty batch is a keepalive, delivered as an empty batch."""

    def send(self, to: int, batch: Sequence[tuple[str, Message]]) -> None: ...

    async def close(self) -> None: ...


@dataclasses.dataclass
class LinkCounters:
    """Batches on one directed link since the network started."""

    delivered: int = 0
    dropped: int = 0
    duplicated: int = 0


class LocalRaftNetwork:
    """Nodes in one process, joined by links that drop, duplicate, delay and cut from a seed."""

    def __init__(
        self,
        seed: int,
        *,
        drop_rate: float = 0.0,
        duplicate_rate: float = 0.0,
        delay_seconds_max: float = 0.0,
    ) -> None:
        if not (0 <= drop_rate <= 1 and 0 <= duplicate_rate <= 1 and delay_seconds_max >= 0):
            raise ValueError("rates are shares in 0..1 and the delay is not negative")
        self.random = random.Random(seed)
        self.drop_rate = drop_rate
        self.duplicate_rate = duplicate_rate
        self.delay_seconds_max = delay_seconds_max
        self.counters: dict[tuple[int, int], LinkCounters] = {}
        self._delivers: dict[int, Deliver] = {}
        self._cut: set[tuple[int, int]] = set()
        self._in_flight: dict[int, asyncio.TimerHandle] = {}
        self._ids = itertools.count()

    def join(self, node_id: int, deliver: Deliver) -> LocalRaftTransport:
        """Node `node_id` joins; batches sent to it reach `deliver`."""
        assert node_id not in self._delivers, f"node {node_id} joined twice"
        self._delivers[node_id] = deliver
        return LocalRaftTransport(self, node_id)

    def leave(self, node_id: int) -> None:
        """Node `node_id` is gone (crashed, stopped): what is sent to it, or in flight, is lost."""
        self._delivers.pop(node_id, None)

    def cut(self, a: int, b: int, *, both_ways: bool = True) -> None:
        """Batches from `a` to `b` (and from `b` to `a`) are lost until `heal`."""
        self._cut.add((a, b))
        if both_ways:
            self._cut.add((b, a))

    def reachable(self, a: int, b: int) -> bool:
        """Whether batches from `a` reach `b` now (both joined, the link not cut)."""
        return a in self._delivers and b in self._delivers and (a, b) not in self._cut

    def heal(self, node: int | None = None) -> None:
        """Every link cut is whole again; given `node`, only that node's links."""
        if node is None:
            self._cut.clear()
        else:
            self._cut = {link for link in self._cut if node not in link}

    def close(self) -> None:
        """Cancel every batch still in flight."""
        for timer in self._in_flight.values():
            timer.cancel()
        self._in_flight.clear()

    def carry(self, from_node: int, to: int, batch: Sequence[tuple[str, Message]]) -> None:
        """One batch from `from_node` to `to`, through the codec and the link's faults."""
        counters = self.counters.setdefault((from_node, to), LinkCounters())
        if (from_node, to) in self._cut or self.random.random() < self.drop_rate:
            counters.dropped += 1
            return
        copies = 2 if self.random.random() < self.duplicate_rate else 1
        counters.duplicated += copies - 1
        loop = asyncio.get_running_loop()
        for _ in range(copies):
            received = decode_batch(encode_batch(from_node, to, batch))
            delay = self.random.uniform(0, self.delay_seconds_max)
            flight = next(self._ids)
            self._in_flight[flight] = loop.call_later(
                delay, self._arrive, flight, from_node, to, received
            )

    def _arrive(
        self, flight: int, from_node: int, to: int, batch: list[tuple[str, Message]]
    ) -> None:
        del self._in_flight[flight]
        deliver = self._delivers.get(to)
        counters = self.counters[from_node, to]
        if deliver is None or (from_node, to) in self._cut:
            counters.dropped += 1
            return
        counters.delivered += 1
        deliver(from_node, batch)


class LocalRaftTransport:
    """One node's `RaftSender` on a `LocalRaftNetwork`."""

    def __init__(self, network: LocalRaftNetwork, node_id: int) -> None:
        self.network = network
        self.node_id = node_id
        self._closed = False

    def send(self, to: int, batch: Sequence[tuple[str, Message]]) -> None:
        assert to != self.node_id, "a node does not send Raft messages to itself"
        if self._closed:
            return  # an empty batch is carried: it is the sender's keepalive
        self.network.carry(self.node_id, to, batch)

    async def close(self) -> None:
        """Send nothing more, and receive nothing more."""
        self._closed = True
        self.network.leave(self.node_id)
