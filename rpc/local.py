"""`LocalNetwork` and `LocalTransport`: storage nodes called in-process, with seeded faults.

The in-process twin of `rpc.client.NodeClient` (both satisfy `rpc.transport.NodeTransport`), for
simulating a whole cluster in one process (`tests/sim`). A node is registered on the network under
its address as an *endpoint*: anything with `check_target(op, target)`, `read(op, target, body)`
and `apply_writes(writes)`, which a
`storagenode.node.StorageNode` is (rpc does not import storagenode; the caller says which ops are
writes). A write is applied as a group of one, as the group committer would apply it.

What crosses the network behaves as over gRPC: the envelope (`rpc.ops.Target`, immutable) is
checked before the body is decoded; request and reply bodies are JSON-encoded with orjson and
decoded on the other side, so no mutable object is shared between "processes"; a node's error
comes back through `rpc.codec` as a fresh instance of the same `core.errors` type (an unexpected
exception in the node as InternalServerError, as the gRPC server reports it); and a call that is
lost or late raises `ServiceUnavailable` with NodeClient's messages, and one to an unreachable
node `rpc.transport.NotSent` (a ServiceUnavailable: never delivered, so never applied).

Faults (`Faults`) are drawn per call from the network's seeded `random.Random`, the same number of
draws for every call, so a run whose calls happen in the same order replays exactly (under
`tests/sim`'s virtual-time loop they do). Per call, with its probability:

- drop the request: not applied; the caller waits its timeout (bounded by `timeout_seconds`, a
  short simulated timeout) and gets what NodeClient raises for a call sent and not answered
  (`rpc.transport.unanswered`: OutcomeUnknown for a write, ServiceUnavailable otherwise);
- drop the reply: applied; the caller waits and fails as above;
- delay: the request waits a seeded duration in [0, `delay_seconds_max`) before it is delivered
  (if that is past the caller's timeout, the node would refuse it at its deadline: it is dropped
  as above);
- duplicate (writes only): the write is applied twice, the copy right after the original; the
  caller gets the original's reply.

The change feed is on the same network (`LocalTransport.feed()`, a `LocalFeed`:
`rpc.transport.FeedTransport`). Register, checkpoint and unregister are delivered as the node's
consumer writes (`rpc.ops.FEED_OPS`), with the faults above, as the gRPC servicer submits them. A
follow is served by the node's feed endpoint (`storagenode.feed_service.FeedService`, registered
with the node), its batches JSON-encoded as well; opening one draws the faults of a call (a
dropped request fails it once the simulated timeout passes), and so does each batch:

- drop: the stream breaks (a stream loses no single message, it fails): ServiceUnavailable, after
  the simulated timeout;
- delay: the batch arrives a seeded duration later (past the follower's idle bound: it fails);
- duplicate: the batch arrives twice, as a follow resumed from an older checkpoint would send it;

and a follow to a node that is cut, or replaced by a restart, fails as over gRPC
(ServiceUnavailable).

A node's multi-step operations (a split, a move: `rpc.ops.SPLIT_PARTITION`, `MOVE_PARTITION`,
run by its drivers) are served when the node is registered with a `drive` for them: as the gRPC
server does, each runs as a task of the node, answered when it ends; a caller that stops waiting
(its timeout, a lost reply) leaves it running, and a node that is killed cancels it.

`cut(address)` makes a node unreachable (every call fails at once with ServiceUnavailable, nothing
is applied) until `heal(address)`. A data-plane request carries its deadline (`Target.deadline`,
from the network's `clock`, virtual under `tests/sim`) for the node to check. Every decision is
appended to `LocalNetwork.log`, which two runs of one seed must produce identically.

Each transport names the process it belongs to (`connector(source)`: a router, a replicator, a
node's own drivers), and with a `trace` the network hands it every message that crosses it as a
`Hop` (a request, its reply, a feed batch: who sent it to whom, when it left and arrived on the
network's clock, and what became of it), which the fault lab draws as a message timeline. A trace
draws nothing from the seeded source, so a traced run is the same run as an untraced one.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import itertools
import logging
import random
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Collection, Sequence
from typing import Any, Protocol

import orjson

from core import limits
from core.changes import Change
from core.errors import DynamoError, InternalServerError, ServiceUnavailable
from rpc import codec, ops
from rpc.changefeed import error_from_proto, error_to_proto
from rpc.ops import Target
from rpc.transport import ConsumerPosition, FeedPage, NotSent, unanswered

logger = logging.getLogger("rpc.local")


class Endpoint(Protocol):
    """An in-process node as the network calls it (`storagenode.node.StorageNode` is one)."""

    def check_target(self, op: str, target: Target | None) -> None: ...

    def read(self, op: str, target: Target | None, body: dict[str, Any]) -> dict[str, Any]: ...

    def apply_writes(
        self, writes: Sequence[tuple[str, Target | None, dict[str, Any]]]
    ) -> Sequence[dict[str, Any] | DynamoError]: ...


class FeedEndpoint(Protocol):
    """A node's change feed as the network serves it (`storagenode.feed_service.FeedService`)."""

    def follow(
        self,
        table_id: str,
        partition_id: str,
        *,
        consumer: str,
        after_seq: int | None,
        records_max: int,
        encode: Callable[[FeedPage], bytes],
    ) -> AsyncGenerator[bytes, None]: ...

    def drain(self) -> None: ...


@dataclasses.dataclass(frozen=True)
class Faults:
    """Per-call fault probabilities (0 to 1) and the bounds of simulated waits, in seconds."""

    drop_request: float = 0.0
    drop_reply: float = 0.0
    delay: float = 0.0
    duplicate: float = 0.0
    delay_seconds_max: float = 0.005
    timeout_seconds: float = 0.01  # How long a lost call waits at most before it fails.


NO_FAULTS = Faults()


@dataclasses.dataclass(frozen=True, slots=True)
class Hop:
    """One message across the network, as a trace sees it.

    `kind` is "request", "reply" or "batch" (a feed batch, node to follower); `source` and
    `destination` are a transport's process name or a node's address; the times are the network's
    `clock`, and `arrived_at` is None for a message that never arrived. `fate` says what became of
    it: a request "delivered", "duplicated" (applied twice), "dropped", "late" (past its caller's
    timeout), "unreachable" (the node is cut off or gone) or "cut" (cut off on its way); a reply
    "ok", the error type it carried, or "dropped"; a batch "delivered", "duplicated", "dropped",
    "late", "cut", or the error that ended its follow. `call_id` joins a request to its reply, and
    a follow's batches to its opening request; `detail` is free text (a partition, a count)."""

    call_id: int
    kind: str
    source: str
    destination: str
    op: str
    sent_at: float
    arrived_at: float | None
    fate: str
    detail: str = ""


Trace = Callable[[Hop], None]


# Runs one of a node's multi-step operations (its op and body): the reply, or a DynamoError.
Drive = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]
# Serves one request as a node's server does, awaited: (op, target, body, whether it is a write)
# to its reply, or raising its DynamoError. For nodes whose writes go through a write loop that
# commits them later (replicated partitions: `dynalab.sim.cluster`), where `apply_writes` would
# apply them beside the loop.
Serve = Callable[[str, Target | None, dict[str, Any], bool], Awaitable[dict[str, Any]]]


@dataclasses.dataclass
class _Node:
    endpoint: Endpoint
    write_ops: Collection[str]
    feed: FeedEndpoint | None = None
    driver_ops: Collection[str] = ()
    drive: Drive | None = None
    serve: Serve | None = None


class LocalNetwork:
    """The in-process nodes by address, the faults in force and the seeded source of them."""

    def __init__(
        self,
        rng: random.Random,
        faults: Faults = NO_FAULTS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.rng = rng
        self.faults = faults
        self.clock = clock  # Unix time, for the deadlines requests carry.
        self.log: list[str] = []
        self.trace: Trace | None = None  # Given every Hop, when set (module docstring).
        self._nodes: dict[str, _Node] = {}
        self._cut: set[str] = set()
        self._ids = itertools.count(1)

    def register(
        self,
        address: str,
        endpoint: Endpoint,
        write_ops: Collection[str],
        feed: FeedEndpoint | None = None,
        *,
        driver_ops: Collection[str] = (),
        drive: Drive | None = None,
        serve: Serve | None = None,
    ) -> None:
        """Serve `endpoint` at `address`; ops in `write_ops` go to its apply_writes, follows to
        `feed`, ops in `driver_ops` to `drive`; with `serve`, every request but the drivers' and
        the follows goes to it instead, awaited. A node registered again (a restart) replaces the
        one before, whose follows end."""
        previous = self._nodes.get(address)
        if previous is not None and previous.feed is not None and previous.feed is not feed:
            previous.feed.drain()
        self._nodes[address] = _Node(endpoint, write_ops, feed, driver_ops, drive, serve)

    def connect(self, address: str, source: str = "") -> LocalTransport:
        """A transport to the node at `address` (the `connect` a RouterContext takes), for the
        process named `source`."""
        return LocalTransport(self, address, source)

    def connector(self, source: str) -> Callable[[str], LocalTransport]:
        """The `connect` of the process named `source`: its messages are traced as its."""
        return functools.partial(self.connect, source=source)

    def _hop(
        self,
        call_id: int,
        kind: str,
        source: str,
        destination: str,
        op: str,
        sent_at: float,
        arrived_at: float | None,
        fate: str,
        detail: str = "",
    ) -> None:
        if self.trace is not None:
            self.trace(
                Hop(call_id, kind, source, destination, op, sent_at, arrived_at, fate, detail)
            )

    def cut(self, address: str) -> None:
        """Make the node unreachable until `heal`."""
        self._cut.add(address)
        self.log.append(f"cut {address}")

    def heal(self, address: str | None = None) -> None:
        """Make the node (None: every node) reachable again."""
        if address is None:
            self._cut.clear()
        else:
            self._cut.discard(address)
        self.log.append(f"heal {address}")

    async def deliver(
        self,
        address: str,
        op: str,
        target: Target | None,
        payload: dict[str, Any],
        timeout: float,
        source: str = "",
    ) -> dict[str, Any]:
        """Carry one call from the process `source` to its node and its reply back, with the
        faults the seed decides."""
        call_id = next(self._ids)
        faults = self.faults
        draws = [self.rng.random() for _ in range(5)]  # The same number for every call.
        sent_at = self.clock()
        node = self._nodes.get(address)
        if node is None or address in self._cut:
            self.log.append(f"{call_id} {address} {op} unreachable")
            self._hop(call_id, "request", source, address, op, sent_at, None, "unreachable")
            await asyncio.sleep(0)
            # Never delivered, so not applied: what NodeClient raises for a node it cannot reach.
            raise NotSent(f"Node {address} is unavailable: it cannot be reached")
        is_write = op in node.write_ops
        if target is not None:
            target = dataclasses.replace(target, deadline=self.clock() + timeout)
        wait = min(timeout, faults.timeout_seconds)
        if draws[0] < faults.drop_request:
            self.log.append(f"{call_id} {address} {op} request dropped")
            self._hop(call_id, "request", source, address, op, sent_at, None, "dropped")
            await asyncio.sleep(wait)
            raise _timed_out(address, op, timeout, target)
        if draws[1] < faults.delay:
            delay = draws[2] * faults.delay_seconds_max
            self.log.append(f"{call_id} {address} {op} delayed {delay:.6f}")
            if delay >= timeout:
                self._hop(call_id, "request", source, address, op, sent_at, None, "late")
                await asyncio.sleep(timeout)
                raise _timed_out(address, op, timeout, target)
            await asyncio.sleep(delay)
            if address in self._cut:  # Cut off while the request was on its way.
                self._hop(call_id, "request", source, address, op, sent_at, None, "cut")
                raise NotSent(f"Node {address} is unavailable: it cannot be reached")
            # It reaches whatever serves the address when it arrives: a node restarted while it
            # was on its way (a new process over the same store), never the one that died.
            node = self._nodes.get(address, node)
        request = orjson.dumps(payload)
        if node.drive is not None and op in node.driver_ops:
            self._hop(call_id, "request", source, address, op, sent_at, self.clock(), "delivered")
            responses = [
                await self._drive(node.drive, call_id, address, op, request, timeout, source)
            ]
        else:
            copies = 2 if is_write and draws[3] < faults.duplicate else 1
            if copies == 2:
                self.log.append(f"{call_id} {address} {op} duplicated")
            fate = "duplicated" if copies == 2 else "delivered"
            self._hop(call_id, "request", source, address, op, sent_at, self.clock(), fate)
            if node.serve is None:
                responses = [_serve(node, op, target, request, is_write) for _ in range(copies)]
            else:
                # Answered when its write commits, or never (its node killed meanwhile): the
                # caller then waits out its timeout, as over gRPC.
                try:
                    async with asyncio.timeout(timeout):
                        responses = [
                            await _serve_awaited(node, node.serve, op, target, request, is_write)
                            for _ in range(copies)
                        ]
                except TimeoutError:
                    self.log.append(f"{call_id} {address} {op} unanswered")
                    self._hop(call_id, "reply", address, source, op, self.clock(), None, "lost")
                    raise _timed_out(address, op, timeout, target) from None
        replied_at = self.clock()
        if draws[4] < faults.drop_reply:
            self.log.append(f"{call_id} {address} {op} reply dropped")
            self._hop(call_id, "reply", address, source, op, replied_at, None, "dropped")
            await asyncio.sleep(wait)
            raise _timed_out(address, op, timeout, target)
        self.log.append(f"{call_id} {address} {op} ok")
        reply_fate = responses[0].error_type or "ok"
        self._hop(call_id, "reply", address, source, op, replied_at, replied_at, reply_fate)
        return codec.reply_from_response(responses[0])

    async def _drive(
        self,
        drive: Drive,
        call_id: int,
        address: str,
        op: str,
        request: bytes,
        timeout: float,
        source: str,
    ) -> Any:
        """Run a multi-step operation as a task of the node and wait for it up to `timeout`:
        its response as the gRPC server would encode it."""
        task = asyncio.ensure_future(drive(op, codec.decode_body(request)))
        done, _ = await asyncio.wait({task}, timeout=timeout)
        if not done:
            self.log.append(f"{call_id} {address} {op} still running")
            # Its outcome is the node's log line, as when a gRPC caller has gone.
            task.add_done_callback(_outcome_unheard)
            raise _timed_out(address, op, timeout, None)
        if task.cancelled():
            self.log.append(f"{call_id} {address} {op} ended with its node")
            raise ServiceUnavailable(f"Node {address} stopped before it answered {op}")
        error = task.exception()
        if error is None:
            return codec.ok_response(0, task.result())
        if isinstance(error, DynamoError):
            return codec.error_response(0, error)
        return codec.error_response(0, InternalServerError(repr(error)))

    async def follow(
        self,
        address: str,
        table_id: str,
        partition_id: str,
        *,
        consumer: str,
        after_seq: int | None,
        records_max: int,
        idle_seconds_max: float,
        source: str = "",
    ) -> AsyncGenerator[FeedPage, None]:
        """One follow of a partition's feed on the node at `address` by the process `source`,
        its batches carried with the faults the seed decides (module docstring)."""
        call_id = next(self._ids)
        name = f"{call_id} {address} follow {partition_id}"
        faults = self.faults
        draws = [self.rng.random() for _ in range(5)]  # As for every call.
        opened_at = self.clock()

        def opened(fate: str, arrived_at: float | None) -> None:
            self._hop(
                call_id,
                "request",
                source,
                address,
                "follow",
                opened_at,
                arrived_at,
                fate,
                partition_id,
            )

        def batch(fate: str, sent_at: float, arrived_at: float | None, detail: str = "") -> None:
            self._hop(call_id, "batch", address, source, "batch", sent_at, arrived_at, fate, detail)

        node = self._nodes.get(address)
        if node is None or node.feed is None or address in self._cut:
            self.log.append(f"{name} unreachable")
            opened("unreachable", None)
            await asyncio.sleep(0)
            raise ServiceUnavailable(f"Node {address} is unavailable: it cannot be reached")
        wait = min(idle_seconds_max, faults.timeout_seconds)
        if draws[0] < faults.drop_request:
            self.log.append(f"{name} request dropped")
            opened("dropped", None)
            await asyncio.sleep(wait)
            raise _feed_broke(address, partition_id, "the request was lost")
        opened("delivered", opened_at)
        feed = node.feed
        batches = feed.follow(
            table_id,
            partition_id,
            consumer=consumer,
            after_seq=after_seq,
            records_max=records_max,
            encode=_encode_page,
        )
        try:
            while True:
                try:
                    # (Not asyncio.wait_for: on 3.11 it can swallow a cancel that arrives as the
                    # batch does, and a killed replicator's reader then never ends.)
                    async with asyncio.timeout(idle_seconds_max):
                        data = await anext(batches)
                except StopAsyncIteration:
                    # Only a stopping node (here: one restarted or replaced) ends a follow early.
                    self.log.append(f"{name} ended by the node")
                    raise ServiceUnavailable(
                        f"Node {address} ended the change feed of {partition_id} before its end "
                        "(it is stopping)"
                    ) from None
                except TimeoutError:
                    self.log.append(f"{name} silent")
                    raise _feed_broke(address, partition_id, "nothing arrived") from None
                except DynamoError as error:
                    self.log.append(f"{name} refused {error.type_name}")
                    batch(error.type_name, self.clock(), self.clock())
                    raise error_from_proto(error_to_proto(error)) from None
                drop, delay, duration, duplicate = (self.rng.random() for _ in range(4))
                faults = self.faults  # Faults change while a follow lasts.
                sent_at = self.clock()
                if address in self._cut or self._nodes.get(address) is not node:
                    self.log.append(f"{name} cut")
                    batch("cut", sent_at, None)
                    raise _feed_broke(address, partition_id, "the node cannot be reached")
                if drop < faults.drop_reply:
                    self.log.append(f"{name} broke")
                    batch("dropped", sent_at, None)
                    await asyncio.sleep(min(idle_seconds_max, faults.timeout_seconds))
                    raise _feed_broke(address, partition_id, "a batch was lost")
                if delay < faults.delay:
                    late = duration * faults.delay_seconds_max
                    self.log.append(f"{name} delayed {late:.6f}")
                    if late >= idle_seconds_max:
                        batch("late", sent_at, None)
                        await asyncio.sleep(idle_seconds_max)
                        raise _feed_broke(address, partition_id, "nothing arrived")
                    await asyncio.sleep(late)
                page = _decode_page(data)
                copies = 2 if page.records and duplicate < faults.duplicate else 1
                self.log.append(f"{name} batch {len(page.records)}" + " twice" * (copies - 1))
                if page.records or page.end_of_log:  # An empty batch only says the node is there.
                    detail = f"{len(page.records)} records" + " and END" * page.end_of_log
                    fate = "duplicated" if copies == 2 else "delivered"
                    batch(fate, sent_at, self.clock(), detail)
                for _ in range(copies):
                    yield page
                if page.end_of_log:
                    return
        finally:
            await batches.aclose()


def _encode_page(page: FeedPage) -> bytes:
    """A batch as it crosses the in-process network: JSON, so nothing mutable is shared."""
    return orjson.dumps(
        {
            "records": [change.to_record() for change in page.records],
            "end_of_log": page.end_of_log,
            "first_seq": page.first_seq,
            "last_seq": page.last_seq,
        }
    )


def _decode_page(data: bytes) -> FeedPage:
    body = orjson.loads(data)
    return FeedPage(
        tuple(Change.from_record(record) for record in body["records"]),
        body["end_of_log"],
        body["first_seq"],
        body["last_seq"],
    )


def _feed_broke(address: str, partition_id: str, reason: str) -> ServiceUnavailable:
    return ServiceUnavailable(
        f"The change feed of {partition_id} on node {address} broke: {reason}"
    )


def _serve(node: _Node, op: str, target: Target | None, request: bytes, is_write: bool) -> Any:
    """Run one request on the node; its response as the gRPC server would encode it."""
    try:
        node.endpoint.check_target(op, target)
        body = codec.decode_body(request)
        if is_write:
            [result] = node.endpoint.apply_writes([(op, target, body)])
            if isinstance(result, DynamoError):
                raise result
        else:
            result = node.endpoint.read(op, target, body)
        return codec.ok_response(0, result)
    except DynamoError as error:
        return codec.error_response(0, error)
    except Exception as error:
        return codec.error_response(0, InternalServerError(repr(error)))


async def _serve_awaited(
    node: _Node, serve: Serve, op: str, target: Target | None, request: bytes, is_write: bool
) -> Any:
    """`_serve` through a node's awaited `serve`."""
    try:
        node.endpoint.check_target(op, target)
        result = await serve(op, target, codec.decode_body(request), is_write)
        return codec.ok_response(0, result)
    except DynamoError as error:
        return codec.error_response(0, error)
    except Exception as error:
        return codec.error_response(0, InternalServerError(repr(error)))


def _outcome_unheard(task: asyncio.Future[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.info("a driver operation nobody waited for failed: %r", task.exception())


def _timed_out(address: str, op: str, timeout: float, target: Target | None) -> DynamoError:
    reason = f"Node {address} did not answer {op} within {timeout:.3g} s"
    # A control-plane call is idempotent and retried as unavailable, as NodeClient.control does.
    return ServiceUnavailable(reason) if target is None else unanswered(op, reason)


class LocalTransport:
    """The transport to one in-process node (`rpc.transport.NodeTransport`)."""

    def __init__(self, network: LocalNetwork, address: str, source: str = "") -> None:
        self.network = network
        self.address = address
        self.source = source  # The process this transport belongs to, for the trace.
        self._closed = False
        self._feed: LocalFeed | None = None

    async def call(
        self, op: str, target: Target, payload: dict[str, Any], timeout: float
    ) -> dict[str, Any]:
        return await self._send(op, target, payload, timeout)

    async def control(self, op: str, payload: dict[str, Any], timeout: float) -> dict[str, Any]:
        return await self._send(op, None, payload, timeout)

    def feed(self) -> LocalFeed:
        if self._closed:
            raise ServiceUnavailable(f"The client of node {self.address} is closed")
        if self._feed is None:
            self._feed = LocalFeed(self.network, self.address, self.source)
        return self._feed

    async def close(self) -> None:
        self._closed = True
        if self._feed is not None:
            await self._feed.close()

    async def _send(
        self, op: str, target: Target | None, payload: dict[str, Any], timeout: float
    ) -> dict[str, Any]:
        if self._closed:
            raise ServiceUnavailable(f"The client of node {self.address} is closed")
        return await self.network.deliver(self.address, op, target, payload, timeout, self.source)


class LocalFeed:
    """The change feed of one in-process node (`rpc.transport.FeedTransport`), the twin of
    `rpc.changefeed.ChangeFeedClient`."""

    def __init__(self, network: LocalNetwork, address: str, source: str = "") -> None:
        self.network = network
        self.address = address
        self.source = source
        self._closed = False

    async def register(
        self, table_id: str, partition_id: str, consumer: str, seq: int | None, timeout: float
    ) -> ConsumerPosition:
        body = ops.RegisterConsumerPayload(consumer, seq).to_json()
        return await self._write(ops.REGISTER_CONSUMER, table_id, partition_id, body, timeout)

    async def checkpoint(
        self, table_id: str, partition_id: str, consumer: str, seq: int, timeout: float
    ) -> ConsumerPosition:
        body = ops.CheckpointPayload(consumer, seq).to_json()
        return await self._write(ops.CHECKPOINT, table_id, partition_id, body, timeout)

    async def unregister(
        self, table_id: str, partition_id: str, consumer: str, timeout: float
    ) -> ConsumerPosition:
        body = ops.UnregisterConsumerPayload(consumer).to_json()
        return await self._write(ops.UNREGISTER_CONSUMER, table_id, partition_id, body, timeout)

    async def follow_batches(
        self,
        table_id: str,
        partition_id: str,
        *,
        consumer: str = "",
        after_seq: int | None = None,
        max_records_per_batch: int = 0,
        idle_seconds_max: float = limits.CHANGE_FEED_IDLE_SECONDS_MAX,
    ) -> AsyncGenerator[list[Change], None]:
        self._check_open()
        pages = self.network.follow(
            self.address,
            table_id,
            partition_id,
            consumer=consumer,
            after_seq=after_seq,
            records_max=max_records_per_batch,
            idle_seconds_max=idle_seconds_max,
            source=self.source,
        )
        try:
            async for page in pages:
                if page.records:
                    yield list(page.records)
        finally:
            await pages.aclose()

    async def read(
        self,
        table_id: str,
        partition_id: str,
        after_seq: int,
        *,
        max_records: int,
        timeout: float,
    ) -> FeedPage:
        self._check_open()
        pages = self.network.follow(
            self.address,
            table_id,
            partition_id,
            consumer="",
            after_seq=after_seq,
            records_max=max_records,
            idle_seconds_max=timeout,
            source=self.source,
        )
        try:
            return await anext(pages)
        finally:
            await pages.aclose()

    async def close(self) -> None:
        self._closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise ServiceUnavailable(f"The client of node {self.address} is closed")

    async def _write(
        self, op: str, table_id: str, partition_id: str, body: dict[str, Any], timeout: float
    ) -> ConsumerPosition:
        """A consumer write, as the node's servicer submits it: a target with no epoch."""
        self._check_open()
        reply = await self.network.deliver(
            self.address, op, Target(table_id, partition_id), body, timeout, self.source
        )
        return ConsumerPosition(
            reply.get("seq", 0),
            reply["first_seq"],
            reply["last_seq"],
            reply.get("unregistered", False),
        )
