"""`NodeClient`: how a router (or any service) calls one storage node.

Data-plane calls share ONE long-lived `Exchange` stream per client. While a RequestBatch is being
written, new calls wait in an outbox and all go out together in the next batch; responses come back
in ResponseBatches and are matched to their calls by id. This amortises gRPC's per-message cost over
every request in flight, which one unary RPC per request cannot (see proto/rpc/node.proto).

Every call has a deadline and never hangs. The deadline travels in the request's envelope as Unix
time, and the node refuses to start a request past it, so a request the node reads late (it was
paused, or its stream stalled) is never applied after its caller gave up. The caller waits a
grace period (RPC_DEADLINE_GRACE_SECONDS) past the deadline for the answer; then:

- a call that was never sent (its node unreachable, its stream broken first) raises
  `core.errors.ServiceUnavailable`: nothing was applied;
- a read that was sent and not answered raises ServiceUnavailable too;
- a write (PUT, UPDATE, DELETE) that was sent and not answered, by its deadline or because its
  stream broke, raises `core.errors.OutcomeUnknown`: the node may have committed it just before
  it died or the reply was lost. This is the only case in which the outcome of a write is unknown.

A broken stream fails all of its calls at once; the next call opens a new one, no sooner than a
backoff that doubles with each consecutive failure up to RPC_RECONNECT_BACKOFF_SECONDS_MAX (a
quarter of a second), and a call that finds the backoff running waits for that attempt. So a
request to a dead node fails as not sent within a quarter of a second, and one that arrives just
after the node came back waits for the attempt that reaches it instead of failing.
Errors the node reports come back as the same `core.errors` instances, through `rpc.codec`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import time
from typing import TYPE_CHECKING, Any

import grpc

from core import limits
from core.errors import ServiceUnavailable
from rpc import codec, node_pb2, node_pb2_grpc, ops
from rpc.ratelog import RateLimitedLog
from rpc.transport import NotSent, unanswered

if TYPE_CHECKING:
    from rpc.changefeed import ChangeFeedClient

logger = logging.getLogger(__name__)
# A node that is down or restarting fails every stream opened to it: one line per node now and
# then says so (`rpc.ratelog`); anything other than a gRPC error is logged with its traceback.
unreachable_log = RateLimitedLog(logger)

CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", limits.RPC_MESSAGE_BYTES_MAX),
    ("grpc.max_send_message_length", limits.RPC_MESSAGE_BYTES_MAX),
    ("grpc.keepalive_time_ms", int(limits.RPC_KEEPALIVE_SECONDS * 1000)),
    ("grpc.keepalive_timeout_ms", int(limits.RPC_KEEPALIVE_TIMEOUT_SECONDS * 1000)),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
    # gRPC's own reconnect backoff starts at 1 s; keep it within ours so a restarted node is
    # reachable again (for control calls too) as soon as our backoff allows.
    ("grpc.initial_reconnect_backoff_ms", int(limits.RPC_RECONNECT_BACKOFF_SECONDS_MIN * 1000)),
    ("grpc.min_reconnect_backoff_ms", int(limits.RPC_RECONNECT_BACKOFF_SECONDS_MIN * 1000)),
    ("grpc.max_reconnect_backoff_ms", int(limits.RPC_RECONNECT_BACKOFF_SECONDS_MAX * 1000)),
    # Channels share connections process-wide by default, so a "fresh" channel would inherit the
    # old one's failed connection and its backoff; a local pool makes a new channel really new.
    ("grpc.use_local_subchannel_pool", 1),
]


class NodeClient:
    """Calls one storage node: `call` over the shared stream, `control` as unary calls, and its
    change feed (`feed`: the ChangeFeed service, on a channel of its own)."""

    def __init__(self, address: str) -> None:
        self.address = address
        self._ids = itertools.count(1)
        self._channel: grpc.aio.Channel | None = None
        self._stub: node_pb2_grpc.StorageNodeAsyncStub | None = None
        self._stream: _Stream | None = None
        self._failures = 0  # Consecutive broken streams; reset once a stream answers.
        self._reconnect_at = 0.0  # Loop time before which no new stream is opened.
        self._closed = False
        self._closing_channels: set[asyncio.Task[None]] = set()
        self._feed: ChangeFeedClient | None = None

    async def call(
        self, op: str, target: ops.Target, payload: dict[str, Any], timeout: float
    ) -> dict[str, Any]:
        """Send one data-plane request to `target` on the shared stream; return its reply body."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        stream = await self._open_stream(op, deadline)
        request_id = next(self._ids)
        # The node's clock is another process's: the deadline crosses as Unix time.
        target = dataclasses.replace(target, deadline=time.time() + (deadline - loop.time()))
        future = stream.send(codec.request(request_id, op, target, payload), loop)
        expiry = loop.call_at(
            deadline + limits.RPC_DEADLINE_GRACE_SECONDS,
            _expire,
            future,
            self.address,
            op,
            timeout,
        )
        try:
            response = await future
        except _Unanswered as error:
            raise unanswered(op, error.message) from None
        finally:
            expiry.cancel()
            stream.pending.pop(request_id, None)
        return codec.reply_from_response(response)

    async def control(self, op: str, payload: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Send one control-plane request as a unary Call; return its reply body."""
        if self._closed:
            raise ServiceUnavailable(f"The client of node {self.address} is closed")
        request = codec.request(next(self._ids), op, None, payload)
        try:
            response = await self._ensure_stub().Call(request, timeout=timeout)
        except grpc.aio.AioRpcError as error:
            if error.code() == grpc.StatusCode.UNAVAILABLE:
                self._drop_idle_channel()
            raise ServiceUnavailable(
                f"Node {self.address} failed {op}: {error.code().name} {error.details()}"
            ) from None
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # The caller itself was cancelled.
            # gRPC cancels the calls of a channel that is closed (a broken stream or a failed call
            # drops its channel): the node is unreachable, not the caller cancelled.
            raise ServiceUnavailable(
                f"Node {self.address} failed {op}: its channel closed under the call"
            ) from None
        return codec.reply_from_response(response)

    def _drop_idle_channel(self) -> None:
        """Close the channel of a node that could not be reached, unless a live stream uses it.

        A channel whose connection attempts keep failing (a node down, asked on a timer by the
        dashboard's sampler) waits out gRPC's reconnect backoff, and the first call after the node
        is back would fail on it; a fresh channel connects at once.
        """
        if self._stream is not None and not self._stream.broken:
            return
        if self._channel is not None:
            task = asyncio.get_running_loop().create_task(self._channel.close())
            self._closing_channels.add(task)
            task.add_done_callback(self._closing_channels.discard)
            self._channel, self._stub = None, None

    def feed(self) -> ChangeFeedClient:
        """The node's change feed. Its own channel, as before the feed was on this seam: a
        follow's long stream and its flow control stay apart from the shared Exchange stream."""
        if self._closed:
            raise ServiceUnavailable(f"The client of node {self.address} is closed")
        if self._feed is None:
            # Imported here: rpc.changefeed opens its channel with this module's options.
            from rpc.changefeed import ChangeFeedClient

            self._feed = ChangeFeedClient(self.address)
        return self._feed

    async def close(self) -> None:
        """Fail every call in flight and close the connections (the feed's too)."""
        self._closed = True
        feed, self._feed = self._feed, None
        if feed is not None:
            await feed.close()
        if self._stream is not None:
            self._stream.fail(f"The client of node {self.address} closed")
        channel, self._channel, self._stub = self._channel, None, None
        if channel is not None:
            await channel.close()
        if self._closing_channels:
            await asyncio.wait(self._closing_channels, timeout=limits.RPC_KEEPALIVE_TIMEOUT_SECONDS)

    def _ensure_stub(self) -> node_pb2_grpc.StorageNodeAsyncStub:
        if self._stub is None:
            self._channel = grpc.aio.insecure_channel(self.address, options=CHANNEL_OPTIONS)
            self._stub = node_pb2_grpc.StorageNodeStub(self._channel)
        return self._stub

    async def _open_stream(self, op: str, deadline: float) -> _Stream:
        """The live stream, or a new one once the reconnect backoff has passed."""
        while True:
            if self._closed:
                raise ServiceUnavailable(f"The client of node {self.address} is closed")
            if self._stream is not None and not self._stream.broken:
                return self._stream
            loop = asyncio.get_running_loop()
            wait = self._reconnect_at - loop.time()
            if wait <= 0:
                self._stream = _Stream(self._ensure_stub(), self)
                return self._stream
            if self._reconnect_at > deadline:
                raise NotSent(
                    f"Node {self.address} is unreachable (next attempt in {wait:.2f} s); {op} "
                    "not sent"
                )
            await asyncio.sleep(wait)

    def stream_answered(self) -> None:
        self._failures = 0

    def stream_broke(self, stream: _Stream) -> None:
        """Schedule the reconnect backoff and drop the broken stream's channel."""
        self._failures += 1
        backoff = min(
            limits.RPC_RECONNECT_BACKOFF_SECONDS_MIN * 2 ** (self._failures - 1),
            limits.RPC_RECONNECT_BACKOFF_SECONDS_MAX,
        )
        loop = asyncio.get_running_loop()
        self._reconnect_at = loop.time() + backoff
        if self._stream is stream and self._channel is not None:
            # A fresh channel on reconnect, rather than gRPC's own reconnect of this one, makes the
            # backoff above the only one in play.
            task = loop.create_task(self._channel.close())
            self._closing_channels.add(task)
            task.add_done_callback(self._closing_channels.discard)
            self._channel, self._stub = None, None


class _Unanswered(ServiceUnavailable):
    """A request that went out (or may have) and got no answer; `call` tells reads from writes."""

    message: str  # Always said: `unanswered` builds the caller's error from it.

    def __init__(self, message: str) -> None:
        super().__init__(message)


def _expire(future: asyncio.Future[Any], address: str, op: str, timeout: float) -> None:
    if not future.done():
        future.set_exception(
            _Unanswered(f"Node {address} did not answer {op} within {timeout:.3g} s")
        )


class _Stream:
    """One Exchange stream: an outbox of requests, a sender, a receiver and the calls in flight."""

    def __init__(self, stub: node_pb2_grpc.StorageNodeAsyncStub, client: NodeClient) -> None:
        self.client = client
        self.call = stub.Exchange()
        self.pending: dict[int, asyncio.Future[node_pb2.Response]] = {}
        self.outbox: list[node_pb2.Request] = []
        self.outbox_ready = asyncio.Event()
        self.broken = False
        self.answered = False
        self.sender = asyncio.create_task(self._send())
        self.receiver = asyncio.create_task(self._receive())

    def send(
        self, request: node_pb2.Request, loop: asyncio.AbstractEventLoop
    ) -> asyncio.Future[node_pb2.Response]:
        future: asyncio.Future[node_pb2.Response] = loop.create_future()
        self.pending[request.id] = future
        self.outbox.append(request)
        self.outbox_ready.set()
        return future

    async def _send(self) -> None:
        try:
            # Nothing leaves the outbox before the stream is connected, so a node that cannot be
            # reached fails every call as not sent, and any later failure as possibly delivered.
            async with asyncio.timeout(limits.RPC_SEND_SECONDS_MAX):
                await self.call.wait_for_connection()
            while True:
                # Idle until a call queues a request; each call bounds its own wait.
                await self.outbox_ready.wait()
                self.outbox_ready.clear()
                while self.outbox:
                    batch = node_pb2.RequestBatch(requests=self._take_batch())
                    # A timeout scope rather than wait_for, which (before Python 3.12) runs the
                    # write in a task of its own: one per batch sent.
                    async with asyncio.timeout(limits.RPC_SEND_SECONDS_MAX):
                        await self.call.write(batch)
        except asyncio.CancelledError:
            raise
        except TimeoutError:
            self.fail(f"Node {self.client.address} stopped reading its stream")
        except grpc.aio.AioRpcError as error:
            # Expected while a node is down or restarting: one line, no traceback, and at most
            # one per LOG_REPEAT_SECONDS_MIN for each node (`rpc.ratelog`).
            address = self.client.address
            reason = _describe(error)
            unreachable_log.warning(
                address, f"stream to node {address} broke while sending: {reason}"
            )
            self.fail(f"Stream to node {address} broke: {reason}")
        except Exception as error:
            address = self.client.address
            logger.warning("stream to node %s broke while sending", address, exc_info=True)
            self.fail(f"Stream to node {address} broke: {_describe(error)}")

    def _take_batch(self) -> list[node_pb2.Request]:
        """The outbox's oldest requests, up to about RPC_BATCH_BYTES_TARGET."""
        size = 0
        for count, request in enumerate(self.outbox, 1):
            size += len(request.body)
            if size >= limits.RPC_BATCH_BYTES_TARGET:
                batch, self.outbox = self.outbox[:count], self.outbox[count:]
                return batch
        batch, self.outbox = self.outbox, []
        return batch

    async def _receive(self) -> None:
        try:
            while True:
                batch = await self.call.read()
                if batch is grpc.aio.EOF:
                    break
                # read() is typed `object | ResponseBatch`: the check names what EOF left.
                assert isinstance(batch, node_pb2.ResponseBatch)
                if not self.answered:
                    self.answered = True
                    self.client.stream_answered()
                for response in batch.responses:
                    future = self.pending.pop(response.id, None)
                    if future is not None and not future.done():
                        future.set_result(response)
            reason = "ended the stream"
        except asyncio.CancelledError:
            raise
        except Exception as error:
            reason = _describe(error)
        self.fail(f"Node {self.client.address} is unavailable: {reason}")

    def fail(self, reason: str) -> None:
        """Break the stream: fail each call in flight as unavailable for `reason`; end its tasks."""
        if self.broken:
            return
        self.broken = True
        pending, self.pending = self.pending, {}
        # What is still in the outbox never left this process; everything else may have arrived.
        unsent = {request.id for request in self.outbox}
        for request_id, future in pending.items():
            if not future.done():
                kind = NotSent if request_id in unsent else _Unanswered
                future.set_exception(kind(reason))
        self.call.cancel()
        current = asyncio.current_task()
        for task in (self.sender, self.receiver):
            if task is not current:
                task.cancel()
        self.client.stream_broke(self)


def _describe(error: Exception) -> str:
    """One line for a client to read: gRPC's status and details, never its multi-line debug text."""
    if isinstance(error, grpc.aio.AioRpcError):
        return f"{error.code().name} {error.details()}"
    return repr(error)
