"""`RaftTransport`: Raft messages between storage nodes over gRPC, one stream per peer node.

A node hosts many Raft groups (one per partition replica), and any two nodes share many of them.
Sending each group's messages on its own would cost a gRPC message (and a heartbeat) per group
per tick; instead, as TiKV's raft client batches per store and CockroachDB's RaftTransport per
node pair, everything one node sends another shares one long-lived client stream
(`proto/rpc/raft.proto`, service RaftTransport): whatever the node's groups queued for that peer
in one turn of the event loop goes out as one stream message (cut at
`limits.RAFT_TRANSPORT_BATCH_BYTES_TARGET`), and heartbeats in it travel as compact per-group
records (`rpc.raft_codec`, which says why that is safe).

Sending never blocks the caller. `send(to, batch)` appends to the peer's queue and returns; the
peer's own task opens the stream (and opens it again after it breaks, with backoff from
`RAFT_RECONNECT`), drains the queue and writes. A peer that is down or slow must not make the
node hold its messages without bound, nor delay its other peers: each peer's queue is bounded
(messages and bytes) and drops its OLDEST messages past the bound, and each peer has its own
task, so a stalled write delays nobody else (and is broken after
`limits.RAFT_TRANSPORT_WRITE_SECONDS_MAX`). Dropping is safe because Raft never relies on a
message arriving: a leader heartbeats every tick and resends appends from what each follower
acknowledged, a candidate's election times out and starts over, and a lost response is a lost
request to the sender. The oldest go first because the newest say the most (a later heartbeat
carries a later commit and lease round, a later append follows from the latest progress).

Receiving: the node registers `servicer` on its gRPC server; each stream message is decoded and
handed to `deliver(from_node, batch)` in the order received, so on one stream a peer's messages
arrive in the order it queued them (some may be missing). Across a reconnect, what the receiver
had already read of the broken stream may still be delivered after the first batch of the next:
Raft takes that as the reordering any network may do. `deliver` runs on the event loop and must be
quick: step the messages into their groups and return.

Peers are member ids, mapped to addresses by `set_addresses` (given at start, updated as nodes
join, leave or move). Counters per peer (`PeerCounters`) are exported to Prometheus by
registering the transport itself as a collector:

    dynalab_raft_messages_sent_total        messages written to a peer's stream
    dynalab_raft_batches_sent_total         stream messages written to a peer
    dynalab_raft_messages_received_total    messages received from a peer
    dynalab_raft_batches_received_total     stream messages received from a peer
    dynalab_raft_messages_dropped_total     messages not sent, by reason: queue_full (the oldest
                                            past a bound), unreachable (the queue, when a
                                            reconnect round gave up), broken (in a write that
                                            failed), oversize, unknown_peer (no address)
    dynalab_raft_reconnects_total           attempts to open a stream after the first (after
                                            one broke, or an attempt failed)

all labelled with this node's id and the peer's.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
import random
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence

import grpc
from prometheus_client.core import CounterMetricFamily, Metric

from core import limits
from core.raft.messages import Message
from core.retry import RetryPolicy
from rpc import raft_pb2, raft_pb2_grpc
from rpc.client import CHANNEL_OPTIONS
from rpc.raft_codec import RaftDecodeError, decode_batch, encode_batch, message_bytes
from rpc.ratelog import RateLimitedLog

logger = logging.getLogger(__name__)
# A peer that is down fails every connection attempt: one line per peer now and then.
unreachable_log = RateLimitedLog(logger)

SERVICE_NAME = "dynalab.rpc.RaftTransport"

# What a receiving node does with each batch: step `(group, message)` pairs from `from_node`.
Deliver = Callable[[int, list[tuple[str, Message]]], None]

# Reconnecting to a peer: 50 ms doubling to 1 s, with full jitter so the nodes that lost the same
# peer do not knock in lockstep; a round gives up after its attempts or its deadline.
RAFT_RECONNECT = RetryPolicy(
    attempts_max=limits.RAFT_TRANSPORT_RECONNECT_ATTEMPTS_MAX,
    base_seconds=limits.RAFT_TRANSPORT_RECONNECT_BACKOFF_SECONDS_MIN,
    cap_seconds=limits.RAFT_TRANSPORT_RECONNECT_BACKOFF_SECONDS_MAX,
    deadline_seconds=limits.RAFT_TRANSPORT_RECONNECT_SECONDS_MAX,
)

DROP_REASONS = ("queue_full", "unreachable", "broken", "oversize", "unknown_peer")


@dataclasses.dataclass
class PeerCounters:
    """What this node sent to and received from one peer since it started."""

    messages_sent: int = 0
    batches_sent: int = 0
    messages_received: int = 0
    batches_received: int = 0
    reconnects: int = 0
    streams_opened: int = 0
    dropped: dict[str, int] = dataclasses.field(
        default_factory=lambda: dict.fromkeys(DROP_REASONS, 0)
    )


@dataclasses.dataclass(frozen=True)
class TransportLimits:
    """The bounds one transport runs with (tests shrink them; nodes use the defaults)."""

    queue_messages_max: int = limits.RAFT_TRANSPORT_QUEUE_MESSAGES_MAX
    queue_bytes_max: int = limits.RAFT_TRANSPORT_QUEUE_BYTES_MAX
    batch_bytes_target: int = limits.RAFT_TRANSPORT_BATCH_BYTES_TARGET
    message_bytes_max: int = limits.RAFT_TRANSPORT_MESSAGE_BYTES_MAX
    connect_seconds_max: float = limits.RAFT_TRANSPORT_CONNECT_SECONDS_MAX
    write_seconds_max: float = limits.RAFT_TRANSPORT_WRITE_SECONDS_MAX
    reconnect: RetryPolicy = RAFT_RECONNECT

    def __post_init__(self) -> None:
        if not 1 <= self.message_bytes_max <= self.queue_bytes_max:
            raise ValueError("a queue must hold the largest message it accepts")
        if self.queue_messages_max < 1 or self.batch_bytes_target < 1:
            raise ValueError("queues and batches hold at least one message")
        if self.batch_bytes_target + self.message_bytes_max > limits.RPC_MESSAGE_BYTES_MAX:
            raise ValueError("a batch must fit one gRPC message")


class RaftTransport:
    """This node's end of the Raft transport: `send` to peers, `servicer` to receive."""

    def __init__(
        self,
        node_id: int,
        addresses: Mapping[int, str],
        deliver: Deliver,
        *,
        bounds: TransportLimits | None = None,
        draw: Callable[[], float] | None = None,
    ) -> None:
        self.node_id = node_id
        self.bounds = bounds or TransportLimits()
        # Reconnect jitter: random by default; a test may pass a seeded source's `random`.
        self.draw = draw or random.random
        self.counters: dict[int, PeerCounters] = collections.defaultdict(PeerCounters)
        self.servicer = RaftServicer(node_id, deliver, self.counters)
        self._addresses: dict[int, str] = {}
        self._peers: dict[int, _Peer] = {}
        self._closing: set[asyncio.Task[None]] = set()  # channels of peers no longer listed
        self._closed = False
        self.set_addresses(addresses)

    def send(self, to: int, batch: Sequence[tuple[str, Message]]) -> None:
        """Queue `(group, message)` pairs for node `to`; they leave with everything else queued
        for it in this turn of the event loop. Never blocks; past the queue's bounds the oldest
        queued messages are dropped. An empty batch is a keepalive: the peer's `deliver` gets an
        empty batch this turn unless something else goes anyway, so a multi-raft host whose idle
        groups sleep still tells its peers it is alive. Must be called on the event loop."""
        assert to != self.node_id, "a node does not send Raft messages to itself"
        if self._closed:
            return
        peer = self._peers.get(to)
        if peer is None:
            address = self._addresses.get(to)
            if address is None:
                self.counters[to].dropped["unknown_peer"] += len(batch)
                unreachable_log.warning(
                    f"raft-peer-{to}", f"no address for node {to}: Raft messages to it dropped"
                )
                return
            peer = self._peers[to] = _Peer(self, to, address)
        peer.enqueue(batch)

    def set_addresses(self, addresses: Mapping[int, str]) -> None:
        """Address peers by member id from now on: a peer whose address changed gets a new stream
        (its queue kept); a peer no longer listed is dropped with its queue."""
        self._addresses = {peer: address for peer, address in addresses.items()}
        for peer_id, peer in list(self._peers.items()):
            address = self._addresses.get(peer_id)
            if address is None:
                del self._peers[peer_id]
                peer.close()
                closing = asyncio.get_running_loop().create_task(peer.close_channel())
                self._closing.add(closing)
                closing.add_done_callback(self._closing.discard)
            elif address != peer.address:
                peer.readdress(address)

    def queued_messages(self, peer_id: int) -> int:
        """How many messages wait for `peer_id`'s stream (at most the queue's bound)."""
        peer = self._peers.get(peer_id)
        return 0 if peer is None else len(peer.queue)

    @property
    def addresses(self) -> dict[int, str]:
        return dict(self._addresses)

    def add_to_server(self, server: grpc.aio.Server) -> None:
        """Register the receiving end on this node's gRPC server."""
        raft_pb2_grpc.add_RaftTransportServicer_to_server(self.servicer, server)

    async def close(self) -> None:
        """Stop sending: drop every queue, end every stream and close every channel."""
        self._closed = True
        peers, self._peers = list(self._peers.values()), {}
        for peer in peers:
            peer.close()
        tasks = [peer.task for peer in peers] + list(self._closing)
        if tasks:
            await asyncio.wait(tasks, timeout=limits.RAFT_TRANSPORT_CONNECT_SECONDS_MAX)
        await asyncio.gather(*(peer.close_channel() for peer in peers))

    def collect(self) -> Iterator[Metric]:
        """The counters as Prometheus families (the transport is a prometheus-client collector:
        `registry.register(transport)`)."""
        labels = ["node", "peer"]
        families = {
            name: CounterMetricFamily(f"dynalab_raft_{name}", help_text, labels=labels)
            for name, help_text in (
                ("messages_sent", "Raft messages written to a peer's stream"),
                ("batches_sent", "Stream messages (batches of Raft messages) written to a peer"),
                ("messages_received", "Raft messages received from a peer"),
                ("batches_received", "Stream messages received from a peer"),
                ("reconnects", "Attempts to open a stream to a peer after the first"),
            )
        }
        dropped = CounterMetricFamily(
            "dynalab_raft_messages_dropped",
            "Raft messages to a peer not sent, by reason",
            labels=[*labels, "reason"],
        )
        node = str(self.node_id)
        for peer_id, counters in sorted(self.counters.items()):
            peer = str(peer_id)
            for name, family in families.items():
                family.add_metric([node, peer], getattr(counters, name))
            for reason, count in counters.dropped.items():
                dropped.add_metric([node, peer, reason], count)
        yield from families.values()
        yield dropped


class _Peer:
    """One peer node: its bounded queue, its stream and the task that writes to it."""

    def __init__(self, transport: RaftTransport, peer_id: int, address: str) -> None:
        self.transport = transport
        self.peer_id = peer_id
        self.address = address
        self.bounds = transport.bounds
        self.counters = transport.counters[peer_id]
        self.queue: collections.deque[tuple[str, Message, int]] = collections.deque()
        self.queued_bytes = 0
        # An empty batch was sent: write a stream message even if the queue is empty.
        self.keepalive = False
        self.wakeup = asyncio.Event()
        self.channel: grpc.aio.Channel | None = None
        self.call: grpc.aio.StreamUnaryCall[raft_pb2.RaftBatch, raft_pb2.RaftSendDone] | None = None
        self.ever_opened = False
        self.task = asyncio.get_running_loop().create_task(self._run())

    def enqueue(self, batch: Sequence[tuple[str, Message]]) -> None:
        if not batch:
            self.keepalive = True
        for group, message in batch:
            size = message_bytes(group, message)
            if size > self.bounds.message_bytes_max:
                self.counters.dropped["oversize"] += 1
                logger.warning(
                    "a %s message of %d bytes for node %d in group %s is over the bound of %d: "
                    "dropped",
                    message.kind.value,
                    size,
                    self.peer_id,
                    group,
                    self.bounds.message_bytes_max,
                )
                continue
            self.queue.append((group, message, size))
            self.queued_bytes += size
        while (
            len(self.queue) > self.bounds.queue_messages_max
            or self.queued_bytes > self.bounds.queue_bytes_max
        ):
            _, _, size = self.queue.popleft()
            self.queued_bytes -= size
            self.counters.dropped["queue_full"] += 1
        self.wakeup.set()

    def readdress(self, address: str) -> None:
        """The peer moved: the next batch goes over a new stream to `address`."""
        self.address = address
        self._break()

    def close(self) -> None:
        self.queue.clear()
        self.queued_bytes = 0
        self.keepalive = False
        self.task.cancel()
        self._break()

    async def close_channel(self) -> None:
        channel, self.channel = self.channel, None
        if channel is not None:
            await channel.close()

    async def _run(self) -> None:
        """Idle until messages are queued; then open the stream if needed and write them."""
        try:
            while True:
                await self.wakeup.wait()  # idle: only `send` or `close` ends this wait
                self.wakeup.clear()
                while self.queue or self.keepalive:
                    if self.call is not None and self.call.done():
                        await self._stream_ended(self.call)
                    if self.call is None and not await self._reconnect_round():
                        break
                    await self._write_one()
        except asyncio.CancelledError:
            raise
        except Exception:
            # A bug: log it loudly; the peer's queue stays bounded, and the next send starts
            # a new task rather than leave this peer silent forever.
            logger.exception("the Raft sender to node %d failed", self.peer_id)
            self.transport._peers.pop(self.peer_id, None)
            self._break()

    async def _reconnect_round(self) -> bool:
        """Open a stream, retrying with `bounds.reconnect`; on giving up, drop the queue (Raft will
        send again; the next send starts a new round) and answer False."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        attempt = 0
        while True:
            if self.ever_opened:
                self.counters.reconnects += 1
            self.ever_opened = True
            reason = await self._open()
            if reason is None:
                return True
            unreachable_log.warning(
                f"raft-peer-{self.peer_id}",
                f"Raft stream to node {self.peer_id} at {self.address} failed: {reason}",
            )
            pause = self.bounds.reconnect.pause(
                attempt, loop.time() - started, self.transport.draw()
            )
            if pause is None:
                self.counters.dropped["unreachable"] += len(self.queue)
                self.queue.clear()
                self.queued_bytes = 0
                self.keepalive = False
                return False
            attempt += 1
            await asyncio.sleep(pause)

    async def _stream_ended(
        self, call: grpc.aio.StreamUnaryCall[raft_pb2.RaftBatch, raft_pb2.RaftSendDone]
    ) -> None:
        """The peer ended the stream: say why unless it was stopping, and drop the stream."""
        code = await call.code()
        if code not in (grpc.StatusCode.OK, grpc.StatusCode.CANCELLED):
            # A refusal (a misaddressed or unreadable batch) is a bug or a misconfiguration:
            # what was written since the last batch the peer read was lost with it.
            unreachable_log.warning(
                f"raft-peer-{self.peer_id}",
                f"node {self.peer_id} at {self.address} ended the Raft stream: "
                f"{code.name} {await call.details()}",
            )
        self.call = None

    async def _open(self) -> str | None:
        """Open a stream to the peer on a fresh channel; None when open, else why not."""
        await self.close_channel()
        # A fresh channel per attempt (with CHANNEL_OPTIONS' local subchannel pool), so gRPC's own
        # reconnect backoff never adds to ours.
        self.channel = grpc.aio.insecure_channel(self.address, options=CHANNEL_OPTIONS)
        call = raft_pb2_grpc.RaftTransportStub(self.channel).Send()
        try:
            async with asyncio.timeout(self.bounds.connect_seconds_max):
                await call.wait_for_connection()
        except TimeoutError:
            call.cancel()
            return f"not connected within {self.bounds.connect_seconds_max:g} s"
        except grpc.aio.AioRpcError as error:
            return f"{error.code().name} {error.details()}"
        except asyncio.CancelledError:
            _reraise_if_cancelled()
            return "the stream was cancelled as it opened (the peer moved)"
        if call.done():
            return "the stream ended as it opened"
        self.call = call
        self.counters.streams_opened += 1
        return None

    async def _write_one(self) -> None:
        """Write the queue's oldest messages, up to the batch target, as one stream message (an
        empty one for a keepalive)."""
        assert self.call is not None
        self.keepalive = False
        taken: list[tuple[str, Message]] = []
        size = 0
        while self.queue and size < self.bounds.batch_bytes_target:
            group, message, message_size = self.queue.popleft()
            self.queued_bytes -= message_size
            size += message_size
            taken.append((group, message))
        batch = encode_batch(self.transport.node_id, self.peer_id, taken)
        try:
            # A timeout scope rather than wait_for, which (before Python 3.12) runs the write in
            # a task of its own.
            async with asyncio.timeout(self.bounds.write_seconds_max):
                await self.call.write(batch)
        except asyncio.CancelledError:
            # gRPC raises CancelledError from a write whose call was cancelled under it (the
            # peer moved, `readdress`): the stream is gone, not this task.
            _reraise_if_cancelled()
            self.counters.dropped["broken"] += len(taken)
            self._break()
            return
        except (TimeoutError, grpc.aio.AioRpcError, asyncio.InvalidStateError) as error:
            # Lost with the stream (the peer may have read some): Raft sends again.
            self.counters.dropped["broken"] += len(taken)
            unreachable_log.warning(
                f"raft-peer-{self.peer_id}",
                f"Raft stream to node {self.peer_id} at {self.address} broke: {_describe(error)}",
            )
            self._break()
            return
        self.counters.batches_sent += 1
        self.counters.messages_sent += len(taken)

    def _break(self) -> None:
        call, self.call = self.call, None
        if call is not None:
            call.cancel()


class RaftServicer(raft_pb2_grpc.RaftTransportServicer):
    """The receiving end: each stream message decoded and handed to `deliver`, in order."""

    def __init__(self, node_id: int, deliver: Deliver, counters: dict[int, PeerCounters]) -> None:
        self.node_id = node_id
        self.deliver = deliver
        self.counters = counters

    async def Send(
        self,
        request_iterator: AsyncIterator[raft_pb2.RaftBatch],
        context: grpc.aio.ServicerContext[raft_pb2.RaftBatch, raft_pb2.RaftSendDone],
    ) -> raft_pb2.RaftSendDone:
        async for proto in request_iterator:
            if proto.to_node != self.node_id:
                # The sender's address book is wrong: refusing shows it at once, where stepping
                # the messages into this node's groups would corrupt them.
                await context.abort(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"node {self.node_id} got Raft messages for node {proto.to_node}",
                )
            try:
                batch = decode_batch(proto)
            except RaftDecodeError as error:
                await context.abort(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"node {self.node_id} cannot read Raft messages from node "
                    f"{proto.from_node}: {error}",
                )
            counters = self.counters[proto.from_node]
            counters.batches_received += 1
            counters.messages_received += len(batch)
            self.deliver(proto.from_node, batch)
        return raft_pb2.RaftSendDone()


def _reraise_if_cancelled() -> None:
    """Inside `except CancelledError`: re-raise when this task itself is being cancelled."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


def _describe(error: BaseException) -> str:
    if isinstance(error, grpc.aio.AioRpcError):
        return f"{error.code().name} {error.details()}"
    if isinstance(error, TimeoutError):
        return "a write did not finish in time (the peer stopped reading)"
    return repr(error)
